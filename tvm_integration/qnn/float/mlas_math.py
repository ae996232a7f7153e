"""MLAS's float32 exp, erf, tanh and logistic (onnxruntime's CPU kernels: Softmax, Erf, Gelu, Tanh, Sigmoid) as
TIR expressions, step for step, so a compiled op rounds as onnxruntime does. Each ``fma`` is one the
AVX-512/FMA3 kernels (the logistic: the generic kernel, as onnxruntime's AArch64 build runs it) execute (a fused
multiply-add, one rounding); every other step rounds on its own.

Constants are MLAS's (compute.cpp ``MlasExpConstants``, erf.cpp ``MlasErfConstants``, tanh.cpp
``MlasTanhConstants``, logistic.cpp ``MlasLogisticConstants``); the polynomials are those of the kernels' vector
paths (TransKernelAvx512F.S, ErfKernelFma3.S, the FMA3 tanh kernel, logistic.cpp's ``MlasLogisticKernel``).
"""
from __future__ import annotations

from typing import Callable, NamedTuple

from isa_specs import host
from tvm import tirx
from tvm.tirx.op import fma


def f32(value: float) -> tirx.FloatImm:
    return tirx.const(value, "float32")


def _hex(text: str) -> tirx.FloatImm:
    return f32(float.fromhex(text))


ROUNDING_BIAS = f32(12582912.0)          # 1.5 * 2^23: adding it rounds to an integer
ROUNDING_BIAS_BITS = 0x4B400000          # its float32 bits
LOG2_RECIPROCAL = f32(1.44269504088896341)
LOG2_HIGH, LOG2_LOW = f32(-6.93145752e-1), f32(-1.42860677e-6)
EXP_POLY = [_hex(h) for h in ("0x1.694000p-10", "0x1.125edcp-7", "0x1.555b5ap-5", "0x1.555450p-3", "0x1.fffff6p-2")]
EXP_POLY_56 = f32(1.0)
LOWER_RANGE, LOWER_RANGE_SUM_EXP = f32(-103.9720840454), f32(-88.3762626647949)


def integer_of(biased):
    """The integer m of ``biased = ROUNDING_BIAS + m`` (|m| < 2^22, the float whose difference from the bias is
    m exactly), as an int32 read from its bits: their low bits hold m. The same as converting ``biased -
    ROUNDING_BIAS`` to an integer, without a float conversion (two uops on one pipe of NEON cores)."""
    return tirx.reinterpret("int32", biased) - ROUNDING_BIAS_BITS


def power_of_two_times(p, biased):
    """``p * 2**m`` for ``biased = ROUNDING_BIAS + m``, m in [-150, 64], rounded once as vscalefps does:
    scaled by ``2**(m + 64)`` (a normal number, the product exact) then by ``2**-64``. m converted from
    ``biased - ROUNDING_BIAS`` (as the float m the polynomial's reduction takes): ``integer_of`` here
    gave GELU's loop fewer instructions but more cycles on llvm-mca's N1 and A57 (145.6 -> 148.1, 253.2
    -> 276.1 per 16 values)."""
    exponent = tirx.Cast("int32", biased - ROUNDING_BIAS) + 64 + 127
    scale = tirx.reinterpret("float32", tirx.shift_left(tirx.max(exponent, 1), 23))
    return p * scale * f32(2.0 ** -64)


def times_power_of_two(p, biased):
    """``p * 2**m`` (``biased = ROUNDING_BIAS + m``, m in [-127, 0]) as MLAS's generic and FMA3 sum-exp kernels
    reconstruct it: 2^m built from its exponent bits ((m + 127) << 23, zero for m = -127) and one multiply."""
    return p * tirx.reinterpret("float32", tirx.shift_left(integer_of(biased) + 127, 23))


def float_lanes() -> int:
    """The float32 lanes of MLAS's vector kernels on this CPU (its sum-exp kernel accumulates one vector
    of them over a row): AVX-512F's 16 where the CPU has it, else FMA3's 8. Read from the CPU's own
    flags, which onnxruntime dispatches on, whatever QSYNTH_HOST_FEATURES takes from qsynth's host model."""
    return 16 if "avx512f" in host.cpu_model().flags else 8


class SumExp(NamedTuple):
    """How one of MLAS's sum-exp kernels bounds x and puts 2^m back."""
    lower: tirx.FloatImm            # x clamped below at it
    scale: Callable                 # ``scale(p, ROUNDING_BIAS + m)``: p * 2^m


# AVX-512F's kernel: clamped at ExpConstants.LowerRange (2^m down to 2^-150, subnormal), vscalefps.
VSCALEF = SumExp(LOWER_RANGE, power_of_two_times)
# FMA3's and the generic C++ kernel (NEON's): clamped at LowerRangeSumExp, 2^m from its exponent bits.
EXPONENT_BITS = SumExp(LOWER_RANGE_SUM_EXP, times_power_of_two)


def exp_nonpositive(x, kernel: SumExp):
    """exp(x) for x <= 0 as MLAS's sum-exp ``kernel`` computes it (softmax's, after subtracting the
    row's maximum): clamped below, range-reduced by m = round(x / ln 2) in two parts, a degree-6
    polynomial, scaled by 2^m."""
    x = tirx.max(kernel.lower, x)
    biased = fma(x, LOG2_RECIPROCAL, ROUNDING_BIAS)
    m = biased - ROUNDING_BIAS
    r = fma(m, LOG2_LOW, fma(m, LOG2_HIGH, x))
    p = EXP_POLY[0]
    for c in (*EXP_POLY[1:], EXP_POLY_56, EXP_POLY_56):
        p = fma(p, r, c)
    return kernel.scale(p, biased)


ERF_UPPER, ERF_SPLIT = f32(3.925), f32(0.921875)
ERF_SMALL = [f32(c) for c in (-5.99104969e-4, 4.99339588e-3, -2.67667342e-2, 1.12818025e-1, -3.76124859e-1,
                              1.28379151e-1)]
ERF_BIG = [f32(c) for c in (1.72948930e-5, -3.83208680e-4, 3.88393435e-3, -2.42545605e-2, 1.06777847e-1,
                            6.34846687e-1, 1.28717512e-1)]
ERF_EXP_LOWER = f32(-88.3762626647949)
ERF_EXP_POLY = [f32(c) for c in (1.38319808e-3, 8.37550033e-3, 4.16689515e-2, 1.66664466e-1, 4.99999851e-1, 1.0, 1.0)]


def erf(x):
    """MLAS's erf (onnxruntime 1.32: |x| clamped at 3.925, older MLAS 3.725); below 0.921875 an odd polynomial in x^2, above it
    1 - exp(-q(|x|)) with MLAS's own exp (its constants, not the sum-exp kernel's); the sign put back."""
    a = tirx.min(tirx.abs(x), ERF_UPPER)
    square = a * a
    small = ERF_SMALL[0]
    for c in ERF_SMALL[1:]:
        small = fma(small, square, c)
    small = fma(small, a, a)
    big = ERF_BIG[0]
    for c in ERF_BIG[1:]:
        big = fma(big, a, c)
    big = tirx.max(ERF_EXP_LOWER, -fma(big, a, a))
    biased = fma(LOG2_RECIPROCAL, big, ROUNDING_BIAS)
    m = biased - ROUNDING_BIAS
    r = fma(m, LOG2_LOW, fma(m, LOG2_HIGH, big))
    p = ERF_EXP_POLY[0]
    for c in ERF_EXP_POLY[1:]:
        p = fma(p, r, c)
    magnitude = tirx.Select(a > ERF_SPLIT, f32(1.0) - power_of_two_times(p, biased), small)
    return tirx.Select(x < f32(0.0), -magnitude, magnitude)


TANH_RANGE = f32(9.0)
TANH_ALPHA = [f32(c) for c in (-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11,
                               5.12229709037114e-08, 1.48572235717979e-05, 6.37261928875436e-04,
                               4.89352455891786e-03)]
TANH_BETA = [f32(c) for c in (1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03,
                              4.89352518554385e-03)]


def tanh(x):
    """MLAS's tanh (tanh.cpp ``MlasTanhConstants``, Eigen's rational function; onnxruntime 1.32 runs
    its FMA3 kernel on x86, AVX-512 hosts included): x clamped to [-9, 9] as vmaxps / vminps clamp
    (a NaN passes through), ``x * p(x^2) / q(x^2)`` with both polynomials FMA chains."""
    x = tirx.Select(-TANH_RANGE > x, -TANH_RANGE, x)
    x = tirx.Select(TANH_RANGE < x, TANH_RANGE, x)
    return _odd_rational(x, TANH_ALPHA, TANH_BETA)


def _odd_rational(x, alpha, beta):
    """``x * p(x^2) / q(x^2)``, Eigen's rational function of tanh and of the logistic: ``p`` and ``q`` (their
    coefficients highest first) FMA chains, x times p rounded, then divided."""
    square = x * x
    p = alpha[0]
    for c in alpha[1:]:
        p = fma(p, square, c)
    q = beta[0]
    for c in beta[1:]:
        q = fma(q, square, c)
    return x * p / q


LOGISTIC_RANGE = f32(18.0)
LOGISTIC_ALPHA = [f32(c) for c in (4.37031012579801e-11, 1.15627324459942e-07, 6.08574864600143e-05,
                                   8.51377133304701e-03, 2.48287947061529e-01)]
LOGISTIC_BETA = [f32(c) for c in (6.10247389755681e-13, 5.76102136993427e-09, 6.29106785017040e-06,
                                  1.70198817374094e-03, 1.16817656904453e-01, 9.93151921023180e-01)]


def logistic(x):
    """MLAS's logistic (logistic.cpp ``MlasLogisticConstants``, Eigen's rational function) as the generic
    kernel onnxruntime's AArch64 build runs computes it, and its x86 FMA3 kernel alike (measured equal to both
    builds: tests/test_arm_qoperator.py): x clamped to [-18, 18], ``x * p(x^2) / q(x^2) + 0.5``
    (``MlasMultiplyAddFloat32x4``, each step of the polynomials, is NEON's fused multiply-add), clamped to
    [0, 1]. Where x < 0 the sum cancels to within float32 rounding of 0.5, so small outputs are off by up
    to 3e-8 from the sigmoid."""
    x = tirx.min(tirx.max(x, -LOGISTIC_RANGE), LOGISTIC_RANGE)
    y = _odd_rational(x, LOGISTIC_ALPHA, LOGISTIC_BETA) + f32(0.5)
    return tirx.min(tirx.max(y, f32(0.0)), f32(1.0))
