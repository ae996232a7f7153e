"""Bitserial dense: ``out[m, n] = stage(sum_k x[m, k] * w[n, k])`` with x unsigned ``abits``-bit
activations (uint8 storage) and w ``wbits``-bit weights ``[N, K]`` (unipolar or hybrid, see
bitserial_gemm.Config), the int32 result into the int8 operators' output stage."""
from __future__ import annotations

import numpy as np
from tvm import te

from tvm_integration.kernels.bitpack import Packing
from tvm_integration.kernels.bitserial import WORD
from tvm_integration.kernels.selection import bitserial_kernel, bitserial_target
from tvm_integration.ops.operator import Built, Operator
from tvm_integration.ops.bitserial_gemm import Config, build
from tvm_integration.ops.output_stage import OutputStage


def bitserial_dense(weight: np.ndarray, m: int, config: Config, stage: OutputStage = OutputStage(),
                    isa: str = "host", use_kernel: bool = True, kernel_layout: str | None = None) -> Operator:
    """Compile for ``m`` input rows; ``use_kernel=False``: the same schedule in plain TIR;
    ``kernel_layout``: only tiles of this layout (acc, lanes or tile). ``isa="neon"``: built for AArch64, an
    operator run under qemu (cross.QemuOperator)."""
    return build_bitserial_dense(weight, m, config, stage, isa, use_kernel, kernel_layout).compile()


def build_bitserial_dense(weight: np.ndarray, m: int, config: Config, stage: OutputStage = OutputStage(),
                          isa: str = "host", use_kernel: bool = True, kernel_layout: str | None = None) -> Built:
    """The scheduled operator of ``bitserial_dense``, not compiled."""
    if weight.ndim != 2:
        raise ValueError(f"weight must be [N, K], got {list(weight.shape)}")
    n, k = weight.shape
    kernel = bitserial_kernel(isa, config.abits, config.wbits, config.encoding, kernel_layout) if use_kernel else None
    x = te.placeholder((m, k), "uint8", name="data")
    rows_planes = Packing(axis=1, bit_axis=1, word=WORD)          # [rows, K] -> [rows, bits, words]
    planes = rows_planes.te(x, config.abits, vector=True)
    mod, constants = build(m, x, planes, lambda p, plane, t: planes[p, plane, t],
                           rows_planes.numpy(config.weight_codes(weight), config.wbits), weight.shape, config, stage, kernel)
    return Built(mod, constants, (m, n), stage.out_dtype, (m, k), "uint8", (m, n), bitserial_target(isa))
