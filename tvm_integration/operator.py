"""A compiled operator with its constant arguments (packed weights, per-channel output parameters)."""
from __future__ import annotations

import numpy as np
import tvm


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
