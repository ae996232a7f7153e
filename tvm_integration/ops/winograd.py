"""int8 3x3 convolution, stride 1 or 2, by minimal filtering in integers, exact, for hosts whose int8
tiles are int16 rows (AVX2 and AVX-512BW without VNNI: ``vpmaddwd``, 16 MACs a multiply whatever the
operands' width): each 2x2 output tile takes ``positions`` products per (input, output) channel pair
where the direct convolution takes 36, so each multiply of the same tile carries more MACs.

* Stride 1 (``STRIDE_1``): Lavin and Gray's F(2x2, 3x3), 16 products (2.25x fewer), the weight
  transform scaled by 2 per axis (G' = 2G) so that every transform has integer entries: ``V = B^T d B``
  of each 4x4 input tile d (u8 or s8) has at most four terms of +-1, so |V| <= 1024 (int16); ``U = G' g
  G'^T`` of each 3x3 filter g (int8, or 9-bit in int16), at compile time: |U| <= 9 * 256 = 2304 (int16).
* Stride 2 (``STRIDE_2``): the 5x5 input tile of a 2x2 output tile split along each axis into its even
  rows (taps 0 and 2: a 2-tap filter at stride 1, F(2, 2): d0 - d2, d2, d4 - d2 against g0, g0 + g2, g2)
  and its odd rows (tap 1: d1, d3 against g1, added to the two outer products, whose output rows are
  one each); 5 products per axis, 25 in all (1.44x fewer), every entry +-1 or 0, unscaled: |V| <= 4 *
  255, |U| <= 4 * 256.

Then ``M = sum_c U V``, one GEMM per tile position on the s16 tiles (proved on any int16 operands, int32
with wrap-around), and ``Y = A^T M A``: ``scale`` times the 2x2 outputs of the tile. Every step is a ring
operation, so Y is ``scale * conv`` modulo 2^32; ``max_channels`` bounds the input channels so that
|scale * conv| < 2^31, where Y is exact and ``Y >> log2(scale)`` the convolution. The transforms' identity
is checked on every pair of basis inputs (tests/test_winograd.py), which covers all inputs, the product
being bilinear.

Layout: NHWC. The tiles are numbered row-major over the output (``t = (oh // 2) * tiles_w + ow // 2``)
and are the GEMM's rows, padded to whole row tiles; the output stage writes each tile's 2x2 pixels
into a tile-ordered buffer (``result``) right after the tile's products, and a last pass copies it
into the NHWC output (one byte per output value: 0.2 MB for ResNet-18's largest layer). The transformed
weights are packed column tile by column tile, each tile's positions one contiguous block.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from tvm import s_tir, te, tirx

from tvm_integration.kernels import int8, selection, tuning
from tvm_integration.kernels.int8 import Prefetch
from tvm_integration.kernels.packing import round_up
from tvm_integration.ops import depthwise
from tvm_integration.ops.gemm import Tile, parallel_rows, run_pieces, stage_params, tensorize_tile, weights_outer
from tvm_integration.ops.output_stage import OutputStage


@dataclass(frozen=True)
class Transform:
    """One axis of a minimal filtering of a 3x3 window at ``stride`` into 2 outputs: ``input`` (B^T:
    positions x the input tile's pixels), ``weight`` (G: positions x 3 taps), ``output`` (A^T: 2 x
    positions); in 2D, ``A^T [(G g G^T) * (B^T d B)] A = scale * conv(d, g)``. ``name``: what reports call it."""
    name: str
    stride: int
    input: np.ndarray
    weight: np.ndarray
    output: np.ndarray
    scale: int

    def __post_init__(self):
        n = self.input.shape[0]
        assert self.input.shape == (n, self.stride + 3) and self.weight.shape == (n, 3)
        assert self.output.shape == (2, n) and self.scale & (self.scale - 1) == 0

    @property
    def positions(self) -> int:
        """The tile's transformed elements, one GEMM each."""
        return self.input.shape[0] ** 2


STRIDE_1 = Transform("Winograd F(2x2, 3x3)", 1,
                     np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]]),
                     np.array([[2, 0, 0], [1, 1, 1], [1, -1, 1], [0, 0, 2]]),           # G' = 2G
                     np.array([[1, 1, 1, 0], [0, 1, -1, -1]]), 4)
# positions: the even rows' d0 - d2, the odd rows' d1, the even rows' d2, d4 - d2, the odd rows' d3
STRIDE_2 = Transform("Winograd F(2x2, 3x3) stride 2, even/odd phases", 2,
                     np.array([[1, 0, -1, 0, 0], [0, 1, 0, 0, 0], [0, 0, 1, 0, 0], [0, 0, -1, 0, 1], [0, 0, 0, 1, 0]]),
                     np.array([[1, 0, 0], [0, 1, 0], [1, 0, 1], [0, 0, 1], [0, 1, 0]]),
                     np.array([[1, 1, 1, 0, 0], [0, 0, 1, 1, 1]]), 1)
TRANSFORMS = {1: STRIDE_1, 2: STRIDE_2}


def max_channels(data_dtype: str, weight_dtype: str = "int8", transform: Transform = STRIDE_1) -> int:
    """The most input channels for which |scale * conv| < 2^31: 9 taps of |x| <= 255 (u8) or 128 (s8)
    times |w| <= 128 (int8) or 256 (9-bit weights in int16, packing.NINE_BITS) per channel."""
    largest = 255 if data_dtype == "uint8" else 128
    return (2**31 - 1) // (transform.scale * 9 * largest * (128 if weight_dtype == "int8" else 256))


def applies(weight: np.ndarray, channels: int, layout: str, stride, groups: int, data_dtype: str) -> bool:
    """A 3x3 ungrouped NHWC convolution of stride 1 or 2 (``TRANSFORMS``) on both axes and at most
    ``max_channels`` input channels."""
    sh, sw = stride
    return (tuple(weight.shape[2:]) == (3, 3) and sh == sw and sh in TRANSFORMS and groups == 1
            and layout == "NHWC" and channels <= max_channels(data_dtype, str(weight.dtype), TRANSFORMS[sh]))


def pays(kernel: int8.Kernel) -> bool:
    """Whether a convolution the host would run on ``kernel`` runs faster by Winograd: where that tile
    is one of the exact rows without a byte dot product (w16, s8s7, u8r7: AVX2 or AVX-512BW without VNNI).
    Zen 3, CPU time, one thread, ResNet-18's 3x3 layers (int32 out), direct w16 -> Winograd s16 (best
    tile): 56x56x64 1.597 -> 0.855 ms, 28x28x128 1.600 -> 0.801, 14x14x256 1.551 -> 0.795, 7x7x512
    1.573 -> 0.999. VNNI's and AMX's byte tiles, 2-4x the MACs a multiply of these, were not measured
    against it."""
    return kernel.spec.types in ("w16", "s8s7", "u8r7")


STRIDED_FLOOR = 32     # the input channels and the 2x2 output tiles a stride-2 layer needs (``strided_pays``)


def strided_pays(channels: int, tiles: int) -> bool:
    """Whether a stride-2 layer on such a host runs faster by ``STRIDE_2`` (25 products a tile where the
    direct convolution takes 36): where it has at least ``STRIDED_FLOOR`` input channels (a position's
    GEMM is only ``channels`` deep) and as many tiles (few rows stream 25/9 of the direct weights' bytes).
    Zen 3, CPU time, one thread, u8 requantized, direct (tuning log's or untuned w16 tile) / Winograd:
    ResNet-18's 56x56x64 -> 28x28x128 1.49x, 28x28x128 -> 14x14x256 1.32x, 14x14x256 -> 7x7x512 (16
    tiles) 0.76x; 56x56x32 -> 64 1.33x, 28x28x64 -> 64 1.56x, 112x112x16 -> 32 1.07x, 224x224x3 -> 32
    (MobileNetV2's stem) 0.50x, 7x7x256 -> 512 (4 tiles) 0.94x."""
    return channels >= STRIDED_FLOOR and tiles >= STRIDED_FLOOR


def kernels(isa: str) -> list[int8.Kernel]:
    """The proved s16 tiles of ``isa`` (the int16 row on any operands) this host runs."""
    return [k for k in int8.proved_kernels(isa) if k.spec.types == "s16" and selection.usable(k) is None]


def weight_transform(weight: np.ndarray, transform: Transform = STRIDE_1) -> np.ndarray:
    """OIHW int8 (or 9-bit) 3x3 weights -> ``U[position, O, I]`` int16, position = n * row + column of
    G g G^T (n positions per axis)."""
    u = np.einsum("xi,ocij,yj->xyoc", transform.weight, weight.astype(np.int64), transform.weight)
    return u.reshape(transform.positions, *weight.shape[:2]).astype(np.int16)


def _select(index, values):
    """TIR: ``values[index]`` for a loop variable ``index`` the schedule unrolls (then a constant). An
    if_then_else chain, not Select: TVM's simplifier drops the arms of an if_then_else whose condition the
    unrolling made constant, but keeps every arm of a Select, so each of 16 unrolled copies carried all 16
    arms through the TIR passes (a quarter of a small ResNet's compile time)."""
    out = values[-1]
    for i in range(len(values) - 2, -1, -1):
        out = tirx.if_then_else(index == i, values[i], out)
    return out


def build(x: te.Tensor, weight: np.ndarray, pads, out_hw, stage: OutputStage, kernel: int8.Kernel,
          pad_value: int = 0, stride: int = 1):
    """The scheduled module and its constants, ``main(data, *constants[, residual], out)`` with out NHWC
    ``[b, oh, ow, o]``; ``kernel``: an s16 tile (``kernels``); ``stride``: on both axes (``TRANSFORMS``)."""
    transform = TRANSFORMS[stride]
    n_axis, positions, step = transform.input.shape[0], transform.positions, 2 * stride
    b, h, w, c = (int(v) for v in x.shape)
    o = weight.shape[0]
    oh, ow = out_hw
    tiles_w = -(-ow // 2)
    tiles = -(-oh // 2) * tiles_w
    tile = Tile.of(kernel)
    rows, cols, depth = round_up(tiles, tile.mr), round_up(o, tile.nr), round_up(c, tile.k)

    def pixel(bi, t, i, j, ch):
        value = depthwise.padded_value(x, "NHWC", bi, ch, t // tiles_w * step + i - pads[0],
                                       t % tiles_w * step + j - pads[1], pad_value)
        return value.astype("int16")

    def transformed(bi, t, g, ch):
        """V at position g of tile t: sum of B^T[xi, i] B^T[nu, j] d[i, j] over the nonzero terms."""
        bt = transform.input

        def position(xi, nu):       # in int16 lanes: the terms are +-1 times a pixel
            total = tirx.const(0, "int16")
            for i in np.flatnonzero(bt[xi]):
                for j in np.flatnonzero(bt[nu]):
                    term = pixel(bi, t, i, j, ch)
                    total = total + term if bt[xi, i] * bt[nu, j] > 0 else total - term
            return total
        return _select(g, [position(xi, nu) for xi in range(n_axis) for nu in range(n_axis)])

    packed = te.compute((b, rows // tile.mr, positions, tile.mr, depth), lambda bi, p0, g, p1, ch: tirx.if_then_else(
        ch < c, transformed(bi, p0 * tile.mr + p1, g, ch), tirx.const(0, "int16")), name="pack")
    q = tile.group
    wp = te.placeholder((cols // tile.nr, positions, depth // q, tile.nr, q), "int16", name="weights")
    k = te.reduce_axis((0, depth), name="k")
    acc = te.compute((b, positions, rows, cols), lambda bi, g, p, n: te.sum(
        packed[bi, p // tile.mr, g, p % tile.mr, k].astype("int32")
        * wp[n // tile.nr, g, k // q, n % tile.nr, k % q].astype("int32"), axis=k), name="gemm")

    values, params = stage_params(stage, weight.reshape(1, o, -1), cols, 0)
    residual = te.placeholder((b, oh, ow, o), stage.residual.residual_dtype, name="residual") if stage.residual else None

    def output_value(bi, t, r, s, n):
        """Y at output (r, s) of tile t, divided by the scale, through the output stage; A^T's entry in
        row r (0 or 1, a loop variable) is the row-0 entry plus r times the rows' difference."""
        at = transform.output

        def coefficient(r, xi):
            return int(at[0, xi]) + r * int(at[1, xi] - at[0, xi])
        y = sum(coefficient(r, xi) * coefficient(s, nu) * acc[bi, n_axis * xi + nu, t, n]
                for xi in range(n_axis) for nu in range(n_axis))
        there = None
        if residual is not None:
            there = residual[bi, tirx.min(t // tiles_w * 2 + r, oh - 1), tirx.min(t % tiles_w * 2 + s, ow - 1),
                             tirx.min(n, o - 1)]
        return stage.expression(tirx.shift_right(y, transform.scale.bit_length() - 1), params, 0, n, there)

    result = te.compute((b, rows, 2, 2, cols), output_value, name="result")
    out = te.compute((b, oh, ow, o), lambda bi, i, j, n: result[bi, i // 2 * tiles_w + j // 2, i % 2, j % 2, n],
                     name="output")
    func = te.create_prim_func([x, wp, *params.values(), *([residual] if residual is not None else []), out])
    constants = [np.ascontiguousarray(tile.packed_weights(weight_transform(weight, transform)).swapaxes(0, 1)),
                 *values.values()]
    return _schedule(func, tile, kernel, weights_outer(rows, cols)), constants


def _schedule(func, tile: Tile, kernel: int8.Kernel, columns_outer: bool):
    """Loops ``(b, t0) | n0 | g | p1 n1 k`` over (row tile, column tile): each block of the output stage
    computes its products right before it (``compute_at``: a consumer's read of constant positions
    defeats ``reverse_compute_at``), the kernel over ``p1 n1 k``. ``columns_outer`` (gemm.py's
    weights-outer order, the input transformed whole first): ``(b, n0) | g | t0 p1 n1 k``, then the output
    stage over ``t0``: a column tile's products for every row tile, position by position, so that each
    position's weights (16 KB at K 512) stay in L1 across the row tiles and the column tile's positions
    (contiguous in ``weights``) stream from memory once, in order. Zen 3, ResNet-18 in alternating rounds
    (CPU time, one thread, load 5-6): 29.34 -> 28.40 ms, its 7x7x512 and 14x14x256 layers 2-4% each.
    There the row tiles sharing a position's weights fetch the next position's between them
    (kernels/int8.py ``Prefetch``): the first row tile had waited for them, 44% of the GEMM's time in
    four. Zen 3, CPU time, one thread, medians of 31 alternating, without -> with: 7x7x512 1.413 ->
    1.144 ms, 14x14x256 -> 512 at stride 2 (forced onto Winograd) 0.917 -> 0.834."""
    sch = s_tir.Schedule(func)
    result = sch.get_sblock("result")
    b, t, r, s, n = sch.get_loops(result)
    t0, t1 = sch.split(t, [None, tile.mr])
    n0, n1 = sch.split(n, [None, tile.nr])
    if columns_outer:
        sch.reorder(b, n0, t0, t1, r, s, n1)
        outer, inner = sch.fuse(b, n0), t0
    else:
        sch.reorder(b, t0, n0, t1, r, s, n1)
        outer, inner = sch.fuse(b, t0), n0
    sch.parallel(outer)
    sch.unroll(r)
    sch.unroll(s)
    sch.vectorize(n1)
    block, pack = sch.get_sblock("gemm"), sch.get_sblock("pack")
    prefetch = None
    if columns_outer:
        sch.compute_at(block, outer)
        *_, g, p, n1, k = sch.get_loops(block)
        p0, p1 = sch.split(p, [None, tile.mr])
        sch.parallel(sch.fuse(*sch.get_loops(pack)[:2]))
        row_tiles, positions, depth = (int(sch.get(loop).extent) for loop in (p0, g, k))
        prefetch = Prefetch(row_tiles, "A", positions * tile.mr * depth)     # a call's row tile numbers its slice
    else:
        sch.compute_at(block, inner)
        *_, g, p1, n1, k = sch.get_loops(block)
        sch.compute_at(pack, outer)
    *_, positions, _, channels = sch.get_loops(pack)
    sch.unroll(positions)
    sch.vectorize(sch.split(channels, run_pieces(int(sch.get(channels).extent), (16, 8)))[-1])
    parallel_rows(sch, sch.get_sblock("output"))
    tensorize_tile(sch, outer, p1, kernel.product_intrin(int(sch.get(k).extent) // tile.k, prefetch), kernel)
    return sch.mod


ROWS_PADDING = 0.02      # the share of padded tiles a taller row tile may add (``choose_kernel``)


def choose_kernel(isa: str, tiles: int, cols: int, depth: int) -> int8.Kernel | None:
    """The s16 tile for a Winograd convolution of ``tiles`` 2x2 tiles (the GEMM's rows): K steps of 2
    (a shorter unrolled loop), then the most rows whose padding adds at most ``ROWS_PADDING`` of the
    tiles (fewer loads of B per product), else the least padding; None where ``isa`` has no s16 tile
    this host runs. The tuning log holds no Winograd entries. Zen 3, CPU time, one thread, median of
    30, int32 output, ResNet-18's 3x3 layers, every s16 tile (4x16x2 5x16x2 6x16x2 4x16x8 6x16x8):
    56x56x64 (784 tiles) 0.890 0.855 0.855 0.892 0.904 ms; 28x28x128 (196) 0.887 0.851 0.801 0.914
    0.869; 14x14x256 (49) 0.830 0.795 0.840 0.899 0.888; 7x7x512 (16) 0.999 1.241 1.075 1.071 1.148:
    the rule takes the fastest of each (6x16x2, 6x16x2, 5x16x2, 4x16x2)."""
    candidates = kernels(isa)
    if not candidates:
        return None
    shallow = [k for k in candidates if k.spec.k == min(c.spec.k for c in candidates)]
    fits = [k for k in shallow if round_up(tiles, k.spec.mr) <= tiles * (1 + ROWS_PADDING)]
    if fits:
        return max(fits, key=lambda k: (k.spec.mr, k.spec.nr))
    return tuning.least_padding(shallow, tiles, cols, depth)
