"""QuantizeLinear on AArch64 without a vector division: by a constant scale (arithmetic.quantize), in the
input's layout or as the model's input (float32 NCHW -> 8-bit NHWC, a few channels, each 16 pixels' channels
one interleaved store), and by a run-time scale (DynamicQuantizeLinear's, ``runtime_quantized``).

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
The argument holds for any positive float32 s, so a scale known only at run time (DynamicQuantizeLinear's,
``(max - min) / 255``) takes the same product, its double reciprocal computed once per call (bert_l4_s128_dynamic's
16 quantizes of 2.75 M values: 23.8 Mcycles on Cortex-A72's A57 model with the division).
The image's C channels (2 to 4) of 16 pixels are one vector of 16 C bytes, interleaved (st2, st3, st4);
a row's last ``W % 16`` pixels are quantized one at a time.
"""
from __future__ import annotations

import numpy as np
from tvm import tirx
from tvm.script import tirx as T
from tvm.target import Target

from tvm_integration.kernels.short_stack import short_stack
from tvm_integration.ops.output_stage import QUANT_RANGES, broadcast, divided, quotient, vector_type
from tvm_integration.qemu.cross import is_aarch64

PIXELS = 16                 # pixels per vector: one 16-byte register of each channel's outputs
CHANNELS = (2, 3, 4)        # the interleaved stores (st2, st3, st4)


def applies(func: tirx.PrimFunc, target: Target) -> bool:
    """``func`` is a QuantizeLinear by a constant scale, in the input's layout or written NHWC from an
    NCHW input of 2-4 channels (a model's image input), and ``target`` is AArch64."""
    attrs = func.attrs or {}
    if attrs.get("qnn.op") != "quantize" or not is_aarch64(target):
        return False
    shape = func.params[0].ty.shape
    if attrs.get("qnn.layout", "same") == "same":
        return len(func.params) == 2 and all(isinstance(d, tirx.IntImm) for d in shape)
    return attrs.get("qnn.layout") == "NHWC" and len(shape) == 4 and int(shape[1]) in CHANNELS


def scheduled(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """The quantize ``func`` (arguments x float32, y in x's layout or x NCHW, y NHWC; attributes kept)
    for AArch64."""
    attrs = func.attrs
    x, y = (p.ty for p in func.params)
    shape = tuple(int(d) for d in x.shape)
    build = _nhwc if attrs.get("qnn.layout") == "NHWC" else _flat
    return build(shape, float(attrs["qnn.scale"]), int(attrs["qnn.zero_point"]), str(y.dtype)).with_attrs(attrs)


@short_stack
def runtime_quantized(shape: tuple[int, ...], zero_dtype: str, out_dtype: str) -> tirx.PrimFunc:
    """relax.quantize by a run-time scale and zero point (shape ``()``, DynamicQuantizeLinear's), ``clip(round(x
    / scale) + zero_point)``, with the float32 quotient as the product above (arguments x, scale, zero point,
    y), every value in order, PIXELS a vector, the rest one at a time. The quotient is clipped to the bounds
    less the zero point before it is rounded (round is monotone and the bounds are integers, so the same
    integer; a NaN clips to the upper bound either way), then converted with its rounding (``fcvtns``) and
    the zero point added in int32: one conversion a vector where round, add, clip in float32 and a
    truncating conversion took two (NEON's conversions issue on one pipe of the Cortex-A76)."""
    size = int(np.prod(shape))
    vectors = size // PIXELS
    quarter = PIXELS // 4

    @T.prim_func(private=True, s_tir=True)
    def quantize(x: T.Buffer(shape, "float32"), scale: T.Buffer((), "float32"), zero_point: T.Buffer((), zero_dtype),
                 y: T.Buffer(shape, out_dtype)):
        T.func_attr({"tirx.noalias": True})         # the scale's reciprocal and the bounds out of the loop
        with T.sblock("root"):
            xs = T.decl_buffer((size,), "float32", data=x.data)
            ys = T.decl_buffer((size,), out_dtype, data=y.data)
            for v in T.parallel(vectors):
                ys[T.ramp(v * PIXELS, 1, PIXELS)] = T.Shuffle(
                    [_runtime_value(xs[T.ramp(v * PIXELS + k * quarter, 1, quarter)], scale[()], zero_point[()],
                                    out_dtype, quarter) for k in range(4)], list(range(PIXELS)))
            for j in range(size - vectors * PIXELS):
                ys[vectors * PIXELS + j] = _runtime_value(xs[vectors * PIXELS + j], scale[()], zero_point[()],
                                                          out_dtype)
    return quantize


def _runtime_value(value, scale, zero_point, dtype: str, lanes: int = 1):
    """runtime_quantized's value of float32 ``value`` (``lanes`` wide, at most 4: one NEON conversion)."""
    lo, hi = QUANT_RANGES[dtype]
    zero = zero_point.astype("int32")
    y = divided(value, scale, lanes)
    bound = lambda b: broadcast((b - zero).astype("float32"), lanes)
    y = tirx.call_llvm_pure_intrin(vector_type("float32", lanes), "llvm.minnum", y, bound(hi))
    y = tirx.call_llvm_pure_intrin(vector_type("float32", lanes), "llvm.maxnum", y, bound(lo))
    rounded = tirx.call_llvm_pure_intrin(vector_type("int32", lanes), "llvm.aarch64.neon.fcvtns", y)
    return tirx.Cast(vector_type(dtype, lanes), rounded + broadcast(zero, lanes))


def quantized(value, scale: float, zero_point: int, dtype: str, lanes: int = 1):
    """arithmetic.quantize's value of float32 ``value`` (``lanes`` wide), its division a product."""
    lo, hi = QUANT_RANGES[dtype]
    y = quotient(value, scale, lanes)
    y = tirx.max(tirx.min(y, broadcast(tirx.const(hi - zero_point, "float32"), lanes)),
                 broadcast(tirx.const(lo - zero_point, "float32"), lanes))
    rounded = tirx.Cast(vector_type("int32", lanes),
                        tirx.call_llvm_pure_intrin(vector_type("float32", lanes), "llvm.roundeven", y))
    return tirx.Cast(vector_type(dtype, lanes), rounded + broadcast(tirx.const(zero_point, "int32"), lanes))


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


@short_stack
def _flat(shape, scale: float, zero_point: int, dtype: str) -> tirx.PrimFunc:
    """Every value in order, PIXELS a vector (one register of 8-bit outputs), the rest one at a time."""
    size = int(np.prod(shape))
    vectors = size // PIXELS

    @T.prim_func(private=True, s_tir=True)
    def quantize(x: T.Buffer(shape, "float32"), y: T.Buffer(shape, dtype)):
        with T.sblock("root"):
            xs = T.decl_buffer((size,), "float32", data=x.data)
            ys = T.decl_buffer((size,), dtype, data=y.data)
            for v in T.parallel(vectors):
                ys[T.ramp(v * PIXELS, 1, PIXELS)] = quantized(xs[T.ramp(v * PIXELS, 1, PIXELS)], scale, zero_point,
                                                              dtype, PIXELS)
            for j in range(size - vectors * PIXELS):
                ys[vectors * PIXELS + j] = quantized(xs[vectors * PIXELS + j], scale, zero_point, dtype)
    return quantize
