"""int8 conv2d (NHWC) and dense for AArch64 on the proved NEON int8 tiles (kernels/neon_int8.py), with
the output stage fused (its requantize in AArch64's form: output_stage.OutputStage.aarch64); built for a
core (``mcpu``) and run under qemu-aarch64 (cross.py).

The GEMM is gemm.py's (per image: ``acc[p, n] = sum_k A[p, k] * W[n, k]``, A packed per row tile at
run time, the tile's K loop tensorized, the output stage after each (row tile, column tile)), in the
NEON tile's operand types:

* the activations enter the tile's A type with an offset ``s`` (u8 data on the s8 x s8 sdot tile and
  the s8 x s7 acc tile: ``s = -128``; s8 data on a u8 tile: ``s = +128``), and ``-s * sum_k w`` per
  column goes into the bias at compile time. Exact: with ``a' = a + s`` (the packing's shift, ``x ^
  0x80`` for s = -128, a' a byte of the tile's A type), ``sum_k a w = sum_k a' w - s sum_k w``, an
  identity of integers; the tile computes ``sum_k a' w`` modulo 2^32 and the bias the second term,
  so the accumulator is the true sum modulo 2^32, which is the sum itself while |sum| < 2^31 (K up to
  2^31 / 255 / 128 = 65793 bytes). On the s8 x s7 tile (v8.0 cores, ``tile_for``: every constant
  weight in [-127, 127]) a' is any s8 and w within the tile's proved domain: its B precondition is the
  weights' range, checked here, and A's is the whole s8 range;
* on the u8 x u8 acc tile (umull/uadalp) the weights enter as their u8 codes ``w + 128``: the GEMM
  written with ``w = code - 128`` is ``A codes - 128 sum_k a``; each packed row tile's sums are taken
  once (``row_sums``, before its column tiles) and the tile's K loop adds them in as it stores C
  (kernels/neon_int8.py: ``C += A B + R``); packed bytes whose weight code is 0 (K padding, a run's
  rounding) must then be 0 too;
* weights on a zero point (u8 weights of onnxruntime's U8U8 models, per tensor or per output channel:
  legalize.py gives them as the 9-bit ``w - zw`` in int16) enter as bytes ``b = w + z`` (``byte_weights``:
  one z where the tensor's values span at most 256, else one per output channel), so that ``sum_k a w
  = sum_k a b - z sum_k a``, as MLAS's QGEMM takes a B zero point. One z on the u8 x u8 tile: its R
  becomes ``-(128 + z) sum_k a``, at no cost. Else the accumulator starts from the packed rows' plain
  sums (``row_totals``) times each column's ``-z`` (``starting_from``); the bias's ``-s sum_k w`` counts
  the real k positions' ``b - z``;
* the accumulator starts from the bias (``starting_from``; the stage's ``bias_in_accumulator``): the
  same int32 sum modulo 2^32, and the tile's accumulators load it where they were zeroed, so the output
  stage adds nothing (one vector add in about seven per four outputs; Cortex-A76 N1 model, Mcycles:
  SqueezeNet's 55x55 1x1 16->64 0.300 -> 0.270, 3x3 16->64 1.135 -> 1.106, its stride-2 stem 1.78 -> 1.69);
* B is the tile's image: ``k/4`` rows of ``nr*4`` bytes (k4) or ``k/8`` (s8s7: ``k/16``) blocks of
  ``nr`` rows of k bytes (acc), zero beyond the real columns and k positions.

conv2d: im2col along window rows, as conv2d.py's one-group path: for each kh the ``kw*C`` bytes of a
window row are one run of the padded NHWC input, rounded up to whole K steps (the run's tail reads
the next pixels, whose weights are zero; on the u8 x u8 tile those bytes are packed as zero, see
above). Where that rounding wastes K steps (few channels: a 3x3 window on 3 channels packs 27 bytes
in 48), the window rows are packed back to back instead and K is rounded once (27 in 32), each row
one vector copy. Grouped convolutions: one GEMM per group, k = (kh, kw, the group's channels), as
conv2d.py's grouped path; where that K is rounded to the tile's K step (8 channels a group: 72 in 80),
each tap's channels are packed as one vector copy, the rounding repeating the last tap (its weights
zero), not byte by byte with the tap computed by division (RegNet-Y-400MF's 28x28x104 layer, 13 groups,
on Cortex-A76's N1 model: 5.20 -> 0.55 Mcycles). Depthwise convolutions take depthwise.py's vectorized
TIR (built for the core, with register tiles for NEON's register file: NEON_DEPTHWISE_TILES). A
residual add (output_stage.ResidualAdd) is fused as in gemm.py: the function then reads the residual
tensor, in the output's shape, after the stage's parameters (``op(x, residual)``). ``use_kernel=False`` (the plain-TIR baseline): conv2d.py's own plain-TIR schedule of the
same tile shape, built for the core.
"""
from __future__ import annotations

import dataclasses

import numpy as np
from tvm import s_tir, te, tirx

from tvm_integration.kernels import neon_int8
from tvm_integration.kernels.packing import round_up
from tvm_integration.ops import conv2d as conv2d_ops
from tvm_integration.ops import dense as dense_ops
from tvm_integration.ops import depthwise, depthwise_dot
from tvm_integration.ops.gemm import (
    Gemm,
    Tile,
    output_tensor,
    reads_of_body,
    run_pieces,
    starting_from,
    tensorize_tile,
)
from tvm_integration.ops.operator import Built
from tvm_integration.ops.output_stage import OutputStage, bounded_forms, placeholders
from tvm_integration.ops.padded_rows import input_bytes


# depthwise.py's register tiles (channels a vector, output columns) for NEON's 32 registers: at most 16
# int32 accumulators (4 columns x 16 channels), a vector of 8 channels where 7 columns are the choice
# (a 7- or 14-pixel row). MobileNetV2's depthwise layers on Cortex-A72, llvm-mca Mcycles, depthwise.py's
# default tiles (8 columns x 16 channels: 32 accumulators, spilled) against these: 112x112x32 2.72 / 1.72,
# stride 2 on 112x112x96 1.86 / 1.27, 14x14x384 0.44 / 0.35, 7x7x960 0.22 / 0.19.
NEON_DEPTHWISE_TILES = ((16, 4), (16, 2), (8, 7), (8, 4), (8, 2), (16, 1), (8, 1), (4, 4), (2, 4), (1, 4),
                        (4, 1), (2, 1), (1, 1))
PACK_VECTORS = (16, 8)          # the packing's copies: one NEON register, or half of one
# K blocks (3: three or more) -> the column tiles from which a k4 tile's K loop of that many blocks is kept
# rolled (neon_int8.rolled). Cortex-A76 N1 model, llvm-mca Mcycles, unrolled / rolled: 28x28 1x1 48->64 (3
# blocks) 0.172 / 0.174; 56x56 1x1 64->256 (4) 3.10 / 3.12; 28x28 1x1 96->128 (6) 0.518 / 0.501; SqueezeNet's
# 55x55 3x3 16->64 (9) 3.61 / 1.73. Two blocks, since the output stage takes fewer instructions (bias_copies,
# OutputStage.short), A76 / in-order A55: a 224x224 3x3 stride-2 stem on 3 channels to 16 (4 column tiles)
# 0.433 / 0.477 and 1.316 / 1.486, to 32 (8) 0.865 / 0.822 and 3.383 / 2.794, to 64 1.482 / 1.457 and 6.199 /
# 5.241; 56x56 1x1 24->144 (36) 0.759 / 0.739 and 3.138 / 2.812; 112x112 1x1 32->16 (4) 0.359 / 0.400.
ROLLED_FROM = {2: 8, 3: 3}


def conv2d(weight: np.ndarray, input_shape, stride=1, padding=0, groups: int = 1, data_dtype: str = "uint8",
           stage: OutputStage = OutputStage(), mcpu: str | None = None, family: str | None = None,
           use_kernel: bool = True, pad_value: int = 0):
    """A NHWC int8 conv2d compiled for AArch64 (``mcpu``'s tile, or ``family``'s), a cross.QemuOperator."""
    return build_conv2d(weight, input_shape, stride, padding, groups, data_dtype, stage, mcpu, family, use_kernel,
                        pad_value).compile()


def dense(weight: np.ndarray, m: int, data_dtype: str = "uint8", stage: OutputStage = OutputStage(),
          mcpu: str | None = None, family: str | None = None, use_kernel: bool = True):
    """An int8 dense ``[m, K] x [N, K]^T`` compiled for AArch64, a cross.QemuOperator."""
    return build_dense(weight, m, data_dtype, stage, mcpu, family, use_kernel).compile()


def build_conv2d(weight: np.ndarray, input_shape, stride=1, padding=0, groups: int = 1, data_dtype: str = "uint8",
                 stage: OutputStage = OutputStage(), mcpu: str | None = None, family: str | None = None,
                 use_kernel: bool = True, pad_value: int = 0) -> Built:
    """The scheduled conv2d (conv2d's arguments), not yet compiled; input NHWC, weights OIHW, int8 or
    9-bit in int16 (``byte_weights``)."""
    _check(weight, 4, data_dtype)
    stage = dataclasses.replace(stage, aarch64=True)     # its requantize in AArch64's cheaper form
    stride = conv2d_ops.pair(stride)
    (b, c, _, _), (oh, ow), pads = conv2d_ops.conv_geometry(input_shape, "NHWC", weight.shape, stride, padding)
    o, cg, kh, kw = weight.shape
    depthwise_conv = cg == 1 and o == groups and groups > 1
    if use_kernel and depthwise_conv:            # its TIR takes int16 weights as they are
        return _depthwise(weight, tuple(input_shape), stride, pads, (oh, ow), data_dtype, stage, mcpu, pad_value,
                          family or neon_int8.core_family(mcpu))
    bytes_, zero_points = byte_weights(weight)
    kernel = _tile(bytes_, mcpu, family)
    if not use_kernel or depthwise_conv:     # conv2d.py's plain TIR (baseline) or depthwise.py's, for the core
        plain = conv2d_ops.build_conv2d(weight, tuple(input_shape), "NHWC", stride, padding, groups, data_dtype, stage,
                                        use_kernel=False, pad_value=pad_value, kernel=_k4_shape(kernel))
        return dataclasses.replace(plain, target=neon_int8.neon_target(mcpu))
    if groups != 1:
        return _grouped(bytes_, zero_points, tuple(input_shape), stride, pads, (oh, ow), groups, data_dtype, stage,
                        mcpu, kernel, pad_value)
    tile = Tile.of(kernel)
    run = kw * c
    whole = round_up(kh * run, tile.k) < kh * round_up(run, tile.k)    # the whole window one run: fewer K steps
    step = run if whole else round_up(run, tile.k)
    rows_in, cols_in = (oh - 1) * stride[0] + kh, (ow - 1) * stride[1] + kw + -(-(step - run) // c)
    x = te.placeholder(tuple(input_shape), data_dtype, name="data")
    byte = input_bytes(x, pads, pad_value, rows_in, cols_in)

    def element(bi, g, p, k):
        i = tirx.min(k // step, kh - 1)         # the packing's K beyond the window repeats its last row (A 0 there)
        return byte(bi, p // ow * stride[0] + i, p % ow * stride[1] * c + k % step)
    rows = np.zeros((o, kh, step), np.int8)
    rows[:, :, :run] = bytes_.transpose(0, 2, 3, 1).reshape(o, kh, run)
    gemm = Gemm(b, 1, oh * ow, o, kh * step)
    mod, constants = build_gemm(gemm, x, element, rows.reshape(1, o, kh * step), zero_points[None], stage, kernel,
                                (kh, step), in_run=None if step == run else lambda k: k % step < run,
                                segment=step if whole else None, mcpu=mcpu)
    return Built(mod, constants, (b, oh * ow, 1, o), stage.out_dtype, tuple(input_shape), data_dtype, (b, oh, ow, o),
                 neon_int8.neon_target(mcpu, kernel))


def build_dense(weight: np.ndarray, m: int, data_dtype: str = "uint8", stage: OutputStage = OutputStage(),
                mcpu: str | None = None, family: str | None = None, use_kernel: bool = True) -> Built:
    """The scheduled dense layer (dense's arguments), not yet compiled; weights ``[N, K]``, int8 or 9-bit
    in int16 (``byte_weights``)."""
    _check(weight, 2, data_dtype)
    stage = dataclasses.replace(stage, aarch64=True)
    bytes_, zero_points = byte_weights(weight)
    kernel = _tile(bytes_, mcpu, family)
    if not use_kernel:
        plain = dense_ops.build_dense(weight, m, data_dtype, stage, use_kernel=False, kernel=_k4_shape(kernel))
        return dataclasses.replace(plain, target=neon_int8.neon_target(mcpu))
    n, k = weight.shape
    x = te.placeholder((m, k), data_dtype, name="data")
    mod, constants = build_gemm(Gemm(1, 1, m, n, k), x, lambda b, g, p, t: x[p, t], bytes_[None], zero_points[None],
                                stage, kernel, (), mcpu=mcpu)
    return Built(mod, constants, (1, m, 1, n), stage.out_dtype, (m, k), data_dtype, (m, n),
                 neon_int8.neon_target(mcpu, kernel))


def _grouped(weight: np.ndarray, zero_points: np.ndarray, input_shape, stride, pads, out_hw, groups: int,
             data_dtype: str, stage: OutputStage, mcpu, kernel, pad_value: int) -> Built:
    """A grouped (not depthwise) conv2d of byte weights on ``zero_points`` (one per output channel): one
    GEMM per group (conv2d.py's grouped path), k = (kh, kw, c of the group), each (kh, kw) a run of the
    group's contiguous channels, packed as one segment where K is rounded."""
    b, h, w_, c = input_shape
    o, cg, kh, kw = weight.shape
    if c % groups or o % groups or cg != c // groups:
        raise ValueError(f"weight {list(weight.shape)} does not fit {c} input channels in {groups} groups")
    (oh, ow), hp, wp = out_hw, h + pads[0] + pads[2], w_ + pads[1] + pads[3]
    x = te.placeholder(input_shape, data_dtype, name="data")
    byte = input_bytes(x, pads, pad_value, hp, wp)

    def element(bi, g, p, k):
        tap = tirx.min(k // cg, kh * kw - 1)      # the K steps' rounding repeats the last tap (A 0 there)
        return byte(bi, p // ow * stride[0] + tap // kw, (p % ow * stride[1] + tap % kw) * c + g * cg + k % cg)
    matrix = conv2d_ops.conv_weight_matrix(weight, groups)
    gemm = Gemm(b, groups, oh * ow, o // groups, matrix.shape[2])
    rounded = gemm.depth % Tile.of(kernel).k != 0
    mod, constants = build_gemm(gemm, x, element, matrix, zero_points.reshape(groups, -1), stage, kernel, (kh, kw, cg),
                                segment=cg if rounded else None, mcpu=mcpu)
    return Built(mod, constants, (b, oh * ow, groups, o // groups), stage.out_dtype, input_shape, data_dtype,
                 (b, oh, ow, o), neon_int8.neon_target(mcpu, kernel))


def _depthwise(weight: np.ndarray, input_shape, stride, pads, out_hw, data_dtype: str, stage: OutputStage, mcpu,
               pad_value: int, family: str) -> Built:
    """On a core with sdot (``family`` dotprod or i8mm), byte weights at a horizontal stride of 1 or 2
    take depthwise_dot.py's sdot form; else depthwise.py's vectorized TIR with
    NEON_DEPTHWISE_TILES, built for the core, where weights in [-127, 127] (onnxruntime's symmetric
    quantization) on channels in 8s take its tap pairs, summed in int16."""
    x = te.placeholder(input_shape, data_dtype, name="data")
    if family in ("dotprod", "i8mm") and depthwise_dot.fits(weight, stride):
        mod, constants, out_shape = depthwise_dot.build(x, weight, stride, pads, out_hw, stage, pad_value,
                                                        out_of_order=neon_int8.out_of_order(mcpu))
    else:
        mod, constants, out_shape = depthwise.build(x, "NHWC", weight, stride, pads, out_hw, stage, pad_value,
                                                    NEON_DEPTHWISE_TILES,
                                                    pairs=depthwise.tap_pairs_fit("NHWC", weight))
    return Built(mod, constants, out_shape, stage.out_dtype, input_shape, data_dtype, out_shape,
                 neon_int8.neon_target(mcpu))


def _check(weight: np.ndarray, ndim: int, data_dtype: str) -> None:
    if weight.dtype not in (np.int8, np.int16) or weight.ndim != ndim:
        raise ValueError(f"weight must be int8 or int16 with {ndim} dimensions, got {weight.dtype}{list(weight.shape)}")
    if data_dtype not in ("uint8", "int8"):
        raise ValueError(f"data_dtype must be uint8 or int8, got {data_dtype!r}")


def byte_weights(weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(b, z)``: integer weights as s8 bytes ``b = w + z`` on zero points ``z`` (one per output
    channel, axis 0), the tiles' B. One z for the tensor where its values span at most 256 (a U8U8
    model's per-tensor ``w - zw``: z = zw - 128), else one per channel; the z nearest 0, with the bytes
    in [-127, 127] (the s8 x s7 tile's domain) where they fit: 0 where the weights are bytes."""
    flat = weight.reshape(weight.shape[0], -1).astype(np.int64)
    lo, hi = (flat.min(axis=1, initial=0), flat.max(axis=1, initial=0))
    if int(hi.max() - lo.min()) <= 255:
        lo, hi = np.full_like(lo, lo.min()), np.full_like(hi, hi.max())
    if np.any(hi - lo > 255):
        channel = int(np.argmax(hi - lo))
        raise ValueError(f"weights of output channel {channel} span [{lo[channel]}, {hi[channel]}]: more than the "
                         "256 values of a byte on a zero point")
    zero_points = np.clip(0, np.where(hi - lo < 255, -127, -128) - lo, 127 - hi)
    return (flat + zero_points[:, None]).astype(np.int8).reshape(weight.shape), zero_points


def _tile(weight: np.ndarray, mcpu: str | None, family: str | None):
    """The core's (or ``family``'s) tile for these weights; the s8 x s7 tile only for weights it is proved on."""
    kernel = neon_int8.tile_for(mcpu, family, weight)
    if kernel.spec.types == "s8s7" and not neon_int8.symmetric(weight):
        raise ValueError(f"a weight of -128 is outside the {kernel.intrin.removeprefix('qsynth_')} tile's domain "
                         "(weights in [-127, 127]); use family v8")
    return kernel


def _k4_shape(kernel):
    """A k4 NEON kernel of the tile's shape for conv2d.py's plain TIR (only its shape is used)."""
    return neon_int8.tile_for(family="dotprod") if kernel.spec.layout == "acc" else kernel


def build_gemm(gemm: Gemm, data: te.Tensor, element, weights: np.ndarray, zero_points: np.ndarray,
               stage: OutputStage, kernel, depth_loops: tuple[int, ...], in_run=None, segment: int | None = None,
               mcpu: str | None = None):
    """``(mod, constants)`` of ``main(data, weights, *stage params, out)``, or ``main(data, weights,
    *stage params, residual, out)`` when the stage adds a residual (in the output's shape, as
    gemm.py's); out ``[b, rows, groups, cols]``; ``weights`` int8 ``[groups, cols, depth]`` on
    ``zero_points`` ``[groups, cols]`` (``byte_weights``); ``in_run(k)`` (Python or TIR): whether k is a
    weight rather than a run's rounding (zero weights), None: every k is. Where A's row sums are taken
    (a tile of unsigned weight codes, w + 128, the offset taken off through them; a zero point) they
    would count A at a rounding position, so A is zero there after its own shift. ``segment``: the
    packing copies each row's K as whole runs of this many k (the whole-window packing's window rows,
    one vector each), each packed row rounded up to whole runs (A zero beyond the depth). ``mcpu``: the
    core, which decides the bias's copies the accumulators start from (neon_int8.bias_copies: row p's is
    ``p % copies``)."""
    family = neon_int8.family_of(kernel)
    shift, unsigned_w = neon_int8.offsets(family)
    one_zero_point = int(zero_points.min()) == int(zero_points.max())
    in_tile = unsigned_w and one_zero_point           # R = -(128 + z) sum_k a
    in_start = not in_tile and bool(np.any(zero_points))        # -z sum_k a: the accumulator's initial value
    signed = data.dtype == "int8"
    a_dtype, b_dtype = kernel.a_dtype, kernel.b_dtype
    if signed:                           # s8 data: onto a u8 A (+128), or as it is onto an s8 A
        shift = 128 if a_dtype == "uint8" else 0
    tile, grp = Tile.of(kernel), neon_int8.group(kernel)
    pp, npad, kp = gemm.padded(tile)
    a_shifted = lambda v: (v.astype("int32") + shift).astype(a_dtype) if shift else v.astype(a_dtype)

    def a_value(b, g, p, k):
        inside = tirx.all(p < gemm.rows, k < gemm.depth, *([in_run(k)] if in_run and (unsigned_w or in_start) else []))
        return tirx.if_then_else(inside, a_shifted(element(b, g, p, k)), tirx.const(0, a_dtype))
    groups = gemm.groups
    kpack = round_up(kp, segment) if segment else kp
    packed = te.compute((gemm.batch, groups, pp // tile.mr, tile.mr, kpack),
                        lambda b, g, p0, p1, kk: a_value(b, g, p0 * tile.mr + p1, kk), name="pack")
    w = te.placeholder((groups, npad // tile.nr, kp // grp, tile.nr, grp), b_dtype, name="weights")
    k = te.reduce_axis((0, kp), name="k")

    def row_sums(name: str, factor: int):
        """Each packed row's sum times ``factor``, taken once per row tile (schedule_tiles)."""
        t = te.reduce_axis((0, kp), name="t")
        return te.compute((gemm.batch, groups, pp // tile.mr, tile.mr), lambda b, g, p0, p1: te.sum(
            packed[b, g, p0, p1, t].astype("int32") * factor, axis=t), name=name)

    cols = gemm.cols
    values = stage.channel_params(groups, cols, npad)
    real = np.array([bool(in_run(k)) if in_run else True for k in range(gemm.depth)])
    weight_sums = weights.astype(np.int64).sum(axis=2) - zero_points * int(real.sum())     # sum_k (b - z)
    values["bias"] = values["bias"] + np.pad((-shift * weight_sums).astype(np.int32), ((0, 0), (0, npad - cols)))
    if in_start:
        values["minus_zero_points"] = np.pad(-zero_points.astype(np.int32), ((0, 0), (0, npad - cols)))
    sizes = np.abs(weights.astype(np.int64) - zero_points[..., None]) * real
    largest = sizes.sum(axis=2) * (128 if signed else 255) + np.abs(stage.channel_params(groups, cols, cols)["bias"])
    stage = bounded_forms(stage, values, np.pad(largest, ((0, 0), (0, npad - cols))))
    copies = neon_int8.bias_copies(mcpu, kernel)
    values["bias"] = np.repeat(values["bias"][:, None, :], copies, axis=1)
    params = placeholders(values)
    row_term, start_term = (lambda b, g, p, k: 0), (lambda b, g, p, n: 0)
    if unsigned_w:                       # A w = A codes - (128 + z) sum_k A: the second term enters at k = 0
        sums = row_sums("row_sums", -(neon_int8.WEIGHT_SHIFT + (int(zero_points.flat[0]) if in_tile else 0)))
        row_term = lambda b, g, p, k: tirx.if_then_else(k == 0, sums[b, g, p // tile.mr, p % tile.mr], 0)
    if in_start:                       # - z sum_k A, in the accumulator's initial value (the tile's C reads it)
        totals = row_sums("row_totals", 1)           # a plain sum: LLVM vectorizes it (times -1 it did not)
        start_term = lambda b, g, p, n: totals[b, g, p // tile.mr, p % tile.mr] * params["minus_zero_points"][g, n]
    start = te.compute((gemm.batch, groups, pp, npad), lambda b, g, p, n: params["bias"][g, p % copies, n]
                       + start_term(b, g, p, n), name="start")
    acc = te.compute((gemm.batch, groups, pp, npad), lambda b, g, p, n: te.sum(
        packed[b, g, p // tile.mr, p % tile.mr, k].astype("int32")
        * w[g, n // tile.nr, k // grp, n % tile.nr, k % grp].astype("int32") + row_term(b, g, p, k), axis=k,
        init=start[b, g, p, n]), name="gemm")
    started = dataclasses.replace(stage, bias_in_accumulator=True)
    out, residual = output_tensor((gemm.batch, gemm.rows, groups, cols), started, params,
                                  lambda b, p, g, n: (acc[b, g, p, n], g, n))
    func = te.create_prim_func([data, w, *params.values(), *([residual] if residual is not None else []), out])
    func = starting_from(func, "gemm", "start")
    codes = weights.astype(np.int16) + neon_int8.WEIGHT_SHIFT * real[None, None, :] if unsigned_w else weights
    constants = [pack(codes.astype(b_dtype), tile.nr, tile.k, grp), *values.values()]
    loops = (kpack // segment, segment) if segment else depth_loops if kp == gemm.depth else ()
    return schedule_tiles(func, tile, kernel, loops), constants


def pack(w: np.ndarray, nr: int, k_multiple: int, grp: int) -> np.ndarray:
    """``w[g, n, k]`` -> ``[g, Np/nr, Kp/grp, nr, grp]`` (the tile's B image), zero-padded."""
    g, n, k = w.shape
    np_, kp = round_up(n, nr), round_up(k, k_multiple)
    padded = np.zeros((g, np_, kp), dtype=w.dtype)
    padded[:, :n, :k] = w
    return np.ascontiguousarray(padded.reshape(g, np_ // nr, nr, kp // grp, grp).transpose(0, 1, 3, 2, 4))


def schedule_tiles(func, tile: Tile, kernel, depth_loops: tuple[int, ...]):
    """Loops ``(b, p0) | n0 | p1 n1 k``: the outer loop parallel, the packing (and the packed rows'
    sums) per row tile before its column tiles, the inner three one call of the tile's K loop, the
    output stage after each column tile, or with an even number of them after each pair (the pair's two
    K loops unrolled, then one output stage of its 2 nr columns, which LLVM schedules as one; MobileNetV2's
    1x1 layers, llvm-mca Mcycles one tile / pairs: 112x112x16->96 5.27 / 4.89 on Cortex-A72, 11.0 / 8.4
    on Cortex-A53; 7x7x320->1280 3.58 / 2.92 and 6.97 / 6.28). The padded input is padded_rows.py's pass
    (none where nothing is padded), before them. The column tiles' loop is partitioned
    (``pragma_loop_partition_hint``) so that a remainder's bound test (58 columns: 14 tiles and 2) leaves
    the whole tiles' output stage vectorized; with the test in every tile it was scalar (ShuffleNetV2's 1x1
    56x56 24->58 on the A76 1.52 -> 0.69 Mcycles, 28x28 58->58 0.50 -> 0.29). The row
    tiles' loop is partitioned the same way: with a bound test on each row of every tile (rows not a multiple
    of 4: all of SqueezeNet's layers) each row's output stage was a block of its own, one dependency chain,
    and the packing tested every row; now only the last tile tests (Cortex-A76 N1 model, Mcycles: SqueezeNet's
    55x55 3x3 16->64 1.54 -> 1.13, its 3x3 stride-2 stem 2.30 -> 1.78; the model 19.9 -> 16.6). That loop
    sits inside a loop of one iteration (``scope``) holding the tile's IR import (a pragma, so a scope of
    its own for TVM's StorageRewrite): the remainder tile, outside the parallel loop, would otherwise have
    its buffers merged into the padded input's, of another type, which TVM 0.27's access pointers reject."""
    sch = s_tir.Schedule(func)
    stages = {sch.get(b).name_hint for b in sch.get_child_blocks(sch.get_sblock("root"))}
    block = sch.get_sblock("gemm")
    b, g, p, n, k = sch.get_loops(block)
    p0, p1 = sch.split(p, [None, tile.mr])
    n0, n1 = sch.split(n, [None, tile.nr])
    sch.reorder(b, g, p0, n0, p1, n1, k)
    pair, columns = None, int(sch.get(n0).extent)
    blocks = int(sch.get(k).extent) // tile.k
    if blocks >= 2 and columns >= ROLLED_FROM[min(blocks, 3)] and not isinstance(kernel, neon_int8.AccTile):
        kernel = neon_int8.rolled(kernel)
    if columns % 2 == 0:     # column tiles in pairs: two K loops, one output stage of both
        n0, pair = sch.split(n0, [None, 2])
    outer = sch.fuse(b, g, p0)
    scope = sch.add_unit_loop(outer)
    sch.parallel(outer)
    sch.annotate(outer, "pragma_loop_partition_hint", 1)      # whole row tiles apart from a remainder
    if "start" in stages:                # the accumulator's initial values (starting_from), computed where set
        sch.compute_inline(sch.get_sblock("start"))
    for sums in ("row_sums", "row_totals"):
        if sums in stages:
            sch.compute_at(sch.get_sblock(sums), outer)
    output = sch.get_sblock("output")
    sch.reverse_compute_at(output, n0)
    sch.annotate(n0, "pragma_loop_partition_hint", 1)      # whole column tiles apart from a remainder
    sch.vectorize(sch.get_loops(output)[-1])
    pack = sch.get_sblock("pack")
    sch.compute_at(pack, outer)
    depth = sch.get_loops(pack)[-1]
    runs = depth_loops if len(depth_loops) > 1 else (None, tile.k)
    sch.vectorize(sch.split(depth, list(runs[:-1]) + run_pieces(runs[-1], PACK_VECTORS))[-1])
    init = sch.decompose_reduction(block, p1)
    if "start" in stages:
        reads_of_body(sch, block)
        reads_of_body(sch, init)
    tensorize_tile(sch, scope, p1, kernel.loop_intrin(int(sch.get(k).extent) // tile.k), kernel)
    sch.vectorize(sch.get_loops(init)[-1])
    if pair is not None:
        sch.unroll(pair)
    return sch.mod
