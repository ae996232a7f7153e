"""Bitserial conv2d on NCHW inputs (issue 14): packed along the channels as NHWC is, the output
channels first; against numpy (the NHWC reference on transposed tensors) on the host's tiles, on
plain TIR, on AVX2 and (under qemu) on NEON."""
import numpy as np
import pytest

pytest.importorskip("tvm")

from helpers_bitserial import conv_reference, random_weights  # noqa: E402
from isa_specs import host  # noqa: E402
from tvm_integration import cross  # noqa: E402
from tvm_integration.bitserial_kernels import select  # noqa: E402
from tvm_integration.dispatch import DispatchError  # noqa: E402
from tvm_integration.ops.bitserial_conv2d import bitserial_conv2d  # noqa: E402
from tvm_integration.ops.bitserial_gemm import Config  # noqa: E402


def nchw_reference(x, w, stride, pad):
    return conv_reference(x.transpose(0, 2, 3, 1), w, stride, pad).transpose(0, 3, 1, 2)


def host_tile() -> str | None:
    try:
        select("host", 1, 1, "unipolar")
        return None
    except DispatchError as e:
        return str(e)


CONVS = [  # (config, input NCHW, weight OIHW, stride, padding)
    (Config(1, 1, "unipolar"), (1, 70, 7, 6), (5, 70, 3, 3), 1, 1),
    (Config(1, 1, "hybrid"), (1, 13, 9, 7), (10, 13, 3, 3), 2, 1),
    (Config(2, 2, "hybrid"), (2, 300, 5, 6), (9, 300, 1, 1), 1, 0),      # two images
    (Config(3, 1, "unipolar"), (1, 130, 8, 8), (6, 130, 1, 1), 2, 0),
    (Config(1, 2, "unipolar"), (2, 9, 7, 5), (5, 9, 3, 3), 2, 1),        # two images, K of one word
]
IDS = [f"a{c.abits}w{c.wbits}_{c.encoding}_b{s[0]}_{w[2]}x{w[3]}_s{st}" for c, s, w, st, _ in CONVS]


@pytest.mark.skipif(host_tile() is not None, reason=str(host_tile()))
@pytest.mark.parametrize("config, shape, wshape, stride, pad", CONVS, ids=IDS)
def test_conv2d_nchw_equals_numpy(config, shape, wshape, stride, pad):
    rng = np.random.default_rng(31)
    w = random_weights(rng, config, wshape)
    x = rng.integers(0, 2 ** config.abits, shape).astype(np.uint8)
    x[0, :, :3] = 2 ** config.abits - 1          # image 0's rows 0-2 at the largest values
    got = bitserial_conv2d(w, shape, config, stride, pad, layout="NCHW")(x)
    assert got.shape == (shape[0], wshape[0], *got.shape[2:])
    np.testing.assert_array_equal(got, nchw_reference(x, w, stride, pad))


def test_conv2d_nchw_plain_tir_equals_numpy():
    config = Config(2, 1, "hybrid")
    rng = np.random.default_rng(32)
    w = random_weights(rng, config, (7, 11, 3, 3))
    x = rng.integers(0, 4, (2, 11, 6, 5)).astype(np.uint8)
    got = bitserial_conv2d(w, x.shape, config, 2, 1, use_kernel=False, layout="NCHW")(x)
    np.testing.assert_array_equal(got, nchw_reference(x, w, 2, 1))


@pytest.mark.skipif(bool(host.missing("avx2", ())), reason=str(host.missing("avx2", ())))
def test_conv2d_nchw_on_avx2_equals_numpy():
    config = Config(1, 3, "unipolar")
    rng = np.random.default_rng(33)
    w = random_weights(rng, config, (6, 100, 3, 3))
    x = rng.integers(0, 2, (1, 100, 6, 7)).astype(np.uint8)
    got = bitserial_conv2d(w, x.shape, config, 1, 1, isa="avx2", layout="NCHW")(x)
    np.testing.assert_array_equal(got, nchw_reference(x, w, 1, 1))


@pytest.mark.qemu
@pytest.mark.skipif(cross.missing_tools() is not None, reason=str(cross.missing_tools()))
def test_conv2d_nchw_on_neon_equals_numpy():
    config = Config(1, 1, "hybrid")
    rng = np.random.default_rng(34)
    w = random_weights(rng, config, (6, 90, 3, 3))
    x = rng.integers(0, 2, (1, 90, 5, 6)).astype(np.uint8)
    got = bitserial_conv2d(w, x.shape, config, 2, 1, isa="neon", layout="NCHW")(x)
    np.testing.assert_array_equal(got, nchw_reference(x, w, 2, 1))


def test_unknown_layout_is_refused():
    with pytest.raises(ValueError, match="layout must be one of NCHW, NHWC"):
        bitserial_conv2d(np.ones((2, 3, 1, 1), np.int64), (1, 4, 4, 3), Config(1, 1, "unipolar"), layout="NWHC")
