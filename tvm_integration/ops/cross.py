"""Operators compiled for AArch64 on this x86 host and run under qemu-aarch64.

There is no AArch64 TVM runtime here, and none is needed: the compiled module is one object whose
packed function ``__tvm_ffi_main`` is called by a small C driver (qemu_driver.c: tensors in and out
through files, the runtime's parallel-launch and workspace hooks defined as one task on one thread),
statically linked with the cross compiler and run under ``qemu-aarch64 -cpu max``. The result is
checked, not timed: qemu's speed says nothing about an Arm core (speed: bench/mca.py). The target
these operators are built for: kernels/selection.py ``aarch64_target``.
"""
from __future__ import annotations

import shutil
import subprocess
import tempfile
import weakref
from pathlib import Path

import numpy as np

CC = "aarch64-linux-gnu-gcc"
QEMU = ("qemu-aarch64", "-cpu", "max")
DRIVER = Path(__file__).with_name("qemu_driver.c")
_DL_CODES = {"i": 0, "u": 1, "f": 2}


def is_aarch64(target: dict | str) -> bool:
    return "aarch64" in str(target.get("mtriple", "") if isinstance(target, dict) else target)


def missing_tools() -> str | None:
    """None when this host can build and run AArch64 operators, else what it lacks."""
    for tool, package in ((QEMU[0], "qemu-user"), (CC, "gcc-aarch64-linux-gnu")):
        if shutil.which(tool) is None:
            return f"{tool} not installed (apt-get install {package})"
    return None


class QemuOperator:
    """An AArch64 operator with the interface of operator.Operator: ``op(x)`` runs the compiled
    function under qemu on one input and returns its output viewed as ``result_shape``;
    ``op.assembly`` is the module's AArch64 assembly (for llvm-mca). There is no ``module`` to time."""

    def __init__(self, executable, constants: list[np.ndarray], out_shape, out_dtype: str, in_shape, in_dtype: str,
                 result_shape):
        if (why := missing_tools()) is not None:
            raise RuntimeError(f"cannot run an AArch64 operator here: {why}")
        self.assembly = executable.mod.inspect_source("s")
        self.in_shape, self.in_dtype = tuple(in_shape), in_dtype
        self.out_shape, self.out_dtype = tuple(out_shape), out_dtype
        self.result_shape = tuple(result_shape)
        self._dir = Path(tempfile.mkdtemp(prefix="qsynth-aarch64-"))
        weakref.finalize(self, shutil.rmtree, self._dir, True)
        executable.mod.write_to_file(str(self._dir / "operator.o"))
        self._binary = self._dir / "operator"
        self._link()
        self._constants = [self._write(f"constant{i}", np.ascontiguousarray(c)) for i, c in enumerate(constants)]

    def _link(self) -> None:
        include = Path(__import__("tvm_ffi").__file__).parent / "include"
        cmd = [CC, "-O2", "-static", f"-I{include}", str(DRIVER), str(self._dir / "operator.o"), "-o", str(self._binary),
               "-lm"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")

    def _write(self, name: str, array: np.ndarray) -> str:
        path = self._dir / f"{name}.bin"
        path.write_bytes(array.tobytes())
        return spec(array.dtype, array.shape, path)

    @property
    def binary(self) -> Path:
        """The linked static executable (driver + operator object)."""
        return self._binary

    @property
    def object(self) -> Path:
        """The operator's object file, as TVM wrote it."""
        return self._dir / "operator.o"

    def __call__(self, x: np.ndarray, qemu_options: tuple[str, ...] = ()) -> np.ndarray:
        """Run on ``x`` (``qemu_options``: more options of qemu-aarch64, e.g. its logging)."""
        if x.shape != self.in_shape or str(x.dtype) != self.in_dtype:
            raise ValueError(f"input must be {self.in_dtype}{list(self.in_shape)}, got {x.dtype}{list(x.shape)}")
        out = self._dir / "out.bin"
        args = [self._write("input", np.ascontiguousarray(x)), *self._constants,
                spec(np.dtype(self.out_dtype), self.out_shape, out)]
        proc = subprocess.run([*QEMU, *qemu_options, str(self._binary), *args], capture_output=True, text=True, timeout=600)
        if proc.returncode:
            raise RuntimeError(f"the operator failed under qemu (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}")
        result = np.frombuffer(out.read_bytes(), self.out_dtype).reshape(self.result_shape)
        out.unlink()
        return result


def spec(dtype: np.dtype, shape, path: Path) -> str:
    """One driver argument: ``code:bits:d0,d1,...:path``."""
    return f"{_DL_CODES[dtype.kind]}:{dtype.itemsize * 8}:{','.join(str(int(d)) for d in shape)}:{path}"

