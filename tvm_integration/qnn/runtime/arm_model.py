"""A model compiled for AArch64 (``compile_model(path, target="neon", mcpu=...)``): every integer conv2d
and dense on the NEON int8 operators (ops/neon_gemm.py), its low-bit layers on the NEON bitserial
operators (qnn/lower/bitserial_layer.py), the rest scheduled for the core.

    model = compile_model("resnet_int8.onnx", target="neon", mcpu="cortex-a53")
    outputs = model({"input": x})        # exported with the cross gcc, run under qemu-aarch64
    model.save("resnet_int8.so")         # an AArch64 library (+ .so.json), for TVM's aarch64 runtime

The library is exported and run by qemu/cross_model.py: TVM's own AArch64 runtime (the registry's
aarch64 wheels) drives the Relax VM under qemu, no Python on the Arm side. It is never loaded in this
process, and not timed here: qemu's speed says nothing of the core's (``time`` and ``profile`` refuse).
"""
from __future__ import annotations

import shutil
import tempfile
import weakref
from pathlib import Path

import numpy as np

from tvm_integration.qemu import cross_model
from tvm_integration.qnn.runtime import arm_reference
from tvm_integration.qnn.runtime.model import CompiledModel
from tvm_integration.qnn.semantics.errors import ModelError


class ArmModel(CompiledModel):
    """CompiledModel's interface (inputs, outputs, ``model(feeds)``, ``save``, ``signature``) for an
    AArch64 executable."""

    def __init__(self, executable, inputs: dict, outputs: list[str], target: dict, threads: int | None = None,
                 library: Path | None = None, op_kinds: list[str] | None = None):
        self.executable, self.target, self.library = executable, target, library
        self.op_kinds = op_kinds        # the model's op kinds (arm_reference.kinds), None when not recorded
        self.inputs = {name: (tuple(shape), dtype) for name, (shape, dtype) in inputs.items()}
        self.outputs = list(outputs)
        self.threads = threads
        self._runner = None

    @staticmethod
    def load(path: str | Path, threads: int | None = None, signature: dict | None = None) -> "ArmModel":
        """The AArch64 library at ``path`` with ``signature`` (default: read from ``path`` + ``.json``), as
        ``save`` wrote them; run from there, never loaded into this process."""
        path = Path(path)
        if signature is None:
            signature = CompiledModel.signature_of(path)
        return ArmModel(None, {n: (tuple(s), d) for n, (s, d) in signature["inputs"].items()}, signature["outputs"],
                        signature.get("target"), threads, path, signature.get("op_kinds"))

    def signature(self) -> dict:
        return {**super().signature(), "target": self.target, "op_kinds": self.op_kinds}

    def inexact(self) -> list[arm_reference.Kind]:
        """The op kinds of this model not known to be exact against their reference (arm_reference.py)."""
        return arm_reference.inexact(self.op_kinds or [])

    def export(self, library: str | Path) -> None:
        """The AArch64 library alone at ``library``, linked with the cross gcc (a copy of it, once loaded or
        once run: exporting generates the code again, 3.8 s of CPU for a small ResNet)."""
        if self.executable is None:
            shutil.copyfile(self.library, library)
        elif self._runner is not None:
            shutil.copyfile(self._runner.library, library)
        else:
            cross_model.export(self.executable, library)

    def runner(self) -> cross_model.CrossModel:
        """The library under qemu (a loaded one from where it is, a compiled one exported once into a temporary
        directory of its own; RuntimeError, one line, when qemu, the cross gcc or the AArch64 runtime is missing)."""
        if self._runner is None:
            if (why := cross_model.missing_tools()) is not None:
                raise RuntimeError(f"cannot run an AArch64 model here: {why}")
            library = self.library
            if library is None:
                folder = Path(tempfile.mkdtemp(prefix="qsynth-arm-model-"))
                weakref.finalize(self, shutil.rmtree, folder, True)
                library = folder / "model.so"
                self.export(library)
            self._runner = cross_model.CrossModel(library)
        return self._runner

    def __call__(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return self.each([feeds])[0]

    def each(self, feeds: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
        """``model(f)`` for each ``f`` of ``feeds``, all run by one qemu process (a start costs about 2.4 s
        of CPU)."""
        options = ("-E", f"TVM_NUM_THREADS={self.threads}") if self.threads else ()
        results = self.runner().each([self.checked(f) for f in feeds], qemu_options=options)
        if any(len(r) != len(self.outputs) for r in results):
            raise ModelError(f"the AArch64 model gave {[len(r) for r in results]} outputs, expected "
                             f"{len(self.outputs)}")
        return [dict(zip(self.outputs, r)) for r in results]

    def time(self, feeds, repeat: int = 10) -> float:
        raise ModelError("an AArch64 model runs under qemu, whose speed is not the core's: it is not timed "
                         "(estimated cycles: qsynth bench-model --target neon, tvm_integration/bench/mca.py)")

    def profile(self, feeds, repeat: int = 5):
        raise ModelError("an AArch64 model runs under qemu, whose speed is not the core's: --profile does not "
                         "apply to --target neon")
