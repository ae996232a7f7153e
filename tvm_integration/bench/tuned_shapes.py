"""The int8 tile shapes of a model as the QNN pipeline compiles it (every tensorized conv2d and dense),
their tuning-log keys, and how many of them this host's log covers: what scripts/tune_layers.py tunes,
and what a benchmark row says of itself (a shape missing from the log takes the untuned rule,
kernels/tuning.py ``least_padding``, so a table that mixes tuned and untuned rows must say which)."""
from __future__ import annotations

from pathlib import Path

from tvm_integration.kernels import selection, tuning
from tvm_integration.ops.conv2d import conv_geometry, pair
from tvm_integration.qnn.lower.legalize import signed


def shapes(path: str | Path) -> list[tuple[str, tuple]]:
    """(kind, arguments) of every tensorized op of the ONNX or TFLite model at ``path``, as its frontend reads
    it (runtime/model.py ``read``, what ``compile_model`` lowers) and qnn/lower/bind.py builds them:
    ("dense", (weight, rows, dtype)) or ("conv2d", (weight, NHWC shape, strides, padding, groups, dtype))."""
    from tvm_integration.qnn.lower import pipeline
    from tvm_integration.qnn.runtime.model import read
    from tvm_integration.qnn.semantics.integer_op import IntegerOp
    mod = pipeline.lower(read(path)[0], stage="legalize")
    found = []
    for binding in mod["main"].body.blocks[0].bindings:
        op = IntegerOp.read(binding.value, mod)
        if op is None or not op.tensorized or op.depthwise:       # depthwise: no tile
            continue
        x = op.inputs[0].ty
        shape = tuple(int(d) for d in x.shape)
        weight = op.constants[0]
        if op.kind == "dense":
            found.append(("dense", (weight, shape[0], str(x.dtype))))
        else:
            nhwc = (shape[0], shape[2], shape[3], shape[1])
            found.append(("conv2d", (weight, nhwc, tuple(op.params["strides"]), tuple(op.params["padding"]),
                                     op.params["groups"], str(x.dtype))))
    return found


def key_of(kind: str, args: tuple) -> str:
    """The tuning log's key of a shape of ``shapes``, as the operator looks it up."""
    if kind == "dense":
        weight, m, dtype = args
        return tuning.dense_key(m, weight.shape[0], weight.shape[1], dtype)
    weight, shape, stride, padding, groups, dtype = args
    _, _, pads = conv_geometry(shape, "NHWC", weight.shape, pair(stride), padding)
    return tuning.conv2d_key(shape, "NHWC", weight.shape, pair(stride), pads, groups, dtype)


def candidates(kind: str, args: tuple) -> list:
    """The host's tiles the operator of a shape of ``shapes`` chooses among (its weights admit them)."""
    weight = signed(args[0])
    groups = 1 if kind == "dense" else args[4]
    return selection.candidates_for(weight, "host", groups)


def coverage(path: str | Path, log: Path | None = None) -> dict:
    """How many of the (ONNX or TFLite) model's distinct tile shapes this host's tuning log (or ``log``)
    chooses the tile of: it holds the shape and timed a tile the shape's weights admit."""
    log = log or tuning.host_log()
    by_key = {key_of(kind, args): (kind, args) for kind, args in shapes(path)}
    tuned = sum(tuning.logged(key, candidates(*shape), log) is not None for key, shape in by_key.items())
    return {"log": log.name, "shapes": len(by_key), "tuned": tuned}


def label(covered: dict | None) -> str:
    """A table cell: tuned, partly (k/n), untuned, no int8 tile; "-" when the row did not record it."""
    if not covered:
        return "-"
    shapes, tuned = covered["shapes"], covered["tuned"]
    return ("no int8 tile" if shapes == 0 else "tuned" if tuned == shapes else "untuned" if tuned == 0
            else f"partly ({tuned}/{shapes})")
