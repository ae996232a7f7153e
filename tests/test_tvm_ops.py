"""int8 dense and conv2d in TVM, tensorized with the cached kernels, against numpy on random tensors."""
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import tvm
from hypothesis import given, settings, strategies as st

from conftest import HOST_RUNS, skip_if
from tvm_integration.kernels import int8, selection, tuning
from isa_specs.features import REGISTER_FILES
from tvm_integration.ops import depthwise, direct
from tvm_integration.ops.conv2d import build_conv2d, conv2d, reads_in_place, space_to_depth
from tvm_integration.ops.gemm import Tile, weights_outer
from tvm_integration.ops.dense import dense
from tvm_integration.ops.output_stage import FixedPointRequantize, OutputStage, ScaleRequantize

HOST_KERNEL = HOST_RUNS.int8
pytestmark = skip_if(HOST_RUNS.int8_why)

RNG = np.random.default_rng(13)
RANGES = {"uint8": (0, 256), "int8": (-128, 128)}


def random(shape, dtype):
    lo, hi = RANGES[dtype]
    return RNG.integers(lo, hi, shape).astype(dtype)


def conv_reference(x, w, layout, stride, pad, groups):
    """Direct convolution in int64 numpy, NCHW internally."""
    x = x if layout == "NCHW" else x.transpose(0, 3, 1, 2)
    x = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    o, cg, kh, kw = w.shape
    oh, ow = (x.shape[2] - kh) // stride + 1, (x.shape[3] - kw) // stride + 1
    og = o // groups
    out = np.zeros((x.shape[0], o, oh, ow), np.int64)
    for i in range(kh):
        for j in range(kw):
            window = x[:, :, i:i + stride * oh:stride, j:j + stride * ow:stride]
            for g in range(groups):
                out[:, g * og:(g + 1) * og] += np.einsum(
                    "bchw,oc->bohw", window[:, g * cg:(g + 1) * cg], w[g * og:(g + 1) * og, :, i, j].astype(np.int64))
    out = out.astype(np.int32)         # int32 wrap-around, as the accumulators
    return out if layout == "NCHW" else out.transpose(0, 2, 3, 1)


def dense_reference(x, w):
    return (x.astype(np.int64) @ w.astype(np.int64).T).astype(np.int32)


# ---------------------------------------------------------------- dense
@pytest.mark.parametrize("m,n,k,dtype", [(16, 96, 64, "uint8"), (13, 50, 37, "uint8"), (9, 49, 17, "int8"),
                                         (1, 1, 1, "int8"),
                                         (10, 64, 2048, "uint8")])   # packed rows 2 KiB apart: realigned
def test_dense(m, n, k, dtype):
    w, x = random((n, k), "int8"), random((m, k), dtype)
    assert np.array_equal(dense(w, m, dtype)(x), dense_reference(x, w))


@pytest.fixture(scope="module")
def dense_s8():
    return dense(np.full((50, 40), -128, np.int8), 10, "int8")


def test_minus_128_squared_and_u8_at_least_128(dense_s8):
    x = np.full((10, 40), -128, np.int8)
    assert np.all(dense_s8(x) == 40 * 128 * 128)
    w = random((50, 40), "int8")
    x = RNG.integers(128, 256, (10, 40)).astype(np.uint8)
    assert np.array_equal(dense(w, 10, "uint8")(x), dense_reference(x, w))


@settings(max_examples=6)
@given(st.integers(1, 20), st.integers(1, 100), st.integers(1, 70), st.sampled_from(["uint8", "int8"]))
def test_dense_any_shape(m, n, k, dtype):
    w, x = random((n, k), "int8"), random((m, k), dtype)
    assert np.array_equal(dense(w, m, dtype)(x), dense_reference(x, w))


def test_plain_tir_schedule_computes_the_same():
    w, x = random((50, 37), "int8"), random((11, 37), "int8")
    assert np.array_equal(dense(w, 11, "int8", use_kernel=False)(x), dense_reference(x, w))


# ---------------------------------------------------------------- conv2d
CONVS = [  # layout, C, O, kernel, stride, padding, groups, dtype
    ("NHWC", 16, 32, 1, 1, 0, 1, "uint8"),
    ("NCHW", 24, 20, 1, 2, 0, 1, "int8"),
    ("NHWC", 5, 7, 3, 1, 1, 1, "int8"),
    ("NCHW", 16, 50, 3, 1, 1, 1, "uint8"),
    ("NHWC", 8, 16, 3, 2, 1, 1, "uint8"),
    ("NCHW", 3, 16, 7, 2, 3, 1, "uint8"),
    ("NHWC", 3, 8, 7, 2, 3, 1, "int8"),
    ("NCHW", 8, 12, 3, 1, 1, 2, "int8"),
    ("NHWC", 12, 8, 1, 1, 0, 4, "uint8"),
    ("NHWC", 8, 8, 3, 1, 1, 8, "uint8"),      # depthwise
    ("NCHW", 16, 16, 3, 2, 1, 16, "int8"),    # depthwise, stride 2
    ("NHWC", 16, 16, 3, 2, 1, 16, "int8"),
    ("NCHW", 8, 8, 3, 1, 1, 8, "uint8"),
    ("NHWC", 24, 20, 1, 2, 0, 1, "int8"),      # unpadded: packed from the input itself
    ("NHWC", 5, 7, 3, 1, 0, 1, "uint8"),       # unpadded, but the packed runs pass the input's end
]


@pytest.mark.parametrize("layout,c,o,ksize,stride,pad,groups,dtype", CONVS)
def test_conv2d(layout, c, o, ksize, stride, pad, groups, dtype):
    hw = 9
    shape = (1, c, hw, hw) if layout == "NCHW" else (1, hw, hw, c)
    x, w = random(shape, dtype), random((o, c // groups, ksize, ksize), "int8")
    out = conv2d(w, shape, layout, stride, pad, groups, dtype)(x)
    assert np.array_equal(out, conv_reference(x, w, layout, stride, pad, groups))


def first_fit(tiles, channels: int, width: int) -> tuple[int, int]:
    return next((w, c) for w, c in tiles if channels % w == 0 and width % c == 0)


def test_depthwise_tiles_on_avx512_are_register_tiles_order():
    """AVX-512's 32 zmm hold every tile's accumulators in half the file: the tile REGISTER_TILES' order
    gives, on any shape."""
    avx512 = depthwise.fitting(depthwise.REGISTER_TILES, REGISTER_FILES["avx512"])
    assert all(first_fit(avx512, c, w) == first_fit(depthwise.REGISTER_TILES, c, w)
               for c in range(1, 97) for w in range(1, 113))


@pytest.mark.parametrize("c,hw,stride,tile", [(48, 14, 1, (8, 7)), (48, 28, 2, (8, 7)), (32, 16, 1, (8, 4)),
                                              (20, 16, 1, (4, 4))])
def test_depthwise_on_avx2_register_tiles(c, hw, stride, tile):
    """AVX2's 16 ymm: at most 7 accumulators, the most columns first (8 channels x 7 columns, 8 x 4 where 7
    does not divide the row; the 16 x 8 tile spilled its 16), the layer computed as numpy does on this
    host's tile."""
    out_width = (hw - 1) // stride + 1
    assert first_fit(depthwise.fitting(depthwise.REGISTER_TILES, REGISTER_FILES["avx2"]), c, out_width) == tile
    shape = (1, hw, hw, c)
    x, w = random(shape, "uint8"), random((c, 1, 3, 3), "int8")
    out = conv2d(w, shape, "NHWC", stride, 1, c, "uint8")(x)
    assert np.array_equal(out, conv_reference(x, w, "NHWC", stride, 1, c))


@pytest.mark.parametrize("stride,padding,copied", [(1, 0, False), (2, 0, False), (1, 1, True)])
def test_unpadded_1x1_packs_from_the_input_without_a_copy(stride, padding, copied):
    built = build_conv2d(random((32, 64, 1, 1), "int8"), (1, 14, 14, 64), "NHWC", stride, padding)
    assert ('T.sblock("pad")' in built.mod.script()) == copied


def test_space_to_depth_only_where_it_packs_more_useful_bytes():
    assert space_to_depth((64, 3, 7, 7), 3, (2, 2), 16) == (2, 2)      # stem: 147 of 192 bytes, not of 224
    assert space_to_depth((64, 64, 3, 3), 64, (2, 2), 16) == (1, 1)    # rows are whole K steps already
    assert space_to_depth((64, 3, 7, 7), 3, (1, 1), 16) == (1, 1)


def test_conv2d_batch_and_plain_tir():
    shape = (2, 6, 6, 8)
    x, w = random(shape, "uint8"), random((10, 8, 3, 3), "int8")
    for use_kernel in (True, False):
        out = conv2d(w, shape, "NHWC", 1, 1, 1, "uint8", use_kernel=use_kernel)(x)
        assert np.array_equal(out, conv_reference(x, w, "NHWC", 1, 1, 1))


def tile_weights(kernel, shape):
    """Random int8 weights in the range ``kernel`` is proved for (the u8r7 tile's [-64, 64]): the
    direct-conv tests check the schedule, not packing.clamped's correction of weights outside it
    (test_avx2_exact.py), which for half of them cost that tile 128 s of the suite."""
    lo, hi = kernel.b_range
    return RNG.integers(max(lo, -128), min(hi, 127) + 1, shape).astype(np.int8)


def tile_families() -> list:
    """The host's int8 tiles, one per family (operand types, columns, K step), the one of most rows:
    tiles of a family differ only in their row count, which the direct-conv tests below size their
    geometry by (on the Zen 3 host 5 of 10 tiles, 40 s of the suite's time)."""
    families = {}
    for kernel in selection.int8_candidates("host"):
        key = (kernel.spec.types, kernel.spec.nr, kernel.spec.k)
        if key not in families or kernel.spec.mr > families[key].spec.mr:
            families[key] = kernel
    return list(families.values())


@pytest.mark.parametrize("kernel", tile_families(), ids=lambda k: f"{k.spec.mr}x{k.spec.nr}x{k.spec.k}")
def test_direct_conv2d_reads_the_padded_input_in_place(kernel):
    """Output rows of whole row tiles, or of 2 mr - 2 pixels rounded up to them (the last tile's
    extra pixels computed, not written): the kernel reads the window rows where they lie
    (direct.py), at stride 1 and 2, signed input padded with its zero point, batch 2, and as plain
    TIR. Winograd is held off: the AVX2 tiles would take it at stride 1, and this is the direct operator."""
    mr = kernel.spec.mr
    for hw, stride, dtype, c, pad_value in ((mr, 1, "uint8", 16, 0), (2 * mr, 2, "int8", 32, -3),
                                            (2 * mr - 2, 1, "int8", 16, 5), (4 * mr - 4, 2, "uint8", 16, 0)):
        shape = (2, 3, hw, c)
        x, w = random(shape, dtype), tile_weights(kernel, (20, c, 3, 3))
        assert direct.applies(Tile.of(kernel), w.shape, c, "NHWC", 1) and not direct.flat(Tile.of(kernel), hw // stride)
        padded = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)), constant_values=pad_value)
        want = conv_reference(padded, w, "NHWC", stride, 0, 1)
        for use_kernel in (True, False):
            op = conv2d(w, shape, "NHWC", stride, 1, 1, dtype, kernel=kernel, use_kernel=use_kernel, pad_value=pad_value,
                        in_place=True, use_winograd=False)
            assert np.array_equal(op(x), want)


@pytest.mark.parametrize("tile, out_hw, limit, in_place", (
    (Tile(5, 16, 2), (7, 7), 1.1, False),      # flat: 7 rows of 9 pixels (2 padding columns each) = 65, im2col 50
    (Tile(4, 16, 8), (7, 7), 1.1, True),       # rows rounded up to 8: 56, im2col 52 (7.7% more)
    (Tile(6, 16, 8), (7, 7), 1.1, False),      # flat: 63 rounded up to 66, im2col 54
    (Tile(5, 16, 2), (56, 56), 1.1, True),     # rows rounded up to 60: 3360, im2col 3140 (7.0% more)
    (Tile(5, 16, 2), (14, 14), 1.1, True),     # 15 per row: 210, im2col 200
    (Tile(32, 32, 64), (7, 7), 1.1, True),     # flat: 63 rounded up to 64, as im2col's 49
    (Tile(32, 32, 64), (56, 56), 1.1, False),  # rows rounded up to 64: 3584, im2col 3136 (14% more)
    (Tile(32, 32, 64), (56, 56), None, True),  # no limit: in place wherever direct.py applies
    (Tile(14, 16, 16), (7, 7), 1.1, False),    # flat: 63 rounded up to 70, im2col 56
), ids=str)
def test_in_place_pays_within_its_limit_of_more_pixels_than_im2col(tile, out_hw, limit, in_place):
    """direct.pays on a 3x3 window, stride 1, padding 1: the direct GEMM's computed pixels against im2col's
    (the output's pixels rounded up to whole row tiles), counted by hand in the cases' comments."""
    assert direct.pays(tile, out_hw[1], (1, 1, 1, 1), 3, 1, out_hw, limit) == in_place


def test_only_measured_tile_kinds_limit_the_pixels_in_place():
    """conv2d.reads_in_place by tile kind (stand-ins of the kernels: their ISA, types and shape): AVX2's
    exact tiles (measured on Zen 3) take im2col for ResNet-18's 7x7x512 layer and read its 56x56x64 one
    in place (7% more pixels); an AMX 32x32 tile, not measured, reads the 56x56x64 one in place though its
    rows of 56 are rounded up to 64 (14% more), as before the limit."""
    def kernel(isa, types, mr, nr, k, group, b_dtype):
        return SimpleNamespace(spec=SimpleNamespace(isa=isa, types=types, mr=mr, nr=nr, k=k), group=group,
                               b_dtype=b_dtype)
    c2, c12 = ((64, 64, 3, 3), (1, 56, 56, 64)), ((512, 512, 3, 3), (1, 7, 7, 512))
    for exact in (kernel("avx2", "w16", 5, 16, 2, 2, "int16"), kernel("avx2", "s8s7", 5, 16, 8, 4, "int8")):
        assert reads_in_place(exact, *c2, "NHWC", 1, 1, 1) and not reads_in_place(exact, *c12, "NHWC", 1, 1, 1)
    assert reads_in_place(kernel("amx", "u8s8", 32, 32, 64, 4, "int8"), *c2, "NHWC", 1, 1, 1)


@pytest.mark.parametrize("kernel", tile_families(), ids=lambda k: f"{k.spec.mr}x{k.spec.nr}x{k.spec.k}")
def test_narrow_output_rows_take_im2col_where_in_place_would_not_pay(kernel):
    """ResNet-18's 7x7x512 layers in small (7x7, 64 channels, 40 outputs, batch 2, requantized): the
    operator reads in place where direct.pays within the tile kind's limit (the im2col packing then is
    absent from the module), else packs im2col; both paths equal numpy. Winograd, which AVX2's tiles
    would take for these (test_winograd.py), is held off: this is the direct operator's choice."""
    shape = (2, 7, 7, 64)
    x, w = random(shape, "uint8"), tile_weights(kernel, (40, 64, 3, 3))
    stage = OutputStage(bias=RNG.integers(-5000, 5000, 40).astype(np.int32), requantize=ScaleRequantize(0.002, 3, "uint8"))
    want = requantize_onnxruntime(conv_reference(x, w, "NHWC", 1, 1, 1) + stage.bias, 0.002, 3, 0, 255)
    limit = direct.PIXELS_LIMIT.get((kernel.spec.isa, kernel.spec.types))
    pays = direct.pays(Tile.of(kernel), 7, (1, 1, 1, 1), 3, 1, (7, 7), limit)
    built = build_conv2d(w, shape, "NHWC", 1, 1, stage=stage, kernel=kernel, use_winograd=False)
    assert ('"pack"' in built.mod.script()) != pays
    for in_place in (None, not pays):
        op = conv2d(w, shape, "NHWC", 1, 1, 1, "uint8", stage, kernel=kernel, in_place=in_place, use_winograd=False)
        assert np.array_equal(op(x), want)


@pytest.mark.parametrize("ksize", (1, 3), ids=("im2col", "direct"))
@pytest.mark.parametrize("kernel", {k.spec.isa: k for k in reversed(selection.int8_candidates("host", depth=576))}.values(),
                         ids=lambda k: k.intrin)
def test_tensorized_tile_does_not_zero_its_output_in_memory(kernel, ksize):
    """The kernels start from zeroed tiles (gemm.tensorize_tile): the tensorized block keeps no init,
    which would zero C in memory before every call, and the product is still exact."""
    shape = (1, 14, 14, 64)
    x, w = random(shape, "uint8"), random((32, 64, ksize, ksize), "int8")
    assert "T.init()" not in build_conv2d(w, shape, "NHWC", 1, ksize // 2, kernel=kernel, use_winograd=False).mod.script()
    op = conv2d(w, shape, "NHWC", 1, ksize // 2, 1, "uint8", kernel=kernel, use_winograd=False)
    assert np.array_equal(op(x), conv_reference(x, w, "NHWC", 1, ksize // 2, 1))


@pytest.mark.parametrize("case", ("many-columns", "weights-beyond-l1", "weights-streamed"))
@pytest.mark.parametrize("kernel", tile_families(), ids=lambda k: f"{k.spec.mr}x{k.spec.nr}x{k.spec.k}")
def test_direct_conv2d_runs_column_tiles_outermost(kernel, case):
    """Output rows of whole row tiles, column tiles outermost (direct.columns_first), each tile's
    output stage after it, batch 2, requantized: with 4x more columns than pixels (ResNet-18's 7x7x512
    layers, gemm.weights_outer; three column tiles, the last partly padding), with weights beyond
    half of L1 (64 channels, 51 or more columns: two and a part of the 16-wide tiles, enough output rows that the columns are
    fewer than 4x the pixels), and with weights beyond direct.STREAMED_BYTES (ResNet-18's 14x14x256). Winograd
    is held off (the AVX2 tiles would take it for these 3x3 stride-1 layers: then this tested winograd.py)."""
    mr, nr = kernel.spec.mr, kernel.spec.nr
    wide = case == "many-columns"
    c, o = {"many-columns": (16, max(12 * mr, 2 * nr) + 3), "weights-beyond-l1": (64, max(2 * nr, 48) + 3),
            "weights-streamed": (128, max(256, 2 * nr) + 3)}[case]
    npad = -(-o // nr) * nr
    rows = 3 if wide else npad // (4 * mr) + 1
    assert (9 * c * npad > direct.STREAMED_BYTES) == (case == "weights-streamed")
    shape = (2, rows, mr, c)
    x, w = random(shape, "uint8"), tile_weights(kernel, (o, c, 3, 3))
    assert not direct.flat(Tile.of(kernel), mr) and direct.columns_first(Tile.of(kernel), 9 * c, npad, rows * mr)
    assert weights_outer(rows * mr, npad) == wide
    stage = OutputStage(bias=RNG.integers(-5000, 5000, o).astype(np.int32), requantize=ScaleRequantize(0.002, 3, "uint8"))
    acc = conv_reference(x, w, "NHWC", 1, 1, 1) + stage.bias
    op = conv2d(w, shape, "NHWC", 1, 1, 1, "uint8", stage, kernel=kernel, in_place=True, use_winograd=False)
    assert np.array_equal(op(x), requantize_onnxruntime(acc, 0.002, 3, 0, 255))


@pytest.mark.parametrize("depth", (256, 2048))
def test_1x1_conv2d_with_4x_more_columns_adds_its_residual_in_either_order(depth):
    """ResNet-50's expanding 1x1 layers with their shortcut add fused (1024 columns, 4x more than the
    pixels): up to 1 MB of weights run the row tiles outermost, larger ones the column tiles
    (gemm.weights_outer); either way each output is onnxruntime's requantize then QLinearAdd of the
    residual, in numpy. Both orders on the host's tile: 256 or 512 KB of weights at depth 256, 2 or 4 MB at
    2048."""
    from tvm_integration.ops.output_stage import ResidualAdd
    from tvm_integration.qnn.semantics.arithmetic import fma32
    x, w = random((1, 4, 4, depth), "uint8"), random((1024, depth, 1, 1), "int8")
    residual = random((1, 4, 4, 1024), "uint8")
    add = ResidualAdd(0.6, 0.9, -3.5, "uint8", (0, 255), 0, "uint8")
    stage = OutputStage(bias=RNG.integers(-5000, 5000, 1024).astype(np.int32),
                        requantize=ScaleRequantize(0.0004, 3, "uint8"), residual=add)
    op = conv2d(w, x.shape, "NHWC", 1, 0, 1, "uint8", stage)
    args = op.args(x)
    args.insert(-1, tvm.runtime.tensor(residual.reshape(op.out_shape)))
    op.module["main"](*args)
    result = requantize_onnxruntime(conv_reference(x, w, "NHWC", 1, 0, 1) + stage.bias, 0.0004, 3, 0, 255)
    expected = np.clip(np.rint(fma32(result.astype(np.float32), np.float32(0.6), fma32(
        residual.astype(np.float32), np.float32(0.9), np.float32(-3.5)))), 0, 255)
    assert len(np.unique(expected)) > 50
    np.testing.assert_array_equal(op.out.numpy().reshape(op.result_shape), expected)


@pytest.mark.parametrize("stride", (1, 2))
@pytest.mark.parametrize("kernel", tile_families(), ids=lambda k: f"{k.spec.mr}x{k.spec.nr}x{k.spec.k}")
def test_direct_conv2d_runs_partial_row_tiles_over_the_flat_pixel_order(kernel, stride):
    """Output rows of mr + 1 pixels: the tiles' rows run on across output rows over the padded
    input's flat pixel order (direct.flat; at stride 2 over planes of even and odd rows, the padded
    width odd) and the last tile reads padding rows past the input; a 5x3 window, asymmetric
    padding, signed input padded with its zero point, requantized, batch 2, and as plain TIR."""
    mr, c = kernel.spec.mr, 16
    shape, pads = (2, 7, stride * mr + 1, c), (2, 1, 2, 1)
    x, w = random(shape, "int8"), tile_weights(kernel, (12, c, 5, 3))
    padded = np.pad(x, ((0, 0), (2, 2), (1, 1), (0, 0)), constant_values=-7)
    stage = OutputStage(bias=RNG.integers(-5000, 5000, 12).astype(np.int32), requantize=ScaleRequantize(0.003, 5, "int8"))
    acc = conv_reference(padded, w, "NHWC", stride, 0, 1) + stage.bias
    assert acc.shape[2] == mr + 1 and direct.applies(Tile.of(kernel), w.shape, c, "NHWC", 1)
    assert direct.flat(Tile.of(kernel), mr + 1)
    want = requantize_onnxruntime(acc, 0.003, 5, -128, 127)
    for use_kernel in (True, False):
        op = conv2d(w, shape, "NHWC", stride, pads, 1, "int8", stage, kernel=kernel, use_kernel=use_kernel, pad_value=-7,
                    in_place=True)
        assert np.array_equal(op(x), want)


def test_conv2d_refuses_weights_that_do_not_fit():
    with pytest.raises(ValueError, match="groups"):
        conv2d(random((8, 3, 3, 3), "int8"), (1, 8, 9, 9), "NCHW", groups=2)
    with pytest.raises(ValueError, match="does not fit"):
        conv2d(random((8, 8, 7, 7), "int8"), (1, 8, 3, 3), "NCHW")


# ---------------------------------------------------------------- output stage
def requantize_onnxruntime(acc, scale, zero_point, lo, hi):
    """MLAS: float32(acc) * scale in float32, round half to even, + zero point, saturate."""
    return np.clip(np.rint(acc.astype(np.float32) * np.float32(scale)) + zero_point, lo, hi)


def requantize_tflite(acc, multiplier, shift, zero_point, lo, hi):
    """TFLite MultiplyByQuantizedMultiplier (reference_ops), element by element in Python ints."""
    def one(x, m, s):
        x = ((x << max(s, 0)) + 2**31) % 2**32 - 2**31           # int32 wrap-around of the left shift
        ab = x * m
        nudged = ab + ((1 << 30) if ab >= 0 else 1 - (1 << 30))
        high = 2**31 - 1 if x == m == -2**31 else (abs(nudged) >> 31) * (1 if nudged >= 0 else -1)
        right = max(-s, 0)
        mask = (1 << right) - 1
        threshold = (mask >> 1) + (1 if high < 0 else 0)
        return (high >> right) + (1 if (high & mask) > threshold else 0)
    out = np.array([one(int(a), int(m), int(s)) for a, m, s in zip(acc.ravel(), np.broadcast_to(multiplier, acc.shape).ravel(),
                                                                   np.broadcast_to(shift, acc.shape).ravel())])
    return np.clip(out.reshape(acc.shape) + zero_point, lo, hi)


IDENTITY = np.array([[1], [-1], [3]], np.int8)      # dense columns: acc = x, -x, 3x


def identity_dense(stage):
    """x (m x 1, u8) -> acc[:, n] = x * IDENTITY[n] + bias: the accumulator is chosen directly."""
    return dense(IDENTITY, 256, "uint8", stage)


X_ALL = np.arange(256, dtype=np.uint8).reshape(256, 1)
ACC = X_ALL.astype(np.int32) * IDENTITY.astype(np.int32).T


def test_bias_and_relu_int32():
    bias = np.array([-100, 7, 0], np.int32)
    out = identity_dense(OutputStage(bias=bias, relu=True))(X_ALL)
    assert out.dtype == np.int32 and np.array_equal(out, np.maximum(ACC + bias, 0))


@pytest.mark.parametrize("out_dtype,zero_point", [("uint8", 3), ("int8", -5)])
def test_scale_requantize_rounds_ties_to_even(out_dtype, zero_point):
    scale = np.array([0.5, 0.5, 0.25], np.float32)            # every odd acc (and 3x/4 with x = 2 mod 4) is a tie
    bias = np.array([1, -2, 0], np.int32)
    stage = OutputStage(bias=bias, requantize=ScaleRequantize(scale, zero_point, out_dtype))
    out = identity_dense(stage)(X_ALL)
    lo, hi = (0, 255) if out_dtype == "uint8" else (-128, 127)
    assert out.dtype == np.dtype(out_dtype)
    assert np.array_equal(out, requantize_onnxruntime(ACC + bias, scale, zero_point, lo, hi))


def test_scale_requantize_relu_and_clamp():
    stage = OutputStage(requantize=ScaleRequantize(0.37, 10, "uint8"), relu=True, clamp=(0, 60))
    out = identity_dense(stage)(X_ALL)
    assert np.array_equal(out, requantize_onnxruntime(ACC, 0.37, 10, 10, 60))


@pytest.mark.parametrize("multiplier,shift", [(1 << 30, 0), (1 << 30, -2), (1518500250, 1), (-2**31, 0),
                                              (np.array([1 << 30, 1431655765, 2**31 - 1]), np.array([-1, -3, 0]))])
def test_fixed_point_requantize_is_tflite(multiplier, shift):
    stage = OutputStage(bias=np.array([0, 1, -1], np.int32), requantize=FixedPointRequantize(multiplier, shift, -3, "int8"))
    out = identity_dense(stage)(X_ALL)
    expect = requantize_tflite(ACC + np.array([0, 1, -1]), np.asarray(multiplier, np.int64), np.asarray(shift, np.int64),
                               -3, -128, 127)
    assert np.array_equal(out, expect)


def test_requantize_of_conv_nchw():
    x, w = random((1, 8, 5, 5), "uint8"), random((6, 8, 3, 3), "int8")
    scale = RNG.uniform(1e-4, 1e-3, 6).astype(np.float32)
    stage = OutputStage(bias=RNG.integers(-5000, 5000, 6).astype(np.int32), requantize=ScaleRequantize(scale, 128, "uint8"))
    out = conv2d(w, x.shape, "NCHW", 1, 1, 1, "uint8", stage)(x)
    acc = conv_reference(x, w, "NCHW", 1, 1, 1) + stage.bias[None, :, None, None]
    assert np.array_equal(out, requantize_onnxruntime(acc, scale[None, :, None, None], 128, 0, 255))


# ---------------------------------------------------------------- selection
def test_host_selection_takes_the_best_kernel_the_host_runs():
    assert selection.usable(HOST_KERNEL) is None
    rank = [i for i, (isa, feature) in enumerate(selection.INT8_PREFERENCE)
            if isa == HOST_KERNEL.spec.isa and feature in HOST_KERNEL.features][0]
    for isa, feature in selection.INT8_PREFERENCE[:rank]:
        for kernel in int8.proved_kernels(isa):
            if kernel.spec.types == "u8s8" and feature in kernel.features:
                assert selection.usable(kernel) is not None


def test_unknown_isa_is_refused_and_amx_is_per_shape():
    with pytest.raises(selection.SelectionError, match="unknown ISA"):
        selection.int8_kernel("sse2")
    assert selection.int8_kernel("amx").spec.layout == "tile"
    assert HOST_KERNEL.spec.isa != "amx"      # the host's kind of tile; AMX is chosen per operator depth


@pytest.mark.parametrize("depth,pays", [(16, False), (48, False), (63, False), (64, True), (147, True), (576, True),
                                        (4608, True)])
def test_amx_pays_from_one_64_byte_k_block(depth, pays):
    assert selection.amx_pays(depth) is pays
    assert not selection.amx_pays(depth, groups=13)           # grouped convolutions stay on VNNI


@pytest.mark.parametrize("depth", [32, 576, None])
def test_host_candidates_by_depth(depth):
    """On a host with AMX (and the tile permission) a deep operator takes the AMX tiles first, the
    host's VNNI kind after them (a tuning log may keep it on VNNI); a shallow one and every operator
    elsewhere the host's kind alone; untuned, the first family's least-padding tile."""
    deep = HOST_RUNS.amx is None and depth is not None and selection.amx_pays(depth)
    candidates = selection.int8_candidates("host", depth)
    isas = [k.spec.isa for k in candidates]
    assert isas == sorted(isas, key=lambda i: i != "amx") and set(isas) == ({"amx", HOST_KERNEL.spec.isa} if deep
                                                                              else {HOST_KERNEL.spec.isa})
    chosen = tuning.choose("untuned", candidates, 64, 64, Path("/nonexistent/log.json"), depth=depth or 64)
    assert chosen.spec.isa == ("amx" if deep else HOST_KERNEL.spec.isa)
