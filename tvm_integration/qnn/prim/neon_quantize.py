"""The model's input QuantizeLinear on AArch64 (arithmetic.quantize, float32 NCHW -> 8-bit NHWC, a few
channels): no vector division, and each 16 pixels' channels one interleaved store.

arithmetic.quantize divides by the scale, as onnxruntime does. NEON's vector ``fdiv`` is not pipelined
(llvm-mca's Cortex-A72: 34 cycles for 4 floats), and the image's channels written one byte at a time to
their NHWC places took a store each: 8.7 cycles a value on the A72, 1.31 Mcycles for a 224x224 image.
Here ``x / s`` is ``x * r`` in double, ``r = double(1 / s)``, rounded to float32, which is the float32
quotient for every float32 ``x`` (s a positive float32, as ONNX requires; ``|x r|`` is within 2^-277 and
2^254, a normal double):

* ``p = RN64(x * r) = (x / s)(1 + e1)(1 + e2)``, ``|e1|, |e2| <= 2^-53``: ``|p - x/s| < 2^-51.9 |x/s|``;
* RN32 rounds the two alike unless a float32 midpoint ``m = M 2^k`` (M odd, ``2^24 < M < 2^25``; the
  overflow threshold is one) lies between them, or at p. With ``x = X 2^a``, ``s = S 2^b`` (X, S odd,
  below 2^24), ``x = m s`` would need ``X = M S 2^(k+b-a)``, an odd number of 25 bits or more: so ``x -
  m s`` is a non-zero multiple of ``2^min(a, k+b)``, and ``|x/s - m| > 2^-50 |x/s|`` (``X < 2^24``, ``M S
  < 2^49``): no midpoint is that close. Quotients below 2^-126 in magnitude (float32's subnormal
  midpoints) round to the integer 0 either way;

so the clamp, the rounding half to even and the zero point after it are arithmetic.quantize's own. A
power-of-two scale needs no double: ``1 / s`` is then a float32 and ``x * (1 / s)`` is the quotient.
The image's C channels (2 to 4) of 16 pixels are one vector of 16 C bytes, interleaved (st2, st3, st4);
a row's last ``W % 16`` pixels are quantized one at a time.
"""
from __future__ import annotations

import numpy as np
from tvm import tirx
from tvm.script import tirx as T
from tvm.target import Target

from tvm_integration.kernels.short_stack import short_stack
from tvm_integration.ops.output_stage import QUANT_RANGES
from tvm_integration.qemu.cross import is_aarch64

PIXELS = 16                 # pixels per vector: one 16-byte register of each channel's outputs
CHANNELS = (2, 3, 4)        # the interleaved stores (st2, st3, st4)


def applies(func: tirx.PrimFunc, target: Target) -> bool:
    """``func`` is a QuantizeLinear written NHWC from an NCHW input of 2-4 channels (a model's image
    input) and ``target`` is AArch64."""
    attrs = func.attrs or {}
    shape = func.params[0].ty.shape
    return attrs.get("qnn.op") == "quantize" and attrs.get("qnn.layout") == "NHWC" and \
        is_aarch64(target) and len(shape) == 4 and int(shape[1]) in CHANNELS


def scheduled(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """The quantize ``func`` (arguments x NCHW float32, y NHWC; attributes kept) for AArch64."""
    attrs = func.attrs
    x, y = (p.ty for p in func.params)
    shape = tuple(int(d) for d in x.shape)
    return _nhwc(shape, float(attrs["qnn.scale"]), int(attrs["qnn.zero_point"]), str(y.dtype)).with_attrs(attrs)


def quotient(value, scale: float, lanes: int = 1):
    """float32 ``value / scale`` (``lanes`` wide) as a product: in double by the double reciprocal, or in
    float32 where the reciprocal is a float32 (a power-of-two scale). Equal to the division (above)."""
    reciprocal = 1.0 / float(np.float32(scale))
    if float(np.float32(reciprocal)) == reciprocal:
        return value * _splat(tirx.const(reciprocal, "float32"), lanes)
    product = tirx.Cast(_typed("float64", lanes), value) * _splat(tirx.const(reciprocal, "float64"), lanes)
    return tirx.Cast(_typed("float32", lanes), product)


def quantized(value, scale: float, zero_point: int, dtype: str, lanes: int = 1):
    """arithmetic.quantize's value of float32 ``value`` (``lanes`` wide), its division a product."""
    lo, hi = QUANT_RANGES[dtype]
    y = quotient(value, scale, lanes)
    y = tirx.max(tirx.min(y, _splat(tirx.const(hi - zero_point, "float32"), lanes)),
                 _splat(tirx.const(lo - zero_point, "float32"), lanes))
    rounded = tirx.Cast(_typed("int32", lanes), tirx.call_llvm_pure_intrin(_typed("float32", lanes), "llvm.roundeven", y))
    return tirx.Cast(_typed(dtype, lanes), rounded + _splat(tirx.const(zero_point, "int32"), lanes))


def _splat(value, lanes: int):
    return value if lanes == 1 else tirx.Broadcast(value, lanes)


def _typed(dtype: str, lanes: int) -> str:
    return dtype if lanes == 1 else f"{dtype}x{lanes}"


@short_stack
def _nhwc(shape, scale: float, zero_point: int, dtype: str) -> tirx.PrimFunc:
    b, c, h, w = shape
    vectors = w // PIXELS
    order = [ch * PIXELS + p for p in range(PIXELS) for ch in range(c)]     # pixel-major: NHWC's order

    @T.prim_func(private=True, s_tir=True)
    def quantize(x: T.Buffer(shape, "float32"), y: T.Buffer((b, h, w, c), dtype)):
        with T.sblock("root"):
            xs = T.decl_buffer((b * c * h * w,), "float32", data=x.data)
            ys = T.decl_buffer((b * h * w * c,), dtype, data=y.data)
            for row in T.parallel(b * h):
                for v in range(vectors):
                    ys[T.ramp((row * w + v * PIXELS) * c, 1, PIXELS * c)] = T.Shuffle(
                        [quantized(xs[T.ramp((row // h * c + ch) * h * w + row % h * w + v * PIXELS, 1, PIXELS)],
                                   scale, zero_point, dtype, PIXELS) for ch in range(c)], order)
                for j, ch in T.grid(w - vectors * PIXELS, c):
                    ys[(row * w + vectors * PIXELS + j) * c + ch] = quantized(
                        xs[(row // h * c + ch) * h * w + row % h * w + vectors * PIXELS + j], scale, zero_point, dtype)
    return quantize
