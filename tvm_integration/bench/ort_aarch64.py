"""onnxruntime's AArch64 build running an ONNX model under qemu-aarch64: the baseline whose inference is
costed like qsynth's (bench/arm_models.py), by the same qemu block counts and llvm-mca core model.

``runtime()`` fetches ``libonnxruntime.so`` from the registry's aarch64 wheel of the onnxruntime version
this host runs (``pip download --platform manylinux_2_28_aarch64``; its MLAS kernels are inside it) once
into ``$XDG_CACHE_HOME/qsynth/aarch64-onnxruntime<version>/`` (``QSYNTH_AARCH64_ORT``: a directory already
holding ``libonnxruntime.so.1``) and links ops/ort_driver.c against it with the cross gcc (onnxruntime's
C API: this host has no AArch64 C++ compiler). ``run`` runs the driver: a warm-up inference, then the
measured one between the driver's marks, its blocks counted (bench/qemu_blocks.py).
"""
from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

import numpy as np

from tvm_integration.bench import mca, qemu_blocks
from tvm_integration.ops import cross, cross_model

DRIVER = Path(__file__).parent.parent / "ops" / "ort_driver.c"
LIBRARY = "libonnxruntime.so.1"             # its soname, what the driver is linked against


def runtime_dir() -> Path:
    if explicit := os.environ.get("QSYNTH_AARCH64_ORT"):
        return Path(explicit)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "qsynth"
    return cache / f"aarch64-onnxruntime{importlib.metadata.version('onnxruntime')}"


def runtime(fetch: bool = True) -> Path:
    """The directory holding onnxruntime's AArch64 library, fetched from the registry when missing and
    ``fetch``; RuntimeError when it cannot be."""
    where = runtime_dir()
    if (where / LIBRARY).exists():
        return where
    if not fetch or os.environ.get("QSYNTH_AARCH64_ORT"):
        raise RuntimeError(f"no AArch64 onnxruntime in {where} ({LIBRARY})")
    version = importlib.metadata.version("onnxruntime")
    with tempfile.TemporaryDirectory(prefix="qsynth-wheels-") as tmp:
        cmd = ["pip", "download", "--no-deps", "--only-binary=:all:", "--platform", cross_model.PLATFORM,
               f"onnxruntime=={version}", "-d", tmp]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        if proc.returncode:
            raise RuntimeError(f"{' '.join(cmd)} failed: {proc.stderr.strip()[-1500:]}")
        where.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=where.parent))
        with zipfile.ZipFile(next(Path(tmp).glob("onnxruntime-*.whl"))) as z:
            member = next(n for n in z.namelist() if Path(n).name == f"libonnxruntime.so.{version}")
            (staging / LIBRARY).write_bytes(z.read(member))
        if where.exists():
            shutil.rmtree(staging)
        else:
            staging.rename(where)       # whole, or not at all (another process may be fetching too)
    return where


def driver(lib_dir: Path | None = None) -> Path:
    """ort_driver.c linked against the AArch64 onnxruntime (kept beside it, rebuilt when a source changes)."""
    lib_dir = lib_dir or runtime()
    binary = lib_dir / "ort_driver"
    sources = [DRIVER, DRIVER.with_name("npy.h"), DRIVER.with_name("measure.h")]
    if binary.exists() and all(binary.stat().st_mtime >= s.stat().st_mtime for s in sources):
        return binary
    partial = lib_dir / f".ort_driver.{os.getpid()}"
    cmd = [cross.CC, "-O2", str(DRIVER), "-o", str(partial), f"-L{lib_dir}", f"-l:{LIBRARY}",
           f"-Wl,-rpath-link,{cross_model.SYSROOT / 'lib'}"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    partial.replace(binary)
    return binary


def run(model: str | Path, feeds: dict[str, np.ndarray], outputs: list[str], core: str, threads: int = 1,
        lib_dir: Path | None = None) -> tuple[list[np.ndarray], list[mca.Block]]:
    """onnxruntime's outputs (in the order of ``outputs``, the model's output names) on ``feeds`` under
    qemu as ``core``, and the blocks its measured inference ran (bench/qemu_blocks.py)."""
    if (why := cross_model.missing_tools()) is not None:
        raise RuntimeError(f"cannot run onnxruntime for AArch64 here: {why}")
    lib_dir = Path(lib_dir or runtime()).resolve()
    binary = driver(lib_dir)
    with tempfile.TemporaryDirectory(prefix="qsynth-ort-aarch64-") as tmp:
        tmp = Path(tmp)
        inputs = []
        for i, (name, x) in enumerate(feeds.items()):
            np.save(tmp / f"input{i}.npy", np.ascontiguousarray(x))
            inputs.append(f"{name}={tmp / f'input{i}.npy'}")
        cmd = [*cross.QEMU, *qemu_blocks.qemu_options(core, tmp / "counts.txt"), "-E", f"LD_LIBRARY_PATH={lib_dir}",
               str(binary), str(Path(model).resolve()), str(tmp / "out"), str(threads), *inputs, "--", *outputs]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
        if proc.returncode:
            raise RuntimeError(f"onnxruntime failed under qemu (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}")
        results = [np.load(tmp / f"out{i}.npy") for i in range(len(outputs))]
        return results, qemu_blocks.read(tmp / "counts.txt", tmp / "outmaps.txt")
