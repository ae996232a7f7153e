"""The matmul of two float activations (a quantized transformer's attention in a QDQ model's float
ops, onnxruntime's MatMul and FusedMatMul) as MLAS's sgemm sums it: K in MLAS's blocks (``stride_k``),
each block's sum added to C in turn, so the block decides the rounding (tests/test_float_ops.py)."""
from __future__ import annotations

import numpy as np
from tvm import s_tir, te, tirx

from isa_specs import host
from tvm_integration.qnn.float import mlas_math

LANES = 16                    # float32 lanes of an AVX-512 vector
NEON_BUDGET = 64              # floats of a NEON register tile: 16 of its 32 vector registers hold accumulators
# MLAS_SGEMM_PACKED_STRIDEK: the K block of MLAS's sgemm over a B packed once (MlasGemmPackB), what
# onnxruntime's MatMul does with a constant 2-D B on every build (x86: 1351 of 1536 outputs of a
# [1, 768] x [768, 1536] MatMul differed with stride_k's 128, 0 with 256)
PACKED_STRIDE_K = 256


def stride_k(k: int, n: int, trans_a: bool = False) -> int:
    """MLAS sgemm's K block for a K x N operand B: 128 (with N blocks of 128), halved while K fits in
    half of it (N's block doubled), doubled while N fits in half of N's block (down to 16) unless A
    is transposed (``trans_a``: its panel holds the transposed block, so K's block stays). Each
    block's sum is added to C in turn, so the block decides the rounding."""
    stride_n, stride = 128, 128
    if n >= k:
        while stride // 2 >= k:
            stride_n, stride = stride_n * 2, stride // 2
    elif not trans_a:
        while stride_n > 16 and stride_n // 2 >= n:
            stride_n, stride = stride_n // 2, stride * 2
    return stride


def matmul_func(a_shape: tuple[int, ...], b_shape: tuple[int, ...], alpha: float | None = None,
                trans_a: bool = False, stride: int | None = None, bias: tuple[int, ...] | None = None,
                neon: bool = False) -> tirx.PrimFunc:
    """``a @ b`` with numpy's broadcasting, as MLAS's sgemm sums: each output one FMA chain over k from
    0, a K longer than MLAS's block (stride_k) in blocks whose sums are added in order. With
    ``alpha`` (onnxruntime's FusedMatMul): the first block's sum times alpha, each later one added as
    fma(sum, alpha, C); ``trans_a``: ``a`` is the transpose FusedMatMul's transA reads (its blocks);
    ``stride``: K's block when given (a B that onnxruntime packs: neon_float.py), else stride_k's;
    ``bias``: the shape of a third input ``c`` ([n]; or, ``a`` 2-D, [1, n], [m, 1], [m, n]: Gemm's
    broadcasts of C), onnxruntime's Gemm with C (MatMulAddFusion's MatMul + Add), which copies C into
    the output first, so the first block's sum is added to C as the later ones are.
    Parallel over batch and row tiles; each tile (``_register_tile_shape``) held in registers across
    k; more than 32 columns not in whole vectors (ViT's 196 keys) over B padded with zero columns to
    32-lane tiles (in scalars: 9x slower; on AVX2 too: 16 columns, 208 for ViT's 197 keys, leave its
    one-row tiles 16 wide where 224 takes 1x32, and the dynamic ViT measured level either way), each tile
    writing its first n columns (of one K block; else a second pass cuts them: ViT's Q.K^T took 30% longer).
    ``neon``: built for an Arm core, whose tile is NEON's (``NEON_BUDGET``, whatever the x86 host compiling
    it has): columns in whole 4-lane vectors that no 16-column tile divides in 2-row tiles of 7, 6 or 5
    vectors, unpadded (ViT's 196 keys: 2 x 28), others padded to LANES columns, not 2 * LANES. ViT's
    [1, 6, 196, 64] x [1, 6, 64, 196] / 8, Mcycles padded to 224 / to 208 / in 2 x 28 tiles: Cortex-A76 (N1
    model) 2.661 / 2.469 / 2.325, A72 (A57 model) 5.031 / 4.664 / 4.551 (onnxruntime's AArch64 build
    2.06-2.16, 4.05)."""
    batch = tuple(int(d) for d in np.broadcast_shapes(a_shape[:-2], b_shape[:-2]))
    m, k, n = a_shape[-2], a_shape[-1], b_shape[-1]
    a = te.placeholder(a_shape, "float32", "a")
    b = te.placeholder(b_shape, "float32", "b")
    step = LANES if neon else 2 * LANES
    vectors = next((v for v in (7, 6, 5) if n % (4 * v) == 0), None) if neon and n % LANES and n > 2 * LANES else None
    wide = n if n % LANES == 0 or n <= 2 * LANES or vectors else -(-n // step) * step
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
            return _added(partial, block, start)
        return te.compute(partial.shape, lambda *i: tirx.op.fma(block(*i), mlas_math.f32(alpha), partial(*i)),
                          name=f"sum{start}")

    blocks = _k_blocks(k, stride or stride_k(k, n, trans_a))
    partial = block_sum(*blocks[0])
    c = te.placeholder(bias, "float32", "c") if bias else None
    first = partial
    if alpha is not None:
        partial = te.compute(first.shape, lambda *i: first(*i) * mlas_math.f32(alpha), name="sum0")
    elif bias:
        def c_at(i):            # C broadcast to the output; a padded column reads the last one (then cut)
            index = (*i[:-1], tirx.min(i[-1], n - 1))[len(i) - len(bias):]
            return c[tuple(0 if d == 1 else j for d, j in zip(bias, index))]
        partial = te.compute(first.shape, lambda *i: c_at(i) + first(*i), name="sum0")
    for start, size in blocks[1:]:
        partial = added(partial, block_sum(start, size), start)
    if wide != n:
        partial = te.compute((*batch, m, n), partial, name="cut")          # its first n columns
    sch = s_tir.Schedule(te.create_prim_func([a, b, *([c] if bias else []), partial]))
    rows, width = (next(r for r in (2, 1) if m % r == 0), 4 * vectors) if vectors else \
        _register_tile_shape(m, wide, NEON_BUDGET if neon else None)
    for name in ("padded", "cut")[:1 + (len(blocks) > 1)] if wide != n else ():
        sch.parallel(sch.fuse(*sch.get_loops(sch.get_sblock(name))[:-1]))
    _schedule_blocks(sch, blocks, rows, width, alpha is not None or bool(bias))
    if alpha is not None or bias:    # the product by alpha, the add to C, as the tile leaves its registers
        sch.reverse_compute_inline(sch.get_sblock("sum0"))
    if wide != n and len(blocks) == 1:      # each tile writes its first n columns, no second pass
        sch.reverse_compute_inline(sch.get_sblock("cut"))
    return sch.mod["main"]


def _k_blocks(k: int, stride: int) -> list[tuple[int, int]]:
    """(start, size) of each of MLAS's K blocks, in the order their sums are added."""
    return [(s, min(stride, k - s)) for s in range(0, k, stride)]


def _added(partial, block, start):
    return te.compute(partial.shape, lambda *i: partial(*i) + block(*i), name=f"sum{start}")


def _schedule_blocks(sch, blocks, rows: int, width: int | None, scaled_first: bool) -> None:
    """Each K block's sum in ``rows`` x ``width`` register tiles (``scaled_first``: the first block's
    sum goes through ``sum0``, alpha's product or C's add). More than one block: the tiles of C
    parallel, each computing every block's sum of its tile and adding them in turn (as separate passes
    over C, the second of BERT's A.V blocks at 384 tokens, [12, 384, 384] x [12, 384, 64], cost 1.7x
    its share: 6.09 ms where one block of 256 took 3.25)."""
    if len(blocks) == 1:
        _register_tile(sch, sch.get_sblock("block0"), rows, width)
        return
    *outer, i, j = sch.get_loops(sch.get_sblock(f"sum{blocks[-1][0]}"))
    io, ii = sch.split(i, [None, rows])
    jo, ji = sch.split(j, [None, width or 1])
    sch.reorder(*outer, io, jo, ii, ji)
    sch.parallel(sch.fuse(*outer, io))
    names = [name for start, _ in reversed(blocks) for name in (f"sum{start}", f"block{start}")
             if name != "sum0" or scaled_first]
    for name in names[1:]:          # each under the tile after its consumers
        sch.compute_at(sch.get_sblock(name), jo)
    for name in names:
        if name.startswith("block"):
            _tile_registers(sch, sch.get_sblock(name), jo, width, write_back=False)
        elif width:
            _in_vectors(sch, sch.get_loops(sch.get_sblock(name))[-1], width)


def _register_tile_shape(m: int, wide: int, budget: int | None = None) -> tuple[int, int | None]:
    """(rows, columns) of the register tile: 4, 2 or 1 rows (what divides ``m``), then the widest of
    64, 32 and 16 columns dividing ``wide`` whose accumulators fit half the vector registers (256 floats,
    16 zmm, on AVX-512; 64, 8 ymm, on AVX2), else the narrowest that divides. On the Zen 3 host (CPU
    time, BERT's and ViT's attention matmuls and a [128, 768] x [768, 768] one) every shape ran fastest
    at 64 floats (4x16, 2x32, 1x64: 0.39-0.47 ms at 128 tokens), 4x64 took 2.2-2.5x as long (spilled),
    and the 197-token rows, one row per tile, 1x64 0.80x 1x32's time; an S8S8 ResNet-18's float
    convs took 60 of its 80 ms in 4x64 tiles. On AVX2, 6x16 where 6 divides ``m`` (12 of the 16 ymm, as
    MLAS's FMA3 kernel): BERT's attention at 384 tokens, Q.K^T 4.14 -> 3.73 ms, A.V 6.08 -> 5.68.
    ``budget``: the floats a tile holds when given (NEON's), else the x86 host's."""
    if budget is None:
        budget = 256 if "avx512f" in host.x86_features(host.model()) else 64
        if budget == 64 and m % 6 == 0 and wide % 16 == 0:
            return 6, 16
    rows = next(r for r in (4, 2, 1) if m % r == 0)
    fits = [w for w in (64, 32, 16) if wide % w == 0]
    return rows, next((w for w in fits if rows * w <= budget), fits[-1] if fits else None)


def _register_tile(sch, block, rows: int, width: int | None) -> None:
    """``rows`` x ``width`` outputs accumulated in registers over the whole reduction (k outermost
    within the tile, so each output's sum keeps k's order), the tiles parallel."""
    *outer, i, j, k = sch.get_loops(block)
    io, ii = sch.split(i, [None, rows])
    jo, ji = sch.split(j, [None, width or 1])
    sch.reorder(*outer, io, jo, ii, ji, k)
    sch.parallel(sch.fuse(*outer, io))
    _tile_registers(sch, block, jo, width)


def _tile_registers(sch, block, tile, width: int | None, write_back: bool = True) -> None:
    """The reduction ``block`` under the loop ``tile``, its loops there a tile's rows (absent when one),
    columns and k: k outermost, the tile's sums in registers, written back after it (``write_back``:
    moved under ``tile``; else already there, the block computed at it)."""
    loops = sch.get_loops(block)
    *spatial, k = loops[1 + next(i for i, loop in enumerate(loops) if sch.get(loop).same_as(sch.get(tile))):]
    sch.reorder(k, *spatial)
    acc = sch.cache_write(block, 0, "local")
    if write_back:
        sch.reverse_compute_at(acc, tile)
    if len(spatial) > 1:
        sch.unroll(spatial[0])
    if width:
        _in_vectors(sch, spatial[-1], width)
        _in_vectors(sch, sch.get_loops(acc)[-1], width)
    init = sch.decompose_reduction(block, k)
    if width:
        _in_vectors(sch, sch.get_loops(init)[-1], width)


def _in_vectors(sch, loop, width: int) -> None:
    """A tile row's ``width`` columns as one vector, or, ``width`` not a power of two (NEON's 28), as NEON's
    4-lane vectors, unrolled (LLVM legalizes a <28 x float> lane by lane)."""
    if width & (width - 1):
        vectors, lanes = sch.split(loop, [None, 4])
        sch.unroll(vectors)
        sch.vectorize(lanes)
    else:
        sch.vectorize(loop)

