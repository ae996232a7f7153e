"""onnxruntime 1.32's two CPU layer norms, step for step, so a compiled model rounds as onnxruntime
does. Both were read from the kernels the x86-64 wheel runs (their disassembly; the C++ source of the
release differs from the older layer_norm_impl.cc in the repository's history):

- LayerNormalization (ONNX op): an AVX2/FMA kernel, two passes over each row. Its mean is summed in
  double; its variance is a second float pass over ``x - mean``.
- SkipLayerNormalization (contrib op; onnxruntime's graph optimizer fuses ``Add(a, b)`` of two equal
  3-D shapes into a LayerNormalization into it): ``a + b``, then Welford's running mean and variance
  in float, element by element, and a plain SSE output loop (no FMA).

Rows are the leading axes; each function normalizes the last one.
"""
from __future__ import annotations

from tvm import s_tir, te, tirx
from tvm.tirx.op import fma

from tvm_integration.qnn.mlas_math import f32

MEAN_LANES, SQUARE_LANES, LANES = 4, 8, 16        # doubles and floats of a 256-bit vector; AVX-512 floats


def rounded(value):
    """``value`` rounded to float32 on its own: LLVM may not fuse it into an FMA with what follows
    (TVM builds with FP contraction on; onnxruntime's SSE loops multiply and add separately)."""
    return tirx.call_llvm_pure_intrin("float32", "llvm.arithmetic.fence", value)


def layer_norm_func(shape: tuple[int, ...], epsilon: float) -> tirx.PrimFunc:
    """The LayerNormalization kernel, for rows of a multiple of 8 (its vector body; its scalar tails
    order the sums otherwise): the row's sum in 4 double lanes, reduced (s0 + s2) + (s1 + s3), over n,
    rounded to float (the mean); 8 float lanes of FMA sums of (x - mean)^2, reduced ((s0 + s4) + (s2 +
    s6)) + ((s1 + s5) + (s3 + s7)), over n (the variance); inv = 1 / sqrt(var + eps); y = fma((x - mean)
    * inv, scale, bias). Rows parallel."""
    *rows, n = shape
    x = te.placeholder(shape, "float32", "x")
    gamma = te.placeholder((n,), "float32", "gamma")
    beta = te.placeholder((n,), "float32", "beta")
    t = te.reduce_axis((0, n // MEAN_LANES), "t")
    sums = te.compute((*rows, MEAN_LANES), lambda *i: te.sum(
        x[(*i[:-1], t * MEAN_LANES + i[-1])].astype("float64"), axis=t), name="sums")
    mean = te.compute(rows, lambda *i: ((sums[(*i, 0)] + sums[(*i, 2)]) + (sums[(*i, 1)] + sums[(*i, 3)])) /
                      tirx.const(float(n), "float64"), name="mean_f64")
    mean32 = te.compute(rows, lambda *i: mean[i].astype("float32"), name="mean")
    fma_sum = te.comm_reducer(lambda acc, d: fma(d, d, acc), lambda dtype: tirx.const(0, dtype), name="fma_sum")
    u = te.reduce_axis((0, n // SQUARE_LANES), "u")
    squares = te.compute((*rows, SQUARE_LANES), lambda *i: fma_sum(
        x[(*i[:-1], u * SQUARE_LANES + i[-1])] - mean32[i[:-1]], axis=u), name="squares")

    def variance(*i):
        s = [squares[(*i, j)] for j in range(SQUARE_LANES)]
        return (((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]))) / f32(float(n))
    inv = te.compute(rows, lambda *i: f32(1.0) / tirx.sqrt(variance(*i) + f32(epsilon)), name="inv")
    y = te.compute(shape, lambda *i: fma(rounded((x[i] - mean32[i[:-1]]) * inv[i[:-1]]), gamma[i[-1]], beta[i[-1]]),
                   name="y")
    sch = s_tir.Schedule(te.create_prim_func([x, gamma, beta, y]))
    _rows_parallel(sch, "y", len(rows), ["inv", "squares", "mean", "mean_f64", "sums"])
    _lanes_innermost(sch, "sums")
    _lanes_innermost(sch, "squares")
    _, lanes = sch.split(sch.get_loops(sch.get_sblock("y"))[-1], [None, LANES])
    sch.vectorize(lanes)
    return sch.mod["main"]


def skip_layer_norm_func(shape: tuple[int, ...], epsilon: float) -> tirx.PrimFunc:
    """The SkipLayerNormalization kernel without its optional bias: v = a + b; per row, for k = 1..n,
    d = v - mean, mean += d / k, m2 += (v - mean) * d, each step rounded to float; std = sqrt(m2 / n +
    eps); y = (v - mean) / std * gamma + beta, rounded after each step. The running sums depend on
    each element in turn, so LANES rows are updated together (one vector lane each)."""
    *rows, n = shape
    a = te.placeholder(shape, "float32", "a")
    b = te.placeholder(shape, "float32", "b")
    gamma = te.placeholder((n,), "float32", "gamma")
    beta = te.placeholder((n,), "float32", "beta")
    v = te.compute(shape, lambda *i: a[i] + b[i], name="v")

    def welford(acc, new):
        (mean, m2), (value, count) = acc, new
        delta = value - mean
        updated = mean + delta / count
        return updated, m2 + rounded((value - updated) * delta)
    running = te.comm_reducer(welford, lambda mean_dtype, m2_dtype: (tirx.const(0, mean_dtype),
                                                                      tirx.const(0, m2_dtype)), name="welford")
    k = te.reduce_axis((0, n), "k")
    mean, m2 = te.compute(rows, lambda *i: running((v[(*i, k)], (k + 1).astype("float32")), axis=k), name="stats")
    std = te.compute(rows, lambda *i: tirx.sqrt(m2[i] / f32(float(n)) + f32(epsilon)), name="std")
    y = te.compute(shape, lambda *i: rounded(rounded((v[i] - mean[i[:-1]]) / std[i[:-1]]) * gamma[i[-1]]) + beta[i[-1]],
                   name="y")
    sch = s_tir.Schedule(te.create_prim_func([a, b, gamma, beta, y]))
    sch.compute_inline(sch.get_sblock("v"))
    stats = sch.get_sblock("stats")
    *row_loops, k = sch.get_loops(stats)
    row = sch.fuse(*row_loops) if len(row_loops) > 1 else row_loops[0]
    if sch.get(row).extent.value % LANES == 0:
        row, lanes = sch.split(row, [None, LANES])
        sch.reorder(k, lanes)
        sch.vectorize(lanes)
    sch.parallel(row)
    sch.compute_at(sch.get_sblock("std"), _rows_parallel(sch, "y", len(rows), []))
    if n % LANES == 0:
        sch.vectorize(sch.split(sch.get_loops(sch.get_sblock("y"))[-1], [None, LANES])[1])
    return sch.mod["main"]


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
    """A lane-sum block's reduction outside its lanes, the lanes one vector."""
    *_, lanes, reduction = sch.get_loops(sch.get_sblock(name))
    sch.reorder(reduction, lanes)
    sch.vectorize(lanes)
