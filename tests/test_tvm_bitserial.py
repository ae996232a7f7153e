"""Bitserial operators (issue 14) on every ISA with proved tiles: the GEMM-shaped specs, bit-packing,
tile choice, and dense and conv2d (NHWC and NCHW, on the tiles and in plain TIR) against numpy
references computed from the unpacked integer values.

An operator case runs where its ISA does: AVX-512 and AVX2 on an x86 host with the CPU feature (AVX2
operators are built for x86-64-v3, no AVX-512 anywhere in them), NEON compiled for AArch64 and run
under qemu-aarch64 (tvm_integration/qemu/cross.py; marked ``qemu``), ``host`` on the host's first ISA.
The NEON tiles add in 16-bit lanes, so a long K runs in chunks (the acc tiles' in the operator, the
lanes tiles' inside their _gemm): the largest values of a configuration make a dot product past 16
bits, which only the chunks get right; the dense and conv2d cases set them."""
import dataclasses
import functools

import numpy as np
import pytest
import tvm

from conftest import HOST_RUNS, skip_if
from emit import harness as emit_cli
from emit.harness import check_entry
from synth.spec import BitserialSpec, SpecError
from tvm_integration.bench import mca
from tvm_integration.kernels.bitpack import Packing
from tvm_integration.kernels.bitserial import gemm_kernels, word_kernels
from tvm_integration.kernels.selection import bitserial_kernel
from tvm_integration.ops.bitserial_conv2d import bitserial_conv2d
from tvm_integration.ops.bitserial_dense import bitserial_dense, build_bitserial_dense
from tvm_integration.ops.bitserial_gemm import Config, chunks, tile_for
from tvm_integration.ops.output_stage import OutputStage, ScaleRequantize
from tvm_integration.qemu import cross

CPU_FEATURE = {"avx512": "avx512vpopcntdq", "avx2": "avx2"}


@functools.cache
def unavailable(isa: str, kernel: str = "default") -> str | None:
    """Why this host cannot run ``isa``'s operators with ``kernel``, or None: a CPU feature it lacks,
    the qemu and cross tools NEON needs; for ``host``, those of AVX2, its last choice (its plain TIR
    always runs)."""
    if isa == "neon":
        return HOST_RUNS.qemu
    if isa == "host":
        return None if kernel == "plain" or unavailable("avx512") is None else unavailable("avx2")
    return HOST_RUNS.lacks(CPU_FEATURE[isa])


def on(isa: str, kernel: str, *values, id: str):
    """One operator case on ``isa``: skipped with the reason where the host cannot run it."""
    marks = [skip_if(unavailable(isa, kernel))] + [pytest.mark.qemu] * (isa == "neon")
    return pytest.param(isa, kernel, *values, marks=marks, id=f"{isa}-{kernel}-{id}")


def build_options(kernel: str) -> dict:
    """``kernel``: default (``bitserial_kernel``'s tile), lanes, acc or tile (only that layout), plain (plain TIR)."""
    return dict(use_kernel=kernel != "plain", kernel_layout=kernel if kernel in ("lanes", "acc", "tile") else None)


needs_neon = skip_if(unavailable("neon"))
needs_avx512 = skip_if(unavailable("avx512"))


def config_id(config: Config) -> str:
    return f"a{config.abits}w{config.wbits}_{config.encoding}"


def random_weights(rng, config, shape):
    """Unipolar: codes in [0, 2**wbits); hybrid: odd values in [-(2**wbits - 1), 2**wbits - 1]."""
    codes = rng.integers(0, 2 ** config.wbits, shape)
    return codes if config.encoding == "unipolar" else 2 * codes - (2 ** config.wbits - 1)


def set_extremes(config, x, w):
    """``x`` (a view of the input) and output channel 0 of w at their largest values (the largest dot
    product), hybrid output channel 1 at its most negative (the most negative one)."""
    x[...] = 2 ** config.abits - 1
    w[0] = 2 ** config.wbits - 1
    if config.encoding == "hybrid":
        w[1] = -(2 ** config.wbits - 1)


def conv_reference(x, w, stride, pad):
    """NHWC x, OIHW w: the integer convolution, zero padding, in int64."""
    b, h, wd, c = x.shape
    o, _, kh, kw = w.shape
    xp = np.pad(x.astype(np.int64), ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    oh, ow = (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1
    out = np.zeros((b, oh, ow, o), np.int64)
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, i:i + stride * oh:stride, j:j + stride * ow:stride, :]
            out += np.einsum("bhwc,oc->bhwo", patch, w[:, :, i, j].astype(np.int64))
    return out


# ---------------------------------------------------------------- the GEMM-shaped specs
def test_one_column_keeps_the_gemv_key_and_name():
    gemv = BitserialSpec.for_isa("avx512", 1, 1, "unipolar", layout="acc")
    assert "cols" not in gemv.key() and "_n" not in gemv.name.removesuffix("_avx512").split("x")[-1]
    gemm = BitserialSpec.for_isa("avx512", 1, 1, "unipolar", layout="acc", cols=4)
    assert gemm.key()["cols"] == 4 and gemm.name.endswith("_n4_avx512")
    with pytest.raises(SpecError):
        BitserialSpec.for_isa("avx512", 1, 1, "unipolar", layout="tile", cols=2)


def test_gemm_spec_is_the_dot_product_of_every_row_and_column():
    """The spec's reference on numpy lanes, summed as _finish does, = the numpy dot products."""
    from isa_specs.lanes import NumpyBackend
    spec = BitserialSpec("avx2", 2, 1, "hybrid", rows=2, reg_bits=256, out_bits=64, layout="acc", cols=3)
    rng = np.random.default_rng(1)
    B = NumpyBackend()
    planes = {n: rng.integers(0, 256, 32, dtype=np.uint8) for n in spec.input_names if not n.startswith(("acc", "pop"))}
    inputs = [B.from_bytes(planes.get(n, np.zeros(32, np.uint8))[None], 256) for n in spec.input_names]
    outs = dict(zip(spec.accumulator_names, spec.reference(B, inputs)))
    lane_sum = lambda r: int(B.to_bytes(r, 1)[0].view(np.uint64).sum())
    bits = lambda p: np.unpackbits(p, bitorder="little").astype(np.int64)
    for n in range(3):
        x = sum(bits(planes[f"a{k}_{n}"]) << k for k in range(2))
        pop = sum(lane_sum(outs[f"pop{k}_{n}"]) << k for k in range(2))
        for i in range(2):
            w = 2 * bits(planes[f"w0_{i}"]) - 1
            dot = 2 * lane_sum(outs[f"acc0_{i}_{n}"]) + 2 * 2 * lane_sum(outs[f"acc1_{i}_{n}"]) - pop
            assert dot == int(x @ w)


@pytest.mark.parametrize("isa, rows", [("avx512", 16), ("neon", 4)])
def test_lanes_spec_lane_l_is_channel_l_dot_product_with_the_broadcast_word(isa, rows):
    """Lanes layout: 64-bit lane l of w{j}_{r} is channel lanes·r + l's word of K, a{k}_{n} one word
    broadcast; the reference's accumulators (the out_bits lanes within 64-bit lane l added: NEON four
    16-bit lanes), weighted by significance (and the hybrid pop), are per lane the numpy dot product
    of that channel with that column; no sums across channels."""
    from isa_specs.lanes import NumpyBackend
    spec = BitserialSpec.for_isa(isa, 2, 2, "hybrid", layout="lanes", cols=2, rows=rows)
    assert spec.name == f"bitserial_a2w2_hybrid_lanes_{rows}x64_n2_{isa}" and spec.weight_registers == 2
    lanes, dtype = spec.lanes, np.dtype(f"uint{spec.out_bits}")
    rng = np.random.default_rng(7)
    B = NumpyBackend()
    words = {n: rng.integers(0, 2 ** 63, lanes if n.startswith("w") else 1, dtype=np.uint64)
             for n in spec.input_names if not n.startswith(("acc", "pop"))}
    planes = {n: np.resize(v, lanes) for n, v in words.items()}            # activations: one word, broadcast
    inputs = [B.from_bytes(planes.get(n, np.zeros(lanes, np.uint64)).view(np.uint8)[None], spec.reg_bits)
              for n in spec.input_names]
    outs = {n: B.to_bytes(r, 1)[0].view(dtype).astype(np.int64).reshape(lanes, -1).sum(1)
            for n, r in zip(spec.accumulator_names, spec.reference(B, inputs))}
    bits = lambda word: np.unpackbits(np.array([word], np.uint64).view(np.uint8), bitorder="little").astype(np.int64)
    for n in range(2):
        x = sum(bits(words[f"a{k}_{n}"][0]) << k for k in range(2))
        for r in range(2):
            for lane in range(lanes):
                w = sum((2 * bits(words[f"w{j}_{r}"][lane]) - 1) << j for j in range(2))
                acc = sum(outs[f"acc{s}_{r}_{n}"][lane] << s for s in range(3))
                pop = sum(outs[f"pop{k}_{n}"][lane] << k for k in range(2))
                assert 2 * acc - 3 * pop == int(x @ w), (n, r, lane)


# ---------------------------------------------------------------- the tiles an operator takes
@pytest.mark.parametrize("isa", ["avx512", "avx2", "neon"])
def test_every_config_has_a_gemm_tile(isa):
    """Every A1-3 W1-3 configuration has GEMM-shaped tiles (more than one column; on x86 more than one
    row); NEON's add in 16-bit lanes, and each configuration has word tiles too."""
    for a in (1, 2, 3):
        for w in (1, 2, 3):
            for encoding in ("unipolar", "hybrid"):
                tiles = gemm_kernels(isa, a, w, encoding)
                assert tiles and all(t.spec.cols > 1 for t in tiles), (a, w, encoding)
                if isa == "neon":
                    assert all(t.spec.out_bits == 16 for t in tiles), (a, w, encoding)
                    assert word_kernels(isa, a, w, encoding), (a, w, encoding)
                else:
                    assert all(t.spec.rows > 1 for t in tiles), (a, w, encoding)


@pytest.mark.parametrize("config, rows, cols", [
    ((1, 1, "unipolar"), 8, 3),       # 19 registers: 3 columns on the same 8 channels as the 8x2 tile
    ((1, 2, "unipolar"), 4, 3),       # the 8x2 tile takes 26 registers
    ((2, 2, "unipolar"), 4, 2),       # more channels than the 2x3 tile
    ((3, 3, "unipolar"), 2, 2),       # the 2x3 tile takes 27 registers
    ((3, 3, "hybrid"), 2, 2),         # both above 24: the one least over (25, not 36)
])
def test_neon_lanes_tile_fits_the_registers_then_has_the_most_channels(config, rows, cols):
    """The lanes tile the NEON operators take (kernels/bitserial.py's _lanes_order; the llvm-mca cycles
    that chose the rule are in its comments)."""
    spec = bitserial_kernel("neon", *config, "lanes").spec
    assert (spec.rows, spec.cols) == (rows, cols)


def test_hybrid_layers_run_on_the_unipolar_lanes_tile_channels_last():
    """tile_for: a hybrid lanes tile's layer runs the unipolar lanes tile on the weight codes (2S - (2^w-1)T)
    channels last, the hybrid tile itself channels first; the acc tiles are kept as they are. (The
    operators' results are checked against numpy below.)"""
    config = Config(2, 1, "hybrid")
    lanes = bitserial_kernel("avx512", 2, 1, "hybrid", "lanes")
    assert lanes.spec.encoding == "hybrid"
    assert tile_for(lanes, config, 9).spec.encoding == "unipolar" and tile_for(lanes, config, 9).lanes
    assert tile_for(lanes, config, 9, nchw=True) is lanes
    acc = bitserial_kernel("avx512", 2, 1, "hybrid", "acc")
    assert tile_for(acc, config, 9) is acc and tile_for(acc, config, 1) is None


def test_long_k_needs_the_chunks():
    """Without chunks the 16-bit lanes wrap: 21 * 3300 = 69300 comes back as 69300 - 65536."""
    config, kernel = Config(2, 3, "unipolar"), bitserial_kernel("neon", 2, 3, "unipolar", "acc")
    assert kernel.spec.out_bits == 16 and chunks(kernel, config, 3300 // 64 + 1) == (2, 26)
    assert chunks(kernel, config, 48) == (1, 48)
    assert chunks(kernel, config, 49)[0] == 2


SHORT_K = [  # (config, input, weight OIHW, stride, layout): a K of one or two words runs on a word tile
    (Config(1, 1, "unipolar"), (1, 5, 6, 64), (19, 64, 1, 1), 1, "NHWC"),      # one word (ResNet-18 C3's K)
    (Config(1, 1, "hybrid"), (1, 7, 6, 100), (10, 100, 1, 1), 2, "NHWC"),      # two words, 100 channels
    (Config(2, 2, "unipolar"), (1, 6, 5, 40), (9, 40, 1, 1), 2, "NHWC"),       # 40 channels
    (Config(2, 2, "hybrid"), (1, 4, 5, 128), (17, 128, 1, 1), 1, "NHWC"),      # two whole words (C8's K)
    (Config(3, 3, "hybrid"), (2, 3, 5, 70), (8, 70, 1, 1), 1, "NHWC"),         # two images
    (Config(1, 2, "unipolar"), (1, 90, 7, 5), (11, 90, 1, 1), 2, "NCHW"),
]


@pytest.mark.parametrize("config, channels, layout", [(c, w[1], lay) for c, _, w, _, lay in SHORT_K],
                         ids=[f"{config_id(c)}_c{w[1]}_{lay}" for c, _, w, _, lay in SHORT_K])
def test_short_k_takes_the_word_tile_of_its_own_encoding(config, channels, layout):
    """A NEON layer with a K of a word or two runs on the configuration's word tile (its own encoding:
    no fold), not on the lanes tile ``bitserial_kernel`` gives (the operators on them: SHORT_K below)."""
    words = -(-channels // 64)
    lanes_tile = bitserial_kernel("neon", config.abits, config.wbits, config.encoding)
    tile = tile_for(lanes_tile, config, words, layout == "NCHW")
    assert tile.word_tile and tile.spec.encoding == config.encoding and tile.spec.k_bits == 64


# ---------------------------------------------------------------- bit-packing
@pytest.mark.parametrize("shape, axis, bit_axis, word, bits", [((5, 70), 1, 1, "uint64", 2), ((3, 40, 2), 1, 0, "uint32", 3),
                                                               ((9, 4), 0, 2, "uint8", 1)])
@pytest.mark.parametrize("mode", ["reduction", "unrolled", "vector"])
def test_packing_puts_bit_p_of_element_k_at_plane_p_word_k_over_width(shape, axis, bit_axis, word, bits, mode):
    from tvm import te
    rng = np.random.default_rng(2)
    x = rng.integers(0, 2 ** bits, shape).astype(np.uint8)
    packing = Packing(axis, bit_axis, word)
    got = packing.numpy(x, bits, words=packing.words(shape[axis]) + 1)
    width = packing.word_bits
    for index in np.ndindex(*shape):
        for p in range(bits):
            at = list(index)
            at[axis] = index[axis] // width
            at.insert(bit_axis, p)
            assert (int(got[tuple(at)]) >> (index[axis] % width)) & 1 == (x[index] >> p) & 1
    assert not np.take(got, [got.shape[axis + (bit_axis <= axis)] - 1], axis=axis + (bit_axis <= axis)).any()
    placeholder = te.placeholder(shape, "uint8", name="x")
    packed = packing.te(placeholder, bits, words=got.shape[axis + (bit_axis <= axis)], unrolled=mode == "unrolled",
                        vector=mode == "vector")
    func = tvm.compile(te.create_prim_func([placeholder, packed]), target="llvm").jit()
    out = tvm.runtime.empty(got.shape, word, tvm.cpu())
    func["main"](tvm.runtime.tensor(x), out)
    np.testing.assert_array_equal(out.numpy(), got)


# ---------------------------------------------------------------- dense against numpy
AVX512_CONFIGS = [Config(1, 1, "unipolar"), Config(1, 1, "hybrid"), Config(2, 2, "unipolar"), Config(2, 1, "hybrid"),
                  Config(1, 3, "hybrid"), Config(3, 2, "unipolar"), Config(3, 3, "hybrid")]
DENSE = [  # (isa, kernel, config, m, n, k): m not whole column tiles, n not whole row tiles, k not whole words
    *(on("avx512", kernel, c, 13, 20, 577, id=config_id(c)) for c in AVX512_CONFIGS for kernel in ("lanes", "acc")),
    *(on("host", "plain", c, 13, 20, 577, id=config_id(c)) for c in AVX512_CONFIGS),
    *(on("avx2", "default", c, 7, 9, 700, id=config_id(c)) for c in (
        Config(1, 1, "unipolar"), Config(1, 1, "hybrid"), Config(2, 3, "unipolar"), Config(3, 3, "hybrid"))),
    *(on("neon", kernel, c, m, n, k, id=f"{config_id(c)}_k{k}") for c, m, n, k in (
        (Config(1, 1, "unipolar"), 5, 20, 577),
        (Config(1, 1, "hybrid"), 5, 9, 200),
        (Config(2, 3, "unipolar"), 5, 6, 3300),     # 21 * 3300 > 2**16: two chunks
        (Config(1, 3, "hybrid"), 3, 5, 5000),       # 7 * 5000 > 2**15: two chunks
        (Config(3, 3, "hybrid"), 3, 3, 700),        # a one-row tile, 49 * 700 > 2**15
    ) for kernel in ("lanes", "acc")),
]


@pytest.mark.parametrize("isa, kernel, config, m, n, k", DENSE)
def test_dense_equals_numpy(isa, kernel, config, m, n, k):
    """Row 0 and channel 0 at their largest values (hybrid channel 1 at its most negative); a NEON
    operator has the tile inlined (no call to it)."""
    rng = np.random.default_rng(11)
    w = random_weights(rng, config, (n, k))
    x = rng.integers(0, 2 ** config.abits, (m, k)).astype(np.uint8)
    set_extremes(config, x[0], w)
    if isa == "avx2":
        assert bitserial_kernel("avx2", config.abits, config.wbits, config.encoding).spec.isa == "avx2"
    op = bitserial_dense(w, m, config, isa=isa, **build_options(kernel))
    if isa == "neon":
        assert isinstance(op, cross.QemuOperator) and "bl\tqs_" not in op.assembly
    np.testing.assert_array_equal(op(x), x.astype(np.int64) @ w.T)


@pytest.mark.parametrize("use_kernel", [True, False], ids=["kernel", "plain_tir"])
def test_avx2_operator_has_no_avx512_and_inlines_the_tile(use_kernel):
    """Built for x86-64-v3: no zmm, no vpopcnt, no call to the tile; the tile's nibble-table popcount."""
    config = Config(1, 1, "unipolar")
    w = random_weights(np.random.default_rng(22), config, (8, 512))
    built = build_bitserial_dense(w, 4, config, isa="avx2", use_kernel=use_kernel)
    assembly = tvm.compile(built.mod, target=built.target).mod.inspect_source("s")
    assert "zmm" not in assembly and "vpopcnt" not in assembly and "qs_bitserial" not in assembly
    if use_kernel:
        assert "vpsadbw" in assembly and "vpshufb" in assembly


@pytest.mark.qemu
@needs_neon
def test_lanes_tile_past_one_chunk_of_k():
    """The A1W1 lanes tile's 16-bit lanes gain up to 16 a word: 4100 words of ones (65600 in every
    lane of channel 0) wrap unless its _gemm runs K in chunks (4095 words)."""
    config = Config(1, 1, "unipolar")
    assert bitserial_kernel("neon", 1, 1, "unipolar").spec.layout == "lanes"
    rng = np.random.default_rng(16)
    w = random_weights(rng, config, (9, 4100 * 64))
    x = rng.integers(0, 2, (2, 4100 * 64)).astype(np.uint8)
    set_extremes(config, x[0], w)
    op = bitserial_dense(w, 2, config, isa="neon")
    np.testing.assert_array_equal(op(x), x.astype(np.int64) @ w.T)


@pytest.mark.qemu
@needs_neon
@pytest.mark.parametrize("config, k", [(Config(3, 3, "hybrid"), 700), (Config(3, 3, "unipolar"), 1400),
                                       (Config(1, 1, "unipolar"), 130)],
                         ids=["a3w3_hybrid_k700", "a3w3_unipolar_k1400", "a1w1_unipolar_k130"])
def test_word_tile_runs_a_long_k_in_chunks(config, k):
    """A word tile adds in its 16-bit lanes: A3W3 hybrid gains up to 49 * 64 a word, so 11 words of
    the largest values (34496 > 2**15 - 1) run in two chunks, summed in int32, unipolar 22 words
    (68992 > 2**16 - 1) likewise; A1W1 over 130 bits (a partial third word) in one."""
    kernel = bitserial_kernel("neon", config.abits, config.wbits, config.encoding, "tile")
    assert kernel.word_tile and chunks(kernel, config, -(-k // 64))[0] == (1 if k == 130 else 2)
    rng = np.random.default_rng(18)
    w = random_weights(rng, config, (11, k))
    x = rng.integers(0, 2 ** config.abits, (10, k)).astype(np.uint8)
    set_extremes(config, x[0], w)
    op = bitserial_dense(w, 10, config, isa="neon", kernel_layout="tile")
    np.testing.assert_array_equal(op(x), x.astype(np.int64) @ w.T)


# ---------------------------------------------------------------- conv2d against numpy
AVX512_CONVS = [  # (config, input NHWC, weight OIHW, stride, padding)
    (Config(1, 1, "unipolar"), (1, 9, 7, 13), (10, 13, 3, 3), 1, 1),
    (Config(1, 1, "hybrid"), (1, 9, 7, 13), (10, 13, 3, 3), 2, 1),
    (Config(2, 2, "hybrid"), (2, 5, 6, 300), (9, 300, 1, 1), 1, 0),       # 1x1: K over half a 512-bit block
    (Config(3, 1, "unipolar"), (1, 8, 8, 270), (6, 270, 1, 1), 2, 0),
    (Config(1, 1, "unipolar"), (1, 6, 6, 20), (6, 20, 1, 1), 1, 0),         # K of one word: the plain schedule
    (Config(1, 2, "unipolar"), (1, 7, 5, 9), (5, 9, 3, 3), 2, 1),
    (Config(1, 1, "hybrid"), (2, 6, 5, 64), (70, 64, 1, 1), 1, 0),       # one word, one plane pair; 70 channels
    (Config(1, 1, "unipolar"), (1, 9, 9, 128), (40, 128, 3, 3), 2, 1),   # whole words, 40 channels
    (Config(2, 1, "unipolar"), (1, 5, 6, 64), (33, 64, 1, 1), 1, 0),     # one word, two activation planes
    (Config(1, 2, "hybrid"), (1, 6, 5, 50), (16, 50, 1, 1), 2, 0),       # one word, two weight planes
]
AVX2_CONVS = [
    (Config(1, 1, "unipolar"), (1, 6, 7, 70), (5, 70, 3, 3), 1, 1),
    (Config(2, 1, "hybrid"), (1, 7, 7, 130), (6, 130, 1, 1), 2, 0),
    (Config(1, 2, "unipolar"), (2, 5, 4, 9), (3, 9, 3, 3), 2, 1),
]
NEON_CONVS = [
    (Config(1, 1, "unipolar"), (1, 7, 6, 70), (10, 70, 3, 3), 1, 1),
    (Config(1, 1, "hybrid"), (1, 7, 7, 13), (5, 13, 3, 3), 2, 1),
    (Config(2, 2, "unipolar"), (2, 4, 5, 150), (9, 150, 1, 1), 1, 0),
    (Config(3, 1, "hybrid"), (1, 7, 6, 130), (3, 130, 1, 1), 2, 0),    # a one-row tile
    (Config(2, 3, "hybrid"), (1, 5, 5, 200), (4, 200, 3, 3), 1, 1),    # 21 * 9 * 200 > 2**15: chunks
    (Config(1, 1, "hybrid"), (1, 4, 5, 64), (20, 64, 1, 1), 1, 0),     # one word (ResNet-18 C3's K)
]
HOST_NCHW_CONVS = [  # input NCHW: packed along the channels as NHWC is, the output channels first
    (Config(1, 1, "unipolar"), (1, 70, 7, 6), (5, 70, 3, 3), 1, 1),
    (Config(1, 1, "hybrid"), (1, 13, 9, 7), (10, 13, 3, 3), 2, 1),
    (Config(2, 2, "hybrid"), (2, 300, 5, 6), (9, 300, 1, 1), 1, 0),      # two images
    (Config(3, 1, "unipolar"), (1, 130, 8, 8), (6, 130, 1, 1), 2, 0),
    (Config(1, 2, "unipolar"), (2, 9, 7, 5), (5, 9, 3, 3), 2, 1),        # two images, K of one word
]
PLAIN = (Config(2, 1, "hybrid"), (7, 11, 3, 3), 2, 1)                    # config, weight OIHW, stride, padding


def conv_id(config, shape, wshape, stride, layout):
    return f"{config_id(config)}_b{shape[0]}_c{wshape[1]}_{wshape[2]}x{wshape[3]}_o{wshape[0]}_s{stride}_{layout}"


def conv_cases(isa, kernels, layout, convs):
    return [on(isa, kernel, layout, c, shape, wshape, stride, pad, id=conv_id(c, shape, wshape, stride, layout))
            for c, shape, wshape, stride, pad in convs for kernel in kernels]


CONVS = [  # (isa, kernel, layout, config, input in layout's order, weight OIHW, stride, padding)
    *conv_cases("avx512", ("lanes", "acc"), "NHWC", AVX512_CONVS),
    *conv_cases("avx2", ("default", "plain"), "NHWC", AVX2_CONVS),
    *conv_cases("avx2", ("default",), "NCHW", [(Config(1, 3, "unipolar"), (1, 100, 6, 7), (6, 100, 3, 3), 1, 1)]),
    *conv_cases("neon", ("default",), "NHWC", NEON_CONVS),
    *conv_cases("neon", ("default",), "NCHW", [(Config(1, 1, "hybrid"), (1, 90, 5, 6), (6, 90, 3, 3), 2, 1)]),
    *conv_cases("neon", ("default",), "NHWC", [(c, s, w, st, 0) for c, s, w, st, lay in SHORT_K if lay == "NHWC"]),
    *conv_cases("neon", ("default",), "NCHW", [(c, s, w, st, 0) for c, s, w, st, lay in SHORT_K if lay == "NCHW"]),
    *conv_cases("host", ("default",), "NCHW", HOST_NCHW_CONVS),
    *conv_cases("host", ("plain",), "NHWC", [(PLAIN[0], (1, 6, 5, 11), *PLAIN[1:])]),
    *conv_cases("host", ("plain",), "NCHW", [(PLAIN[0], (2, 11, 6, 5), *PLAIN[1:])]),
    *conv_cases("neon", ("plain",), "NHWC", [(PLAIN[0], (1, 6, 5, 11), *PLAIN[1:])]),   # the NEON tile's baseline
]


@pytest.mark.parametrize("isa, kernel, layout, config, shape, wshape, stride, pad", CONVS)
def test_conv2d_equals_numpy(isa, kernel, layout, config, shape, wshape, stride, pad):
    """Image 0's rows 0-2 (whole 3x3 windows) and output channel 0 at their largest values, hybrid
    channel 1 at its most negative; NCHW against the NHWC reference on transposed tensors."""
    rng = np.random.default_rng(13)
    w = random_weights(rng, config, wshape)
    x = rng.integers(0, 2 ** config.abits, shape).astype(np.uint8)
    nhwc = x.transpose(0, 2, 3, 1) if layout == "NCHW" else x
    set_extremes(config, nhwc[0, :3], w)
    op = bitserial_conv2d(w, shape, config, stride, pad, isa=isa, layout=layout, **build_options(kernel))
    if isa == "neon":
        assert isinstance(op, cross.QemuOperator)
    got = op(x)
    want = conv_reference(nhwc, w, stride, pad)
    np.testing.assert_array_equal(got, want.transpose(0, 3, 1, 2) if layout == "NCHW" else want)


# ---------------------------------------------------------------- the output stage
@pytest.mark.parametrize("isa, kernel, config", [on("avx512", "default", Config(2, 2, "hybrid"), id="a2w2_hybrid"),
                                                 on("neon", "default", Config(1, 2, "unipolar"), id="a1w2_unipolar")])
def test_output_stage_requantizes_the_bitserial_result(isa, kernel, config):
    """The int32 result feeds the int8 operators' output stage: bias, float scale (round half to
    even), zero point, clamp to u8."""
    rng = np.random.default_rng(6)
    w = random_weights(rng, config, (12, 100))
    x = rng.integers(0, 2 ** config.abits, (6, 100)).astype(np.uint8)
    bias = rng.integers(-50, 50, 12).astype(np.int32)
    scale = np.float32(0.37)
    stage = OutputStage(bias=bias, requantize=ScaleRequantize(scale, 100, "uint8"))
    got = bitserial_dense(w, 6, config, stage, isa=isa, **build_options(kernel))(x)
    acc = (x.astype(np.int64) @ w.T + bias).astype(np.float32)
    np.testing.assert_array_equal(got, np.clip(np.rint(acc * scale) + 100, 0, 255).astype(np.uint8))


@pytest.mark.parametrize("isa, kernel, levels, layout", [
    on(isa, "default", levels, layout, id=f"{levels}-{layout}") for isa, levels, layout in [
        ("avx512", 1, "NHWC"), ("avx512", 3, "NHWC"), ("avx512", 3, "NCHW"), ("neon", 1, "NHWC"), ("neon", 3, "NCHW")]])
def test_low_bit_requantization_of_a_hybrid_layer_equals_the_float_formula(isa, kernel, levels, layout):
    """A hybrid layer (channels last: on the unipolar lanes tile, 2S - T) requantized to a few levels,
    as a low-bit model's layers are (the operator compares integer thresholds, ops/thresholds.py):
    numpy's float32 formula (MLAS: acc + bias in int32, times the scale in float32, rounded half to
    even, plus the zero point, clamped), for scales of both signs, zero, and ties (power-of-two
    scales on odd sums)."""
    config = Config(1, 1, "hybrid")
    rng = np.random.default_rng(9)
    w = random_weights(rng, config, (40, 70, 3, 3))
    x = rng.integers(0, 2, (1, 9, 8, 70)).astype(np.uint8)
    scale = (rng.choice([-1, 1], 40) * rng.uniform(0.01, 0.3, 40)).astype(np.float32)
    scale[:3] = [0, 0.5, -0.25]                                 # constant; ties of round half to even
    bias = rng.integers(-60, 60, 40).astype(np.int32)
    stage = OutputStage(bias=bias, clamp=(-1, levels - 1), requantize=ScaleRequantize(scale, 1, "int8"))
    xin = x if layout == "NHWC" else np.ascontiguousarray(x.transpose(0, 3, 1, 2))
    got = bitserial_conv2d(w, xin.shape, config, 1, 1, stage, isa=isa, layout=layout)(xin)
    acc = (conv_reference(x, w, 1, 1) + bias).astype(np.int32)
    want = np.clip(np.rint(acc.astype(np.float32) * scale) + 1, -1, levels - 1).astype(np.int8)
    np.testing.assert_array_equal(got if layout == "NHWC" else got.transpose(0, 2, 3, 1), want)
    assert len(np.unique(want)) == levels + 1


# ---------------------------------------------------------------- what is refused or caught
@needs_avx512
@pytest.mark.parametrize("layout", ["acc", "lanes"])
def test_gemm_loop_writing_the_wrong_column_is_caught(monkeypatch, layout):
    """A _gemm whose epilogue drops the column stride (the proved body intact) fails test-kernels."""
    kernel = next(k for k in gemm_kernels("avx512", 1, 1, "unipolar") if k.spec.layout == layout)
    from synth import cache
    entry = next(cache.read(p) for p in cache.entries() if cache.read(p)["cache_key"] == kernel.cache_key)
    right = emit_cli.drivers_source
    monkeypatch.setattr(emit_cli, "drivers_source", lambda m: right(m).replace("out += out_stride", "out += 0"))
    row = check_entry(entry, "gcc", samples=16)
    assert row["status"] == "failed" and row["first_mismatch"]["function"] == "gemv", row


def test_bad_configurations_are_refused_with_the_reason():
    with pytest.raises(ValueError, match="1-3 bit"):
        Config(4, 1, "unipolar")
    with pytest.raises(ValueError, match="encoding"):
        Config(1, 1, "bipolar")
    with pytest.raises(ValueError, match="odd in"):
        bitserial_dense(np.zeros((4, 64), np.int64), 2, Config(1, 1, "hybrid"), use_kernel=False)


def test_unknown_layout_is_refused():
    with pytest.raises(ValueError, match="layout must be one of NCHW, NHWC"):
        bitserial_conv2d(np.ones((2, 3, 1, 1), np.int64), (1, 4, 4, 3), Config(1, 1, "unipolar"), layout="NWHC")


# ---------------------------------------------------------------- llvm-mca estimates of NEON operators (bench/mca.py)
needs_llvm = pytest.mark.skipif(mca.missing_tools() is not None, reason=str(mca.missing_tools()))


@pytest.mark.qemu
@needs_neon
@needs_llvm
@pytest.mark.parametrize("kernel_layout, tile, cnts", [("acc", (8, 2), 3 * 3 * 5 * 16), ("lanes", (8, 3), 2 * 3 * 10 * 12)])
def test_profile_counts_every_popcount_the_tile_runs(kernel_layout, tile, cnts):
    """5 rows x 20 channels x 577 bits on the A1W1 tiles: 3 column tiles of the 8x2 acc tile x 3 row
    tiles x 5 blocks of 16 cnt each; 2 column tiles of the 8x3 lanes tile x 3 row tiles x 10 words of
    12 cnt each. The blocks qemu ran, times their cnt, must add up to exactly that."""
    config = Config(1, 1, "unipolar")
    kernel = bitserial_kernel("neon", 1, 1, "unipolar", kernel_layout)
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


@pytest.mark.qemu
@needs_neon
@needs_llvm
@pytest.mark.parametrize("clamp, most", [((0, 1), 3.0), ((-128, 127), 7.0)])
def test_neon_output_stage_cycles_per_output(clamp, most):
    """Cortex-A53 llvm-mca cycles, per output, of the blocks that requantize a 3x3 A1W1 hybrid layer
    (8x8x64 -> 64): to one bit the operator compares integer thresholds (no float conversion left),
    to int8 it converts 32 channels of a column together. Both took 11 when each column's 8 channels
    were requantized in a chain of their own (bitserial_gemm.OUTPUT_CHANNELS)."""
    config = Config(1, 1, "hybrid")
    rng = np.random.default_rng(0)
    w = random_weights(rng, config, (64, 64, 3, 3))
    x = rng.integers(0, 2, (1, 8, 8, 64)).astype(np.uint8)
    stage = OutputStage(bias=rng.integers(-20, 20, 64).astype(np.int32), clamp=clamp, requantize=ScaleRequantize(
        rng.uniform(0.01, 0.1, 64).astype(np.float32), 0, "uint8" if clamp[0] == 0 else "int8"))
    blocks = mca.profile(bitserial_conv2d(w, x.shape, config, 1, 1, stage, isa="neon"), x)
    converts = any(i.startswith(("scvtf", "fcvtzs")) for b in blocks for i in b.instructions)
    assert converts == (clamp[0] < 0)
    requantizing = [(b, c) for b, c in zip(blocks, mca.block_cycles(blocks, "cortex-a53"))
                    if any(i.startswith(("fcvtzs", "cmge", "cmgt")) for i in b.instructions)]
    assert requantizing and sum(b.runs * c for b, c in requantizing) / (8 * 8 * 64) <= most
