"""Each conv2d / dense layer's precision (AxWy, encoding) and the operator it runs on: read by
legalize.py (which marks the layer) and by ``qsynth inspect``.

Widths come from the declared ranges the rewrite recorded (rewrite.py: ``x_range``, ``w_range``, a
QCDQ clip's bounds or the 8-bit type's): a range [lo, hi] takes ``(hi - lo).bit_length()`` bits, so
int2 [-2, 1], uint2 [0, 3] and a narrow 2-bit [-1, 1] are all 2 bits. Weights declared 8-bit whose
values fit 3 bits beside activations of at most 3 bits (a Brevitas export whose weight clip was
constant-folded away) take their values' width.

* activations and weights both of 1-3 bits: the bitserial operators (bitserial_layer.py).
  Activations become unsigned codes ``u = x - lo``. Weights ``v = w - zw`` that are all odd with
  ``|v| <= 2**b - 1`` (bipolar ±1: b = 1) take the hybrid encoding, whose bit-planes are ±1 and
  which computes ``sum u v`` itself; other weights take unipolar codes ``c = w - wlo`` and the
  zero-point decomposition (bitserial_layer.py): signed weights (Brevitas' default, narrow [-3, 3] or
  full [-4, 3] at 3 bits) are offset into codes and corrected exactly; weights that fit the width
  neither way are refused, naming the layer (``unipolar_low``);
* otherwise, widths of 1-4 or 8 bits: the int8 operators (an int4 tensor is an int8 tensor);
* 5, 6 and 7 bits: refused, naming the layer.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tvm_integration.qnn.semantics.errors import ModelError

BITSERIAL_BITS = (1, 2, 3)
INT8_BITS = (1, 2, 3, 4, 8)
SUPPORTED = "1-3 bits (bitserial operators, activations and weights both), 4 and 8 bits (int8 operators)"


def bits(lo: int, hi: int) -> int:
    return max(int(hi) - int(lo), 1).bit_length()


@dataclass(frozen=True)
class Precision:
    abits: int
    wbits: int
    encoding: str          # "unipolar" | "hybrid" (bitserial) | "int8"
    weights: str = ""      # how the weight width was found, when not from the declared range
    w_low: int = 0         # unipolar: the weight that is code 0 (codes c = w - w_low)

    @property
    def bitserial(self) -> bool:
        return self.encoding != "int8"

    def __str__(self) -> str:
        return f"A{self.abits}W{self.wbits} {self.encoding}" + (f" ({self.weights})" if self.weights else "")


def hybrid_bits(v: np.ndarray) -> int | None:
    """The hybrid width of weights ``v`` (zero point removed): all odd, ``|v| <= 2**b - 1``; else None."""
    if v.size == 0 or np.any(v % 2 == 0):
        return None
    return int(np.abs(v).max()).bit_length()


def detect(layer: str, x_range, w_range, weight: np.ndarray, w_zero_point: int, groups: int = 1) -> Precision:
    """The precision of a layer whose activations lie in ``x_range`` and weights (``weight``, zero point
    ``w_zero_point``) in the declared ``w_range``."""
    abits, wbits = bits(*x_range), bits(*w_range)
    for what, b, r in (("activations", abits, x_range), ("weights", wbits, w_range)):
        if b not in INT8_BITS:
            raise ModelError(f"layer {layer or '(unnamed)'}: {what} are {b}-bit (range [{r[0]}, {r[1]}]); "
                             f"supported widths: {SUPPORTED}")
    v = weight.astype(np.int64) - w_zero_point
    note, w_low = "", int(w_range[0])
    if abits <= 3 and wbits == 8 and v.size:
        values = bits(int(weight.min()), int(weight.max()))
        if values <= 3:
            wbits, w_low = values, int(weight.min())
            note = f"declared 8-bit, values in [{w_low}, {int(weight.max())}]"
    if abits > 3 or groups != 1:
        return Precision(abits, wbits, "int8")
    hybrid = hybrid_bits(v)
    if hybrid is not None and hybrid <= 3 and hybrid <= wbits:
        return Precision(abits, hybrid, "hybrid", note or ("bipolar" if hybrid == 1 else "odd values"))
    if wbits <= 3:
        return Precision(abits, wbits, "unipolar", note, unipolar_low(layer, weight, w_low, wbits))
    return Precision(abits, wbits, "int8")


def unipolar_low(layer: str, weight: np.ndarray, w_low: int, wbits: int) -> int:
    """The weight that is unipolar code 0: the declared range's low end (a signed b-bit weight w has
    code ``w + 2**(b-1)``, ``+ 2**(b-1) - 1`` narrow; bitserial_layer.py subtracts the offset back
    exactly, a zero-point term). Weights outside the declared range that still span at most
    ``2**wbits`` values take their minimum; wider ones are refused, naming the layer."""
    top = (1 << wbits) - 1
    lo, hi = (int(weight.min()), int(weight.max())) if weight.size else (w_low, w_low)
    if w_low <= lo and hi <= w_low + top:
        return w_low
    if hi - lo <= top:
        return lo
    raise ModelError(f"layer {layer or '(unnamed)'}: weights in [{lo}, {hi}] do not fit {wbits} bits, signed "
                     f"[{-(1 << (wbits - 1))}, {(1 << (wbits - 1)) - 1}] or unsigned [0, {top}] (declared range "
                     f"[{w_low}, {w_low + top}])")
