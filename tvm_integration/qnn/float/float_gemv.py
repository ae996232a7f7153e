"""The float matmul of one row by a transposed B as onnxruntime's x86-64 build computes it.

An ONNX Gemm with transB and one row (a classifier's float Gemm after its last DequantizeLinear: NNCF's
ResNet-18 head, whose bias is float) reaches MlasGemm with M = 1, alpha 1 and beta 0 or 1, which hands
it to MlasSgemmKernelM1TransposeBAvx instead of the blocked sgemm (float_matmul.py): each output is
eight lane sums over k (lane l holds k = l, l + 8, ...: a multiply, then an add, never an FMA; the last
partial group of eight masked to zero), and the eight lanes are reduced as the kernel's output block
pairs them: four outputs at a time ``(((l0 + l1) + l2) + l3) + (((l4 + l5) + l6) + l7)``, then for the
last N % 4 outputs two at a time ``((l0 + l2) + (l4 + l6)) + ((l1 + l3) + (l5 + l7))`` and one
``((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7))``. The bias is added after (beta 1: ``S + C``), as
the Relax add that follows computes it. One thread: MlasGemm splits N between threads, each range
starting its own groups of four.
"""
from __future__ import annotations

from tvm import s_tir, te, tirx

from tvm_integration.ops.output_stage import fenced
from tvm_integration.qnn.float import mlas_math

LANES = 8                     # float32 lanes of the kernel's ymm accumulators


def row_times_transposed_func(k: int, n: int) -> tirx.PrimFunc:
    """``a [1, k] @ w[n, k]^T`` as MlasSgemmKernelM1TransposeBAvx sums it (the module docstring)."""
    a = te.placeholder((1, k), "float32", "a")
    w = te.placeholder((n, k), "float32", "w")
    chunk = te.reduce_axis((0, -(-k // LANES)), "chunk")

    def product(j, lane, c):
        index = c * LANES + lane
        safe = tirx.min(index, k - 1)
        return tirx.Select(index < k, fenced(a[0, safe] * w[j, safe]), mlas_math.f32(0.0))
    lanes = te.compute((n, LANES), lambda j, lane: te.sum(product(j, lane, chunk), axis=chunk), name="lanes")
    fours, twos = n - n % 4, n - n % 2

    def total(i, j):
        l = [lanes[j, x] for x in range(LANES)]
        by_four = (((l[0] + l[1]) + l[2]) + l[3]) + (((l[4] + l[5]) + l[6]) + l[7])
        by_two = ((l[0] + l[2]) + (l[4] + l[6])) + ((l[1] + l[3]) + (l[5] + l[7]))
        alone = ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]))
        return tirx.Select(j < fours, by_four, tirx.Select(j < twos, by_two, alone))
    y = te.compute((1, n), total, name="y")
    sch = s_tir.Schedule(te.create_prim_func([a, w, y]))
    block = sch.get_sblock("lanes")
    j, lane, c = sch.get_loops(block)
    sch.reorder(j, c, lane)
    sch.parallel(j)
    sch.vectorize(lane)
    init = sch.decompose_reduction(block, c)
    sch.vectorize(sch.get_loops(init)[-1])
    return sch.mod["main"]
