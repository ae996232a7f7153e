"""Whole compiled Relax models for AArch64, run under qemu-aarch64 with TVM's own AArch64 runtime, no Python.

cross.py runs one operator's object with a runtime-free driver; a whole model needs the Relax VM
(its bytecode, constants, memory planning, tuples), which is TVM's C++ runtime. That runtime is
published for AArch64 in the registry's wheels: ``apache-tvm`` (``tvm/lib/libtvm_runtime.so``) and
``apache-tvm-ffi`` (``tvm_ffi/lib/libtvm_ffi.so``) for ``manylinux_2_28_aarch64``, the versions this
host's Python has installed. ``runtime()`` fetches them once with ``pip download`` into the private
folder ``$XDG_CACHE_HOME/qsynth/aarch64-<versions>/``, and ``driver()`` links model_driver.c against
them with the cross gcc (the C API of tvm-ffi is enough: this host has no AArch64 C++ compiler); both
are checked against their digests before every use (wheels.py).

* ``export(mod, path, mcpu)``: ``tvm.compile`` the Relax module for the AArch64 target
  (kernels/selection.py ``aarch64_target``) and ``export_library`` it with the cross gcc: one shared
  library holding the VM executable, its constants and the compiled TIR;
* ``CrossModel(path)``: ``model(*inputs)`` writes the inputs as .npy files, runs the driver under
  ``qemu-aarch64 -L /usr/aarch64-linux-gnu`` (the cross gcc's sysroot: the loader, libc, libstdc++),
  and returns the outputs (a tuple's leaves, in order) as arrays; ``model.each(runs)`` does so for several
  sets of inputs in one qemu process.

The driver makes the VM as ``tvm.relax.VirtualMachine(lib, tvm.cpu())`` does: ``vm_load_executable``,
then ``vm_initialization`` on the CPU with the pooled allocator, then calls ``main``. The result is
checked, not timed (speed: its blocks counted with ``measure``, bench/qemu_blocks.py, and costed by
bench/mca.py).
"""
from __future__ import annotations

import importlib.metadata
import re
import shutil
import subprocess
import tempfile
import weakref
from pathlib import Path

import numpy as np

from isa_specs import derived_files
from tvm_integration.kernels.selection import aarch64_target
from tvm_integration.qemu import cross, wheels

SYSROOT = Path("/usr/aarch64-linux-gnu")
DRIVER = Path(__file__).with_name("model_driver.c")
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


def runtime() -> Path:
    """The private folder holding libtvm_runtime.so and libtvm_ffi.so for AArch64 (the host's versions),
    each checked against its digest, and fetched from the registry when missing or damaged (wheels.py);
    RuntimeError when it cannot be (UnsafeFolder: the folder is not private)."""
    versions = {project: importlib.metadata.version(project) for project in LIBRARIES}
    folder = derived_files.cache_folder("aarch64-" + "-".join(f"{p}{v}" for p, v in versions.items()))
    for project, member in LIBRARIES.items():
        wheels.library(folder, project, versions[project], lambda name, member=member: name == member,
                       Path(member).name)
    return folder


def driver() -> Path:
    """model_driver.c linked against the AArch64 runtime (kept beside it, checked with it before each use,
    rebuilt when a source or library changes)."""
    lib_dir = runtime()
    include = Path(__import__("tvm_ffi").__file__).parent / "include"
    sources = [DRIVER, DRIVER.with_name("npy.h"), DRIVER.with_name("measure.h")]
    libraries = [lib_dir / Path(member).name for member in LIBRARIES.values()]
    return wheels.linked(lib_dir, "model_driver", sources, libraries, lambda out: [
        cross.CC, "-O2", f"-I{include}", str(DRIVER), "-o", str(out), f"-L{lib_dir}", "-Wl,--no-as-needed",
        "-ltvm_ffi", "-ltvm_runtime", f"-Wl,-rpath-link,{SYSROOT / 'lib'}"])


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


def under_qemu(binary: Path, qemu_options: tuple[str, ...] = ()) -> list[str]:
    """The command running ``binary`` (``driver()``) under qemu-aarch64, on the cross gcc's sysroot and the
    AArch64 runtime it was linked against."""
    return [*cross.QEMU, "-L", str(SYSROOT), "-E", f"LD_LIBRARY_PATH={wheels.library_folder(binary)}",
            *qemu_options, str(binary)]


def missing_functions(executable) -> list[str]:
    """The functions a VM executable compiled for AArch64 calls that neither its own code nor TVM's
    AArch64 runtime defines (the runtime's registry, asked under qemu: model_driver.c --missing). The
    host's TVM holds its compiler's functions too (``relax.run.unique``), the published runtime does not."""
    called = re.findall(r"^@(\S+) packed_func;$", executable.as_text(), re.MULTILINE)
    wanted = [name for name in dict.fromkeys(called) if not executable.mod.implements_function(name, True)]
    if not wanted:
        return []
    proc = subprocess.run([*under_qemu(driver()), "--missing", *wanted], capture_output=True, text=True, timeout=600)
    if proc.returncode:
        raise RuntimeError(f"asking the AArch64 runtime for its functions failed (exit {proc.returncode}): "
                           f"{proc.stderr.strip()[-1500:]}")
    return proc.stdout.split()


class CrossModel:
    """An exported AArch64 model library, run under qemu: ``model(*inputs)`` -> the list of outputs."""

    def __init__(self, library: str | Path):
        if (why := missing_tools()) is not None:
            raise RuntimeError(f"cannot run an AArch64 model here: {why}")
        self.library = Path(library).resolve()
        self._dir = Path(tempfile.mkdtemp(prefix="qsynth-aarch64-model-"))
        weakref.finalize(self, shutil.rmtree, self._dir, True)

    def command(self, runs: list[tuple[Path, list[Path]]], qemu_options: tuple[str, ...] = (),
                measure: bool = False) -> list[str]:
        """The qemu command line running the model once for each (output prefix, .npy inputs) of ``runs``
        (``measure``: the driver's --measure, one run; model_driver.c), once the runtime and the driver have
        been checked."""
        arguments = [str(a) for prefix, inputs in runs for a in ("--", prefix, *inputs)][1:]
        return [*under_qemu(driver(), qemu_options), *(["--measure"] if measure else []), str(self.library),
                *arguments]

    @property
    def code_maps(self) -> Path:
        """The code mappings the last run with ``measure`` wrote (bench/qemu_blocks.py reads them)."""
        return self._dir / "out0_maps.txt"

    def __call__(self, *inputs: np.ndarray, qemu_options: tuple[str, ...] = (),
                 measure: bool = False) -> list[np.ndarray]:
        """The outputs on ``inputs``; ``measure``: after a warm-up run, once more between the driver's
        marks (qemu/measure.h), for a block-counting ``qemu_options``."""
        return self.each([inputs], qemu_options, measure)[0]

    def each(self, runs: list[tuple[np.ndarray, ...]], qemu_options: tuple[str, ...] = (),
             measure: bool = False) -> list[list[np.ndarray]]:
        """The outputs on each set of inputs of ``runs``, all run by one qemu process (a start costs about
        2.4 s of CPU); ``measure``: as ``__call__``'s, one run only."""
        if measure and len(runs) != 1:
            raise ValueError(f"a measured inference is one run, not {len(runs)}")
        for old in self._dir.glob("*.npy"):
            old.unlink()
        planned = []
        for r, inputs in enumerate(runs):
            paths = [self._dir / f"in{r}_{i}.npy" for i in range(len(inputs))]
            for path, x in zip(paths, inputs):
                np.save(path, np.asarray(x, order="C"))          # ascontiguousarray makes a 0-d input 1-d
            planned.append((self._dir / f"out{r}_", paths))
        proc = subprocess.run(self.command(planned, qemu_options, measure), capture_output=True, text=True,
                              timeout=3600)
        if proc.returncode:
            raise RuntimeError(f"the model failed under qemu (exit {proc.returncode}): {proc.stderr.strip()[-3000:]}")
        counts = [int(line.split()[0]) for line in proc.stdout.splitlines() if line.endswith(" outputs")]
        return [[np.load(f"{prefix}{i}.npy") for i in range(count)] for (prefix, _), count in zip(planned, counts,
                                                                                                  strict=True)]
