"""A float Conv as onnxruntime's x86 build computes it (a Conv it leaves in float between a
DequantizeLinear and a QuantizeLinear): MLAS's MlasConvOperation, the filters [M, K = C*kh*kw] times
the image's columns [K, OH*OW] (im2col, zero where padded), in the sgemm's order of sums: each output
one FMA chain over k from 0 within a K block of ``stride_k(K, OH*OW)``, the blocks' sums added to the
output in turn (the bias is a float add after it, as MlasActivation adds it). tests/test_float_conv.py
checks each path against onnxruntime's own Conv, bit for bit.

The schedule is MLAS's too: per block of columns and K block, the columns packed into panels of
``COLUMNS`` (MlasConvIm2Col and MlasSgemmCopyPackB in one copy), then ``ROWS`` x ``COLUMNS`` register
tiles broadcasting the filters, each added onto the output as it leaves its registers."""
from __future__ import annotations

from tvm import s_tir, te, tirx

from tvm_integration.qnn.float import mlas_math
from tvm_integration.qnn.float.float_matmul import stride_k

# 6 x 16, MLAS's FMA3 kernel's: twelve ymm accumulators on AVX2 (a row's 16 floats two ymm), the
# output channels padded to whole tiles (64 -> 66). On the Zen 3 host (ResNet-18's float convs, CPU
# time) 0.90x the time of 4 x 16 (eight accumulators: the FMA's latency times its two pipes, no
# slack) and 0.97x of 5 x 16; 12 x 8 and 8 x 8 everywhere (one ymm a row, N = 49 in 56 columns)
# 1.05-1.2x of 4 x 16; 3 x 32 and 2 x 32 1.2-2.2x, 8 x 16 (16 accumulators, spilled) 1.3x, 4 x 24
# 8-10x (vectors of 24 floats)
ROWS, COLUMNS = 6, 16
PANELS_PER_BLOCK = 8          # at most this many panels of columns between two K blocks (MLAS_SGEMM_STRIDEN: 128)


def conv2d_func(x_shape: tuple[int, ...], w_shape: tuple[int, ...], strides, padding,
                dequantize: tuple[float, int, str] | None = None, summand: bool = False) -> tirx.PrimFunc:
    """A float NCHW/OIHW conv2d (one group, no dilation) summed as MLAS does (module docstring).
    ``dequantize`` (scale, zero point, integer type): the input is the integers of a per-tensor
    DequantizeLinear, dequantized as the image is padded, ``float32(x - zero point) * scale`` as
    DequantizeLinear computes it, instead of in a pass of its own. ``summand``: a third input of the
    output's shape that the sums start from, ``((z + s0) + s1) + ...``, as onnxruntime's FusedConv
    with a Sum input computes (the output a copy of it, MLAS's Beta = 1: onnx/float_convs.py).

    The image is copied once with its zero padding (in phases of its rows and columns at a stride
    over 1), the panels then from it in runs (``_runs``). A K that is no whole number of blocks ends
    in a shorter block of its own (zero rows padding it to a whole block took 11% more FMAs at
    K = 576); the columns are padded to whole panels (the last of 8 columns where ``_parts`` says)
    and the output channels to whole tiles, both computed and dropped. (Tried instead: a stride-1
    conv's columns at the padded image's pitch, the columns past each row's end computed and
    dropped, 3.5-29% of them: 5-20% slower than a gather of each column.)"""
    batch, c, h, w = x_shape
    m, _, kh, kw = w_shape
    (sh, sw), (pt, pl) = strides, padding[:2]
    hp, wp = h + padding[0] + padding[2], w + padding[1] + padding[3]
    oh, ow = (hp - kh) // sh + 1, (wp - kw) // sw + 1
    k, n = c * kh * kw, oh * ow
    stride = stride_k(k, n)
    whole, tail = divmod(k, stride)                 # K's whole blocks, and the last one's depth
    if not whole:                                   # K under one block: a whole block of K
        stride, whole, tail = k, 1, 0
    parts = _parts(n)
    tall = -(-m // ROWS) * ROWS
    x = te.placeholder(x_shape, dequantize[2] if dequantize else "float32", "x")
    filters = te.placeholder((m, k), "float32", "w")      # OIHW read as MLAS's A, [M, K] (``_as_views``)

    def image(b, ch, y, z):                         # zero where padded: a branch, never a load outside x
        inside = tirx.all(y >= pt, y < h + pt, z >= pl, z < w + pl)
        value = x[b, ch, y - pt, z - pl]
        if dequantize:
            scale, zero_point, _ = dequantize
            value = (value.astype("int32") - zero_point).astype("float32") * mlas_math.f32(scale)
        return tirx.if_then_else(inside, value, mlas_math.f32(0.0))

    column = _runs(image, batch, c, hp, wp, kh, kw, (sh, sw), ow, parts[-1][0] + parts[-1][1])

    def weight(i, q):
        return filters[tirx.min(i, m - 1), q]
    z = te.placeholder((batch, m, n), "float32", "z") if summand else None     # NCHW, viewed as the output
    origin = (lambda b, i, j: z[b, tirx.min(i, m - 1), tirx.min(j, n - 1)]) if summand else None
    totals = [_part(column, weight, (batch, tall), part, stride, whole, tail, str(t), origin)
              for t, part in enumerate(parts)]

    def output(b, i, j):                            # each column from its part's total
        value = totals[0][b, i, j if parts[0][1] >= n else tirx.min(j, parts[0][1] - 1)]
        for (start, _, _), total in zip(parts[1:], totals[1:]):
            value = tirx.Select(j < start, value, total[b, i, tirx.max(j - start, 0)])
        return value
    out = te.compute((batch, m, n), output, name="out")
    sch = s_tir.Schedule(te.create_prim_func([x, filters, *([z] if summand else []), out]))
    for t in range(len(parts) if summand else 0):
        sch.compute_inline(sch.get_sblock(f"summed{t}"))
    outer = [_schedule(sch, part[1] // part[2], tail, str(t), kh * kw > 1) for t, part in enumerate(parts)]
    b, e = sch.get_loops(sch.get_sblock("padded"))          # per (phase, channel), row and column
    sch.parallel(sch.fuse(b, sch.split(e, [None, -(-hp // sh), -(-wp // sw)])[0]))
    out = sch.get_sblock("out")
    if len(parts) == 1 and parts[0][1] == n:        # whole panels: each block's columns copied out while in cache
        sch.reverse_compute_at(out, outer[0])
    else:                                           # else in a pass of their own (cut, a copy in scalars)
        b, i, _ = sch.get_loops(out)
        sch.parallel(sch.fuse(b, i))
    columns = sch.get_loops(out)[-1]
    size = sch.get(columns).extent.value
    sch.vectorize(sch.split(columns, [None, next(v for v in (16, 8, 4, 2, 1) if size % v == 0)])[1])
    return _as_views(sch.mod["main"], [w_shape, *[(batch, m, oh, ow)] * (1 + summand)])


def _parts(n: int) -> list[tuple[int, int, int]]:
    """The output's columns as (first column, columns, panel width): panels of COLUMNS, the last
    one of half as many where the columns left fit in it and that cuts an eighth of the columns
    computed (N = 49: 48 + 8, not 64, as MLAS's kernel ends in 8 columns). The narrow panel is a
    pass over the filters of its own: at N = 196 (4 of 16 columns used; 4% of the FMAs) 2-3% slower."""
    whole, left = divmod(n, COLUMNS)
    if not whole or not left or left > COLUMNS // 2 or (whole + 1) * COLUMNS > 8 * (COLUMNS // 2):
        return [(0, -(-n // COLUMNS) * COLUMNS, COLUMNS)]
    return [(0, whole * COLUMNS, COLUMNS), (whole * COLUMNS, COLUMNS // 2, COLUMNS // 2)]


def _part(column, weight, shape, part, stride: int, whole: int, tail: int, suffix: str, origin=None):
    """The sum of one part of the columns (``_parts``): its K blocks' sums added in turn (onto
    ``origin(b, i, j)``, output column j's, where given), the last block shorter (``tail``); its
    stages' names end in ``suffix``."""
    batch, tall = shape
    start, count, width = part
    panels = count // width
    col = te.compute((batch, panels, whole * stride, width),
                     lambda b, p, q, j: column(b, start + p * width, q, j), name="col" + suffix)
    r = te.reduce_axis((0, stride), "r")
    block = te.compute((batch, whole, tall, count), lambda b, kb, i, j: te.sum(
        weight(i, kb * stride + r) * col[b, j // width, kb * stride + r, j % width], axis=r), name="block" + suffix)
    if origin is not None:                          # ((0 + (z + s0)) + s1) + ...: TE drops a sum's init
        sums = block

        def started(b, kb, i, j):
            return tirx.if_then_else(kb == 0, origin(b, i, start + j) + sums[b, kb, i, j], sums[b, kb, i, j])
        block = te.compute(sums.shape, started, name="summed" + suffix)
    # the blocks' sums added in turn, ((0 + s0) + s1) + ...: as MLAS's, but for the sign of a zero sum
    kb = te.reduce_axis((0, whole), "kb")
    total = te.compute((batch, tall, count), lambda b, i, j: te.sum(block[b, kb, i, j], axis=kb), name="acc" + suffix)
    if not tail:
        return total
    first = whole * stride                          # then the last, shorter block's
    last_col = te.compute((batch, panels, tail, width), lambda b, p, q, j: column(b, start + p * width, first + q, j),
                          name="last_col" + suffix)
    r = te.reduce_axis((0, tail), "r_last")
    last = te.compute((batch, tall, count), lambda b, i, j: te.sum(
        weight(i, first + r) * last_col[b, j // width, r, j % width], axis=r), name="last" + suffix)
    return te.compute(total.shape, lambda *i: total(*i) + last(*i), name="total" + suffix)


def _as_views(func: tirx.PrimFunc, shapes) -> tirx.PrimFunc:
    """``func`` taking its filters and output in ``shapes`` (OIHW, NCHW), which the [M, K] and
    [N, M, OH * OW] matrices it computes on view. Read as [M, C, kh, kw], the tail block's
    k = start + r was split into (c, ky, kx) by a division per FMA (K = 576: 24% of the time)."""
    x, *flat = func.params
    params = [tirx.decl_buffer(shape, "float32", view.name) for view, shape in zip(flat, shapes)]
    root = func.body.block
    body = tirx.SeqStmt([*(tirx.DeclBuffer(view, data=p.data) for view, p in zip(flat, params)), root.body])
    block = s_tir.SBlock(root.iter_vars, root.reads, root.writes, root.name_hint, body, root.init,
                         root.alloc_buffers, root.match_buffers, root.annotations)
    return tirx.PrimFunc([x, *params], s_tir.SBlockRealize([], True, block), func.ret_type, func.attrs)


def _runs(image, batch, c, hp, wp, kh, kw, strides, ow, wide):
    """The columns as runs of the padded image: column(b, s, q, j) is column s + j of row q (``wide``
    columns read, those past OH * OW computed and dropped). The image is laid out in phases of its
    rows and columns (phase (g, f) holds rows g, g + sh, ... and columns f, f + sw, ...; only the
    phases a kernel tap reads: one at stride 1, one for a 1x1 conv at stride 2, where copying the
    whole image took 29% of its time), each ``hq`` x ``wq``, so that column j = oy * ow + ox of row
    q = (ch, ky, kx) reads phase (ky % sh, kx % sw) at (ch, oy + ky // sh, ox + kx // sw):
    offset(q) + j + oy * (wq - ow). A panel's 16 columns lie in a few output rows
    (2 at 16 columns a row and more, 4 at 7), each row's run one vector load at that row's offset,
    the lanes picked by where the rows end: not 16 loads at 16 computed addresses (MlasConvIm2Col
    copies runs too)."""
    sh, sw = strides
    gh, gw = min(sh, kh), min(sw, kw)               # the phases read
    hq, wq = -(-hp // sh), -(-wp // sw)
    plane, spans, skip = gh * gw * c * hq * wq, -(-COLUMNS // ow) + 1, wq - ow
    size = plane + wide + ((wide - 1) // ow + spans) * skip
    size = -(-size // (hq * wq)) * hq * wq          # whole channels: its loops split into (phase, ch), y, z

    def phased(b, e):
        phase, ch = e // (hq * wq) // c, e // (hq * wq) % c
        y, z = e // wq % hq * sh + phase // gw, e % wq * sw + phase % gw
        return tirx.Select(tirx.all(e < plane, y < hp, z < wp), image(b, ch, y, z), mlas_math.f32(0.0))
    flat = te.compute((batch, size), phased, name="padded")

    def column(b, s, q, j):
        ch, ky, kx = q // (kh * kw), q // kw % kh, q % kw
        start = (((ky % sh * gw + kx % sw) * c + ch) * hq + ky // sh) * wq + kx // sw + s + j
        first = s // ow                             # the output row of the panel's first column
        value = flat[b, start + (first + spans - 1) * skip]
        for row in reversed(range(spans - 1)):      # lanes before that row's end read its run
            end = (first + row + 1) * ow - s
            value = tirx.Select(j < end, flat[b, start + (first + row) * skip], value)
        return value
    return column


def _schedule(sch, panels: int, tail: int, suffix: str, by_row: bool):
    """One part's stages (``_part``): parallel over images and blocks of column panels; in each,
    per K block: its panels packed, then each ROWS-row tile's FMA chain in registers (k outermost in
    the tile) added onto acc; then (``tail``) the last block's, each tile added as it leaves its
    registers (the panels packed ``by_row``: ``_pack``). Returns the parallel loop."""
    per_block = max(d for d in range(1, PANELS_PER_BLOCK + 1) if panels % d == 0)
    if per_block < PANELS_PER_BLOCK // 2 and panels <= 2 * PANELS_PER_BLOCK:
        per_block = panels                          # 13 panels: one block, not 13 of one
    acc = sch.get_sblock("acc" + suffix)
    width = sch.get(sch.get_loops(sch.get_sblock("col" + suffix))[-1]).extent.value
    outer = None
    if tail:
        outer, jp, ii, ji = _tiles(sch, sch.get_sblock("total" + suffix), per_block, width)
        in_registers(sch, sch.get_sblock("last" + suffix), jp)
        sch.unroll(ii)
        sch.vectorize(ji)
        _pack(sch, sch.get_sblock("last_col" + suffix), outer, by_row)
        sch.compute_at(acc, outer, preserve_unit_loops=True)     # kb, were there one K block
    kb = sch.get_loops(acc)[-1]
    outer, jp, ii, ji = _tiles(sch, acc, per_block, width, kb, outer)
    in_registers(sch, sch.get_sblock("block" + suffix), jp)
    sch.unroll(ii)
    sch.vectorize(ji)
    sch.vectorize(sch.get_loops(sch.decompose_reduction(acc, kb))[-1])
    _pack(sch, sch.get_sblock("col" + suffix), kb, by_row)
    return outer


def _pack(sch, block, loop, by_row: bool) -> None:
    """``block``'s panels packed under ``loop``; ``by_row`` (a kernel of more than one tap), row by
    row: each row's (c, ky, kx) and offset computed once for all the block's panels, not once per
    panel (the 3x3 convs 2-9% faster; the 1x1 ones, no taps to split, 2-5% slower so)."""
    sch.compute_at(block, loop, preserve_unit_loops=True)     # one panel: its loop kept
    *_, panel, row, column = sch.get_loops(block)
    if by_row:
        sch.reorder(row, panel)
    sch.vectorize(column)


def _tiles(sch, block, per_block: int, width: int, kb=None, outer=None):
    """``block``'s rows and columns in ROWS x ``width`` tiles, ``per_block`` column panels at a time
    (images and those blocks fused and parallel, unless under ``outer`` already), ``kb`` (the K
    blocks) outside the tiles: the loops (outer, panel, row in tile, column in tile)."""
    loops = sch.get_loops(block)[:-1] if kb is not None else sch.get_loops(block)
    i, j = loops[-2:]
    jn, jp, ji = sch.split(j, [None, per_block, width])
    io, ii = sch.split(i, [None, ROWS])
    sch.reorder(jn, *([kb] if kb is not None else []), io, jp, ii, ji)
    if outer is None:
        outer = sch.fuse(loops[-3], jn)
        sch.parallel(outer)
    return outer, jp, ii, ji


def in_registers(sch, block, loop) -> None:
    """``block``'s tile (one K block's FMA chains) under ``loop``, in registers: k outermost, the
    rows unrolled, the columns vectors."""
    sch.compute_at(block, loop)
    sch.set_scope(block, 0, "local")
    *_, rows, columns, k = sch.get_loops(block)
    sch.reorder(k, rows, columns)
    sch.unroll(rows)
    sch.vectorize(columns)
    sch.vectorize(sch.get_loops(sch.decompose_reduction(block, k))[-1])
