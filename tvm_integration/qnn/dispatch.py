"""Stage 4, dispatch: every legalized integer conv2d (depthwise included) and dense becomes a call of
the tensorized operator (tvm_integration.ops: the cached, proved kernel inlined; weights packed here,
at compile time; bias, requantize and clamp fused into its output stage); every other PrimFunc gets
a parallel, vectorized schedule (schedules.py). The operators compute the same arithmetic as the
reference they replace (output_stage.ScaleRequantize is MLAS's requantize)."""
from __future__ import annotations

from tvm import relax, tirx

from tvm_integration.ops.conv2d import build_conv2d
from tvm_integration.ops.dense import build_dense
from tvm_integration.output_stage import OutputStage, ScaleRequantize
from tvm_integration.qnn import schedules
from tvm_integration.qnn.integer_op import IntegerOp
from tvm_integration.qnn.legalize import IMPLEMENTATION

TENSORIZED = "qnn.tensorized"


@relax.expr_functor.mutator
class Dispatch(relax.PyExprMutator):
    def __init__(self, mod, isa: str):
        super().__init__(mod)
        self.mod, self.isa = mod, isa

    def run(self):
        for gvar, func in self.mod.functions.items():
            if isinstance(func, relax.Function):
                self.builder_.update_func(gvar, self.visit_expr(func))
        return self.builder_.get()

    def visit_call_(self, call):
        call = super().visit_call_(call)
        op = IntegerOp.read(call, self.mod)
        if op is None or self.mod[call.args[0]].attrs.get(IMPLEMENTATION) != "tensorized":
            return call
        built = self.build(op)
        func = built.mod["main"].with_attrs({TENSORIZED: True, "qnn.op": op.kind})
        gvar = self.builder_.add_func(func, f"qsynth_{op.kind}")
        self.builder_.update_func(gvar, func.with_attr("global_symbol", gvar.name_hint))
        args = [*op.inputs, *[relax.const(c) for c in built.constants]]
        out = self.builder_.emit(relax.call_tir(gvar, args, relax.TensorType(built.out_shape, built.out_dtype)))
        return relax.op.reshape(out, op.out_shape)

    def build(self, op: IntegerOp):
        weight, bias, scale = op.constants
        p = op.params
        stage = OutputStage(bias=bias, requantize=ScaleRequantize(scale, p["out_zero_point"], p["out_dtype"]),
                            clamp=tuple(p["clamp"]))
        data = op.inputs[0].ty
        if op.kind == "dense":
            return build_dense(weight, int(data.shape[0]), str(data.dtype), stage, self.isa)
        return build_conv2d(weight, tuple(int(d) for d in data.shape), "NCHW", tuple(p["strides"]), tuple(p["padding"]),
                            p["groups"], str(data.dtype), stage, self.isa, pad_value=p["x_zero_point"])


def dispatch(mod, isa: str = "host"):
    """Tensorize what legalize marked, then legalize the remaining Relax ops and schedule everything
    that is not a tensorized operator."""
    mod = Dispatch(mod, isa).run()
    mod = relax.transform.LegalizeOps()(mod)
    for gvar, func in list(mod.functions.items()):
        if isinstance(func, tirx.PrimFunc) and not (func.attrs and TENSORIZED in func.attrs):
            mod[gvar] = schedules.schedule(func)
    return mod
