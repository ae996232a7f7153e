"""The output stage fused after the int32 accumulation: bias add, requantize, clamp.

Two requantizations, each bit-exact to the runtime it comes from:

* ``ScaleRequantize`` (onnxruntime, MLAS ``MlasRequantizeOutput``): ``float32(acc) * scale`` in
  float32, rounded half to even, plus the zero point, saturated to the output type;
* ``FixedPointRequantize`` (TFLite ``MultiplyByQuantizedMultiplier``): a Q31 multiplier and a power
  of two shift (positive: left), ``SaturatingRoundingDoublingHighMul`` then ``RoundingDivideByPOT``
  (both round half away from zero), plus the zero point, saturated.

Scales, multipliers and shifts are per output channel (a scalar is broadcast). Without a
requantization the output is the int32 accumulator plus bias.
"""
from __future__ import annotations

from dataclasses import dataclass

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
class OutputStage:
    """``bias``: int32 per output channel; ``relu``: clamp below at the output's zero (the zero point
    when requantized); ``clamp``: (lo, hi) in the output's integer domain."""
    bias: np.ndarray | None = None
    requantize: ScaleRequantize | FixedPointRequantize | None = None
    relu: bool = False
    clamp: tuple[int, int] | None = None

    def __post_init__(self):
        if self.requantize is not None and self.requantize.out_dtype not in ("uint8", "int8"):
            raise ValueError(f"requantize to uint8 or int8, not {self.requantize.out_dtype!r}")

    @property
    def out_dtype(self) -> str:
        return self.requantize.out_dtype if self.requantize else "int32"

    def bounds(self) -> tuple[int, int]:
        lo, hi = QUANT_RANGES[self.out_dtype]
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

    def expression(self, acc, p: dict, g, n):
        """TIR value of the output for accumulator ``acc`` (int32, bias not yet added) of channel (g, n);
        ``p`` maps the names of ``channel_params`` to TE tensors."""
        lo, hi = self.bounds()
        x = acc + p["bias"][g, n]
        rq = self.requantize
        if isinstance(rq, ScaleRequantize):
            y = round_half_even(x.astype("float32") * p["scale"][g, n])
            y = tirx.max(tirx.min(y, float(hi - rq.zero_point)), float(lo - rq.zero_point)).astype("int32")
            return (y + rq.zero_point).astype(self.out_dtype)
        if isinstance(rq, FixedPointRequantize):
            x = _tflite_multiply(x, p["multiplier"][g, n], p["shift"][g, n]) + rq.zero_point
        return tirx.max(tirx.min(x, hi), lo).astype(self.out_dtype)


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


def round_half_even(x):
    """Round float32 ``x`` to the nearest integer, ties to even (MLAS's rounding), whatever the FP
    rounding mode: LLVM's roundeven, which TVM vectorizes (its ``nearbyint`` would keep a vectorized
    loop serial: 0.19 ms for a 56x56x64 QLinearAdd)."""
    return tirx.call_llvm_pure_intrin("float32", "llvm.roundeven", x)


def requantization(scale: np.ndarray, zero_point: int, out_dtype: str):
    """The requantization a per-channel float32 ``scale`` constant of the QNN pipeline stands for (the
    scale of onnxruntime and of LiteRT's XNNPACK delegate alike)."""
    return ScaleRequantize(scale, zero_point, out_dtype)


def placeholders(params: dict[str, np.ndarray]) -> dict:
    return {name: te.placeholder(a.shape, str(a.dtype), name=name) for name, a in params.items()}
