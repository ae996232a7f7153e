"""Exact int8 on x86 hosts without VNNI (AVX2 only: AMD Zen 1-3, Intel Haswell to Comet Lake). The host
model is made AVX2-only (``host.restricted``, what QSYNTH_HOST_FEATURES=avx2 does), so these run the
AVX2 tiles natively on every x86-64 host of the pool, both kinds: s8s7 (vpsignb + vpmaddubsw on bytes)
and w16 (vpmaddwd on operands widened to int16): the operators against numpy's integer result, on
weights of -128 (s8s7: raised to -127 for the tile, the rest added apart; w16: as they are), on the
9-bit weights of U8U8 layers (w16 as they are, s8s7 clamped likewise) and on
operands at which vpmaddubsw's int16 pair sums saturate (onnxruntime's and OpenVINO's answers there
are wrong)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from isa_specs import get_isa, host
from sketches.program import Instr, Op, Program
from synth import int8 as int8_stages
from synth.int8_spec import Int8Spec
from synth.stages import prove_stage
from tests.test_qnn_transformer import qlinear_matmul
from tests.test_tvm_ops import CONVS, conv_reference, dense_reference
from tvm_integration.kernels import int8, selection
from tvm_integration.ops.conv2d import chosen_tiles, conv2d
from tvm_integration.ops.dense import dense


TYPES = ("s8s7", "w16")          # the exact AVX2 tile kinds for any int8 weights
REDUCE_RANGE = "u8r7"            # and the one for weights in [-64, 64]


LIVE = host.model()


@pytest.fixture
def avx2_only(monkeypatch):
    """This host, less every x86 feature but AVX2 (all hosts of the pool have it): its tiles by kind."""
    live = host.model()
    monkeypatch.setattr(host, "model", lambda: host.restricted(live, "avx2"))
    candidates = selection.int8_candidates("host")
    kinds = {*TYPES, REDUCE_RANGE}
    assert {k.spec.isa for k in candidates} == {"avx2"} and {k.spec.types for k in candidates} == kinds
    return {t: next(k for k in candidates if k.spec.types == t) for t in kinds}


def weights(shape, rng, minus_128: float):
    """int8 weights over the whole range, with a share ``minus_128`` of -128 (PyTorch's range)."""
    w = rng.integers(-127, 128, shape).astype(np.int8)
    w[rng.random(shape) < minus_128] = -128
    return w


@pytest.mark.parametrize("types", TYPES)
@pytest.mark.parametrize("minus_128", [0.0, 0.02])
@pytest.mark.parametrize("layout,c,o,ksize,stride,pad,groups,dtype", CONVS)
def test_conv2d_on_the_avx2_tiles(avx2_only, layout, c, o, ksize, stride, pad, groups, dtype, minus_128, types):
    rng = np.random.default_rng(7)
    shape = (1, c, 9, 9) if layout == "NCHW" else (1, 9, 9, c)
    lo, hi = (0, 256) if dtype == "uint8" else (-128, 128)
    x = rng.integers(lo, hi, shape).astype(dtype)
    w = weights((o, c // groups, ksize, ksize), rng, minus_128)
    out = conv2d(w, shape, layout, stride, pad, groups, dtype, kernel=avx2_only[types], use_winograd=False)(x)
    np.testing.assert_array_equal(out, conv_reference(x, w, layout, stride, pad, groups))


@pytest.mark.parametrize("types", TYPES)
@pytest.mark.parametrize("minus_128", [0.0, 0.02, 1.0])
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_dense_on_the_avx2_tiles(avx2_only, dtype, minus_128, types):
    rng = np.random.default_rng(3)
    lo, hi = (0, 256) if dtype == "uint8" else (-128, 128)
    x = rng.integers(lo, hi, (13, 70)).astype(dtype)
    w = weights((40, 70), rng, minus_128)
    np.testing.assert_array_equal(dense(w, 13, dtype, kernel=avx2_only[types])(x), dense_reference(x, w))


def nine_bit(shape, rng, types: str) -> np.ndarray:
    """u8 weights less a zero point of 121 (arithmetic.nine_bit: int16 in [-121, 134]), at both ends; for the
    s8s7 tile in its [-127, 127] but for one or two per output channel (a calibrated layer's extremes),
    which it takes clamped (packing.clamped)."""
    w = rng.integers(-121, 135, shape).astype(np.int16)
    w.reshape(shape[0], -1)[:, :2] = [-121, 134]
    if types == "s8s7":
        w = np.clip(w, -127, 127)
        w.reshape(shape[0], -1)[:, -1] = 134
        w.reshape(shape[0], -1)[::2, 0] = -128
    return w


@pytest.mark.parametrize("types", TYPES)
@pytest.mark.parametrize("layout,c,o,ksize,stride,pad,groups,dtype", CONVS[:5])    # the tiles' layouts and strides
def test_nine_bit_weights_on_the_avx2_tiles(avx2_only, layout, c, o, ksize, stride, pad, groups, dtype, types):
    """U8U8 layers' weights (``w - zw``): w16 as they are, s8s7 clamped and corrected; Winograd's s16
    tile on w16's 3x3 stride-1 layers."""
    rng = np.random.default_rng(11)
    shape = (1, c, 9, 9) if layout == "NCHW" else (1, 9, 9, c)
    lo, hi = (0, 256) if dtype == "uint8" else (-128, 128)
    x = rng.integers(lo, hi, shape).astype(dtype)
    w = nine_bit((o, c // groups, ksize, ksize), rng, types)
    out = conv2d(w, shape, layout, stride, pad, groups, dtype, kernel=avx2_only[types], use_winograd=types == "w16")(x)
    np.testing.assert_array_equal(out, conv_reference(x, w, layout, stride, pad, groups))


@pytest.mark.parametrize("types", TYPES)
def test_nine_bit_dense_on_the_avx2_tiles(avx2_only, types):
    rng = np.random.default_rng(12)
    x, w = rng.integers(0, 256, (5, 70)).astype(np.uint8), nine_bit((40, 70), rng, types)
    np.testing.assert_array_equal(dense(w, 5, "uint8", kernel=avx2_only[types])(x), dense_reference(x, w))


@pytest.mark.parametrize("types,use_winograd", [(t, False) for t in TYPES] + [("w16", True)])
def test_operands_that_saturate_vpmaddubsw_are_exact(avx2_only, types, use_winograd):
    """u8 activations of 200-255 against same-sign weight pairs of 127 and -128: every pair sum of
    vpmaddubsw(x, w) passes int16 (255 * 127 * 2 = 64770). The direct tiles and Winograd's. 16 input
    channels, not 64: a pair saturates at any depth, and s8s7 takes each output's -128s (half its weights)
    as terms of packing.clamped's correction, whose TIR grows with their count (64 channels: 41 s of the
    suite's time for this case)."""
    rng = np.random.default_rng(1)
    x = rng.integers(200, 256, (1, 7, 7, 16)).astype(np.uint8)
    w = np.where(rng.random((32, 16, 3, 3)) < 0.5, 127, -128).astype(np.int8)
    out = conv2d(w, x.shape, "NHWC", 1, 1, kernel=avx2_only[types], use_winograd=use_winograd)(x)
    np.testing.assert_array_equal(out, conv_reference(x, w, "NHWC", 1, 1, 1))


@pytest.mark.parametrize("a_dtype,b_dtype", [("uint8", "int8"), ("int8", "int8"), ("uint8", "uint8")])
def test_batch_matmul_of_two_activations_runs_on_the_w16_tile(avx2_only, tmp_path, a_dtype, b_dtype):
    """B computed at run time (attention's Q.K^T) has no compile-time weights to check, so only a tile
    exact on every int8 B may run it: the w16 tile. A QLinearMatMul on full-range operands equals
    numpy's integer result (onnxruntime 1.32's u8 x s8 QLinearMatMul saturates on a host without VNNI,
    in its exact mode too: 185 of these 512 outputs differ on the Zen 3 host, by up to 119)."""
    from tvm_integration.ops.batch_matmul import Operand, kernel_for
    from tvm_integration.qnn.runtime.model import compile_model
    a_shape, b_shape = (1, 2, 16, 32), (1, 2, 32, 16)
    assert kernel_for(Operand(a_shape, a_dtype), Operand(b_shape, b_dtype)).spec.types == "w16"
    za, zb, zy = (131 if a_dtype == "uint8" else -7), (118 if b_dtype == "uint8" else 5), (128 if a_dtype == "uint8" else 0)
    path = qlinear_matmul(tmp_path / "m.onnx", a_shape, a_dtype, b_shape, b_dtype, (1 / 64, za, 1 / 64, zb, 1 / 16, zy, a_dtype))
    model = compile_model(path, threads=1)
    full = {"uint8": (0, 256), "int8": (-128, 128)}
    rng = np.random.default_rng(0)
    for _ in range(2):
        a, b = rng.integers(*full[a_dtype], a_shape).astype(a_dtype), rng.integers(*full[b_dtype], b_shape).astype(b_dtype)
        acc = np.matmul(a.astype(np.int64) - za, b.astype(np.int64) - zb)
        want = np.clip(np.round(acc.astype(np.float32) * np.float32(1 / 256)) + zy, *full[a_dtype][:1], full[a_dtype][1] - 1)
        np.testing.assert_array_equal(model({"a": a, "b": b})["y"], want)


def reduce_range_weights(shape, rng) -> np.ndarray:
    """Weights as onnxruntime's ``reduce_range`` writes them, in [-64, 64], with same-sign pairs of 64 at
    the start of every output channel's K (the largest pair sums vpmaddubsw then forms: 2 * 255 * 64)."""
    w = rng.integers(-64, 65, shape).astype(np.int8)
    w.reshape(shape[0], -1)[:, :4] = [64, 64, -64, -64]
    return w


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
@pytest.mark.parametrize("stride,use_winograd", [(2, False), (1, True)])
def test_reduce_range_weights_run_on_the_vpmaddubsw_row(avx2_only, dtype, stride, use_winograd):
    """Weights in [-64, 64] take the u8r7 tile, onnxruntime's own row, exact on every activation (s8 ones
    shifted to u8 when packed), dense and conv2d (direct; by Winograd where it applies); one weight of
    65 puts the layer back on the tiles exact for any weights."""
    rng = np.random.default_rng(5)
    lo, hi = (0, 256) if dtype == "uint8" else (-128, 128)
    x = rng.integers(lo, hi, (13, 72)).astype(dtype)
    x[:2] = [[hi - 1], [lo]]
    w = reduce_range_weights((40, 72), rng)
    kinds = lambda w: {k.spec.types for k in selection.admitted(selection.int8_candidates("host", 72), w)}
    assert kinds(w) == {REDUCE_RANGE}
    np.testing.assert_array_equal(dense(w, 13, dtype)(x), dense_reference(x, w))
    w[0, 5] = 65
    assert kinds(w) == set(TYPES)
    np.testing.assert_array_equal(dense(w, 13, dtype)(x), dense_reference(x, w))
    image = rng.integers(lo, hi, (1, 9, 9, 16)).astype(dtype)
    image[0, :3] = hi - 1
    w = reduce_range_weights((24, 16, 3, 3), rng)
    kernel, by_winograd = chosen_tiles(w, image.shape, "NHWC", stride, 1, 1, dtype)
    assert kernel.spec.types == REDUCE_RANGE and (by_winograd is not None) == use_winograd
    out = conv2d(w, image.shape, "NHWC", stride, 1, 1, dtype)(image)
    np.testing.assert_array_equal(out, conv_reference(image, w, "NHWC", stride, 1, 1))


def saturating_row():
    """The u8r7 tile's row stage and its program, onnxruntime's row: vpmaddubsw(a, b), vpmaddwd(ones, .),
    vpaddd(c, .) (registers a, b, c, ones)."""
    problem = int8_stages.stages(Int8Spec.for_isa("avx2", REDUCE_RANGE, 5, 16), get_isa("avx2"))[0].problem
    assert problem.name == "row" and list(problem.input_names) == ["a0_0", "b0_0", "c0_0", "ones16"]
    body = (Instr(Op.parse("vpmaddubsw.ymm"), (0, 1)), Instr(Op.parse("vpmaddwd.ymm"), (3, 4)),
            Instr(Op.parse("vpaddd.ymm"), (2, 5)))
    return problem, Program("avx2", tuple(problem.input_names), tuple(problem.input_bits), body, (6,))


def test_the_saturating_row_is_proved_for_weights_in_64_and_wrong_at_65():
    """Why u8r7's weights stop at 64: the row is proved on every u8 A and B in [-64, 64], and a pair of
    65s against A = 255 (2 * 255 * 65 = 33150) saturates vpmaddubsw's int16 sum (numpy run)."""
    from isa_specs.lanes import NUMPY
    problem, row = saturating_row()
    assert prove_stage(problem, row, 1e18).result == "proved"
    a = np.full((1, 32), 255, np.uint8)
    b = np.full((1, 32), 65, np.int8).view(np.uint8)
    c, ones = np.zeros((1, 32), np.uint8), np.tile(np.array([1, 0], np.uint8), (1, 16))
    ins = [NUMPY.from_bytes(v, 256) for v in (a, b, c, ones)]
    got, want = (NUMPY.to_bytes(v[0], 1).view(np.int32)[0] for v in (problem.run(NUMPY, row, ins),
                                                                     problem.spec(NUMPY, ins)))
    np.testing.assert_array_equal(want, np.full(8, 4 * 255 * 65))
    np.testing.assert_array_equal(got, np.full(8, 2 * 32767))


def pairs_problem():
    """The tile's first stage: (a, b) -> the int16 sums of two products of one k group."""
    spec = Int8Spec.for_isa("avx2", "s8s7", 4, 16)
    problem = int8_stages.stages(spec, get_isa("avx2"))[0].problem
    assert problem.name == "pairs" and list(problem.input_names) == ["a", "b"]
    return problem


def program(problem, sign_of: int, take_abs: bool = True) -> Program:
    """The synthesized stage (a, b are registers 0, 1): |a| as vpsignb(a, a) (or 2a), vpsignb(b,
    register ``sign_of``), vpmaddubsw."""
    body = (Instr(Op.parse("vpsignb.ymm"), (0, 0)) if take_abs else Instr(Op.parse("vpaddb.ymm"), (0, 0)),
            Instr(Op.parse("vpsignb.ymm"), (1, sign_of)), Instr(Op.parse("vpmaddubsw.ymm"), (2, 3)))
    return Program("avx2", tuple(problem.input_names), tuple(problem.input_bits), body, (4,))


def test_the_sign_case_proof_proves_the_stage_and_refuses_mutants():
    """The linear-form prover splits A's broadcast lanes by sign (81 cases): the synthesized stage is
    proved in under a second (Z3 did not finish a row of it in 600 s); a stage signing B by itself, or
    multiplying 2a instead of |a|, is refuted."""
    problem = pairs_problem()
    assert prove_stage(problem, program(problem, 0), 1e18).result == "proved"
    assert prove_stage(problem, program(problem, 1), 1e18).result != "proved"
    assert prove_stage(problem, program(problem, 0, take_abs=False), 1e18).result != "proved"


def test_weights_of_minus_128_break_the_stage_so_the_operator_raises_them():
    """Why the tile's spec has B in [-127, 127]: vpsignb negates -128 to -128, so where a < 0 the pair
    sum is off by -256 |a| (numpy run of the proved stage on such an input)."""
    from isa_specs.lanes import NUMPY
    problem = pairs_problem()
    a = np.tile(np.array([-1, 2, 3, 4], np.int8), 8).view(np.uint8)[None]
    b = np.full((1, 32), -128, np.int8).view(np.uint8)
    ins = [NUMPY.from_bytes(v, 256) for v in (a, b)]
    got, want = (NUMPY.to_bytes(v[0], 1).view(np.int16)[0] for v in (problem.run(NUMPY, program(problem, 0), ins),
                                                                     problem.spec(NUMPY, ins)))
    np.testing.assert_array_equal(want, np.tile([-128, -896], 8))
    np.testing.assert_array_equal(got - want, np.tile([-256, 0], 8))


def test_a_quantized_model_is_exact_on_the_avx2_tiles(avx2_only, tmp_path):
    """The whole model path on an AVX2-only host model: a ResNet-style model quantized by onnxruntime,
    compiled onto the AVX2 tiles (the tuning log's or the untuned choice per layer), equals onnxruntime's
    exact mode on every output. On a host that is AVX2-only already this is test_demo's quick run (the
    model of ``qsynth demo --quick``): the same model compiled for the same host model."""
    if host.restricted(LIVE, "avx2") == LIVE:
        pytest.skip("this host is AVX2-only: test_demo.py's quick run compiles this model for it")
    from tvm_integration.bench import int8_models
    from tvm_integration.bench.models import random_inputs, reference_session
    from tvm_integration.qnn.runtime.model import compile_model
    path = int8_models.quantize(int8_models.resnet(32, (8, 16, 16, 32), 10), tmp_path / "tiny.int8.onnx")
    model = compile_model(path)
    session = reference_session(path)
    rng = np.random.default_rng(0)
    for _ in range(2):
        feeds = random_inputs(model.inputs, rng)
        np.testing.assert_array_equal(model(feeds)[model.outputs[0]], session.run(None, feeds)[0])


@pytest.mark.parametrize("name,features,isa,types", [
    ("zen4", None, "avx512", {"u8s8"}),                                         # VNNI
    ("sapphirerapids", "avx2,avx512f,avx512bw,avx512vl", "avx512", {"w16"}),      # a Skylake-SP: AVX-512BW, no VNNI
    ("zen3", None, "avx2", {*TYPES, REDUCE_RANGE}),
    ("skylake", None, "avx2", {*TYPES, REDUCE_RANGE})])
def test_recorded_hosts_select_an_exact_int8_tile(monkeypatch, name, features, isa, types):
    """Which tile family each recorded host's int8 operators take (QSYNTH_HOST_FEATURES's restriction for
    the Skylake-SP): VNNI where there is VNNI, else the w16 tiles on zmm where AVX-512BW is, else the
    AVX2 tiles of the three exact kinds; never the saturating vpmaddubsw on every weight (u7s8)."""
    recorded = host.parse_cpuinfo((Path(__file__).parent / "data" / f"cpuinfo_{name}.txt").read_text())
    monkeypatch.setattr(host, "model", lambda: host.restricted(recorded, features) if features else recorded)
    candidates = selection.int8_candidates("host")
    assert {k.spec.isa for k in candidates} == {isa} and {k.spec.types for k in candidates} == types


@pytest.mark.parametrize("name,features,isas", [
    ("zen3", None, {"avx2"}), ("zen4", None, {"avx512"}),
    ("sapphirerapids", "avx2,avx512f,avx512bw,avx512vl", {"avx512", "avx2"}),     # no VPOPCNTDQ: AVX2's bitserial tiles
    ("sapphirerapids", None, {"avx512", "amx"})])
def test_a_host_loads_only_tiles_of_isas_it_runs(monkeypatch, name, features, isas):
    """Choosing the int8 tiles of a layer deep enough for AMX (selection.amx_pays) and the A1W1 bitserial tile loads
    the entries of an ISA only where the host has its base feature: loading re-proves an entry on a new machine (AMX's
    62 s of CPU), and a host that cannot run them then drops them. On a new Zen 3 the demo's first compile took 77.3 s
    against 9.4 once they were stamped."""
    recorded = host.parse_cpuinfo((Path(__file__).parent / "data" / f"cpuinfo_{name}.txt").read_text())
    monkeypatch.setattr(host, "model", lambda: host.restricted(recorded, features) if features else recorded)
    loaded = set()
    spy = lambda real: (lambda isa, *args: loaded.add(isa) or real(isa, *args))
    monkeypatch.setattr(int8, "proved_kernels", spy(int8.proved_kernels))
    monkeypatch.setattr(selection, "gemm_kernels", spy(selection.gemm_kernels))
    selection.int8_candidates("host", 576)
    selection.bitserial_kernel("host", 1, 1, "unipolar")
    assert loaded == isas
