"""NEON int8 operators (issue 34 step 1): conv2d (NHWC: 1x1, 3x3, the 7x7 stride-2 stem, stride 1 and 2,
padding with a zero point, depthwise) and dense on the cache's proved NEON int8 tiles, built for
AArch64 and run under qemu-aarch64 (tvm_integration/qemu/cross.py; marked ``qemu``), bit-exact against
numpy with the output stage fused: every tile family (v8.0 umull/uadalp acc tile, its smull/smlal2/
sadalp form for weights in [-127, 127], dotprod sdot, i8mm sudot), u8 inputs of 128 and more, s8
inputs, tile remainders in rows, columns and K, and requantize ties (a scale 2^-j, accumulators at
2^(j-1) mod 2^j, rounded half to even); the fused residual add (onnxruntime's QLinearAdd) and grouped
convolutions (8 channels a group packed a tap a vector); a 3-channel stem's whole window packed as one run;
K loops of few blocks under many column tiles taking A by element; the depthwise register tiles for NEON;
the AArch64 form of the requantize at its edges (ties at the bounds, values beyond int16 and int32).
qemu's ``-cpu max`` runs every family, whichever core the operator is built for."""
import dataclasses
import re

import numpy as np
import pytest

from conftest import HOST_RUNS, skip_if
from tvm_integration.bench import mca
from tvm_integration.bench.neon_int8_layers import costed
from tvm_integration.kernels import neon_int8
from tvm_integration.kernels.selection import SelectionError
from tvm_integration.ops import neon_gemm as ops
from tvm_integration.ops.output_stage import OutputStage, ResidualAdd, ScaleRequantize
from tvm_integration.qnn.semantics.arithmetic import fma32

qemu = [pytest.mark.qemu, skip_if(HOST_RUNS.qemu)]


def conv_reference(x, w, stride, pad, pad_value=0, groups=1):
    """int32 NHWC conv2d of integer x (NHWC) and OIHW w, the padding (one for all sides, or top, left, bottom,
    right) holding ``pad_value``."""
    _, h, wd, _ = x.shape
    o, cg, kh, kw = w.shape
    top, left, bottom, right = (pad,) * 4 if np.isscalar(pad) else pad
    xp = np.pad(x.astype(np.int64), ((0, 0), (top, bottom), (left, right), (0, 0)), constant_values=pad_value)
    oh, ow = (h + top + bottom - kh) // stride + 1, (wd + left + right - kw) // stride + 1
    acc = np.zeros((x.shape[0], oh, ow, o), np.int64)
    per = o // groups
    for g in range(groups):
        for i in range(kh):
            for j in range(kw):
                window = xp[:, i:i + stride * oh:stride, j:j + stride * ow:stride, g * cg:(g + 1) * cg]
                acc[..., g * per:(g + 1) * per] += window @ w[g * per:(g + 1) * per, :, i, j].astype(np.int64).T
    return acc.astype(np.int32)


def requantized(acc, bias, scale, zero_point):
    """onnxruntime's requantize: float32(acc + bias) * scale, half to even, + zero point, to u8."""
    return np.clip(np.rint((acc + bias).astype(np.float32) * np.float32(scale)) + zero_point, 0, 255).astype(np.uint8)


def weights(rng, shape, family):
    """Random int8 weights with both extremes of the family's domain (v8s7: [-127, 127]) present."""
    lo = -127 if family == "v8s7" else -128
    w = rng.integers(lo, 128, shape).astype(np.int8)
    w.flat[:2] = (lo, 127)
    return w


def data(rng, shape, dtype):
    """Random values over the whole range, with the extremes (0 and 255, -128 and 127) present."""
    x = rng.integers(0, 256, shape)
    x.flat[:2] = (0, 255)
    return (x - (128 if dtype == "int8" else 0)).astype(dtype)


# family, dtype, (H, W, C), (O, KH, KW), stride, padding, pad value, requantize
CONVS = [
    ("v8", "uint8", (9, 10, 8), (12, 3, 3), 1, 1, 0, True),        # 90 rows, 12 columns: remainders; ties
    ("v8", "int8", (8, 8, 16), (20, 1, 1), 2, 0, 0, False),        # 1x1 stride 2, s8 input
    ("v8", "uint8", (15, 15, 3), (8, 7, 7), 2, 3, 7, True),        # the stem: 21-byte runs in 24; zero point 7
    ("v8", "int8", (15, 15, 3), (8, 7, 7), 2, 3, 7, False),        # s8 stem: the rounding bytes zero after +128
    ("v8s7", "uint8", (9, 10, 8), (12, 3, 3), 1, 1, 0, True),      # 24-byte runs in 32: K rounding; ties
    ("v8s7", "int8", (8, 8, 16), (20, 1, 1), 2, 0, 0, False),      # 1x1 stride 2, s8 input
    ("v8s7", "uint8", (15, 15, 3), (8, 7, 7), 2, 3, 7, True),      # the stem: 21-byte runs in 32; zero point 7
    ("dotprod", "uint8", (11, 9, 24), (6, 3, 3), 2, 1, 128, True),  # stride 2; K 216 of 16-byte blocks
    ("dotprod", "uint8", (15, 15, 3), (16, 7, 7), 2, 3, 0, False),  # the stem on sdot
    ("i8mm", "uint8", (6, 7, 32), (12, 3, 3), 1, 1, 0, True),
    ("i8mm", "int8", (7, 7, 40), (8, 1, 1), 1, 0, 0, False),
    ("dotprod", "int8", (14, 14, 3), (8, 3, 3), 2, (0, 0, 1, 1), 125, True),    # TFLite's SAME stem: pad after
    ("dotprod", "uint8", (9, 11, 8), (6, 3, 3), 1, (2, 1, 0, 1), 200, False),  # rows/columns of 8 and 3 bytes
    ("dotprod", "uint8", (8, 9, 16), (8, 2, 2), 2, 0, 0, True),     # no padding: the packing reads the input
]


@pytest.mark.parametrize("family, dtype, hwc, okk, stride, pad, pad_value, requantize", [
    pytest.param(*case, marks=qemu, id=f"{case[0]}-{case[1]}-{case[3][1]}x{case[3][2]}s{case[4]}") for case in CONVS])
def test_conv2d_matches_numpy(family, dtype, hwc, okk, stride, pad, pad_value, requantize):
    rng = np.random.default_rng(34)
    x = data(rng, (1, *hwc), dtype)
    o, kh, kw = okk
    w = weights(rng, (o, hwc[2], kh, kw), family)
    bias = rng.integers(-5000, 5000, o).astype(np.int32)
    if dtype == "int8":
        pad_value -= 128 if pad_value >= 128 else 0
    acc = conv_reference(x, w, stride, pad, pad_value)
    if requantize:      # scale 2^-j, the first pixel's acc + bias at a tie (2^(j-1) mod 2^j) in every channel
        j = int(np.ceil(np.log2(acc.std() / 64)))
        bias = (bias + (2 ** (j - 1) - acc[0, 0, 0] - bias) % 2 ** j).astype(np.int32)
        assert ((acc + bias) % 2 ** j == 2 ** (j - 1)).sum() >= o
        stage = OutputStage(bias=bias, requantize=ScaleRequantize(np.float32(2.0 ** -j), 128, "uint8"))
        expected = requantized(acc, bias, 2.0 ** -j, 128)
        assert ((expected == 255) | (expected == 0)).mean() < 0.5                # mostly not saturated
    else:
        stage, expected = OutputStage(bias=bias), acc + bias
    op = ops.conv2d(w, x.shape, stride, pad, data_dtype=dtype, stage=stage, family=family, pad_value=pad_value)
    np.testing.assert_array_equal(op(x), expected)


@pytest.mark.parametrize("dtype, pads", [pytest.param("uint8", (1, 1, 1, 1), marks=qemu, id="u8-both"),
                                         pytest.param("int8", (0, 2, 1, 0), marks=qemu, id="s8-asymmetric"),
                                         pytest.param("uint8", (0, 0, 0, 0), marks=qemu, id="u8-none")])
def test_grouped_conv2d_matches_numpy(dtype, pads):
    """A grouped conv2d (3 groups of 8 channels, RegNet's form) on the sdot tile, its padded input written by
    padded_rows.py's pass: padding on both sides or on two, the padding holding a value of its own; with no
    padding the packing reads the input itself (padded_rows.input_bytes)."""
    rng = np.random.default_rng(36)
    x = data(rng, (1, 9, 10, 24), dtype)
    w = weights(rng, (12, 8, 3, 3), "dotprod")
    bias = rng.integers(-5000, 5000, 12).astype(np.int32)
    pad_value = 77 if dtype == "uint8" else -77
    op = ops.conv2d(w, x.shape, 2, pads, groups=3, data_dtype=dtype, stage=OutputStage(bias=bias), mcpu="cortex-a76",
                    pad_value=pad_value)
    np.testing.assert_array_equal(op(x), conv_reference(x, w, 2, pads, pad_value, groups=3) + bias)


@pytest.mark.parametrize("family, dtype, pad_value", [pytest.param(*case, marks=qemu, id=f"{case[0]}-{case[1]}")
                                                      for case in (("v8", "uint8", 9), ("v8s7", "int8", -5))])
def test_small_channel_window_packs_whole(family, dtype, pad_value):
    """A 3x3 stride-2 stem on 3 channels (odd 13x11 input, padding 1): its whole 27-byte window is one run
    of K, rounded once to the tile's K step (32), not each 9-byte window row to a step (48); on the u8 x u8
    tile the 5 rounding bytes are zero in A (its row sums count them)."""
    rng = np.random.default_rng(39)
    x = data(rng, (1, 13, 11, 3), dtype)
    w = weights(rng, (8, 3, 3, 3), family)
    bias = rng.integers(-5000, 5000, 8).astype(np.int32)
    built = ops.build_conv2d(w, x.shape, 2, 1, data_dtype=dtype, stage=OutputStage(bias=bias), family=family,
                             pad_value=pad_value)
    blocks, group = built.constants[0].shape[2], built.constants[0].shape[4]
    assert blocks * group == 32
    np.testing.assert_array_equal(built.compile()(x), conv_reference(x, w, 2, 1, pad_value) + bias)


@pytest.mark.parametrize("family, dtype", [pytest.param(f, d, marks=qemu, id=f"{f}-{d}")
                                           for f, d in (("v8", "uint8"), ("v8s7", "uint8"), ("dotprod", "int8"),
                                                        ("i8mm", "uint8"))])
def test_dense_matches_numpy(family, dtype):
    """m = 3 rows (one partial row tile), N = 10 (a partial column tile), K = 37 (partial K block)."""
    rng = np.random.default_rng(35)
    x = data(rng, (3, 37), dtype)
    w = weights(rng, (10, 37), family)
    bias = rng.integers(-5000, 5000, 10).astype(np.int32)
    op = ops.dense(w, 3, dtype, OutputStage(bias=bias), family=family)
    np.testing.assert_array_equal(op(x), x.astype(np.int64) @ w.astype(np.int64).T + bias)


@pytest.mark.qemu
@skip_if(HOST_RUNS.qemu)
@pytest.mark.parametrize("stride", [1, 2])
def test_depthwise_and_plain_baseline_for_the_core(stride):
    """Depthwise 3x3 (vectorized TIR) and the plain-TIR baseline of an ordinary conv, built for Cortex-A53."""
    rng = np.random.default_rng(36)
    x = data(rng, (1, 9, 9, 16), "uint8")
    w = rng.integers(-128, 128, (16, 1, 3, 3)).astype(np.int8)
    op = ops.conv2d(w, x.shape, stride, 1, groups=16, mcpu="cortex-a53", pad_value=3)
    np.testing.assert_array_equal(op(x), conv_reference(x, w, stride, 1, 3, groups=16))
    if stride == 1:
        w = rng.integers(-128, 128, (12, 16, 3, 3)).astype(np.int8)
        plain = ops.conv2d(w, x.shape, 1, 1, mcpu="cortex-a53", use_kernel=False)
        assert "umull" not in plain.assembly or "uadalp" not in plain.assembly
        np.testing.assert_array_equal(plain(x), conv_reference(x, w, 1, 1))


@pytest.mark.parametrize("hwc, stride, dtype", [pytest.param(*case, marks=qemu, id=f"{case[0][0]}x{case[0][2]}s{case[1]}")
                                                for case in (((8, 8, 32), 1, "uint8"), ((13, 13, 24), 2, "int8"))])
def test_depthwise_register_tiles(hwc, stride, dtype):
    """NEON_DEPTHWISE_TILES' two main shapes, requantized: 4 columns x 16 channels (a row of 8), and 7
    columns x 8 channels (24 channels, a row of 7 at stride 2 with padding)."""
    rng = np.random.default_rng(40)
    x = data(rng, (1, *hwc), dtype)
    c = hwc[2]
    w = rng.integers(-128, 128, (c, 1, 3, 3)).astype(np.int8)
    bias = rng.integers(-3000, 3000, c).astype(np.int32)
    scale = rng.uniform(2e-3, 8e-3, c).astype(np.float32)
    pad_value = -7 if dtype == "int8" else 5
    stage = OutputStage(bias=bias, requantize=ScaleRequantize(scale, 120, "uint8"))
    op = ops.conv2d(w, x.shape, stride, 1, groups=c, data_dtype=dtype, stage=stage, mcpu="cortex-a72",
                    pad_value=pad_value)
    expected = requantized(conv_reference(x, w, stride, 1, pad_value, groups=c), bias, scale, 120)
    assert ((expected == 0) | (expected == 255)).mean() < 0.5
    np.testing.assert_array_equal(op(x), expected)


def depthwise_at_extremes(seed, hwc, k, stride, dtype, lowest, mcpu, scales):
    """A requantized depthwise layer built for ``mcpu`` at its sums' extremes (a corner of the data's least
    values, another of its largest, the weights ``lowest`` on 4 channels and 127 on 4 more), the padding
    holding a value of its own: ``(operator, x, int32 reference accumulator, expected output)``."""
    rng = np.random.default_rng(seed)
    x = data(rng, (1, *hwc), dtype)
    c = hwc[2]
    w = rng.integers(lowest, 128, (c, 1, k, k)).astype(np.int8)
    w[:4], w[4:8] = lowest, 127
    x[0, :k, :k], x[0, -k:, -k:] = x.min(), x.max()
    bias = rng.integers(-3000, 3000, c).astype(np.int32)
    scale = rng.uniform(*scales, c).astype(np.float32)
    pad_value = -7 if dtype == "int8" else 5
    stage = OutputStage(bias=bias, requantize=ScaleRequantize(scale, 120, "uint8"))
    op = ops.conv2d(w, x.shape, stride, k // 2, groups=c, data_dtype=dtype, stage=stage, mcpu=mcpu,
                    pad_value=pad_value)
    acc = conv_reference(x, w, stride, k // 2, pad_value, groups=c)
    expected = requantized(acc, bias, scale, 120)
    assert ((expected == 0) | (expected == 255)).mean() < 0.5
    return op, x, acc, expected


@pytest.mark.parametrize("hwc, k, stride, dtype", [
    pytest.param(*case, marks=qemu, id=f"{case[0][0]}x{case[0][2]}k{case[1]}s{case[2]}")
    for case in (((9, 16, 24), 3, 1, "uint8"), ((8, 8, 8), 3, 1, "int8"), ((11, 9, 16), 5, 2, "uint8"),
                 ((56, 56, 72), 5, 2, "uint8"), ((56, 56, 64), 5, 2, "uint8"), ((40, 40, 72), 5, 2, "uint8"),
                 ((9, 16, 20), 3, 1, "uint8"), ((11, 9, 58), 5, 2, "int8"), ((8, 7, 3), 3, 2, "uint8"))])
def test_depthwise_tap_pairs(hwc, k, stride, dtype):
    """Weights in [-127, 127] take the tap pairs (depthwise.py: two s8 products summed in int16 by smull
    and smlal, u8 data shifted by -128; at stride 1 a pass writes the padded input first, at stride 2 the
    window reads it speculatively): exact at the int16 sums' extremes (a corner of 0s or -128s under
    weights of -127, and of 255s or 127s under 127), with an odd number of taps (9, 25), the padding's
    value, requantized; channels not in 8s computed in 8s (20, ShuffleNetV2's 58 and 3: a last tile of 4, 2
    and 3 real channels, the pass writing the padded input at stride 2 too). 56x56x72 at 5x5 stride 2: the
    window's last row one past the input's, whose read lost its clamp and ran past the driver's mapping (a
    segfault; 56x56x64 and 40x40x72 read past it too, inside mapped memory)."""
    op, x, acc, expected = depthwise_at_extremes(41, hwc, k, stride, dtype, -127, "cortex-a72", (2e-4, 8e-4))
    assert "smull" in op.assembly and "smlal" in op.assembly
    assert np.abs(acc).max() > 2**15                  # past int16: the pairs' sums are widened in time
    np.testing.assert_array_equal(op(x), expected)


@pytest.mark.parametrize("hwc, k, stride, dtype", [
    pytest.param(*case, marks=qemu, id=f"{case[0][0]}x{case[0][1]}x{case[0][2]}k{case[1]}s{case[2]}")
    for case in (((9, 16, 32), 3, 1, "uint8"), ((8, 7, 8), 3, 1, "int8"), ((13, 13, 24), 3, 2, "uint8"),
                 ((11, 9, 16), 5, 2, "int8"), ((9, 10, 8), 7, 1, "uint8"), ((14, 14, 12), 3, 1, "uint8"),
                 ((9, 11, 58), 3, 1, "uint8"), ((10, 9, 20), 5, 2, "int8"), ((7, 8, 3), 3, 2, "uint8"))])
def test_depthwise_sdot(hwc, k, stride, dtype):
    """On a core with sdot (Cortex-A76), byte weights take depthwise_dot.py's words of four horizontal
    neighbours: both strides, 3x3 to 7x7 windows (one and two words a window row), rows of 7 to 16
    columns, 8 to 32 channels, and channels not in 8s computed in 16s (12, ShuffleNetV2's 58, 20, 3: a
    last tile of 4, 2, 4 and 3 real channels), weights of -128 and 127 (outside the tap pairs' domain)
    under corners of the data's extremes, the padding's value, requantized."""
    op, x, _, expected = depthwise_at_extremes(42, hwc, k, stride, dtype, -128, "cortex-a76", (2e-4 / k, 8e-4 / k))
    assert "sdot" in op.assembly
    np.testing.assert_array_equal(op(x), expected)


@pytest.mark.parametrize("core", ["cortex-a76", "cortex-a55"])
@pytest.mark.parametrize("shape, k, stride, pads, dtype, pad_value", [
    pytest.param(*case, marks=qemu, id="-".join(map(str, (*case[0], f"k{case[1]}s{case[2]}", *case[3]))))
    for case in (((1, 14, 14, 16), 3, 2, (0, 0, 1, 1), "int8", -3), ((1, 13, 13, 24), 3, 2, (1, 1, 1, 1), "uint8", 143),
                 ((2, 9, 10, 32), 5, 1, (2, 2, 2, 2), "uint8", 200), ((1, 5, 3, 8), 3, 1, (1, 1, 1, 1), "int8", 100),
                 ((1, 6, 7, 16), 3, 2, (1, 2, 0, 1), "uint8", 0), ((1, 4, 12, 48), 7, 1, (3, 3, 3, 3), "int8", -128),
                 ((1, 5, 2, 32), 3, 1, (0, 7, 2, 6), "int8", 9), ((2, 7, 9, 12), 3, 1, (1, 1, 1, 1), "int8", -5))])
def test_depthwise_sdot_word_pass(shape, k, stride, pads, dtype, pad_value, core):
    """The word pass (depthwise_dot.word_pass) writes the words straight from the input: padding on any side
    (TFLite's stride-2 SAME only after the row and column; three columns on each side of a 7x7), a pad value
    above 127 of u8 data (shifted to s8 as the data), rows too short for a group of four pixels inside
    them (3 columns) or padded wider than their words (2 columns under 7), odd and even numbers of groups
    inside a row, two images, 12 channels (computed in 16, read byte by byte); interleaved by pixel pairs and
    st2 for s8 data on the out-of-order A76, else by st4; each against numpy."""
    rng = np.random.default_rng(44)
    x, c = data(rng, shape, dtype), shape[3]
    w = rng.integers(-128, 128, (c, 1, k, k)).astype(np.int8)
    bias = rng.integers(-3000, 3000, c).astype(np.int32)
    scale = rng.uniform(2e-4 / k, 8e-4 / k, c).astype(np.float32)
    stage = OutputStage(bias=bias, requantize=ScaleRequantize(scale, 120, "uint8"))
    op = ops.conv2d(w, x.shape, stride, pads, groups=c, data_dtype=dtype, stage=stage, mcpu=core, pad_value=pad_value)
    expected = requantized(conv_reference(x, w, stride, pads, pad_value, groups=c), bias, scale, 120)
    interleave = "st2" if core == "cortex-a76" and dtype == "int8" else "st4"
    assert interleave in op.assembly and ((expected == 0) | (expected == 255)).mean() < 0.5
    np.testing.assert_array_equal(op(x), expected)


@pytest.mark.parametrize("core", [pytest.param(c, marks=qemu) for c in ("cortex-a76", "cortex-a55")])
@pytest.mark.skipif(mca.missing_tools() is not None, reason=f"llvm-objdump reads the blocks: {mca.missing_tools()}")
def test_depthwise_sdot_accumulators_start_from_the_bias(core):
    """The sdot depthwise's accumulators start from the bias: its sdot blocks zero no register (movi) and
    add no bias (an integer vector add), as they did at the parent; on the out-of-order A76 each tile
    column loads its own copy, so none is copied into another register either (on the in-order A55 one
    copy: there the loads cost more than the copies). Exact at the sums' extremes, 7 columns a tile."""
    op, x, _, expected = depthwise_at_extremes(43, (9, 14, 24), 3, 1, "uint8", -128, core, (2e-4 / 3, 8e-4 / 3))
    np.testing.assert_array_equal(op(x), expected)
    dots = [i for b in mca.profile(op, x) if any(i.startswith("sdot") for i in b.instructions) for i in b.instructions]
    assert dots and not any(re.match(r"(movi\s+v|add\s+v\d+\.4s)", i) for i in dots)
    copies = [i for i in dots if re.match(r"mov\s+v\d+\.16b, v\d+\.16b", i)]
    assert not copies if core == "cortex-a76" else copies


def test_tap_pairs_refuse_what_int16_cannot_hold():
    """The tap pairs' int16 sums need every weight in [-127, 127] (and NHWC, 8 channels a vector): one
    clear error otherwise."""
    from tvm import te

    from tvm_integration.ops import depthwise
    x = te.placeholder((1, 6, 6, 8), "uint8", name="data")
    w = np.full((8, 1, 3, 3), -128, np.int8)
    with pytest.raises(ValueError, match="tap pairs need"):
        depthwise.build(x, "NHWC", w, (1, 1), (1, 1, 1, 1), (6, 6), OutputStage(), pairs=True)


def test_each_core_gets_its_tile_family():
    assert neon_int8.core_family("cortex-a53") == neon_int8.core_family("cortex-a72") == "v8"
    assert neon_int8.core_family("cortex-a76") == neon_int8.core_family("neoverse-n1") == "dotprod"
    assert neon_int8.core_family("neoverse-n2") == "i8mm"
    assert neon_int8.tile_for("cortex-a53").spec.layout == "acc"
    assert neon_int8.tile_for("cortex-a76").spec.types == "s8s8"
    assert neon_int8.tile_for("neoverse-n2").spec.types == "u8s8"
    target = neon_int8.neon_target("cortex-a76", neon_int8.tile_for("cortex-a76"))
    assert target["mcpu"] == "cortex-a76" and "+dotprod" in target["mattr"]


def test_bad_core_and_family_are_one_clear_error():
    with pytest.raises(ValueError, match="not an AArch64 core LLVM knows"):
        neon_int8.core_family("cortex-a999")
    with pytest.raises(SelectionError, match="accepted: i8mm, dotprod, v8"):
        neon_int8.tile_for(family="sve")
    with pytest.raises(ValueError, match=r"weight of -128 is outside the int8_s8s7_acc_4x4x16_neon tile's domain"):
        ops.build_dense(np.array([[-128, 127]], np.int8), 2, family="v8s7")    # no zero point puts these in [-127, 127]


def test_v8_cores_take_the_s8s7_tile_for_symmetric_weights():
    """onnxruntime's symmetric int8 weights lie in [-127, 127]: on a v8.0 core they take the smull/smlal2
    tile; one -128 keeps the layer on the u8 x u8 tile; dotprod cores keep sdot. A depth the s8 x s7
    tile's 16-byte K steps would round up by a third (24 to 32) takes the u8 x u8 tile's 8-byte ones on
    the cores whose K-loop costs are known, a 3-channel 7x7 window (147 bytes: 152 against 160) only on
    Cortex-A72, where the two tiles' K loops cost the same per byte."""
    symmetric, full = np.tile(np.int8([-127, 127]), (1, 16)), np.tile(np.int8([-128, 127]), (1, 16))
    shallow = np.full((144, 24, 1, 1), 127, np.int8)
    assert neon_int8.tile_for("cortex-a53", weights=shallow).spec.types == "u8u8"
    assert neon_int8.tile_for("cortex-a72", weights=shallow).spec.types == "u8u8"
    stem = np.full((64, 3, 7, 7), -127, np.int8)
    assert neon_int8.tile_for("cortex-a53", weights=stem).spec.types == "s8s7"
    assert neon_int8.tile_for("cortex-a72", weights=stem).spec.types == "u8u8"
    assert neon_int8.tile_for("cortex-a53", weights=symmetric).intrin == "qsynth_int8_s8s7_acc_4x4x16_neon"
    assert neon_int8.tile_for("cortex-a72", weights=symmetric).spec.types == "s8s7"
    assert neon_int8.tile_for("cortex-a53", weights=full).spec.types == "u8u8"
    assert neon_int8.tile_for("cortex-a53").spec.types == "u8u8"
    assert neon_int8.tile_for("cortex-a76", weights=symmetric).spec.types == "s8s8"
    assert neon_int8.tile_for(family="v8", weights=symmetric).spec.types == "u8u8"     # a family named is kept


def qlinear_add(a, b, ratio_a, ratio_b, fixed, clamp):
    """onnxruntime's QLinearAdd (output_stage.qlinear_add): fma(a, ra, fma(b, rb, fixed)), half to even."""
    y = fma32(a.astype(np.float32), ratio_a, fma32(b.astype(np.float32), ratio_b, fixed))
    return np.clip(np.rint(y), *clamp)


@pytest.mark.parametrize("family, groups, residual", [
    pytest.param(f, g, r, marks=qemu, id=f"{f}-g{g}{'-residual' if r else ''}")
    for f, g, r in (("v8", 1, True), ("dotprod", 1, True), ("v8", 2, False), ("v8s7", 2, True), ("dotprod", 4, True),
                    ("i8mm", 2, False))])
def test_conv2d_residual_add_and_groups(family, groups, residual):
    """A 3x3 conv (10 rows of pixels, stride 1) with its output requantized and, with ``residual``, added to
    a residual tensor as ResNet's shortcut adds are (the result as QLinearAdd's second operand);
    grouped: 4 or 8 channels a group, each group's GEMM on the tiles."""
    rng = np.random.default_rng(37)
    x = data(rng, (1, 7, 6, 16), "uint8")
    o = 12 if groups != 4 else 16
    w = weights(rng, (o, 16 // groups, 3, 3), family)
    bias = rng.integers(-5000, 5000, o).astype(np.int32)
    scale = rng.uniform(2e-4, 1e-3, o).astype(np.float32)
    acc = conv_reference(x, w, 1, 1, 0, groups=groups)
    result = requantized(acc, bias, scale, 120)
    add = ResidualAdd(0.75, 1.25, np.float32(-3.5), "uint8", (0, 255), 1, "uint8") if residual else None
    stage = OutputStage(bias=bias, requantize=ScaleRequantize(scale, 120, "uint8"), residual=add)
    op = ops.conv2d(w, x.shape, 1, 1, groups=groups, stage=stage, family=family)
    if not residual:
        np.testing.assert_array_equal(op(x), result)
        return
    shortcut = data(rng, result.shape, "uint8")
    expected = qlinear_add(shortcut, result, np.float32(0.75), np.float32(1.25), np.float32(-3.5), (0, 255))
    assert 0.1 < (expected != result).mean() and ((expected == 0) | (expected == 255)).mean() < 0.5
    np.testing.assert_array_equal(op(x, shortcut), expected)


@pytest.mark.parametrize("family", [pytest.param(f, marks=qemu) for f in ("dotprod", "v8s7")])
@pytest.mark.skipif(mca.missing_tools() is not None, reason=f"llvm-mca costs the operator: {mca.missing_tools()}")
def test_grouped_packing_copies_each_tap_as_one_vector(family):
    """RegNet's grouped 3x3 convs, 8 channels a group (K = 72, rounded to the tile's 16-byte steps):
    each tap's 8 channels are packed as one vector copy, so on Cortex-A76's model (N1) the operator
    takes under twice its K loop's cycles; when the packing computed each byte's tap by division it
    took 16x (5.2 against 0.32 Mcycles on RegNet's 28x28x104 layer). Exact against numpy."""
    rng = np.random.default_rng(40)
    x = data(rng, (1, 9, 10, 32), "uint8")
    w = weights(rng, (32, 8, 3, 3), family)
    bias = rng.integers(-5000, 5000, 32).astype(np.int32)
    scale = rng.uniform(2e-4, 1e-3, 32).astype(np.float32)
    stage = OutputStage(bias=bias, requantize=ScaleRequantize(scale, 120, "uint8"))
    op = ops.conv2d(w, x.shape, 1, 1, groups=4, stage=stage, family=family)
    np.testing.assert_array_equal(op(x), requantized(conv_reference(x, w, 1, 1, 0, groups=4), bias, scale, 120))
    costs = costed(op, x, "cortex-a76")
    assert costs["operator"] < 2 * costs["k_loop"]


@pytest.mark.parametrize("family, channels, outputs, stride", [
    pytest.param(*case, marks=qemu, id=f"{case[0]}-{case[1]}to{case[2]}") for case in
    (("dotprod", 16, 64, 1), ("i8mm", 16, 64, 1), ("dotprod", 3, 32, 2))])
@pytest.mark.skipif(mca.missing_tools() is not None, reason=f"llvm-objdump reads the blocks: {mca.missing_tools()}")
def test_k_loops_under_column_tiles_take_a_by_element(family, channels, outputs, stride):
    """SqueezeNet's 3x3 16->64 (K = 144, 9 blocks) under a loop over 8 column tile pairs, and a 3x3 stride-2
    stem on 3 channels to 32 (K = 27 in 32, 2 blocks, 8 column tiles: ROLLED_FROM): every dot product of
    its K loops takes A by element (a lane of the packed row), none a broadcast made ahead, as when LLVM
    unrolled them and hoisted A's lane broadcasts out of the column loop, spilling them (neon_int8.rolled).
    Exact against numpy."""
    rng = np.random.default_rng(41)
    x = data(rng, (1, 9, 10, channels), "uint8")
    w = weights(rng, (outputs, channels, 3, 3), family)
    bias = rng.integers(-5000, 5000, outputs).astype(np.int32)
    op = ops.conv2d(w, x.shape, stride, 1, stage=OutputStage(bias=bias), family=family)
    np.testing.assert_array_equal(op(x), conv_reference(x, w, stride, 1) + bias)
    dots = [i for b in mca.profile(op, x) for i in b.instructions if i.startswith(("sdot", "sudot", "usdot"))]
    assert dots and all(re.search(r"\.4b\[\d\]$", i) for i in dots)


@pytest.mark.qemu
@skip_if(HOST_RUNS.qemu)
@pytest.mark.skipif(mca.missing_tools() is not None, reason=f"llvm-objdump reads the blocks: {mca.missing_tools()}")
def test_output_stage_of_whole_column_tiles_is_vectorized_beside_a_remainder():
    """ShuffleNetV2's 1x1 24->58 (58 columns: 14 whole tiles of 4 and 2 left): the output stage scales
    one value at a time (a scalar fmul) only in the last column tile, once per row tile,
    not in every tile as when the remainder's bound test kept the whole loop scalar. Exact against numpy."""
    rng = np.random.default_rng(42)
    x = data(rng, (1, 6, 10, 24), "uint8")
    w = weights(rng, (58, 24, 1, 1), "dotprod")
    bias = rng.integers(-5000, 5000, 58).astype(np.int32)
    scale = rng.uniform(2e-4, 1e-3, 58).astype(np.float32)
    stage = OutputStage(bias=bias, requantize=ScaleRequantize(scale, 120, "uint8"))
    op = ops.conv2d(w, x.shape, 1, 0, stage=stage, family="dotprod")
    np.testing.assert_array_equal(op(x), requantized(conv_reference(x, w, 1, 0), bias, scale, 120))
    scalar = [b.runs for b in mca.profile(op, x) if any(re.match(r"fmul\s+s\d", i) for i in b.instructions)]
    assert scalar and max(scalar) <= 60 // 4


@pytest.mark.parametrize("family", [pytest.param(f, marks=qemu) for f in ("dotprod", "v8")])
@pytest.mark.skipif(mca.missing_tools() is not None, reason=f"llvm-objdump reads the blocks: {mca.missing_tools()}")
def test_output_stage_of_whole_row_tiles_has_no_row_test(family):
    """A 3x3 16->16 on a 5x5 output (25 rows: 6 whole row tiles of 4 and 1 row left; 2 column tile pairs):
    the output stage's vector scaling runs once per row tile and column pair, its four rows one straight
    block, not once per row behind each row's bound test (SqueezeNet's layers, none of whose row counts is
    a multiple of 4). Exact against numpy."""
    scaling = [b.runs for b in scaling_blocks(43, (1, 5, 5, 16), (16, 16, 3, 3), 1, family)]
    assert scaling and sum(scaling) <= 7 * 2


@pytest.mark.parametrize("family", [pytest.param(f, marks=qemu) for f in ("dotprod", "i8mm")])
@pytest.mark.skipif(mca.missing_tools() is not None, reason=f"llvm-objdump reads the blocks: {mca.missing_tools()}")
def test_accumulators_start_from_the_bias(family):
    """The k4 tiles' accumulators start from the bias, so the output stage (the blocks scaling by the
    per-channel scale) adds no integer vector: at the parent each vector of accumulators took a bias add.
    Exact against numpy."""
    blocks = scaling_blocks(44, (1, 8, 8, 16), (32, 16, 1, 1), 0, family)
    assert blocks and not any(re.match(r"add\s+v\d+\.4s", i) for b in blocks for i in b.instructions)


@pytest.mark.parametrize("core", [pytest.param(c, marks=qemu) for c in ("cortex-a76", "neoverse-n2")])
@pytest.mark.skipif(mca.missing_tools() is not None, reason=f"llvm-objdump reads the blocks: {mca.missing_tools()}")
def test_accumulators_of_an_out_of_order_core_load_their_own_bias(core):
    """Built for an out-of-order core (the A76's sdot tile, the N2's sudot one), each row of the tile starts
    from its own copy of the bias (neon_int8.bias_copies), so its K-loop blocks copy no register into
    another (at the parent: 6 vector movs a block); exact against numpy with per-channel weight zero points
    in groups (the start's -z sum_k a) and as a dense layer of 5 rows (a partial row tile). The in-order
    Cortex-A55 keeps one copy."""
    rng = np.random.default_rng(50)
    x, w = data(rng, (1, 8, 8, 16), "uint8"), weights(rng, (32, 16, 1, 1), "dotprod")
    bias, scale = rng.integers(-5000, 5000, 32).astype(np.int32), rng.uniform(2e-4, 1e-3, 32).astype(np.float32)
    op = ops.conv2d(w, x.shape, 1, 0, stage=OutputStage(bias=bias, requantize=ScaleRequantize(scale, 120, "uint8")),
                    mcpu=core)
    np.testing.assert_array_equal(op(x), requantized(conv_reference(x, w, 1, 0), bias, scale, 120))
    dots = [b for b in mca.profile(op, x) if any(i.startswith(("sdot", "sudot", "usdot")) for i in b.instructions)]
    assert dots and not any(re.match(r"mov\s+v\d+\.16b, v\d+\.16b", i) for b in dots for i in b.instructions)
    zero_points = rng.integers(0, 256, 16)
    w = nine_bit_weights(rng, (16, 4, 3, 3), zero_points)
    x = data(rng, (1, 7, 6, 16), "uint8")
    bias = rng.integers(-5000, 5000, 16).astype(np.int32)
    op = ops.conv2d(w, x.shape, 1, 1, groups=4, stage=OutputStage(bias=bias), mcpu=core, pad_value=7)
    np.testing.assert_array_equal(op(x), conv_reference(x, w, 1, 1, 7, groups=4) + bias)
    x, w = data(rng, (5, 40), "uint8"), weights(rng, (9, 40), "dotprod")
    op = ops.dense(w, 5, "uint8", OutputStage(bias=bias[:9]), mcpu=core)
    np.testing.assert_array_equal(op(x), x.astype(np.int64) @ w.astype(np.int64).T + bias[:9])
    assert neon_int8.bias_copies(core, neon_int8.tile_for(core)) == 4
    assert neon_int8.bias_copies("cortex-a55", neon_int8.tile_for("cortex-a55")) == 1


def scaling_blocks(seed, x_shape, w_shape, pad, family):
    """The blocks a requantized conv2d of random u8 data (exact against numpy, checked here) ran that scale
    by the per-channel scale (a vector fmul): its output stage."""
    rng = np.random.default_rng(seed)
    x = data(rng, x_shape, "uint8")
    w = weights(rng, w_shape, family)
    bias = rng.integers(-5000, 5000, w_shape[0]).astype(np.int32)
    scale = rng.uniform(2e-4, 1e-3, w_shape[0]).astype(np.float32)
    stage = OutputStage(bias=bias, requantize=ScaleRequantize(scale, 120, "uint8"))
    op = ops.conv2d(w, x.shape, 1, pad, stage=stage, family=family)
    np.testing.assert_array_equal(op(x), requantized(conv_reference(x, w, 1, pad), bias, scale, 120))
    return [b for b in mca.profile(op, x) if any(re.match(r"fmul\s+v\d+\.4s", i) for i in b.instructions)]


@pytest.mark.parametrize("family", [pytest.param(f, marks=qemu) for f in ("v8", "i8mm")])
def test_dense_residual_add(family):
    rng = np.random.default_rng(38)
    x, w = data(rng, (5, 40), "int8"), rng.integers(-128, 128, (9, 40)).astype(np.int8)
    scale = np.float32(1 / 512)
    add = ResidualAdd(1.5, 0.5, np.float32(2.25), "int8", (-128, 127), 0, "int8")
    stage = OutputStage(requantize=ScaleRequantize(scale, -3, "int8"), residual=add)
    op = ops.dense(w, 5, "int8", stage, family=family)
    acc = x.astype(np.int64) @ w.astype(np.int64).T
    result = np.clip(np.rint(acc.astype(np.float32) * scale) - 3, -128, 127)
    shortcut = data(rng, (5, 9), "int8")
    expected = qlinear_add(result, shortcut, np.float32(1.5), np.float32(0.5), np.float32(2.25), (-128, 127))
    np.testing.assert_array_equal(op(x, shortcut), expected)


@pytest.mark.parametrize("out_dtype, zero_point, clamp", [
    pytest.param(*case, marks=qemu, id=f"{case[0]}-z{case[1]}{'-clamp' if case[2] else ''}")
    for case in (("uint8", 128, None), ("uint8", 3, (10, 200)), ("int8", -5, None))])
def test_requantize_edges_on_aarch64(out_dtype, zero_point, clamp):
    """The AArch64 requantize (OutputStage.aarch64: an fadd of 1.5 * 2^23, its bits less the constant's with
    saturation, the clamp in int16) at
    its edges against numpy: per-channel scales putting ``acc + bias`` at ties (x.5, half to even) next
    to both bounds, beyond int16 (a conversion that wrapped would land inside the bounds), far beyond
    int32 and at float32 infinity (saturated, then clamped), both signs. ``acc[p, n] = p`` (identity
    weights, one row per u8 value) plus the channel's bias: each channel sweeps 256 consecutive sums."""
    lo, hi = {"uint8": (0, 255), "int8": (-128, 127)}[out_dtype]
    lo, hi = (max(lo, clamp[0]), min(hi, clamp[1])) if clamp else (lo, hi)
    low, high = lo - zero_point, hi - zero_point
    scale_bias = [(0.5, 2 * low - 40), (0.5, 2 * high - 200),        # ties around each bound
                  (1.0, 2**16 + low - 100), (1.0, -2**16 + high - 100),   # int16 wraps back into the bounds
                  (2.0**40, -128), (2.0**100, 2**30 - 128), (2.0**100, -2**30),   # beyond int32; +-inf
                  (0.3, -100)]
    scale = np.float32([s for s, _ in scale_bias])
    bias = np.int32([b for _, b in scale_bias])
    n = len(scale_bias)
    x = np.repeat(np.arange(256, dtype=np.uint8)[:, None], n, axis=1)
    stage = OutputStage(bias=bias, requantize=ScaleRequantize(scale, zero_point, out_dtype), clamp=clamp)
    op = ops.dense(np.eye(n, dtype=np.int8), 256, "uint8", stage, mcpu="cortex-a72")
    with np.errstate(over="ignore"):
        y = (x.astype(np.int32) + bias).astype(np.float32) * scale
    expected = np.clip(np.rint(y) + zero_point, lo, hi).astype(out_dtype)
    small = y[np.abs(y) < 2**10]
    assert (small % 1 == 0.5).sum() >= 256 and (np.abs(y) > 2**31).sum() >= 256 and np.isinf(y).sum() >= 256
    assert (expected == lo).any() and (expected == hi).any() and ((expected > lo) & (expected < hi)).any()
    np.testing.assert_array_equal(op(x), expected)
    assert "frintx" not in op.assembly and "fadd" in op.assembly       # the AArch64 form, not lrint's


@pytest.mark.parametrize("out_dtype, zero_point, clamp, core", [
    pytest.param(*case, marks=qemu, id=f"{case[0]}-z{case[1]}{'-clamp' if case[2] else ''}-{case[3]}")
    for case in (("uint8", 128, None, "cortex-a76"), ("uint8", 3, (10, 200), "cortex-a72"),
                 ("int8", -5, None, "cortex-a76"), ("int8", -128, (-128, -31), "cortex-a72"))])
def test_requantize_within_int16_narrows_by_truncation(out_dtype, zero_point, clamp, core):
    """Where every product's bound (the stage's largest |acc + bias| times the largest scale) plus the zero
    point lies within int16, the stage narrows by truncation (OutputStage.short: no saturating int32 add or
    narrowing): exact against numpy at ties next to both bounds and at sums within a few hundred of
    +-2^15, where a wrong bound would wrap into the output's range; odd and even zero points, a clamp.
    ``acc[p, n] = p`` plus the channel's bias, as test_requantize_edges_on_aarch64's."""
    lo, hi = {"uint8": (0, 255), "int8": (-128, 127)}[out_dtype]
    lo, hi = (max(lo, clamp[0]), min(hi, clamp[1])) if clamp else (lo, hi)
    low, high = lo - zero_point, hi - zero_point
    edge = 2**15 - 2 - abs(zero_point) - 255 - 40
    scale_bias = [(0.5, 2 * low - 40), (0.5, 2 * high - 200), (1.0, edge), (1.0, -edge), (0.3, -100)]
    scale = np.float32([sc for sc, _ in scale_bias])
    bias = np.int32([b for _, b in scale_bias])
    n = len(scale_bias)
    x = np.repeat(np.arange(256, dtype=np.uint8)[:, None], n, axis=1)
    stage = OutputStage(bias=bias, requantize=ScaleRequantize(scale, zero_point, out_dtype), clamp=clamp)
    op = ops.dense(np.eye(n, dtype=np.int8), 256, "uint8", stage, mcpu=core)
    y = (x.astype(np.int32) + bias).astype(np.float32) * scale
    expected = np.clip(np.rint(y) + zero_point, lo, hi).astype(out_dtype)
    assert (y % 1 == 0.5).sum() >= 256 and (np.abs(y) > 2**15 - 600).sum() >= 256
    np.testing.assert_array_equal(op(x), expected)
    assert not re.search(r"\b(sqadd|sqsub|sqxtn)\s+v\d+\.[48][hs]", op.assembly)
    wider = dataclasses.replace(stage, requantize=ScaleRequantize(scale * 1.05, zero_point, out_dtype))
    assert "sqxtn" in ops.dense(np.eye(n, dtype=np.int8), 256, "uint8", wider, mcpu=core).assembly


def nine_bit_weights(rng, shape, zero_points):
    """u8 weights (0 and 255 present in each output channel) less their zero points (one, or one per
    output channel), as legalize.py gives a U8U8 model's: ``w - zw`` in int16."""
    codes = rng.integers(0, 256, shape)
    codes.reshape(shape[0], -1)[:, :2] = (0, 255)
    return (codes - np.reshape(zero_points, (-1,) + (1,) * (len(shape) - 1))).astype(np.int16)


# family, data type, weights' shape (a dense [N, K] or a conv's OIHW), input (N, H, W, C) or rows, stride, padding,
# groups, zero points (one or per output channel)
ZERO_POINTS = [
    ("v8", "uint8", (12, 5, 3, 3), (1, 9, 10, 5), 1, 1, 1, 0),               # 15-byte runs in 16: rounding
    ("v8", "int8", (10, 37), 3, 1, 0, 1, 255),                                # dense, s8 data (A + 128)
    ("v8", "uint8", (12, 8, 3, 3), (1, 7, 6, 8), 1, 1, 1, "channel"),        # R's -128 and the start's -z
    ("v8s7", "uint8", (16, 8, 1, 1), (1, 6, 6, 8), 2, 0, 1, "symmetric"),    # bytes in [-127, 127] on z != 0
    ("dotprod", "uint8", (6, 5, 3, 3), (1, 9, 9, 5), 2, 1, 1, 255),          # 15-byte runs in 16
    ("dotprod", "uint8", (8, 3, 7, 7), (1, 15, 15, 3), 2, 3, 1, 0),          # the stem's whole window
    ("dotprod", "uint8", (16, 4, 3, 3), (1, 7, 6, 16), 1, 1, 4, "channel"),  # grouped
    ("i8mm", "int8", (9, 40), 5, 1, 0, 1, "channel"),
]


@pytest.mark.parametrize("family, dtype, shape, data_shape, stride, pad, groups, zero_points", [
    pytest.param(*case, marks=qemu, id=f"{case[0]}-{'x'.join(map(str, case[2]))}-z{case[7]}") for case in ZERO_POINTS])
def test_weights_on_a_zero_point(family, dtype, shape, data_shape, stride, pad, groups, zero_points):
    """u8 weights less a zero point (9 bits) enter the tiles as bytes on a zero point z: the u8 x u8 tile
    takes one z in its R, the others (and a z per channel) start the accumulator from -z sum_k a. Zero
    points 0 and 255, weights 0 and 255, u8 and s8 data, K rounded per window row, against numpy."""
    rng = np.random.default_rng(49)
    if zero_points == "symmetric":         # u8 codes in [1, 255] on zero point 201: w - zw in [-200, 54]
        w = (rng.integers(1, 256, shape) - 201).astype(np.int16)
        w.flat[:2] = (-200, 54)
    else:
        if zero_points == "channel":
            zero_points = rng.integers(0, 256, shape[0])
            zero_points[:2] = (0, 255)
        w = nine_bit_weights(rng, shape, zero_points)
    bias = rng.integers(-5000, 5000, shape[0]).astype(np.int32)
    if len(shape) == 2:
        x = data(rng, (data_shape, shape[1]), dtype)
        op = ops.dense(w, data_shape, dtype, OutputStage(bias=bias), family=family)
        expected = x.astype(np.int64) @ w.astype(np.int64).T + bias
    else:
        x = data(rng, data_shape, dtype)
        op = ops.conv2d(w, x.shape, stride, pad, groups=groups, data_dtype=dtype, stage=OutputStage(bias=bias),
                        family=family, pad_value=7)
        expected = conv_reference(x, w, stride, pad, 7, groups=groups) + bias
    np.testing.assert_array_equal(op(x), expected)


def test_byte_weights_keep_one_zero_point_where_they_can():
    """One z for a tensor whose values span at most 256 (a U8U8 model's per-tensor weights: z = zw - 128),
    one per channel otherwise, none for bytes, bytes in [-127, 127] where they fit; a channel wider than
    a byte is refused in one line."""
    w = np.array([[-60, 195], [0, 100]], np.int16)                # u8 weights 0, 255 less zw = 60
    b, z = ops.byte_weights(w)
    assert z.tolist() == [-68, -68] and (b.astype(np.int16) - z[:, None]).tolist() == w.tolist()
    b, z = ops.byte_weights(np.array([[-255, 0], [0, 255]], np.int16))
    assert z.tolist() == [127, -128] and b.tolist() == [[-128, 127], [-128, 127]]
    assert ops.byte_weights(np.array([[-128, 127]], np.int8))[1].tolist() == [0]
    assert ops.byte_weights(np.array([[-200, 54]], np.int16))[1].tolist() == [73]       # bytes in [-127, 127]
    with pytest.raises(ValueError, match="output channel 0 span \\[-200, 100\\]"):
        ops.byte_weights(np.array([[-200, 100]], np.int16))
