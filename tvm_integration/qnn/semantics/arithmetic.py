"""onnxruntime's integer arithmetic, op by op, as TE computations: what the rewritten graph computes.

Each function is the reference semantics of one integer op of the QNN pipeline, written after the
MLAS routine onnxruntime's CPU provider runs for it (its default graph optimizations turn every
DQ -> op -> Q group of a QDQ model into these kernels), so that a model compiled from them is
bit-exact with onnxruntime:

* conv2d / dense (QLinearConv, QGemm, QLinearMatMul): int32 accumulation, then MLAS
  ``MlasRequantizeOutput``: ``float32(acc + bias) * scale``, scale = ``x_scale * w_scale / y_scale``
  evaluated in that order in float32, rounded half to even, plus the zero point, saturated;
* global average pool (QLinearGlobalAveragePool): ``sum - x_zp * N``, requantized with
  ``x_scale / (y_scale * N)``;
* add (QLinearAdd, MLAS's AVX2 kernel): two fused multiply-adds in float32 onto a fixed part,
  ``zc - fma(sa/sc, za, sb/sc * zb)`` (the compiler contracted that line of MLAS into an FMA:
  without it, 4 of 10 outputs of a 224x224 MobileNetV2 with 3 residual blocks differed in the last
  bit; with it, none), rounded half to even;
* average pool (QLinearAveragePool): the dequantized window summed, divided, requantized in float32;
* mul (QLinearMul): the integer product times ``sa * sb / sc``, plus the zero point, in float32 (on
  Arm in one FMA, as onnxruntime's AArch64 build computes it);
* quantize (QuantizeLinear): ``x / scale`` (a division, not a reciprocal), clamped, rounded half to
  even; dequantize: ``float32(x - zp) * scale``;
* max pool and reshapes are exact on the integers; a lookup (rewrite.py's tables) is exact by
  construction.

The tensorized operators (bind.py) replace conv2d and dense with the same arithmetic (the
output stage's ``ScaleRequantize``); the rest are scheduled as they are (schedules.py).
"""
from __future__ import annotations

import numpy as np
from tvm import te, tirx

from tvm_integration.ops.batch_matmul import Operand, geometry
from tvm_integration.ops.conv2d import output_size
from tvm_integration.ops.output_stage import (QUANT_RANGES, fenced, neon_qlinear_add_runtime, qlinear_add,
                                             requantize, round_narrowed, round_saturated, round_to_int)
from tvm_integration.qnn.semantics.quant import broadcast_index, broadcast_shape


def requantize_channel(acc, scale, channel, zero_point: int, dtype: str, clamp: tuple[int, int]):
    """``acc`` of output channel ``channel`` requantized by the op's float32 ``[C]`` ``scale`` constant."""
    return requantize(acc, scale[channel], zero_point, dtype, clamp)


def weight_sums(w: np.ndarray, w_zp: int) -> np.ndarray:
    """int64 per output channel: ``sum (w - zw)`` over its weights (what the input's zero point multiplies)."""
    return (w.reshape(w.shape[0], -1).astype(np.int64) - w_zp).sum(1)


def nine_bit(weight: np.ndarray, zero_point) -> np.ndarray:
    """Weights on a zero point that is not 0, one or one per output channel (axis 0), as the exact
    ``w - zw`` on zero point 0: int8 where that fits, else int16 (9 bits, packing.NINE_BITS). The folded
    bias ``-zx sum (w - zw)`` stays; the ops then take one zero point however many the model had."""
    zero_point = np.asarray(zero_point, np.int16).reshape((-1,) + (1,) * (weight.ndim - 1))
    shifted = weight.astype(np.int16) - zero_point
    fits = shifted.size == 0 or -128 <= int(shifted.min()) and int(shifted.max()) <= 127
    return shifted.astype(np.int8) if fits else shifted


def valid_tap_sums(w: np.ndarray, size: tuple[int, int], attrs) -> np.ndarray:
    """``[1, O, OH, OW]``: per output channel and position, the sum of ``w`` (OIHW) over the taps whose
    input pixel is inside the unpadded input (what a zero point of the input multiplies)."""
    (h, wd), (kh, kw) = size, w.shape[2:]
    strides, padding = [int(s) for s in attrs.strides], [int(p) for p in attrs.padding]
    (sh, sw), (pt, pl, _, _) = strides, padding
    oh, ow = output_size((h, wd), (kh, kw), strides, padding)
    per_tap = w.sum(1)                                  # [O, KH, KW]: over each group's input channels
    sums = np.zeros((w.shape[0], oh, ow), np.int64)
    for i in range(kh):
        rows = (np.arange(oh) * sh + i - pt >= 0) & (np.arange(oh) * sh + i - pt < h)
        for j in range(kw):
            cols = (np.arange(ow) * sw + j - pl >= 0) & (np.arange(ow) * sw + j - pl < wd)
            sums += per_tap[:, i, j, None, None] * np.outer(rows, cols)
    return sums[None]


def folded_bias(w: np.ndarray, x_zp: int, w_zp: int, bias: np.ndarray | None = None) -> np.ndarray:
    """int32 per output channel: ``bias`` plus the zero-point terms known at compile time,
    ``-zx sum w + K zx zw = -zx sum (w - zw)``."""
    return ((0 if bias is None else bias.astype(np.int64).reshape(-1)) - x_zp * weight_sums(w, w_zp)).astype(np.int32)


def linear_constants(w: np.ndarray, bias: np.ndarray | None, x_scale, x_zp: int, w_scale: np.ndarray,
                     w_zero_point: np.ndarray, out_scale) -> tuple[int, tuple]:
    """(the weights' zero point, conv2d / dense constants ``(w, bias, scale)``) as onnxruntime and
    LiteRT's XNNPACK delegate both compute them: the zero-point terms known at compile time folded
    into the int32 bias (``folded_bias``), and the requantization scale per output channel
    ``x_scale * w_scale / y_scale`` in float32, in that order. Per-channel zero points that differ
    (onnxruntime's u8 weights per channel, asymmetric) are subtracted from the weights (``nine_bit``):
    the ops take one."""
    if np.any(w_zero_point != w_zero_point.flat[0]):
        w, w_zero_point = nine_bit(w, w_zero_point.reshape(-1)), np.zeros(1, np.int64)
    w_zp = int(w_zero_point.flat[0])
    w_scale = np.broadcast_to(w_scale.astype(np.float32).reshape(-1), (w.shape[0],))
    scale = (np.float32(x_scale) * w_scale / np.float32(out_scale)).astype(np.float32)
    return w_zp, (w, folded_bias(w, x_zp, w_zp, bias), scale)


def conv2d(x, w, bias, scale=None, *, strides, padding, groups, x_zero_point, w_zero_point, out_zero_point,
           out_dtype, clamp):
    """NCHW conv2d of u8/s8 ``x`` by s8/u8 OIHW ``w``, four-term zero-point decomposition:
    ``sum (x - zx)(w - zw) = sum x w - zw sum x - zx sum w + K zx zw`` over the window padded with zx;
    ``bias`` (int32, per output channel) already holds the folded constant terms 3 and 4, so only the
    window sum (term 2) is computed here, and only when ``w_zero_point`` is not 0. ``scale`` None:
    the int32 result (ConvInteger)."""
    b, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    pt, pl, pb, pr = padding
    sh, sw = strides
    oh, ow = output_size((h, wd), (kh, kw), strides, padding)
    padded = te.compute((b, c, h + pt + pb, wd + pl + pr), lambda n, ch, i, j: tirx.if_then_else(
        tirx.all(i >= pt, i < h + pt, j >= pl, j < wd + pl), x[n, ch, i - pt, j - pl],
        tirx.const(x_zero_point, x.dtype)), name="pad")
    rc, ry, rx = te.reduce_axis((0, cg), "rc"), te.reduce_axis((0, kh), "ry"), te.reduce_axis((0, kw), "rx")
    og = o // groups

    def window(n, oc, i, j):
        return padded[n, oc // og * cg + rc, i * sh + ry, j * sw + rx].astype("int32")

    acc = te.compute((b, o, oh, ow), lambda n, oc, i, j: te.sum(
        window(n, oc, i, j) * w[oc, rc, ry, rx].astype("int32"), axis=[rc, ry, rx]), name="acc")
    if w_zero_point:
        rc2, ry2, rx2 = te.reduce_axis((0, cg), "rc2"), te.reduce_axis((0, kh), "ry2"), te.reduce_axis((0, kw), "rx2")
        sums = te.compute((b, o, oh, ow), lambda n, oc, i, j: te.sum(padded[
            n, oc // og * cg + rc2, i * sh + ry2, j * sw + rx2].astype("int32"), axis=[rc2, ry2, rx2]), name="window_sum")
        acc = te.compute(acc.shape, lambda *i: acc(*i) - w_zero_point * sums(*i), name="acc_zp")
    if scale is None:
        return te.compute(acc.shape, lambda n, oc, i, j: acc[n, oc, i, j] + bias[oc], name="conv")
    return te.compute(acc.shape, lambda n, oc, i, j: requantize_channel(
        acc[n, oc, i, j] + bias[oc], scale, oc, out_zero_point, out_dtype, clamp), name="qconv")


def dense(x, w, bias, scale=None, *, x_zero_point, w_zero_point, out_zero_point, out_dtype, clamp):
    """``x [M, K]`` by ``w [N, K]``: the same decomposition as conv2d (bias holds terms 3 and 4)."""
    m, k = x.shape
    n = w.shape[0]
    rk = te.reduce_axis((0, k), "rk")
    acc = te.compute((m, n), lambda i, j: te.sum(x[i, rk].astype("int32") * w[j, rk].astype("int32"), axis=rk),
                     name="acc")
    if w_zero_point:
        rk2 = te.reduce_axis((0, k), "rk2")
        sums = te.compute((m,), lambda i: te.sum(x[i, rk2].astype("int32"), axis=rk2), name="row_sum")
        acc = te.compute((m, n), lambda i, j: acc[i, j] - w_zero_point * sums[i], name="acc_zp")
    if scale is None:
        return te.compute((m, n), lambda i, j: acc[i, j] + bias[j], name="dense")
    return te.compute((m, n), lambda i, j: requantize_channel(acc[i, j] + bias[j], scale, j, out_zero_point, out_dtype,
                                                              clamp), name="qdense")


def batch_matmul(a, b, *, a_axes, b_axes, a_zero_point, b_zero_point, scale, out_zero_point, out_dtype, clamp):
    """QLinearMatMul of two activations, ``permute_dims(a, a_axes) @ permute_dims(b, b_axes)`` (axes
    ``[]``: none), batched and broadcast as numpy's matmul: ``sum (a - za)(b - zb)`` in int32,
    requantized as conv2d and dense are (``scale``: ``sa * sb / sy`` in float32)."""
    oa = Operand(tuple(int(d) for d in a.shape), str(a.dtype), tuple(a_axes) or None)
    ob = Operand(tuple(int(d) for d in b.shape), str(b.dtype), tuple(b_axes) or None)
    batch, m, k, n = geometry(oa, ob)
    rk = te.reduce_axis((0, k), "rk")

    def acc(*i):
        index = i[:-2]
        return te.sum((oa.element(a, batch, index, i[-2], rk).astype("int32") - a_zero_point)
                      * (ob.element(b, batch, index, rk, i[-1]).astype("int32") - b_zero_point), axis=rk)
    total = te.compute((*batch, m, n), acc, name="acc")
    return te.compute(total.shape, lambda *i: requantize(total(*i), tirx.const(scale, "float32"), out_zero_point,
                                                         out_dtype, clamp), name="qmatmul")


def fma32(a, b, c) -> np.float32:
    """``a * b + c`` rounded once to float32, for compile-time constants: the product of two float32
    is exact in long double (64-bit mantissa), and so is the sum unless the terms are 2**40 apart."""
    return np.float32(np.longdouble(np.float32(a)) * np.longdouble(np.float32(b)) + np.longdouble(np.float32(c)))


def add_params(sa, za: int, sb, zb: int, sc, zc: int) -> dict:
    """``add``'s parameters for inputs of scales and zero points (sa, za), (sb, zb) and an output of (sc, zc):
    the float32 ratios, the fixed part ``zc - fma(sa/sc, za, sb/sc * zb)``, and the six as ``quant`` (what
    a build for Arm computes from, bind.py)."""
    ra, rb = np.float32(np.float32(sa) / np.float32(sc)), np.float32(np.float32(sb) / np.float32(sc))
    fixed = np.float32(np.float32(zc) - fma32(ra, np.float32(za), np.float32(rb * np.float32(zb))))
    return dict(ratio_a=float(ra), ratio_b=float(rb), fixed=float(fixed),
                quant=[float(sa), int(za), float(sb), int(zb), float(sc), int(zc)])


def add(a, b, *, ratio_a: float, ratio_b: float, fixed: float, out_dtype: str, clamp, defined=None, neon=None):
    """QLinearAdd (output_stage.qlinear_add: MLAS's AVX2 arithmetic, with ``defined`` the ONNX definition,
    with ``neon`` MLAS's NEON arithmetic), ``a`` and ``b`` broadcast as numpy does."""
    shape = broadcast_shape(a.shape, b.shape)

    def value(*i):
        return qlinear_add(a(*broadcast_index(a.shape, i)), b(*broadcast_index(b.shape, i)), ratio_a, ratio_b,
                           fixed, out_dtype, clamp, defined, neon)
    return te.compute(shape, value, name="qadd")


def mul(a, b, *, a_zero_point: int, b_zero_point: int, ratio: float, out_zero_point: int, out_dtype: str,
        clamp, neon: bool = False):
    """QLinearMul as MLAS's kernel computes it (qlmul.cpp, ``MlasQLinearMulVectorS16``): the product of the
    zero-point-subtracted integers (exact in int32) times ``ratio = sa * sb / sc`` (float32, in that order),
    plus the output zero point (``_scaled_product``), rounded half to even, saturated to ``clamp``; ``neon``:
    as onnxruntime's AArch64 build computes it. ``a`` and ``b`` broadcast as numpy does."""
    def value(*i):
        return _scaled_product(zero_point_product(a, b, i, a_zero_point, b_zero_point, neon),
                               tirx.const(ratio, "float32"), tirx.const(out_zero_point, "float32"), clamp, out_dtype,
                               neon)
    return te.compute(broadcast_shape(a.shape, b.shape), value, name="qmul")


def zero_point_product(a, b, index, a_zero_point: int, b_zero_point: int, neon: bool):
    """``(a - za) * (b - zb)`` in int32 at output ``index`` of a broadcasting mul of two 8-bit tensors; ``neon``:
    the operands less their zero points as int16 (exact: within +-255), so that LLVM multiplies them with
    smull/smull2 instead of widening each byte to int32 by tbl."""
    wide = "int16" if neon else "int32"
    x = a(*broadcast_index(a.shape, index)).astype(wide) - tirx.const(a_zero_point, wide)
    y = b(*broadcast_index(b.shape, index)).astype(wide) - tirx.const(b_zero_point, wide)
    return x.astype("int32") * y.astype("int32")


def _scaled_product(product, ratio, zero_point, clamp, out_dtype: str, neon: bool):
    """MLAS's QLinearMul output of an int32 ``product``: ``float32(product) * ratio + zero_point`` (float32
    expressions), rounded half to even, saturated to ``clamp``. Its SSE2 kernel (onnxruntime's x86 build)
    rounds the product, then the sum; its NEON kernel, as GCC built it for onnxruntime's AArch64 build
    (``neon``), contracts the two into one FMA, which rounds once."""
    product = product.astype("float32")
    if neon:
        return round_narrowed(tirx.call_intrin("float32", "tirx.fma", product, ratio, zero_point), clamp, 0, out_dtype)
    return round_saturated(fenced(product * ratio) + zero_point, clamp, out_dtype)


def lookup(x, table, *, offset: int):
    """``table[x + offset]``: an 8-bit tensor through a 256-entry table (``offset`` 128 for int8).
    A byte gather as written; table_lookup.py's vpermi2b form where the target has AVX-512 VBMI,
    its tbl/tbx form on AArch64."""
    return te.compute(x.shape, lambda *i: table[x(*i).astype("int32") + offset], name="lookup")


def channel_sums(x, layout: str) -> tuple[te.Tensor, int]:
    """(the int32 sum over H, W of each channel of ``x`` in ``layout``, [b, c]; the count summed)."""
    nhwc = layout == "NHWC"
    b, c, h, w = (x.shape[0], x.shape[3], x.shape[1], x.shape[2]) if nhwc else x.shape
    ry, rx = te.reduce_axis((0, h), "ry"), te.reduce_axis((0, w), "rx")
    total = te.compute((b, c), lambda n, ch: te.sum((x[n, ry, rx, ch] if nhwc else x[n, ch, ry, rx]).astype("int32"),
                                                    axis=[ry, rx]), name="sum")
    return total, int(h) * int(w)


def per_channel(value, total: te.Tensor, layout: str, name: str) -> te.Tensor:
    """``value(n, ch)`` as a [b, 1, 1, c] (NHWC) or [b, c, 1, 1] tensor, ``total``'s [b, c] shape."""
    b, c = total.shape
    if layout == "NHWC":
        return te.compute((b, 1, 1, c), lambda n, i, j, ch: value(n, ch), name=name)
    return te.compute((b, c, 1, 1), lambda n, ch, i, j: value(n, ch), name=name)


def global_avg_pool(x, *, x_zero_point: int, scale: float, out_zero_point: int, out_dtype: str,
                    layout: str = "NCHW"):
    """QLinearGlobalAveragePool over H, W of ``x``: ``sum - zx * N`` requantized by ``scale``
    (= ``x_scale / (y_scale * N)``, computed by the caller in float32)."""
    total, count = channel_sums(x, layout)

    def value(n, ch):
        return requantize(total[n, ch] - x_zero_point * count, tirx.const(scale, "float32"), out_zero_point,
                          out_dtype, QUANT_RANGES[out_dtype])
    return per_channel(value, total, layout, "qgap")


def max_pool2d(x, *, pool, strides, padding, layout: str = "NCHW", clamped: bool = False):
    """Max pool of integers, the window unrolled (a max of kh*kw loads, vectorizable along the
    innermost axis); padding never wins (the type's minimum). ``clamped`` (bind.py, on AArch64): where
    every window overlaps the input, a tap outside it reads the nearest pixel inside instead, which lies
    in the same window, so the max is the same and there is no select: LLVM's AArch64 backend moved a
    24-channel vector's select lane by lane (ShuffleNetV2's 3x3 stride-2 pool over 112x112x24, llvm-mca
    Mcycles: Cortex-A76's N1 model 0.755 -> 0.059, A53 1.356 -> 0.203; GoogLeNet's 28x28x480 stride 1
    0.592 -> 0.547 and 2.248 -> 1.377). On x86 the index clamps cost more than the selects (the first pool
    on a Sapphire Rapids, one thread, 12.4 -> 15.4 us), so it keeps them."""
    nhwc = layout == "NHWC"
    b, c, h, w = (x.shape[0], x.shape[3], x.shape[1], x.shape[2]) if nhwc else x.shape
    (kh, kw), (sh, sw), (pt, pl, _, _) = pool, strides, padding
    oh, ow = output_size((h, w), pool, strides, padding)
    low = tirx.min_value(x.dtype)
    clamped = clamped and all(0 <= p < k and (o - 1) * s - p < int(e)
                              for p, k, o, s, e in ((pt, kh, oh, sh, h), (pl, kw, ow, sw, w)))

    def tap(n, ch, y, xx):
        if clamped:
            y, xx = tirx.max(tirx.min(y, h - 1), 0), tirx.max(tirx.min(xx, w - 1), 0)
        pixel = x[n, y, xx, ch] if nhwc else x[n, ch, y, xx]
        return pixel if clamped else tirx.if_then_else(tirx.all(y >= 0, y < h, xx >= 0, xx < w), pixel, low)

    def value(n, ch, i, j):
        taps = [tap(n, ch, i * sh + dy - pt, j * sw + dx - pl) for dy in range(kh) for dx in range(kw)]
        result = taps[0]
        for other in taps[1:]:
            result = tirx.max(result, other)
        return result
    if nhwc:
        return te.compute((b, oh, ow, c), lambda n, i, j, ch: value(n, ch, i, j), name="max_pool")
    return te.compute((b, c, oh, ow), value, name="max_pool")


def avg_pool2d(x, *, pool, strides, padding, out_size, count_include_pad: bool, x_scale: float, x_zero_point: int,
               y_scale: float, y_zero_point: int, out_dtype: str, layout: str = "NCHW"):
    """QLinearAveragePool as onnxruntime's CPU kernel computes it (qlinear_pool.cc): the window's
    dequantized values ``x_scale * (x - zx)`` (float32, fenced: no FMA into the sum) summed in float32
    in row order, divided by the window's size (the taps inside the input, or all of them with
    ``count_include_pad``), then ``sum / y_scale + zy`` rounded half to even, saturated."""
    nhwc = layout == "NHWC"
    b, c, h, w = (x.shape[0], x.shape[3], x.shape[1], x.shape[2]) if nhwc else x.shape
    (kh, kw), (sh, sw), (pt, pl, _, _), (oh, ow) = pool, strides, padding, out_size

    def value(n, ch, i, j):
        total = tirx.const(0.0, "float32")
        for dy in range(kh):
            for dx in range(kw):
                y, xx = i * sh + dy - pt, j * sw + dx - pl
                tap = (x[n, y, xx, ch] if nhwc else x[n, ch, y, xx]).astype("int32") - x_zero_point
                tap = fenced(tap.astype("float32") * tirx.const(x_scale, "float32"))
                total = total + tirx.if_then_else(tirx.all(y >= 0, y < h, xx >= 0, xx < w), tap, tirx.const(0.0, "float32"))
        if count_include_pad:
            count = tirx.const(kh * kw, "int32")
        else:
            rows = tirx.min(i * sh - pt + kh, h) - tirx.max(i * sh - pt, 0)
            cols = tirx.min(j * sw - pl + kw, w) - tirx.max(j * sw - pl, 0)
            count = rows * cols
        z = total / count.astype("float32") / tirx.const(y_scale, "float32") + float(y_zero_point)
        return round_saturated(z, QUANT_RANGES[out_dtype], out_dtype)
    if nhwc:
        return te.compute((b, oh, ow, c), lambda n, i, j, ch: value(n, ch, i, j), name="avg_pool")
    return te.compute((b, c, oh, ow), value, name="avg_pool")


def quantize(x, *, scale: float, zero_point: int, out_dtype: str, layout: str = "same"):
    """QuantizeLinear (per tensor): ``x / scale`` clamped to the range less the zero point, rounded
    half to even, plus the zero point. ``layout="NHWC"``: an NCHW ``x`` is written NHWC (the first
    convolution's layout) in the same pass. On AArch64 the image's quantize is neon_quantize.py's
    equal form, without the division."""
    lo, hi = QUANT_RANGES[out_dtype]

    def value(*i):
        y = x(*i) / tirx.const(scale, "float32")
        y = tirx.max(tirx.min(y, float(hi - zero_point)), float(lo - zero_point))
        return (round_to_int(y) + zero_point).astype(out_dtype)
    if layout == "NHWC":
        b, c, h, w = x.shape
        return te.compute((b, h, w, c), lambda n, i, j, ch: value(n, ch, i, j), name="quantize")
    return te.compute(x.shape, value, name="quantize")


def dequantize(x, *, scale: float, zero_point: int):
    """DequantizeLinear (per tensor): ``float32(x - zp) * scale``."""
    return te.compute(x.shape, lambda *i: (x(*i).astype("int32") - zero_point).astype("float32")
                      * tirx.const(scale, "float32"), name="dequantize")


def _scalar(param):
    """The value of a one-element tensor (a scale or zero point fed at run time), any rank."""
    return param(*([0] * len(param.shape)))


def add_runtime(a, b, sa, za, sb, zb, sc, zc, *, out_dtype: str, neon: bool = False):
    """QLinearAdd whose scales and zero points are graph inputs: ``add``'s arithmetic, the ratios and the
    fixed part computed in the kernel as ``add``'s caller computes them at compile time (float32, one
    FMA: ``zc - fma(sa/sc, za, sb/sc * zb)``); ``neon``: MLAS's NEON kernel, its parameters computed in
    the kernel as that kernel computes them (output_stage.neon_qlinear_add_runtime)."""
    shape, clamp = broadcast_shape(a.shape, b.shape), QUANT_RANGES[out_dtype]
    operands = lambda i: (a(*broadcast_index(a.shape, i)), b(*broadcast_index(b.shape, i)))
    if neon:
        quant = tuple(_scalar(p) if p.dtype == "float32" else _scalar(p).astype("int32") for p in (sa, za, sb, zb, sc, zc))
        return te.compute(shape, lambda *i: neon_qlinear_add_runtime(*operands(i), quant, out_dtype, clamp),
                          name="qadd_runtime")

    def fma(x, y, z):
        return tirx.call_intrin("float32", "tirx.fma", x, y, z)
    ra, rb = fenced(_scalar(sa) / _scalar(sc)), fenced(_scalar(sb) / _scalar(sc))
    fixed = fenced(_scalar(zc).astype("float32") - fma(ra, _scalar(za).astype("float32"),
                                                        fenced(rb * _scalar(zb).astype("float32"))))

    def value(*i):
        x, y = operands(i)
        return round_saturated(fma(x.astype("float32"), ra, fma(y.astype("float32"), rb, fixed)), clamp, out_dtype)
    return te.compute(shape, value, name="qadd_runtime")


def mul_runtime(a, b, sa, za, sb, zb, sc, zc, *, out_dtype: str, neon: bool = False):
    """QLinearMul whose scales and zero points are graph inputs: ``mul``'s arithmetic (``neon`` too), the
    ratio ``float32(sa * sb) / sc`` computed in the kernel, as MLAS computes it on each call."""
    ratio = fenced(fenced(_scalar(sa) * _scalar(sb)) / _scalar(sc))
    shape = broadcast_shape(a.shape, b.shape)

    def value(*i):
        x = a(*broadcast_index(a.shape, i)).astype("int32") - _scalar(za).astype("int32")
        y = b(*broadcast_index(b.shape, i)).astype("int32") - _scalar(zb).astype("int32")
        return _scaled_product(x * y, ratio, _scalar(zc).astype("float32"), QUANT_RANGES[out_dtype], out_dtype, neon)
    return te.compute(shape, value, name="qmul_runtime")
