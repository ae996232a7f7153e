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


def softmax(x, table, *, y_scale: float, out_zero_point: int, out_dtype: str):
    """``x [..., D]`` (u8 or s8) -> ``out_dtype``; ``table`` from exp_table."""
    *rows, d = x.shape
    r = te.reduce_axis((0, d), "r")
    top = te.compute(rows, lambda *i: te.max(x[(*i, r)].astype("int32"), axis=r), name="top")

    def entry(i):
        return table[x[i].astype("int32") - top[i[:-1]] + 255]
    s = te.reduce_axis((0, d), "s")
    total = te.compute(rows, lambda *i: te.sum(entry((*i, s)), axis=s), name="total")
    multiplier = tirx.const(output_multiplier(y_scale), "float64")
    info = np.iinfo(out_dtype)

    def value(*i):
        ratio = entry(i).astype("float64") * multiplier / total[i[:-1]].astype("float64")
        q = tirx.nearbyint(ratio) + tirx.const(float(out_zero_point), "float64")
        return tirx.max(tirx.min(q, float(info.max)), float(info.min)).astype(out_dtype)
    return te.compute(x.shape, value, name="qlinear_softmax")


COMPUTATIONS = {"qlinear_softmax": softmax}
