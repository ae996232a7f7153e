"""Depthwise int8 conv2d on sdot (AArch64 cores with the dot-product extension: Cortex-A55, A76,
Neoverse-N1), NHWC, byte weights, any number of channels (those not in 8s computed in 16s).

sdot sums four byte products into each int32 lane, and a depthwise lane is one channel, so each lane's
four bytes must be four taps of that channel. One pass (``word_pass``) writes each padded row's *words*:
at every even column j, per channel, the four pixels j..j+3 of that row (four loads of a pixel's
channels and one ``st4``), u8 data shifted to s8 by ``x ^ 0x80`` (``128 sum w`` into the bias, as
depthwise.py's tap pairs do), a pixel outside the input the pad value. Output column x at stride s
starts at column s x, so its window row's taps lie in the words at (s x) // 2, + 2, ... and at byte
offset p = (s x) % 2 in them:
with the weights ``[w0 w1 w2 0]`` (p = 0) and ``[0 w0 w1 w2]`` (p = 1) a 3x3 window row is one sdot
per four channels (5x5, 7x7: two), the word shared by two neighbouring columns at stride 1. The weights are s8 as they
are (no [-127, 127] bound: sdot's sums are int32). The register tile: COLUMNS output columns x LANES
channels, the output stage after it. Channels not in 8s (ShuffleNetV2's 58 and 116) are padded to 16s
with zero weights (``padded_channels``): the word pass reads the last vector of a pixel's channels ending
at its last channel and turns it (``ext``), and only the tile holding the last real channel tests their
bound (``_schedule``); the bytes moved and the sdots of the padding are the cost.

On the A76 (llvm-mca's neoverse-n1 model, Mcycles, depthwise.py's form -> this one): MobileNetV2's
56x56x144 layer 1.124 -> 0.754 (compute 0.62, the word pass 0.07, the pad pass 0.04; the output stage
takes more of the vector pipes than the sdots), 112x112x96 at stride 2 0.845 -> 0.774; ShuffleNetV2's
14x14x116 0.431 -> 0.063 (there depthwise.py had 4-lane vectors). Whole models, qsynth / onnxruntime's
AArch64 build: MobileNetV2 22.3 -> 20.7 (0.695x), MobileNetV3-Large 24.4 -> 19.5 (0.574x), ShuffleNetV2
17.9 -> 14.3 (0.702x; its 58-channel layers, not in 4s, stayed on depthwise.py). Padded to 16s
(Mcycles, 4s or depthwise.py -> 16s): ShuffleNetV2's 28x28x58 0.471 -> 0.090, 56x56x58 at stride 2 0.443
-> 0.145, 14x14x116 0.063 -> 0.042, 28x28x116 at stride 2 0.126 -> 0.065. The accumulators start from the
bias (``starting_from``) where they started from zero (movi) and the output stage added it (an integer add),
16 of 84 vector instructions per 32 outputs; on an out-of-order core each tile column loads a copy of its own
(one copy: LLVM copies it into the other columns' registers, a vector mov each). Mcycles, zero start / one
copy / a copy a column, MobileNetV2's 56x56x144, 112x112x96 at stride 2 and 14x14x384, ShuffleNetV2's 28x28x58,
7x7x960: on the A76 0.754 / 0.684 / 0.650, 0.774 / 0.727 / 0.700, 0.127 / 0.116 / 0.116, 0.090 / 0.082 /
0.079, 0.081 / 0.074 / 0.069; on the in-order A55 2.082 / 2.010 / 2.137, 1.913 / 1.981 / 2.047, 0.359 / 0.348 /
0.345, 0.265 / 0.248 / 0.269, 0.211 / 0.200 / 0.199 (one copy: 4.83 -> 4.79 in all). The pad and word
passes in one (``word_pass``), MobileNetV2's 15 depthwise layers on int8 data (TFLite's stride-2 SAME),
Mcycles, two passes -> one: the A76 3.399 -> 2.900 (the padded copy took 0.46), the A55 10.688 -> 9.807;
ShuffleNetV2's six 3x3 layers on u8 data, four of them of 58 and 116 channels (computed in 64 and 128): the
A76 0.314 -> 0.245, the A55 0.918 -> 0.821."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
from tvm import s_tir, te, tirx
from tvm.script import tirx as T
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as IB

from tvm_integration.kernels.packing import round_up
from tvm_integration.ops.gemm import reads_of_body, starting_from
from tvm_integration.ops.output_stage import OutputStage, bounded_forms, placeholders

LANES = 8                   # channels a register tile: two sdots
PADDED = 16                 # channels not in LANES' 8s are computed in 16s (padded_channels)
COLUMNS = (4, 7, 2, 1)      # output columns a register tile, the first that divides the row
SDOT = "qsynth_depthwise_sdot"
WORD = 4                    # bytes an sdot lane sums: four horizontal neighbours of one channel


def fits(weight: np.ndarray, stride) -> bool:
    """Whether ``build`` takes the layer: byte weights, a horizontal stride of 1 or 2."""
    return weight.dtype == np.int8 and stride[1] in (1, 2)


def padded_channels(channels: int) -> int:
    """The channels the passes and the register tiles compute: ``channels`` where LANES divide them,
    else rounded up to PADDED, the extra ones on zero weights. Their word pass then moves whole 16-byte
    vectors and their tiles are two sdots (the tail tile's output stage partitioned off, below)."""
    return channels if channels % LANES == 0 else round_up(channels, PADDED)


def build(x: te.Tensor, weight: np.ndarray, stride, pads, out_hw, stage: OutputStage, pad_value: int = 0,
          out_of_order: bool = False):
    """``(mod, constants, out_shape)`` of the NHWC depthwise conv2d of ``x`` (u8 or s8) by ``weight``
    ([C, 1, KH, KW]); ``main(data, weights, *stage params, out)``. The accumulators start from the bias:
    for an ``out_of_order`` core one copy of it per column of the register tile, else one; there its
    words of s8 data interleaved by pairs (``word_pass``)."""
    if stage.residual:
        raise ValueError("a residual add is not fused into a depthwise convolution")
    if not fits(weight, stride):
        raise ValueError(f"sdot depthwise needs int8 weights and a horizontal stride of 1 or 2, got {weight.dtype} "
                         f"weights, stride {tuple(stride)}")
    c, kh, kw = weight.shape[0], weight.shape[2], weight.shape[3]
    cp = padded_channels(c)
    (oh, ow), (sy, sx) = out_hw, stride
    b, h, _, _ = x.shape
    offsets = 2 if sx == 1 else 1                  # byte offsets p a window starts at in its first word
    words_a_row = -(-(kw + offsets - 1) // WORD)
    groups = (sx * (ow - 1)) // 2 + 2 * (words_a_row - 1) + 1
    rows = h + pads[0] + pads[2]
    pairs = out_of_order and x.dtype == "int8"
    words = te.extern((b, rows, groups, cp, WORD), [x], word_pass(x, pads, pad_value, groups, cp, pairs),
                      name="words", dtype="int8")
    image = weight_words(weight, offsets, words_a_row, cp)
    w = te.placeholder(image.shape, "int8", name="weights")
    values = stage.channel_params(c, 1, 1)
    if x.dtype == "uint8":           # a = a' + 128: sum a w = sum a' w + 128 sum w
        values["bias"] = values["bias"] + (128 * weight.reshape(c, -1).sum(1, dtype=np.int32)).reshape(-1, 1)
    largest = np.abs(weight.reshape(c, -1).astype(np.int64)).sum(1) * (255 if x.dtype == "uint8" else 128)
    stage = bounded_forms(stage, values, (largest + np.abs(stage.channel_params(c, 1, 1)["bias"][:, 0])).reshape(-1, 1))
    columns = tile_columns(ow) if out_of_order else 1
    values["bias"] = np.tile(np.pad(values["bias"][:, 0], (0, cp - c)), (columns, 1))
    params = placeholders(values)
    start = te.compute((b, oh, ow, cp), lambda n, y, xx, ch: params["bias"][xx % columns, ch], name="start")
    ry, rq, rk = (te.reduce_axis((0, e), name) for e, name in ((kh, "ry"), (words_a_row, "rq"), (WORD, "rk")))
    acc = te.compute((b, oh, ow, cp), lambda n, y, xx, ch: te.sum(
        words[n, sy * y + ry, (sx * xx) // 2 + 2 * rq, ch, rk].astype("int32")
        * w[ry, (sx * xx) % 2, rq, ch, rk].astype("int32"), axis=[ry, rq, rk], init=start[n, y, xx, ch]), name="acc")
    started = replace(stage, bias_in_accumulator=True)
    out = te.compute((b, oh, ow, c), lambda n, y, xx, ch: started.expression(acc[n, y, xx, ch], params, ch, 0),
                     name="output")
    func = starting_from(te.create_prim_func([x, w, *params.values(), out]), "acc", "start")
    return _schedule(func, c), [image, *values.values()], (b, oh, ow, c)


def tile_columns(width: int) -> int:
    """The output columns of a register tile on a row of ``width``: the first of COLUMNS that divides it."""
    return next(cols for cols in COLUMNS if width % cols == 0)


def weight_words(weight: np.ndarray, offsets: int, words_a_row: int, channels: int) -> np.ndarray:
    """``[KH, offsets, words_a_row, channels, 4]`` s8: for a window starting at byte ``p`` of its first word,
    the weights each byte of its ``q``-th word meets (zero past the window and past the weight's channels)."""
    c, kh, kw = weight.shape[0], weight.shape[2], weight.shape[3]
    image = np.zeros((kh, offsets, words_a_row, channels, WORD), np.int8)
    for p in range(offsets):
        for q in range(words_a_row):
            for k in range(WORD):
                if 0 <= WORD * q + k - p < kw:
                    image[:, p, q, :c, k] = weight[:, 0, :, WORD * q + k - p].T
    return image


def word_pass(x: te.Tensor, pads, pad_value: int, groups: int, channels: int, pairs: bool):
    """The te.extern body writing the words of ``channels`` (``padded_channels``) straight from ``x`` (u8
    shifted to s8): no padded copy of the input. Per padded row, in parallel: a row of padding is the pad
    value's words; an input row's words are four pixel vectors interleaved, those
    at the row's ends choosing the pad value for a pixel outside it (a branch per pixel, its load clamped
    inside the row). The interleaving is one st4 (``pairs`` False) or, ``pairs``, two ``zip``s of pixel
    pairs and two st2 of their halfwords, the group's second pair the next group's first (two groups a
    step): on Cortex-A76's N1 model 3.5 cycles per 64 bytes of words against st4's 5.0, but on the
    in-order A55 and A53 more (llvm-mca: 11.0 against 8.0, 14.0 against 10.0), and on u8 data, whose
    shift takes the vector pipes too, no less (MobileNetV2's 15 depthwise layers on the A76, Mcycles:
    s8 2.755 against 2.900, u8 2.926 against 2.909). ``build`` takes pairs for s8 data on an
    out-of-order core."""
    b, h, w, c = (int(d) for d in x.shape)
    rows, vector = h + pads[0] + pads[2], PADDED if channels % PADDED == 0 else LANES
    unsigned = x.dtype == "uint8"
    pad = tirx.const(pad_value - 128 if unsigned else pad_value, "int8")      # shifted as the data
    first = min(groups, -(-pads[1] // 2))                 # the first group whose four pixels are all inside
    last = max(first, min(groups, (w + pads[1] - WORD) // 2 + 1))
    step = 2 if pairs else 1                              # groups a step inside the row
    middle = first + (last - first) // step * step

    def pixel(xs, n, i, col, c0: int, checked: bool):
        inside = tirx.all(col >= 0, col < w)
        col = tirx.max(tirx.min(col, w - 1), 0) if checked else col
        at, real = ((n * h + i) * w + col) * c, min(vector, c - c0 * vector)      # the pixel, its vector's channels
        if real == vector:
            v = xs[tirx.Ramp(at + c0 * vector, 1, vector)]
        elif c >= vector:    # the vector ending at the pixel's last channel, turned: no read past the input
            v = tirx.Shuffle([xs[tirx.Ramp(at + c - vector, 1, vector)]],
                             [(vector - real + lane) % vector for lane in range(vector)])
        else:                # fewer channels than a vector: its bytes one at a time
            v = tirx.Shuffle([xs[at + ch] for ch in range(c)] + [tirx.Broadcast(tirx.const(0, x.dtype), vector - c)],
                             list(range(vector)))
        if unsigned:
            v = tirx.reinterpret(f"int8x{vector}", v ^ tirx.Broadcast(tirx.const(0x80, "uint8"), vector))
        return tirx.if_then_else(inside, v, tirx.Broadcast(pad, vector)) if checked else v

    def interleaved(pixels):
        if not pairs:
            return tirx.Shuffle(pixels, [k * vector + ch for ch in range(vector) for k in range(WORD)])
        zipped = [k * vector + ch for ch in range(vector) for k in range(2)]
        halves = [tirx.reinterpret(f"int16x{vector}", tirx.Shuffle(pixels[q:q + 2], zipped)) for q in (0, 2)]
        return tirx.reinterpret(f"int8x{WORD * vector}", tirx.Shuffle(halves, zipped))

    def fcompute(ins, outs):
        with IRBuilder() as ib:
            with IB.parallel(0, b * rows) as row:
                xs = IB.decl_buffer((b * h * w * c,), x.dtype, data=ins[0].data)
                ws = IB.decl_buffer((b * rows * groups * channels * WORD,), "int8", data=outs[0].data)
                n, i = row // rows, row % rows - pads[0]

                def store(g, c0: int, value):
                    IB.buffer_store(ws, value, [tirx.Ramp(((row * groups + g) * channels + c0 * vector) * WORD, 1,
                                                          WORD * vector)])

                def words(gs, checked: bool):      # a vector of channels of every group in turn: pairs shared
                    for c0 in range(channels // vector):
                        for g in gs:
                            store(g, c0, interleaved([pixel(xs, n, i, 2 * g + k - pads[1], c0, checked)
                                                      for k in range(WORD)]))
                with IB.If(tirx.all(i >= 0, i < h)):
                    with IB.Then():
                        with IB.serial(0, (middle - first) // step) as s:
                            words([first + s * step + u for u in range(step)], False)
                        for lo, hi, checked in ((0, first, True), (middle, last, False), (last, groups, True)):
                            with IB.serial(lo, hi) as g:
                                words([g], checked)
                    with IB.Else():
                        with IB.serial(0, groups) as g:
                            for c0 in range(channels // vector):
                                store(g, c0, tirx.Broadcast(pad, WORD * vector))
        return ib.get()
    return fcompute


def _schedule(func, real: int):
    """The accumulators a register tile of COLUMNS x LANES over output rows in parallel, sdot tensorized,
    every tap unrolled, the output stage after each tile (the words are word_pass's, as written). Of the
    channels computed, the first ``real`` are the layer's: a tile holding the last of them and padding tests
    its channels, and where that test is not the same for all its lanes, TVM's vectorizer makes the whole
    loop scalar; a partition hint splits that tile off first (LoopPartition), so only it is scalar."""
    sch = s_tir.Schedule(func)
    acc = sch.get_sblock("acc")
    n, y, xx, ch, ry, rq, rk = sch.get_loops(acc)
    x0, x1 = sch.split(xx, [None, tile_columns(int(sch.get(xx).extent))])
    c0, c1, c2 = sch.split(ch, [None, LANES // 4, 4])
    sch.reorder(n, y, x0, c0, ry, rq, x1, c1, c2, rk)
    sch.parallel(sch.fuse(n, y))
    output = sch.get_sblock("output")
    sch.reverse_compute_at(output, c0)
    sch.vectorize(sch.get_loops(output)[-1])
    sch.compute_inline(sch.get_sblock("start"))
    init = sch.decompose_reduction(acc, ry)
    reads_of_body(sch, acc)
    reads_of_body(sch, init)
    sch.vectorize(sch.get_loops(init)[-1])
    sch.tensorize(sch.blockize(c2), _sdot())
    for loop in (ry, rq, x1, c1):
        sch.unroll(loop)
    if real % LANES:
        sch.annotate(c0, "pragma_loop_partition_hint", 1)
    return sch.mod


def _sdot() -> str:
    """The TensorIntrin of one sdot: four int32 lanes each adding four s8 products (registered once)."""
    @T.prim_func(s_tir=True)
    def desc(A: T.Buffer((4, 4), "int8", offset_factor=1), B: T.Buffer((4, 4), "int8", offset_factor=1),
             C: T.Buffer((4,), "int32", offset_factor=1)) -> None:
        with T.sblock("root"):
            T.reads(C[0:4], A[0:4, 0:4], B[0:4, 0:4])
            T.writes(C[0:4])
            for i, k in T.grid(4, 4):
                with T.sblock("update"):
                    vi, vk = T.axis.remap("SR", [i, k])
                    C[vi] = C[vi] + T.Cast("int32", A[vi, vk]) * T.Cast("int32", B[vi, vk])

    @T.prim_func(s_tir=True)
    def impl(A: T.Buffer((4, 4), "int8", offset_factor=1), B: T.Buffer((4, 4), "int8", offset_factor=1),
             C: T.Buffer((4,), "int32", offset_factor=1)) -> None:
        with T.sblock("root"):
            T.reads(C[0:4], A[0:4, 0:4], B[0:4, 0:4])
            T.writes(C[0:4])
            C[T.ramp(0, 1, 4)] = T.call_llvm_pure_intrin("int32x4", "llvm.aarch64.neon.sdot.v4i32.v16i8",
                                                         C[T.ramp(0, 1, 4)], A.vload([0, 0], "int8x16"),
                                                         B.vload([0, 0], "int8x16"))
    s_tir.TensorIntrin.register(SDOT, desc, impl, override=True)
    return SDOT
