"""A requantization to a few levels as integer thresholds. A low-bit model's bitserial layers write
1- or 2-bit activations, and ``ScaleRequantize`` (``float32(acc + bias) * scale`` clamped, rounded
half to even, plus the zero point) is monotonic in the accumulator: it is ``low + #{k : acc >= t_k}``
(a negative scale reverses the order: ``~acc = -acc - 1`` is compared instead). The thresholds are
found once, at compile time, by bisection on the same float32 arithmetic in numpy, so the result is
the float formula's for every accumulator of magnitude below ``REACH``; the operator then compares
integers, a compare per vector and level instead of the conversion, multiply, clamp and rounding
(W1A1 ResNet-18 on Cortex-A53, llvm-mca: a 1-bit output 2.7 cycles instead of 5.1; the model's
bitserial layers 73.0 M cycles instead of 75.1).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from tvm import tirx

from tvm_integration.ops.output_stage import OutputStage, ScaleRequantize

MAX_THRESHOLDS = 3          # levels - 1: 1- and 2-bit outputs (each level is a compare per vector)
REACH = 2 ** 30             # accumulators exact below this magnitude (bitserial_gemm.build checks its layer's bound)
NEVER, ALWAYS = 2 ** 31 - 1, -2 ** 31


@dataclass(frozen=True)
class Thresholds:
    low: int                 # the lowest output level
    flip: np.ndarray         # [N] int32: -1 where the scale is negative (compare ~acc), else 0
    values: np.ndarray       # [levels - 1, N] int32: level low + k + 1 from values[k] on
    out_dtype: str

    @property
    def flips(self) -> bool:
        """Whether any channel compares ``~acc`` (without, the operator reads no ``flip``)."""
        return bool(self.flip.any())

    def channel_params(self, n_padded: int) -> dict[str, np.ndarray]:
        """The tensors the compiled comparison reads, channels padded to ``n_padded``."""
        k, n = self.values.shape
        flip, values = np.zeros((1, n_padded), np.int32), np.zeros((k, n_padded), np.int32)
        flip[0, :n], values[:, :n] = self.flip, self.values
        return {"thresholds": values} | ({"flip": flip} if self.flips else {})

    def expression(self, acc, p: dict, n):
        """TIR value of the output for accumulator ``acc`` (int32, bias not added) of channel ``n``."""
        x = tirx.bitwise_xor(acc, p["flip"][0, n]) if self.flips else acc
        levels = [(x >= p["thresholds"][k, n]).astype("int32") for k in range(self.values.shape[0])]
        return (tirx.const(self.low, "int32") + sum(levels[1:], levels[0])).astype(self.out_dtype)


def thresholds(stage: OutputStage, n: int) -> Thresholds | None:
    """``stage`` over ``n`` channels as thresholds, or None: not a float32 requantization, a residual
    add after it, or more than ``MAX_THRESHOLDS`` levels above the lowest."""
    rq = stage.requantize
    if not isinstance(rq, ScaleRequantize) or stage.residual is not None:
        return None
    low, high = stage.bounds()
    if high - low > MAX_THRESHOLDS:
        return None
    scale = np.broadcast_to(np.asarray(rq.scale, np.float32), (n,))
    bias = np.broadcast_to(np.asarray(0 if stage.bias is None else stage.bias, np.int64), (n,))
    flip = np.where(scale < 0, -1, 0).astype(np.int64)
    zero = rq.zero_point

    def output(x):
        """The float formula's level at ``x`` ([levels - 1, N], compared as ``acc ^ flip``)."""
        acc = ((x ^ flip) + bias).astype(np.int32)                    # int32 wrap-around, as the operator
        y = acc.astype(np.float32) * scale
        y = np.maximum(np.minimum(y, np.float32(high - zero)), np.float32(low - zero))
        return np.rint(y).astype(np.int64) + zero

    wanted = low + 1 + np.arange(high - low, dtype=np.int64)[:, None]     # [levels - 1, 1]
    below = np.full((high - low, n), -REACH, np.int64)
    above = np.full((high - low, n), REACH, np.int64)
    reached_below, reached_above = output(below) >= wanted, output(above) >= wanted
    while np.any(above - below > 1):                 # output(below) < wanted <= output(above)
        middle = (below + above) // 2
        reached = output(middle) >= wanted
        above, below = np.where(reached, middle, above), np.where(reached, below, middle)
    values = np.where(reached_below, ALWAYS, np.where(reached_above, above, NEVER))
    return Thresholds(low, flip.astype(np.int32), values.astype(np.int32), stage.out_dtype)
