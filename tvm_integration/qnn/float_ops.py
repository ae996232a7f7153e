"""The float ops a quantized transformer keeps between DequantizeLinear and QuantizeLinear (or, after
quantize_dynamic, between the integer matmuls): the matmul of two activations, Softmax, Erf/GELU,
LayerNormalization, and the whole-tensor min/max of DynamicQuantizeLinear. Each but LayerNorm is
computed as onnxruntime's x86 kernels compute it (bit-exact: tests/test_float_ops.py), and all are
scheduled here (TVM's legalized defaults run them serially: 75 of a 4-layer BERT's 95 ms).

``legalize_map()`` is the LegalizeOps override bind.py uses; the PrimFuncs it writes carry
``schedules.SCHEDULED`` and are not rescheduled.
"""
from __future__ import annotations

import numpy as np
import tvm
from tvm import relax, s_tir, te, tirx
from tvm.tirx.op import fma

from tvm_integration.qnn import mlas_math
from tvm_integration.qnn.qdq import constant
from tvm_integration.qnn.schedules import SCHEDULED

LANES = 16                    # float32 lanes of an AVX-512 vector


def _shape(expr) -> tuple[int, ...] | None:
    shape = expr.ty.shape if isinstance(expr.ty, relax.TensorType) else None
    if shape is None or not all(isinstance(d, tirx.IntImm) for d in shape):
        return None
    return tuple(int(d) for d in shape)


def _float32(call) -> bool:
    return all(isinstance(a.ty, relax.TensorType) and str(a.ty.dtype) == "float32" for a in call.args
               if isinstance(a, relax.Expr) and isinstance(a.ty, relax.TensorType))


def _emit(bb: relax.BlockBuilder, func: tirx.PrimFunc, name: str, args, out_shape, dtype="float32"):
    func = func.with_attr(SCHEDULED, True)
    gvar = bb.add_func(func, name)
    bb.update_func(gvar, func.with_attr("global_symbol", gvar.name_hint))
    return relax.call_tir(gvar, list(args), relax.TensorType(out_shape, dtype))


# -- matmul of two float activations ------------------------------------------------------------------

def stride_k(k: int, n: int) -> int:
    """MLAS sgemm's K block for a K x N operand B: 128 (with N blocks of 128), halved while K fits in
    half of it (N's block doubled), doubled while N fits in half of N's block (down to 16). Each
    block's sum is added to C in turn, so the block decides the rounding."""
    stride_n, stride = 128, 128
    if n >= k:
        while stride // 2 >= k:
            stride_n, stride = stride_n * 2, stride // 2
    else:
        while stride_n > 16 and stride_n // 2 >= n:
            stride_n, stride = stride_n // 2, stride * 2
    return stride


def matmul_func(a_shape: tuple[int, ...], b_shape: tuple[int, ...]) -> tirx.PrimFunc:
    """``a @ b`` with numpy's broadcasting, as MLAS's sgemm sums: each output one FMA chain over k from
    0, a K longer than MLAS's block (stride_k) in blocks whose sums are added in order. Parallel
    over batch and row tiles; each tile 4 rows by up to 64 columns held in registers across k."""
    batch = tuple(int(d) for d in np.broadcast_shapes(a_shape[:-2], b_shape[:-2]))
    m, k, n = a_shape[-2], a_shape[-1], b_shape[-1]
    a = te.placeholder(a_shape, "float32", "a")
    b = te.placeholder(b_shape, "float32", "b")

    def pick(shape, index):
        own = shape[:-2]
        return [0 if d == 1 else i for d, i in zip(own, index[len(index) - len(own):])]

    def block_sum(start, size):
        r = te.reduce_axis((0, size), f"k{start}")
        return te.compute((*batch, m, n), lambda *i: te.sum(
            a[(*pick(a_shape, i[:-2]), i[-2], r + start)] * b[(*pick(b_shape, i[:-2]), r + start, i[-1])], axis=r),
            name=f"block{start}")

    def added(partial, block, start):
        return te.compute(partial.shape, lambda *i: partial(*i) + block(*i), name=f"sum{start}")

    stride = stride_k(k, n)
    blocks = [(s, min(stride, k - s)) for s in range(0, k, stride)]
    partial = block_sum(*blocks[0])
    for start, size in blocks[1:]:
        partial = added(partial, block_sum(start, size), start)
    sch = s_tir.Schedule(te.create_prim_func([a, b, partial]))
    width = next((w for w in (64, 32, 16) if n % w == 0), None)
    rows = next(r for r in (4, 2, 1) if m % r == 0)
    for start, _ in blocks:
        _register_tile(sch, sch.get_sblock(f"block{start}"), rows, width)
        if start:
            *outer, last = sch.get_loops(sch.get_sblock(f"sum{start}"))
            sch.parallel(sch.fuse(*outer))
            sch.vectorize(last)
    return sch.mod["main"]


def _register_tile(sch, block, rows: int, width: int | None) -> None:
    """``rows`` x ``width`` outputs accumulated in registers over the whole reduction (k outermost
    within the tile, so each output's sum keeps k's order), the tiles parallel."""
    *outer, i, j, k = sch.get_loops(block)
    io, ii = sch.split(i, [None, rows])
    jo, ji = sch.split(j, [None, width or 1])
    sch.reorder(*outer, io, jo, k, ii, ji)
    sch.parallel(sch.fuse(*outer, io))
    acc = sch.cache_write(block, 0, "local")
    sch.reverse_compute_at(acc, jo)
    sch.unroll(ii)
    if width:
        sch.vectorize(ji)
        sch.vectorize(sch.get_loops(acc)[-1])
    init = sch.decompose_reduction(block, k)
    if width:
        sch.vectorize(sch.get_loops(init)[-1])


# -- Softmax over the last axis -----------------------------------------------------------------------

def softmax_func(shape: tuple[int, ...]) -> tirx.PrimFunc:
    """MLAS's softmax of each row (the last axis): its maximum; exp(x - max) (mlas_math); the sum as
    the AVX-512 kernel adds, 16 lane sums over the row in order, then halves (8 + 8), pairs, pairs,
    halves; each exp times float32(1 / sum). Rows parallel, the lanes vectorized."""
    *rows, d = shape
    x = te.placeholder(shape, "float32", "x")
    r = te.reduce_axis((0, d), "r")
    top = te.compute(rows, lambda *i: te.max(x[(*i, r)], axis=r), name="top")
    e = te.compute(shape, lambda *i: mlas_math.exp_nonpositive(x[i] + (-top[i[:-1]])), name="e")
    chunks = (d + LANES - 1) // LANES
    t = te.reduce_axis((0, chunks), "t")
    lanes = te.compute((*rows, LANES), lambda *i: te.sum(
        tirx.Select(t * LANES + i[-1] < d, e[(*i[:-1], tirx.min(t * LANES + i[-1], d - 1))], mlas_math.f32(0.0)),
        axis=t), name="lanes")

    def total(*i):
        h = [lanes[(*i, j)] + lanes[(*i, j + 8)] for j in range(8)]
        pairs = [(h[0] + h[1]) + (h[2] + h[3]), (h[4] + h[5]) + (h[6] + h[7])]
        return pairs[0] + pairs[1]
    scale = te.compute(rows, lambda *i: mlas_math.f32(1.0) / total(*i), name="scale")
    y = te.compute(shape, lambda *i: e[i] * scale[i[:-1]], name="y")
    sch = s_tir.Schedule(te.create_prim_func([x, y]))
    _rows_parallel(sch, ["top", "e", "lanes", "scale", "y"], len(rows))
    return sch.mod["main"]


def _rows_parallel(sch, names: list[str], row_axes: int) -> None:
    """Every block under one parallel loop over the rows (the first ``row_axes`` axes, fused), each
    block's innermost spatial axis vectorized where the row holds whole vectors."""
    last = sch.get_sblock(names[-1])
    loops = sch.get_loops(last)
    row = sch.fuse(*loops[:row_axes]) if row_axes > 1 else loops[0]
    sch.parallel(row)
    for name in reversed(names[:-1]):
        sch.compute_at(sch.get_sblock(name), row)
    for name in names:
        block = sch.get_sblock(name)
        inner = sch.get_loops(block)[1:]
        kinds = [iv.iter_type for iv in sch.get(block).iter_vars]
        spatial = [loop for loop, kind in zip(inner, kinds[row_axes:]) if kind == 0]
        if spatial and sch.get(spatial[-1]).extent.value % LANES == 0:
            if any(kind != 0 for kind in kinds):       # a reduction: lanes innermost, the sum outside
                reduction = [loop for loop, kind in zip(inner, kinds[row_axes:]) if kind != 0]
                sch.reorder(*reduction, spatial[-1])
            _, lanes = sch.split(spatial[-1], [None, LANES])
            sch.vectorize(lanes)


# -- Erf ----------------------------------------------------------------------------------------------

def elementwise_func(shape: tuple[int, ...], fn, name: str) -> tirx.PrimFunc:
    """``fn`` of every element of a float32 tensor: parallel, LANES-wide vectors."""
    x = te.placeholder(shape, "float32", "x")
    y = te.compute(shape, lambda *i: fn(x[i]), name=name)
    sch = s_tir.Schedule(te.create_prim_func([x, y]))
    loops = sch.get_loops(sch.get_sblock(name))
    fused = sch.fuse(*loops) if len(loops) > 1 else loops[0]
    size = int(np.prod(shape))
    if size % LANES == 0 and size > LANES:
        fused, lanes = sch.split(fused, [None, LANES])
        sch.vectorize(lanes)
    sch.parallel(fused)
    return sch.mod["main"]


def gelu(x):
    """onnxruntime's Gelu (the fusion of x * (erf(x / sqrt 2) + 1) * 0.5): erf of x times
    float32(1 / sqrt 2), not x divided by float32(sqrt 2), then (0.5 x)(erf + 1)."""
    return (mlas_math.f32(0.5) * x) * (mlas_math.erf(x * mlas_math.f32(0.70710678118654752440)) + mlas_math.f32(1.0))


def _scalar(expr, value: float) -> bool:
    array = constant(expr)
    return array is not None and array.size == 1 and array.reshape(-1)[0] == np.float32(value)


def fuse_gelu(func: relax.Function) -> relax.Function:
    """``x * (erf(x / sqrt 2) + 1) * 0.5`` (torch's export of exact GELU) -> ``nn.gelu(x)``, as
    onnxruntime's GeluFusion rewrites it, so the model computes what onnxruntime's Gelu computes."""
    from tvm.relax.dpl import is_op, rewrite_call, wildcard
    x, c0, c1, c2 = wildcard(), wildcard(), wildcard(), wildcard()
    inner = is_op("relax.multiply")(x, is_op("relax.add")(is_op("relax.erf")(is_op("relax.divide")(x, c0)), c1))
    pattern = is_op("relax.multiply")(inner, c2)

    def rewriter(matched, bound):
        if _scalar(bound[c0], np.sqrt(2)) and _scalar(bound[c1], 1.0) and _scalar(bound[c2], 0.5) and \
                _float32_tensor(bound[x]):
            return relax.op.nn.gelu(bound[x])
        return matched
    return rewrite_call(pattern, rewriter, func)


def _float32_tensor(expr) -> bool:
    return isinstance(expr.ty, relax.TensorType) and str(expr.ty.dtype) == "float32"


# -- whole-tensor max and min (DynamicQuantizeLinear's range) -----------------------------------------

def reduce_all_func(shape: tuple[int, ...], kind: str) -> tirx.PrimFunc:
    """The max or min of every element (exact in any order): LANES partial results over the
    flattened tensor, then one over them."""
    size = int(np.prod(shape))
    x = te.placeholder(shape, "float32", "x")
    flat = lambda index: x[tuple(_unravel(index, shape))]
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


def _unravel(index, shape):
    out = []
    for d in reversed(shape):
        out.append(tirx.floormod(index, d))
        index = tirx.floordiv(index, d)
    return out[::-1]


# -- the LegalizeOps override -------------------------------------------------------------------------

def _matmul(bb, call):
    a, b = (_shape(x) for x in call.args)
    if a is None or b is None or len(a) < 2 or len(b) < 2 or not _float32(call):
        return None
    out = (*np.broadcast_shapes(a[:-2], b[:-2]), a[-2], b[-1])
    return _emit(bb, matmul_func(a, b), "qsynth_float_matmul", call.args, out)


def _softmax(bb, call):
    shape = _shape(call.args[0])
    if shape is None or not _float32(call) or int(call.attrs.axis) not in (-1, len(shape) - 1):
        return None
    return _emit(bb, softmax_func(shape), "qsynth_softmax", call.args, shape)


def _elementwise(fn, name):
    def legalize(bb, call):
        shape = _shape(call.args[0])
        if shape is None or not _float32(call):
            return None
        return _emit(bb, elementwise_func(shape, fn, name), "qsynth_" + name, call.args, shape)
    return legalize


def _reduce_all(kind):
    def legalize(bb, call):
        shape = _shape(call.args[0])
        if shape is None or not _float32(call) or call.attrs.axis is not None or not shape:
            return None
        return _emit(bb, reduce_all_func(shape, kind), f"qsynth_{kind}", call.args, ())
    return legalize


RULES = {"relax.matmul": _matmul, "relax.nn.softmax": _softmax, "relax.erf": _elementwise(mlas_math.erf, "erf"),
         "relax.nn.gelu": _elementwise(gelu, "gelu"), "relax.max": _reduce_all("max"), "relax.min": _reduce_all("min")}


def legalize_map() -> dict:
    """op name -> LegalizeOps function: ours where the call fits (float32, static shapes), else the
    op's registered legalization."""
    def with_default(name, rule):
        def legalize(bb, call):
            new = rule(bb, call)
            return new if new is not None else tvm.ir.Op.get(name).get_attr("FLegalize")(bb, call)
        return legalize
    return {name: with_default(name, rule) for name, rule in RULES.items()}


# -- LayerNormalization --------------------------------------------------------------------------------

def rounded(value):
    """``value`` rounded to float32 on its own: LLVM may not fuse it into an FMA with what follows
    (TVM builds with FP contraction on; onnxruntime's plain C++ loops multiply and add separately)."""
    return tirx.call_llvm_pure_intrin("float32", "llvm.arithmetic.fence", value)


def layer_norm_func(shape: tuple[int, ...], epsilon: float) -> tirx.PrimFunc:
    """LayerNormalization over the last axis (rows of a multiple of 8) in the order of MLAS's AVX2
    layer-norm kernel as its source reads: 8 lane sums of x and FMA sums of x * x over the row, each
    reduced ((s0 + s4) + (s2 + s6)) + ((s1 + s5) + (s3 + s7)); mean = sum / n; inv = 1 / sqrt(sumsq / n
    - mean * mean + eps); y = fma((x - mean) * inv, scale, bias). Rows parallel. Not yet onnxruntime
    1.32's result: about half the outputs differ in the last bit (docs/operators.md)."""
    *rows, n = shape
    x = te.placeholder(shape, "float32", "x")
    gamma = te.placeholder((n,), "float32", "gamma")
    beta = te.placeholder((n,), "float32", "beta")
    t = te.reduce_axis((0, n // 8), "t")
    sums = te.compute((*rows, 8), lambda *i: te.sum(x[(*i[:-1], t * 8 + i[-1])], axis=t), name="sums")
    u = te.reduce_axis((0, n // 8), "u")
    squares = te.compute((*rows, 8), lambda *i: te.sum(x[(*i[:-1], u * 8 + i[-1])] * x[(*i[:-1], u * 8 + i[-1])],
                                                       axis=u), name="squares")

    def across(lanes, i):
        s = [lanes[(*i, j)] for j in range(8)]
        return ((s[0] + s[4]) + (s[2] + s[6])) + ((s[1] + s[5]) + (s[3] + s[7]))
    count = mlas_math.f32(float(n))
    mean = te.compute(rows, lambda *i: across(sums, i) / count, name="mean")
    inv = te.compute(rows, lambda *i: mlas_math.f32(1.0) / tirx.sqrt(
        across(squares, i) / count - mean[i] * mean[i] + mlas_math.f32(epsilon)), name="inv")
    y = te.compute(shape, lambda *i: fma((x[i] - mean[i[:-1]]) * inv[i[:-1]], gamma[i[-1]], beta[i[-1]]), name="y")
    sch = s_tir.Schedule(te.create_prim_func([x, gamma, beta, y]))
    _rows_parallel(sch, ["sums", "squares", "mean", "inv", "y"], len(rows))
    return sch.mod["main"]


def _layer_norm(bb, call):
    shape = _shape(call.args[0])
    axes = [int(a) % len(shape) for a in call.attrs.axes] if shape else None
    if shape is None or not _float32(call) or axes != [len(shape) - 1] or shape[-1] % 8 or \
            any(_shape(a) != shape[-1:] for a in call.args[1:]):
        return None
    return _emit(bb, layer_norm_func(shape, float(call.attrs.epsilon)), "qsynth_layer_norm", call.args, shape)


RULES["relax.nn.layer_norm"] = _layer_norm
