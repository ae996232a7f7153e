"""Whole compiled Relax models for AArch64, run under qemu-aarch64 with TVM's own AArch64 runtime, no Python.

cross.py runs one operator's object with a runtime-free driver; a whole model needs the Relax VM
(its bytecode, constants, memory planning, tuples), which is TVM's C++ runtime. That runtime is
published for AArch64 in the registry's wheels: ``apache-tvm`` (``tvm/lib/libtvm_runtime.so``) and
``apache-tvm-ffi`` (``tvm_ffi/lib/libtvm_ffi.so``) for ``manylinux_2_28_aarch64``, the versions this
host's Python has installed. ``runtime()`` fetches them once with ``pip download`` into
``$XDG_CACHE_HOME/qsynth/aarch64-tvm-<versions>/`` (``QSYNTH_AARCH64_TVM``: a directory already
holding both libraries) and links model_driver.c against them with the cross gcc (the C API of
tvm-ffi is enough: this host has no AArch64 C++ compiler).

* ``export(mod, path, mcpu)``: ``tvm.compile`` the Relax module for the AArch64 target
  (kernels/selection.py ``aarch64_target``) and ``export_library`` it with the cross gcc: one shared
  library holding the VM executable, its constants and the compiled TIR;
* ``CrossModel(path)``: ``model(*inputs)`` writes the inputs as .npy files, runs the driver under
  ``qemu-aarch64 -L /usr/aarch64-linux-gnu`` (the cross gcc's sysroot: the loader, libc, libstdc++),
  and returns the outputs (a tuple's leaves, in order) as arrays.

The driver makes the VM as ``tvm.relax.VirtualMachine(lib, tvm.cpu())`` does: ``vm_load_executable``,
then ``vm_initialization`` on the CPU with the pooled allocator, then calls ``main``. The result is
checked, not timed (speed: its blocks counted with ``measure``, bench/qemu_blocks.py, and costed by
bench/mca.py).
"""
from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import tempfile
import weakref
import zipfile
from pathlib import Path

import numpy as np

from tvm_integration.kernels.selection import aarch64_target
from tvm_integration.ops import cross

SYSROOT = Path("/usr/aarch64-linux-gnu")
DRIVER = Path(__file__).with_name("model_driver.c")
PLATFORM = "manylinux_2_28_aarch64"
# wheel project -> the library it holds, as a path inside the wheel
LIBRARIES = {"apache-tvm": "tvm/lib/libtvm_runtime.so", "apache-tvm-ffi": "tvm_ffi/lib/libtvm_ffi.so"}


def missing_tools() -> str | None:
    """None when this host can build and run AArch64 models (the runtime aside), else what it lacks."""
    if (why := cross.missing_tools()) is not None:
        return why
    if not (SYSROOT / "lib" / "ld-linux-aarch64.so.1").exists():
        return f"no AArch64 sysroot at {SYSROOT} (apt-get install libc6-arm64-cross)"
    if not (SYSROOT / "lib" / "libstdc++.so.6").exists():
        return f"no AArch64 libstdc++ in {SYSROOT} (apt-get install libstdc++6-arm64-cross)"
    return None


def _versions() -> dict[str, str]:
    return {project: importlib.metadata.version(project) for project in LIBRARIES}


def runtime_dir() -> Path:
    """Where the AArch64 runtime libraries are (or will be) kept."""
    if explicit := os.environ.get("QSYNTH_AARCH64_TVM"):
        return Path(explicit)
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "qsynth"
    return cache / ("aarch64-" + "-".join(f"{p}{v}" for p, v in _versions().items()))


def runtime(fetch: bool = True) -> Path:
    """The directory holding libtvm_runtime.so and libtvm_ffi.so for AArch64, fetched from the registry
    (``pip download``, the host's versions) when missing and ``fetch``; RuntimeError when it cannot."""
    where = runtime_dir()
    if all((where / Path(lib).name).exists() for lib in LIBRARIES.values()):
        return where
    if not fetch or os.environ.get("QSYNTH_AARCH64_TVM"):
        raise RuntimeError(f"no AArch64 TVM runtime in {where} (libtvm_runtime.so, libtvm_ffi.so)")
    with tempfile.TemporaryDirectory(prefix="qsynth-wheels-") as tmp:
        for project, version in _versions().items():
            cmd = ["pip", "download", "--no-deps", "--only-binary=:all:", "--platform", PLATFORM,
                   f"{project}=={version}", "-d", tmp]
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
            if proc.returncode:
                raise RuntimeError(f"{' '.join(cmd)} failed: {proc.stderr.strip()[-1500:]}")
        staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=_parent(where)))
        for project, member in LIBRARIES.items():
            wheel = next(Path(tmp).glob(project.replace("-", "_") + "-*.whl"))
            with zipfile.ZipFile(wheel) as z:
                (staging / Path(member).name).write_bytes(z.read(member))
        if where.exists():
            shutil.rmtree(staging)
        else:
            staging.rename(where)       # whole, or not at all (another process may be fetching too)
    return where


def _parent(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    return path.parent


def driver(lib_dir: Path | None = None) -> Path:
    """model_driver.c linked against the AArch64 runtime (kept next to it, rebuilt when the source changes)."""
    lib_dir = lib_dir or runtime()
    binary = lib_dir / "model_driver"
    sources = [DRIVER, DRIVER.with_name("npy.h"), DRIVER.with_name("measure.h")]
    if binary.exists() and all(binary.stat().st_mtime >= s.stat().st_mtime for s in sources):
        return binary
    include = Path(__import__("tvm_ffi").__file__).parent / "include"
    partial = lib_dir / f".model_driver.{os.getpid()}"
    cmd = [cross.CC, "-O2", f"-I{include}", str(DRIVER), "-o", str(partial), f"-L{lib_dir}", "-Wl,--no-as-needed",
           "-ltvm_ffi", "-ltvm_runtime", f"-Wl,-rpath-link,{SYSROOT / 'lib'}"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    partial.replace(binary)
    return binary


def export(mod, path: str | Path, mcpu: str | None = None, target: dict | None = None) -> Path:
    """Compile the Relax module ``mod`` (or take a compiled VM executable) for AArch64 and export it as
    one shared library at ``path``."""
    import tvm
    from tvm.support import cc
    if not hasattr(mod, "export_library"):     # relax.build wants a Target, not its dict
        mod = tvm.compile(mod, target=tvm.target.Target(target or aarch64_target(mcpu)))
    executable = mod
    executable.export_library(str(path), fcompile=cc.cross_compiler(cross.CC))
    return Path(path)


class CrossModel:
    """An exported AArch64 model library, run under qemu: ``model(*inputs)`` -> the list of outputs."""

    def __init__(self, library: str | Path, lib_dir: Path | None = None):
        if (why := missing_tools()) is not None:
            raise RuntimeError(f"cannot run an AArch64 model here: {why}")
        self.library = Path(library).resolve()
        self.lib_dir = Path(lib_dir or runtime()).resolve()
        self.driver = driver(self.lib_dir)
        self._dir = Path(tempfile.mkdtemp(prefix="qsynth-aarch64-model-"))
        weakref.finalize(self, shutil.rmtree, self._dir, True)

    def command(self, inputs: list[Path], out_prefix: Path, qemu_options: tuple[str, ...] = (),
                measure: bool = False) -> list[str]:
        """The qemu command line running the model on the .npy files ``inputs`` (``measure``: the driver's
        --measure, model_driver.c)."""
        return [*cross.QEMU, "-L", str(SYSROOT), "-E", f"LD_LIBRARY_PATH={self.lib_dir}", *qemu_options,
                str(self.driver), *(["--measure"] if measure else []), str(self.library), str(out_prefix),
                *map(str, inputs)]

    @property
    def code_maps(self) -> Path:
        """The code mappings the last run with ``measure`` wrote (bench/qemu_blocks.py reads them)."""
        return self._dir / "outmaps.txt"

    def __call__(self, *inputs: np.ndarray, qemu_options: tuple[str, ...] = (),
                 measure: bool = False) -> list[np.ndarray]:
        """The outputs on ``inputs``; ``measure``: after a warm-up run, once more between the driver's
        marks (ops/measure.h), for a block-counting ``qemu_options``."""
        paths = []
        for i, x in enumerate(inputs):
            paths.append(self._dir / f"input{i}.npy")
            np.save(paths[-1], np.ascontiguousarray(x))
        for old in self._dir.glob("out*.npy"):
            old.unlink()
        proc = subprocess.run(self.command(paths, self._dir / "out", qemu_options, measure), capture_output=True,
                              text=True, timeout=3600)
        if proc.returncode:
            raise RuntimeError(f"the model failed under qemu (exit {proc.returncode}): {proc.stderr.strip()[-3000:]}")
        count = int(proc.stdout.split()[-2])                    # "N outputs"
        return [np.load(self._dir / f"out{i}.npy") for i in range(count)]
