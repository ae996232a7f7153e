"""The AArch64 output stage's conversion of ``acc + bias`` to float32 through its bits (output_stage.by_bits: the bias
holds 0x4B400000, an fsub of 1.5 * 2^23 after the add, where scvtf was), run under qemu-aarch64 against numpy on a
1x1 convolution and a depthwise one whose sums reach just under 2^22 either side (u8 pixels all 255 or all 0,
weights all +-127 on some channels, biases near the bound), and on a 1x1 convolution whose sums may pass 2^22,
which keeps scvtf."""
import numpy as np
import pytest

from conftest import HOST_RUNS, skip_if

pytestmark = [pytest.mark.qemu, skip_if(HOST_RUNS.qemu)]

BOUND = 2 ** 22


def tensors(channels: int, out_channels: int, taps: int, groups: int):
    """(x u8 NHWC, w OIHW s8, bias) whose ``|sum a w| + |bias|`` is under BOUND by at most 2^15 when
    ``255 * 127 * channels * taps / groups`` is: output channels 0 and 4 weigh +127 everywhere, 1 and 5 -127, and the
    biases of 0 and 1 push their sums on the all-255 half of the image to 2^22 - 1 and 1 - 2^22."""
    rng = np.random.default_rng(50)
    k = int(np.sqrt(taps))
    x = rng.integers(0, 256, (1, 8, 16, channels)).astype(np.uint8)
    x[:, :, :8] = 255
    x[:, :4, :4] = 0
    w = rng.integers(-127, 128, (out_channels, channels // groups, k, k)).astype(np.int8)
    w[0::4][:2] = 127
    w[1::4][:2] = -127
    most = 255 * 127 * (channels // groups) * taps
    room = max(BOUND - 1 - most, 0)
    bias = rng.integers(-room // 2, room // 2 + 1, out_channels).astype(np.int32)
    bias[:4] = [room, -room, -room, room]
    return x, w, bias


def expected(x, w, bias, scale, groups: int):
    pad = w.shape[2] // 2
    xp = np.pad(x.astype(np.int64), ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    h, wd = x.shape[1:3]
    per = w.shape[1]
    acc = np.zeros((1, h, wd, w.shape[0]), np.int64)
    for o in range(w.shape[0]):
        g = o // (w.shape[0] // groups)
        for i in range(w.shape[2]):
            for j in range(w.shape[3]):
                acc[..., o] += xp[:, i:i + h, j:j + wd, g * per:(g + 1) * per] @ w[o, :, i, j].astype(np.int64)
    return np.clip(np.rint((acc + bias).astype(np.float32) * scale) + 128, 0, 255).astype(np.uint8)


@pytest.mark.parametrize("channels, out_channels, kernel, groups, by_bits", [
    (64, 32, 1, 1, True),              # 255 * 127 * 64 = 2.07e6: within 2^22 with any bias under 2.1e6
    (32, 32, 3, 32, True),             # depthwise 3x3
    (160, 32, 1, 1, False),            # 255 * 127 * 160 = 5.18e6: beyond 2^22, scvtf
])
def test_float_by_bits_is_exact_at_the_bound(channels, out_channels, kernel, groups, by_bits):
    from tvm_integration.ops import neon_gemm
    from tvm_integration.ops.output_stage import OutputStage, ScaleRequantize
    x, w, bias = tensors(channels, out_channels, kernel * kernel, groups)
    scale = np.float32(3e-5) * np.linspace(0.5, 2.0, out_channels, dtype=np.float32)
    stage = OutputStage(bias=bias, requantize=ScaleRequantize(scale, 128, "uint8"), aarch64=True)
    op = neon_gemm.conv2d(w, x.shape, 1, kernel // 2, groups=groups, stage=stage, mcpu="cortex-a76")
    np.testing.assert_array_equal(op(x), expected(x, w, bias, scale, groups))
    assert ("scvtf" not in op.assembly) == by_bits
