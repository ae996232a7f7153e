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

from tvm_integration.ops.conv2d import output_size
from tvm_integration.ops.output_stage import QUANT_RANGES, fenced, requantize, rndnu_parameters, round_saturated
from tvm_integration.qnn.semantics.arithmetic import channel_sums, per_channel, zero_point_product
from tvm_integration.qnn.semantics.quant import broadcast_index, broadcast_shape

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
    """XNNPACK's qs8/qu8 vadd (and vaddc, one operand broadcast): ``(bias + a * ma + b * mb) >> shift``
    (arithmetic shift), plus the zero point, clamped; ``a`` and ``b`` broadcast as numpy does."""
    def value(*i):
        acc = (tirx.const(bias, "int32") + a(*broadcast_index(a.shape, i)).astype("int32") * a_multiplier
               + b(*broadcast_index(b.shape, i)).astype("int32") * b_multiplier)
        y = tirx.shift_right(acc, tirx.const(shift, "int32")) + out_zero_point
        return tirx.max(tirx.min(y, clamp[1]), clamp[0]).astype(out_dtype)
    return te.compute(broadcast_shape(a.shape, b.shape), value, name="tflite_add")


MUL_SCALE_RANGE = (2.0 ** -16, 256.0)     # the delegate takes a MUL only if a_scale * b_scale / y_scale is in it


def mul(a, b, *, a_zero_point: int, b_zero_point: int, scale: float, out_zero_point: int, out_dtype: str, clamp,
        neon: bool = False):
    """XNNPACK's qs8/qu8 vmul, broadcast as numpy does. On x86 ("fp32" requantization, output_stage.requantize):
    ``float32((a - za) * (b - zb)) * scale``, scale = ``a_scale * b_scale / y_scale`` in float32, rounded half to
    even, plus the zero point, clamped. ``neon`` (bind.py: LiteRT's AArch64 build, whose NEON vmul kernels
    requantize by "rndnu", ``_rndnu``): the product, its operands int16 lanes (smull), times the scale's 24-bit
    mantissa as XNNPACK's sqdmulh takes it, then shifted right rounding half up; it rounds a tie (a product that
    is an odd multiple of 64 at a scale of 2^-7) up where fp32 rounds it to even, and otherwise agrees with it
    on the scales measured (tests/test_litert_aarch64.py)."""
    def value(*i):
        product = zero_point_product(a, b, i, a_zero_point, b_zero_point, neon)
        if neon:
            return _rndnu(product, scale, out_zero_point, out_dtype, clamp)
        return requantize(product, tirx.const(scale, "float32"), out_zero_point, out_dtype, clamp)
    return te.compute(broadcast_shape(a.shape, b.shape), value, name="tflite_mul")


def _rndnu(product, scale: float, zero_point: int, dtype: str, clamp):
    """XNNPACK's "rndnu" requantization of an int32 ``product`` (``xnn_init_qs8_mul_minmax_rndnu_neon_params``):
    the float32 scale's mantissa as a multiplier in [2^30, 2^31), shifted left by ``pre`` (exact: a product of
    8-bit operands has 17 bits), the high half of its doubled product with the multiplier (sqdmulh, rounding
    down; never saturating here), a right shift by ``post`` that rounds half up (srshl), plus the zero point,
    clamped (int16 saturation in between changes nothing: the bounds are 8-bit)."""
    multiplier, pre, post = rndnu_parameters(scale)
    acc = tirx.shift_left(product, tirx.const(pre, "int32")).astype("int64")
    # bounded by INT32_MAX as sqdmulh saturates (never reached here); LLVM drops that bound and computes the
    # high half by 64-bit products: prim/neon_mul.py builds the usual layouts on sqdmulh itself
    high = tirx.min(tirx.shift_right(acc * tirx.const(multiplier, "int64"), tirx.const(31, "int64")),
                    tirx.const(2**31 - 1, "int64")).astype("int32")
    rounded = tirx.shift_right(high + tirx.const(1 << (post - 1), "int32"), tirx.const(post, "int32"))
    return tirx.max(tirx.min(rounded + zero_point, clamp[1]), clamp[0]).astype(dtype)


def pad(x, *, pads, value: int):
    """Constant padding by ``pads`` [(before, after)] per axis with the integer ``value`` (a zero point)."""
    shape = [int(d) + p + q for d, (p, q) in zip(x.shape, pads)]

    def at(*i):
        inside = tirx.all(*[tirx.all(k >= p, k < p + int(d)) for k, d, (p, _) in zip(i, x.shape, pads)])
        return tirx.if_then_else(inside, x(*[k - p for k, (p, _) in zip(i, pads)]), tirx.const(value, x.dtype))
    return te.compute(shape, at, name="tflite_pad")


def resize_nearest(x, rows, cols):
    """NCHW ``x`` at the input rows and columns ``rows`` [OH], ``cols`` [OW] (int32 constants)."""
    b, c = x.shape[:2]
    return te.compute((b, c, rows.shape[0], cols.shape[0]), lambda n, ch, i, j: x[n, ch, rows[i], cols[j]],
                      name="tflite_resize_nearest")


def resize_bilinear(x, rows, cols):
    """XNNPACK's ibilinear (q11 weights): ``rows`` [3, OH] the top and bottom input rows and the weight
    ``lrintf(alpha * 2048)``, ``cols`` [3, OW] likewise; ``t = tl << 11 + (tr - tl) * ax`` (and ``b``),
    ``(t << 11 + (b - t) * ay + 2**21) >> 22``."""
    b, c = x.shape[:2]

    def value(n, ch, i, j):
        def v(r, s):
            return x[n, ch, rows[r, i], cols[s, j]].astype("int32")
        ax, ay = cols[2, j], rows[2, i]
        top = tirx.shift_left(v(0, 0), 11) + (v(0, 1) - v(0, 0)) * ax
        bottom = tirx.shift_left(v(1, 0), 11) + (v(1, 1) - v(1, 0)) * ax
        acc = tirx.shift_left(top, 11) + (bottom - top) * ay
        return tirx.shift_right(acc + (1 << 21), 22).astype(x.dtype)
    return te.compute((b, c, rows.shape[1], cols.shape[1]), value, name="tflite_resize_bilinear")


def softmax(x, table, *, scale: float, zero_point: int, out_dtype: str):
    """TFLite's optimized int8/uint8 Softmax over the last axis of 2-D ``x`` (the float lookup table of
    ``PopulateSoftmaxLookupTable``: ``table[255 - v] = expf(-input_scale * beta * v)``): the row's max,
    ``sum`` of ``table[255 - max + x]`` in float32 in order, ``p = table[...] * (1 / (sum * y_scale))``,
    ``int(p + 0.5)`` (uint8) or ``round(p)`` + zero point, clamped."""
    m, n = x.shape
    lo, hi = QUANT_RANGES[out_dtype]
    rk, rs = te.reduce_axis((0, n), "rk"), te.reduce_axis((0, n), "rs")
    top = te.compute((m,), lambda i: te.max(x[i, rk].astype("int32"), axis=rk), name="row_max")
    total = te.compute((m,), lambda i: te.sum(table[255 - top[i] + x[i, rs].astype("int32")], axis=rs), name="exp_sum")
    inverse = te.compute((m,), lambda i: tirx.const(1.0, "float32") / fenced(total[i] * tirx.const(scale, "float32")),
                         name="inverse")

    def value(i, j):
        p = fenced(table[255 - top[i] + x[i, j].astype("int32")] * inverse[i])
        y = tirx.floor(p + tirx.const(0.5, "float32")).astype("int32") + zero_point
        return tirx.max(tirx.min(y, hi), lo).astype(out_dtype)
    return te.compute((m, n), value, name="tflite_softmax")


def avg_pool2d(x, *, pool, strides, padding, clamp):
    """NCHW average pool over the valid taps only (padding excluded from sum and count), input and
    output quantized alike (TFLite's builtin AveragePool): the sum divided by the count, rounded half
    away from zero in C's truncating division."""
    b, c, h, w = x.shape
    (kh, kw), (sh, sw), (pt, pl, _, _) = pool, strides, padding
    oh, ow = output_size((h, w), pool, strides, padding)
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


def mean(x, *, scale: float, offset: float, out_dtype: str, keepdims: bool, layout: str = "NCHW"):
    """MEAN over H, W of ``x`` (NCHW, or NHWC as bind.py keeps a convolution's output): ``float32(sum) *
    scale + offset`` rounded half to even, saturated. The product is fenced so LLVM does not contract it
    with the sum into one FMA (XNNPACK rounds twice). Without ``keepdims`` the output [b, c] is the same
    in either layout."""
    total, _ = channel_sums(x, layout)

    def value(n, ch):
        product = total[n, ch].astype("float32") * tirx.const(scale, "float32")
        return round_saturated(fenced(product) + tirx.const(offset, "float32"), QUANT_RANGES[out_dtype], out_dtype)
    if not keepdims:
        return te.compute(total.shape, value, name="tflite_mean")
    return per_channel(value, total, layout, "tflite_mean")


COMPUTATIONS = {"tflite_add": add, "tflite_avg_pool2d": avg_pool2d, "tflite_mean": mean, "tflite_mul": mul,
                "tflite_pad": pad, "tflite_resize_nearest": resize_nearest, "tflite_resize_bilinear": resize_bilinear,
                "tflite_softmax": softmax}


# -- the elementwise ops' 256-entry tables (tflite/ops.py): numpy over every 8-bit value -------------
def quantize_multiplier(real: float) -> tuple[int, int]:
    """TFLite's QuantizeMultiplier (its builtin kernels' parameters): ``real = multiplier * 2**(shift - 31)``,
    the multiplier frexp's fraction times 2**31 rounded half away from zero; 0 below 2**-32."""
    if real == 0:
        return 0, 0
    fraction, shift = math.frexp(real)
    multiplier = int(math.copysign(math.floor(abs(fraction) * 2.0 ** 31 + 0.5), fraction))
    if multiplier == 1 << 31:
        multiplier, shift = multiplier // 2, shift + 1
    return (0, 0) if shift < -31 else (multiplier, shift)


def _rounding_high_mul(a, b: int, bits: int):
    """gemmlowp's SaturatingRoundingDoublingHighMul on int``bits``: ``a * b / 2**(bits - 1)`` rounded to nearest,
    ties up (a nudge of +-2**(bits - 2), less 1 below zero, then C's truncating division); its one saturating
    case, both operands the type's minimum, cannot occur: ``b`` is a multiplier."""
    product = np.asarray(a, np.int64) * b
    half = 1 << (bits - 2)
    nudged = product + np.where(product >= 0, half, 1 - half)
    return np.sign(nudged) * (np.abs(nudged) >> (bits - 1))


def _rounding_shift_right(x, exponent: int):
    """gemmlowp's RoundingDivideByPOT: ``x / 2**exponent`` rounded half away from zero."""
    x = np.asarray(x, np.int64)
    mask = (1 << exponent) - 1
    return (x >> exponent) + ((x & mask) > (mask >> 1) + (x < 0))


def multiply_by_quantized_multiplier(x, multiplier: int, shift: int):
    """TFLite's scalar MultiplyByQuantizedMultiplier (double rounding, its default build): ``x << max(shift, 0)``,
    the rounding high multiply (ties up), a rounding shift right by ``max(-shift, 0)`` (ties away from zero)."""
    x = np.asarray(x, np.int64) << max(shift, 0)
    return _rounding_shift_right(_rounding_high_mul(x, multiplier, 32), max(-shift, 0))


def multiply_by_quantized_multiplier_vector(x, multiplier: int, shift: int):
    """TFLite's MultiplyByQuantizedMultiplier4Rows, the vector path of its optimized kernels (NEON, on x86 its
    SSE emulation): ``vqrdmulh`` then ``vrshl``, both ties up: unlike the scalar path, a tie of the final shift
    below zero rounds up."""
    high = ((np.asarray(x, np.int64) << max(shift, 0)) * multiplier + (1 << 30)) >> 31
    right = max(-shift, 0)
    return (high + ((1 << right) >> 1)) >> right


def xnn_rescale_multiplier(scale) -> int:
    """XNNPACK's 8.8 fixed-point multiplier of a scale ratio (qs8/qu8 vcvt and vlrelu): ``lrintf(256 * scale)``."""
    return int(np.rint(np.float32(256) * np.float32(scale)))


def xnn_rescale(q, zx: int, multiplier, zy: int):
    """XNNPACK's qs8/qu8 vcvt and vlrelu: ``((q - zx) * multiplier + 128) >> 8``, plus ``zy`` (its ``vpmulhrsw`` of
    ``(zx - q) << 7`` by ``-multiplier`` is that); ``multiplier`` an array where it depends on ``q``."""
    return (((np.asarray(q, np.int64) - zx) * multiplier + 128) >> 8) + zy


def hard_swish_multipliers(x_scale, y_scale) -> tuple[tuple[int, int], tuple[int, int]]:
    """TFLite's HardSwishPrepare: the output multiplier ``(x_scale / 128) / y_scale`` and the "reluish" one
    ``(x_scale / 128) / (3 / 32768)`` in float32, each as (int16 multiplier, exponent): QuantizeMultiplier,
    then its top 16 bits rounded (DownScaleInt32ToInt16Multiplier)."""
    hires = np.float32(np.float32(1 / 128) * np.float32(x_scale))

    def int16(real):
        multiplier, exponent = quantize_multiplier(float(real))
        return (0x7FFF if multiplier >= 0x7FFF7FFF else (multiplier + (1 << 15)) >> 16), exponent
    return int16(hires / np.float32(y_scale)), int16(hires / np.float32(np.float32(3) / np.float32(32768)))


def hard_swish_table(q, zx: int, zy: int, output: tuple[int, int], reluish: tuple[int, int]):
    """TFLite's reference int8/uint8 HardSwish in int16 fixed point, with ``hard_swish_multipliers``: the input
    ``(q - zx) * 128`` times the output multiplier; times the reluish multiplier (saturating shifts) mapped
    from [-1, 1] to [0, 1]; their product's high half, truncated; a rounding shift right by the output
    exponent; plus ``zy``."""
    (out_multiplier, out_exponent), (relu_multiplier, relu_exponent) = output, reluish
    hires = (np.asarray(q, np.int64) - zx) * 128
    preshift = _rounding_high_mul(hires, out_multiplier, 16)
    relu = hires if relu_exponent <= 0 else np.clip(hires << (relu_exponent - 1), -32768, 32767)
    relu = _rounding_high_mul(relu, relu_multiplier, 16)
    relu = np.clip(relu << 1, -32768, 32767) if relu_exponent > 0 else _rounding_shift_right(relu, -relu_exponent)
    relu = (relu + (1 << 15)) >> 1
    product = relu * preshift
    return _rounding_shift_right(np.sign(product) * (np.abs(product) >> 15), -out_exponent) + zy
