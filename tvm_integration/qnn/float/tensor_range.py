"""The whole-tensor max and min of a float tensor (DynamicQuantizeLinear's range, float_ops.py's rules):
exact in any order, so computed in LANES partial results over the flattened tensor, then one over them."""
from __future__ import annotations

import numpy as np
from tvm import s_tir, te, tirx

from tvm_integration.qnn.float import mlas_math, reduce_mean
from tvm_integration.qnn.float.float_matmul import LANES


def reduce_all_func(shape: tuple[int, ...], kind: str) -> tirx.PrimFunc:
    """The max or min of every element (exact in any order): LANES partial results over the
    flattened tensor, then one over them, each from an infinity (``_from``)."""
    size = int(np.prod(shape))
    x = te.placeholder(shape, "float32", "x")
    combine, start = (tirx.max, -np.inf) if kind == "max" else (tirx.min, np.inf)
    reducer = _from(combine, start, kind)
    t = te.reduce_axis((0, size // LANES), "t")
    lanes = te.compute((LANES,), lambda j: reducer(_at(x, t * LANES + j), axis=t), name="lanes")
    j = te.reduce_axis((0, LANES), "j")
    y = te.compute((), lambda: reducer(combine(lanes[j], _last(x, j, start)) if size % LANES else lanes[j], axis=j),
                   name="y")
    return _lanes_vectorized(s_tir.Schedule(te.create_prim_func([x, y])))


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
    t = te.reduce_axis((0, size // LANES), "t")
    top, bottom = te.compute((LANES,), lambda j: extremes((_at(x, t * LANES + j), _at(x, t * LANES + j)), axis=t),
                             name="lanes")
    j = te.reduce_axis((0, LANES), "j")
    maximum, minimum = _from(larger, -np.inf, "maximum"), _from(smaller, np.inf, "minimum")
    high = te.compute((), lambda: maximum(larger(top[j], _last(x, j, -np.inf)) if size % LANES else top[j], axis=j),
                      name="high")
    low = te.compute((), lambda: minimum(smaller(bottom[j], _last(x, j, np.inf)) if size % LANES else bottom[j],
                                         axis=j), name="low")
    return _lanes_vectorized(s_tir.Schedule(te.create_prim_func([x, high, low])))


def _from(combine, start: float, name: str):
    """The reducer of ``combine`` starting from ``start`` (an infinity, so that a max of nothing but -inf
    is -inf; te.max starts from the lowest finite float)."""
    return te.comm_reducer(lambda a, b: combine(a, b), lambda t: mlas_math.f32(start), name=name)


def _at(x: te.Tensor, index):
    """Element ``index`` of the flattened ``x``."""
    return x[tuple(reduce_mean.unravel(index, x.shape))]


def _last(x: te.Tensor, lane, pad: float):
    """Lane ``lane``'s element of the last, partial group of LANES, or ``pad`` past the tensor's end:
    a branch in the scalar reduction over the lanes, not a vector Select (whose load ran past the end)."""
    size = int(np.prod([int(d) for d in x.shape]))
    index = size // LANES * LANES + lane
    return tirx.if_then_else(index < size, _at(x, index), mlas_math.f32(pad))


def _lanes_vectorized(sch: s_tir.Schedule) -> tirx.PrimFunc:
    """The lanes' reduction over the whole groups vectorized over the lanes, its start out of the
    loop (no group at all under LANES elements)."""
    block = sch.get_sblock("lanes")
    lane, chunk = sch.get_loops(block)
    sch.reorder(chunk, lane)
    sch.vectorize(lane)
    sch.vectorize(sch.get_loops(sch.decompose_reduction(block, chunk))[-1])
    return sch.mod["main"]


def _nan_propagating(intrinsic: str):
    """The float32 max or min of two values by LLVM's ``intrinsic`` (llvm.maximum, llvm.minimum: NEON's fmax, fmin)."""
    return lambda a, b: tirx.call_llvm_pure_intrin("float32", intrinsic, a, b)
