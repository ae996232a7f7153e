"""One integer op of the rewritten graph, read back from its ``call_tir``: what legalize.py and
bind.py work on. rewrite.py writes an op as a call of its arithmetic.py computation whose
PrimFunc attributes hold the kind (``qnn.op``) and the scalar parameters (``qnn.<name>``), and
whose constant arguments hold the tensors (weights, folded bias, scales)."""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import tvm
from tvm import relax
from tvm.ir import Constant, Op

from tvm_integration.qnn.prim import gather
from tvm_integration.qnn.semantics import arithmetic, qlinear_softmax, litert_arithmetic

COMPUTATIONS = {"conv2d": arithmetic.conv2d, "dense": arithmetic.dense, "batch_matmul": arithmetic.batch_matmul,
                "add": arithmetic.add, "qlinear_add": arithmetic.add,
                "qlinear_add_runtime": arithmetic.add_runtime, "mul": arithmetic.mul,
                "qlinear_mul_runtime": arithmetic.mul_runtime,
                "lookup": arithmetic.lookup, "global_avg_pool": arithmetic.global_avg_pool, "max_pool2d": arithmetic.max_pool2d,
                "avg_pool2d": arithmetic.avg_pool2d, "gather": gather.gather,
                "quantize": arithmetic.quantize, "dequantize": arithmetic.dequantize,
                **litert_arithmetic.COMPUTATIONS, **qlinear_softmax.COMPUTATIONS}
LINEAR = ("conv2d", "dense")
# parameters that describe an op (for legalize.py, bind.py, qsynth inspect), not its computation
DESCRIPTIVE = ("x_range", "w_range", "layer", "abits", "wbits", "encoding", "w_low", "lowbit",
               "quant",     # an add's (sa, za, sb, zb, sc, zc), which bind.py makes ``defined`` or ``neon`` on Arm
               "runtime_ops")   # a lookup's: the float ops of its table computed as the target's onnxruntime build does
IMPLEMENTATION = "qnn.implementation"     # legalize.py's verdict: "tensorized", or why the reference stays


def _python(value):
    if isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, np.dtype) or type(value).__name__ == "dtype":
        return str(value)
    return [_python(v) for v in value]


@dataclass(frozen=True)
class IntegerOp:
    kind: str
    params: dict           # the computation's keyword arguments
    inputs: tuple          # the Relax arguments that are not constants (activations)
    constants: tuple       # numpy arrays, after the inputs, in the computation's order
    out_shape: tuple
    out_dtype: str
    implementation: str = ""   # set by legalize.py for conv2d and dense

    @staticmethod
    def read(call, mod) -> "IntegerOp | None":
        """The op ``call`` is, or None when it is not a call_tir of a rewritten integer op."""
        if not (isinstance(call, relax.Call) and isinstance(call.op, Op) and call.op.name == "relax.call_tir"):
            return None
        func = mod[call.args[0]]
        if not isinstance(func, tvm.tirx.PrimFunc) or func.attrs is None or "qnn.op" not in func.attrs:
            return None
        params = {k[4:]: _python(v) for k, v in func.attrs.items()
                  if k.startswith("qnn.") and k not in ("qnn.op", IMPLEMENTATION)}
        args = list(call.args[1].fields)
        constants = tuple(a.value.numpy() for a in args if isinstance(a, Constant))
        inputs = tuple(a for a in args if not isinstance(a, Constant))
        ty = call.ty
        return IntegerOp(str(func.attrs["qnn.op"]), params, inputs, constants,
                         tuple(int(d) for d in ty.shape), str(ty.dtype), str(func.attrs.get(IMPLEMENTATION, "")))

    @staticmethod
    def call(builder, kind: str, inputs, constants=(), **params):
        """The reference call of a new op ``kind`` on ``inputs``: how the ONNX rewrite, the TFLite
        importer and channels.py write an op (its shape is known once the call is)."""
        return IntegerOp(kind, params, tuple(inputs), tuple(constants), (), "").emit_reference(builder)

    @property
    def tensorized(self) -> bool:
        return self.implementation == "tensorized"

    @property
    def bitserial(self) -> bool:
        """legalize.py chose the bitserial operators (precision.py): ``abits``, ``wbits``, ``encoding``."""
        return self.implementation == "bitserial"

    @property
    def depthwise(self) -> bool:
        """A conv2d with one input and one output channel per group."""
        weight = self.constants[0]
        return self.kind == "conv2d" and self.params["groups"] == weight.shape[0] and weight.shape[1] == 1

    def with_constants(self, *constants, **params) -> "IntegerOp":
        return replace(self, constants=tuple(constants), params={**self.params, **params})

    def emit_reference(self, builder):
        """The call of the op's reference computation (TE, TVM's default schedule until bind)."""
        attrs = {"qnn.op": self.kind, **{"qnn." + k: v for k, v in self.params.items()}}
        if self.implementation:
            attrs[IMPLEMENTATION] = self.implementation
        computed = {k: v for k, v in self.params.items() if k not in DESCRIPTIVE}
        return builder.call_te(COMPUTATIONS[self.kind], *self.inputs, *[relax.const(c) for c in self.constants],
                               **computed, primfunc_attrs=attrs, primfunc_name_hint="qnn_" + self.kind)
