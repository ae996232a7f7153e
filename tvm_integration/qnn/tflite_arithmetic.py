"""The integer arithmetic of LiteRT's default interpreter (``ai_edge_litert.interpreter.Interpreter``,
op resolver AUTO) for the TFLite ops that are not onnxruntime's, as TE computations, and their
compile-time parameters, computed as the interpreter computes them.

The default interpreter hands every op it can to its XNNPACK delegate; XNNPACK's quantized arithmetic
is not TFLite's reference kernels' (``OpResolverType.BUILTIN_REF``, gemmlowp fixed point), and LiteRT's
builtin optimized kernels (ruy) round differently again: on the test models each of the three differs
from the others in some outputs by one step (tests/test_tflite.py). What the default interpreter does,
x86, LiteRT 2.3 (XNNPACK's ``src/microparams-init.c``, ``src/operators/reduce-nd.c``,
``src/xnnpack/requantization.h``):

* conv2d, depthwise, fully connected (XNNPACK qs8/qc8w/qu8 "fp32" requantization): onnxruntime's,
  ``float32(acc) * scale`` with ``scale = x_scale * w_scale / y_scale`` in float32, rounded half to even
  (arithmetic.py's conv2d and dense, the tensorized operators' ScaleRequantize); a fused activation
  bounds the output at ``activation_bound``;
* add (XNNPACK qs8/qu8 vadd): 21-bit multipliers, ``(bias + a * ma + b * mb) >> shift``;
* mean over H, W (XNNPACK reduce, then its int32 -> q8 convert): the int32 sum, times
  ``(x_scale / y_scale) * (1 / N)`` in float32, plus a float zero point, rounded half to even;
* average pool: XNNPACK takes only float pools, so TFLite's builtin kernel runs it: the sum of the
  window's valid taps divided by their count, rounded half away from zero.

Measured (tests/test_tflite.py, and every input pair of add and every sum of mean on single-op
models): these formulas reproduce the default interpreter exactly.
"""
from __future__ import annotations

import math

import numpy as np
from tvm import te, tirx

from tvm_integration.ops.output_stage import QUANT_RANGES, fenced, round_saturated

ADD_SCALE_RANGE = (1.0 / 1024.0, 256.0)     # the delegate takes an ADD only if each input/output scale is in it


def activation_bound(real: float, scale: np.float32, zero_point: int, dtype: str) -> int:
    """XNNPACK's ``xnn_qs8_quantize`` / ``xnn_qu8_quantize`` of a fused activation's bound (0, 6, +-1,
    +-inf): ``lrintf(clamp(real / scale + zero_point))`` in float32."""
    lo, hi = QUANT_RANGES[dtype]
    with np.errstate(over="ignore"):
        value = np.float32(np.float32(real) / scale) + np.float32(zero_point)
    return int(np.rint(np.clip(value, lo, hi)))


def builtin_activation_bound(real: float, scale: np.float32, zero_point: int, dtype: str) -> int:
    """TFLite's CalculateActivationRangeQuantized (its builtin kernels): ``zero_point +
    round_half_away(real / scale)``, clamped to the type."""
    lo, hi = QUANT_RANGES[dtype]
    if math.isinf(real):
        return lo if real < 0 else hi
    value = float(np.float32(np.float32(real) / scale))
    return min(max(zero_point + int(math.copysign(math.floor(abs(value) + 0.5), value)), lo), hi)


def add_params(a_scale, a_zero_point: int, b_scale, b_zero_point: int, out_scale) -> dict:
    """``xnn_init_qs8_add_minmax_scalar_params``: the ratios ``a_scale / out_scale`` and ``b_scale /
    out_scale`` in float32 times ``2**shift`` rounded to integers, the larger in [2**20, 2**21); the
    zero points and the rounding half folded into ``bias``."""
    ratio_a = np.float32(np.float32(a_scale) / np.float32(out_scale))
    ratio_b = np.float32(np.float32(b_scale) / np.float32(out_scale))
    shift = 21 - math.frexp(float(max(ratio_a, ratio_b)))[1]
    a_multiplier, b_multiplier = (int(np.rint(float(r) * 2.0 ** shift)) for r in (ratio_a, ratio_b))
    bias = (1 << (shift - 1)) - a_multiplier * a_zero_point - b_multiplier * b_zero_point
    return dict(a_multiplier=a_multiplier, b_multiplier=b_multiplier, bias=bias, shift=shift)


def add(a, b, *, a_multiplier: int, b_multiplier: int, bias: int, shift: int, out_zero_point: int, out_dtype: str,
        clamp):
    """XNNPACK's qs8/qu8 vadd of same-shaped tensors: ``(bias + a * ma + b * mb) >> shift`` (arithmetic
    shift), plus the zero point, clamped."""
    def value(*i):
        acc = (tirx.const(bias, "int32") + a(*i).astype("int32") * a_multiplier
               + b(*i).astype("int32") * b_multiplier)
        y = tirx.shift_right(acc, tirx.const(shift, "int32")) + out_zero_point
        return tirx.max(tirx.min(y, clamp[1]), clamp[0]).astype(out_dtype)
    return te.compute(a.shape, value, name="tflite_add")


def avg_pool2d(x, *, pool, strides, padding, clamp):
    """NCHW average pool over the valid taps only (padding excluded from sum and count), input and
    output quantized alike (TFLite's builtin AveragePool): the sum divided by the count, rounded half
    away from zero in C's truncating division."""
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
        y = tirx.truncdiv(tirx.if_then_else(acc > 0, acc + half, acc - half), count)
        return tirx.max(tirx.min(y, clamp[1]), clamp[0]).astype(x.dtype)
    return te.compute((b, c, oh, ow), value, name="tflite_avg_pool")


def mean_params(x_scale, x_zero_point: int, out_scale, out_zero_point: int, count: int) -> dict:
    """XNNPACK's mean of ``count`` values: ``scale = (x_scale / y_scale) * (1 / count)`` in float32, and
    the input zero point folded into a float output zero point ``y_zp - (count * x_zp) * scale``."""
    scale = np.float32(np.float32(np.float32(x_scale) / np.float32(out_scale)) * np.float32(np.float32(1) / count))
    offset = np.float32(out_zero_point) - np.float32(np.float32(count * x_zero_point) * scale)
    return dict(scale=float(scale), offset=float(offset))


def mean(x, *, scale: float, offset: float, out_dtype: str, keepdims: bool):
    """MEAN over H, W of NCHW ``x``: ``float32(sum) * scale + offset`` rounded half to even, saturated.
    The product is fenced so LLVM does not contract it with the sum into one FMA (XNNPACK rounds twice)."""
    b, c, h, w = x.shape
    ry, rx = te.reduce_axis((0, h), "ry"), te.reduce_axis((0, w), "rx")
    total = te.compute((b, c), lambda n, ch: te.sum(x[n, ch, ry, rx].astype("int32"), axis=[ry, rx]), name="sum")

    def value(n, ch, *_):
        product = total[n, ch].astype("float32") * tirx.const(scale, "float32")
        return round_saturated(fenced(product) + tirx.const(offset, "float32"), QUANT_RANGES[out_dtype], out_dtype)
    return te.compute((b, c, 1, 1) if keepdims else (b, c), value, name="tflite_mean")


COMPUTATIONS = {"tflite_add": add, "tflite_avg_pool2d": avg_pool2d, "tflite_mean": mean}
