"""A BatchNormalization between DequantizeLinear and QuantizeLinear as one 256-entry table per channel.

quantize_static leaves a BatchNormalization that no convolution precedes in float (DenseNet's
pre-activation BN -> ReLU before every convolution), and onnxruntime runs it as DQ, its float kernel,
Q. Per channel that is a function of one 8-bit value, so a table of every value computed with
onnxruntime's arithmetic is exact: its kernel (providers/cpu/nn/batch_norm.h) folds the statistics
first, ``inv_std = 1 / sqrt(var + eps)``, ``scale' = inv_std * scale``, ``bias' = bias - mean * scale'``
(Eigen arrays, no FMA), then ``y = x * scale' + bias'``; DequantizeLinear is ``float32(x - zp) * s``
and QuantizeLinear MLAS's ``y / s`` clamped, rounded half to even, plus the zero point, all float32.
"""
from __future__ import annotations

import numpy as np
from tvm import relax

from tvm_integration.ops.output_stage import QUANT_RANGES
from tvm_integration.qnn.onnx.qdq import QParams
from tvm_integration.qnn.prim.gather import OFFSETS
from tvm_integration.qnn.semantics.quant import constant


def rewritten(reader, expr, out: QParams):
    """``Q(act(batch_norm(DQ(x))))`` of constant statistics over the channels of an 8-bit image, read by
    ``reader`` (rewrite.QDQToInteger): a gather through one table per channel; else None."""
    inner, clamp = reader.activation(expr, out)
    item = reader.value(inner)
    bn = reader.call(item.tuple_value, "relax.nn.batch_norm") \
        if isinstance(item, relax.TupleGetItem) and item.index == 0 else None
    if bn is None or bn.attrs.training or not (bn.attrs.center and bn.attrs.scale) or \
            int(bn.attrs.axis) != 1 or len(bn.args[0].ty.shape) != 4:
        return None
    data = reader.dequantized(bn.args[0])
    statistics = [_float_constant(reader, a) for a in bn.args[1:5]]
    if data is None or data[1].dtype not in OFFSETS or any(s is None for s in statistics):
        return None
    (x_scale, x_zp), (y_scale, y_zp) = data[1].scalar("a BatchNormalization input"), out.scalar("its output")
    rows = table(x_scale, x_zp, data[1].dtype, *statistics, float(bn.attrs.epsilon), y_scale, y_zp, out.dtype, clamp)
    channels = rows.shape[0]
    return reader.integer("gather", [data[0]], [rows], source=[0] * channels, channel=list(range(channels)),
                          tabled=[1] * channels)


def _float_constant(reader, expr) -> np.ndarray | None:
    """A float constant, or a dequantized one as DequantizeLinear computes it, else None."""
    if (value := constant(reader.value(expr))) is not None:
        return value.astype(np.float32) if np.issubdtype(value.dtype, np.floating) else None
    if (dq := reader.dequantized_constant(expr)) is None:
        return None
    array, params = dq
    return (array.astype(np.int64) - params.zero_point).astype(np.float32) * params.scale


def table(x_scale: float, x_zero_point: int, x_dtype: str, gamma, beta, mean, var, epsilon: float,
          y_scale: float, y_zero_point: int, y_dtype: str, clamp: tuple[int, int]) -> np.ndarray:
    """[C, 256]: row c, entry ``v + OFFSETS[x_dtype]``, is Q(BN_c(DQ(v))) clamped to ``clamp``."""
    f32 = np.float32
    gamma, beta, mean, var = (np.asarray(a, f32).reshape(-1) for a in (gamma, beta, mean, var))
    inv_std = f32(1) / np.sqrt(var + f32(epsilon))
    scale = inv_std * gamma
    bias = beta - mean * scale
    values = np.arange(256, dtype=np.int64) - OFFSETS[x_dtype]
    x = (values - x_zero_point).astype(f32) * f32(x_scale)
    y = x[None, :] * scale[:, None] + bias[:, None]
    lo, hi = QUANT_RANGES[y_dtype]
    q = np.clip(y / f32(y_scale), f32(lo - y_zero_point), f32(hi - y_zero_point))
    return np.clip(np.rint(q).astype(np.int64) + y_zero_point, *clamp).astype(y_dtype)
