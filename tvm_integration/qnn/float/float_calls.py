"""How a float op's own PrimFunc replaces its Relax call (float_ops.py, reduce_mean.py): the static
shape of an operand, whether the call is on float32 tensors, and the call of the scheduled PrimFunc."""
from __future__ import annotations

from tvm import relax, tirx

from tvm_integration.qnn.prim import prim_calls
from tvm_integration.qnn.prim.schedules import SCHEDULED


def shape_of(expr) -> tuple[int, ...] | None:
    shape = expr.ty.shape if isinstance(expr.ty, relax.TensorType) else None
    if shape is None or not all(isinstance(d, tirx.IntImm) for d in shape):
        return None
    return tuple(int(d) for d in shape)


def float32(call) -> bool:
    return all(isinstance(a.ty, relax.TensorType) and str(a.ty.dtype) == "float32" for a in call.args
               if isinstance(a, relax.Expr) and isinstance(a.ty, relax.TensorType))


def emit(bb: relax.BlockBuilder, func: tirx.PrimFunc, name: str, args, out_shape, dtype="float32", outputs=1):
    """The call of ``func`` (scheduled, added to ``bb``'s module as ``name``) on ``args``; with
    ``outputs`` > 1, a tuple of that many tensors of ``out_shape``."""
    out = [relax.TensorType(out_shape, dtype) for _ in range(outputs)]
    return prim_calls.call(bb, func.with_attr(SCHEDULED, True), name, args, out if outputs > 1 else out[0])
