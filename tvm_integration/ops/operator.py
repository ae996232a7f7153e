"""An operator: scheduled (``Built``, for a larger module to include) or compiled (``Operator``), with
its constant arguments (packed weights, per-channel output parameters)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import tvm


@dataclass(frozen=True)
class Built:
    """The scheduled module (``main(data, *constants, out)``), its constants, shapes and target.
    ``out_shape`` is the function's output; ``result_shape`` the operator's (same memory order)."""
    mod: tvm.IRModule
    constants: list
    out_shape: tuple
    out_dtype: str
    in_shape: tuple
    in_dtype: str
    result_shape: tuple
    target: dict

    def compile(self) -> "Operator":
        """Loaded for this host; for an AArch64 target, a cross.QemuOperator (run under qemu)."""
        from tvm_integration.qemu import cross
        if cross.is_aarch64(self.target):
            return cross.QemuOperator(tvm.compile(self.mod, target=self.target), self.constants, self.out_shape,
                                      self.out_dtype, self.in_shape, self.in_dtype, self.result_shape)
        module = tvm.compile(self.mod, target=self.target).jit()
        return Operator(module, self.constants, self.out_shape, self.out_dtype, self.in_shape, self.in_dtype,
                        self.result_shape)


class Operator:
    """``op(x)`` runs the compiled function on one input and returns its output viewed as
    ``result_shape`` (the compiled function's output has the same memory order, in its own shape);
    ``op.args(x)`` are the arguments for ``op.module.time_evaluator("main", ...)``."""

    def __init__(self, module, constants: list[np.ndarray], out_shape: tuple[int, ...], out_dtype: str,
                 in_shape: tuple[int, ...], in_dtype: str, result_shape: tuple[int, ...]):
        self.module = module
        self.device = tvm.cpu()
        self.constants = [tvm.runtime.tensor(c, self.device) for c in constants]
        self.in_shape, self.in_dtype = tuple(in_shape), in_dtype
        self.out_shape, self.out_dtype = tuple(out_shape), out_dtype
        self.out = tvm.runtime.empty(self.out_shape, out_dtype, self.device)
        self.result_shape = tuple(result_shape)

    def args(self, x: np.ndarray) -> list:
        if x.shape != self.in_shape or str(x.dtype) != self.in_dtype:
            raise ValueError(f"input must be {self.in_dtype}{list(self.in_shape)}, got {x.dtype}{list(x.shape)}")
        return [tvm.runtime.tensor(np.ascontiguousarray(x), self.device), *self.constants, self.out]

    def __call__(self, x: np.ndarray) -> np.ndarray:
        self.module["main"](*self.args(x))
        return self.out.numpy().reshape(self.result_shape)
