"""int8 matmul of two activations (batch_matmul.py's operator: Q.K^T and attention.V) for AArch64 on
the NEON int8 tiles (kernels/neon_int8.py), built for a core (``mcpu``): the same three functions as
batch_matmul.py (``row_terms``, ``col_terms``, ``main(a, b, row_terms, col_terms, out)``), each
operand read through its transpose, B packed at run time into the tile's image, the output stage
batch_matmul.py's (the reference's ``requantize``, so that the result is the reference's whenever
the int32 sum is).

The tile is the core's (``neon_int8.tile_for`` without weights: B is only known at run time, so no
s8 x s7 tile, whose B must stay within [-127, 127]): sdot (s8 x s8), sudot (u8 x s8), or on v8.0
cores umull/uadalp (u8 x u8). Each operand enters the tile's type as batch_matmul.py's do: ``A' =
a + sa``, ``B' = b - sb`` (``packing.activation_shift``: +-128 where the signedness differs, ``x ^
0x80`` on the byte), and with ``ca = za + sa``, ``cb = zb - sb``, ``sum (a - za)(b - zb) = sum A'B' -
cb sum_k a - ca sum_k b + K (ca cb - cb sa + ca sb)``, an identity of integers; each side is
computed modulo 2^32 as the reference's int32 sum is. On the u8 x u8 tile the row term enters the
tile's K loop as its R (``C += A B + R``, added once per row, kernels/neon_int8.py) rather than in
the output stage; B' is then the operand's u8 code (no separate weight offset: the operand's own
shift is the column term's).
"""
from __future__ import annotations

import numpy as np
import tvm
from tvm import s_tir, te, tirx

from tvm_integration.kernels import neon_int8
from tvm_integration.ops.batch_matmul import (BuiltMatmul, Operand, batch_index, geometry, packed_operands,
                                              zero_point_term)
from tvm_integration.ops.gemm import Gemm, Tile
from tvm_integration.ops.neon_gemm import schedule_tiles
from tvm_integration.ops.output_stage import requantize


def kernel_for(mcpu: str | None = None, family: str | None = None):
    """The NEON tile a matmul of activations runs on for ``mcpu`` (or ``family``): the core's, never
    the s8 x s7 one (its B precondition cannot be known for a run-time B)."""
    return neon_int8.tile_for(mcpu, family)


def build_batch_matmul(a: Operand, b: Operand, za: int, zb: int, scale: float, out_zp: int, out_dtype: str,
                       clamp, mcpu: str | None = None, family: str | None = None) -> BuiltMatmul:
    """batch_matmul.build_batch_matmul's module for AArch64 (``mcpu``'s tile, or ``family``'s)."""
    batch, m, k, n = geometry(a, b)
    groups = int(np.prod(batch)) if batch else 1
    kernel = kernel_for(mcpu, family)
    lo, hi = kernel.b_range
    info = np.iinfo(kernel.b_dtype)
    if (lo, hi) != (info.min, info.max):
        raise ValueError(f"{kernel.intrin}: not defined on every {kernel.b_dtype} B (a run-time operand)")
    tile, q = Tile.of(kernel), neon_int8.group(kernel)
    pp, npad, kp = Gemm(1, groups, m, n, k).padded(tile)
    (xa, xb, packed, w), (sa, sb) = packed_operands(a, b, tile, q, (kernel.a_dtype, kernel.b_dtype))
    ca, cb = za + sa, zb - sb
    row_in = te.placeholder((groups, m), "int32", name="row_terms")
    col_in = te.placeholder((groups, n), "int32", name="col_terms")
    r = te.reduce_axis((0, kp), name="k")
    row_in_tile = neon_int8.adds_row_sums(kernel.spec) if kernel.spec.layout == "acc" else False
    row_term = lambda g, p, t: 0
    if row_in_tile:                  # the u8 x u8 tile's R: the row terms, padded to the row tiles
        sums = te.compute((1, groups, pp // tile.mr, tile.mr), lambda _, g, p0, p1: tirx.if_then_else(
            p0 * tile.mr + p1 < m, row_in[g, tirx.min(p0 * tile.mr + p1, m - 1)], 0), name="row_sums")
        row_term = lambda g, p, t: tirx.if_then_else(t == 0, sums[0, g, p // tile.mr, p % tile.mr], 0)
    acc = te.compute((1, groups, pp, npad), lambda _, g, p, c: te.sum(
        packed[0, g, p // tile.mr, p % tile.mr, r].astype("int32")
        * w[g, c // tile.nr, r // q, c % tile.nr, r % q].astype("int32") + row_term(g, p, r), axis=r), name="gemm")
    fixed = k * (ca * cb - cb * sa + ca * sb)
    rows_out = (lambda g, p: 0) if row_in_tile else (lambda g, p: row_in[g, p])
    out = te.compute((groups, m, n), lambda g, p, c: requantize(
        acc[0, g, p, c] + rows_out(g, p) + col_in[g, c] + fixed, tirx.const(scale, "float32"), out_zp, out_dtype,
        clamp), name="output")
    mod = schedule_tiles(te.create_prim_func([xa, xb, row_in, col_in, out]), tile, kernel, ())
    sch = s_tir.Schedule(mod)
    loops = sch.get_loops(sch.get_sblock("weights"))
    sch.parallel(sch.fuse(*loops[:2]))
    sch.vectorize(sch.fuse(*loops[-2:]))
    ra, rb = te.placeholder(a.shape, a.dtype, name="a"), te.placeholder(b.shape, b.dtype, name="b")
    rows = zero_point_term(ra, groups, m, k, -cb, lambda g, p, t: a.element(ra, batch, batch_index(g, batch), p, t),
                           a.contiguous(-1), "row_terms", NEON_LANES)
    cols = zero_point_term(rb, groups, n, k, -ca, lambda g, c, t: b.element(rb, batch, batch_index(g, batch), t, c),
                           b.contiguous(-2), "col_terms", NEON_LANES)
    funcs = {"main": sch.mod["main"], "row_terms": rows, "col_terms": cols}
    mod = tvm.IRModule({name: f.with_attr("global_symbol", name) for name, f in funcs.items()})
    return BuiltMatmul(mod, (groups, m, n), out_dtype, (*batch, m, n), neon_int8.neon_target(mcpu, kernel),
                       kernel.intrin)


NEON_LANES = (4,)          # one 128-bit vector of int32 partial sums
