"""Direct int8 conv2d: the tile kernel reads A straight from the padded NHWC input, with no im2col
packing (what MLAS's indirect convolution kernels do by pointer tables).

In NHWC, one window row (kw pixels x C channels) of output pixel ``ow`` is the run of ``kw*C``
bytes at ``ow * sw * C`` of the padded input row ``oh * sh + kh``; the runs of ``mr`` consecutive
output pixels start ``sw * C`` bytes apart, so a k4-image tile kernel given that as its A row stride
reads them in place (the rows overlap: ``kernels.int8.direct_functions``). The GEMM then runs, per
tile of ``mr`` pixels of one output row and ``nr`` channels, one kernel call over all window rows
(``_kruns``: the tile starts from zero and stays in registers). The im2col packing copied every input
byte ``kh*kw`` times; here the input is copied once, by the padding stage. Output rows that do not
split into whole row tiles are rounded up to them where that wastes at most a quarter (``flat``).

Narrower output rows (ResNet's 14 and 7 for the AMX tile's 32 rows) run the same GEMM over a flat
pixel order instead. The padded input is stored as
``sh`` planes of every ``sh``-th row (plane ``p`` holds padded rows ``p, p + sh, ...``; one plane at
stride 1), each ``wp`` pixels wide (the padded width rounded up to a multiple of ``sw``). Output
pixel (oh, ow) is flat row ``q = oh * wq + ow`` with ``wq = wp / sw``; its window row ``kh`` is the
run of plane ``kh % sh`` at pixel ``(q + kh // sh * wq) * sw``, so the tiles' rows, ``sw`` pixels
apart, run on across output rows; the ``wq - ow`` rows per output row that fall on the padding
compute values nobody reads (1 in 29 for ResNet's 56-wide stride-2 layer), and the output stage
reads the real rows back in a pass of its own (``flat``) Where one window row's weights for a column tile fit in L1, the
flat GEMM runs window row by window row over all row tiles (``run_by_run``), C kept in memory.

It applies to ordinary (one-group) NHWC convolutions with a window wider than 1x1 and window rows of
whole K blocks (``applies``), and is taken where it computes few enough more pixels than the im2col
GEMM would (``pays``: on AVX2's exact tiles, at most 10% more); the others take gemm.py's im2col path.
"""
from __future__ import annotations

import numpy as np
from tvm import s_tir, te

from tvm_integration.kernels.int8 import Kernel, Prefetch, Runs
from tvm_integration.ops import depthwise
from tvm_integration.ops.gemm import Tile, output_tensor, stage_params, tensorize_tile, weights_outer
from tvm_integration.ops.output_stage import OutputStage
from tvm_integration.kernels.packing import (activation_shift, conv_weight_matrix, correction, kernel_activation,
                                             clamped, round_up)


def applies(tile: Tile, weight_shape, channels: int, layout: str, groups: int) -> bool:
    _, _, kh, kw = weight_shape
    return layout == "NHWC" and groups == 1 and kh * kw > 1 and kw * channels % tile.k == 0


# How many times im2col's pixels (the output's pixels rounded up to whole row tiles) the direct GEMM may
# compute and still read its input in place (``pays``), per tile kind (ISA, types) where measured.
# Zen 3, w16 tiles, CPU time, one thread, ResNet-18's weights, direct / im2col (each path forced by
# build_conv2d's ``in_place``, side by side, medians of 9): 7.1% more pixels (5-row tiles on rows of 56,
# 28 and 14) 1.622 / 1.638, 0.828 / 0.822, 1.586 / 1.567, 0.808 / 0.836, 1.611 / 1.586 ms, the same
# within the noise; on its 7x7 outputs (512 channels, K 2304 and 4608), 5-row tiles flat 20-30% more
# pixels (rows of 9 and 8 padded columns) 1.965 / 1.583 and 0.939 / 0.788; 4-row tiles, rows rounded
# up to 8 (7.7% more), 1.970 / 1.818 and 1.005 / 0.922. s8s7's row is slower than w16's, so its
# packing weighs less still. Other kinds read in place wherever direct.py applies: on the AMX and VNNI
# hosts, where the packing weighs more against the multiplies, the rounding up (up to a quarter more
# pixels, ``flat``) was measured to pay (the docstrings below); they are not in this table until measured.
PIXELS_LIMIT = {("avx2", "w16"): 1.1, ("avx2", "s8s7"): 1.1}


def row_geometry(tile: Tile, width: int, pads: tuple[int, ...], kw: int, sw: int, out_hw: tuple[int, int]):
    """``(owp, wp, rows)`` of the direct GEMM over an input ``width`` pixels wide: the output pixels it
    computes per output row (whole row tiles; flat: the row's own), the padded width (a multiple of
    ``sw``) and, flat, how many pixels of the flat order it computes (0 when not flat)."""
    oh, ow = out_hw
    owp = ow if flat(tile, ow) else round_up(ow, tile.mr)
    wp = round_up(max(width + pads[1] + pads[3], (owp - 1) * sw + kw), sw)
    return owp, wp, round_up(oh * (wp // sw), tile.mr) if flat(tile, ow) else 0


def pays(tile: Tile, width: int, pads: tuple[int, ...], kw: int, sw: int, out_hw: tuple[int, int],
         limit: float | None) -> bool:
    """Whether reading the input in place computes at most ``limit`` times the pixels of im2col's GEMM
    (None: no limit; ``PIXELS_LIMIT``): narrow output rows (ResNet's 7) on small row tiles take
    im2col, whose row tiles run on across output rows without computing the padding columns between them."""
    owp, _, rows = row_geometry(tile, width, pads, kw, sw, out_hw)
    return limit is None or (rows or out_hw[0] * owp) <= limit * round_up(out_hw[0] * out_hw[1], tile.mr)


def flat(tile: Tile, out_width: int) -> bool:
    """Whether the GEMM runs over the flat pixel order: output rows narrower than a row tile, or
    whose rounding up to whole tiles would waste more than a quarter of the products. Rounded up, the
    output stage runs after each tile, on the accumulators still in L1; flat, in a pass of its own
    over them all (CPU time on the AMX host, flat / rounded up: C2 107 / 105 us, C4 62 / 59, C6
    101 / 85)."""
    return 3 * round_up(out_width, tile.mr) > 4 * out_width


def build(x: te.Tensor, weight: np.ndarray, stride: tuple[int, int], pads: tuple[int, ...],
          out_hw: tuple[int, int], stage: OutputStage, tile: Tile, kernel: Kernel | None, pad_value: int):
    """``(mod, constants, out_shape)``: ``main(x, weights, *params[, residual], out)`` with ``out`` in
    NHWC ``[b, oh, ow, o]``; ``pad_value``: what the padding holds (the input's zero point);
    ``kernel=None``: the same schedule in plain TIR (the row tile unrolled, LLVM vectorizing)."""
    b, h, w, c = (int(d) for d in x.shape)
    o, _, kh, kw = weight.shape
    (sh, sw), (oh, ow) = stride, out_hw
    run, npad = kw * c, round_up(o, tile.nr)
    owp, wp, rows = row_geometry(tile, w, pads, kw, sw, out_hw)      # output pixels per row computed
    hp = h + pads[0] + pads[2]
    planes, wq = (sh, wp // sw) if flat(tile, ow) else (1, wp)
    plane_rows = -(-hp // planes)
    if rows:   # the last row tile's windows run past the padded input: rows of padding after it
        plane_rows = max(plane_rows, -(-((rows - 1 + (kh - 1) // sh * wq) * sw * c + run) // (wp * c)))
    a_dtype = kernel.a_dtype if kernel else "uint8"

    def pad_value_at(bi, f):
        """Byte ``f`` of the planes: channel, padded column and row (plane ``p``'s ``i``-th row is
        padded row ``i * planes + p``)."""
        row = f // (wp * c)
        padded_row = row % plane_rows * planes + row // plane_rows
        return kernel_activation(depthwise.padded_value(
            x, "NHWC", bi, f % c, padded_row - pads[0], f // c % wp - pads[1], pad_value), str(x.dtype), a_dtype)
    # the padded input as one flat run of bytes: a window row is one run of it in either order
    padded = te.compute((b, planes * plane_rows * wp * c), pad_value_at, name="pad")

    weights = conv_weight_matrix(weight, 1)              # k = (kh, kw, c): window row kh is one run
    q = tile.group
    w = te.placeholder((1, npad // tile.nr, kh * run // q, tile.nr, q), tile.b_dtype, name="weights")
    r = te.reduce_axis((0, kh), name="r")
    t = te.reduce_axis((0, run), name="t")

    def product(bi, start, n):
        return (padded[bi, start + t].astype("int32")
                * w[0, n // tile.nr, r * (run // q) + t // q, n % tile.nr, t % q].astype("int32"))
    if rows:
        runs = Runs(kh, planes, plane_rows * wp * c, wq * sw * c)
        acc = te.compute((b, rows, npad), lambda bi, q, n: te.sum(
            product(bi, runs.offset(r) + q * sw * c, n), axis=[r, t]), name="gemm")
        at = lambda bi, i, j, n: acc[bi, i * wq + j, n]  # noqa: E731
    else:
        runs = Runs(kh, 1, 0, wp * c)
        acc = te.compute((b, oh, owp, npad), lambda bi, i, j, n: te.sum(
            product(bi, runs.offset(r) + (i * sh * wp + j * sw) * c, n), axis=[r, t]), name="gemm")
        at = lambda bi, i, j, n: acc[bi, i, j, n]  # noqa: E731
    shift = activation_shift(str(x.dtype), a_dtype)
    weights, fix = clamped(weights, *tile.b_range(kernel), npad)
    values, params = stage_params(stage, weights, npad, shift, fix)

    def total(bi, i, j, n):
        """The accumulator and the correction of clamped weights (k = (kh, kw, c)), read from the input."""
        def activation(k):
            return depthwise.padded_value(x, "NHWC", bi, k % c, i * sh + k // run - pads[0],
                                          j * sw + k // c % kw - pads[1], pad_value).astype("int32")
        return at(bi, i, j, n) + correction(params, 0, n, activation)
    out, residual = output_tensor((b, oh, ow, o), stage, params, lambda bi, i, j, n: (total(bi, i, j, n), 0, n))
    func = te.create_prim_func([x, w, *params.values(), *([residual] if residual is not None else []), out])
    constants = [tile.packed_weights(weights), *values.values()]
    return (_schedule(func, tile, kernel, run, sw * c, runs, c, (planes * plane_rows, wp * c), sh * wp * c), constants,
            (b, oh, ow, o))


L1_BYTES = 48 * 1024   # the data cache of one core of the AMX hosts (Sapphire Rapids and later)
STREAMED_BYTES = 256 * 1024   # weights that take a core 20 us or more to read from memory (12 GB/s)


def columns_first(tile: Tile, depth: int, npad: int, pixels: int) -> bool:
    """Whether output rows of whole row tiles (not ``flat``) run their column tiles outermost: as
    ``gemm.weights_outer`` says, or where all the weights overflow half of L1 but one column tile's
    (``depth`` x ``nr`` bytes) fits in three quarters of it. Then that column tile stays in L1 while
    the row tiles pass, and the few input rows their windows share stay there too; row tiles first
    read all the weights from L2 again for every row tile, at L2's bandwidth (4 KB of tile loads per 4
    ``tdpbusd``). AMX host, CPU time, one thread, rows first -> columns first (least of 80): C2 97 ->
    86 us, C4 53 -> 49, C6 78 -> 76 (36 KB per column tile); column tiles first on the same host's
    VNNI tiles took C2, C4 and C6 0-4% less (C6's 72 KB per column tile stays rows first).
    Also where the weights pass ``STREAMED_BYTES``: inside a model they come from memory, and rows
    first the first row tile waited for all of them, where columns first its calls fetch the next
    column tile's while they compute (kernels/int8.py ``Prefetch``). ResNet-18 built for VNNI on the
    AMX host (14x32 tile), per operator inside the model: the 14x14x256 layers 392, 386, 388 -> 321,
    316, 322 us; the whole model side by side with OpenVINO held to VNNI 0.874x -> 0.856x."""
    return (weights_outer(pixels, npad) or depth * npad > STREAMED_BYTES
            or depth * npad > L1_BYTES // 2 and depth * tile.nr <= 3 * L1_BYTES // 4)


def run_by_run(tile: Tile, run: int, rows: int) -> bool:
    """Whether a flat GEMM (``flat``) runs window row by window row over all its row tiles (column tile
    outermost), each tile's C kept in memory between window rows, so that one window row's weights
    for a column tile stay in L1 for every row tile: where they take at most half of L1 (48 KB), a
    window row is at least 8 K blocks (each call loads and stores its 4 KB of C once), and there are
    at least two row tiles to share them. Otherwise each tile's whole dot product reads both operands
    from L2 again, and L2 bandwidth is the limit: a 32x32 AMX tile over 36 k blocks from L2 runs at
    48% of the tdpbusd peak, with B in L1 at 63% (microbenchmark of the kernel on the AMX host). CPU
    time, one thread, whole dot product -> run by run (K blocks per window row): C9 80.6 -> 71.2 us
    (12), 192 channels at 14x14 58.5 -> 50.4 (9), C10 51.2 -> 51.6 (12), 256 channels at 28x28 stride 2
    104.5 -> 94.6 (12); C7 42.5 -> 55.7 and 128 channels at 14x14 19.8 -> 24.1 (6: slower); C12's
    window row of 48 KB 108 -> 142."""
    return tile.nr * run <= L1_BYTES // 2 and run >= 8 * tile.k and rows >= 2 * tile.mr


def _schedule(func, tile: Tile, kernel: Kernel | None, run: int, row_step: int, runs: Runs, channels: int,
              padded_rows: tuple[int, int], out_row_step: int):
    """Loops ``(b, oh, ow0) | n0 | kh | ow1 n1 t``, or ``(b, n0, oh) | ow0 | kh | ow1 n1 t`` with 4x
    more columns than pixels (``gemm.weights_outer``: a column tile's weights stay in L2 for every row
    tile instead of all the weights streaming once per output row; ResNet-18's C12 on the AMX host's
    VNNI, CPU time, one thread: 7x64 tile 0.450 -> 0.387 ms, 7x48 0.484 -> 0.368) (flat:
    ``(b, q0) | n0 | kh | q1 n1 t``, or ``(b, n0) | kh | q0 | q1 n1 t`` run by run), the fused outer
    loop parallel, the inner four (three) one kernel call; the padding stage parallel over input rows,
    a vector copy per pixel; the output stage after each (row tile, column tile), or (flat) in a pass
    of its own over the output rows. Where consecutive calls share a column tile's weights (column
    tiles outer, run by run), they fetch the next one's between them (kernels/int8.py ``Prefetch``)."""
    sch = s_tir.Schedule(func)
    pad = sch.get_sblock("pad")
    b, f = sch.get_loops(pad)
    i, jc = sch.split(f, list(padded_rows))
    sch.parallel(sch.fuse(b, i))
    sch.vectorize(sch.split(jc, [None, channels])[-1])
    block = sch.get_sblock("gemm")
    loops = sch.get_loops(block)
    by_run = len(loops) == 5 and kernel is not None and run_by_run(tile, run, int(sch.get(loops[1]).extent))
    npad = int(sch.get(loops[-3]).extent)
    if len(loops) == 5:                                  # flat
        b, q, n, r, t = loops
        columns_outer = weights_outer(int(sch.get(q).extent), npad)
        # the row tiles sharing a column tile's weights (run by run: one window row's) fetch the next ones
        prefetch = Prefetch(int(sch.get(q).extent) // tile.mr, "C") if by_run or columns_outer else None
        j0, j1 = sch.split(q, [None, tile.mr])
        n0, n1 = sch.split(n, [None, tile.nr])
        if by_run:
            sch.reorder(b, n0, r, j0, j1, n1, t)
            outer = sch.fuse(b, n0)
        elif columns_outer:
            sch.reorder(b, n0, j0, r, j1, n1, t)
            outer = sch.fuse(b, n0)
        else:
            sch.reorder(b, j0, n0, r, j1, n1, t)
            outer = sch.fuse(b, j0)
        output = sch.get_sblock("output")
        ob, oi, _, on = sch.get_loops(output)
        sch.parallel(sch.fuse(ob, oi))
        sch.vectorize(on)
    else:
        b, i, j, n, r, t = loops
        columns_outer = columns_first(tile, runs.count * run, npad, int(sch.get(i).extent) * int(sch.get(j).extent))
        # as flat, where an output row is one row tile (the deep layers): the row's offset in A numbers it
        one_tile = int(sch.get(j).extent) == tile.mr
        prefetch = Prefetch(int(sch.get(i).extent), "A", out_row_step) if columns_outer and one_tile else None
        j0, j1 = sch.split(j, [None, tile.mr])
        n0, n1 = sch.split(n, [None, tile.nr])
        if columns_outer:   # threads split (column tile, output row) pairs, column tiles outermost
            sch.reorder(b, n0, i, j0, r, j1, n1, t)
            outer, tile_loop = sch.fuse(b, n0, i), j0
        else:
            sch.reorder(b, i, j0, n0, r, j1, n1, t)
            outer, tile_loop = sch.fuse(b, i, j0), n0
        output = sch.get_sblock("output")
        sch.reverse_compute_at(output, tile_loop)
        sch.vectorize(sch.get_loops(output)[-1])
    sch.parallel(outer)
    if kernel is None:
        init = sch.decompose_reduction(block, r)
        sch.vectorize(sch.get_loops(init)[-1])
        t0, t1 = sch.split(t, [None, tile.k])
        sch.reorder(t0, j1, t1, n1)
        sch.unroll(j1)
    elif by_run:        # C zeroed in memory once, then one window row per kernel call
        init = sch.decompose_reduction(block, r)
        sch.vectorize(sch.get_loops(init)[-1])
        tensorize_tile(sch, outer, j1, kernel.direct_intrin(run // tile.k, row_step, Runs(1, 1, 0, 0), init=False,
                                                            prefetch=prefetch), kernel)
    else:
        tensorize_tile(sch, outer, r, kernel.direct_intrin(run // tile.k, row_step, runs, prefetch=prefetch), kernel)
    return sch.mod
