"""Depthwise int8 conv2d in plain vectorized TIR: one channel per group leaves nothing for a GEMM
tile (one column of 48), so each output is a KH*KW multiply-add in int32, vectorized along the
contiguous axis (channels in NHWC, output columns in NCHW), parallel over output rows. On x86 the u8 x
s8 products are ``vpmaddwd``s, and on a VNNI host each with its add one ``vpdpwssd`` (the target's
``fast-dpwssd``: isa_specs/host.py ``target_of``).

``pairs`` (AArch64, NHWC, every weight in [-127, 127]; ops/neon_gemm.py): the
taps two at a time, each pair's two products summed in int16 and that sum added to the int32
accumulator, as the s8 x s7 NEON tile does: ``smull``, ``smlal`` and ``saddw`` on 8 channels, half the
widening multiplies of the int32 form (``smlal`` of 4 lanes). The data enters as s8 (u8 data shifted by
-128, ``x ^ 0x80``, as the padded input is read; ``128 sum w`` per channel into the bias), so ``|a b +
a' b'| <= 2 * 128 * 127 < 2^15``: exact. An odd last tap is multiplied alone. MobileNetV2's depthwise
layers, llvm-mca Mcycles, int32 form / pairs (with _schedule's pad pass at stride 1 and
``padded_value``'s speculative read at stride 2; scripts/mca_neon_depthwise.py): on Cortex-A72
112x112x32 1.69 / 1.27, 112x112x96 at stride 2 1.17 / 1.02, 14x14x384 0.40 / 0.23, the 17 layers 10.26 /
7.18; on Cortex-A53 the 17 layers 25.56 / 14.60. Channels not in 8s are computed in 8s on zero weights,
the padded input then written by its pass at stride 2 too; ShuffleNetV2's layers had taken the int32 form
on 2- and 4-lane vectors (Cortex-A53, int32 -> pairs: 28x28x58 2.050 -> 0.318, 56x56x58 at stride 2 1.804
-> 0.460, 14x14x116 1.790 -> 0.140, 28x28x116 at stride 2 1.336 -> 0.202)."""
from __future__ import annotations

import numpy as np
from tvm import s_tir, te, tirx

from isa_specs.features import RegisterFile
from tvm_integration.kernels.neon_int8 import symmetric
from tvm_integration.kernels.packing import round_up
from tvm_integration.ops.blend import blend
from tvm_integration.ops.gemm import parallel_rows
from tvm_integration.ops.output_stage import OutputStage, bounded_forms, placeholders

VECTOR_WIDTHS = (16, 8, 4, 2, 1)
COLUMNS = (8, 7, 4, 2, 1)     # output columns per register tile, the first that divides the row
# (vector width, output columns) of the register tile, the first whose both divide: the widest vector,
# then the most columns
REGISTER_TILES = tuple((w, c) for w in VECTOR_WIDTHS for c in COLUMNS)
SMULL = "llvm.aarch64.neon.smull"        # 8 x s8 * 8 x s8 -> 8 x s16: the tap pairs' products
PAIR_TILES = tuple((8, c) for c in COLUMNS)   # smull's 8 channels a vector: 8 columns x 8 channels first
PAD_VECTOR = 8                            # the pad pass's copies: the tap pairs' channels come in 8s


def fitting(tiles, registers: RegisterFile) -> tuple:
    """``tiles`` whose int32 accumulators (width over the register's lanes, rounded up, times the columns)
    take less than half of ``registers``, the most output columns first (a window row's pixel vectors,
    ``(columns - 1) * stride + KW`` loads, serve more outputs), then the widest vector: the rest holds the
    unrolled taps' weights and pixels. On AVX2's 16 ymm, 7 accumulators and a 3x3 window's 9 weight
    vectors fill the file; REGISTER_TILES' first, 16 x 8, held 16 accumulators and spilled them in the tap
    loop, and 8 x 8 and 16 x 4 spilled too (MobileNetV2's 17 layers, Zen 3, CPU time, alternating: 8 x 7
    1.81 ms, 8 x 8 1.99, 16 x 4 1.97, 16 x 8 2.14, loaded). On AVX-512 every tile fits and the order is
    REGISTER_TILES' own (the columns and the width divide different axes, so the widest vector with the
    most columns comes first either way)."""
    lanes = registers.bits // 32
    return tuple(sorted((t for t in tiles if -(-t[0] // lanes) * t[1] < registers.count // 2),
                        key=lambda t: (-t[1], -t[0])))


def tap_pairs_fit(layout: str, weight: np.ndarray) -> bool:
    """Whether ``build`` can take the tap pairs: NHWC, every weight in [-127, 127] (two s8 products then
    fit an int16). Channels not in PAIR_TILES' 8s are computed in 8s, the extra ones on zero weights."""
    return layout == "NHWC" and symmetric(weight)


def build(x: te.Tensor, layout: str, weight: np.ndarray, stride, pads, out_hw, stage: OutputStage, pad_value: int = 0,
          tiles=REGISTER_TILES, pairs: bool = False):
    """``(mod, constants, out_shape)``; ``main(data, weights, *stage params, out)``; ``tiles``: the
    register tiles to choose from (REGISTER_TILES' form), for a target with another register file;
    ``pairs``: the taps' products summed two at a time in int16 (above), on PAIR_TILES."""
    if stage.residual:
        raise ValueError("a residual add is not fused into a depthwise convolution")
    if pairs and not tap_pairs_fit(layout, weight):
        raise ValueError("tap pairs need NHWC and every weight in [-127, 127]")
    c, kh, kw = weight.shape[0], weight.shape[2], weight.shape[3]
    cp = round_up(c, PAIR_TILES[0][0]) if pairs else c      # the channels computed (tap_pairs_fit)
    oh, ow = out_hw
    # the padded input written once (_schedule); with channels added, at stride 2 too: inlined, their
    # test would make the tail tile's smull scalar, which LLVM has no form of
    pad_pass = pairs and (tuple(stride) == (1, 1) or cp != c)
    if layout == "NCHW":
        b, _, h, wd = x.shape
        shape = (b, c, h + pads[0] + pads[2], wd + pads[1] + pads[3])
        padded = te.compute(shape, lambda n, ch, i, j: padded_value(x, layout, n, ch, i - pads[0], j - pads[1], pad_value), name="pad")
    else:
        b, h, wd, _ = x.shape
        shape = (b, h + pads[0] + pads[2], wd + pads[1] + pads[3], cp)
        shifted = signed if pairs and x.dtype == "uint8" else lambda v: v

        padded = te.compute(shape, lambda n, i, j, ch: zero_past(shifted(padded_value(
            x, layout, n, ch, i - pads[0], j - pads[1], pad_value, speculative=pairs and not pad_pass)), ch, c, cp),
            name="pad")
    # NHWC vectorizes along channels: the weights [KH, KW, C], one vector load per tap (as [C, KH, KW]
    # each tap's vector was 16 byte inserts, 2/3 of the run time); NCHW broadcasts one weight per tap
    nhwc = layout == "NHWC"
    w = te.placeholder((kh, kw, c) if nhwc else (c, kh, kw), str(weight.dtype), name="weights")
    ry, rx = te.reduce_axis((0, kh), name="ry"), te.reduce_axis((0, kw), name="rx")

    def product(n, ch, y, xx):
        i, j = y * stride[0] + ry, xx * stride[1] + rx
        value = padded[n, ch, i, j] if layout == "NCHW" else padded[n, i, j, ch]
        tap = w[ry, rx, ch] if nhwc else w[ch, ry, rx]
        return te.sum(value.astype("int32") * tap.astype("int32"), axis=[ry, rx])

    values = stage.channel_params(c, 1, 1)
    weight_image = weight[:, 0].transpose(1, 2, 0) if nhwc else weight[:, 0]
    if pairs:
        product, w, weight_image = _tap_pairs(padded, weight, stride, cp)
        if x.dtype == "uint8":           # a = a' + 128: sum a w = sum a' w + 128 sum w
            values["bias"] = values["bias"] + (128 * weight.reshape(c, -1).sum(1, dtype=np.int32)).reshape(-1, 1)
    largest = np.abs(weight.reshape(c, -1).astype(np.int64)).sum(1) * (255 if x.dtype == "uint8" else 128)
    stage = bounded_forms(stage, values, (largest + np.abs(stage.channel_params(c, 1, 1)["bias"][:, 0])).reshape(-1, 1))
    params = placeholders(values)
    if layout == "NCHW":
        acc = te.compute((b, c, oh, ow), product, name="acc")
        out = te.compute((b, c, oh, ow), lambda n, ch, y, xx: stage.expression(acc[n, ch, y, xx], params, ch, 0),
                         name="output")
    else:
        acc = te.compute((b, oh, ow, cp), lambda n, y, xx, ch: product(n, ch, y, xx), name="acc")
        out = te.compute((b, oh, ow, c), lambda n, y, xx, ch: stage.expression(acc[n, y, xx, ch], params, ch, 0),
                         name="output")
    func = te.create_prim_func([x, w, *params.values(), out])
    constants = [np.ascontiguousarray(weight_image), *values.values()]
    mod = _schedule(func, layout, PAIR_TILES if pairs else tiles, pad_pass, c if cp != c else None)
    return mod, constants, (b, c, oh, ow) if layout == "NCHW" else (b, oh, ow, c)


def zero_past(value, ch, channels: int, computed: int):
    """``value`` (s8) on the layer's ``channels``, 0 on those added up to ``computed`` to fill whole vectors
    (their weights are zero too; an if, so no read past the input's channels)."""
    return value if computed == channels else tirx.if_then_else(ch < channels, value, tirx.const(0, "int8"))


def signed(v):
    """A u8 value as the s8 ``v - 128``: its top bit flipped."""
    return tirx.reinterpret("int8", v ^ tirx.const(0x80, "uint8"))


def _tap_pairs(padded: te.Tensor, weight: np.ndarray, stride, channels: int):
    """The NHWC accumulator over tap pairs of the s8 ``padded`` input: ``(product, weights placeholder,
    weights image)``, the weights ``[pairs, 2, channels]`` (tap 2t + u of pair t, row-major over the window;
    zero past the last, which is not multiplied: the unrolled pairs' Select is constant, and past the
    weight's channels)."""
    c, kh, kw = weight.shape[0], weight.shape[2], weight.shape[3]
    taps = kh * kw
    image = np.zeros((-(-taps // 2) * 2, channels), np.int8)
    image[:taps, :c] = weight[:, 0].reshape(c, taps).T
    image = image.reshape(-1, 2, channels)
    w = te.placeholder(image.shape, "int8", name="weights")
    t = te.reduce_axis((0, image.shape[0]), name="t")

    def term(n, ch, y, xx, u):
        tap = tirx.min(2 * t + u, taps - 1)         # past the last tap: that tap's pixel (not multiplied)
        value = padded[n, y * stride[0] + tap // kw, xx * stride[1] + tap % kw, ch]
        return tirx.call_llvm_pure_intrin("int16", SMULL, value, w[t, u, ch])

    def product(n, ch, y, xx):
        second = tirx.Select(2 * t + 1 < taps, term(n, ch, y, xx, 1), tirx.const(0, "int16"))
        return te.sum((term(n, ch, y, xx, 0) + second).astype("int32"), axis=t)
    return product, w, image


def padded_value(x, layout, n, ch, i, j, pad_value: int = 0, speculative: bool = False):
    """``x`` at (i, j), or ``pad_value`` outside it; ``speculative``: read at the nearest pixel inside
    and blend (ops/blend.py: vector bitwise ops, where a Select's simplified value lost the clamp and read a
    row past the input, a segfault under qemu on 56x56x72 at 5x5 stride 2) instead of a branch (the tap
    pairs at stride 2, inlined: MobileNetV2's 112x112x96 1.09 -> 1.01 Mcycles on Cortex-A72)."""
    h, w = (x.shape[2], x.shape[3]) if layout == "NCHW" else (x.shape[1], x.shape[2])
    inside = tirx.all(i >= 0, i < h, j >= 0, j < w)
    if speculative:
        i, j = tirx.max(tirx.min(i, h - 1), 0), tirx.max(tirx.min(j, w - 1), 0)
    value = x[n, ch, i, j] if layout == "NCHW" else x[n, i, j, ch]
    pad = tirx.const(pad_value, x.dtype)
    return blend(inside, value, pad) if speculative else tirx.if_then_else(inside, value, pad)


def _schedule(func, layout: str, tiles, pad_pass: bool = False, real: int | None = None):
    """Registers hold a tile of up to 8 output columns x one vector of the innermost axis while the
    KH x KW taps accumulate into it; the padding is computed inside the tap loop (inlined), not as a
    separate pass over the input, but with ``pad_pass`` (the tap pairs at stride 1): there the window's
    bounds tests, a branch per tap and column, cost more than one vectorized pass writing the padded
    input (MobileNetV2's stride-1 depthwise layers on Cortex-A72, llvm-mca Mcycles when this was chosen,
    inlined / pass: 112x112x32 1.46 / 1.32, 56x56x144 1.66 / 1.41, 14x14x384 0.27 / 0.24; at stride 2, a
    quarter of the outputs for the same input, the pass costs more than it saves: 112x112x96 1.09 / 1.11).
    The taps are unrolled: a 3x3 window's 8 columns then read 10 input vectors per window row, not 24
    (AMX host, whole models, one thread, medians side by side: MobileNetV2 2.28 -> 2.13 ms, MobileNetV3
    0.93 -> 0.80). ``real``: where the NHWC channels were rounded up, how many are the layer's; the pad
    pass's vector and the tile holding the last of them test the channel, and since TVM's vectorizer makes
    a whole loop scalar for a test that differs across its lanes, a partition hint splits them off
    (LoopPartition), so only they are scalar."""
    sch = s_tir.Schedule(func)
    if pad_pass:
        parallel_rows(sch, sch.get_sblock("pad"), PAD_VECTOR)
        if real is not None:
            sch.annotate(sch.get_loops(sch.get_sblock("pad"))[-2], "pragma_loop_partition_hint", 1)
    else:
        sch.compute_inline(sch.get_sblock("pad"))
    acc = sch.get_sblock("acc")
    n, d1, d2, d3, *taps = sch.get_loops(acc)           # taps: ry, rx, or the tap pairs
    extent = int(sch.get(d3).extent)                # NCHW: output columns; NHWC: channels
    width, columns = next((w, c) for w, c in tiles if extent % w == 0 and int(sch.get(d2).extent) % c == 0)
    i0, i1 = sch.split(d3, [None, width])
    if real is not None:
        sch.annotate(i0, "pragma_loop_partition_hint", 1)
    j0, j1 = sch.split(d2, [None, columns])
    sch.reorder(n, d1, j0, i0, *taps, j1, i1)
    sch.parallel(sch.fuse(n, d1))
    output = sch.get_sblock("output")
    sch.reverse_compute_at(output, i0)
    sch.unroll(j1)
    if width > 1:
        sch.vectorize(i1)
        sch.vectorize(sch.get_loops(output)[-1])
    for tap in taps:    # constant offsets: LLVM loads a pixel once for the columns sharing it (below)
        sch.unroll(tap)
    init = sch.decompose_reduction(acc, taps[0])
    if width > 1:
        sch.vectorize(sch.get_loops(init)[-1])
    return sch.mod
