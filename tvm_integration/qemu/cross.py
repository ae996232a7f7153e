"""Operators compiled for AArch64 on this x86 host and run under qemu-aarch64.

There is no AArch64 TVM runtime here, and none is needed: the compiled module is one object whose
packed function ``__tvm_ffi_main`` (or any of several linked in at once: ``link``'s ``functions``) is
called by a small C driver (qemu_driver.c: any number of tensors in and out through files, ``run``; the runtime's parallel-launch and workspace hooks defined as one task on one thread),
statically linked with the cross compiler and run under ``qemu-aarch64 -cpu max``. The result is
checked, not timed: qemu's speed says nothing about an Arm core (speed: bench/mca.py). The target
these operators are built for: kernels/selection.py ``aarch64_target``. A whole Relax model needs
TVM's runtime (the VM): cross_model.py.
"""
from __future__ import annotations

import functools
import shutil
import subprocess
import tempfile
import weakref
from pathlib import Path

import numpy as np

CC = "aarch64-linux-gnu-gcc"
QEMU = ("qemu-aarch64", "-cpu", "max")
DRIVER = Path(__file__).with_name("qemu_driver.c")
_DL_CODES = {"i": 0, "u": 1, "f": 2, "b": 6}


def is_aarch64(target) -> bool:
    """Whether ``target`` is AArch64: a TVM Target (LLVM's reading of it), or a target's dict or string."""
    if hasattr(target, "attrs"):
        return bool(target.attrs.get("feature.is_aarch64", False))
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
    ``op(x, residual)``: the function's further tensor arguments after the constants (a fused
    residual add's tensor, in the output's shape or the result's); ``op.assembly`` is the module's AArch64 assembly
    (for llvm-mca). There is no ``module`` to time."""

    def __init__(self, executable, constants: list[np.ndarray], out_shape, out_dtype: str, in_shape, in_dtype: str,
                 result_shape):
        if (why := missing_tools()) is not None:
            raise RuntimeError(f"cannot run an AArch64 operator here: {why}")
        self._executable = executable
        self.in_shape, self.in_dtype = tuple(int(d) for d in in_shape), in_dtype       # IntImm from TIR shapes
        self.out_shape, self.out_dtype = tuple(int(d) for d in out_shape), out_dtype
        self.result_shape = tuple(int(d) for d in result_shape)
        self._dir = Path(tempfile.mkdtemp(prefix="qsynth-aarch64-"))
        weakref.finalize(self, shutil.rmtree, self._dir, True)
        executable.mod.write_to_file(str(self._dir / "operator.o"))
        self._binary = self._dir / "operator"
        link(self._dir / "operator.o", self._binary)
        self._constants = [write(self._dir / f"constant{i}.bin", c) for i, c in enumerate(constants)]

    @functools.cached_property
    def assembly(self) -> str:
        """The module's AArch64 assembly, generated on first use: LLVM generates the code again for it (for
        the object file it did already), which for a layer of large constants took 25 s."""
        return self._executable.mod.inspect_source("s")

    @property
    def binary(self) -> Path:
        """The linked static executable (driver + operator object)."""
        return self._binary

    @property
    def object(self) -> Path:
        """The operator's object file, as TVM wrote it."""
        return self._dir / "operator.o"

    def __call__(self, x: np.ndarray, *more: np.ndarray, qemu_options: tuple[str, ...] = ()) -> np.ndarray:
        """Run on ``x`` (and ``more``: the tensor arguments after the constants; the compiled function
        checks their shapes and types). ``qemu_options``: more options of qemu-aarch64, e.g. its logging."""
        if x.shape != self.in_shape or str(x.dtype) != self.in_dtype:
            raise ValueError(f"input must be {self.in_dtype}{list(self.in_shape)}, got {x.dtype}{list(x.shape)}")
        more = [m.reshape(self.out_shape) if m.shape == self.result_shape else m for m in more]   # same memory order
        extra = [write(self._dir / f"more{i}.bin", m) for i, m in enumerate(more)]
        (result,) = run(self._binary, [write(self._dir / "input.bin", x), *self._constants, *extra],
                        [(self.out_shape, self.out_dtype)], self._dir, qemu_options)
        return result.reshape(self.result_shape)


def link(objects, binary: Path, functions: tuple[str, ...] = ("main",)) -> None:
    """Link the driver with ``objects`` (one path or several) into a static AArch64 executable that can call
    each of their ``functions`` (``run``'s ``function``; packed entries ``__tvm_ffi_<name>``)."""
    include = Path(__import__("tvm_ffi").__file__).parent / "include"
    objects = [objects] if isinstance(objects, (str, Path)) else list(objects)
    table = Path(binary).with_name(Path(binary).name + "_functions.c")
    table.write_text("#include <tvm/ffi/c_api.h>\ntypedef int Packed(void *, const TVMFFIAny *, int32_t, TVMFFIAny *);\n"
                     + "".join(f"Packed __tvm_ffi_{f};\n" for f in functions)
                     + "const struct QsynthFunction { const char *name; Packed *entry; } QSYNTH_FUNCTIONS[] = {"
                     + "".join(f'{{"{f}", __tvm_ffi_{f}}}, ' for f in functions) + "{0, 0}};\n")
    cmd = [CC, "-O2", "-static", f"-I{include}", str(DRIVER), str(table), *map(str, objects), "-o", str(binary), "-lm"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")


def write(path: Path, array: np.ndarray) -> str:
    """Write ``array``'s bytes (C order) to ``path``; its driver argument."""
    array = np.asarray(array)               # not ascontiguousarray: it makes a 0-d array 1-d
    Path(path).write_bytes(array.tobytes(order="C"))
    return spec(array.dtype, array.shape, path)


def run(binary: Path, inputs: list, outputs: list, directory: Path, qemu_options: tuple[str, ...] = (),
        function: str = "main"):
    """Run the linked driver ``binary``'s ``function`` under qemu: ``inputs`` (driver arguments from
    ``write``, or arrays) first, then ``outputs`` (``(shape, dtype)`` each), in the compiled function's
    argument order; the outputs' arrays."""
    args = [a if isinstance(a, str) else write(Path(directory) / f"input{i}.bin", a) for i, a in enumerate(inputs)]
    paths = [Path(directory) / f"out{i}.bin" for i in range(len(outputs))]
    args += [">" + spec(np.dtype(dtype), shape, path) for (shape, dtype), path in zip(outputs, paths)]
    proc = subprocess.run([*QEMU, *qemu_options, str(binary), f"@{function}", *args], capture_output=True, text=True,
                          timeout=600)
    if proc.returncode:
        raise RuntimeError(f"the operator failed under qemu (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}")
    results = []
    for (shape, dtype), path in zip(outputs, paths):
        results.append(np.frombuffer(path.read_bytes(), dtype).reshape([int(d) for d in shape]))
        path.unlink()
    return results


def spec(dtype: np.dtype, shape, path: Path) -> str:
    """One driver argument: ``code:bits:d0,d1,...:path`` (``code:bits::path`` for a 0-d tensor)."""
    return f"{_DL_CODES[dtype.kind]}:{dtype.itemsize * 8}:{','.join(str(int(d)) for d in shape)}:{path}"
