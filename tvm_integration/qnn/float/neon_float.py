"""The float ops of a model built for Arm (``--target neon``), computed as onnxruntime's AArch64 build
computes them, the reference those ops follow on Arm (arm_reference.py). float_ops.py computes them in
MLAS's x86 order; where the AArch64 build rounds differently, this module has its own function:

- Softmax: MLAS's generic kernels (compute.cpp), which its AArch64 build runs: exp(x - max) with the
  same polynomial as on x86 but 2^m put back by one multiply (vscalefps on x86), the row summed in four
  lanes (NEON's float32x4: lane j adds elements j, j + 4, ... in order), the lanes reduced by two
  pairwise adds, (l0 + l1) + (l2 + l3), the last d % 4 elements added after that in order; each exp
  times float32(1 / sum).
- ReduceMean over trailing axes and GlobalAveragePool: the same sums as on x86 (reduce_mean.py), a
  vector's four lanes reduced (0 + 1) + (2 + 3) by NEON's pairwise adds instead of SSE's (0 + 2) + (1 + 3).
- LayerNormalization: no MLAS kernel on AArch64, so every row takes onnxruntime's C++ Welford loop,
  built with FMAs (layer_norm.welford_func ``fused``); SkipLayerNormalization and the dequantize chain
  of quantize_dynamic's MatMulIntegerToFloat likewise (float_ops.onnxruntime_fusions ``fused``).
- A Conv left in float: MLAS's im2col and unpacked sgemm, as on x86 (float_conv.conv2d_func; onnxruntime's
  x86 build runs its NCHWc kernels instead, so the two builds differ there), group by group; a depthwise
  one on TVM's conv2d, equal to MLAS's.
- A quantize by a run-time scale (DynamicQuantizeLinear's): its float32 quotient x / scale as a product by
  the scale's double reciprocal (neon_quantize.runtime_quantized), the same value without NEON's unpipelined
  vector division.

Erf, GELU, Tanh, Sigmoid and the float MatMuls take float_ops' functions (by constant weights, MLAS's packed
sgemm's K blocks of 256, float_matmul.PACKED_STRIDE_K): both builds compute them alike (measured
equal: tests/test_arm_float_ops.py).
"""
from __future__ import annotations

import functools

import tvm
from tvm import s_tir, te, tirx, topi

from tvm_integration.qnn.float import float_conv, float_ops, layer_norm, mlas_math, reduce_mean
from tvm_integration.qnn.float.float_calls import emit, float32, shape_of
from tvm_integration.qnn.prim import neon_quantize

LANES = 4           # NEON's float32x4
MAXIMA = 2 * LANES  # lanes of a row's maximum: two vectors, two chains of compares


def softmax_func(shape: tuple[int, ...]) -> tirx.PrimFunc:
    """MLAS's generic softmax of each row (the last axis), as the module docstring says. Rows parallel; a row's
    maximum over its whole vectors of MAXIMA in that many lanes, then across them and the rest (a maximum of the same
    numbers in another order, the same value), its four lane sums in one vector (each lane its own elements in
    order), its exps and outputs in vectors but for the last ``d % 4``."""
    *rows, d = shape
    body, wide = d - d % LANES, d - d % MAXIMA
    x = te.placeholder(shape, "float32", "x")
    k = te.reduce_axis((0, wide if wide > MAXIMA else d), "k")
    top = te.compute(rows, lambda *i: te.max(x[(*i, k)], axis=k), name="top")
    if wide > MAXIMA:
        head = top
        top = te.compute(rows, lambda *i: functools.reduce(tirx.max, [x[(*i, j)] for j in range(wide, d)], head[i]),
                         name="top_rest")
    e = te.compute(shape, lambda *i: mlas_math.exp_nonpositive(x[i] + (-top[i[:-1]]), mlas_math.EXPONENT_BITS),
                   name="e")
    c = te.reduce_axis((0, max(body // LANES, 1)), "c")
    lanes = te.compute((*rows, LANES), lambda *i: te.sum(
        e[(*i[:-1], c * LANES + i[-1])] if body else mlas_math.f32(0.0), axis=c), name="lanes")

    def total(*i):
        value = (lanes[(*i, 0)] + lanes[(*i, 1)]) + (lanes[(*i, 2)] + lanes[(*i, 3)])
        for j in range(body, d):
            value = value + e[(*i, j)]
        return value
    scale = te.compute(rows, lambda *i: mlas_math.f32(1.0) / total(*i), name="scale")
    y = te.compute(shape, lambda *i: e[i] * scale[i[:-1]], name="y")
    sch = s_tir.Schedule(te.create_prim_func([x, y]))
    reductions = []
    if wide > MAXIMA:       # each lane's maximum over the row's whole vectors
        reductions.append(sch.rfactor(sch.split(sch.get_loops(sch.get_sblock("top"))[-1], [None, MAXIMA])[1], 0))
    loops = sch.get_loops(sch.get_sblock("y"))
    row = sch.fuse(*loops[:len(rows)]) if len(rows) > 1 else loops[0]
    sch.parallel(row)
    for name in ("scale", "lanes", "e", *(() if reductions else ("top",))):
        sch.compute_at(sch.get_sblock(name), row)
    if reductions:      # the maxima in a pass of their own: in the rows' loop LLVM rebuilt exp's constants (A72)
        loops = sch.get_loops(sch.get_sblock("top_rest"))
        maxima = sch.fuse(*loops) if len(loops) > 1 else loops[0]
        sch.parallel(maxima)
        for name in ("top", "top_rf"):
            sch.compute_at(sch.get_sblock(name), maxima)
    if body > LANES:
        reductions.append(sch.get_sblock("lanes"))
    for block in reductions:            # lanes innermost, vectors
        lane, step = sch.get_loops(block)[-2:]
        sch.reorder(step, lane)
        sch.vectorize(lane)
    for name in ("e", "y") if d % LANES else ("y",):
        _in_vectors(sch, sch.get_loops(sch.get_sblock(name))[-1], d)
    return sch.mod["main"]


def _in_vectors(sch: s_tir.Schedule, loop, d: int) -> None:
    """A row's elementwise loop of ``d`` in vectors of LANES, the last ``d % LANES`` one at a time."""
    if d % LANES and d > LANES:
        loop, _ = sch.loop_partition(loop, [d - d % LANES, None])
    if d >= LANES:
        sch.vectorize(sch.split(loop, [None, LANES])[1])


def layer_norm_func(shape: tuple[int, ...], epsilon: float) -> tirx.PrimFunc:
    """LayerNormalization over the last axis: onnxruntime's Welford loop with FMAs, every row."""
    n = shape[-1]
    x = te.placeholder(shape, "float32", "x")
    gamma = te.placeholder((n,), "float32", "gamma")
    beta = te.placeholder((n,), "float32", "beta")
    return layer_norm.welford_func(x, [x, gamma, beta], gamma, beta, epsilon, fused=True)


def _conv2d(bb, call):
    """A float NCHW conv2d (a Conv left in float): MLAS's im2col and sgemm, as on x86
    (float_conv.conv2d_func), each group on its own, as MLAS's convolution loops over them (its input
    channels and filters sliced, the groups' outputs concatenated); a depthwise one (one input channel a
    group) stays on TVM's conv2d, which equals MLAS's there (measured: tests/test_arm_float_ops.py); else None."""
    x, w = (shape_of(a) for a in call.args)
    a = call.attrs
    if x is None or w is None or len(x) != 4 or len(w) != 4 or not float32(call) or \
            a.data_layout != "NCHW" or a.kernel_layout != "OIHW" or any(int(d) != 1 for d in a.dilation):
        return None
    groups, strides, padding = int(a.groups), [int(s) for s in a.strides], [int(p) for p in a.padding]
    channels, filters = x[1] // groups, w[0] // groups
    if groups == 1:
        return emit(bb, float_conv.conv2d_func(x, w, strides, padding), "qsynth_float_conv2d", call.args,
                    shape_of(call))
    if channels == 1:
        return None
    func = float_conv.conv2d_func((x[0], channels, *x[2:]), (filters, *w[1:]), strides, padding)
    out = shape_of(call)
    parts = []
    for g in range(groups):
        xg = bb.emit(bb.call_te(topi.strided_slice, call.args[0], [0, g * channels, 0, 0],
                                [x[0], (g + 1) * channels, *x[2:]]))
        wg = bb.emit(bb.call_te(topi.strided_slice, call.args[1], [g * filters, 0, 0, 0], [(g + 1) * filters, *w[1:]]))
        parts.append(bb.emit(emit(bb, func, "qsynth_float_conv2d", [xg, wg], (out[0], filters, *out[2:]))))
    return bb.call_te(topi.concatenate, parts, 1)


def _runtime_quantize(bb, call):
    """A quantize by a run-time scale and zero point of shape ``()`` (DynamicQuantizeLinear's) without
    the vector division (neon_quantize.runtime_quantized: the same quotient); else None."""
    x, scale, zero_point = call.args
    if shape_of(x) is None or str(x.ty.dtype) != "float32" or shape_of(scale) != () or shape_of(zero_point) != ():
        return None
    out_dtype = str(call.attrs.out_dtype)
    func = neon_quantize.runtime_quantized(shape_of(x), str(zero_point.ty.dtype), out_dtype)
    return emit(bb, func, "quantize", [x, scale, zero_point], shape_of(x), out_dtype)


def legalize_map() -> dict:
    """float_ops.legalize_map() with this module's Softmax, LayerNormalization, float Conv, ReduceMean,
    GlobalAveragePool and run-time quantize, and MatMul in NEON's tiles, each where it fits, else the op's
    registered legalization."""
    return float_ops.legalize_map({
        "relax.quantize": _runtime_quantize,
        "relax.matmul": functools.partial(float_ops.matmul_rule, neon=True),
        "relax.nn.softmax": float_ops.softmax_rule(softmax_func),
        "relax.nn.layer_norm": float_ops.layer_norm_rule(layer_norm_func),
        "relax.nn.conv2d": _conv2d,
        "relax.mean": lambda bb, call: reduce_mean.mean(bb, call, pairs=reduce_mean.NEON_PAIRS),
        "relax.nn.adaptive_avg_pool2d": lambda bb, call: reduce_mean.global_pool(bb, call, reduce_mean.NEON_PAIRS)})


def onnxruntime_fusions(mod: tvm.IRModule) -> tvm.IRModule:
    """onnxruntime's float fusions (float_ops.onnxruntime_fusions), their kernels as its AArch64 build's."""
    return float_ops.onnxruntime_fusions(mod, fused=True)
