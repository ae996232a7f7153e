"""The float means onnxruntime 1.32's x86-64 wheel computes, step for step, so that a model whose last
op is one rounds as onnxruntime does: ReduceMean over the trailing axes (its "KR" fast path: Eigen's
vectorized ``sum()`` of each row, then a division; SqueezeNet's head), and GlobalAveragePool (MLAS's
global pooling kernel, in another order)."""
from __future__ import annotations

import numpy as np
from tvm import s_tir, te, tirx

from tvm_integration.ops.blend import blend
from tvm_integration.qnn.float import mlas_math
from tvm_integration.qnn.float.float_calls import emit, float32, shape_of

PACKET = 4                    # float32 lanes of Eigen's SSE packet in onnxruntime's x86 build
SSE_PAIRS = ((0, 2), (1, 3))  # the order SSE reduces a packet's lanes in: (0 + 2) + (1 + 3)
NEON_PAIRS = ((0, 1), (2, 3))  # NEON's (two faddp): (0 + 1) + (2 + 3), onnxruntime's AArch64 build
NEGATIVE_ZERO = mlas_math.f32(-0.0)   # a sum not yet started: -0.0 + x is x for every x, -0.0 included


def unravel(index, shape):
    """The indices of flat element ``index`` of a row-major tensor of ``shape``."""
    out = []
    for d in reversed(shape):
        out.append(tirx.floormod(index, d))
        index = tirx.floordiv(index, d)
    return out[::-1]


def ravel(index, shape):
    """The flat element number of ``index`` in a row-major tensor of ``shape``."""
    return sum((i * int(np.prod(shape[a + 1:])) for a, i in enumerate(index)), tirx.const(0))


def mean_func(shape: tuple[int, ...], reduced: int, keepdims: bool, layout: str = "NCHW",
              pairs=SSE_PAIRS) -> tirx.PrimFunc:
    """The mean over the last ``reduced`` axes as onnxruntime's ReduceMean computes it (its "KR" fast
    path): Eigen's ``sum()`` of each row of N contiguous elements, then divided by N. Eigen starts at
    the row's first 16-byte-aligned element (row r begins at element r * N of an aligned buffer), sums
    packets of 4 in two accumulators, adds them and a last odd packet, reduces the lanes
    (0 + 2) + (1 + 3) (``pairs``; NEON_PAIRS on AArch64), then adds the unaligned head and tail in
    order. Rows parallel. ``layout="NHWC"``
    (``shape`` the model's NCHW, ``reduced`` 2): the same sums of the image held NHWC, read in place
    (a squeeze-and-excitation's pooling: no transpose of the image first); the result ``[b, 1, 1, c]``
    with ``keepdims``, the same bytes as ``[b, c, 1, 1]``."""
    kept = shape[:len(shape) - reduced]
    rows, n, pair = int(np.prod(kept)), int(np.prod(shape[len(shape) - reduced:])), 2 * PACKET
    if layout == "NHWC":
        b, c, h, w = shape
        x = te.placeholder((b, h, w, c), "float32", "x")

        def at(r, i):
            i = tirx.min(i, n - 1)
            return x[r // c, i // w, i % w, r % c]
    else:
        x = te.placeholder(shape, "float32", "x")

        def at(r, i):
            return x[tuple(unravel(r * n + tirx.min(i, n - 1), shape))]

    def start(r):
        return tirx.min(tirx.floormod(-r * n, PACKET), n)

    def packets(r, width):
        return tirx.floordiv(n - start(r), width) * width

    add = te.comm_reducer(lambda a, b: a + b, lambda dtype: NEGATIVE_ZERO, name="sum_from_negative_zero")
    t = te.reduce_axis((0, (n + pair - 1) // pair), "t")
    # NHWC's lanes are vectors of channels: a Select there loads both values, its clamp on the pixel
    # dropped (a read past the image's end), so a blend; NCHW's stay scalar, the Select a branch
    pick = blend if layout == "NHWC" else tirx.Select
    lanes = te.compute((rows, pair), lambda r, j: add(pick(
        t * pair + j < packets(r, pair), at(r, start(r) + t * pair + j), NEGATIVE_ZERO), axis=t), name="lanes")

    def mean(r):
        first, aligned, paired = start(r), packets(r, PACKET), packets(r, pair)
        packet = [lanes[r, j] + lanes[r, j + PACKET] for j in range(PACKET)]
        packet = [tirx.Select(aligned > paired, p + at(r, first + paired + j), p) for j, p in enumerate(packet)]
        (a, b), (c, d) = pairs
        total = (packet[a] + packet[b]) + (packet[c] + packet[d])
        for k in range(PACKET - 1):
            total = tirx.Select(k < first, total + at(r, k), total)
        for k in range(PACKET - 1):
            total = tirx.Select(first + aligned + k < n, total + at(r, first + aligned + k), total)
        return total / mlas_math.f32(n)

    if layout == "NHWC":
        y = te.compute((shape[0], 1, 1, shape[1]) if keepdims else kept, lambda bi, *i: mean(bi * shape[1] + i[-1]),
                       name="mean")
    else:
        y = te.compute((*kept, *[1] * reduced) if keepdims else kept, lambda *i: mean(ravel(i[:len(kept)], kept)),
                       name="mean")
    sch = s_tir.Schedule(te.create_prim_func([x, y]))
    loops = sch.get_loops(sch.get_sblock("mean"))
    width = next((v for v in (16, 8, 4) if shape[1] % v == 0), None) if layout == "NHWC" else None
    if width and keepdims:    # channels across the vector lanes, each lane one row's sums in its order
        *outer, channels = loops
        group, lane = sch.split(channels, [None, width])
        group = sch.fuse(*outer, group)
        sch.parallel(group)
        sch.vectorize(lane)
        lanes = sch.get_sblock("lanes")
        sch.transform_layout(lanes, ("write", 0), lambda r, j: (j, r))     # each sum's rows contiguous
        sch.compute_at(lanes, group)
        row, j, t = sch.get_loops(lanes)[-3:]
        sch.reorder(t, j, row)
        sch.vectorize(row)
    elif loops:               # none for a scalar mean
        fused = sch.fuse(*loops) if len(loops) > 1 else loops[0]
        sch.parallel(fused)
        sch.compute_at(sch.get_sblock("lanes"), fused)
    return sch.mod["main"]


def global_pool_func(shape: tuple[int, ...], pairs=SSE_PAIRS) -> tirx.PrimFunc:
    """GlobalAveragePool of an NC... tensor as MLAS's global pooling kernel computes it
    (onnxruntime/core/mlas/lib/pooling.cpp, ``MlasPoolGlobalKernel``): per plane of N elements, one
    4-lane accumulator from +0.0 over elements 0..4*floor(N/4) (lane j takes every element 4t + j), the
    lanes added (0 + 2) + (1 + 3) (``MlasReduceAddFloat32x4`` on SSE; ``pairs``), the tail added in order, then
    divided by N; output ``[.., .., 1, ..]``. Planes parallel."""
    planes, n = int(np.prod(shape[:2])), int(np.prod(shape[2:]))
    x = te.placeholder(shape, "float32", "x")

    def at(p, i):
        return x[tuple(unravel(p * n + tirx.min(i, n - 1), shape))]
    whole = n // PACKET * PACKET
    t = te.reduce_axis((0, max(whole // PACKET, 1)), "t")
    lanes = te.compute((planes, PACKET), lambda p, j: te.sum(tirx.Select(
        t * PACKET < whole, at(p, t * PACKET + j), mlas_math.f32(0.0)), axis=t), name="lanes")

    def mean(p):
        (a, b), (c, d) = pairs
        total = (lanes[p, a] + lanes[p, b]) + (lanes[p, c] + lanes[p, d])
        for k in range(whole, n):
            total = total + at(p, k)
        return total / mlas_math.f32(n)
    y = te.compute((*shape[:2], *[1] * (len(shape) - 2)), lambda b, c, *_: mean(b * shape[1] + c), name="mean")
    sch = s_tir.Schedule(te.create_prim_func([x, y]))
    fused = sch.fuse(*sch.get_loops(sch.get_sblock("mean")))
    sch.parallel(fused)
    sch.compute_at(sch.get_sblock("lanes"), fused)
    return sch.mod["main"]


# -- the rules float_ops.py's LegalizeOps override takes for relax.mean and adaptive_avg_pool2d ---------

def mean(bb, call, image=None, pairs=SSE_PAIRS):
    """A float ReduceMean over trailing axes (``mean_func``); with ``image`` (bind.py: the same NCHW
    image held NHWC, a squeeze-and-excitation's pooling) one over H and W (keepdims) read from it in
    place, ``[b, 1, 1, c]``, instead of a transpose of it (EfficientNet-B0's 112x112x32, 56x56x96 ...);
    else None."""
    shape = shape_of(call.args[0])
    if shape is None or not shape or not float32(call):
        return None
    axes = sorted({int(a) % len(shape) for a in call.attrs.axis}) if call.attrs.axis is not None else \
        list(range(len(shape)))
    if image is not None:
        nhwc = len(shape) == 4 and axes == [2, 3] and call.attrs.keepdims
        return emit(bb, mean_func(shape, 2, True, "NHWC", pairs), "qsynth_mean", [image], (shape[0], 1, 1, shape[1])) \
            if nhwc else None
    if axes != list(range(len(shape) - len(axes), len(shape))):
        return None
    return emit(bb, mean_func(shape, len(axes), bool(call.attrs.keepdims), pairs=pairs), "qsynth_mean", call.args,
                shape_of(call))


def is_global_average_pool(call) -> bool:
    """Whether a ``relax.nn.adaptive_avg_pool2d`` call is a GlobalAveragePool as the ONNX importer writes
    it (to 1x1, NCHW)."""
    return [int(d) for d in call.attrs.output_size or []] == [1, 1] and call.attrs.layout == "NCHW"


def global_pool(bb, call, pairs=SSE_PAIRS):
    """A float GlobalAveragePool (``global_pool_func``): the importer's ``adaptive_avg_pool2d`` to 1x1, NCHW."""
    shape = shape_of(call.args[0])
    ok = shape is not None and len(shape) == 4 and is_global_average_pool(call) and float32(call)
    return emit(bb, global_pool_func(shape, pairs), "qsynth_global_pool", call.args, shape_of(call)) if ok else None
