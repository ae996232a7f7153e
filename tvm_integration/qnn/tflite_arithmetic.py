"""TFLite's integer arithmetic for the ops whose arithmetic is not onnxruntime's, as TE computations, and
the compile-time parameters (multipliers and shifts) of every op, as TFLite computes them.

The reference is TFLite's reference kernels (LiteRT's ``OpResolverType.BUILTIN_REF``): the
arithmetic of the TFLite quantization spec, gemmlowp's double rounding (SaturatingRoundingDoublingHighMul,
then RoundingDivideByPOT, both half away from zero). LiteRT's default, the XNNPACK delegate, requantizes
in float32 instead, and its builtin optimized kernels (ruy on x86) round differently again, so each of
the three differs from the others by one step in a few outputs (tests/test_tflite.py measures it).

* conv2d / depthwise / fully connected: arithmetic.py's computations with an int32 ``[2, C]`` scale
  constant (multipliers, shifts), so they run on the tensorized operators (output_stage's
  FixedPointRequantize);
* add: both inputs shifted left by 20, each scaled by its multiplier (< 1), summed, scaled again;
* average pool: the sum of the window's valid taps, divided by their count rounding half away from 0;
* mean over H, W: ``QuantizedMeanOrSum``, fixed point with 1/N folded into the multiplier.
"""
from __future__ import annotations

import math

import numpy as np
from tvm import te, tirx

from tvm_integration.output_stage import QUANT_RANGES, tflite_multiply

ADD_LEFT_SHIFT = 20


def quantize_multiplier(real: float) -> tuple[int, int]:
    """TFLite QuantizeMultiplier: ``real = multiplier * 2**(shift - 31)``, multiplier in [2**30, 2**31)."""
    if real == 0.0:
        return 0, 0
    q, shift = math.frexp(real)
    fixed = math.floor(q * (1 << 31) + 0.5)              # TfLiteRound: half away from zero (q > 0)
    if fixed == 1 << 31:
        fixed, shift = fixed // 2, shift + 1
    if shift < -31:
        return 0, 0
    return int(fixed), int(shift)


def multipliers(reals) -> np.ndarray:
    """The int32 ``[2, C]`` scale constant of a conv2d/dense: multipliers, then shifts."""
    pairs = [quantize_multiplier(float(r)) for r in np.atleast_1d(reals)]
    return np.array(pairs, dtype=np.int32).T.copy()


def mean_multiplier(real: float, count: int) -> tuple[int, int]:
    """QuantizedMeanOrSum's multiplier and shift: ``real`` quantized, then 1/count folded in by shifting
    the multiplier left by floor(log2(count)) (at most 32, and the shift kept >= -31) and dividing."""
    multiplier, shift = quantize_multiplier(real)
    extra = min(count.bit_length() - 1, 32, 31 + shift)
    return (multiplier << extra) // count, shift - extra


def round_half_away(value: float) -> int:
    """TfLiteRound (std::round) of a float32 value."""
    return int(math.copysign(math.floor(abs(float(value)) + 0.5), value))


def _clamp(y, clamp, dtype):
    return tirx.max(tirx.min(y, clamp[1]), clamp[0]).astype(dtype)


def add(a, b, *, a_offset: int, a_multiplier: int, a_shift: int, b_offset: int, b_multiplier: int, b_shift: int,
        out_multiplier: int, out_shift: int, out_zero_point: int, out_dtype: str, clamp):
    """TFLite ADD of same-shaped u8/s8 tensors (reference_integer_ops::Add)."""
    def scaled(x, offset, multiplier, shift):
        shifted = (x.astype("int32") + offset) * (1 << ADD_LEFT_SHIFT)
        return tflite_multiply(shifted, tirx.const(multiplier, "int32"), tirx.const(shift, "int32"))

    def value(*i):
        total = scaled(a(*i), a_offset, a_multiplier, a_shift) + scaled(b(*i), b_offset, b_multiplier, b_shift)
        y = tflite_multiply(total, tirx.const(out_multiplier, "int32"), tirx.const(out_shift, "int32"))
        return _clamp(y + out_zero_point, clamp, out_dtype)
    return te.compute(a.shape, value, name="tflite_add")


def avg_pool2d(x, *, pool, strides, padding, clamp):
    """NCHW average pool over the valid taps only (padding excluded from sum and count), input and
    output quantized alike (reference_integer_ops::AveragePool): the sum divided by the count, rounded
    half away from zero in C's truncating division."""
    b, c, h, w = x.shape
    (kh, kw), (sh, sw), (pt, pl, pb, pr) = pool, strides, padding
    oh, ow = (h + pt + pb - kh) // sh + 1, (w + pl + pr - kw) // sw + 1
    ry, rx = te.reduce_axis((0, kh), "ry"), te.reduce_axis((0, kw), "rx")

    def tap(n, ch, i, j):
        y, xx = i * sh + ry - pt, j * sw + rx - pl
        return tirx.if_then_else(tirx.all(y >= 0, y < h, xx >= 0, xx < w), x[n, ch, y, xx].astype("int32"), 0)
    total = te.compute((b, c, oh, ow), lambda n, ch, i, j: te.sum(tap(n, ch, i, j), axis=[ry, rx]), name="pool_sum")

    def value(n, ch, i, j):
        y0, x0 = i * sh - pt, j * sw - pl
        count = ((tirx.min(y0 + kh, h) - tirx.max(y0, 0)) * (tirx.min(x0 + kw, w) - tirx.max(x0, 0))).astype("int32")
        acc, half = total[n, ch, i, j], tirx.truncdiv(count, 2)
        return _clamp(tirx.truncdiv(tirx.if_then_else(acc > 0, acc + half, acc - half), count), clamp, x.dtype)
    return te.compute((b, c, oh, ow), value, name="tflite_avg_pool")


def mean(x, *, x_zero_point: int, multiplier: int, shift: int, out_zero_point: int, out_dtype: str,
         keepdims: bool):
    """MEAN over H, W of NCHW ``x`` (reference_ops::QuantizedMeanOrSum): ``sum - zx * N`` times the
    multiplier of ``mean_multiplier``, plus the zero point, saturated."""
    b, c, h, w = x.shape
    ry, rx = te.reduce_axis((0, h), "ry"), te.reduce_axis((0, w), "rx")
    total = te.compute((b, c), lambda n, ch: te.sum(x[n, ch, ry, rx].astype("int32"), axis=[ry, rx]), name="sum")
    count = int(h) * int(w)

    def value(n, ch, *_):
        acc = tflite_multiply(total[n, ch] - x_zero_point * count, tirx.const(multiplier, "int32"),
                              tirx.const(shift, "int32"))
        return _clamp(acc + out_zero_point, QUANT_RANGES[out_dtype], out_dtype)
    return te.compute((b, c, 1, 1) if keepdims else (b, c), value, name="tflite_mean")


COMPUTATIONS = {"tflite_add": add, "tflite_avg_pool2d": avg_pool2d, "tflite_mean": mean}
