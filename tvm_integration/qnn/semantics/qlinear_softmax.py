"""QLinearSoftmax as onnxruntime 1.32's CPU kernel computes it (contrib_ops/cpu/quantization/
qlinear_softmax.cc; its QDQ transformer turns ``Q(Softmax(DQ(x)))`` into it at any opset and axis:
rewrite.py brings each to rows of the last axis, as the kernel does). It
does not compute the float softmax: a 256-entry float table of exp, shifted by a headroom chosen
from the row length, indexed by ``x - max + 255``; the row's values summed in float in order; each
``round(e * floor(1 / y_scale) / sum) + y_zero_point`` in double, saturated to the output type. The
result can differ from the float path's by several steps, so a graph that onnxruntime fuses must
be computed this way.

Read from the 1.32 wheel's machine code, which differs from the published source in its last step
(double, not float, and int8 saturated, not wrapped). The in-order float sum of a long row carries
a rounding error of about a millionth, so every bit counts: the table's headroom taken as the
correctly rounded log instead of logf's (one part in a million on every entry) moved 4 of 1,769,472
outputs of a BERT layer at rows of 384 by a step, and the last step in float 2 more.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import math

import numpy as np
from tvm import te, tirx

from tvm_integration.qnn.prim.softmax_rows import ROW_GROUP

FLOAT_MAX = np.finfo(np.float32).max


@functools.cache
def _logf():
    """The C library's logf, which onnxruntime calls for the headroom (``log`` of a float argument
    is ``std::log(float)``). It is not correctly rounded: below 2^20 it differs from float32(log(x))
    at 22 row lengths, the first 60594."""
    libm = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
    libm.logf.restype, libm.logf.argtypes = ctypes.c_float, [ctypes.c_float]
    return libm.logf


def exp_table(x_scale: np.float32, length: int) -> np.ndarray:
    """float32 ``[256]``: entry i is exp((i - 255 + shift) * x_scale), the C library's exp in double
    (numpy's own exp differs from it in the last bit of 5% of doubles), rounded to float;
    ``shift`` = max(0, logf(FLT_MAX / length) - 5) / x_scale keeps the row's sum finite."""
    headroom = _logf()(float(np.float32(FLOAT_MAX) / np.float32(length)))
    shift = max(0.0, headroom - 5.0) / float(x_scale)
    return np.array([math.exp((i - 255 + shift) * float(x_scale)) for i in range(256)]).astype(np.float32)


def output_multiplier(y_scale: float) -> float:
    """onnxruntime's ``floor(1 / y_scale)``: computed in float, and again in double where the float
    quotient overflows (a scale below 2^-128)."""
    with np.errstate(divide="ignore", over="ignore"):
        single = np.floor(np.float32(1) / np.float32(y_scale))
        return float(single if np.isfinite(single) else np.floor(1 / np.float64(np.float32(y_scale))))


# below this multiplier floor(1 / y_scale), a quotient e * m / sum is either a half-integer or at least
# 2^-25 / m from one (e * m and (k + 1/2) * sum are multiples of ulp(e) or ulp(sum) / 2, e >= sum / 2m near
# k + 1/2), farther than the double division's rounding (2^-44 below 512, where the output saturates):
# rounding the division's double rounds the exact quotient, half to even
EXACT_QUOTIENT_BELOW = 2.0 ** 19


def softmax(x, table, *, y_scale: float, out_zero_point: int, out_dtype: str):
    """``x [..., D]`` (u8 or s8) -> ``out_dtype``; ``table`` from exp_table. Each row's max, sum and
    reciprocal are taken over the rows flattened and rounded up to ROW_GROUP (the last row again), so
    that a schedule can take the rows in whole groups (prim/softmax_rows.py). The division in double
    rounded to an integer is the exact quotient's rounding (EXACT_QUOTIENT_BELOW), so each row takes
    one division, of its ``reciprocal``: an element's ``below`` = floor(n * reciprocal) is its
    quotient's floor, or the integer next to it when the quotient is within 2^-40 of that integer,
    and the sign of n - (below + 1/2) * sum (exact products in double) decides the rounding."""
    *rows, d = (int(n) for n in x.shape)
    count = int(np.prod(rows))
    strides = [int(np.prod(rows[j + 1:])) for j in range(len(rows))]

    def row_of(r):
        r = tirx.min(r, count - 1)
        return tuple(r // stride % n for stride, n in zip(strides, rows))

    def flat(i):
        return sum(v * stride for v, stride in zip(i, strides))
    padded = -(-count // ROW_GROUP) * ROW_GROUP
    k = te.reduce_axis((0, d), "k")
    top = te.compute((padded,), lambda r: te.max(x[(*row_of(r), k)].astype("int32"), axis=k), name="top")

    def entry(row, r, j):
        return table[x[(*row, j)].astype("int32") - top[r] + 255]
    s = te.reduce_axis((0, d), "s")
    total = te.compute((padded,), lambda r: te.sum(entry(row_of(r), r, s), axis=s), name="total")
    m = output_multiplier(y_scale)
    multiplier = tirx.const(m, "float64")
    info = np.iinfo(out_dtype)
    saturated = lambda q: tirx.max(tirx.min(q, float(info.max)), float(info.min)).astype(out_dtype)
    zero = tirx.const(float(out_zero_point), "float64")
    if m >= EXACT_QUOTIENT_BELOW:
        return te.compute(x.shape, lambda *i: saturated(tirx.nearbyint(
            entry(i[:-1], flat(i[:-1]), i[-1]).astype("float64") * multiplier / total[flat(i[:-1])].astype("float64"))
            + zero), name="qlinear_softmax")
    reciprocal = te.compute((padded,), lambda r: tirx.const(1.0, "float64") / total[r].astype("float64"),
                            name="reciprocal")
    one, none = tirx.const(1.0, "float64"), tirx.const(0.0, "float64")

    def value(*i):
        r = flat(i[:-1])
        n, sum_ = entry(i[:-1], r, i[-1]).astype("float64") * multiplier, total[r].astype("float64")
        below = tirx.floor(n * reciprocal[r])
        beyond = n - (below + 0.5) * sum_                     # its sign: the quotient against below + 1/2
        odd = below - tirx.floor(below * 0.5) * 2.0
        up = tirx.Select(beyond > none, one, tirx.Select(beyond < none, none, odd))
        return saturated(below + up + zero)
    return te.compute(x.shape, value, name="qlinear_softmax")


COMPUTATIONS = {"qlinear_softmax": softmax}
