"""The float matmul of one row as onnxruntime's x86-64 build computes it: by a transposed B
(``row_times_transposed_func``), and by B as it is (``row_times_func``).

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

B as it is (a MatMul, or the Gemm MatMulAddFusion makes of one with its bias Add, over B not packed: a
DequantizeLinear's output) goes to MlasSgemmKernelM1Avx: over k in groups of four, each output's
``((p0 + p1) + p2) + p3`` (multiplies, then adds: no FMA) added onto C in turn, C being the bias (Gemm
copies C into its output, beta 1) or zero (beta 0); then a group of two and one of one for K % 4.
"""
from __future__ import annotations

from tvm import s_tir, te, tirx

from tvm_integration.ops.blend import blend
from tvm_integration.ops.output_stage import fenced
from tvm_integration.qnn.float import mlas_math

LANES = 8                     # float32 lanes of the kernel's ymm accumulators


def row_times_transposed_func(k: int, n: int) -> tirx.PrimFunc:
    """``a [1, k] @ w[n, k]^T`` as MlasSgemmKernelM1TransposeBAvx sums it (the module docstring)."""
    a = te.placeholder((1, k), "float32", "a")
    w = te.placeholder((n, k), "float32", "w")
    whole = k // LANES                  # whole groups of eight, then the last part of one (masked to 0)
    chunk = te.reduce_axis((0, whole), "chunk")
    lanes = te.compute((n, LANES), lambda j, lane: te.sum(
        fenced(a[0, chunk * LANES + lane] * w[j, chunk * LANES + lane]), axis=chunk), name="lanes")
    if k % LANES:                       # a branch per lane, not a vector Select: no read past a row's end
        last = whole * LANES
        sums = lanes
        lanes = te.compute((n, LANES), lambda j, lane: sums[j, lane] + tirx.if_then_else(
            last + lane < k, fenced(a[0, last + lane] * w[j, last + lane]), mlas_math.f32(0.0)), name="ends")
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
    if k % LANES:
        sch.unroll(sch.get_loops(sch.get_sblock("ends"))[-1])     # each lane's condition a constant
    return sch.mod["main"]


def row_times_func(k: int, n: int, bias: bool = False) -> tirx.PrimFunc:
    """``a [1, k] @ b [k, n]`` (``bias``: ``+ c [n]``) as MlasSgemmKernelM1Avx sums it (the module
    docstring): C (or 0) first, then each group's sum onto it in k's order, columns vectorized."""
    a = te.placeholder((1, k), "float32", "a")
    b = te.placeholder((k, n), "float32", "b")
    c = te.placeholder((n,), "float32", "c") if bias else None
    fours = k // 4
    tail = [(4 * fours, 2)] * (k % 4 >= 2) + [(k - 1, 1)] * (k % 2)     # (first k, size) of the last groups

    def product(t, j):
        t = tirx.max(tirx.min(t, k - 1), 0)     # in bounds where the blends do not take it
        return fenced(a[0, t] * b[t, j])

    def group(g, j):
        """Term ``g`` of the sum: C (or 0), then the groups' sums."""
        value = ((product(4 * (g - 1), j) + product(4 * (g - 1) + 1, j)) + product(4 * (g - 1) + 2, j)) + \
            product(4 * (g - 1) + 3, j)
        for index, (start, size) in enumerate(tail):
            last = product(start, j) if size == 1 else product(start, j) + product(start + 1, j)
            value = blend(g == fours + 1 + index, last, value)
        return blend(g == 0, mlas_math.f32(0.0) if c is None else c[j], value)
    g = te.reduce_axis((0, fours + 1 + len(tail)), "g")
    y = te.compute((1, n), lambda i, j: te.sum(group(g, j), axis=g), name="y")
    sch = s_tir.Schedule(te.create_prim_func([a, b, *([c] if bias else []), y]))
    block = sch.get_sblock("y")
    i, j, g = sch.get_loops(block)
    sch.reorder(g, i, j)                # k's groups outermost, each added onto every column in turn
    if n % LANES == 0:
        _, lanes = sch.split(j, [None, LANES])
        sch.vectorize(lanes)
    sch.decompose_reduction(block, g)
    return sch.mod["main"]
