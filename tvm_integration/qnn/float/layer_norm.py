"""onnxruntime 1.32's two CPU layer norms, step for step, so a compiled model rounds as onnxruntime
does. Both were read from the kernels the x86-64 wheel runs (their disassembly; the C++ source of the
release differs from the older layer_norm_impl.cc in the repository's history):

- LayerNormalization (ONNX op): rows of 8 or more on an AVX2/FMA kernel of MLAS's platform table,
  two passes over each row: its mean summed in double, its variance a second float pass over
  ``x - mean``, each with its own tail; shorter rows on a plain loop, the Welford form below.
- SkipLayerNormalization (contrib op; onnxruntime's graph optimizer fuses ``Add(a, b)`` of two equal
  3-D shapes into a LayerNormalization into it, and a bias Add before it): ``a + b`` (plus the
  bias), then Welford's running mean and variance in float, element by element, and a plain SSE
  output loop (no FMA).

Rows are the leading axes; each function normalizes the last one.
"""
from __future__ import annotations

import numpy as np
from tvm import s_tir, te, tirx
from tvm.tirx.op import fma

from tvm_integration.ops.output_stage import divided
from tvm_integration.qnn.float.mlas_math import f32
from tvm_integration.qnn.float.reduce_mean import ravel, unravel

MEAN_LANES, SQUARE_LANES, LANES = 4, 8, 16        # doubles and floats of a 256-bit vector; AVX-512 floats


def rounded(value):
    """``value`` rounded to float32 on its own: LLVM may not fuse it into an FMA with what follows
    (TVM builds with FP contraction on; onnxruntime's SSE loops multiply and add separately)."""
    return tirx.call_llvm_pure_intrin("float32", "llvm.arithmetic.fence", value)


def layer_norm_func(shape: tuple[int, ...], epsilon: float) -> tirx.PrimFunc:
    """The LayerNormalization kernel (rows of 8 or more; onnxruntime computes shorter ones as
    welford_func does): the row's sum in 4 double lanes, reduced (s0 + s2) + (s1 + s3), the last n % 4
    elements added after it in order, over n, rounded to float (the mean); 8 float lanes of FMA sums
    of (x - mean)^2, reduced ((s0 + s4) + (s2 + s6)) + ((s1 + s5) + (s3 + s7)), then the last n % 8
    (variance_tail), over n (the variance); inv = 1 / sqrt(var + eps); y = fma((x - mean) * inv, scale,
    bias). Rows parallel."""
    *rows, n = shape
    x = te.placeholder(shape, "float32", "x")
    gamma = te.placeholder((n,), "float32", "gamma")
    beta = te.placeholder((n,), "float32", "beta")
    if n < SQUARE_LANES:
        return welford_func(x, [x, gamma, beta], gamma, beta, epsilon)
    mean_body, square_body = n - n % MEAN_LANES, n - n % SQUARE_LANES
    t = te.reduce_axis((0, n // MEAN_LANES), "t")
    sums = te.compute((*rows, MEAN_LANES), lambda *i: te.sum(
        x[(*i[:-1], t * MEAN_LANES + i[-1])].astype("float64"), axis=t), name="sums")

    def total(*i):
        value = (sums[(*i, 0)] + sums[(*i, 2)]) + (sums[(*i, 1)] + sums[(*i, 3)])
        for k in range(mean_body, n):
            value = value + x[(*i, k)].astype("float64")
        return value
    mean = te.compute(rows, lambda *i: total(*i) / tirx.const(float(n), "float64"), name="mean_f64")
    mean32 = te.compute(rows, lambda *i: mean[i].astype("float32"), name="mean")
    fma_sum = te.comm_reducer(lambda acc, d: fma(d, d, acc), lambda dtype: tirx.const(0, dtype), name="fma_sum")
    u = te.reduce_axis((0, n // SQUARE_LANES), "u")
    squares = te.compute((*rows, SQUARE_LANES), lambda *i: fma_sum(
        x[(*i[:-1], u * SQUARE_LANES + i[-1])] - mean32[i[:-1]], axis=u), name="squares")

    def variance(*i):
        s = [squares[(*i, j)] for j in range(SQUARE_LANES)]
        value = ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]))
        return variance_tail(value, [x[(*i, k)] - mean32[i] for k in range(square_body, n)]) / f32(float(n))
    inv = te.compute(rows, lambda *i: f32(1.0) / tirx.sqrt(variance(*i) + f32(epsilon)), name="inv")
    y = te.compute(shape, lambda *i: fma(rounded((x[i] - mean32[i[:-1]]) * inv[i[:-1]]), gamma[i[-1]], beta[i[-1]]),
                   name="y")
    sch = s_tir.Schedule(te.create_prim_func([x, gamma, beta, y]))
    _rows_parallel(sch, "y", len(rows), ["inv", "squares", "mean", "mean_f64", "sums"])
    _lanes_innermost(sch, "sums")
    _lanes_innermost(sch, "squares")
    width = next((w for w in (LANES, SQUARE_LANES, MEAN_LANES) if n % w == 0), None)
    if width:
        sch.vectorize(sch.split(sch.get_loops(sch.get_sblock("y"))[-1], [None, width])[1])
    return sch.mod["main"]


def variance_tail(total, deviations: list):
    """The kernel's sum of squares past its 8-lane body (fewer than 8 deviations d): with 4 or more, the
    first 4 squared as one SSE vector (each rounded) and added in order, the rest by scalar FMAs; with
    fewer, all by scalar FMAs."""
    if len(deviations) >= MEAN_LANES:
        for d in deviations[:MEAN_LANES]:
            total = total + rounded(d * d)
        deviations = deviations[MEAN_LANES:]
    for d in deviations:
        total = fma(d, d, total)
    return total


def skip_layer_norm_func(shape: tuple[int, ...], epsilon: float, bias: bool = False, first=None,
                         fused: bool = False) -> tirx.PrimFunc:
    """The SkipLayerNormalization kernel: v = a + b, then plus the optional ``bias`` (a last input of
    [n]: (a + b) + bias, whichever operand the graph added it to), normalized as welford_func does
    (``fused``: as the AArch64 build does).
    ``first``: (its inputs, its value at an index) where ``a`` is computed in the same pass (float_ops:
    quantize_dynamic's dequantize chain), else ``a`` is the first input."""
    *rows, n = shape
    if first is None:
        a = te.placeholder(shape, "float32", "a")
        first = [a], lambda i: a[i]
    b = te.placeholder(shape, "float32", "b")
    gamma = te.placeholder((n,), "float32", "gamma")
    beta = te.placeholder((n,), "float32", "beta")
    c = [te.placeholder((n,), "float32", "bias")] if bias else []
    v = te.compute(shape, lambda *i: (first[1](i) + b[i]) + c[0][i[-1]] if c else first[1](i) + b[i], name="v")
    return welford_func(v, [*first[0], b, gamma, beta, *c], gamma, beta, epsilon, fused)


def welford_func(v: te.Tensor, inputs: list, gamma, beta, epsilon: float, fused: bool = False) -> tirx.PrimFunc:
    """The last axis of ``v`` normalized with Welford's running mean and variance, as the
    SkipLayerNormalization kernel and LayerNormalization's fallback for rows under 8 compute them:
    per row, for k = 1..n, d = v - mean, mean += d / k, m2 += (v - mean) * d, each step rounded to
    float; std = sqrt(m2 / n + eps); y = (v - mean) / std * gamma + beta, rounded after each step. The
    running sums depend on each element in turn, so LANES rows are updated together (one vector lane
    each; rows past the last whole vector one by one: all 196 of a ViT's were, 10x slower).
    ``inputs``: the PrimFunc's parameters before y. ``fused`` (on Arm; ``v`` computed, not an input, in a pass of
    its own: ``_stored``): the same kernels as onnxruntime's AArch64 build compiles them (GCC contracts on
    AArch64): m2 = fma(v - mean, d, m2) and y = fma((v - mean) / std, gamma, beta), each one rounding (read
    from the 1.32 wheel's machine code, issue 50), and its divisions products by the divisor's double
    reciprocal (output_stage.divided: the same quotients, without NEON's unpipelined vector division)."""
    divide = divided if fused else lambda a, b: a / b
    *rows, n = (int(d) for d in v.shape)
    row_count = int(np.prod(rows))       # the rows flattened: one loop to split into whole vectors

    def welford(acc, new):
        (mean, m2), (value, count) = acc, new
        delta = value - mean
        updated = mean + divide(delta, count)
        return updated, fma(value - updated, delta, m2) if fused else m2 + rounded((value - updated) * delta)
    running = te.comm_reducer(welford, lambda mean_dtype, m2_dtype: (tirx.const(0, mean_dtype),
                                                                      tirx.const(0, m2_dtype)), name="welford")
    k = te.reduce_axis((0, n), "k")
    mean, m2 = te.compute((row_count,), lambda r: running(
        (v[(*unravel(r, rows), k)], (k + 1).astype("float32")), axis=k), name="stats")
    std = te.compute((row_count,), lambda r: tirx.sqrt(divide(m2[r], f32(float(n))) + f32(epsilon)), name="std")

    def normalized(*i):
        z = rounded(divide(v[i] - mean[ravel(i[:-1], rows)], std[ravel(i[:-1], rows)]))
        return fma(z, gamma[i[-1]], beta[i[-1]]) if fused else rounded(z * gamma[i[-1]]) + beta[i[-1]]
    y = te.compute(v.shape, normalized, name="y")
    sch = s_tir.Schedule(te.create_prim_func([*inputs, y]))
    if not isinstance(v.op, te.PlaceholderOp):
        if fused:
            _stored(sch, "v")
        else:
            sch.compute_inline(sch.get_sblock("v"))
    row, _ = sch.get_loops(sch.get_sblock("stats"))
    parts = [row] if row_count <= LANES or row_count % LANES == 0 else \
        sch.loop_partition(row, [row_count - row_count % LANES, None])
    for part in parts:               # whole vectors of rows, then the last rows one by one (ViT's 196)
        if sch.get(part).extent.value % LANES == 0:
            (block,) = sch.get_child_blocks(part)
            part, lanes = sch.split(part, [None, LANES])
            sch.reorder(sch.get_loops(block)[-1], lanes)
            sch.vectorize(lanes)
        sch.parallel(part)
    sch.compute_at(sch.get_sblock("std"), _rows_parallel(sch, "y", len(rows), []))
    if n % LANES == 0:
        sch.vectorize(sch.split(sch.get_loops(sch.get_sblock("y"))[-1], [None, LANES])[1])
    return sch.mod["main"]


def _stored(sch, name: str) -> None:
    """The elementwise block ``name`` in a pass of its own, rows parallel, each row in vectors: on Arm its
    values stored once, where inlined they were computed twice (the statistics' pass and the outputs') and
    gathered from each of their inputs in the first (dynamic BERT's [128, 768] SkipLayerNorm, llvm-mca: 531k ->
    421k cycles on the N1 model, 1096k -> 917k on the A57's)."""
    *rows, last = sch.get_loops(sch.get_sblock(name))
    sch.parallel(sch.fuse(*rows) if len(rows) > 1 else rows[0])
    if sch.get(last).extent.value % LANES == 0:
        sch.vectorize(sch.split(last, [None, LANES])[1])


def _rows_parallel(sch, last: str, row_axes: int, producers: list[str]):
    """The blocks under one parallel loop over the rows (the first ``row_axes`` axes, fused), the
    producers computed at it (each list order: consumers first)."""
    loops = sch.get_loops(sch.get_sblock(last))
    row = sch.fuse(*loops[:row_axes]) if row_axes > 1 else loops[0]
    sch.parallel(row)
    for name in producers:
        sch.compute_at(sch.get_sblock(name), row)
    return row


def _lanes_innermost(sch, name: str) -> None:
    """A lane-sum block's reduction outside its lanes (a reduction of one step has no loop left), the
    lanes one vector."""
    lanes, *reduction = sch.get_loops(sch.get_sblock(name))[1:]
    sch.reorder(*reduction, lanes)
    sch.vectorize(lanes)
