"""The whole-tensor max and min of a float tensor (DynamicQuantizeLinear's range, float_ops.py's rules):
exact in any order, so computed in LANES partial results over the flattened tensor, then one over them."""
from __future__ import annotations

import numpy as np
from tvm import s_tir, te, tirx

from tvm_integration.qnn.float import mlas_math, reduce_mean
from tvm_integration.qnn.float.float_matmul import LANES


def reduce_all_func(shape: tuple[int, ...], kind: str) -> tirx.PrimFunc:
    """The max or min of every element (exact in any order): LANES partial results over the
    flattened tensor, then one over them."""
    size = int(np.prod(shape))
    x = te.placeholder(shape, "float32", "x")
    flat = lambda index: x[tuple(reduce_mean.unravel(index, shape))]
    reducer, start = (te.max, -np.inf) if kind == "max" else (te.min, np.inf)
    chunks = (size + LANES - 1) // LANES
    t = te.reduce_axis((0, chunks), "t")
    lanes = te.compute((LANES,), lambda j: reducer(
        tirx.Select(t * LANES + j < size, flat(tirx.min(t * LANES + j, size - 1)), mlas_math.f32(start)), axis=t),
        name="lanes")
    j = te.reduce_axis((0, LANES), "j")
    y = te.compute((), lambda: reducer(lanes[j], axis=j), name="y")
    sch = s_tir.Schedule(te.create_prim_func([x, y]))
    block = sch.get_sblock("lanes")
    lane, chunk = sch.get_loops(block)
    sch.reorder(chunk, lane)
    sch.vectorize(lane)
    return sch.mod["main"]


def range_func(shape: tuple[int, ...], neon: bool = False) -> tirx.PrimFunc:
    """The max and the min of every element in one pass (DynamicQuantizeLinear takes both of one
    tensor): LANES partial maxima and minima over the flattened tensor, then one of each over them.
    ``neon``: by NEON's fmax and fmin, as MLAS's MlasFindMinMaxElement on AArch64 (a NaN propagates), one
    instruction each where a compare and a select took two (dynamic BERT's ranges on the Cortex-A76's N1
    model: 1.39 -> 0.70 M cycles)."""
    size = int(np.prod(shape))
    x = te.placeholder(shape, "float32", "x")
    larger, smaller = (_nan_propagating("llvm.maximum"), _nan_propagating("llvm.minimum")) if neon else \
        (lambda a, b: tirx.max(a, b), lambda a, b: tirx.min(a, b))
    extremes = te.comm_reducer(lambda a, b: (larger(a[0], b[0]), smaller(a[1], b[1])),
                               lambda t0, t1: (mlas_math.f32(-np.inf), mlas_math.f32(np.inf)), name="extremes")
    t = te.reduce_axis((0, (size + LANES - 1) // LANES), "t")

    def lane(j):
        inside = t * LANES + j < size
        value = x[tuple(reduce_mean.unravel(tirx.min(t * LANES + j, size - 1), shape))]
        return extremes((tirx.Select(inside, value, mlas_math.f32(-np.inf)),
                         tirx.Select(inside, value, mlas_math.f32(np.inf))), axis=t)
    top, bottom = te.compute((LANES,), lane, name="lanes")
    j = te.reduce_axis((0, LANES), "j")
    maximum = te.comm_reducer(larger, lambda t: mlas_math.f32(-np.inf), name="maximum")
    minimum = te.comm_reducer(smaller, lambda t: mlas_math.f32(np.inf), name="minimum")
    high = te.compute((), lambda: maximum(top[j], axis=j), name="high")
    low = te.compute((), lambda: minimum(bottom[j], axis=j), name="low")
    sch = s_tir.Schedule(te.create_prim_func([x, high, low]))
    lane_loop, chunk = sch.get_loops(sch.get_sblock("lanes"))
    sch.reorder(chunk, lane_loop)
    sch.vectorize(lane_loop)
    return sch.mod["main"]


def _nan_propagating(intrinsic: str):
    """The float32 max or min of two values by LLVM's ``intrinsic`` (llvm.maximum, llvm.minimum: NEON's fmax, fmin)."""
    return lambda a, b: tirx.call_llvm_pure_intrin("float32", intrinsic, a, b)
