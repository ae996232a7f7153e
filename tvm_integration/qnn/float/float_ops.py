"""The float ops a quantized transformer keeps between DequantizeLinear and QuantizeLinear (or, after
quantize_dynamic, between the integer matmuls): the matmul of two activations (float_matmul.py), Softmax
(softmax.py), Erf/GELU, Tanh, LayerNormalization (layer_norm.py), ReduceMean and GlobalAveragePool
(reduce_mean.py), and the whole-tensor min/max of DynamicQuantizeLinear (tensor_range.py). Each is computed
as onnxruntime's x86 kernels compute it (bit-exact: tests/test_float_ops.py, test_float_onnxruntime_math.py),
and all are scheduled here (TVM's legalized defaults run them serially: 75 of a 4-layer BERT's 95 ms).

``legalize_map()`` is the LegalizeOps override bind.py uses; the PrimFuncs it writes carry
``schedules.SCHEDULED`` and are not rescheduled.
"""
from __future__ import annotations

import collections

import numpy as np
import tvm
from tvm import relax, s_tir, te, tirx, topi

from tvm_integration.qnn.float import float_gemm, layer_norm, mlas_math, reduce_mean
from tvm_integration.qnn.float.float_calls import emit, float32, shape_of
from tvm_integration.qnn.float.float_gemv import row_times_func, row_times_transposed_func
from tvm_integration.qnn.float.float_matmul import LANES, PACKED_STRIDE_K, matmul_func
from tvm_integration.qnn.float.softmax import softmax_func
from tvm_integration.qnn.float.tensor_range import range_func, reduce_all_func
from tvm_integration.qnn.semantics.quant import constant


# -- Erf ----------------------------------------------------------------------------------------------

def elementwise_func(shape: tuple[int, ...], fn, name: str) -> tirx.PrimFunc:
    """``fn`` of every element of a float32 tensor: parallel, LANES-wide vectors."""
    x = te.placeholder(shape, "float32", "x")
    y = te.compute(shape, lambda *i: fn(x[i]), name=name)
    return _flat_parallel(te.create_prim_func([x, y]), name, shape)


def dequantize_chain(shape: tuple[int, ...], fused: bool = False, per_column: bool = False):
    """quantize_dynamic's output chain of an integer matmul, ``float32(acc - correction) * scale + bias``
    (the correction and bias per column, the scale a run-time scalar or, ``per_column``, a vector), the
    product rounded before the add as MatMulIntegerToFloat's output stage computes it on x86 (no FMA;
    ``fused``: one FMA, as its AArch64 build does): (its inputs, its value at an index)."""
    n = shape[-1]
    acc = te.placeholder(shape, "int32", "acc")
    correction = te.placeholder((n,), "int32", "correction")
    scale = te.placeholder((n,) if per_column else (), "float32", "scale")
    bias = te.placeholder((n,), "float32", "bias")

    def value(i):
        x, s = (acc[i] - correction[i[-1]]).astype("float32"), scale[i[-1]] if per_column else scale[()]
        return tirx.op.fma(x, s, bias[i[-1]]) if fused else layer_norm.rounded(x * s) + bias[i[-1]]
    return [acc, correction, scale, bias], value


def dequantized_func(shape: tuple[int, ...], then=None, fused: bool = False, per_column: bool = False) -> tirx.PrimFunc:
    """The dequantize chain (dequantize_chain) in one pass, and ``then`` (an elementwise function:
    the feed-forward's GELU) of it in the same pass."""
    inputs, value = dequantize_chain(shape, fused, per_column)
    y = te.compute(shape, lambda *i: value(i) if then is None else then(value(i)), name="dequantized")
    return _flat_parallel(te.create_prim_func([*inputs, y]), "dequantized", shape)


def _flat_parallel(func: tirx.PrimFunc, name: str, shape: tuple[int, ...]) -> tirx.PrimFunc:
    """The elementwise block ``name`` over one flat loop: parallel, LANES-wide vectors."""
    sch = s_tir.Schedule(func)
    loops = sch.get_loops(sch.get_sblock(name))
    fused = sch.fuse(*loops) if len(loops) > 1 else loops[0]
    size = int(np.prod(shape))
    if size % LANES == 0 and size > LANES:
        fused, lanes = sch.split(fused, [None, LANES])
        sch.vectorize(lanes)
    sch.parallel(fused)
    return sch.mod["main"]


def gelu(x):
    """onnxruntime's Gelu (the fusion of x * (erf(x / sqrt 2) + 1) * 0.5): erf of x times
    float32(1 / sqrt 2), not x divided by float32(sqrt 2), then (0.5 x)(erf + 1)."""
    return (mlas_math.f32(0.5) * x) * (mlas_math.erf(x * mlas_math.f32(0.70710678118654752440)) + mlas_math.f32(1.0))


def _scalar(expr, value: float) -> bool:
    array = constant(expr)
    return array is not None and array.size == 1 and array.reshape(-1)[0] == np.float32(value)


def fuse_gelu(func: relax.Function) -> relax.Function:
    """``x * (erf(x / sqrt 2) + 1) * 0.5`` (torch's export of exact GELU) -> ``nn.gelu(x)``, as
    onnxruntime's GeluFusion rewrites it, so the model computes what onnxruntime's Gelu computes."""
    from tvm.relax.dpl import is_op, rewrite_call, wildcard
    x, c0, c1, c2 = wildcard(), wildcard(), wildcard(), wildcard()
    inner = is_op("relax.multiply")(x, is_op("relax.add")(is_op("relax.erf")(is_op("relax.divide")(x, c0)), c1))
    pattern = is_op("relax.multiply")(inner, c2)

    def rewriter(matched, bound):
        if _scalar(bound[c0], np.sqrt(2)) and _scalar(bound[c1], 1.0) and _scalar(bound[c2], 0.5) and \
                _float32_tensor(bound[x]):
            return relax.op.nn.gelu(bound[x])
        return matched
    return rewrite_call(pattern, rewriter, func)


def _float32_tensor(expr) -> bool:
    return isinstance(expr.ty, relax.TensorType) and str(expr.ty.dtype) == "float32"


# -- the LegalizeOps override -------------------------------------------------------------------------

def _packed_stride(b) -> int | None:
    """MLAS's K block over ``b``: PACKED_STRIDE_K for a constant 2-D B, which onnxruntime packs once;
    None (stride_k's) for an activation."""
    return PACKED_STRIDE_K if len(shape_of(b) or ()) == 2 and constant(b) is not None else None


def gemm_c_shapes(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    """The shapes of C that MatMulAddFusion takes into a Gemm with ``a @ b`` (b 2-D): [n]; with a 2-D,
    [1, n], [m, 1] and [m, n] too (Gemm broadcasts C one way only). Also activation_matmul._gemm_fused."""
    (m, n) = (a[0] if len(a) == 2 else None), b[-1]
    return ((n,),) if m is None else ((n,), (1, n), (m, 1), (m, n))


def matmul_rule(bb, call, neon: bool = False):
    """MLAS's sgemm, K in the blocks of ``_packed_stride`` (``neon``: in NEON's tiles, neon_float.py)."""
    a, b = (shape_of(x) for x in call.args)
    if a is None or b is None or len(a) < 2 or len(b) < 2 or not float32(call):
        return None
    func = matmul_func(a, b, stride=_packed_stride(call.args[1]), neon=neon)
    return emit(bb, func, "qsynth_float_matmul", call.args, (*np.broadcast_shapes(a[:-2], b[:-2]), a[-2], b[-1]))


def softmax_rule(row_func):
    """The Softmax rule over ``row_func(shape)``, a softmax over the last axis (MLAS's x86 order here,
    its generic one in neon_float.py): over another axis, that axis swapped with the last before and
    after, as onnxruntime's Softmax kernel transposes (opset 13)."""
    def legalize(bb, call):
        shape = shape_of(call.args[0])
        if shape is None or not float32(call):
            return None
        axis, swap = int(call.attrs.axis) % len(shape), list(range(len(shape)))
        if axis == len(shape) - 1:
            return emit(bb, row_func(shape), "qsynth_softmax", call.args, shape)
        swap[axis], swap[-1] = swap[-1], axis
        x = bb.emit(bb.call_te(topi.transpose, call.args[0], swap))
        swapped = [shape[a] for a in swap]
        y = bb.emit(emit(bb, row_func(tuple(swapped)), "qsynth_softmax", [x], swapped))
        return bb.call_te(topi.transpose, y, swap)
    return legalize


def elementwise_rule(fn, name):
    """The rule computing an elementwise float op as ``fn`` of each element (elementwise_func)."""
    def legalize(bb, call):
        shape = shape_of(call.args[0])
        if shape is None or not float32(call):
            return None
        return emit(bb, elementwise_func(shape, fn, name), "qsynth_" + name, call.args, shape)
    return legalize


def _reduce_all(kind):
    def legalize(bb, call):
        shape = shape_of(call.args[0])
        if shape is None or not float32(call) or call.attrs.axis is not None or not shape:
            return None
        return emit(bb, reduce_all_func(shape, kind), f"qsynth_{kind}", call.args, ())
    return legalize


def legalize_map(overrides: dict | None = None) -> dict:
    """op name -> LegalizeOps function: ours (``RULES``, with ``overrides`` in place of some: a target's
    own, neon_float.py) where the call fits (float32, static shapes), else the op's registered
    legalization."""
    def with_default(name, rule):
        def legalize(bb, call):
            new = rule(bb, call)
            return new if new is not None else tvm.ir.Op.get(name).get_attr("FLegalize")(bb, call)
        return legalize
    return {name: with_default(name, rule) for name, rule in {**RULES, **(overrides or {})}.items()}


# -- LayerNormalization and onnxruntime's SkipLayerNormalization fusion (layer_norm.py) ---------------

def layer_norm_rule(func):
    """The LayerNormalization rule over ``func(shape, epsilon)`` (MLAS's x86 kernel here, onnxruntime's
    C++ Welford loop in neon_float.py): over the last axis, gamma and beta of its length."""
    def legalize(bb, call):
        shape = shape_of(call.args[0])
        axes = [int(a) % len(shape) for a in call.attrs.axes] if shape else None
        if shape is None or len(shape) < 2 or not float32(call) or axes != [len(shape) - 1] or \
                any(shape_of(a) != shape[-1:] for a in call.args[1:]):
            return None
        return emit(bb, func(shape, float(call.attrs.epsilon)), "qsynth_layer_norm", call.args, shape)
    return legalize


@relax.expr_functor.mutator
class _Fusions(relax.PyExprMutator):
    """Fusions of onnxruntime's graph optimizer, rewritten to call_tir of functions that compute what
    its fused kernels do:

    - ``matmul(a, b)`` divided or multiplied by a scalar constant (MatMulScaleFusion): FusedMatMul,
      the scale its alpha (1 / c in float for a divisor).
    - ``matmul(a, b) + c``, b 2-D, c a constant [n] (MatMulAddFusion): Gemm, its K blocks summed onto C.
    - ``layer_norm(a + b)`` over the last axis, a and b float32 of one 3-D shape, one of them ``c + bias``
      (a constant [n]) or not (SkipLayerNormFusion's three forms): SkipLayerNormalization, the bias
      its last input.
    - an integer matmul's dequantize chain, ``float32(acc - c) * scale + bias`` (quantize_dynamic's
      form): MatMulIntegerToFloat's output stage, one pass instead of four.
    - ``matmul(a, b)``, a a transpose of its last two axes (MatmulTransposeFusion: FusedMatMul with
      transA, whose K blocks differ), in a second pass (``bare_matmuls``) once the scaled ones are
      fused.

    and, computing the same values in fewer passes: the whole-tensor max and min of one tensor
    (DynamicQuantizeLinear's range) in one; a dequantize chain in the pass of the GELU or the
    SkipLayerNormalization that reads it.

    ``fused``: the SkipLayerNormalization and the dequantize chains as onnxruntime's AArch64 build
    computes them (with FMAs: layer_norm.welford_func, dequantize_chain), the matmuls in NEON's tiles."""

    def __init__(self, mod, bare_matmuls: bool = False, fused: bool = False):
        super().__init__(mod)
        self.bare_matmuls, self.fused = bare_matmuls, fused
        self.ranged, self.ranges = _ranged(mod["main"]), {}
        self.readers = _readers(mod["main"])

    def visit_call_(self, call):
        source, call = call, super().visit_call_(call)
        fused = None
        if self.bare_matmuls:
            if call.op == tvm.ir.Op.get("relax.matmul"):
                fused = self._transposed_matmul(call)
                fused = self._row_matmul(call) if fused is None else fused
                fused = self._by_weights(call, None, "qsynth_float_matmul") if fused is None else fused
        elif call.op in (tvm.ir.Op.get("relax.max"), tvm.ir.Op.get("relax.min")):
            fused = self._range(source.args[0], call)
        elif call.op == tvm.ir.Op.get("relax.nn.layer_norm"):
            fused = self._skip_layer_norm(call)
        elif call.op in (tvm.ir.Op.get("relax.divide"), tvm.ir.Op.get("relax.multiply")):
            fused = self._scaled_matmul(call)
        elif call.op == tvm.ir.Op.get("relax.add"):
            fused = self._dequantized(call)
            fused = self._gemm(source, call) if fused is None else fused
        elif call.op == tvm.ir.Op.get("relax.nn.gelu"):
            fused = self._dequantized_gelu(call)
        return call if fused is None else fused

    def _bound(self, expr, op: str):
        value = self.lookup_binding(expr) if isinstance(expr, relax.Var) else None
        return value if isinstance(value, relax.Call) and value.op == tvm.ir.Op.get(op) else None

    def _skip_layer_norm(self, call):
        add, shape = self._bound(call.args[0], "relax.add"), shape_of(call.args[0])
        if add is None or shape is None or len(shape) != 3 or any(shape_of(a) != shape for a in add.args) or \
                not float32(add) or [int(a) % 3 for a in call.attrs.axes] != [2] or \
                any(shape_of(a) != shape[-1:] for a in call.args[1:]):
            return None
        operands, bias = list(add.args), []
        for index in (0, 1):          # its first form, then its second: the bias Add an operand of this one
            inner = self._bound(add.args[index], "relax.add")
            if inner is not None and shape_of(inner.args[0]) == shape and shape_of(inner.args[1]) == shape[-1:] and \
                    constant(inner.args[1]) is not None and float32(inner):
                operands[index], bias = inner.args[0], [inner.args[1]]
                break
        for index in (0, 1):          # an operand still to dequantize: in the same pass
            if (chain := self._dequantize_chain(operands[index])) is not None:
                first = dequantize_chain(shape, self.fused, shape_of(chain[2]) != ())
                func = layer_norm.skip_layer_norm_func(shape, float(call.attrs.epsilon), bool(bias), first=first,
                                                       fused=self.fused)
                return emit(self.builder_, func, "qsynth_skip_layer_norm", [*chain, operands[1 - index],
                                                                           *call.args[1:], *bias], shape)
        func = layer_norm.skip_layer_norm_func(shape, float(call.attrs.epsilon), bias=bool(bias), fused=self.fused)
        return emit(self.builder_, func, "qsynth_skip_layer_norm", [*operands, *call.args[1:], *bias], shape)

    def _dequantize_chain(self, expr):
        """The inputs of the dequantize chain (dequantized_func, as _dequantized wrote it) ``expr`` is
        bound to, else None."""
        value = self.lookup_binding(expr) if isinstance(expr, relax.Var) else None
        if isinstance(value, relax.Call) and value.op == tvm.ir.Op.get("relax.call_tir") and \
                value.args[0].name_hint.rstrip("0123456789") == "qsynth_dequantized":
            return list(value.args[1].fields)
        return None

    def _dequantized_gelu(self, call):
        """GELU of a dequantize chain (the feed-forward's first matmul): both in one pass."""
        chain, shape = self._dequantize_chain(call.args[0]), shape_of(call.args[0])
        if chain is None or shape is None:
            return None
        func = dequantized_func(shape, then=gelu, fused=self.fused, per_column=shape_of(chain[2]) != ())
        return emit(self.builder_, func, "qsynth_dequantized_gelu", chain, shape)

    def _gemm(self, source, call):
        """``matmul(a, b) + c``, b 2-D, c [n] (or, a 2-D, [1, n], [m, 1] or [m, n]: what Gemm broadcasts
        to its output), the matmul read by the add alone: onnxruntime's MatMulAddFusion makes it a Gemm
        with C (before SkipLayerNormFusion could take c), which sums onto C (matmul_func's ``bias``), K in
        the blocks of ``_packed_stride``.
        One row on x86-64 MlasGemm gives its M = 1 kernels: over B as it is (not packed), c [n] summed
        onto in k's groups (float_gemv.row_times_func); over a transposed B, c added after (_row_matmul)."""
        for index in (0, 1):
            matmul, c = self._bound(call.args[index], "relax.matmul"), call.args[1 - index]
            a, b = (None, None) if matmul is None else (shape_of(x) for x in matmul.args)
            if a is None or b is None or len(a) < 2 or len(b) != 2 or shape_of(c) not in gemm_c_shapes(a, b) \
                    or not float32(matmul) or not float32(call) or self.readers[source.args[index]] != 1:
                continue
            if not self.fused and np.prod(a[:-1]) == 1:
                if shape_of(c) != b[-1:] or _packed_stride(matmul.args[1]) is not None or \
                        self._bound(matmul.args[1], "relax.permute_dims") is not None:
                    continue
                row = matmul.args[0] if len(a) == 2 else self.builder_.emit(relax.op.reshape(matmul.args[0], (1, b[0])))
                y = emit(self.builder_, row_times_func(*b, bias=True), "qsynth_float_gemv", [row, matmul.args[1], c],
                         (1, b[1]))
                return y if len(a) == 2 else relax.op.reshape(self.builder_.emit(y), shape_of(call))
            if (packed := self._by_weights(matmul, c, "qsynth_float_gemm", shape_of(call))) is not None:
                return packed
            func = matmul_func(a, b, stride=_packed_stride(matmul.args[1]), bias=shape_of(c), neon=self.fused)
            return emit(self.builder_, func, "qsynth_float_gemm", [*matmul.args, c], shape_of(call))
        return None

    def _by_weights(self, matmul, c, name: str, out_shape=None):
        """``matmul`` (+ ``c``) by constant weights, on x86 (float_gemm.by_weights), else None."""
        dq = self._bound(matmul.args[1], "relax.dequantize")
        return None if self.fused else float_gemm.by_weights(self.builder_, matmul, dq, c, name,
                                                             out_shape or shape_of(matmul))

    def _dequantized(self, call):
        multiply = self._bound(call.args[0], "relax.multiply")
        cast = None if multiply is None else self._bound(multiply.args[0], "relax.astype")
        subtract = None if cast is None else self._bound(cast.args[0], "relax.subtract")
        if subtract is None or str(cast.ty.dtype) != "float32" or str(subtract.ty.dtype) != "int32":
            return None
        shape = shape_of(call.args[0])
        if shape is None or shape_of(subtract.args[0]) != shape or shape_of(subtract.args[1]) != shape[-1:] or \
                shape_of(multiply.args[1]) not in ((), shape[-1:]) or shape_of(call.args[1]) != shape[-1:] or \
                not float32(call):
            return None
        func = dequantized_func(shape, fused=self.fused, per_column=shape_of(multiply.args[1]) != ())
        return emit(self.builder_, func, "qsynth_dequantized", [*subtract.args, multiply.args[1], call.args[1]], shape)

    def _scaled_matmul(self, call):
        divide = call.op == tvm.ir.Op.get("relax.divide")
        for index in ((0,) if divide else (0, 1)):
            matmul, scale = self._bound(call.args[index], "relax.matmul"), constant(call.args[1 - index])
            if matmul is None or scale is None or scale.size != 1 or scale.dtype != np.float32 or \
                    scale.ndim > len(shape_of(call.args[index]) or ()):
                continue
            a, b = (shape_of(x) for x in matmul.args)
            if a is None or b is None or len(a) < 2 or len(b) < 2 or not float32(matmul):
                continue
            c = scale.reshape(-1)[0]
            alpha = float(np.float32(1) / c if divide else c)
            func = matmul_func(a, b, alpha, self._transposed_a(matmul), neon=self.fused)
            return emit(self.builder_, func, "qsynth_float_matmul", matmul.args, shape_of(call.args[index]))
        return None

    def _range(self, source, call):
        """The whole-tensor max or min of a tensor whose other one is taken too: both in one pass."""
        shape = shape_of(call.args[0])
        if source not in self.ranged or shape is None or not float32(call):
            return None
        if source not in self.ranges:
            self.ranges[source] = self.builder_.emit(
                emit(self.builder_, range_func(shape, neon=self.fused), "qsynth_range", [call.args[0]], (), outputs=2))
        return relax.TupleGetItem(self.ranges[source], 0 if call.op == tvm.ir.Op.get("relax.max") else 1)

    def _transposed_a(self, matmul) -> bool:
        """``a`` a transpose of its last two axes, which MatmulTransposeFusion folds in as transA."""
        permute, rank = self._bound(matmul.args[0], "relax.permute_dims"), len(shape_of(matmul.args[0]) or ())
        if permute is None or rank < 2:
            return False
        axes = list(range(rank))[::-1] if permute.attrs.axes is None else [int(a) for a in permute.attrs.axes]
        return axes == [*range(rank - 2), rank - 1, rank - 2]

    def _row_matmul(self, call):
        """One row times a transposed 2-D B (an ONNX Gemm with transB): MLAS's M = 1 kernel (float_gemv.py),
        on x86-64 only (``fused``: the AArch64 build, whose MlasGemm has no such case)."""
        a, permute = shape_of(call.args[0]), self._bound(call.args[1], "relax.permute_dims")
        w = None if permute is None else shape_of(permute.args[0])
        if self.fused or a is None or len(a) != 2 or a[0] != 1 or w is None or len(w) != 2 or w[1] != a[1] or not float32(call) or \
                permute.attrs.axes is not None and [int(x) for x in permute.attrs.axes] != [1, 0]:
            return None
        return emit(self.builder_, row_times_transposed_func(w[1], w[0]), "qsynth_float_gemv",
                    [call.args[0], permute.args[0]], (1, w[0]))

    def _transposed_matmul(self, call):
        a, b = (shape_of(x) for x in call.args)
        if a is None or b is None or len(b) < 2 or not float32(call) or not self._transposed_a(call):
            return None
        out = (*np.broadcast_shapes(a[:-2], b[:-2]), a[-2], b[-1])
        func = matmul_func(a, b, trans_a=True, neon=self.fused)
        return emit(self.builder_, func, "qsynth_float_matmul", call.args, out)


def _readers(func: relax.Function) -> collections.Counter:
    """How many bindings of ``func`` (and its output) read each variable."""
    counts = collections.Counter(relax.analysis.used_vars(func.body.body))
    for block in func.body.blocks:
        for binding in block.bindings:
            counts.update(relax.analysis.used_vars(binding.value))
    return counts


def _ranged(func: relax.Function) -> set:
    """The tensors of ``func`` whose whole-tensor max and min are both taken (DynamicQuantizeLinear's
    range)."""
    kinds: dict = {}
    for block in func.body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.Call) and value.op in (tvm.ir.Op.get("relax.max"), tvm.ir.Op.get("relax.min")) \
                    and value.attrs.axis is None and isinstance(value.args[0], relax.Var):
                kinds.setdefault(value.args[0], set()).add(value.op.name)
    return {var for var, names in kinds.items() if len(names) == 2}


def onnxruntime_fusions(mod: tvm.IRModule, fused: bool = False) -> tvm.IRModule:
    """The float fusions of onnxruntime's graph optimizer that change what is computed (fuse_gelu,
    _Fusions), applied to ``mod["main"]`` so it rounds as onnxruntime's fused kernels (``fused``: as
    its AArch64 build's, neon_float.py)."""
    for bare_matmuls in (False, True):
        mutator = _Fusions(mod, bare_matmuls, fused)
        main = fuse_gelu(mod["main"]) if not bare_matmuls else mod["main"]
        mutator.builder_.update_func(mod.get_global_var("main"), mutator.visit_expr(main))
        mod = relax.transform.DeadCodeElimination(["main"])(mutator.builder_.finalize())
    return mod


# Every float op this module computes, one rule each (a target's own in its place: neon_float.py).
RULES = {"relax.matmul": matmul_rule, "relax.nn.softmax": softmax_rule(softmax_func),
         "relax.erf": elementwise_rule(mlas_math.erf, "erf"), "relax.nn.gelu": elementwise_rule(gelu, "gelu"),
         "relax.tanh": elementwise_rule(mlas_math.tanh, "tanh"), "relax.sigmoid": elementwise_rule(mlas_math.logistic, "logistic"),
         "relax.max": _reduce_all("max"),
         "relax.min": _reduce_all("min"), "relax.nn.layer_norm": layer_norm_rule(layer_norm.layer_norm_func),
         "relax.mean": reduce_mean.mean, "relax.nn.adaptive_avg_pool2d": reduce_mean.global_pool}
