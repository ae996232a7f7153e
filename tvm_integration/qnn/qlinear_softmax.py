"""QLinearSoftmax as onnxruntime 1.32's CPU kernel computes it (contrib_ops/cpu/quantization/
qlinear_softmax.cc; its QDQ transformer turns ``Q(Softmax(DQ(x)))`` over the last axis into it). It
does not compute the float softmax: a 256-entry float table of exp, shifted by a headroom chosen
from the row length, indexed by ``x - max + 255``; the row's values summed in float in order; each
``round((e * floor(1 / y_scale)) / sum) + y_zero_point``. The result can differ from the float
path's by several steps, so a graph that onnxruntime fuses must be computed this way.
"""
from __future__ import annotations

import numpy as np
from tvm import te, tirx

FLOAT_MAX = np.finfo(np.float32).max


def exp_table(x_scale: np.float32, length: int) -> np.ndarray:
    """float32 ``[256]``: entry i is exp((i - 255 + shift) * x_scale) evaluated in double, rounded
    to float; ``shift`` = max(0, ln(FLT_MAX / length) - 5) / x_scale keeps the row's sum finite."""
    headroom = float(np.log(float(np.float32(FLOAT_MAX) / np.float32(length))))
    shift = max(0.0, headroom - 5.0) / float(x_scale)
    return np.exp((np.arange(256) - 255 + shift) * float(x_scale)).astype(np.float32)


def softmax(x, table, *, y_scale: float, out_zero_point: int, out_dtype: str):
    """``x [..., D]`` (u8 or s8) -> ``out_dtype``; ``table`` from exp_table. uint8: the result above
    255 saturates; int8: onnxruntime clamps the int32 at 255 and casts (128..255 wrap), as here."""
    *rows, d = x.shape
    r = te.reduce_axis((0, d), "r")
    top = te.compute(rows, lambda *i: te.max(x[(*i, r)].astype("int32"), axis=r), name="top")

    def entry(i):
        return table[x[i].astype("int32") - top[i[:-1]] + 255]
    s = te.reduce_axis((0, d), "s")
    total = te.compute(rows, lambda *i: te.sum(entry((*i, s)), axis=s), name="total")
    scale = tirx.const(float(np.floor(np.float32(1.0) / np.float32(y_scale))), "float32")

    def value(*i):
        q = tirx.nearbyint((entry(i) * scale) / total[i[:-1]]).astype("int32") + out_zero_point
        q = tirx.min(q, 255)
        if out_dtype == "uint8":
            return q.astype("uint8")
        return (tirx.bitwise_and(q + 128, 255) - 128).astype("int8")
    return te.compute(x.shape, value, name="qlinear_softmax")


COMPUTATIONS = {"qlinear_softmax": softmax}
