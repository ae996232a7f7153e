"""int8 dense: ``out[m, n] = stage(sum_k x[m, k] * w[n, k])``, x u8 or s8, w s8 (``[N, K]``) or 9-bit
(int16: packing.NINE_BITS)."""
from __future__ import annotations

import numpy as np
from tvm import te

from tvm_integration.kernels import selection, tuning
from tvm_integration.ops.operator import Built, Operator
from tvm_integration.ops.gemm import Gemm, Tile, build
from tvm_integration.ops.output_stage import OutputStage
from tvm_integration.kernels.packing import weights_error


def dense(weight: np.ndarray, m: int, data_dtype: str = "uint8", stage: OutputStage = OutputStage(),
          isa: str = "host", use_kernel: bool = True, kernel=None) -> Operator:
    """Compile a dense layer for ``m`` rows of input; ``use_kernel=False``: same schedule, plain TIR."""
    return build_dense(weight, m, data_dtype, stage, isa, use_kernel, kernel).compile()


def build_dense(weight: np.ndarray, m: int, data_dtype: str = "uint8", stage: OutputStage = OutputStage(),
                isa: str = "host", use_kernel: bool = True, kernel=None) -> Built:
    """The scheduled, not yet compiled dense layer (dense's arguments; ``kernel`` as in build_conv2d)."""
    if why := weights_error(weight, 2, "[N, K]"):
        raise ValueError(why)
    if data_dtype not in ("uint8", "int8"):
        raise ValueError(f"data_dtype must be uint8 or int8, got {data_dtype!r}")
    n, k = weight.shape
    kernel = kernel or tuning.choose(tuning.dense_key(m, n, k, data_dtype),
                                     selection.candidates_for(weight, isa), m, n, depth=k)
    x = te.placeholder((m, k), data_dtype, name="data")
    mod, constants = build(Gemm(1, 1, m, n, k), x, lambda b, g, p, t: x[p, t], weight[None], stage, "rows",
                           Tile.of(kernel), kernel if use_kernel else None)
    return Built(mod, constants, (1, m, 1, n), stage.out_dtype, (m, k), data_dtype, (m, n),
                 selection.int8_target(kernel))
