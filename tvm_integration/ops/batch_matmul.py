"""int8 matmul of two activations (QLinearMatMul with both operands quantized at run time: a
transformer's Q.K^T and attention.V), batched: ``out[g, p, n] = requantize(sum_k (a - za)(b - zb))``
over the broadcast batch ``g`` of ``a [..., M, K]`` and ``b [..., K, N]``, u8 or s8 each.

Each operand is given as the tensor the model holds and a permutation (``axes``, as ``permute_dims``:
the operand is ``permute_dims(tensor, axes)``), read through the index map, never transposed first:
Q.K^T reads K ``[1, S, h, d]`` with axes ``(0, 2, 3, 1)``, and B's packing (four consecutive k per
column) then copies runs of d bytes.

On the tiles (u8 x s8, or int16 w16: ops/gemm.py's schedule and TensorIntrin): one group per batch
element; A packed per row tile as gemm packs it (signed into u8: ``a + 128``), B packed at run time into
the tile's layout (kernels/packing.py's; unsigned into s8: ``b - 128``; int16 tiles: no shift). With A' and B' the tile's operands, ``ca = za + sa``,
``cb = zb - sb`` (``sa``, ``sb`` the shifts),
``sum (a - za)(b - zb) = sum A'B' - cb sum_k A' - ca sum_k B' + K ca cb``: a row term (``-cb`` times
the input's row sums) and a column term, both computed at run time, added before the requantization
(onnxruntime's: ``float32(acc) * (sa * sb / sy)``, rounded half to even, plus the zero point, saturated).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import tvm
from tvm import s_tir, te, tirx

from tvm_integration.kernels import selection, tuning
from tvm_integration.kernels.packing import activation_shift
from tvm_integration.ops.gemm import Gemm, Tile, schedule
from tvm_integration.ops.output_stage import requantize


@dataclass(frozen=True)
class Operand:
    """A matmul operand as ``permute_dims(tensor, axes)`` of a ``shape`` tensor."""
    shape: tuple[int, ...]
    dtype: str
    axes: tuple[int, ...] | None = None

    def contiguous(self, axis: int) -> bool:
        """Whether the operand's logical ``axis`` is the tensor's last (contiguous) one."""
        rank = len(self.shape)
        return (self.axes[axis] if self.axes else axis % rank) == rank - 1

    @property
    def logical(self) -> tuple[int, ...]:
        return tuple(self.shape[a] for a in self.axes) if self.axes else tuple(self.shape)

    def element(self, tensor, batch: tuple[int, ...], index, row, col):
        """``tensor``'s value at the operand's (batch ``index``, ``row``, ``col``), ``batch`` the output's
        batch shape (numpy broadcasting: leading axes missing, axes of 1 repeated)."""
        logical = self.logical
        own = logical[:-2]
        lead = [0 if d == 1 else i for d, i in zip(own, index[len(index) - len(own):])]
        at = [*lead, row, col]
        if not self.axes:
            return tensor[tuple(at)]
        actual = [None] * len(at)
        for i, a in enumerate(self.axes):
            actual[a] = at[i]
        return tensor[tuple(actual)]


def geometry(a: Operand, b: Operand) -> tuple[tuple[int, ...], int, int, int]:
    """(batch shape, M, K, N) of ``a @ b``."""
    la, lb = a.logical, b.logical
    if len(la) < 2 or len(lb) < 2 or la[-1] != lb[-2]:
        raise ValueError(f"matmul of {list(la)} by {list(lb)}")
    batch = tuple(int(d) for d in np.broadcast_shapes(la[:-2], lb[:-2]))
    return batch, la[-2], la[-1], lb[-1]


def batch_index(g, batch: tuple[int, ...]):
    """The batch index (one expression per axis) of flat group ``g``."""
    index, rest = [], g
    for d in reversed(batch):
        index.append(tirx.floormod(rest, d) if d > 1 else tirx.const(0, "int32"))
        rest = tirx.floordiv(rest, d)
    return index[::-1]


@dataclass(frozen=True)
class BuiltMatmul:
    """The scheduled module (``main(a, b, out)``), its output shape (the flat ``[G, M, N]``; the
    operator's is ``result_shape``, same memory order) and target."""
    mod: object
    out_shape: tuple
    out_dtype: str
    result_shape: tuple
    target: dict
    kernel: str


def kernel_for(a: Operand, b: Operand, isa: str = "host"):
    """The int8 tile the operator runs ``a @ b`` on (kernels/tuning.py's choice for its shape among the
    tiles exact on every int8 B, which is computed at run time: on AVX2-only hosts the w16 ones); also
    what ``qsynth inspect`` names."""
    batch, m, k, n = geometry(a, b)
    groups = int(np.prod(batch)) if batch else 1
    return tuning.choose(f"batch_matmul g{groups} m{m} n{n} k{k} {a.dtype}",
                         selection.admitted(selection.int8_candidates(isa, k), None), m, n, depth=k)


def packed_operands(a: Operand, b: Operand, tile: Tile, q: int, dtypes: tuple[str, str]):
    """((the placeholders of A and B, A packed in row tiles [1, groups, rows / mr, mr, K'], B in column
    tiles of q-deep groups [groups, columns / nr, K' / q, nr, q]), (sa, sb)): each zero-padded to whole
    tiles and shifted into the tile's operand types ``dtypes``, sa added to A and sb taken from B. The
    x86 and NEON operators of a matmul of two activations pack alike."""
    batch, m, k, n = geometry(a, b)
    groups = int(np.prod(batch)) if batch else 1
    pp, npad, kp = Gemm(1, groups, m, n, k).padded(tile)
    a_dtype, b_dtype = dtypes
    xa, xb = te.placeholder(a.shape, a.dtype, name="a"), te.placeholder(b.shape, b.dtype, name="b")
    sa, sb = activation_shift(a.dtype, a_dtype), -activation_shift(b.dtype, b_dtype)

    def a_at(g, p, t):
        return a.element(xa, batch, batch_index(g, batch), p, t)

    def b_at(g, t, c):
        return b.element(xb, batch, batch_index(g, batch), t, c)

    packed = te.compute((1, groups, pp // tile.mr, tile.mr, kp), lambda _, g, p0, p1, t: tirx.if_then_else(
        tirx.all(p0 * tile.mr + p1 < m, t < k), (a_at(g, p0 * tile.mr + p1, t).astype("int32") + sa).astype(a_dtype),
        tirx.const(0, a_dtype)), name="pack")
    w = te.compute((groups, npad // tile.nr, kp // q, tile.nr, q), lambda g, n0, k0, n1, k1: tirx.if_then_else(
        tirx.all(n0 * tile.nr + n1 < n, k0 * q + k1 < k),
        (b_at(g, k0 * q + k1, n0 * tile.nr + n1).astype("int32") - sb).astype(b_dtype), tirx.const(0, b_dtype)),
        name="weights")
    return (xa, xb, packed, w), (sa, sb)


def build_batch_matmul(a: Operand, b: Operand, za: int, zb: int, scale: float, out_zp: int, out_dtype: str,
                       clamp, isa: str = "host", use_kernel: bool = True) -> BuiltMatmul:
    batch, m, k, n = geometry(a, b)
    groups = int(np.prod(batch)) if batch else 1
    kernel = kernel_for(a, b, isa)
    use_kernel = use_kernel and kernel.admits(None)      # B is computed at run time
    tile = Tile.of(kernel)
    gemm = Gemm(1, groups, m, n, k)
    pp, npad, kp = gemm.padded(tile)
    q = tile.group
    (xa, xb, packed, w), (sa, sb) = packed_operands(
        a, b, tile, q, (kernel.a_dtype, kernel.b_dtype) if use_kernel else ("uint8", "int8"))
    ca, cb = za + sa, zb - sb
    r = te.reduce_axis((0, kp), name="k")
    acc = te.compute((1, groups, pp, npad), lambda _, g, p, c: te.sum(
        packed[0, g, p // tile.mr, p % tile.mr, r].astype("int32")
        * w[g, c // tile.nr, r // q, c % tile.nr, r % q].astype("int32"), axis=r), name="gemm")
    fixed = k * (ca * cb - cb * sa + ca * sb)
    ra, rb = te.placeholder(a.shape, a.dtype, name="a"), te.placeholder(b.shape, b.dtype, name="b")
    # -cb times A's row sums, -ca times B's column sums: each over k, read along the tensor's
    # contiguous axis (k of Q and of the probabilities; n of V; k of K^T)
    rows = zero_point_term(ra, groups, m, k, -cb, lambda g, p, t: a.element(ra, batch, batch_index(g, batch), p, t),
                           a.contiguous(-1), "row_terms")
    cols = zero_point_term(rb, groups, n, k, -ca, lambda g, c, t: b.element(rb, batch, batch_index(g, batch), t, c),
                           b.contiguous(-2), "col_terms")
    row_in = te.placeholder((groups, m), "int32", name="row_terms")
    col_in = te.placeholder((groups, n), "int32", name="col_terms")
    out = te.compute((groups, m, n), lambda g, p, c: requantize(acc[0, g, p, c] + row_in[g, p] + col_in[g, c] + fixed,
                                                                 tirx.const(scale, "float32"), out_zp, out_dtype,
                                                                 clamp), name="output")
    main = schedule(te.create_prim_func([xa, xb, row_in, col_in, out]), tile, kernel if use_kernel else None, "rows", ())
    sch = s_tir.Schedule(main)
    loops = sch.get_loops(sch.get_sblock("weights"))
    sch.parallel(sch.fuse(*loops[:2]))
    sch.vectorize(sch.fuse(*loops[-2:]))
    funcs = {"main": sch.mod["main"], "row_terms": rows, "col_terms": cols}
    mod = tvm.IRModule({name: f.with_attr("global_symbol", name) for name, f in funcs.items()})
    return BuiltMatmul(mod, (groups, m, n), out_dtype, (*batch, m, n), selection.int8_target(kernel),
                       kernel.intrin)


LANES = (16,)          # one 512-bit vector of int32 partial sums


def zero_point_term(data, groups: int, extent: int, depth: int, factor: int, element, along_k: bool, name: str,
                    lane_choices: tuple[int, ...] = LANES):
    """The scheduled function ``term[g, x] = factor * sum_t element(g, x, t)``: with ``along_k`` (t
    contiguous in memory) as partial sums of ``lanes`` consecutive t (the first of ``lane_choices``
    dividing the depth: a vector of int32), added up after; else with x
    innermost (the update's lanes left to LLVM's loop vectorizer: the schedule's vectorize refuses a
    loop under a reduction loop)."""
    if factor == 0:             # (an operand's zero point equals its shift): TE folds the sum away
        return te.create_prim_func([data, te.compute((groups, extent), lambda g, x: tirx.const(0, "int32"), name=name)])
    lanes = next((l for l in lane_choices if depth % l == 0), None) if along_k else None
    if lanes is None:
        t = te.reduce_axis((0, depth), name="t")
        term = te.compute((groups, extent), lambda g, x: te.sum(element(g, x, t).astype("int32") * factor, axis=t),
                          name=name)
        sch = s_tir.Schedule(te.create_prim_func([data, term]))
        block = sch.get_sblock(name)
        g, x, t = sch.get_loops(block)
        sch.reorder(g, t, x)
        sch.parallel(g)          # the x loop innermost, contiguous: LLVM's loop vectorizer takes it
        init = sch.decompose_reduction(block, t)
        sch.vectorize(sch.get_loops(init)[-1])
        return sch.mod["main"]
    t0 = te.reduce_axis((0, depth // lanes), name="t0")
    partial = te.compute((groups, extent, lanes), lambda g, x, j: te.sum(
        element(g, x, t0 * lanes + j).astype("int32"), axis=t0), name="partial")
    j = te.reduce_axis((0, lanes), name="j")
    term = te.compute((groups, extent), lambda g, x: te.sum(partial[g, x, j] * factor, axis=j), name=name)
    sch = s_tir.Schedule(te.create_prim_func([data, term]))
    block, part = sch.get_sblock(name), sch.get_sblock("partial")
    sch.parallel(sch.get_loops(block)[0])
    g, _, lane, t = sch.get_loops(part)
    sch.reorder(t, lane)
    sch.parallel(g)
    init = sch.decompose_reduction(part, t)
    sch.vectorize(sch.get_loops(init)[-1])
    return sch.mod["main"]
