"""Bitserial dense and conv2d on the proved NEON tiles (issue 14): compiled for AArch64 and run under
qemu-aarch64 (tvm_integration/cross.py), against numpy references from the unpacked values. The
NEON tiles add in 16-bit lanes, so a long K runs in chunks (the acc tiles' in the operator, the lanes
tiles' inside their _gemm): the largest values of a configuration make a dot product past 16 bits,
which only the chunks get right."""
import dataclasses

import numpy as np
import pytest

pytest.importorskip("tvm")

from helpers_bitserial import conv_reference, random_weights  # noqa: E402
from tvm_integration import cross, mca  # noqa: E402
from tvm_integration.bitserial_kernels import gemm_kernels, select, word_kernels  # noqa: E402
from tvm_integration.ops.bitserial_conv2d import bitserial_conv2d  # noqa: E402
from tvm_integration.ops.bitserial_dense import bitserial_dense  # noqa: E402
from tvm_integration.ops.bitserial_gemm import Config, chunks, tile_for  # noqa: E402
from tvm_integration.output_stage import OutputStage, ScaleRequantize  # noqa: E402

pytestmark = [pytest.mark.qemu, pytest.mark.skipif(cross.missing_tools() is not None,
                                                   reason=str(cross.missing_tools()))]


def set_extremes(config, x, w):
    """``x`` (a view of the input) and output channel 0 of w at their largest values (the largest dot
    product), hybrid output channel 1 at its most negative (the most negative one)."""
    x[...] = 2 ** config.abits - 1
    w[0] = 2 ** config.wbits - 1
    if config.encoding == "hybrid":
        w[1] = -(2 ** config.wbits - 1)


DENSE = [  # (config, m, n, k): m not whole column tiles, n not whole row tiles, k not whole words
    (Config(1, 1, "unipolar"), 5, 20, 577),
    (Config(1, 1, "hybrid"), 5, 9, 200),
    (Config(2, 3, "unipolar"), 5, 6, 3300),     # 21 * 3300 > 2**16: two chunks
    (Config(1, 3, "hybrid"), 3, 5, 5000),       # 7 * 5000 > 2**15: two chunks
    (Config(3, 3, "hybrid"), 3, 3, 700),        # a one-row tile, 49 * 700 > 2**15
]


@pytest.mark.parametrize("kernel_layout", ["lanes", "acc"])
@pytest.mark.parametrize("config, m, n, k", DENSE, ids=[f"a{c.abits}w{c.wbits}_{c.encoding}_k{k}" for c, _, _, k in DENSE])
def test_dense_on_neon_equals_numpy(config, m, n, k, kernel_layout):
    rng = np.random.default_rng(11)
    w = random_weights(rng, config, (n, k))
    x = rng.integers(0, 2 ** config.abits, (m, k)).astype(np.uint8)
    set_extremes(config, x[0], w)
    op = bitserial_dense(w, m, config, isa="neon", kernel_layout=kernel_layout)
    assert isinstance(op, cross.QemuOperator) and "bl\tqs_" not in op.assembly      # the tile inlined
    np.testing.assert_array_equal(op(x), x.astype(np.int64) @ w.T)


def test_lanes_tile_past_one_chunk_of_k():
    """The A1W1 lanes tile's 16-bit lanes gain up to 16 a word: 4100 words of ones (65600 in every
    lane of channel 0) wrap unless its _gemm runs K in chunks (4095 words)."""
    config = Config(1, 1, "unipolar")
    assert select("neon", 1, 1, "unipolar").spec.layout == "lanes"
    rng = np.random.default_rng(16)
    w = random_weights(rng, config, (9, 4100 * 64))
    x = rng.integers(0, 2, (2, 4100 * 64)).astype(np.uint8)
    set_extremes(config, x[0], w)
    op = bitserial_dense(w, 2, config, isa="neon")
    np.testing.assert_array_equal(op(x), x.astype(np.int64) @ w.T)


def test_long_k_needs_the_chunks():
    """Without chunks the 16-bit lanes wrap: 21 * 3300 = 69300 comes back as 69300 - 65536."""
    config, kernel = Config(2, 3, "unipolar"), select("neon", 2, 3, "unipolar", "acc")
    assert kernel.spec.out_bits == 16 and chunks(kernel, config, 3300 // 64 + 1) == (2, 26)
    assert chunks(kernel, config, 48) == (1, 48)
    assert chunks(kernel, config, 49)[0] == 2


def test_plain_tir_on_aarch64_equals_numpy():
    """The baseline the NEON tile is measured against: the same schedule in plain TIR, for AArch64."""
    config = Config(2, 1, "hybrid")
    rng = np.random.default_rng(12)
    w = random_weights(rng, config, (7, 11, 3, 3))
    x = rng.integers(0, 4, (1, 6, 5, 11)).astype(np.uint8)
    op = bitserial_conv2d(w, x.shape, config, 2, 1, isa="neon", use_kernel=False)
    assert isinstance(op, cross.QemuOperator)
    np.testing.assert_array_equal(op(x), conv_reference(x, w, 2, 1))


CONVS = [  # (config, input NHWC, weight OIHW, stride, padding)
    (Config(1, 1, "unipolar"), (1, 7, 6, 70), (10, 70, 3, 3), 1, 1),
    (Config(1, 1, "hybrid"), (1, 7, 7, 13), (5, 13, 3, 3), 2, 1),
    (Config(2, 2, "unipolar"), (2, 4, 5, 150), (9, 150, 1, 1), 1, 0),
    (Config(3, 1, "hybrid"), (1, 7, 6, 130), (3, 130, 1, 1), 2, 0),    # a one-row tile
    (Config(2, 3, "hybrid"), (1, 5, 5, 200), (4, 200, 3, 3), 1, 1),    # 21 * 9 * 200 > 2**15: chunks
    (Config(1, 1, "hybrid"), (1, 4, 5, 64), (20, 64, 1, 1), 1, 0),     # one word (ResNet-18 C3's K)
]


@pytest.mark.parametrize("config, shape, wshape, stride, pad", CONVS,
                         ids=[f"a{c.abits}w{c.wbits}_{c.encoding}_{w[2]}x{w[3]}_s{s}" for c, _, w, s, _ in CONVS])
def test_conv2d_nhwc_on_neon_equals_numpy(config, shape, wshape, stride, pad):
    rng = np.random.default_rng(13)
    w = random_weights(rng, config, wshape)
    x = rng.integers(0, 2 ** config.abits, shape).astype(np.uint8)
    set_extremes(config, x[0, :3], w)          # image rows 0-2: whole 3x3 windows at the largest values
    got = bitserial_conv2d(w, shape, config, stride, pad, isa="neon")(x)
    np.testing.assert_array_equal(got, conv_reference(x, w, stride, pad))


SHORT_K = [  # (config, input, weight OIHW, stride, layout): a K of one or two words runs on a word tile
    (Config(1, 1, "unipolar"), (1, 5, 6, 64), (19, 64, 1, 1), 1, "NHWC"),      # one word (ResNet-18 C3's K)
    (Config(1, 1, "hybrid"), (1, 7, 6, 100), (10, 100, 1, 1), 2, "NHWC"),      # two words, 100 channels
    (Config(2, 2, "unipolar"), (1, 6, 5, 40), (9, 40, 1, 1), 2, "NHWC"),       # 40 channels
    (Config(2, 2, "hybrid"), (1, 4, 5, 128), (17, 128, 1, 1), 1, "NHWC"),      # two whole words (C8's K)
    (Config(3, 3, "hybrid"), (2, 3, 5, 70), (8, 70, 1, 1), 1, "NHWC"),         # two images
    (Config(1, 2, "unipolar"), (1, 90, 7, 5), (11, 90, 1, 1), 2, "NCHW"),
]


@pytest.mark.parametrize("config, shape, wshape, stride, layout", SHORT_K,
                         ids=[f"a{c.abits}w{c.wbits}_{c.encoding}_c{w[1]}_s{s}_{lay}" for c, _, w, s, lay in SHORT_K])
def test_short_k_on_a_word_tile_equals_numpy(config, shape, wshape, stride, layout):
    """A K of a word or two runs on the configuration's word tile (its own encoding: no fold), not on
    the lanes tile ``select`` gives, and equals numpy at the largest values too."""
    nchw = layout == "NCHW"
    words = -(-wshape[1] // 64)
    tile = tile_for(select("neon", config.abits, config.wbits, config.encoding), config, words, nchw)
    assert tile.word_tile and tile.spec.encoding == config.encoding and tile.spec.k_bits == 64
    rng = np.random.default_rng(17)
    w = random_weights(rng, config, wshape)
    x = rng.integers(0, 2 ** config.abits, shape).astype(np.uint8)
    nhwc = x.transpose(0, 2, 3, 1) if nchw else x
    set_extremes(config, nhwc[0, :1], w)
    got = bitserial_conv2d(w, shape, config, stride, 0, isa="neon", layout=layout)(x)
    want = conv_reference(nhwc, w, stride, 0)
    np.testing.assert_array_equal(got, want.transpose(0, 3, 1, 2) if nchw else want)


def test_word_tile_runs_a_long_k_in_chunks():
    """A word tile adds in its 16-bit lanes: A3W3 hybrid gains up to 49 * 64 a word, so 11 words of
    the largest values (34496 > 2**15 - 1) run in two chunks, summed in int32, unipolar 22 words
    (68992 > 2**16 - 1) likewise; A1W1 over 130 bits (a partial third word) in one."""
    for config, k in ((Config(3, 3, "hybrid"), 700), (Config(3, 3, "unipolar"), 1400), (Config(1, 1, "unipolar"), 130)):
        kernel = select("neon", config.abits, config.wbits, config.encoding, "tile")
        assert kernel.word_tile and chunks(kernel, config, -(-k // 64))[0] == (1 if k == 130 else 2)
        rng = np.random.default_rng(18)
        w = random_weights(rng, config, (11, k))
        x = rng.integers(0, 2 ** config.abits, (10, k)).astype(np.uint8)
        set_extremes(config, x[0], w)
        op = bitserial_dense(w, 10, config, isa="neon", kernel_layout="tile")
        np.testing.assert_array_equal(op(x), x.astype(np.int64) @ w.T)


def test_output_stage_on_neon():
    """bias, float scale (round half to even), zero point, clamp to u8 — computed on AArch64."""
    config = Config(1, 2, "unipolar")
    rng = np.random.default_rng(14)
    w = random_weights(rng, config, (12, 100))
    x = rng.integers(0, 2, (6, 100)).astype(np.uint8)
    bias = rng.integers(-50, 50, 12).astype(np.int32)
    scale = np.float32(0.37)
    stage = OutputStage(bias=bias, requantize=ScaleRequantize(scale, 100, "uint8"))
    got = bitserial_dense(w, 6, config, stage, isa="neon")(x)
    acc = (x.astype(np.int64) @ w.T + bias).astype(np.float32)
    np.testing.assert_array_equal(got, np.clip(np.rint(acc * scale) + 100, 0, 255).astype(np.uint8))


def test_every_config_has_a_neon_tile():
    for a in (1, 2, 3):
        for w in (1, 2, 3):
            for encoding in ("unipolar", "hybrid"):
                tiles = gemm_kernels("neon", a, w, encoding)
                assert tiles and all(t.spec.cols > 1 and t.spec.out_bits == 16 for t in tiles), (a, w, encoding)
                assert word_kernels("neon", a, w, encoding), (a, w, encoding)


@pytest.mark.parametrize("config, rows, cols", [
    ((1, 1, "unipolar"), 8, 3),       # 19 registers: 3 columns on the same 8 channels as the 8x2 tile
    ((1, 2, "unipolar"), 4, 3),       # the 8x2 tile takes 26 registers
    ((2, 2, "unipolar"), 4, 2),       # more channels than the 2x3 tile
    ((3, 3, "unipolar"), 2, 2),       # the 2x3 tile takes 27 registers
    ((3, 3, "hybrid"), 2, 2),         # both above 24: the one least over (25, not 36)
])
def test_neon_lanes_tile_fits_the_registers_then_has_the_most_channels(config, rows, cols):
    """The lanes tile the NEON operators take (bitserial_kernels._lanes_order; the llvm-mca cycles
    that chose the rule are in its comments)."""
    spec = select("neon", *config, "lanes").spec
    assert (spec.rows, spec.cols) == (rows, cols)


# ---------------------------------------------------------------- llvm-mca estimates (tvm_integration/mca.py)
needs_llvm = pytest.mark.skipif(mca.missing_tools() is not None, reason=str(mca.missing_tools()))


@needs_llvm
@pytest.mark.parametrize("kernel_layout, tile, cnts", [("acc", (8, 2), 3 * 3 * 5 * 16), ("lanes", (8, 3), 2 * 3 * 10 * 12)])
def test_profile_counts_every_popcount_the_tile_runs(kernel_layout, tile, cnts):
    """5 rows x 20 channels x 577 bits on the A1W1 tiles: 3 column tiles of the 8x2 acc tile x 3 row
    tiles x 5 blocks of 16 cnt each; 2 column tiles of the 8x3 lanes tile x 3 row tiles x 10 words of
    12 cnt each. The blocks qemu ran, times their cnt, must add up to exactly that."""
    config = Config(1, 1, "unipolar")
    kernel = select("neon", 1, 1, "unipolar", kernel_layout)
    assert (kernel.spec.rows, kernel.spec.cols) == tile
    rng = np.random.default_rng(15)
    w = random_weights(rng, config, (20, 577))
    x = rng.integers(0, 2, (5, 577)).astype(np.uint8)
    blocks = mca.profile(bitserial_dense(w, 5, config, isa="neon", kernel_layout=kernel_layout), x)
    assert sum(b.runs * b.popcounts for b in blocks) == cnts


def test_a_loop_split_at_a_page_is_costed_as_one_loop():
    """qemu ends a block where code crosses a page: a loop whose first part ran 10 times, its second
    12 (2 entries from elsewhere) is one 10-run loop of both parts and the second part run twice."""
    head = mca.Block(0x1ff8, ("ld1r { v0.2d }, [x0]", "and v1.16b, v0.16b, v2.16b"), 10)
    tail = mca.Block(0x2000, ("cnt v1.16b, v1.16b", "b.ne 0x1ff8 <f+0x8>"), 12)
    joined = mca._joined([head, tail])
    assert [(b.start, len(b.instructions), b.runs, b.is_loop) for b in joined] == [(0x1ff8, 4, 10, True),
                                                                                  (0x2000, 2, 2, False)]
    assert mca._joined([head, dataclasses.replace(tail, start=0x2004)]) == [head, dataclasses.replace(tail, start=0x2004)]


@needs_llvm
def test_block_cycles_of_a_dependency_chain():
    """Four dependent adds: one per cycle on Cortex-A53, so 4 cycles a run; four independent ones
    dual-issue in about half that."""
    chain = mca.Block(0, ("add x0, x0, #0x1",) * 4, 1)
    spread = mca.Block(0, ("add x0, x0, #0x1", "add x1, x1, #0x1", "add x2, x2, #0x1", "add x3, x3, #0x1"), 1)
    dependent, independent = mca.block_cycles([chain, spread], "cortex-a53")
    assert 3.9 <= dependent <= 4.1 and independent <= 2.6
