"""The output stage fused after the int32 accumulation: bias add, requantize, clamp, and optionally
the quantized add of a residual tensor that consumes the result (``ResidualAdd``).

Two requantizations, each bit-exact to the runtime it comes from:

* ``ScaleRequantize`` (onnxruntime, MLAS ``MlasRequantizeOutput``): ``float32(acc) * scale`` in
  float32, rounded half to even, plus the zero point, saturated to the output type;
* ``FixedPointRequantize`` (TFLite ``MultiplyByQuantizedMultiplier``): a Q31 multiplier and a power
  of two shift (positive: left), ``SaturatingRoundingDoublingHighMul`` then ``RoundingDivideByPOT``
  (both round half away from zero), plus the zero point, saturated.

Scales, multipliers and shifts are per output channel (a scalar is broadcast). Without a
requantization the output is the int32 accumulator plus bias; a ``ScaleRequantize`` to float32 is
``float32(acc + bias) * scale`` itself, unrounded (MLAS's scale output processor: onnxruntime's
MatMulIntegerToFloat). ``ScaleRequantize`` has two exact forms
of the same result: x86's (clamp in float32, then ``lrint``) and AArch64's (``OutputStage.aarch64``:
round, a saturating conversion, then clamp in integers), each the cheaper on its target.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from tvm import te, tirx

QUANT_RANGES = {"uint8": (0, 255), "int8": (-128, 127), "int32": (-2**31, 2**31 - 1)}


@dataclass(frozen=True)
class ScaleRequantize:
    scale: np.ndarray | float
    zero_point: int
    out_dtype: str


@dataclass(frozen=True)
class FixedPointRequantize:
    multiplier: np.ndarray | int
    shift: np.ndarray | int
    zero_point: int
    out_dtype: str


@dataclass(frozen=True)
class ResidualAdd:
    """onnxruntime's QLinearAdd of the stage's quantized result and a residual tensor of the output's
    shape (``qlinear_add``), applied to the result as the add's operand ``operand`` (0: first, 1:
    second: the two are not symmetric in float32). The stage then outputs the add's result, and the
    result it replaces is never written. ``residual_dtype``: the residual tensor's."""
    ratio_a: float
    ratio_b: float
    fixed: float
    out_dtype: str
    clamp: tuple[int, int]
    operand: int
    residual_dtype: str
    defined: tuple | None = None
    neon: tuple | None = None

    def expression(self, result, residual, result_dtype: str, centered_on: int | None = None):
        """The add of ``result`` (of the 8-bit ``result_dtype``, whatever the expression's own type) and
        ``residual``; ``centered_on``: ``result`` is the float32 of that value less this zero point (a
        ScaleRequantize result before its zero point is added: qlinear_add's ``centered``)."""
        def in_order(of_result, of_residual):      # (a, b) of the add: the result is operand ``self.operand``
            return (of_result, of_residual) if self.operand == 0 else (of_residual, of_result)
        a, b = in_order(result, residual)
        return qlinear_add(a, b, self.ratio_a, self.ratio_b, self.fixed, self.out_dtype, self.clamp, self.defined,
                           self.neon, in_order(result_dtype, self.residual_dtype), in_order(centered_on, None))


def qlinear_add(a, b, ratio_a: float, ratio_b: float, fixed: float, out_dtype: str, clamp, defined=None, neon=None,
                dtypes: tuple[str, str] | None = None, centered: tuple[int | None, int | None] = (None, None)):
    """QLinearAdd as MLAS's AVX2 kernel computes it: ``fma(a, sa/sc, fma(b, sb/sc, fixed))`` with
    ``fixed = zc - (sa/sc * za + sb/sc * zb)`` (computed by the caller in float32), rounded half to
    even, saturated to ``clamp``. ``defined``, (sa, za, sb, zb, sc, zc): as ONNX defines a QDQ Add
    instead (the reference of a build for Arm, qnn/runtime/arm_reference.py): each input dequantized,
    the two added and the sum divided by sc, each step rounded to float32, then rounded half to even
    (multiplied by 1/sc instead where that gives every input pair the same output, ``divides_alike``,
    elsewhere by its double reciprocal, ``quotient``: the float32 quotient itself, without a division);
    the ratios' form rounds a sum within a few ulps of a half step apart (63.4999979 -> 64). ``neon``,
    the same six: as MLAS's NEON kernel computes onnxruntime's QLinearAdd (``neon_qlinear_add``). ``dtypes``:
    the integer types whose values ``a`` and ``b`` hold (default: their own types). ``centered``: for each
    operand, None, or the zero point z where it is the float32 of its integer value less z (a requantized
    result before its zero point): the definition then dequantizes it without converting it to an integer
    and back, which on AArch64 took four micro-ops of the one pipe that converts (fcvtzs, scvtf), and the
    other forms add z back."""
    if defined is None:
        a, b = (x if z is None else x + float(z) for x, z in zip((a, b), centered))
    if neon is not None:
        return neon_qlinear_add(a, b, neon, out_dtype, clamp)
    if defined is not None:
        sa, za, sb, zb, sc, zc = defined
        fa, fb = (_less_zero_point(x, z, c) * tirx.const(s, "float32")
                  for x, s, z, c in ((a, sa, za, centered[0]), (b, sb, zb, centered[1])))
        total, bounds = fenced(fenced(fa) + fenced(fb)), (clamp[0] - zc, clamp[1] - zc)
        reciprocal = divides_alike(defined, dtypes or (element_dtype(a), element_dtype(b)), bounds)
        y = quotient(total, sc) if reciprocal is None else total * tirx.const(reciprocal, "float32")
        return round_narrowed(y, clamp, zc, out_dtype)           # a build for Arm's, and its cheaper rounding

    def fma(x, y, z):
        return tirx.call_intrin("float32", "tirx.fma", x, y, z)      # one rounding, as vfmadd
    y = fma(a.astype("float32"), tirx.const(ratio_a, "float32"),
            fma(b.astype("float32"), tirx.const(ratio_b, "float32"), tirx.const(fixed, "float32")))
    return round_saturated(y, clamp, out_dtype)


def _less_zero_point(x, zero_point: int, centered_on: int | None):
    """The float32 of an operand's integer value less its ``zero_point``, exact: from an integer ``x``, or from
    the float32 ``x`` of that value less ``centered_on`` (its difference from ``zero_point`` is an integer
    of a few bits, so the sum is exact too)."""
    if centered_on is None:
        return (x.astype("int32") - zero_point).astype("float32")
    return x if centered_on == zero_point else x + float(centered_on - zero_point)


def neon_add_multipliers(ratio_a: np.float32, ratio_b: np.float32) -> tuple[int, int, int] | None:
    """(shift, multiplier_a, multiplier_b) as MLAS's ``MlasCalcQLinearAddParameters`` (qladd.cpp, NEON)
    turns the float32 scale ratios sa/sc and sb/sc into integers: each times 2^shift, shift = 21 less
    the greater ratio's exponent, rounded half to even, so the greater is a 22-bit integer; None where
    it refuses them (a ratio below 2^-14 or not below 256, a shift outside [13, 31], a multiplier
    that rounds up to 2^22) and falls back to its float formula."""
    if not all(2.0 ** -14 <= r < 256.0 for r in (ratio_a, ratio_b)):
        return None
    exponent = int(np.float32(max(ratio_a, ratio_b)).view(np.uint32) >> 23) - 127
    shift = 21 - exponent
    if not 13 <= shift <= 31:
        return None
    multiplier_a, multiplier_b = (int(np.rint(np.float32(r) * np.float32(2.0 ** shift))) for r in (ratio_a, ratio_b))
    if multiplier_a >= 2 ** 22 or multiplier_b >= 2 ** 22 or max(multiplier_a, multiplier_b) < 2 ** 21:
        return None
    return shift, multiplier_a, multiplier_b


def neon_qlinear_add(a, b, quant: tuple, out_dtype: str, clamp):
    """onnxruntime's QLinearAdd (com.microsoft) as its AArch64 build computes it, MLAS's NEON kernel
    (``MlasQLinearAddKernelHelper``, qladd.cpp): with ``neon_add_multipliers``' integers the sum
    ``(a - za) * multiplier_a + (b - zb) * multiplier_b`` exact in int32, 1 taken from a negative sum
    (vsraq_n_s32), shifted right with rounding (vrshlq_s32: ties away from zero), plus zc, saturated.
    Where MLAS refuses the ratios, its float formula (``MlasQLinearAddKernelRawHelper``) as GCC built it:
    ``fma(a - za, sa, (b - zb) * sb)`` (the first product contracted into the sum), divided by sc,
    clamped to the type's range less zc, zc added, each in float32, rounded half to even.
    ``quant``: (sa, za, sb, zb, sc, zc)."""
    sa, za, sb, zb, sc, zc = quant
    multipliers = neon_add_multipliers(np.float32(sa) / np.float32(sc), np.float32(sb) / np.float32(sc))
    if multipliers is None:
        return _neon_float_add(a, b, quant, out_dtype, clamp)
    return _neon_integer_add(a, b, za, zb, zc, *multipliers, clamp, out_dtype)


def neon_qlinear_add_runtime(a, b, quant: tuple, out_dtype: str, clamp):
    """``neon_qlinear_add`` of scales and zero points known at run time only (``quant``: six scalar
    expressions, the scales float32): MLAS's kernel computes its multipliers on each call
    (``MlasCalcQLinearAddParameters``), so the kernel here computes ``neon_add_multipliers`` on them and
    takes the integer sum where they exist, the float formula where it refuses them."""
    sa, za, sb, zb, sc, zc = quant
    ratio_a, ratio_b = fenced(sa / sc), fenced(sb / sc)
    exponent = tirx.shift_right(tirx.reinterpret("int32", tirx.max(ratio_a, ratio_b)), 23) - 127
    shift = tirx.max(tirx.min(21 - exponent, 31), 13)
    power = tirx.shift_left(tirx.const(1, "int64"), shift.astype("int64")).astype("float32")      # 2^shift, exact
    multiplier_a, multiplier_b = (round_to_int(r * power) for r in (ratio_a, ratio_b))
    accepted = tirx.all(*(tirx.all(r >= 2.0 ** -14, r < 256.0) for r in (ratio_a, ratio_b)),
                        shift == 21 - exponent, multiplier_a < 2 ** 22, multiplier_b < 2 ** 22,
                        tirx.max(multiplier_a, multiplier_b) >= 2 ** 21)
    return tirx.if_then_else(accepted,
                             _neon_integer_add(a, b, za, zb, zc, shift, multiplier_a, multiplier_b, clamp, out_dtype),
                             _neon_float_add(a, b, quant, out_dtype, clamp))


def _neon_integer_add(a, b, za, zb, zc, shift, multiplier_a, multiplier_b, clamp, out_dtype: str):
    """MLAS's NEON integer sum (``neon_qlinear_add``), each parameter a number or an int32 expression."""
    total = (a.astype("int32") - za) * multiplier_a + (b.astype("int32") - zb) * multiplier_b
    total = total + tirx.shift_right(total, 31)             # -1 where negative
    rounded = tirx.shift_right(total, shift) + tirx.bitwise_and(tirx.shift_right(total, shift - 1), 1)
    return (tirx.max(tirx.min(rounded + zc, clamp[1]), clamp[0])).astype(out_dtype)


def _neon_float_add(a, b, quant: tuple, out_dtype: str, clamp):
    """MLAS's float formula as GCC built it (``neon_qlinear_add``); ``quant``: numbers or expressions
    (scales float32, zero points int32)."""
    sa, za, sb, zb, sc, zc = (_float32(v) if i % 2 == 0 else v for i, v in enumerate(quant))
    fb = fenced((b.astype("int32") - zb).astype("float32") * sb)
    total = tirx.call_intrin("float32", "tirx.fma", (a.astype("int32") - za).astype("float32"), sa, fb)
    lo, hi = QUANT_RANGES[out_dtype]
    y = fenced(fenced(total) / sc)
    y = fenced(tirx.max(tirx.min(y, _float32(hi - zc)), _float32(lo - zc)) + _float32(zc))
    return round_saturated(y, clamp, out_dtype)


def rndnu_parameters(scale: float) -> tuple[int, int, int]:
    """XNNPACK's rndnu parameters of a float32 ``scale``: (multiplier, its mantissa in [2^30, 2^31); pre, the
    left shift of the product ahead of it; post, the rounding right shift after it)."""
    bits = int(np.float32(scale).view(np.uint32))
    shift = 126 - (bits >> 23)
    post = max(shift, 1)
    return ((bits & 0x7FFFFF) | 0x800000) << 7, post - shift, post


def _float32(value):
    """A number or a scalar expression as a float32 expression."""
    return tirx.const(value, "float32") if isinstance(value, (int, float, np.number)) else value.astype("float32")


def element_dtype(x) -> str:
    """The dtype of a TE tensor's element (``dtype``) or of an expression (``ty``)."""
    return str(x.dtype if hasattr(x, "dtype") else x.ty.dtype)


def quotient(value, scale: float, lanes: int = 1):
    """float32 ``value / scale`` (``lanes`` wide; ``scale`` a positive float32) as a product, in double by
    the double reciprocal, or in float32 where the reciprocal is a float32 (a power-of-two scale): equal to
    the division for every float32 ``value`` (the argument: qnn/prim/neon_quantize.py), and a vector
    division costs several times a multiply on Arm cores."""
    reciprocal = 1.0 / float(np.float32(scale))
    if float(np.float32(reciprocal)) == reciprocal:
        return value * broadcast(tirx.const(reciprocal, "float32"), lanes)
    product = tirx.Cast(vector_type("float64", lanes), value) * broadcast(tirx.const(reciprocal, "float64"), lanes)
    return tirx.Cast(vector_type("float32", lanes), product)


def divided(value, divisor, lanes: int = 1):
    """float32 ``value / divisor`` (``lanes`` wide; ``divisor`` a positive float32 scalar known at run time) as
    the product by its double reciprocal, rounded to float32: the quotient itself (``quotient``'s argument),
    without a vector division; LLVM computes the reciprocal once where the divisor is invariant."""
    reciprocal = broadcast(tirx.const(1.0, "float64") / divisor.astype("float64"), lanes)
    return tirx.Cast(vector_type("float32", lanes), tirx.Cast(vector_type("float64", lanes), value) * reciprocal)


def broadcast(value, lanes: int):
    return value if lanes == 1 else tirx.Broadcast(value, lanes)


def vector_type(dtype: str, lanes: int) -> str:
    return dtype if lanes == 1 else f"{dtype}x{lanes}"


def divides_alike(defined: tuple, dtypes: tuple[str, str], bounds: tuple[int, int]) -> np.float32 | None:
    """``1 / sc`` in float32 when the product by it rounds and saturates to ``bounds`` the defined sum of
    every pair of inputs of ``dtypes`` as the division by ``sc`` does, else None: a vector division costs
    several times a multiply on Arm cores, and an Add's inputs are few enough (65 536 pairs) to try each.
    ``defined``: (sa, za, sb, zb, sc, zc), as ``qlinear_add``'s."""
    if any(d not in ("uint8", "int8") for d in dtypes):
        return None
    sa, za, sb, zb, sc, _ = defined
    fa, fb = ((np.arange(QUANT_RANGES[d][0], QUANT_RANGES[d][1] + 1) - z).astype(np.float32) * np.float32(s)
              for d, s, z in zip(dtypes, (sa, sb), (za, zb)))
    total = fa[:, None] + fb[None, :]
    reciprocal = np.float32(1) / np.float32(sc)
    divided, multiplied = (np.clip(np.rint(y), *bounds) for y in (total / np.float32(sc), total * reciprocal))
    return reciprocal if np.array_equal(divided, multiplied) else None


@dataclass(frozen=True)
class OutputStage:
    """``bias``: int32 per output channel; ``relu``: clamp below at the output's zero (the zero point
    when requantized); ``clamp``: (lo, hi) in the output's integer domain; ``residual``: a quantized
    add applied to the requantized result (the operator then reads a second tensor); ``aarch64``: a
    ScaleRequantize without a residual add in the form cheaper on AArch64 (``_saturated_result``, the
    same result), set by the operators built for an Arm core (ops/neon_gemm.py); ``bias_in_accumulator``: the
    accumulator started from the bias (ops/neon_gemm.py), which the stage then does not add; ``short``: every
    rounded product plus the zero point lies in int16 (``bounded_forms``), so ``round_narrowed`` may narrow by
    truncation."""
    bias: np.ndarray | None = None
    requantize: ScaleRequantize | FixedPointRequantize | None = None
    relu: bool = False
    clamp: tuple[int, int] | None = None
    residual: ResidualAdd | None = None
    aarch64: bool = False
    float_by_bits: bool = False
    bias_in_accumulator: bool = False
    short: bool = False

    def __post_init__(self):
        if self.requantize is not None and self.requantize.out_dtype not in ("uint8", "int8") and not self.to_float:
            raise ValueError(f"requantize to uint8, int8 or (by a scale) float32, not {self.requantize.out_dtype!r}")
        if self.residual is not None and (self.requantize is None or self.to_float):
            raise ValueError("a residual add needs a requantized result")

    @property
    def to_float(self) -> bool:
        """The float32 product, neither rounded nor clamped (MatMulIntegerToFloat)."""
        return isinstance(self.requantize, ScaleRequantize) and self.requantize.out_dtype == "float32"

    @property
    def result_dtype(self) -> str:
        """The dtype of the requantized result (before a residual add)."""
        return self.requantize.out_dtype if self.requantize else "int32"

    @property
    def out_dtype(self) -> str:
        return self.residual.out_dtype if self.residual else self.result_dtype

    def bounds(self) -> tuple[int, int]:
        lo, hi = QUANT_RANGES[self.result_dtype]
        if self.relu:
            lo = max(lo, self.requantize.zero_point if self.requantize else 0)
        if self.clamp:
            lo, hi = max(lo, self.clamp[0]), min(hi, self.clamp[1])
        return lo, hi

    def channel_params(self, groups: int, n: int, n_padded: int) -> dict[str, np.ndarray]:
        """The per-channel tensors the compiled stage reads, as ``[groups, n_padded]`` arrays."""
        def per_channel(value, dtype):
            full = np.zeros((groups, n_padded), dtype)
            full[:, :n] = np.broadcast_to(np.asarray(value, dtype), (groups * n,)).reshape(groups, n)
            return full
        params = {"bias": per_channel(0 if self.bias is None else self.bias, np.int32)}
        if isinstance(self.requantize, ScaleRequantize):
            params["scale"] = per_channel(self.requantize.scale, np.float32)
        elif isinstance(self.requantize, FixedPointRequantize):
            params["multiplier"] = per_channel(self.requantize.multiplier, np.int32)
            params["shift"] = per_channel(self.requantize.shift, np.int32)
        return params

    def expression(self, acc, p: dict, g, n, residual=None):
        """TIR value of the output for accumulator ``acc`` (int32, bias not yet added) of channel (g, n);
        ``p`` maps the names of ``channel_params`` to TE tensors; ``residual``: the residual tensor's
        value at this output (with ``self.residual``)."""
        if self.residual is None:
            return self._result(acc, p, g, n)
        rq = self.requantize
        if isinstance(rq, ScaleRequantize):
            # the add reads the result as float32: the clamped integral value less the zero point, exact,
            # without a round trip through u8 (five instructions per vector)
            return self.residual.expression(round_half_even(self._clamped_product(acc, p, g, n)), residual,
                                            self.result_dtype, centered_on=rq.zero_point)
        return self.residual.expression(self._result(acc, p, g, n), residual, self.result_dtype)

    def _total(self, acc, p: dict, g, n):
        """``acc + bias``: ``acc`` itself where the accumulator started from the bias."""
        return acc if self.bias_in_accumulator else acc + p["bias"][g, n]

    def _product(self, acc, p: dict, g, n):
        """ScaleRequantize's float32 value: ``float32(acc + bias) * scale``; with ``float_by_bits`` the bias
        holds FLOAT_BITS too and ``acc + bias`` is the float32 ``1.5 * 2^23 + acc + bias`` (``by_bits``)."""
        total = self._total(acc, p, g, n)
        if self.float_by_bits:
            return (tirx.reinterpret("float32", total) - tirx.const(ROUNDING_BIAS, "float32")) * p["scale"][g, n]
        return total.astype("float32") * p["scale"][g, n]

    def _clamped_product(self, acc, p: dict, g, n):
        """ScaleRequantize before rounding and the zero point: the product clamped to the output's
        range less the zero point. The bounds are integers, so clamping before rounding gives what
        rounding first would."""
        lo, hi = self.bounds()
        zero = self.requantize.zero_point
        return tirx.max(tirx.min(self._product(acc, p, g, n), float(hi - zero)), float(lo - zero))

    def _saturated_result(self, acc, p: dict, g, n):
        """ScaleRequantize on AArch64: the product rounded half to even and saturated (round_narrowed: an
        fadd of 1.5 * 2^23 and a saturating integer subtract, where it was frintn and fcvtzs), then clamped
        in int16 lanes: two FP operations after the multiply instead of four (fmin, fmax, frintx, fcvtzs).
        Exact for every input: the bounds are integers, so clamping after rounding equals clamping before,
        and a saturated value clamps to the same bound. MobileNetV2 on Cortex-A72, llvm-mca Mcycles, x86's
        form / clamped in int32 / frintn and fcvtzs: 112x112x16->96 4.89 / 4.45 / 3.98, depthwise 112x112x32
        1.72 / - / 1.47. The fadd form on the A76 (N1 model): the TFLite MobileNetV2 26.6 -> 22.9 (depthwise
        7.35 -> 6.01, conv2d 18.0 -> 15.6), frintn and fcvtzs each taking two micro-ops on the FP pipe that
        smull and scvtf need too."""
        return round_narrowed(self._product(acc, p, g, n), self.bounds(), self.requantize.zero_point,
                              self.result_dtype, self.short)

    def _result(self, acc, p: dict, g, n):
        if self.to_float:
            return self._product(acc, p, g, n)
        lo, hi = self.bounds()
        x = self._total(acc, p, g, n)
        rq = self.requantize
        if isinstance(rq, ScaleRequantize) and self.aarch64:
            return self._saturated_result(acc, p, g, n)
        if isinstance(rq, ScaleRequantize):
            return requantize(x, p["scale"][g, n], rq.zero_point, self.result_dtype, (lo, hi))
        if isinstance(rq, FixedPointRequantize):
            x = _tflite_multiply(x, p["multiplier"][g, n], p["shift"][g, n]) + rq.zero_point
        return tirx.max(tirx.min(x, hi), lo).astype(self.result_dtype)


def _tflite_multiply(x, multiplier, shift):
    """TFLite's MultiplyByQuantizedMultiplier in TIR (int32 wrap-around on the left shift, as in C)."""
    left = tirx.max(shift, 0)
    right = tirx.max(-shift, 0)
    a = (x * tirx.shift_left(tirx.const(1, "int32"), left)).astype("int64")
    b = multiplier.astype("int64")
    ab = a * b
    nudge = tirx.if_then_else(ab >= 0, tirx.const(1 << 30, "int64"), tirx.const(1 - (1 << 30), "int64"))
    high = tirx.truncdiv(ab + nudge, tirx.const(1 << 31, "int64")).astype("int32")
    overflow = tirx.all(a == -2**31, b == -2**31)
    high = tirx.if_then_else(overflow, tirx.const(2**31 - 1, "int32"), high)
    mask = tirx.shift_left(tirx.const(1, "int32"), right) - 1
    remainder = tirx.bitwise_and(high, mask)
    threshold = tirx.shift_right(mask, 1) + tirx.if_then_else(high < 0, 1, 0)
    return tirx.shift_right(high, right) + tirx.if_then_else(remainder > threshold, 1, 0)


ROUNDING_BIAS = 12582912.0     # 1.5 * 2^23: round_narrowed's sum has a mantissa step of 1


FLOAT_BITS = int(np.float32(ROUNDING_BIAS).view(np.int32))     # 0x4B400000


def by_bits(stage: OutputStage, values: dict, largest: np.ndarray) -> OutputStage:
    """``stage`` converting ``acc + bias`` to float32 through its bits, an integer add (into the bias: FLOAT_BITS,
    added to ``values["bias"]`` here) and an fsub of 1.5 * 2^23, both on either FP pipe of a Neoverse-N1 (Cortex-A76),
    where scvtf takes two micro-ops on the one that also runs smull; exact while ``|acc + bias| < 2^22``: the sum's
    mantissa step is then 1. ``largest``: a bound of each channel's ``|acc + bias|`` (its largest ``|a| sum_k |w|``
    plus its bias's size, the bias as given, before an operator's offsets, which it leaves equal); else
    ``stage`` as it was. Only AArch64's ScaleRequantize."""
    if not (stage.aarch64 and isinstance(stage.requantize, ScaleRequantize)) or np.max(largest) >= 2 ** 22:
        return stage
    values["bias"] = values["bias"] + np.int32(FLOAT_BITS)
    return replace(stage, float_by_bits=True)


def bounded_forms(stage: OutputStage, values: dict, largest: np.ndarray) -> OutputStage:
    """``by_bits``'s stage, and ``short`` where ``largest`` (``by_bits``') times the largest scale bounds every
    rounded product plus the zero point within int16: ``round_narrowed`` then narrows by truncation."""
    stage = by_bits(stage, values, largest)
    if not (stage.aarch64 and isinstance(stage.requantize, ScaleRequantize)):
        return stage
    product = float(np.max(largest)) * float(np.max(np.abs(stage.requantize.scale))) * (1 + 2.0 ** -20)
    return replace(stage, short=product + 1 + abs(stage.requantize.zero_point) < 2 ** 15 - 1)


def round_half_even(x):
    """Round float32 ``x`` to the nearest integer, ties to even (MLAS's rounding), whatever the FP
    rounding mode: LLVM's roundeven, which TVM vectorizes (its ``nearbyint`` would keep a vectorized
    loop serial: 0.19 ms for a 56x56x64 QLinearAdd)."""
    return tirx.call_llvm_pure_intrin("float32", "llvm.roundeven", x)


def round_narrowed(x, bounds: tuple[int, int], zero_point: int, dtype: str, short: bool = False):
    """float32 ``x`` rounded half to even, plus ``zero_point``, saturated to the integer ``bounds``, as
    ``dtype``, in AArch64's cheaper form (``OutputStage._saturated_result``): ``x + 1.5 * 2^23`` (fadd,
    rounding to nearest even as the FP environment does by default; MLAS and XNNPACK rely on it too)
    leaves ``round(x)`` in the sum's low mantissa bits while ``|x| < 2^22``; its bits less the constant's
    and the zero point, subtracted with saturation (sqsub), are ``round(x) + zero_point``, and outside that
    range they lie beyond int16 on x's side (the bits of a float order as its value), so sqxtn saturates
    to int16 and the int16 lanes clamp to the bounds. frintn and fcvtzs did the rounding before: each two
    micro-ops on the Neoverse-N1's one FP pipe that also runs smull and scvtf; fadd and sqsub run on both.
    Exact for every input, NaN aside: clamping after rounding equals clamping before. ``short``: the caller
    knows ``|round(x)| + |zero_point| < 2^15`` for every x (``bounded_forms``), so the sum's low 16 bits are
    ``round(x)`` (the constant's are 0): the narrowing truncates (uzp1, eight lanes) and the zero point is an
    int16 add, or for an even z part of the fadd's constant (``round(x + z) = round(x) + z``, ties too)."""
    lo, hi = bounds
    in_sum = zero_point if short and zero_point % 2 == 0 else 0         # an even zero point in the fadd's constant
    biased = tirx.reinterpret("int32", fenced(x) + tirx.const(ROUNDING_BIAS + in_sum, "float32"))
    if short:
        value = biased.astype("int16") + tirx.const(zero_point - in_sum, "int16")
    else:
        offset = tirx.const(FLOAT_BITS - zero_point, "int32")
        value = tirx.call_llvm_pure_intrin("int32", "llvm.ssub.sat", biased, offset)
        value = tirx.max(tirx.min(value, 2**15 - 1), -2**15).astype("int16")
    return tirx.max(tirx.min(value, tirx.const(hi, "int16")), tirx.const(lo, "int16")).astype(dtype)


def round_to_int(x):
    """float32 ``x`` rounded to the nearest int32, ties to even: ``llvm.lrint``, one ``vcvtps2dq``
    (``roundeven`` then a conversion is two). It rounds in the thread's floating-point rounding mode,
    which is to nearest even unless a program changes it; MLAS's requantization (the same
    instruction) relies on it too."""
    return tirx.call_llvm_pure_intrin("int32", "llvm.lrint", x)


def requantize(acc, scale, zero_point: int, dtype: str, clamp: tuple[int, int]):
    """MLAS MlasRequantizeOutput, and XNNPACK's "fp32" requantization, which is the same, on one int32
    value: ``float32(acc) * scale`` (a float32 value) clamped to the output range less the zero point,
    rounded half to even, plus the zero point. ``clamp``: the output range, narrower than the type's
    under a fused Relu or Clip. ``OutputStage`` applies it per channel in the tensorized operators.
    ``dtype`` float32: ``float32(acc) * scale`` itself (MLAS's scale output processor: MatMulIntegerToFloat)."""
    y = acc.astype("float32") * scale
    if dtype == "float32":
        return y
    lo, hi = clamp
    y = tirx.max(tirx.min(y, float(hi - zero_point)), float(lo - zero_point))
    return (round_to_int(y) + zero_point).astype(dtype)


def round_saturated(x, bounds: tuple[int, int], dtype: str):
    """float32 ``x`` rounded half to even and saturated to the integer ``bounds``, as ``dtype``
    (the bounds are integers, so clamping before rounding is the same)."""
    return round_to_int(tirx.max(tirx.min(x, float(bounds[1])), float(bounds[0]))).astype(dtype)


def fenced(x):
    """float32 ``x`` as computed, never contracted by LLVM with what consumes it (a product into an
    FMA): for arithmetic that must round twice, as the runtime it copies does."""
    return tirx.call_llvm_pure_intrin("float32", "llvm.arithmetic.fence", x)


def requantization(scale: np.ndarray, zero_point: int, out_dtype: str):
    """The requantization a per-channel float32 ``scale`` constant of the QNN pipeline stands for (the
    scale of onnxruntime and of LiteRT's XNNPACK delegate alike)."""
    return ScaleRequantize(scale, zero_point, out_dtype)


def placeholders(params: dict[str, np.ndarray]) -> dict:
    return {name: te.placeholder(a.shape, str(a.dtype), name=name) for name, a in params.items()}
