"""Exact int8 on x86 hosts without VNNI (AVX2 only: AMD Zen 1-3, Intel Haswell to Comet Lake). The host
model is made AVX2-only (``host.restricted``, what QSYNTH_HOST_FEATURES=avx2 does), so these run the
AVX2 s8s7 tiles natively on every x86-64 host of the pool: the operators against numpy's integer
result, on weights of -128 (raised to -127 for the tile, the rest added apart) and on operands at
which vpmaddubsw's int16 pair sums saturate (onnxruntime's and OpenVINO's answers there are wrong)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from isa_specs import get_isa, host
from sketches.program import Instr, Op, Program
from synth import int8 as int8_stages
from synth.int8_spec import Int8Spec
from synth.stages import prove_stage
from tests.test_tvm_ops import CONVS, conv_reference, dense_reference
from tvm_integration.kernels import selection
from tvm_integration.ops.conv2d import conv2d
from tvm_integration.ops.dense import dense

CPUINFO = Path(__file__).parent / "data" / "cpuinfo_zen3.txt"


@pytest.fixture
def avx2_only(monkeypatch):
    """This host, less every x86 feature but AVX2 (all hosts of the pool have it)."""
    live = host.model()
    monkeypatch.setattr(host, "model", lambda: host.restricted(live, "avx2"))
    kernel = selection.int8_kernel("host")
    assert kernel.spec.isa == "avx2" and kernel.spec.types == "s8s7"
    return kernel


def weights(shape, rng, minus_128: float):
    """int8 weights over the whole range, with a share ``minus_128`` of -128 (PyTorch's range)."""
    w = rng.integers(-127, 128, shape).astype(np.int8)
    w[rng.random(shape) < minus_128] = -128
    return w


@pytest.mark.parametrize("minus_128", [0.0, 0.02])
@pytest.mark.parametrize("layout,c,o,ksize,stride,pad,groups,dtype", CONVS)
def test_conv2d_on_the_avx2_tiles(avx2_only, layout, c, o, ksize, stride, pad, groups, dtype, minus_128):
    rng = np.random.default_rng(7)
    shape = (1, c, 9, 9) if layout == "NCHW" else (1, 9, 9, c)
    lo, hi = (0, 256) if dtype == "uint8" else (-128, 128)
    x = rng.integers(lo, hi, shape).astype(dtype)
    w = weights((o, c // groups, ksize, ksize), rng, minus_128)
    out = conv2d(w, shape, layout, stride, pad, groups, dtype)(x)
    np.testing.assert_array_equal(out, conv_reference(x, w, layout, stride, pad, groups))


@pytest.mark.parametrize("minus_128", [0.0, 0.02, 1.0])
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_dense_on_the_avx2_tiles(avx2_only, dtype, minus_128):
    rng = np.random.default_rng(3)
    lo, hi = (0, 256) if dtype == "uint8" else (-128, 128)
    x = rng.integers(lo, hi, (13, 70)).astype(dtype)
    w = weights((40, 70), rng, minus_128)
    np.testing.assert_array_equal(dense(w, 13, dtype)(x), dense_reference(x, w))


def test_operands_that_saturate_vpmaddubsw_are_exact(avx2_only):
    """u8 activations of 200-255 against same-sign weight pairs of 127 and -128: every pair sum of
    vpmaddubsw(x, w) passes int16 (255 * 127 * 2 = 64770)."""
    rng = np.random.default_rng(1)
    x = rng.integers(200, 256, (1, 7, 7, 64)).astype(np.uint8)
    w = np.where(rng.random((32, 64, 3, 3)) < 0.5, 127, -128).astype(np.int8)
    out = conv2d(w, x.shape, "NHWC", 1, 1)(x)
    np.testing.assert_array_equal(out, conv_reference(x, w, "NHWC", 1, 1, 1))


def row_problem():
    spec = Int8Spec.for_isa("avx2", "s8s7", 4, 16)
    return int8_stages.stages(spec, get_isa("avx2"))[0].problem


def program(problem, sign_of: int, take_abs: bool = True) -> Program:
    """The row's program (a, b, c, ones16 are registers 0-3): |a| (or a), sign(b, ``sign_of``),
    vpmaddubsw, vpmaddwd by ones, vpaddd."""
    body = (Instr(Op.parse("vpsignb.ymm"), (0, 0)) if take_abs else Instr(Op.parse("vpaddb.ymm"), (0, 0)),
            Instr(Op.parse("vpsignb.ymm"), (1, sign_of)), Instr(Op.parse("vpmaddubsw.ymm"), (4, 5)),
            Instr(Op.parse("vpmaddwd.ymm"), (6, 3)), Instr(Op.parse("vpaddd.ymm"), (2, 7)))
    return Program("avx2", tuple(problem.input_names), tuple(problem.input_bits), body, (8,))


def test_the_sign_case_proof_proves_the_row_and_refuses_mutants():
    """The linear-form prover splits A's broadcast lanes by sign (81 cases): the synthesized row is
    proved in under a second (Z3 did not finish in 600 s); a row signing B by itself, or multiplying
    2a instead of |a|, is refuted."""
    problem = row_problem()
    assert prove_stage(problem, program(problem, 0), 1e18).result == "proved"
    assert prove_stage(problem, program(problem, 1), 1e18).result != "proved"
    assert prove_stage(problem, program(problem, 0, take_abs=False), 1e18).result != "proved"


def test_weights_of_minus_128_break_the_row_so_the_operator_raises_them():
    """Why the tile's spec has B in [-127, 127]: vpsignb negates -128 to -128, so with a < 0 the row is
    off by -256 |a| (numpy run of the proved program on such an input)."""
    from isa_specs.lanes import NUMPY
    problem = row_problem()
    a = np.tile(np.array([-1, 2, 3, 4], np.int8), (1, 8)).view(np.uint8)
    b = np.full((1, 32), -128, np.int8).view(np.uint8)
    c, ones = np.zeros((1, 32), np.uint8), np.tile(np.array([1, 0], np.uint8), (1, 16))
    ins = [NUMPY.from_bytes(v, 256) for v in (a, b, c, ones)]
    got = problem.run(NUMPY, program(problem, 0), ins)[0]
    want = problem.spec(NUMPY, ins)[0]
    got, want = (NUMPY.to_bytes(v, 1).view(np.int32)[0] for v in (got, want))
    np.testing.assert_array_equal(want, np.full(8, -128 * (-1 + 2 + 3 + 4)))
    np.testing.assert_array_equal(got - want, np.full(8, -256))
