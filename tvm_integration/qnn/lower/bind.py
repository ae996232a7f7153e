"""Stage 4, bind: every legalized integer conv2d (depthwise included) and dense becomes a call of
the tensorized operator (tvm_integration.ops: the cached, proved kernel inlined; weights packed here,
at compile time; bias, requantize and clamp fused into its output stage); every other PrimFunc gets
a parallel, vectorized schedule (schedules.py). The operators compute the same arithmetic as the
reference they replace (ops/output_stage.py's ScaleRequantize is MLAS's requantize).

A quantized add whose operand is a tensorized convolution that nothing else reads is fused into that
convolution's output stage (ops/output_stage.py's ResidualAdd: ResNet's and MobileNetV2's residual adds): the
convolution is emitted at the add, reading the other operand, and its own result is never written.

Layout is decided here: activations between tensorized convolutions stay NHWC (channels innermost:
what the operators pack from and write, and what adds, muls, lookups, pools, concatenations and
resizes vectorize along). An NHWC tensor is
given an NCHW view (a transpose) only where an op needs the model's layout; the views nothing reads
are removed with the rest of the dead code.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import replace

import tvm
from tvm import relax, tirx

from tvm_integration.kernels import selection
from tvm_integration.kernels import neon_int8 as neon_kernels
from tvm_integration.ops import neon_batch_matmul
from tvm_integration.ops import neon_gemm as neon_ops
from tvm_integration.ops.batch_matmul import Operand, build_batch_matmul
from tvm_integration.ops.conv2d import build_conv2d
from tvm_integration.ops.dense import build_dense
from tvm_integration.ops.output_stage import OutputStage, ResidualAdd, requantization
from tvm_integration.qnn.float import float_ops, neon_float, reduce_mean
from tvm_integration.qnn.lower import bitserial_layer, one_tensor_mul
from tvm_integration.qnn.prim import prim_calls, schedules
from tvm_integration.qnn.semantics.errors import ModelError
from tvm_integration.qnn.semantics.integer_op import IntegerOp
from tvm_integration.qnn.semantics.quant import TO_NCHW, TO_NHWC

# the quantized adds, each with the form a build for Arm computes it in (output_stage.qlinear_add): a QDQ Add
# as ONNX defines it, onnxruntime's QLinearAdd (com.microsoft) as its AArch64 kernel does
ADDS = {"add": "defined", "qlinear_add": "neon"}
LAYOUT_FREE = (*ADDS, "mul", "lookup", "tflite_add", "tflite_mul")  # elementwise, broadcasting: any layout, no layout parameter
NHWC_OPS = (*LAYOUT_FREE, "max_pool2d", "avg_pool2d", "global_avg_pool", "gather",   # computed in NHWC when
            "tflite_mean")                                                           # their inputs are


class Binder:
    """Rebuilds ``main`` binding by binding: ``value`` maps each old variable to its new NCHW value,
    ``nhwc`` to its NHWC value where one exists."""

    def __init__(self, mod, isa: str, mcpu: str | None = None):
        self.mod, self.isa, self.mcpu = mod, isa, mcpu     # mcpu: the AArch64 core of isa "neon"
        self.builder = relax.BlockBuilder(tvm.IRModule({g: f for g, f in mod.functions.items() if g.name_hint != "main"}))
        self.value, self.nhwc = {}, {}
        self.deferred = {}          # convolution var -> its op, to be emitted with the add that reads it

    def run(self):
        main = self.mod["main"]
        blocks = main.body.blocks
        if len(blocks) != 1 or not isinstance(blocks[0], relax.DataflowBlock):
            raise ModelError("the imported model's main function is not one dataflow block (control flow?)")
        self.ops = {b.var: IntegerOp.read(b.value, self.mod) for b in blocks[0].bindings}
        uses = _uses(blocks[0].bindings, main.body.body)
        self.fusable = self.residual_convolutions(uses)
        self.pooled = self.pooled_dequantizes(blocks[0].bindings, uses)
        # a matmul of activations reads its operands in the model's layout (an attention's probabilities)
        self.matmul_operands = {i for op in self.ops.values() if op is not None and op.kind == "batch_matmul"
                                for i in op.inputs}
        with self.builder.function("main", list(main.params), dict(main.attrs) if main.attrs else None):
            with self.builder.dataflow():
                for binding in blocks[0].bindings:
                    self.bind(binding)
                out = self.builder.emit_output(self.substitute(main.body.body))
            self.builder.emit_func_output(out)
        return self.builder.get()

    def substitute(self, expr):
        """``expr`` of the old ``main`` over the new one's variables. Every kind of expression that
        holds a variable is rebuilt: one left out keeps an old variable that the new function never
        binds (a TupleGetItem, ``lv[0]``: a Split's outputs, a BatchNormalization's result; VM codegen
        then fails with "Var lv.. is not defined")."""
        if isinstance(expr, relax.Var):
            return self.value.get(expr, expr)
        if isinstance(expr, relax.TupleGetItem):
            return relax.TupleGetItem(self.substitute(expr.tuple_value), expr.index)
        if isinstance(expr, relax.Tuple):
            return relax.Tuple([self.substitute(f) for f in expr.fields])
        if isinstance(expr, relax.Call):
            return relax.Call(expr.op, [self.substitute(a) for a in expr.args], expr.attrs, expr.ty_args)
        return expr

    def nhwc_of(self, var):
        if var not in self.nhwc:
            self.nhwc[var] = self.builder.emit(relax.op.permute_dims(self.substitute(var), TO_NHWC))
        return self.nhwc[var]

    def residual_convolutions(self, uses: Counter) -> set:
        """The tensorized convolutions whose only reader is a quantized add of two tensors."""
        def requantized_convolution(var):
            op = self.ops.get(var)
            return (op is not None and op.kind == "conv2d" and op.tensorized and not op.depthwise
                    and len(op.constants) == 3)           # weight, bias, scale: a requantized result
        return {i for op in self.ops.values() if op is not None and op.kind in ADDS and len(op.inputs) == 2
                for i in op.inputs if uses[i] == 1 and requantized_convolution(i)}

    def pooled_dequantizes(self, bindings, uses: Counter) -> set:
        """The per-tensor dequantizes of 4-D tensors whose only reader is a float mean over H and W (a
        squeeze-and-excitation's pooling, reduce_mean.mean): computed NHWC, as their image is held."""
        means = Counter(b.value.args[0] for b in bindings if isinstance(b.value, relax.Call)
                        and b.value.op == tvm.ir.Op.get("relax.mean") and isinstance(b.value.args[0], relax.Var))
        return {var for var, op in self.ops.items() if op is not None and op.kind == "dequantize"
                and len(op.out_shape) == 4 and means[var] == uses[var] > 0}

    def bind(self, binding):
        """``binding`` by the rule of its op's kind (BY_KIND), or of a Relax op (``moved``); where the
        rule leaves it (False), the op as it is: its reference computation, in the model's layout."""
        var, value = binding.var, binding.value
        op = self.ops[var]
        bound = self.moved(var, value) if op is None else BY_KIND.get(op.kind, Binder.as_is)(self, var, op)
        if not bound:
            self.value[var] = self.builder.emit(self.substitute(value))

    def as_is(self, var, op: IntegerOp) -> bool:
        return False

    def linear(self, var, op: IntegerOp) -> bool:
        """A conv2d or dense on the operator legalize.py chose: tensorized (deferred to the add it is
        fused into, fused_add) or bitserial."""
        if op.tensorized and var in self.fusable:
            self.deferred[var] = op
        elif op.tensorized:
            self.tensorized(var, op)
        elif op.bitserial:
            bitserial_layer.emit(self, var, op)
        else:
            return False
        return True

    def add(self, var, op: IntegerOp) -> bool:
        """Fused into the convolution it reads (fused_add), else as any op computed in NHWC. On neon a
        QDQ Add computes the ONNX definition (``defined``), onnxruntime's QLinearAdd its AArch64 kernel
        (``neon``; arm_reference.py), wherever it is emitted."""
        if self.isa != "neon" or "quant" not in op.params:
            return self.fused_add(var, op) or self.in_nhwc(var, op)
        op = replace(op, params={**op.params, ADDS[op.kind]: op.params["quant"]})
        if not (self.fused_add(var, op) or self.in_nhwc(var, op)):
            self.reference(var, op)
        return True

    def mul(self, var, op: IntegerOp) -> bool:
        """As any op computed in NHWC; on neon in AArch64's form (``neon``: arithmetic.mul as onnxruntime's
        AArch64 kernel computes it, litert_arithmetic.mul's int16 lanes), wherever it is emitted. A mul of two
        functions of one tensor (SiLU) is one lookup of that tensor instead (one_tensor_mul.py)."""
        neon = self.isa == "neon"
        if (lookup := one_tensor_mul.folded(op, self.ops, neon)) is not None:
            op = lookup
        elif neon:
            op = replace(op, params={**op.params, "neon": True})
        if not self.in_nhwc(var, op):
            self.reference(var, op)
        return True

    def max_pool(self, var, op: IntegerOp) -> bool:
        """As any op computed in NHWC; on neon its taps outside the input read clamped (arithmetic.max_pool2d's
        ``clamped``: the same max, no select)."""
        if self.isa != "neon":
            return self.in_nhwc(var, op)
        op = replace(op, params={**op.params, "clamped": True})
        if not self.in_nhwc(var, op):
            self.reference(var, op)
        return True

    def runtime(self, var, op: IntegerOp) -> bool:
        """A QLinearAdd or QLinearMul of scales fed at run time: on neon as onnxruntime's AArch64 kernel computes
        it, its parameters computed in the kernel (arithmetic.add_runtime's and mul_runtime's ``neon``);
        elsewhere as it is."""
        if self.isa != "neon":
            return False
        self.reference(var, replace(op, params={**op.params, "neon": True}))
        return True

    def reference(self, var, op: IntegerOp):
        """``op``'s reference computation on the new variables, in the model's layout."""
        inputs = tuple(x if isinstance(x, relax.Var) else self.builder.emit(x) for x in map(self.substitute, op.inputs))
        self.value[var] = replace(op, inputs=inputs).emit_reference(self.builder)

    def quantize(self, var, op: IntegerOp) -> bool:
        """An image's quantize, in NHWC, unless a matmul of activations reads it in the model's layout."""
        if len(op.out_shape) != 4 or var in self.matmul_operands:
            return False
        inputs = tuple(self.substitute(i) for i in op.inputs)
        self.set_nhwc(var, replace(op, inputs=inputs, params={**op.params, "layout": "NHWC"}).emit_reference(
            self.builder))
        return True

    def dequantize(self, var, op: IntegerOp) -> bool:
        """A dequantize that a float mean over H and W pools (pooled_dequantizes), in NHWC."""
        if var not in self.pooled or op.inputs[0] not in self.nhwc:
            return False
        self.set_nhwc(var, replace(op, inputs=(self.nhwc[op.inputs[0]],)).emit_reference(self.builder))
        return True

    def in_nhwc(self, var, op: IntegerOp) -> bool:
        """An op of NHWC_OPS whose inputs are all NHWC images, computed in NHWC. A constant indexed by
        position (an add's constant operand) is in the model's layout; a lookup's table is indexed by
        value. Inputs of four axes each broadcast in NHWC as in NCHW (a squeeze-and-excitation's
        [1, C, 1, 1] scale times its image: no transposes around it)."""
        if not (all(i in self.nhwc for i in op.inputs) and
                (op.kind in ("lookup", "gather") or all(c.size == 1 for c in op.constants)) and
                all(len(i.ty.shape) == 4 for i in op.inputs)):
            return False
        inputs = tuple(self.nhwc[i] for i in op.inputs)
        params = op.params if op.kind in LAYOUT_FREE else {**op.params, "layout": "NHWC"}
        result = replace(op, inputs=inputs, params=params).emit_reference(self.builder)
        if len(op.out_shape) == 4:
            self.set_nhwc(var, result)
        else:                   # a reduction to [b, c] (a MEAN without keepdims): no layout left
            self.value[var] = self.builder.emit(result)
        return True

    def moved(self, var, value) -> bool:
        """A Relax op that is no integer op: a change of layout without a transpose where ``relayout`` finds
        one, else in NHWC where nhwc_movement moves it."""
        if self.relayout(var, value):
            return True
        if (moved := self.nhwc_movement(value)) is None:
            return False
        self.set_nhwc(var, moved)
        return True

    def relayout(self, var, value) -> bool:
        """A transpose between the two layouts that undoes one already held: the NCHW view of a tensor
        (the TFLite importer's of its NHWC input) has that tensor as its NHWC value, and the NHWC view of
        a tensor held in NHWC (the importer's, before a flatten or a reshape) is that value. Each was a
        transpose back (MobileNetV2's 224x224x3 input: two, 0.3 Mcycles on Cortex-A76's N1 model)."""
        if not (isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op) and
                value.op.name == "relax.permute_dims" and value.attrs.axes is not None):
            return False
        axes, x = [int(a) for a in value.attrs.axes], value.args[0]
        if axes == TO_NCHW:
            self.set_nhwc(var, self.substitute(x))
        elif axes == TO_NHWC and x in self.nhwc:
            self.value[var] = self.nhwc[x]
        else:
            return False
        return True

    def nhwc_movement(self, value):
        """A concat along the channels, a resize, or a float mean over H and W (reduce_mean.mean) of
        tensors that are NHWC already, in NHWC; else None."""
        if not (isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op)):
            return None
        if value.op.name == "relax.mean" and value.args[0] in self.pooled and value.args[0] in self.nhwc:
            pairs = reduce_mean.NEON_PAIRS if self.isa == "neon" else reduce_mean.SSE_PAIRS
            return reduce_mean.mean(self.builder, value, self.nhwc[value.args[0]], pairs)
        if value.op.name == "relax.concat" and isinstance(value.args[0], relax.Tuple):
            fields = value.args[0].fields
            if all(f in self.nhwc and len(f.ty.shape) == 4 for f in fields) and int(value.attrs.axis) % 4 == 1:
                return relax.op.concat([self.nhwc[f] for f in fields], axis=3)
        if value.op.name == "relax.image.resize2d" and value.args[0] in self.nhwc and str(value.attrs.layout) == "NCHW":
            a = value.attrs
            return relax.op.image.resize2d(
                self.nhwc[value.args[0]], value.args[1], [float(r) for r in a.roi], "NHWC", str(a.method),
                str(a.coordinate_transformation_mode), str(a.rounding_method), float(a.cubic_alpha), int(a.cubic_exclude),
                float(a.extrapolation_value), a.out_dtype)
        return None

    def set_nhwc(self, var, nhwc_value):
        self.nhwc[var] = nhwc_value if isinstance(nhwc_value, relax.Var) else self.builder.emit(nhwc_value)
        self.value[var] = self.builder.emit(relax.op.permute_dims(self.nhwc[var], TO_NCHW))

    def fused_add(self, var, add: IntegerOp) -> bool:
        """``add`` of a deferred convolution (the later one when both operands are) and a tensor of
        its shape, emitted as the convolution with the add in its output stage; False (the deferred
        convolutions emitted on their own) when the other operand has another shape (a broadcast)."""
        deferred = [i for i, x in enumerate(add.inputs) if x in self.deferred]
        if not deferred:
            return False
        operand = deferred[-1]
        conv_var, other = add.inputs[operand], add.inputs[1 - operand]
        for x in add.inputs[:operand]:
            if x in self.deferred:
                self.tensorized(x, self.deferred.pop(x))
        conv = self.deferred.pop(conv_var)
        if tuple(int(d) for d in other.ty.shape) != conv.out_shape:
            self.tensorized(conv_var, conv)
            return False
        p = add.params
        residual = ResidualAdd(p["ratio_a"], p["ratio_b"], p["fixed"], p["out_dtype"], tuple(p["clamp"]), operand,
                               str(other.ty.dtype), **{form: tuple(p[form]) for form in ADDS.values() if form in p})
        self.tensorized(var, conv, residual, self.nhwc_of(other))
        return True

    def batch_matmul(self, var, op: IntegerOp) -> bool:
        """A matmul of two activations on the tiles (ops/batch_matmul.py; on neon
        ops/neon_batch_matmul.py, the core's NEON tile): the row and column zero-point terms, then the
        tensorized product, reading each operand through its transpose."""
        p = op.params
        a, b = (self.substitute(i) for i in op.inputs)
        operands = [Operand(tuple(int(d) for d in x.ty.shape), str(x.ty.dtype), tuple(axes) or None)
                    for x, axes in ((a, p["a_axes"]), (b, p["b_axes"]))]
        args = (*operands, p["a_zero_point"], p["b_zero_point"], p["scale"], p["out_zero_point"], p["out_dtype"],
                tuple(p["clamp"]))
        built = neon_batch_matmul.build_batch_matmul(*args, mcpu=self.mcpu) if self.isa == "neon" \
            else build_batch_matmul(*args, self.isa)
        def call(name, args, out):
            func = built.mod[name].with_attrs({schedules.TENSORIZED: True, "qnn.op": "batch_matmul"})
            symbol = "qsynth_batch_matmul" + ("" if name == "main" else "_" + name)
            return self.builder.emit(prim_calls.call(self.builder, func, symbol, args, out))
        groups, m, n = built.out_shape
        rows = call("row_terms", [a], relax.TensorType((groups, m), "int32"))
        cols = call("col_terms", [b], relax.TensorType((groups, n), "int32"))
        out = call("main", [a, b, rows, cols], relax.TensorType(built.out_shape, built.out_dtype))
        self.value[var] = self.reshaped(out, built.result_shape)
        return True

    def reshaped(self, value: relax.Var, shape) -> relax.Var:
        """``value`` reshaped to ``shape``, or ``value`` itself where it has that shape already: the VM
        makes a call for every reshape, identity or not (31 per ResNet-18 inference, most of them
        an operator's NHWC output to the same NHWC shape)."""
        if [int(d) for d in value.ty.shape] == [int(d) for d in shape]:
            return value
        return self.builder.emit(relax.op.reshape(value, shape))

    def tensorized(self, var, op: IntegerOp, residual: ResidualAdd | None = None, residual_value=None):
        weight, bias, *scale = op.constants            # no scale: the int32 accumulator (ConvInteger)
        p = op.params
        stage = OutputStage(bias=bias, requantize=requantization(scale[0], p["out_zero_point"], p["out_dtype"])
                            if scale else None,
                            clamp=tuple(p["clamp"]), residual=residual)
        x = op.inputs[0]
        neon = self.isa == "neon"           # AArch64: ops/neon_gemm.py for the core self.mcpu
        if op.kind == "dense":
            built = neon_ops.build_dense(weight, int(x.ty.shape[0]), str(x.ty.dtype), stage, mcpu=self.mcpu) if neon \
                else build_dense(weight, int(x.ty.shape[0]), str(x.ty.dtype), stage, self.isa)
            data = self.substitute(x)
        elif neon:
            data = self.nhwc_of(x)
            built = neon_ops.build_conv2d(weight, tuple(int(d) for d in data.ty.shape), tuple(p["strides"]),
                                          tuple(p["padding"]), p["groups"], str(x.ty.dtype), stage, mcpu=self.mcpu,
                                          pad_value=p["x_zero_point"])
        else:
            data = self.nhwc_of(x)
            built = build_conv2d(weight, tuple(int(d) for d in data.ty.shape), "NHWC", tuple(p["strides"]),
                                 tuple(p["padding"]), p["groups"], str(x.ty.dtype), stage, self.isa,
                                 pad_value=p["x_zero_point"])
        func = built.mod["main"].with_attrs({schedules.TENSORIZED: True, "qnn.op": op.kind})
        args = [data, *[relax.const(c) for c in built.constants]]
        if residual is not None:
            args.append(self.reshaped(residual_value, built.out_shape))
        out = self.builder.emit(prim_calls.call(self.builder, func, "qsynth_depthwise" if op.depthwise else
                                                f"qsynth_{op.kind}", args,
                                                relax.TensorType(built.out_shape, built.out_dtype)))
        result = self.reshaped(out, built.result_shape)
        if op.kind == "dense":
            self.value[var] = result
        else:
            self.set_nhwc(var, result)


# Each integer op's rule, by kind: fusion (linear, add), target (batch_matmul, mul, the run-time adds and muls),
# layout (the rest). An add and a mul are in NHWC_OPS but first apply their rules.
BY_KIND = {**{kind: Binder.in_nhwc for kind in NHWC_OPS}, "conv2d": Binder.linear, "dense": Binder.linear,
           "batch_matmul": Binder.batch_matmul, **{kind: Binder.add for kind in ADDS}, "mul": Binder.mul,
           "tflite_mul": Binder.mul, "max_pool2d": Binder.max_pool, "qlinear_add_runtime": Binder.runtime,
           "qlinear_mul_runtime": Binder.runtime, "quantize": Binder.quantize, "dequantize": Binder.dequantize}


def _uses(bindings, output) -> Counter:
    """How many times each variable is read by ``bindings`` and ``output``."""
    uses = Counter()

    def count(expr):
        if isinstance(expr, relax.Var):
            uses[expr] += 1
        elif isinstance(expr, (relax.Tuple, relax.Call)):
            for e in (expr.fields if isinstance(expr, relax.Tuple) else expr.args):
                count(e)
    for binding in bindings:
        count(binding.value)
    count(output)
    return uses


def model_target(isa: str = "host", mcpu: str | None = None) -> dict:
    """The target a model is built with: the int8 tile's (selection.py), or for ``neon`` AArch64 for
    the core ``mcpu`` with the features of its NEON tile (ValueError for a core LLVM does not know)."""
    if isa == "neon":
        return neon_kernels.neon_target(mcpu, neon_kernels.tile_for(mcpu))
    return selection.int8_target(selection.int8_kernel(isa))


def bind(mod, isa: str = "host", mcpu: str | None = None):
    """Tensorize what legalize marked, then legalize the remaining Relax ops and schedule everything
    that is not a tensorized operator for the target the model is built with (as compile_model)."""
    target = tvm.target.Target(model_target(isa, mcpu))
    mod = Binder(mod, isa, mcpu).run()
    mod = relax.transform.DeadCodeElimination(["main"])(mod)
    # float ops as onnxruntime computes them: its x86 kernels (float_ops.py), on Arm its AArch64 build's
    floats = neon_float if isa == "neon" else float_ops
    mod = floats.onnxruntime_fusions(mod)
    mod = relax.transform.LegalizeOps(floats.legalize_map())(mod)
    for gvar, func in list(mod.functions.items()):
        if isinstance(func, tirx.PrimFunc) and not (func.attrs and (schedules.TENSORIZED in func.attrs or
                                                                    schedules.SCHEDULED in func.attrs)):
            mod[gvar] = schedules.schedule(func, target)
    return mod

