"""The quantization semantics the ONNX and TFLite frontends share, written once so that a fix reaches
both: a constant's value, and the value of an op on constants (a table's entries) as a compiled
model computes it; a per-tensor quantization's (scale, zero point); numpy's broadcasting as TE
indices; the NCHW layout the pipeline holds 4-D values in. The integer ops themselves are
arithmetic.py's (onnxruntime's, whose conv2d and dense LiteRT shares, their constants computed by
``arithmetic.linear_constants`` for both) and litert_arithmetic.py's, each written by
``IntegerOp.call``; their requantization is ops/output_stage.py's ``requantize``, which the
tensorized operators' output stage and ops/batch_matmul.py use too.
"""
from __future__ import annotations

import numpy as np
import tvm
from tvm import relax, tirx
from tvm.ir import Constant

from isa_specs import host
from tvm_integration.qnn.prim import schedules
from tvm_integration.qnn.semantics.errors import ModelError

TO_NCHW, TO_NHWC = [0, 3, 1, 2], [0, 2, 3, 1]          # permute_dims axes between the two layouts


def constant(expr) -> np.ndarray | None:
    """The value of a Relax constant, else None."""
    return expr.value.numpy() if isinstance(expr, Constant) else None


def evaluate(emit, rewrite=None, legalize: dict | None = None) -> np.ndarray:
    """The value ``emit(builder)`` computes from constants (an op over every 8-bit value: a table),
    computed as a compiled model computes it, so that the entries are the model's own: ``rewrite``
    applied (the ONNX rewrite, for Q/DQ), the Relax ops legalized (``legalize``: rules of some in place of
    TVM's), every function scheduled (schedules.py) and built for this host."""
    bb = relax.BlockBuilder()
    with bb.function("main", []):
        with bb.dataflow():
            out = bb.emit_output(emit(bb))
        bb.emit_func_output(out)
    mod = relax.transform.LegalizeOps(legalize)(bb.get() if rewrite is None else rewrite(bb.get()))
    for gvar, func in list(mod.functions.items()):
        if isinstance(func, tirx.PrimFunc) and schedules.SCHEDULED not in (func.attrs or {}):
            mod[gvar] = schedules.schedule(func)
    vm = relax.VirtualMachine(tvm.compile(mod, target=tvm.target.Target(host.tvm_target())), tvm.cpu())
    return vm["main"]().numpy()


def per_tensor(what: str, scale: np.ndarray, zero_point: np.ndarray) -> tuple[np.float32, int]:
    """(scale, zero point) of a tensor quantized per tensor; ModelError for one quantized per channel,
    which only weights may be (the integer ops take one scale per activation)."""
    if scale.size != 1 or zero_point.size != 1:
        raise ModelError(f"{what} is quantized per channel; only weights may be")
    return np.float32(scale.reshape(())), int(zero_point.reshape(()))


def broadcast_shape(sa, sb) -> tuple[int, ...]:
    """numpy's broadcast shape of two shapes."""
    sa, sb = [int(d) for d in sa], [int(d) for d in sb]
    n = max(len(sa), len(sb))
    sa, sb = [1] * (n - len(sa)) + sa, [1] * (n - len(sb)) + sb
    return tuple(max(p, q) for p, q in zip(sa, sb))


def broadcast_index(shape, index) -> list:
    """The index into a tensor of ``shape`` that output ``index`` of a broadcasting op reads."""
    offset = len(index) - len(shape)
    return [0 if int(d) == 1 else index[offset + k] for k, d in enumerate(shape)]
