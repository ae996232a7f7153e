"""Stage 2, rewrite: the QDQ graph (importer.py; read by qdq.py) into integer arithmetic (arithmetic.py).

Every ``quantize`` is the root of a group; the group is matched on the graph as imported and
replaced by one integer op when onnxruntime computes it as one (its QDQ fusions):

* ``Q(act(conv2d(DQ(x), DQ(W)) + DQ(bias)))`` -> ``conv2d``; ``Q(act(matmul(DQ(x), DQ(W)) + DQ(bias)))``
  -> ``dense``; ``act``: none, Relu or Clip, a clamp in the output domain (exact: quantize is monotone);
  constant zero-point terms folded into the int32 bias here, at compile time; a Flatten/Reshape
  between the input's DQ and the matmul (a classifier: ``matmul(reshape(DQ(x)), ...)``) becomes the
  reshape of the integers before the dense. onnxruntime has no QGemm for that form and runs it in
  float32: the two agree but where its float sum lands within rounding of a half step
  (docs/operators.md); a matmul of a [..., M, K] activation (a transformer's projections) is the
  dense of its flattened rows (a reshape, no copy), as onnxruntime's QLinearMatMul computes it;
* ``Q(matmul(DQ(a), DQ(b)))`` of two activations (Q.K^T, attention.V) -> ``batch_matmul``
  (ops/batch_matmul.py), an operand that is a transpose of the integers read through it; without the
  ``Q``, a uint8 ``a``: ``batch_matmul`` to float32 (MatMulIntegerToFloat: activation_matmul.py), and
  ``matmul(DQ(x), DQ(W))`` of a constant W so too, a ``dense`` to float32, unless onnxruntime first fuses
  it with an Add into a Gemm (MatMulAddFusion): a float one (float_ops._gemm), or with a DQ(int32) bias
  QGemm to float32, the dense with that bias;
* ConvInteger / MatMulInteger (``conv2d`` / ``matmul`` in int32 of zero-point-subtracted 8-bit
  tensors, constant weights; any rank of input for MatMulInteger) -> ``conv2d`` / ``dense`` with an
  int32 output; an input zero point
  computed at run time (dynamic quantization) is subtracted after the op (``integer_accumulate``);
* ``Q(DQ(a) + DQ(b))`` -> ``add``; ``Q(DQ(a) * DQ(b))`` -> ``mul``; ``Q(GlobalAveragePool(DQ(x)))`` -> ``global_avg_pool``;
  ``Q(avg_pool2d(DQ(x)))`` -> ``avg_pool2d`` (a window the size of the input, unpadded: ``global_avg_pool``,
  as onnxruntime falls back to);
* ``Q(f(DQ(x)))`` for an elementwise float function ``f`` of one 8-bit tensor (Sigmoid, HardSwish,
  LeakyRelu, a requantization ``Q(DQ(x))``, ...: float ops whose other operands are scalar constants)
  -> ``lookup`` in a 256-entry table, computed at compile time by running the same float ops between
  the same QuantizeLinear and DequantizeLinear on every 8-bit value (onnxruntime's QLinearSigmoid and
  QLinearLeakyRelu are such tables too), so the table is exactly what the float path computes;
* ``Q(f(DQ(x)))`` for data movement ``f`` (max pool, reshape, flatten, transpose, nearest resize) and
  ``Q(concat(DQ(x1), DQ(x2), ...))`` -> ``f`` or concat on the integers, each input first brought to
  the output's parameters by a lookup where its own differ; ``Q(DQ(x))`` with equal parameters -> ``x``;
  a max pool of 8-bit integers themselves (QOperator's MaxPool) -> ``max_pool2d`` too;
* any other ``quantize`` / activation ``dequantize`` -> onnxruntime's QuantizeLinear /
  DequantizeLinear; the float ops between them stay float, as in onnxruntime.

Low-bit tensors (lowbit.py: every form is QCDQ) are ``clip(Q(...), lo, hi)``: the clip is the
group's root, its bounds narrow the op's output clamp and are the tensor's range (``QParams.range``)
wherever it is dequantized; conv2d and dense record the range of their input and weights
(``x_range``, ``w_range``: what precision.py reads) and the ONNX node they came from (``layer``).

Each integer op is a ``call_tir`` of its TE computation whose PrimFunc carries ``qnn.op`` and the op's
scalar parameters as attributes; its tensor parameters (weights, bias, scales) are constant
arguments. legalize.py and bind.py read both.
"""
from __future__ import annotations

import logging
from functools import partial

import numpy as np
from tvm import relax
from tvm.ir import Constant, Op

from tvm_integration.ops.output_stage import QUANT_RANGES
from tvm_integration.qnn.float.reduce_mean import is_global_average_pool
from tvm_integration.qnn.onnx import activation_matmul, batch_norm, channels, float_convs, ort_fusion
from tvm_integration.qnn.onnx.qdq import QDQReader, QParams, max_pool_params
from tvm_integration.qnn.semantics import arithmetic, qlinear_softmax
from tvm_integration.qnn.semantics.errors import ModelError
from tvm_integration.qnn.semantics.integer_op import IntegerOp
from tvm_integration.qnn.semantics.quant import constant, evaluate

log = logging.getLogger(__name__)
MOVEMENT = {"relax.nn.max_pool2d", "relax.reshape", "relax.permute_dims", "relax.flatten", "relax.image.resize2d",
            "relax.strided_slice"}
# float ops a lookup table may stand for: elementwise, the same on every element
ELEMENTWISE = {f"relax.{name}" for name in (
    "sigmoid", "tanh", "exp", "log", "erf", "sqrt", "rsqrt", "abs", "negative", "sign", "floor", "ceil", "round",
    "square", "sin", "cos", "clip", "add", "subtract", "multiply", "divide", "power", "minimum", "maximum",
    "nn.relu", "nn.leakyrelu", "nn.gelu", "nn.gelu_tanh", "nn.silu", "nn.softplus")}


@relax.expr_functor.mutator
class QDQToInteger(QDQReader):
    """Each group onnxruntime fuses (the module docstring's list) replaced by its integer op, matched
    on the graph as imported (qdq.py)."""

    def __init__(self, mod, float_layers: dict[str, str] | None = None, int8_allowed: bool = False,
                 qgemms: set[str] = frozenset(), table_ops: dict | None = None):
        super().__init__(mod)
        self.table_ops = table_ops or {}        # LegalizeOps rules of the float ops in a table: the target's
        self.float_layers, self.float_cores = float_layers or {}, set()    # ort_fusion.py: nodes kept float, their calls
        self.int8_allowed = int8_allowed        # onnxruntime's AArch64 build: it fuses int8 activations as they are
        self.qgemms, self.qgemm_cores = qgemms, set()    # ort_fusion.qgemms_to_float: kernels of int8 pairs, their matmuls

    def run(self):
        self.float_cores = ort_fusion.float_calls(self.mod, self.float_layers)
        self.qgemm_cores = ort_fusion.float_calls(self.mod, self.qgemms)
        return super().run()

    def visit_call_(self, call):
        if call in self.float_cores and call.op.name == "relax.nn.conv2d" and not float_convs.fused_later(self, call) \
                and (new := float_convs.conv(self, call)) is not None:
            return new
        if isinstance(call.op, Op) and call.op.name == "relax.add" and (new := float_convs.fused(self, call)) is not None:
            return new
        if isinstance(call.op, Op) and call.op.name == "relax.clip" and (clipped := self.clipped(call)) is not None \
                and (q := self.call(clipped[0], "relax.quantize")) is not None and (out := self.qparams(q)) is not None \
                and out.per_tensor_8bit:
            return self.clipped_root(q, out.narrowed(*clipped[1]))
        # a quantize per axis (or per block: importer.py), to 16 bits, or an activation's dequantize per
        # axis: no op onnxruntime fuses; TVM's own op computes it as QuantizeLinear / DequantizeLinear do
        if isinstance(call.op, Op) and call.op.name == "relax.quantize" and (out := self.qparams(call)) is not None \
                and out.per_tensor_8bit:
            for rule in (self.conv_or_dense, partial(activation_matmul.quantized, self), self.add, self.mul,
                         self.global_avg_pool, self.avg_pool, self.movement,
                         partial(channels.concat, self), partial(channels.split_item, self),
                         partial(batch_norm.rewritten, self), self.requantize_free, self.lookup, self.softmax):
                new = rule(call.args[0], out)
                if new is not None:
                    return new
            scale, zero_point = out.scalar("an activation")
            return self.integer("quantize", [call.args[0]], scale=float(scale), zero_point=zero_point,
                                out_dtype=out.dtype)
        if isinstance(call.op, Op) and call.op.name == "relax.nn.max_pool2d" and str(call.ty.dtype) in ("uint8", "int8") \
                and (pool := max_pool_params(call)) is not None:       # QOperator's MaxPool (NhwcMaxPool)
            return self.integer("max_pool2d", [call.args[0]], **pool)
        if isinstance(call.op, Op) and call.op.name in ("relax.nn.conv2d", "relax.matmul") \
                and str(call.ty.dtype) == "int32" and (new := self.integer_accumulate(call)) is not None:
            return new
        if isinstance(call.op, Op) and call.op.name == "relax.matmul" and call not in self.float_cores \
                and (new := activation_matmul.to_float(self, call)) is not None:
            return new
        if isinstance(call.op, Op) and call.op.name == "relax.add" and call not in self.float_cores \
                and (new := activation_matmul.gemm_to_float(self, call)) is not None:
            return new
        if isinstance(call.op, Op) and call.op.name == "relax.dequantize" \
                and self.dequantized_constant(call) is None and (params := self.qparams(call)) is not None \
                and params.scale.size == 1 and params.zero_point.size == 1:
            # an activation's; a weight's (a constant, or a QCDQ clip of one) stays for its conv/dense
            scale, zero_point = params.scalar("an activation")
            return self.integer("dequantize", [call.args[0]], scale=float(scale), zero_point=zero_point)
        return super().visit_call_(call)

    def clipped_root(self, q, out: QParams):
        """``clip(Q(x), lo, hi)``: a group whose output range is narrowed; conv2d, dense and add clamp
        to it themselves, a movement keeps its input's range; other ops are clipped after."""
        for rule in (self.conv_or_dense, self.add, self.movement):
            new = rule(q.args[0], out)
            if new is not None:
                return new
        new = None
        for rule in (self.mul, self.global_avg_pool, self.requantize_free, self.lookup):
            if (new := rule(q.args[0], out)) is not None:
                break
        if new is None:
            scale, zero_point = out.scalar("an activation")
            new = self.integer("quantize", [q.args[0]], scale=float(scale), zero_point=zero_point, out_dtype=out.dtype)
        lo, hi = out.bounds
        return self.builder_.normalize(relax.op.clip(new, relax.prim_value(lo), relax.prim_value(hi)))

    def activation(self, expr, out: QParams):
        """(the expression under a Relu/Clip, the output's integer range that it leaves: a clamp in
        the output domain, exact because quantize is monotone)."""
        scale, zero_point = out.scalar("an activation")
        lo, hi = out.bounds
        if (relu := self.call(expr, "relax.nn.relu")) is not None:
            return relu.args[0], (max(lo, zero_point), hi)
        if (clip := self.call(expr, "relax.clip")) is not None:
            bounds = [int(np.rint(np.float32(float(b.value)) / scale)) + zero_point for b in clip.args[1:3]]
            return clip.args[0], (max(lo, bounds[0]), min(hi, bounds[1]))
        return expr, (lo, hi)

    def conv_or_dense(self, expr, out: QParams):
        inner, clamp = self.activation(expr, out)
        named = [inner]
        bias = None
        if (add := self.call(inner, "relax.add")) is not None:
            named.append(add.args[0])
            core = self.call(add.args[0], "relax.nn.conv2d", "relax.matmul")
            bias_expr = self.call(add.args[1], "relax.reshape")
            bias_expr = bias_expr.args[0] if bias_expr is not None else add.args[1]
            bias = self.dequantized_constant(bias_expr)
            if bias is None and (floats := constant(self.value(bias_expr))) is not None \
                    and np.issubdtype(floats.dtype, np.floating):
                bias = (floats, None)            # a float bias (QONNX, Brevitas without bias quantization)
            if core is None or bias is None:
                return None
            bias = bias[0]
            inner = core
        core = self.call(inner, "relax.nn.conv2d", "relax.matmul")
        if core is None or core in self.float_cores:
            return None
        return self.linear(core, bias, out, clamp, self.layer_name(*named))

    def linear(self, core, bias, out: QParams, clamp, layer: str, reshaped: bool = True):
        """The integer conv2d or dense of ``core`` = conv2d / matmul(DQ(x), DQ(W)), W constant (or its
        transpose), with ``bias`` and the output ``out`` (conv_or_dense; activation_matmul: float32), else
        None. ``reshaped``: a Flatten/Reshape between DQ(x) and the matmul taken too."""
        data, weight = self.dequantized(core.args[0]), core.args[1]
        shaped = None            # matmul(reshape(DQ(x))): a classifier's Flatten/Reshape before its Gemm/MatMul
        if data is None and core.op.name == "relax.matmul" and reshaped and \
                (shaped := self.call(core.args[0], "relax.reshape", "relax.flatten")) is not None:
            data = self.dequantized(shaped.args[0])
        transposed = self.call(weight, "relax.permute_dims")
        weight = self.dequantized_constant(transposed.args[0] if transposed is not None else weight)
        if data is None or weight is None:
            return None
        (x, xq), (w, wq) = data, weight
        rows = None              # matmul of a [..., M, K] activation: the dense of its B*M rows
        if core.op.name == "relax.matmul":
            rank = len((x if shaped is None else shaped).ty.shape)
            if rank < 2 or w.ndim != 2 or rank > 2 and (shaped is not None or bias is not None and bias.size != 1
                                                          and bias.shape[-1] != bias.size):
                return None
            w = w.T if transposed is None else w         # matmul(x, W[K, N]) -> dense weight [N, K]
            if rank > 2:         # onnxruntime's QLinearMatMul: the same per-row arithmetic (a view, no copy)
                rows = [int(d) for d in x.ty.shape]
                x = self.builder_.emit(relax.op.reshape(self.visit_expr(x), [-1, rows[-1]]))
        if shaped is not None:   # the reshape moves to the integers (exact), before the integer dense
            x = self.builder_.emit(relax.Call(shaped.op, [self.visit_expr(x), *shaped.args[1:]], shaped.attrs))
        result = self.integer_linear(core, x, xq, w, wq, bias, out, clamp, layer)
        return result if rows is None else relax.op.reshape(self.builder_.emit(result), [*rows[:-1], w.shape[0]])

    @staticmethod
    def integer_bias(bias: np.ndarray, scale: np.ndarray, layer: str) -> np.ndarray:
        """A float bias in the accumulator's scale ``x_scale * w_scale``: exact when it is a whole number
        of steps (QONNX exports of quantized biases), else rounded to the nearest step (the layer can then
        differ from a float reference by one output step where the sum falls within half an accumulator
        step of a rounding tie). Rounded as onnxruntime's WeightBiasQuantization folds it (NNCF's q and k
        projections): ``Round(bias / scale)`` in float32, ties to even (a float64 quotient rounds apart
        where the float32 one is a tie)."""
        steps = np.round(bias.astype(np.float32) / scale.astype(np.float32))
        if not np.array_equal((steps * scale.astype(np.float64)).astype(np.float32), bias.astype(np.float32)):
            log.warning("layer %s: float bias is not a whole number of accumulator steps: rounded", layer or "?")
        return steps.astype(np.int32)

    def integer_linear(self, core, x, xq: QParams, w: np.ndarray, wq: QParams, bias, out: QParams, clamp,
                       layer: str = ""):
        x_scale, x_zp = xq.scalar("a conv/matmul input")
        out_scale, out_zp = out.scalar("a conv/matmul output")
        if bias is not None and np.issubdtype(bias.dtype, np.floating):
            w_scale = np.broadcast_to(wq.scale.astype(np.float32).reshape(-1), (w.shape[0],))
            bias = self.integer_bias(bias.reshape(-1), np.float32(x_scale) * w_scale, layer)
        w_zp, constants = arithmetic.linear_constants(w, bias, x_scale, x_zp, wq.scale, wq.zero_point, out_scale)
        common = dict(x_zero_point=x_zp, w_zero_point=w_zp, out_zero_point=out_zp, out_dtype=out.dtype,
                      clamp=list(clamp), x_range=list(xq.bounds), w_range=list(wq.bounds), layer=layer)
        return self.emit_linear(core, x, constants, common)

    def emit_linear(self, core, x, constants, common: dict):
        """The integer conv2d or dense op ``core`` becomes (its geometry read from ``core``)."""
        if core.op.name == "relax.matmul":
            return self.integer("dense", [x], constants, **common)
        a = core.attrs
        if str(a.data_layout) != "NCHW" or str(a.kernel_layout) != "OIHW" or any(int(d) != 1 for d in a.dilation):
            raise ModelError(f"conv2d {a.data_layout}/{a.kernel_layout} with dilation {list(a.dilation)}: only NCHW/OIHW "
                             "without dilation is supported")
        geometry = dict(strides=[int(s) for s in a.strides], padding=[int(p) for p in a.padding], groups=int(a.groups))
        return self.integer("conv2d", [x], constants, **geometry, **common)

    def integer_accumulate(self, core):
        """ConvInteger / MatMulInteger (int32 ``conv2d`` / ``matmul`` of zero-point-subtracted 8-bit
        tensors, constant weights): the integer op with an int32 output. A zero point of the input
        computed at run time (DynamicQuantizeLinear) is not folded: the op pads with 0 and its term
        ``zx * (sum of the weights over each output's valid taps)`` is subtracted after it."""
        data, weight = self.zero_point_subtracted(core.args[0]), self.zero_point_subtracted(core.args[1])
        if data is None or weight is None or (w := constant(self.value(weight[0]))) is None:
            return None
        (x, zx), w_zp = data, weight[1]
        if zx is not None and any(int(d) != 1 for d in zx.ty.shape):
            return None                      # a per-row input zero point (MatMulInteger allows it): TVM's op
        w_zps = np.zeros(1, np.int64) if w_zp is None else constant(self.value(w_zp))
        if w_zps is None:
            return None
        zx_value = 0 if zx is None else constant(self.value(zx))
        runtime_zx = zx_value is None
        x_zp, w_zp = 0 if runtime_zx else int(np.asarray(zx_value).reshape(())), int(w_zps.flat[0])
        rows = None
        if core.op.name == "relax.matmul":
            if len(x.ty.shape) < 2 or w.ndim != 2:
                return None
            w = w.T
            if len(x.ty.shape) > 2:          # [..., M, K]: the dense of the flattened rows, as conv_or_dense
                rows = [int(d) for d in x.ty.shape]
                x = self.builder_.emit(relax.op.reshape(self.visit_expr(x), [-1, rows[-1]]))
        w_range = list(QUANT_RANGES[str(w.dtype)])
        if np.any(w_zps != w_zp):            # one zero point per output channel (arithmetic.nine_bit)
            w, w_zp = arithmetic.nine_bit(w, w_zps.reshape(-1)), 0
        common = dict(x_zero_point=x_zp, w_zero_point=w_zp, out_zero_point=0, out_dtype="int32",
                      clamp=list(QUANT_RANGES["int32"]), w_range=w_range, layer=self.layer_name(core))
        result = self.emit_linear(core, x, (w, arithmetic.folded_bias(w, x_zp, w_zp)), common)
        if rows is not None:
            result = relax.op.reshape(self.builder_.emit(result), [*rows[:-1], w.shape[0]])
        if not runtime_zx:
            return result
        taps = arithmetic.weight_sums(w, w_zp) if core.op.name == "relax.matmul" else arithmetic.valid_tap_sums(
            w.astype(np.int64) - w_zp, tuple(int(d) for d in list(x.ty.shape)[2:]), core.attrs)
        term = relax.op.multiply(relax.op.astype(self.visit_expr(zx), "int32"), relax.const(taps.astype(np.int32)))
        return self.builder_.normalize(relax.op.subtract(result, term))

    def add(self, expr, out: QParams):
        inner, clamp = self.activation(expr, out)
        add = self.call(inner, "relax.add")
        if add is None or add in self.float_cores:      # onnxruntime's float Add: dequantize, add, quantize
            return None
        a, b = self.dequantized(add.args[0]), self.dequantized(add.args[1])
        if a is None or b is None:
            return None
        (sa, za), (sb, zb) = a[1].scalar("an add input"), b[1].scalar("an add input")
        sc, zc = out.scalar("an add output")
        return self.integer("add", [a[0], b[0]], out_dtype=out.dtype, clamp=list(clamp),
                            **arithmetic.add_params(sa, za, sb, zb, sc, zc))

    def mul(self, expr, out: QParams):
        mul = self.call(expr, "relax.multiply")
        if mul is None or mul in self.float_cores:
            return None
        a, b = self.dequantized(mul.args[0]), self.dequantized(mul.args[1])
        if a is None or b is None:
            return None
        if constant(self.value(a[0])) is not None:      # the arithmetic is symmetric: the activation first
            a, b = b, a
        if constant(self.value(a[0])) is not None:
            return None
        # a quantized constant operand (a per-channel scale tensor, a scalar) too: onnxruntime fuses
        # it the same (QLinearMul); the float product differed from it by one step on 76 of 8192
        # values times a [1, 8, 1, 1] tensor
        b_constant = constant(self.value(b[0]))
        inputs, constants = ([a[0]], [b_constant]) if b_constant is not None else ([a[0], b[0]], [])
        (sa, za), (sb, zb) = a[1].scalar("a mul input"), b[1].scalar("a mul input")
        sc, zc = out.scalar("a mul output")
        ratio = np.float32(np.float32(sa * sb) / sc)
        return self.integer("mul", inputs, constants, a_zero_point=za, b_zero_point=zb, ratio=float(ratio),
                            out_zero_point=zc, out_dtype=out.dtype, clamp=list(out.bounds))

    def global_avg_pool(self, expr, out: QParams):
        pool = self.call(expr, "relax.nn.adaptive_avg_pool2d")
        if pool is None or pool in self.float_cores or not is_global_average_pool(pool):
            return None
        data = self.dequantized(pool.args[0])
        return None if data is None or len(data[0].ty.shape) != 4 else self.global_pool(data, out)

    def global_pool(self, data, out: QParams):
        """QLinearGlobalAveragePool of ``data`` = (x, its QParams)."""
        x_scale, x_zp = data[1].scalar("a pool input")
        y_scale, y_zp = out.scalar("a pool output")
        count = int(data[0].ty.shape[2]) * int(data[0].ty.shape[3])
        scale = np.float32(np.float32(x_scale) / np.float32(np.float32(y_scale) * np.float32(count)))
        return self.integer("global_avg_pool", [data[0]], x_zero_point=x_zp, scale=float(scale), out_zero_point=y_zp,
                            out_dtype=out.dtype)

    def avg_pool(self, expr, out: QParams):
        pool = self.call(expr, "relax.nn.avg_pool2d")
        data = None if pool is None or pool in self.float_cores else self.dequantized(pool.args[0])
        if data is None or data[1].range is not None or out.range is not None:
            return None
        a = pool.attrs
        if str(a.layout) != "NCHW" or any(int(d) != 1 for d in a.dilation):
            return None
        (x_scale, x_zp), (y_scale, y_zp) = data[1].scalar("a pool input"), out.scalar("a pool output")
        size, padding = [int(d) for d in list(pool.args[0].ty.shape)[2:]], [int(p) for p in a.padding]
        if [int(k) for k in a.pool_size] == size and not any(padding):     # onnxruntime: the global pool
            return self.global_pool(data, out)
        return self.integer("avg_pool2d", [data[0]], pool=[int(k) for k in a.pool_size],
                            strides=[int(s) for s in a.strides], padding=padding,
                            out_size=[int(d) for d in list(expr.ty.shape)[2:]], count_include_pad=bool(a.count_include_pad),
                            x_scale=float(x_scale), x_zero_point=x_zp, y_scale=float(y_scale), y_zero_point=y_zp,
                            out_dtype=out.dtype)

    def movement(self, expr, out: QParams):
        op = self.call(expr, *MOVEMENT)
        if op is None or op.op.name == "relax.image.resize2d" and str(op.attrs.method) != "nearest_neighbor":
            return None
        x = self.in_output_params(op.args[0], out)
        if x is None:
            return None
        if op.op.name == "relax.nn.max_pool2d":
            pool = max_pool_params(op)
            return None if pool is None else self.integer("max_pool2d", [x], **pool)
        return relax.Call(op.op, [x, *[self.visit_expr(a) for a in op.args[1:]]], op.attrs)

    def in_output_params(self, expr, out: QParams):
        """For ``expr`` = DQ(x): the integers of Q(expr) in ``out``'s parameters, x itself where they
        are x's, else x through a lookup table; None otherwise. Data movement, concatenation and max
        commute with that (monotone) map, so they run on the integers, exactly."""
        data = self.dequantized(expr)
        if data is None:
            return None
        if data[1].same(out):
            return self.visit_expr(data[0])
        table = self.lookup(expr, out)
        return None if table is None else self.builder_.emit(table)

    def lookup(self, expr, out: QParams):
        leaf = self.elementwise_input(expr)
        if leaf is None or out.range is not None or out.scale.size != 1:
            return None
        dq, x, xq = leaf
        offset = -QUANT_RANGES[xq.dtype][0]
        rank = len(x.ty.shape)           # every value, in x's rank (the DQ's axis attribute stays valid)
        values = relax.const((np.arange(256) - offset).reshape((1,) * (rank - 1) + (256,)), xq.dtype)
        q = relax.op.quantize(self.rebuilt(expr, dq, values), relax.const(out.scale.reshape(())),
                              relax.const(out.zero_point.reshape(()).astype(out.dtype)), out_dtype=out.dtype)
        table = evaluate(lambda bb: q, rewrite, self.table_ops).reshape(256)
        runtime_ops = sorted(_op_names(q) & set(self.table_ops))
        return self.integer("lookup", [x], [table], offset=offset,
                            **({"runtime_ops": runtime_ops} if runtime_ops else {}))

    def softmax(self, expr, out: QParams):
        """``Q(softmax(DQ(x)))``, input and output of one 8-bit type: onnxruntime's QLinearSoftmax
        (qlinear_softmax.py) over rows of the last axis, not the float softmax. Over another axis
        (opset 13) the kernel swaps that axis with the last before and after; at opset 11-12 (imported
        as reshape(softmax(reshape(DQ(x), [N, D])))) its rows are the flattened [N, D]: both moved to
        the integers."""
        unflattened = self.call(expr, "relax.reshape")
        call = self.call(expr if unflattened is None else unflattened.args[0], "relax.nn.softmax")
        flattened = None if call is None or unflattened is None else self.call(call.args[0], "relax.reshape")
        if call is None or (unflattened is None) != (flattened is None):
            return None
        data = self.dequantized(call.args[0] if flattened is None else flattened.args[0])
        if data is None or data[1].dtype != out.dtype or data[1].range is not None or out.range is not None or \
                constant(self.value(data[0])) is not None:
            return None
        (x_scale, _), (y_scale, y_zero_point) = data[1].scalar("a softmax input"), out.scalar("a softmax output")
        shape = [int(d) for d in call.ty.shape]
        axis = int(call.attrs.axis) % len(shape)
        swap = list(range(len(shape)))
        swap[axis], swap[-1] = swap[-1], swap[axis]
        x = self.visit_expr(data[0])
        if flattened is not None:
            x = self.builder_.emit(relax.op.reshape(x, shape))
        if axis != len(shape) - 1:
            x = self.builder_.emit(relax.op.permute_dims(x, swap))
        y = self.integer("qlinear_softmax", [x], [qlinear_softmax.exp_table(x_scale, shape[axis])],
                         y_scale=float(y_scale), out_zero_point=y_zero_point, out_dtype=out.dtype)
        if axis != len(shape) - 1:
            y = relax.op.permute_dims(self.builder_.emit(y), swap)
        return y if flattened is None else relax.op.reshape(self.builder_.emit(y), expr.ty.shape)

    def elementwise_input(self, expr):
        """(its DQ call, x, x's QParams) when ``expr`` is an elementwise float function of DQ(x) alone,
        x an 8-bit tensor of the whole type's range; else None."""
        leaves = []

        def walk(e):
            if (dq := self.call(e, "relax.dequantize")) is not None:
                leaves.append(dq)
                return True
            value = self.value(e)
            if isinstance(value, Constant):      # a tensor, or a scalar (a clip's bounds)
                return np.size(value.value.numpy() if hasattr(value.value, "numpy") else value.value) == 1
            call = self.call(e, *ELEMENTWISE)
            return call is not None and all(walk(a) for a in call.args)
        if not walk(expr) or not leaves:
            return None
        dq, params = leaves[0], self.qparams(leaves[0])
        x = dq.args[0]
        if params is None or params.dtype not in ("uint8", "int8") or params.scale.size != 1 or \
                constant(self.value(x)) is not None or self.clipped(x) is not None or \
                any(not d.args[0].same_as(x) or self.qparams(d) is None or not params.same(self.qparams(d))
                    for d in leaves) or \
                [int(d) for d in expr.ty.shape] != [int(d) for d in x.ty.shape]:
            return None
        return dq, x, params

    def rebuilt(self, expr, dq, values):
        """``expr`` with its DQ(x) applied to the constant ``values`` instead (a standalone expression)."""
        if self.call(expr, "relax.dequantize") is not None:
            return relax.Call(dq.op, [values, *[self.value(a) for a in dq.args[1:]]], dq.attrs)
        value = self.value(expr)
        if isinstance(value, Constant):
            return value
        return relax.Call(value.op, [self.rebuilt(a, dq, values) for a in value.args], value.attrs)

    def integer(self, kind: str, inputs, constants=(), **params):
        """The call of integer op ``kind`` (arithmetic.py) on the rewritten ``inputs``."""
        return IntegerOp.call(self.builder_, kind, [self.visit_expr(i) for i in inputs], constants, **params)

    def requantize_free(self, expr, out: QParams):
        data = self.dequantized(expr)
        if data is None or not data[1].same(out) or constant(self.value(data[0])) is not None:
            return None
        return self.visit_expr(data[0])


def _op_names(expr) -> set[str]:
    """The Relax ops a standalone expression (QDQToInteger.rebuilt's) calls."""
    return {expr.op.name, *(n for a in expr.args for n in _op_names(a))} if isinstance(expr, relax.Call) else set()


# The float ops of a lookup table that onnxruntime computes otherwise than TVM's op does: its QLinearSigmoid (and a
# QDQ Sigmoid, fused into one) builds the table from MLAS's logistic
TABLE_OPS = ("relax.sigmoid",)


def rewrite(mod, float_layers: dict[str, str] | None = None, int8_allowed: bool = False,
            qgemms: set[str] = frozenset(), table_ops: dict | None = None):
    """The integer module: every group onnxruntime fuses is one integer op, each chain of channel
    movement one gather (channels.py, which counts readers: dead float code removed first);
    ``float_layers``: the ONNX nodes onnxruntime leaves in float (ort_fusion.py); ``int8_allowed``: as
    onnxruntime's AArch64 build, which fuses int8 activations (ort_fusion.float_layers); ``qgemms``: the
    QOperator QGemms to float32, kernels of int8 pairs on every build (ort_fusion.qgemms_to_float); ``table_ops``:
    the LegalizeOps rules of float ops in a lookup table that the target's onnxruntime build computes otherwise than
    TVM's op (TABLE_OPS: the target's float rules of them), each table recording those it holds (``runtime_ops``)."""
    mod = relax.transform.DeadCodeElimination()(QDQToInteger(mod, float_layers, int8_allowed, qgemms, table_ops).run())
    return relax.transform.DeadCodeElimination()(channels.fuse(mod))
