"""Shared by the bitserial operator tests: random weights of a configuration and the integer
convolution computed directly from the unpacked values (numpy, int64)."""
import numpy as np


def random_weights(rng, config, shape):
    """Unipolar: codes in [0, 2**wbits); hybrid: odd values in [-(2**wbits - 1), 2**wbits - 1]."""
    codes = rng.integers(0, 2 ** config.wbits, shape)
    return codes if config.encoding == "unipolar" else 2 * codes - (2 ** config.wbits - 1)


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
