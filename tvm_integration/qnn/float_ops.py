"""The float ops a quantized transformer keeps between DequantizeLinear and QuantizeLinear (or, after
quantize_dynamic, between the integer matmuls): the matmul of two activations, Softmax, Erf/GELU,
Tanh, LayerNormalization (layer_norm.py), a mean over the trailing axes (reduce_mean.py), and the
whole-tensor min/max of DynamicQuantizeLinear. Each is computed as onnxruntime's x86 kernels compute
it (bit-exact: tests/test_float_ops.py, test_float_onnxruntime_math.py), and all are
scheduled here (TVM's legalized defaults run them serially: 75 of a 4-layer BERT's 95 ms).

``legalize_map()`` is the LegalizeOps override bind.py uses; the PrimFuncs it writes carry
``schedules.SCHEDULED`` and are not rescheduled.
"""
from __future__ import annotations

import numpy as np
import tvm
from tvm import relax, s_tir, te, tirx

from tvm_integration.qnn import layer_norm, mlas_math, reduce_mean
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


def matmul_func(a_shape: tuple[int, ...], b_shape: tuple[int, ...], alpha: float | None = None) -> tirx.PrimFunc:
    """``a @ b`` with numpy's broadcasting, as MLAS's sgemm sums: each output one FMA chain over k from
    0, a K longer than MLAS's block (stride_k) in blocks whose sums are added in order. With
    ``alpha`` (onnxruntime's FusedMatMul): the first block's sum times alpha, each later one added as
    fma(sum, alpha, C). Parallel over batch and row tiles; each tile 4 rows by up to 64 columns held
    in registers across k; more than 32 columns not in whole vectors (ViT's 196 keys) over B padded
    with zero columns to 32-lane tiles, then cut (in scalars: 9x slower)."""
    batch = tuple(int(d) for d in np.broadcast_shapes(a_shape[:-2], b_shape[:-2]))
    m, k, n = a_shape[-2], a_shape[-1], b_shape[-1]
    a = te.placeholder(a_shape, "float32", "a")
    b = te.placeholder(b_shape, "float32", "b")
    wide = n if n % LANES == 0 or n <= 2 * LANES else -(-n // (2 * LANES)) * 2 * LANES
    padded = b if wide == n else te.compute((*b_shape[:-1], wide), lambda *i: tirx.Select(
        i[-1] < n, b[(*i[:-1], tirx.min(i[-1], n - 1))], mlas_math.f32(0.0)), name="padded")

    def pick(shape, index):
        own = shape[:-2]
        return [0 if d == 1 else i for d, i in zip(own, index[len(index) - len(own):])]

    def block_sum(start, size):
        r = te.reduce_axis((0, size), f"k{start}")
        return te.compute((*batch, m, wide), lambda *i: te.sum(
            a[(*pick(a_shape, i[:-2]), i[-2], r + start)] * padded[(*pick(b_shape, i[:-2]), r + start, i[-1])],
            axis=r), name=f"block{start}")

    def added(partial, block, start):
        if alpha is None:
            return te.compute(partial.shape, lambda *i: partial(*i) + block(*i), name=f"sum{start}")
        return te.compute(partial.shape, lambda *i: tirx.op.fma(block(*i), mlas_math.f32(alpha), partial(*i)),
                          name=f"sum{start}")

    stride = stride_k(k, n)
    blocks = [(s, min(stride, k - s)) for s in range(0, k, stride)]
    partial = block_sum(*blocks[0])
    if alpha is not None:
        first = partial
        partial = te.compute(first.shape, lambda *i: first(*i) * mlas_math.f32(alpha), name="sum0")
    for start, size in blocks[1:]:
        partial = added(partial, block_sum(start, size), start)
    if wide != n:
        partial = te.compute((*batch, m, n), partial, name="cut")          # its first n columns
    sch = s_tir.Schedule(te.create_prim_func([a, b, partial]))
    width = next((w for w in (64, 32, 16) if wide % w == 0), None)
    rows = next(r for r in (4, 2, 1) if m % r == 0)
    for name in ("padded", "cut") if wide != n else ():
        sch.parallel(sch.fuse(*sch.get_loops(sch.get_sblock(name))[:-1]))
    for start, _ in blocks:
        _register_tile(sch, sch.get_sblock(f"block{start}"), rows, width)
        if start:
            *outer, last = sch.get_loops(sch.get_sblock(f"sum{start}"))
            sch.parallel(sch.fuse(*outer))
            sch.vectorize(last)
    if alpha is not None:       # the product by alpha as the tile leaves its registers, not another pass
        sch.reverse_compute_inline(sch.get_sblock("sum0"))
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
    """MLAS's softmax of each row (the last axis): its maximum (over 16 lanes, exact in any order: a
    chain of scalar maxima took two thirds of the time at rows of 384); exp(x - max) (mlas_math); the
    sum as the AVX-512 kernel adds, 16 lane sums over the row in order, then halves (8 + 8), pairs,
    pairs, halves; each exp times float32(1 / sum). Rows parallel, the lanes vectorized."""
    rows = shape[:-1]
    x = te.placeholder(shape, "float32", "x")
    top_lanes = _lane_reduce(x, te.max, tirx.min_value("float32"), "top_lanes")
    top = te.compute(rows, lambda *i: _tree(lambda j: top_lanes[(*i, j)], tirx.max), name="top")
    e = te.compute(shape, lambda *i: mlas_math.exp_nonpositive(x[i] + (-top[i[:-1]])), name="e")
    lanes = _lane_reduce(e, te.sum, mlas_math.f32(0.0), "lanes")
    scale = te.compute(rows, lambda *i: mlas_math.f32(1.0) / _tree(lambda j: lanes[(*i, j)], tirx.Add),
                       name="scale")
    y = te.compute(shape, lambda *i: e[i] * scale[i[:-1]], name="y")
    sch = s_tir.Schedule(te.create_prim_func([x, y]))
    _rows_parallel(sch, ["top_lanes", "top", "e", "lanes", "scale", "y"], len(rows))
    return sch.mod["main"]


def _lane_reduce(t: te.Tensor, reducer, identity, name: str) -> te.Tensor:
    """``[..., LANES]``: lane j reduces elements j, j + LANES, ... of each row of ``t`` in order (the
    row's tail padded with ``identity``)."""
    *rows, d = (int(v) for v in t.shape)
    c = te.reduce_axis((0, (d + LANES - 1) // LANES), "c")
    return te.compute((*rows, LANES), lambda *i: reducer(
        tirx.Select(c * LANES + i[-1] < d, t[(*i[:-1], tirx.min(c * LANES + i[-1], d - 1))], identity),
        axis=c), name=name)


def _tree(lane, combine):
    """MLAS's reduction of 16 lanes: halves (j with j + 8), pairs, pairs, halves."""
    h = [combine(lane(j), lane(j + 8)) for j in range(8)]
    pairs = [combine(combine(h[0], h[1]), combine(h[2], h[3])), combine(combine(h[4], h[5]), combine(h[6], h[7]))]
    return combine(*pairs)


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
    return _flat_parallel(te.create_prim_func([x, y]), name, shape)


def dequantized_func(shape: tuple[int, ...]) -> tirx.PrimFunc:
    """quantize_dynamic's output chain of an integer matmul in one pass: ``float32(acc - correction) *
    scale + bias`` (the correction and bias per column, the scale a run-time scalar), the product
    rounded before the add as MatMulIntegerToFloat's output stage computes it (a multiply, then an
    add: no FMA)."""
    n = shape[-1]
    acc = te.placeholder(shape, "int32", "acc")
    correction = te.placeholder((n,), "int32", "correction")
    scale = te.placeholder((), "float32", "scale")
    bias = te.placeholder((n,), "float32", "bias")
    y = te.compute(shape, lambda *i: layer_norm.rounded((acc[i] - correction[i[-1]]).astype("float32") * scale[()]) +
                   bias[i[-1]], name="dequantized")
    return _flat_parallel(te.create_prim_func([acc, correction, scale, bias, y]), "dequantized", shape)


def _flat_parallel(func: tirx.PrimFunc, name: str, shape: tuple[int, ...]) -> tirx.PrimFunc:
    """The elementwise block ``name`` over one flat loop: parallel, LANES-wide vectors."""
    sch = s_tir.Schedule(func)
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
         "relax.nn.gelu": _elementwise(gelu, "gelu"), "relax.max": _reduce_all("max"), "relax.min": _reduce_all("min"),
         "relax.tanh": _elementwise(mlas_math.tanh, "tanh")}


def legalize_map() -> dict:
    """op name -> LegalizeOps function: ours where the call fits (float32, static shapes), else the
    op's registered legalization."""
    def with_default(name, rule):
        def legalize(bb, call):
            new = rule(bb, call)
            return new if new is not None else tvm.ir.Op.get(name).get_attr("FLegalize")(bb, call)
        return legalize
    return {name: with_default(name, rule) for name, rule in RULES.items()}


# -- LayerNormalization and onnxruntime's SkipLayerNormalization fusion (layer_norm.py) ---------------

def _layer_norm(bb, call):
    shape = _shape(call.args[0])
    axes = [int(a) % len(shape) for a in call.attrs.axes] if shape else None
    if shape is None or not _float32(call) or axes != [len(shape) - 1] or shape[-1] % layer_norm.SQUARE_LANES or \
            any(_shape(a) != shape[-1:] for a in call.args[1:]):
        return None
    return _emit(bb, layer_norm.layer_norm_func(shape, float(call.attrs.epsilon)), "qsynth_layer_norm", call.args,
                 shape)


RULES["relax.nn.layer_norm"] = _layer_norm


@relax.expr_functor.mutator
class _Fusions(relax.PyExprMutator):
    """Fusions of onnxruntime's graph optimizer, rewritten to call_tir of functions that compute what
    its fused kernels do:

    - ``matmul(a, b)`` divided or multiplied by a scalar constant (MatMulScaleFusion): FusedMatMul,
      the scale its alpha (1 / c in float for a divisor).
    - ``layer_norm(a + b)`` over the last axis, a and b float32 of one 3-D shape (SkipLayerNormFusion's
      third form, no bias Add folded in): SkipLayerNormalization.
    - an integer matmul's dequantize chain, ``float32(acc - c) * scale + bias`` (quantize_dynamic's
      form): MatMulIntegerToFloat's output stage, one pass instead of four."""

    def visit_call_(self, call):
        call = super().visit_call_(call)
        fused = None
        if call.op == tvm.ir.Op.get("relax.nn.layer_norm"):
            fused = self._skip_layer_norm(call)
        elif call.op in (tvm.ir.Op.get("relax.divide"), tvm.ir.Op.get("relax.multiply")):
            fused = self._scaled_matmul(call)
        elif call.op == tvm.ir.Op.get("relax.add"):
            fused = self._dequantized(call)
        return call if fused is None else fused

    def _bound(self, expr, op: str):
        value = self.lookup_binding(expr) if isinstance(expr, relax.Var) else None
        return value if isinstance(value, relax.Call) and value.op == tvm.ir.Op.get(op) else None

    def _skip_layer_norm(self, call):
        add, shape = self._bound(call.args[0], "relax.add"), _shape(call.args[0])
        if add is None or shape is None or len(shape) != 3 or any(_shape(a) != shape for a in add.args) or \
                not _float32(add) or [int(a) % 3 for a in call.attrs.axes] != [2] or \
                any(_shape(a) != shape[-1:] for a in call.args[1:]):
            return None
        func = layer_norm.skip_layer_norm_func(shape, float(call.attrs.epsilon))
        return _emit(self.builder_, func, "qsynth_skip_layer_norm", [*add.args, *call.args[1:]], shape)

    def _dequantized(self, call):
        multiply = self._bound(call.args[0], "relax.multiply")
        cast = None if multiply is None else self._bound(multiply.args[0], "relax.astype")
        subtract = None if cast is None else self._bound(cast.args[0], "relax.subtract")
        if subtract is None or str(cast.ty.dtype) != "float32" or str(subtract.ty.dtype) != "int32":
            return None
        shape = _shape(call.args[0])
        if shape is None or _shape(subtract.args[0]) != shape or _shape(subtract.args[1]) != shape[-1:] or \
                _shape(multiply.args[1]) != () or _shape(call.args[1]) != shape[-1:] or not _float32(call):
            return None
        return _emit(self.builder_, dequantized_func(shape), "qsynth_dequantized",
                     [*subtract.args, multiply.args[1], call.args[1]], shape)

    def _scaled_matmul(self, call):
        divide = call.op == tvm.ir.Op.get("relax.divide")
        for index in ((0,) if divide else (0, 1)):
            matmul, scale = self._bound(call.args[index], "relax.matmul"), constant(call.args[1 - index])
            if matmul is None or scale is None or scale.size != 1 or scale.dtype != np.float32 or \
                    scale.ndim > len(_shape(call.args[index]) or ()):
                continue
            a, b = (_shape(x) for x in matmul.args)
            if a is None or b is None or len(a) < 2 or len(b) < 2 or not _float32(matmul):
                continue
            c = scale.reshape(-1)[0]
            alpha = float(np.float32(1) / c if divide else c)
            return _emit(self.builder_, matmul_func(a, b, alpha), "qsynth_float_matmul", matmul.args,
                         _shape(call.args[index]))
        return None


def onnxruntime_fusions(mod: tvm.IRModule) -> tvm.IRModule:
    """The float fusions of onnxruntime's graph optimizer that change what is computed (fuse_gelu,
    _Fusions), applied to ``mod["main"]`` so it rounds as onnxruntime's fused kernels."""
    mutator = _Fusions(mod)
    mutator.builder_.update_func(mod.get_global_var("main"), mutator.visit_expr(fuse_gelu(mod["main"])))
    return relax.transform.DeadCodeElimination(["main"])(mutator.builder_.finalize())


# -- ReduceMean over the last axes (onnxruntime's Eigen sum: reduce_mean.py) -------------------------

def _mean(bb, call):
    shape = _shape(call.args[0])
    if shape is None or not shape or not _float32(call):
        return None
    axes = sorted({int(a) % len(shape) for a in call.attrs.axis}) if call.attrs.axis is not None else \
        list(range(len(shape)))
    if axes != list(range(len(shape) - len(axes), len(shape))):
        return None
    return _emit(bb, reduce_mean.mean_func(shape, len(axes), bool(call.attrs.keepdims)), "qsynth_mean", call.args,
                 _shape(call))


RULES["relax.mean"] = _mean
