"""Bitserial operators (issue 14): bit-packing, GEMM-shaped tiles in TVM, dense and conv2d, against
numpy references computed from the unpacked integer values."""
import numpy as np
import pytest

pytest.importorskip("tvm")

from helpers_bitserial import conv_reference, random_weights  # noqa: E402
from isa_specs import host  # noqa: E402
from emit import harness as emit_cli  # noqa: E402
from emit.harness import check_entry  # noqa: E402
from synth.spec import BitserialSpec, SpecError  # noqa: E402
from tvm_integration.bitpack import Packing  # noqa: E402
from tvm_integration.bitserial_kernels import gemm_kernels  # noqa: E402
from tvm_integration.ops.bitserial_conv2d import bitserial_conv2d  # noqa: E402
from tvm_integration.ops.bitserial_dense import bitserial_dense  # noqa: E402
from tvm_integration.ops.bitserial_gemm import Config  # noqa: E402
from tvm_integration.output_stage import OutputStage, ScaleRequantize  # noqa: E402

needs_avx512 = pytest.mark.skipif(bool(host.missing("avx512vpopcntdq", ())),
                                  reason=str(host.missing("avx512vpopcntdq", ())))
CONFIGS = [Config(1, 1, "unipolar"), Config(1, 1, "hybrid"), Config(2, 2, "unipolar"), Config(2, 1, "hybrid"),
           Config(1, 3, "hybrid"), Config(3, 2, "unipolar"), Config(3, 3, "hybrid")]


# ---------------------------------------------------------------- the GEMM-shaped spec
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


@pytest.mark.parametrize("isa", ["avx512", "avx2"])
def test_every_config_has_a_gemm_tile(isa):
    for a in (1, 2, 3):
        for w in (1, 2, 3):
            for encoding in ("unipolar", "hybrid"):
                tiles = gemm_kernels(isa, a, w, encoding)
                assert tiles and all(t.spec.cols > 1 and t.spec.rows > 1 for t in tiles), (a, w, encoding)


@needs_avx512
@pytest.mark.parametrize("layout", ["acc", "lanes"])
def test_gemm_loop_writing_the_wrong_column_is_caught(monkeypatch, layout):
    """A _gemm whose epilogue drops the column stride (the proved body intact) fails test-kernels."""
    kernel = next(k for k in gemm_kernels("avx512", 1, 1, "unipolar") if k.spec.layout == layout)
    from synth import cache
    entry = next(cache.read(p) for p in cache.entries() if cache.read(p)["cache_key"] == kernel.cache_key)
    right = emit_cli.gemv_driver_source
    monkeypatch.setattr(emit_cli, "gemv_driver_source", lambda e: right(e).replace("out += out_stride", "out += 0"))
    row = check_entry(entry, "gcc", samples=16)
    assert row["status"] == "failed" and row["first_mismatch"]["function"] == "gemv", row


# ---------------------------------------------------------------- bit-packing
@pytest.mark.parametrize("shape, axis, bit_axis, word, bits", [((5, 70), 1, 1, "uint64", 2), ((3, 40, 2), 1, 0, "uint32", 3),
                                                               ((9, 4), 0, 2, "uint8", 1)])
@pytest.mark.parametrize("mode", ["reduction", "unrolled", "vector"])
def test_packing_puts_bit_p_of_element_k_at_plane_p_word_k_over_width(shape, axis, bit_axis, word, bits, mode):
    import tvm
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


# ---------------------------------------------------------------- operators
@pytest.fixture(scope="module")
def dense_ops():
    """(config, use_kernel) -> (operator, x, want): M=13 rows (not whole column tiles), N=20 channels
    (not whole row tiles), K=577 (not whole words)."""
    rng = np.random.default_rng(3)
    ops = {}
    for config in CONFIGS:
        w = random_weights(rng, config, (20, 577))
        x = rng.integers(0, 2 ** config.abits, (13, 577)).astype(np.uint8)
        for use_kernel in ("lanes", "acc", False):
            if use_kernel and host.missing("avx512vpopcntdq", ()):
                continue
            op = bitserial_dense(w, 13, config, isa="avx512" if use_kernel else "host", use_kernel=bool(use_kernel),
                                 kernel_layout=use_kernel or None)
            ops[config, use_kernel] = (op, x, x.astype(np.int64) @ w.T)
    return ops


@pytest.mark.parametrize("use_kernel", ["lanes", "acc", False], ids=["lanes_tile", "acc_tile", "plain_tir"])
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"a{c.abits}w{c.wbits}_{c.encoding}")
def test_dense_equals_numpy(dense_ops, config, use_kernel):
    if (config, use_kernel) not in dense_ops:
        pytest.skip(str(host.missing("avx512vpopcntdq", ())))
    op, x, want = dense_ops[config, use_kernel]
    np.testing.assert_array_equal(op(x), want)


CONVS = [  # (config, input NHWC, weight OIHW, stride, padding)
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


@needs_avx512
@pytest.mark.parametrize("kernel_layout", ["lanes", "acc"])
@pytest.mark.parametrize("config, shape, wshape, stride, pad", CONVS,
                         ids=[f"a{c.abits}w{c.wbits}_{c.encoding}_{w[0]}x{w[1]}x{w[2]}x{w[3]}_s{s}p{p}"
                              for c, _, w, s, p in CONVS])
def test_conv2d_nhwc_equals_numpy(config, shape, wshape, stride, pad, kernel_layout):
    rng = np.random.default_rng(4)
    w = random_weights(rng, config, wshape)
    x = rng.integers(0, 2 ** config.abits, shape).astype(np.uint8)
    want = conv_reference(x, w, stride, pad)
    got = bitserial_conv2d(w, shape, config, stride, pad, isa="avx512", kernel_layout=kernel_layout)(x)
    np.testing.assert_array_equal(got, want)


@needs_avx512
def test_hybrid_layers_run_on_the_unipolar_lanes_tile_channels_last():
    """tile_for: a hybrid lanes tile's layer runs the unipolar lanes tile on the weight codes (2S - (2^w-1)T)
    channels last, the hybrid tile itself channels first; the acc tiles are kept as they are. (The
    operators' results are checked against numpy above and in test_tvm_bitserial_nchw.py.)"""
    from tvm_integration.bitserial_kernels import select
    from tvm_integration.ops.bitserial_gemm import tile_for
    config = Config(2, 1, "hybrid")
    lanes = select("avx512", 2, 1, "hybrid", "lanes")
    assert lanes.spec.encoding == "hybrid"
    assert tile_for(lanes, config, 9).spec.encoding == "unipolar" and tile_for(lanes, config, 9).lanes
    assert tile_for(lanes, config, 9, nchw=True) is lanes
    acc = select("avx512", 2, 1, "hybrid", "acc")
    assert tile_for(acc, config, 9) is acc and tile_for(acc, config, 1) is None


def test_conv2d_plain_tir_equals_numpy():
    config = Config(2, 1, "hybrid")
    rng = np.random.default_rng(5)
    w = random_weights(rng, config, (7, 11, 3, 3))
    x = rng.integers(0, 4, (1, 6, 5, 11)).astype(np.uint8)
    got = bitserial_conv2d(w, x.shape, config, 2, 1, use_kernel=False)(x)
    np.testing.assert_array_equal(got, conv_reference(x, w, 2, 1))


@needs_avx512
def test_output_stage_requantizes_the_bitserial_result():
    """The int32 result feeds the int8 operators' output stage: bias, float scale (round half to
    even), zero point, clamp to u8."""
    config = Config(2, 2, "hybrid")
    rng = np.random.default_rng(6)
    w = random_weights(rng, config, (12, 100))
    x = rng.integers(0, 4, (6, 100)).astype(np.uint8)
    bias = rng.integers(-50, 50, 12).astype(np.int32)
    scale = np.float32(0.37)
    stage = OutputStage(bias=bias, requantize=ScaleRequantize(scale, 100, "uint8"))
    got = bitserial_dense(w, 6, config, stage, isa="avx512")(x)
    acc = (x.astype(np.int64) @ w.T + bias).astype(np.float32)
    want = np.clip(np.rint(acc * scale) + 100, 0, 255).astype(np.uint8)
    np.testing.assert_array_equal(got, want)


@needs_avx512
@pytest.mark.parametrize("levels, layout", [(1, "NHWC"), (3, "NHWC"), (3, "NCHW")])
def test_low_bit_requantization_of_a_hybrid_layer_equals_the_float_formula(levels, layout):
    """A hybrid layer (channels last: on the unipolar lanes tile, 2S - T) requantized to a few levels,
    as a low-bit model's layers are: numpy's float32 formula (MLAS: acc + bias in int32, times the
    scale in float32, rounded half to even, plus the zero point, clamped), for scales of both signs,
    zero, and ties (power-of-two scales on odd sums)."""
    config = Config(1, 1, "hybrid")
    rng = np.random.default_rng(9)
    w = random_weights(rng, config, (40, 70, 3, 3))
    x = rng.integers(0, 2, (1, 9, 8, 70)).astype(np.uint8)
    scale = (rng.choice([-1, 1], 40) * rng.uniform(0.01, 0.3, 40)).astype(np.float32)
    scale[:3] = [0, 0.5, -0.25]                                 # constant; ties of round half to even
    bias = rng.integers(-60, 60, 40).astype(np.int32)
    stage = OutputStage(bias=bias, clamp=(-1, levels - 1), requantize=ScaleRequantize(scale, 1, "int8"))
    xin = x if layout == "NHWC" else np.ascontiguousarray(x.transpose(0, 3, 1, 2))
    got = bitserial_conv2d(w, xin.shape, config, 1, 1, stage, isa="avx512", layout=layout)(xin)
    acc = (conv_reference(x, w, 1, 1) + bias).astype(np.int32)
    want = np.clip(np.rint(acc.astype(np.float32) * scale) + 1, -1, levels - 1).astype(np.int8)
    np.testing.assert_array_equal(got if layout == "NHWC" else got.transpose(0, 2, 3, 1), want)
    assert len(np.unique(want)) == levels + 1


def test_bad_configurations_are_refused_with_the_reason():
    with pytest.raises(ValueError, match="1-3 bit"):
        Config(4, 1, "unipolar")
    with pytest.raises(ValueError, match="encoding"):
        Config(1, 1, "bipolar")
    with pytest.raises(ValueError, match="odd in"):
        bitserial_dense(np.zeros((4, 64), np.int64), 2, Config(1, 1, "hybrid"), use_kernel=False)
