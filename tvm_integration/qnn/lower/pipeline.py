"""One lowering for every format and target. A frontend (importer.py then rewrite.py for ONNX,
tflite/importer.py for TFLite) reads its format into integer ops (integer_op.py) and float Relax ops;
from there ONNX and TFLite, x86 and Arm take the same steps, so a fix to one reaches all of them.
The module is then built for ``bind.model_target``, the target bind.py scheduled it for.
"""
from __future__ import annotations

from tvm import relax

from tvm_integration.qnn.lower import bind, legalize

STAGES = ("legalize", "bind")


def lower(mod, target: str = "host", mcpu: str | None = None, stage: str = "bind", lowbit: str = "fastest"):
    """A frontend's Relax module after ``stage``: legalized for ``target`` (host, an ISA of
    ``selection.INT8_ISAS`` or neon; ``lowbit``: the 1-3-bit layers' operator, legalize.py), then bound
    (for the AArch64 core ``mcpu`` on neon) with what no function reads removed."""
    if stage not in STAGES:
        raise ValueError(f"stage must be one of {STAGES}, got {stage!r}")
    mod = legalize.legalize(mod, target, lowbit)
    if stage == "legalize":
        return mod
    return relax.transform.DeadCodeElimination(["main"])(bind.bind(mod, target, mcpu))
