"""LiteRT's AArch64 build running a TFLite model under qemu-aarch64: the stated reference of a TFLite model
built for Arm (qnn/runtime/arm_reference.py), as ort_aarch64.py runs onnxruntime's for ONNX models.

``runtime()`` takes ``libLiteRt.so`` (LiteRT's C library; no Python in it) from the registry's aarch64
wheel of the ai-edge-litert version this host runs, once, into the private folder
``$XDG_CACHE_HOME/qsynth/aarch64-ai-edge-litert<version>/``; ``driver`` links qemu/litert_driver.c against it
with the cross gcc; both are checked before every use (qemu/wheels.py). ``run`` runs a model's first
signature on the CPU accelerator (XNNPACK, as the Python Interpreter's default resolver) as a given core:
qemu's ``-cpu`` sets the features LiteRT's kernel choice reads, and the root of bench/qemu_blocks.py gives
it that core's /proc/cpuinfo. ``measured`` also counts the blocks of its second (measured) inference, the
baseline of ``bench-model --target neon`` on a TFLite model (bench/arm_models.py).
"""
from __future__ import annotations

import importlib.metadata
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from isa_specs import derived_files
from tvm_integration.bench import mca, qemu_blocks
from tvm_integration.qemu import cross, cross_model, wheels

DRIVER = Path(__file__).parent.parent / "qemu" / "litert_driver.c"
LIBRARY = "libLiteRt.so"
PLATFORMS = (wheels.PLATFORM, "manylinux_2_27_aarch64")


def runtime() -> Path:
    """The private folder holding LiteRT's AArch64 library, checked against its digest, fetched from the
    registry when missing or damaged; RuntimeError when it cannot be."""
    version = importlib.metadata.version("ai-edge-litert")
    folder = derived_files.cache_folder(f"aarch64-ai-edge-litert{version}")
    wheels.library(folder, "ai-edge-litert", version, lambda name: name == f"ai_edge_litert/{LIBRARY}", LIBRARY,
                   PLATFORMS)
    return folder


def driver() -> Path:
    """litert_driver.c linked against the AArch64 LiteRT (rebuilt when a source or the library changes)."""
    lib_dir = runtime()
    sources = [DRIVER, DRIVER.with_name("npy.h"), DRIVER.with_name("measure.h")]
    return wheels.linked(lib_dir, "litert_driver", sources, [lib_dir / LIBRARY], lambda out: [
        cross.CC, "-O2", str(DRIVER), "-o", str(out), f"-L{lib_dir}", f"-l:{LIBRARY}",
        f"-Wl,-rpath-link,{cross_model.SYSROOT / 'lib'}"])


def run(model: str | Path, feeds: dict[str, np.ndarray], core: str) -> dict[str, np.ndarray]:
    """LiteRT's AArch64 outputs of ``model`` on ``feeds`` under qemu as ``core``, both by tensor name (what
    the Python Interpreter's get_input_details and get_output_details call them)."""
    return _run(model, feeds, core, counted=False)[0]


def measured(model: str | Path, feeds: dict[str, np.ndarray], core: str) -> tuple[dict[str, np.ndarray],
                                                                                  list[mca.Block]]:
    """``run``'s outputs, and the blocks its measured inference ran (bench/qemu_blocks.py)."""
    return _run(model, feeds, core, counted=True)


class Failed(RuntimeError):
    """LiteRT's AArch64 build ran and failed on a model; ``reason``: its error lines, the log's noise left out."""

    def __init__(self, returncode: int, stderr: str):
        self.reason = "; ".join(line.removeprefix("ERROR: ") for line in stderr.splitlines()
                                if line.startswith("ERROR: ")) or stderr.strip()[-500:]
        super().__init__(f"LiteRT failed under qemu (exit {returncode}): {stderr.strip()[-2000:]}")


def _run(model: str | Path, feeds: dict[str, np.ndarray], core: str,
         counted: bool) -> tuple[dict[str, np.ndarray], list[mca.Block] | None]:
    from ai_edge_litert.interpreter import Interpreter
    if (why := cross_model.missing_tools()) is not None:
        raise RuntimeError(f"cannot run LiteRT for AArch64 here: {why}")
    host = Interpreter(model_path=str(model))
    if host.get_signature_list():
        signature = host.get_signature_runner(next(iter(host.get_signature_list())))
        inputs, outputs = signature.get_input_details(), signature.get_output_details()
    else:                                   # LiteRT's signature of such a model is named by its tensors
        inputs = {d["name"]: d for d in host.get_input_details()}
        outputs = {d["name"]: d for d in host.get_output_details()}
    binary = driver()
    with tempfile.TemporaryDirectory(prefix="qsynth-litert-aarch64-") as tmp:
        tmp = Path(tmp)
        args = []
        for i, (key, detail) in enumerate(inputs.items()):
            np.save(tmp / f"input{i}.npy", np.ascontiguousarray(feeds[detail["name"]]))
            args.append(f"{key}={tmp / f'input{i}.npy'}")
        options = qemu_blocks.qemu_options(core, tmp / "counts.txt") if counted else \
            ("-cpu", core, "-L", str(qemu_blocks.root(core)))
        cmd = [*cross.QEMU, *options, "-E", f"LD_LIBRARY_PATH={wheels.library_folder(binary)}", str(binary),
               *(["--measure"] if counted else []), str(Path(model).resolve()), str(tmp / "out"), *args]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
        if proc.returncode:
            raise Failed(proc.returncode, proc.stderr)
        written = {}                                            # signature output name -> file number
        for line in proc.stdout.splitlines():
            if line.startswith("out "):
                _, number, key = line.split(maxsplit=2)
                written[key] = number
        results = {detail["name"]: np.load(tmp / f"out{written[key]}.npy").view(detail["dtype"])
                   .reshape(detail["shape"]) for key, detail in outputs.items()}
        return results, qemu_blocks.read(tmp / "counts.txt", tmp / "outmaps.txt") if counted else None
