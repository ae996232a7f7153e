"""The TFLite operators of Keras models as TensorFlow's converter writes them (issue 33), each into the
pipeline's integer ops with LiteRT's default interpreter's arithmetic: elementwise functions of one
8-bit tensor (LOGISTIC, TANH, HARD_SWISH, LEAKY_RELU, RELU, RELU6, QUANTIZE between 8-bit types) as
256-entry lookup tables (arithmetic.lookup, the ONNX path's tables, vpermi2b on AVX-512 VBMI) whose
entries are the interpreter's (XNNPACK's or TFLite's builtin kernel's, per op, see below); MUL (one
table where both operands are functions of one tensor, swish: bind.py), broadcasting ADD, PAD (folded into the
next convolution), resizes, CONCATENATION, SOFTMAX, TRANSPOSE, SPLIT; and the int32 shape arithmetic of a Keras Reshape with a dynamic batch (SHAPE, STRIDED_SLICE,
PACK), evaluated at import (the batch is the model's, 1).

Each converter is ``f(importer, op, inputs, output) -> value`` (a list for several outputs), as
tflite_importer.CONVERTERS holds them. tests/test_tflite_keras.py checks every table against LiteRT on
every input value, int8 and uint8, at ties and at the delegate's parameter limits.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import math

import numpy as np
from tvm import relax

from tvm_integration.ops.output_stage import QUANT_RANGES
from tvm_integration.qnn.semantics import litert_arithmetic as ta
from tvm_integration.qnn.semantics.errors import ModelError

NHWC_AXIS_IN_NCHW = [0, 2, 3, 1]


# -- 256-entry tables ----------------------------------------------------------------------------
# LiteRT's default interpreter (2.3, x86) hands LOGISTIC, TANH, LEAKY_RELU and a QUANTIZE between two int8
# or two uint8 tensors to its XNNPACK delegate when the delegate's parameter checks (xnnpack_delegate.cc
# VisitUnaryNode) pass, and runs the rest on its builtin kernels: HARD_SWISH, RELU and RELU6 on 8-bit
# tensors (the delegate takes them only in float) and a QUANTIZE between int8 and uint8. Each table is the
# integer result of that kernel's own arithmetic on every input value.
def _table(imp, index: int, out_index: int, entries):
    """The lookup of tensor ``index`` through ``entries(q, x, y)``: the kernel's results (int64) for every
    value ``q`` of the type of the input tensor ``x`` (lowest first), saturated to output ``y``'s type."""
    x, out = imp.quantized(index), imp.quantized(out_index)
    lo, hi = QUANT_RANGES[x.dtype]
    y = entries(np.arange(lo, hi + 1, dtype=np.int64), x, out)
    table = np.clip(y, *QUANT_RANGES[out.dtype]).astype(out.dtype)
    return imp.emit("lookup", [imp.values[index]], [table], offset=-lo)


@functools.cache
def _libm():
    """The C library's ``exp`` and ``tanhf``, which LiteRT calls: numpy's own exp and tanh differ from them in
    the last bit for many inputs, and a last bit can move a table entry across a rounding boundary."""
    libm = ctypes.CDLL(ctypes.util.find_library("m"))
    libm.exp.restype, libm.exp.argtypes = ctypes.c_double, [ctypes.c_double]
    libm.tanhf.restype, libm.tanhf.argtypes = ctypes.c_float, [ctypes.c_float]
    return libm


def _sigmoid(x: float) -> float:
    """XNNPACK's reference sigmoid: ``e / (1 + e)`` with ``e = exp(x)`` in double; 0 and 1 beyond -100, 100."""
    if abs(x) > 100:
        return float(x > 0)
    e = _libm().exp(x)
    return e / (1 + e)


def _xnnpack_reference(function):
    """XNNPACK's table of a quantized op it has no integer kernel for (LOGISTIC, TANH): its unary operator runs
    its reference kernel (src/reference/unary-elementwise.cc) on the 256 values at create time, in float32:
    ``x = (q - zx) * sx``, ``function(x)``, ``nearbyint(y * (1 / sy) + zy)`` (a product by the inverse, which
    can round apart from a quotient)."""
    def entries(q, x, y):
        (sx, zx), (sy, zy) = x.scalar(), y.scalar()
        real = (q.astype(np.float32) - np.float32(zx)) * sx
        result = np.array([function(v) for v in real.tolist()], np.float32)
        return np.rint(result * (np.float32(1) / sy) + np.float32(zy)).astype(np.int64)
    return entries


def logistic(imp, op, ins, out):
    return _table(imp, ins[0], out, _xnnpack_reference(_sigmoid))


def tanh(imp, op, ins, out):
    return _table(imp, ins[0], out, _xnnpack_reference(_libm().tanhf))


def hard_swish(imp, op, ins, out):
    """TFLite's builtin reference HardSwish (its optimized kernel's vector path is Arm-only), int16 fixed point
    (``ta.hard_swish_table``); refused where TFLite's Prepare refuses it, an output multiplier of 1 or more."""
    def entries(q, x, y):
        (sx, zx), (sy, zy) = x.scalar(), y.scalar()
        output, reluish = ta.hard_swish_multipliers(sx, sy)
        if output[1] > 0:
            raise ModelError(f"{imp.path}: HARD_SWISH with input scale {sx:g} / 128 not below its output scale "
                             f"{sy:g}: LiteRT refuses it too")
        return ta.hard_swish_table(q, zx, zy, output, reluish)
    return _table(imp, ins[0], out, entries)


def leaky_relu(imp, op, ins, out):
    """XNNPACK's qs8/qu8 vlrelu where the delegate takes the op (alpha normal, ``sx / sy`` in [2**-8, 128] and
    that times alpha in [-127.99609375, 128], at least 2**-8 in magnitude): ``ta.xnn_rescale`` by
    ``lrintf(256 * scale)``, the scale by the sign of ``q - zx``. Elsewhere TFLite's builtin reference kernel:
    MultiplyByQuantizedMultiplier by ``sx / sy``, or ``sx * alpha / sy`` below the zero point (float32)."""
    alpha = np.float32(imp.options(op, "LeakyReluOptions").Alpha())

    def entries(q, x, y):
        (sx, zx), (sy, zy) = x.scalar(), y.scalar()
        positive = np.float32(sx / sy)
        negative = np.float32(positive * alpha)
        if (np.finfo(np.float32).tiny <= abs(alpha) < math.inf and 2.0 ** -8 <= positive <= 128
                and -127.99609375 <= negative <= 128 and abs(negative) >= 2.0 ** -8):
            multiplier = np.where(q > zx, ta.xnn_rescale_multiplier(positive), ta.xnn_rescale_multiplier(negative))
            return ta.xnn_rescale(q, zx, multiplier, zy)
        identity = ta.quantize_multiplier(float(positive))
        scaled = ta.quantize_multiplier(float(np.float32(np.float32(sx * alpha) / sy)))
        return zy + np.where(q >= zx, ta.multiply_by_quantized_multiplier(q - zx, *identity),
                             ta.multiply_by_quantized_multiplier(q - zx, *scaled))
    return _table(imp, ins[0], out, entries)


def relu(imp, op, ins, out, lo=0.0, hi=math.inf):
    """TFLite's builtin ReluX: MultiplyByQuantizedMultiplier by ``sx / sy`` (float32) plus ``zy``, clamped to
    ``zy + round_half_away(bound / sy)`` for the bounds ``lo``, ``hi`` (ta.builtin_activation_bound)."""
    def entries(q, x, y):
        (sx, zx), (sy, zy) = x.scalar(), y.scalar()
        scaled = ta.multiply_by_quantized_multiplier(q - zx, *ta.quantize_multiplier(float(np.float32(sx / sy))))
        bounds = [ta.builtin_activation_bound(bound, sy, zy, y.dtype) for bound in (lo, hi)]
        return np.clip(scaled + zy, *bounds)
    return _table(imp, ins[0], out, entries)


def quantize(imp, op, ins, out):
    """QUANTIZE between 8-bit types. Between two int8 or two uint8 tensors with ``sx / sy`` in [2**-8, 128]
    (float32) the delegate's XNNPACK vcvt: ``ta.xnn_rescale`` by ``lrintf(256 * sx / sy)``. Otherwise (int8
    <-> uint8 at a model's edges) TFLite's builtin Requantize, MultiplyByQuantizedMultiplier by ``sx / sy``
    (double): its vector path for each whole 16 values, its scalar path for the last ``size % 16``, which
    round a negative tie of the final shift apart (up, away from zero); refused where that changes some
    value and there is such a tail."""
    source, target = imp.tensor(ins[0]), imp.tensor(out)
    if source.dtype not in ("int8", "uint8") or target.dtype not in ("int8", "uint8"):
        raise ModelError(f"{imp.path}: QUANTIZE from {source.dtype} to {target.dtype}: only between 8-bit types")

    def entries(q, x, y):
        (sx, zx), (sy, zy) = x.scalar(), y.scalar()
        ratio = np.float32(sx / sy)
        if x.dtype == y.dtype and 2.0 ** -8 <= ratio <= 128:
            return ta.xnn_rescale(q, zx, ta.xnn_rescale_multiplier(ratio), zy)
        multiplier = ta.quantize_multiplier(float(sx) / float(sy))
        vector, scalar = (np.clip(f(q - zx, *multiplier) + zy, *QUANT_RANGES[y.dtype]) for f in
                          (ta.multiply_by_quantized_multiplier_vector, ta.multiply_by_quantized_multiplier))
        tail = math.prod(x.shape) % 16
        if tail and (vector != scalar).any():
            raise ModelError(f"{imp.path}: QUANTIZE of {math.prod(x.shape)} values by {ratio:g}: LiteRT's builtin "
                             f"Requantize rounds ties in its last {tail} values unlike the others, which one table "
                             "cannot hold")
        return vector
    return _table(imp, ins[0], out, entries)


# -- binary elementwise ---------------------------------------------------------------------------
def mul(imp, op, ins, out_index):
    """XNNPACK's qs8/qu8 vmul (``ta.mul``). Where both operands are elementwise functions of one 8-bit tensor x
    (swish, ``MUL(x, LOGISTIC(x))``, as the converter writes Keras' swish), bind.py makes it one table of x, in
    the arithmetic of the target's build (lower/one_tensor_mul.py)."""
    options = imp.options(op, "MulOptions")
    ins = imp.constant_last(ins)
    a, b, out = imp.quantized(ins[0]), imp.quantized(ins[1]), imp.quantized(out_index)
    (sa, za), (sb, zb), (sc, zc) = a.scalar(), b.scalar(), out.scalar()
    scale = np.float32(np.float32(np.float32(sa) * np.float32(sb)) / np.float32(sc))
    lo, hi = ta.MUL_SCALE_RANGE
    if not lo <= scale < hi:
        raise ModelError(f"{imp.path}: MUL with a_scale * b_scale / y_scale = {scale:g} outside [2**-16, 256): "
                         "LiteRT runs it on its builtin kernel, which qsynth does not reproduce")
    params = dict(a_zero_point=za, b_zero_point=zb, scale=float(scale), out_zero_point=zc, out_dtype=out.dtype,
                  clamp=imp.activation_clamp(options.FusedActivationFunction(), out))
    rank = len(out.shape)
    return imp.emit("tflite_mul", [imp.operand(ins[0], rank), imp.operand(ins[1], rank)], **params)


# -- data movement --------------------------------------------------------------------------------
def pad(imp, op, ins, out_index):
    """Zero padding (at the input's zero point); recorded so that a convolution reading it pads instead
    (and a max pool, where the pad value cannot win: Importer.unpadded_max_pool_input)."""
    x, out = imp.quantized(ins[0]), imp.quantized(out_index)
    pads = imp.tensor(ins[1]).data
    if pads is None or (len(ins) > 2 and ins[2] >= 0):
        raise ModelError(f"{imp.path}: PAD with padding fed at run time or a constant value is not supported")
    if x.scalar() != out.scalar():
        raise ModelError(f"{imp.path}: PAD with different input and output quantization is not supported")
    pads = [tuple(int(v) for v in row) for row in pads.reshape(-1, 2)]
    if len(pads) == 4 and pads[0] == pads[3] == (0, 0):
        imp.padded[out_index] = (ins[0], [pads[1][0], pads[2][0], pads[1][1], pads[2][1]])
    if len(pads) == 4:
        pads = [pads[i] for i in (0, 3, 1, 2)]
    return imp.emit("tflite_pad", [imp.values[ins[0]]], pads=pads, value=x.scalar()[1])


def concatenation(imp, op, ins, out_index):
    options = imp.options(op, "ConcatenationOptions")
    out = imp.quantized(out_index)
    if options.FusedActivationFunction():
        raise ModelError(f"{imp.path}: CONCATENATION with a fused activation is not supported")
    parts = []
    for i in ins:
        t = imp.quantized(i)
        if t.scalar() == out.scalar():
            parts.append(imp.values[i])
        else:   # TFLite's builtin ConcatenationWithScaling: round(x * s + bias) + zy, half away from zero
            (sx, zx), (sy, zy) = t.scalar(), out.scalar()
            s = np.float32(np.float32(sx) * np.float32(np.float32(1) / np.float32(sy)))
            lo, hi = QUANT_RANGES[t.dtype]
            v = np.arange(lo, hi + 1).astype(np.float32) * s + np.float32(-zx * s)
            table = np.clip(np.sign(v) * np.floor(np.abs(v) + 0.5) + zy, *QUANT_RANGES[out.dtype]).astype(out.dtype)
            parts.append(imp.emit("lookup", [imp.values[i]], [table], offset=-lo))
    return imp.builder.emit(relax.op.concat(parts, axis=imp.axis(options.Axis(), len(out.shape))))


def _source_index(output: int, input_size: int, align_corners: bool, half_pixel: bool) -> np.ndarray:
    """TFLite's GetNearestNeighbor for every output position."""
    scale = np.float32((input_size - 1) / np.float32(output - 1)) if align_corners and output > 1 else \
        np.float32(input_size / np.float32(output))
    pos = (np.arange(output).astype(np.float32) + np.float32(0.5 if half_pixel else 0.0)) * scale
    index = np.sign(pos) * np.floor(np.abs(pos) + 0.5) if align_corners else np.floor(pos)
    return np.clip(index.astype(np.int64), 0, input_size - 1).astype(np.int32)


def _bilinear(output: int, input_size: int, align_corners: bool, half_pixel: bool) -> np.ndarray:
    """XNNPACK's resize-bilinear indirection (q11): [top, bottom, lrintf(alpha * 2048)] per output."""
    adjust = int(align_corners and output != 1)
    scale = np.float32(np.float32(input_size - adjust) / np.float32(output - adjust))
    rows = np.zeros((3, output), np.int32)
    for o in range(output):
        if align_corners or not half_pixel:
            pos = np.float32(np.float32(o) * scale)
        else:
            pos = np.float32(np.float32(o) * scale + np.float32(np.float32(0.5) * scale - np.float32(0.5)))
            pos = np.float32(min(max(pos, np.float32(0)), np.float32(input_size - 1)))
        top = int(pos)
        rows[:, o] = top, min(top + 1, input_size - 1), int(np.rint(np.float32(pos - np.float32(top)) * 2048))
    return rows


def resize(imp, op, ins, out_index, bilinear: bool):
    options = imp.options(op, "ResizeBilinearOptions" if bilinear else "ResizeNearestNeighborOptions")
    x, out = imp.quantized(ins[0]), imp.quantized(out_index)
    if x.scalar() != out.scalar():
        raise ModelError(f"{imp.path}: a resize with different input and output quantization is not supported")
    flags = bool(options.AlignCorners()), bool(options.HalfPixelCenters())
    (_, h, w, _), (_, oh, ow, _) = x.shape, out.shape
    if bilinear:
        return imp.emit("tflite_resize_bilinear", [imp.values[ins[0]]], [_bilinear(oh, h, *flags), _bilinear(ow, w, *flags)])
    return imp.emit("tflite_resize_nearest", [imp.values[ins[0]]],
                    [_source_index(oh, h, *flags), _source_index(ow, w, *flags)])


def transpose(imp, op, ins, out_index):
    perm = imp.tensor(ins[1]).data
    if perm is None:
        raise ModelError(f"{imp.path}: TRANSPOSE with a permutation fed at run time is not supported")
    result = imp.builder.emit(relax.op.permute_dims(imp.nhwc(ins[0]), [int(p) for p in perm.reshape(-1)]))
    return imp.to_layout(result, out_index)


def split(imp, op, ins, out_index):
    axis, x = imp.tensor(ins[0]).data, imp.quantized(ins[1])
    count = imp.options(op, "SplitOptions").NumSplits()
    outs = [int(o) for o in op.OutputsAsNumpy()]
    if axis is None or any(imp.quantized(o).scalar() != x.scalar() for o in outs):
        raise ModelError(f"{imp.path}: SPLIT along an axis fed at run time or requantizing is not supported")
    parts = imp.builder.emit(relax.op.split(imp.values[ins[1]], count, imp.axis(int(axis.reshape(-1)[0]), len(x.shape))))
    return [imp.builder.emit(relax.TupleGetItem(parts, k)) for k in range(count)]


def softmax(imp, op, ins, out_index):
    beta = np.float32(imp.options(op, "SoftmaxOptions").Beta())
    x, out = imp.quantized(ins[0]), imp.quantized(out_index)
    if len(x.shape) != 2:
        raise ModelError(f"{imp.path}: SOFTMAX of a {len(x.shape)}-D tensor: only 2-D is supported")
    (sx, _), (sy, zy) = x.scalar(), out.scalar()
    scale = np.float32(-np.float32(sx) * beta)
    table = np.zeros(256, np.float32)
    table[255 - np.arange(256)] = np.exp(scale * np.arange(256).astype(np.float32)).astype(np.float32)
    return imp.emit("tflite_softmax", [imp.values[ins[0]]], [table], scale=float(sy), zero_point=zy,
                    out_dtype=out.dtype)


# -- int32 shape arithmetic, evaluated at import ---------------------------------------------------
def _known(imp, index: int, what: str) -> np.ndarray:
    if index in imp.shapes:
        return imp.shapes[index]
    data = imp.tensor(index).data
    if data is None:
        raise ModelError(f"{imp.path}: {what} of a tensor computed at run time is not supported (only the shape "
                         "arithmetic of a reshape)")
    return data


def shape(imp, op, ins, out_index):
    imp.shapes[out_index] = np.array(imp.tensor(ins[0]).shape, np.int32)


def strided_slice(imp, op, ins, out_index):
    options = imp.options(op, "StridedSliceOptions")
    data = _known(imp, ins[0], "STRIDED_SLICE")
    begin, end, strides = (_known(imp, i, "STRIDED_SLICE").reshape(-1) for i in ins[1:4])
    if data.ndim != 1 or options.EllipsisMask() or options.NewAxisMask():
        raise ModelError(f"{imp.path}: STRIDED_SLICE of shape arithmetic beyond a 1-D slice is not supported")
    b = None if options.BeginMask() & 1 else int(begin[0])
    e = None if options.EndMask() & 1 else int(end[0])
    result = data[b:e:int(strides[0])]
    if options.ShrinkAxisMask() & 1:
        result = data[int(begin[0])]
    imp.shapes[out_index] = np.asarray(result, np.int32)


def pack(imp, op, ins, out_index):
    axis = imp.options(op, "PackOptions").Axis()
    imp.shapes[out_index] = np.stack([_known(imp, i, "PACK") for i in ins], axis=axis).astype(np.int32)


CONVERTERS = {
    "LOGISTIC": logistic, "TANH": tanh, "HARD_SWISH": hard_swish, "LEAKY_RELU": leaky_relu, "RELU": relu,
    "RELU6": lambda imp, op, ins, out: relu(imp, op, ins, out, 0.0, 6.0), "QUANTIZE": quantize, "MUL": mul,
    "PAD": pad, "CONCATENATION": concatenation, "TRANSPOSE": transpose, "SPLIT": split,
    "RESIZE_NEAREST_NEIGHBOR": lambda imp, op, ins, out: resize(imp, op, ins, out, bilinear=False),
    "RESIZE_BILINEAR": lambda imp, op, ins, out: resize(imp, op, ins, out, bilinear=True),
    "SOFTMAX": softmax, "SHAPE": shape, "STRIDED_SLICE": strided_slice, "PACK": pack,
}
