"""Bitserial dense and conv2d on the proved AVX2 tiles (issue 14), built for x86-64-v3 (no AVX-512
anywhere in the operator) and run on this host, against numpy references from the unpacked values."""
import numpy as np
import pytest

pytest.importorskip("tvm")

import tvm  # noqa: E402

from helpers_bitserial import conv_reference, random_weights  # noqa: E402
from isa_specs import host  # noqa: E402
from tvm_integration.bitserial_kernels import select  # noqa: E402
from tvm_integration.ops.bitserial_conv2d import bitserial_conv2d  # noqa: E402
from tvm_integration.ops.bitserial_dense import bitserial_dense, build_bitserial_dense  # noqa: E402
from tvm_integration.ops.bitserial_gemm import Config  # noqa: E402

pytestmark = pytest.mark.skipif(bool(host.missing("avx2", ())), reason=str(host.missing("avx2", ())))

DENSE = [Config(1, 1, "unipolar"), Config(1, 1, "hybrid"), Config(2, 3, "unipolar"), Config(3, 3, "hybrid")]


@pytest.mark.parametrize("config", DENSE, ids=lambda c: f"a{c.abits}w{c.wbits}_{c.encoding}")
def test_dense_on_avx2_equals_numpy(config):
    """7 rows (not whole column tiles), 9 channels (not whole row tiles), 700 bits (not whole words),
    row 0 and channel 0 at their largest values."""
    rng = np.random.default_rng(21)
    w = random_weights(rng, config, (9, 700))
    x = rng.integers(0, 2 ** config.abits, (7, 700)).astype(np.uint8)
    x[0], w[0] = 2 ** config.abits - 1, 2 ** config.wbits - 1
    assert select("avx2", config.abits, config.wbits, config.encoding).spec.isa == "avx2"
    np.testing.assert_array_equal(bitserial_dense(w, 7, config, isa="avx2")(x), x.astype(np.int64) @ w.T)


@pytest.mark.parametrize("use_kernel", [True, False], ids=["kernel", "plain_tir"])
def test_avx2_operator_has_no_avx512_and_inlines_the_tile(use_kernel):
    config = Config(1, 1, "unipolar")
    w = random_weights(np.random.default_rng(22), config, (8, 512))
    built = build_bitserial_dense(w, 4, config, isa="avx2", use_kernel=use_kernel)
    assembly = tvm.compile(built.mod, target=built.target).mod.inspect_source("s")
    assert "zmm" not in assembly and "vpopcnt" not in assembly and "qs_bitserial" not in assembly
    if use_kernel:
        assert "vpsadbw" in assembly and "vpshufb" in assembly          # the tile's nibble-table popcount


CONVS = [  # (config, input NHWC, weight OIHW, stride, padding)
    (Config(1, 1, "unipolar"), (1, 6, 7, 70), (5, 70, 3, 3), 1, 1),
    (Config(2, 1, "hybrid"), (1, 7, 7, 130), (6, 130, 1, 1), 2, 0),
    (Config(1, 2, "unipolar"), (2, 5, 4, 9), (3, 9, 3, 3), 2, 1),
]


@pytest.mark.parametrize("config, shape, wshape, stride, pad", CONVS,
                         ids=[f"a{c.abits}w{c.wbits}_{c.encoding}_{w[2]}x{w[3]}_s{s}" for c, _, w, s, _ in CONVS])
def test_conv2d_nhwc_on_avx2_equals_numpy(config, shape, wshape, stride, pad):
    rng = np.random.default_rng(23)
    w = random_weights(rng, config, wshape)
    x = rng.integers(0, 2 ** config.abits, shape).astype(np.uint8)
    for use_kernel in (True, False):
        got = bitserial_conv2d(w, shape, config, stride, pad, isa="avx2", use_kernel=use_kernel)(x)
        np.testing.assert_array_equal(got, conv_reference(x, w, stride, pad))
