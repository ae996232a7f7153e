"""Winograd's F(2x2, 3x3) in integers (ops/winograd.py), at stride 1 and over the even/odd phases at
stride 2: the transforms' identity, the operand ranges the s16 tiles are proved on, and the operator
against numpy's direct convolution. AVX2 runs on every
x86-64 host of the pool, so the operator is built on the AVX2 s16 tiles and run natively everywhere;
which hosts take it by default is the host model's (``pays``), checked on an AVX2-only model."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import tvm
from tvm import s_tir, te

from isa_specs import host
from tests.test_tvm_ops import conv_reference
from tvm_integration.kernels import selection
from tvm_integration.ops import winograd
from tvm_integration.ops.conv2d import build_conv2d, conv2d, conv_geometry
from tvm_integration.ops.gemm import Tile
from tvm_integration.ops.operator import Built
from tvm_integration.ops.output_stage import OutputStage, ResidualAdd, ScaleRequantize


def correlation(d: np.ndarray, g: np.ndarray, stride: int) -> np.ndarray:
    """The 2x2 valid cross-correlation at ``stride`` of a tile with a 3x3 filter, as the convolution
    computes it."""
    return np.array([[(d[stride * i:stride * i + 3, stride * j:stride * j + 3] * g).sum() for j in range(2)]
                     for i in range(2)])


@pytest.mark.parametrize("stride", [1, 2])
def test_the_transforms_give_scale_times_the_convolution_on_every_basis_pair(stride):
    """A^T [(G g G^T) * (B^T d B)] A = scale * conv(d, g) for every unit tile d and unit filter g (4x4
    tiles, scale 4 at stride 1; 5x5, scale 1 at stride 2). The left side is bilinear in (d, g), so this
    holds for all integer inputs, and in int32 with wrap-around (every step a ring operation) modulo 2^32."""
    t = winograd.TRANSFORMS[stride]
    span = stride + 3
    for (i, j), (k, m) in itertools.product(np.ndindex(span, span), np.ndindex(3, 3)):
        d, g = np.zeros((span, span), np.int64), np.zeros((3, 3), np.int64)
        d[i, j], g[k, m] = 1, 1
        y = t.output @ ((t.weight @ g @ t.weight.T) * (t.input @ d @ t.input.T)) @ t.output.T
        np.testing.assert_array_equal(y, t.scale * correlation(d, g, stride))


@pytest.mark.parametrize("stride,largest_u", [(1, 9 * 128), (2, 4 * 128)])
def test_the_transformed_operands_fit_the_s16_tiles_and_the_sum_fits_int32(stride, largest_u):
    """Each transformed input is a signed sum of pixels (|V| <= 4 * 255 for u8), each transformed weight
    of taps (|U| <= 9 * 128 at stride 1, 4 * 128 at stride 2); the weight transform of the extreme
    filters reaches its bound, and ``max_channels`` is the last channel count whose scale * conv cannot
    leave int32."""
    t = winograd.TRANSFORMS[stride]
    terms = np.abs(t.input)[:, None, :, None] * np.abs(t.input)[None, :, None, :]
    assert terms.sum(axis=(2, 3)).max() * 255 <= 2**15 - 1
    u = winograd.weight_transform(np.full((1, 1, 3, 3), -128, np.int8), t).astype(np.int64)
    assert np.abs(u).max() == largest_u <= 2**15 - 1
    for dtype, largest in (("uint8", 255), ("int8", 128)):
        c = winograd.max_channels(dtype, "int8", t)
        assert t.scale * 9 * c * largest * 128 < 2**31 <= t.scale * 9 * (c + 1) * largest * 128


def s16_kernels():
    kernels = winograd.kernels("avx2")
    assert kernels, "no proved AVX2 s16 tile in the kernel cache"
    return kernels


@pytest.mark.parametrize("case,hw,c,o,pads,dtype,pad_value", [
    (0, (9, 9), 24, 40, 1, "uint8", 37),          # odd output: the last tiles half outside
    (1, (7, 10), 5, 3, 1, "int8", -3),            # channels not whole vectors, columns not a whole tile
    (2, (8, 8), 16, 16, 0, "uint8", 0),           # no padding: 6x6 output
    (3, (6, 5), 32, 20, (0, 1, 2, 1), "uint8", 255),   # padding (top, left, bottom, right)
    (4, (5, 5), 64, 48, 1, "uint8", 128)])
@pytest.mark.parametrize("stride", [1, 2])
def test_winograd_convolution_equals_numpy(case, hw, c, o, pads, dtype, pad_value, stride):
    """Each case on another of the s16 tiles (row tiles of 4-6, K steps of 2 and 8); at stride 2 the
    odd sizes leave a last tile whose second output row or column, or both, is outside."""
    rng = np.random.default_rng(5)
    lo, hi = (0, 256) if dtype == "uint8" else (-128, 128)
    x = rng.integers(lo, hi, (1, *hw, c)).astype(dtype)
    w = rng.integers(-128, 128, (o, c, 3, 3)).astype(np.int8)
    padding = (pads,) * 4 if isinstance(pads, int) else pads
    padded = np.pad(x.astype(np.int64), ((0, 0), padding[0::2], padding[1::2], (0, 0)), constant_values=pad_value)
    want = conv_reference(padded, w, "NHWC", stride, 0, 1)
    kernels = s16_kernels()
    kernel = kernels[case % len(kernels)]
    np.testing.assert_array_equal(_winograd(w, x, padding, dtype, pad_value, kernel, stride=stride), want,
                                  err_msg=kernel.intrin)


def _winograd(w, x, padding, dtype, pad_value, kernel, stage=OutputStage(), stride=1):
    """The Winograd operator on ``kernel`` (an s16 tile), whatever the tuning log would pick."""
    _, out_hw, pads = conv_geometry(x.shape, "NHWC", w.shape, (stride, stride), padding)
    mod, constants = winograd.build(te.placeholder(x.shape, dtype, name="data"), w, pads, out_hw, stage, kernel,
                                    pad_value, stride)
    shape = (x.shape[0], *out_hw, w.shape[0])
    return Built(mod, constants, shape, stage.out_dtype, x.shape, dtype, shape, selection.int8_target(kernel)).compile()(x)


@pytest.mark.parametrize("stride", [1, 2])
def test_the_largest_channel_count_at_the_extremes_is_exact(stride):
    """Every input 255 against every weight -128 over ``max_channels`` channels: scale * conv is within
    a few channels of 2^31, and every partial sum of the transforms wraps. On the tile of the longest K
    step: the kernel's K loop is unrolled, and at stride 2 (7308 channels) steps of 2 took minutes to compile."""
    c = winograd.max_channels("uint8", "int8", winograd.TRANSFORMS[stride])
    x = np.full((1, 4, 4, c), 255, np.uint8)
    w = np.full((2, c, 3, 3), -128, np.int8)
    w[1, ::2] = 127
    want = conv_reference(x, w, "NHWC", stride, 1, 1)
    kernel = max(s16_kernels(), key=lambda k: k.spec.k)
    np.testing.assert_array_equal(_winograd(w, x, 1, "uint8", 0, kernel, stride=stride), want)


def test_nine_bit_weights_at_the_largest_channel_count_are_exact():
    """9-bit weights (U8U8 layers' ``w - zw``, int16): |U| <= 9 * 256 still an int16, and 255 against -256
    over ``max_channels(uint8, int16)`` channels within int32 after the scale."""
    c = winograd.max_channels("uint8", "int16")
    scale = winograd.STRIDE_1.scale
    assert scale * 9 * c * 255 * 256 < 2**31 <= scale * 9 * (c + 1) * 255 * 256
    assert np.abs(winograd.weight_transform(np.full((1, 1, 3, 3), -256, np.int16)).astype(np.int64)).max() == 9 * 256
    x = np.full((1, 4, 4, c), 255, np.uint8)
    w = np.full((2, c, 3, 3), -256, np.int16)
    w[1, ::2] = 255
    want = conv_reference(x, w, "NHWC", 1, 1, 1)
    np.testing.assert_array_equal(_winograd(w, x, 1, "uint8", 0, s16_kernels()[0]), want)


def test_the_output_stage_and_residual_add_match_the_direct_convolution():
    """Requantized, clamped by a Relu and added to a residual (ResNet's block end), the Winograd output
    equals the direct convolution's on the w16 tile, value for value."""
    rng = np.random.default_rng(2)
    x = rng.integers(0, 256, (1, 11, 11, 32)).astype(np.uint8)
    w = rng.integers(-128, 128, (24, 32, 3, 3)).astype(np.int8)
    stage = OutputStage(bias=rng.integers(-5000, 5000, 24).astype(np.int32),
                        requantize=ScaleRequantize(rng.uniform(1e-4, 3e-4, 24).astype(np.float32), 3, "uint8"),
                        relu=True, residual=ResidualAdd(0.7, 1.1, -2.5, "uint8", (0, 255), 0, "uint8"))
    residual = rng.integers(0, 256, (1, 11, 11, 24)).astype(np.uint8)
    w16 = next(k for k in selection.int8_candidates("avx2") if k.spec.types == "w16")

    def run(use_winograd):
        op = conv2d(w, x.shape, "NHWC", 1, 1, stage=stage, pad_value=9, kernel=w16, use_winograd=use_winograd)
        args = op.args(x)
        args.insert(-1, tvm.runtime.tensor(residual.reshape(op.out_shape)))
        op.module["main"](*args)
        return op.out.numpy().reshape(op.result_shape)
    direct, transformed = run(False), run(True)
    assert len(np.unique(direct)) > 50
    np.testing.assert_array_equal(transformed, direct)


def test_a_weights_outer_layer_reads_each_column_tiles_weights_once_and_in_order():
    """A deep layer with few tiles (7x7 output: 16 tiles, 4x more columns than rows, as ResNet-18's
    7x7x512 layers): each column tile's transformed weights are one contiguous block over the 16
    positions (U[g, n, k] at [n // nr, g, k // q, n % nr, k % q]), and its 16 products are computed for
    every row tile, position by position, before the output stage walks the row tiles."""
    kernel = next(k for k in s16_kernels() if k.spec.mr == 4)
    w = np.random.default_rng(3).integers(-128, 128, (64, 64, 3, 3)).astype(np.int8)
    mod, constants = winograd.build(te.placeholder((1, 7, 7, 64), "uint8", name="data"), w, (1, 1, 1, 1), (7, 7),
                                    OutputStage(), kernel, 0)
    nr, q = kernel.spec.nr, Tile.of(kernel).group
    g = winograd.STRIDE_1.weight
    u = np.einsum("xi,ocij,yj->xyoc", g, w.astype(np.int64), g).reshape(16, 64, 64)
    want = u.reshape(16, 64 // nr, nr, 64 // q, q).transpose(1, 0, 3, 2, 4)
    np.testing.assert_array_equal(constants[0], want)
    sch = s_tir.Schedule(mod)
    extents = [int(sch.get(loop).extent) for loop in sch.get_loops(sch.get_sblock("gemm_o"))]
    assert extents == [64 // nr, 16, 16 // kernel.spec.mr], extents


def test_an_avx2_only_host_takes_winograd_for_3x3_stride_1_and_wide_stride_2_and_not_otherwise(monkeypatch):
    """Stride 2 by Winograd where the layer has at least ``STRIDED_FLOOR`` input channels and 2x2 output
    tiles (``strided_pays``): 32 channels at 12x12 (36 tiles), not 16 channels nor 8x8 (16 tiles)."""
    live = host.model()
    monkeypatch.setattr(host, "model", lambda: host.restricted(live, "avx2"))

    def names(shape, stride=1, layout="NHWC"):
        channels = shape[3] if layout == "NHWC" else shape[1]
        built = build_conv2d(np.ones((16, channels, 3, 3), np.int8), shape, layout, stride, 1)
        return built.mod.script()
    assert "int8_s16" in names((1, 8, 8, 16))
    assert "int8_s16" in names((1, 24, 24, 32), stride=2)
    assert "int8_s16" not in names((1, 24, 24, 16), stride=2)
    assert "int8_s16" not in names((1, 16, 16, 32), stride=2)
    assert "int8_s16" not in names((1, 16, 8, 8), layout="NCHW")
    w = np.ones((16, 16, 3, 3), np.int8)
    assert "int8_s16" not in build_conv2d(w, (1, 8, 8, 16), "NHWC", 1, 1, use_winograd=False).mod.script()


def test_avx512bw_s16_tiles_run_winograd_on_a_skylake_sp_host_model(monkeypatch):
    """AVX-512BW without VNNI (Skylake-SP: the host model restricted to it) takes Winograd on the zmm s16
    tiles, exact against numpy; hosts without AVX-512BW skip, naming the flag."""
    live = host.model()
    if why := host.lacks("avx512bw", live.flags):
        pytest.skip(why)
    monkeypatch.setattr(host, "model", lambda: host.restricted(live, "avx2,avx512f,avx512bw,avx512vl"))
    rng = np.random.default_rng(4)
    x = rng.integers(0, 256, (1, 9, 9, 40)).astype(np.uint8)
    w = rng.integers(-128, 128, (48, 40, 3, 3)).astype(np.int8)
    built = build_conv2d(w, x.shape, "NHWC", 1, 1)
    assert "int8_s16" in built.mod.script() and "avx512" in built.mod.script()
    np.testing.assert_array_equal(built.compile()(x), conv_reference(x, w, "NHWC", 1, 1, 1))


def test_inspect_names_the_winograd_layers(monkeypatch, tmp_path):
    """``qsynth inspect``'s kernel column on an AVX2-only host model: the s16 tile and Winograd for each
    3x3 stride-1 convolution of the ONNX graph, the int8 tile and how it reads its input for the others."""
    import onnx
    from tvm_integration.bench import int8_models
    from tvm_integration.qnn.runtime.report import layers
    live = host.model()
    monkeypatch.setattr(host, "model", lambda: host.restricted(live, "avx2"))
    path = int8_models.quantize(int8_models.resnet(32, (8, 16, 16, 32), 10), tmp_path / "tiny.int8.onnx")
    model = onnx.load(path)
    convs = [{a.name: onnx.helper.get_attribute_value(a) for a in n.attribute} for n in model.graph.node
             if n.op_type == "Conv"]
    stride_1 = sum(c["kernel_shape"] == [3, 3] and c.get("strides", [1, 1]) == [1, 1] and c.get("group", 1) == 1
                   for c in convs)
    rows = [r for r in layers(model) if r.kind == "conv2d"]
    by_winograd = [r for r in rows if "Winograd" in r.kernel]
    assert len(rows) == len(convs) and 0 < len(by_winograd) == stride_1
    assert all(r.kernel.startswith("int8_s16_") and r.shape.endswith("x3x3") for r in by_winograd)
    assert all(("in place" in r.kernel or "im2col" in r.kernel) for r in rows if r not in by_winograd)
