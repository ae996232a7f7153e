"""The TFLite operators of Keras models as TensorFlow's converter writes them (issue 33), each into the
pipeline's integer ops with LiteRT's default interpreter's arithmetic: elementwise functions of one
8-bit tensor (LOGISTIC, TANH, HARD_SWISH, LEAKY_RELU, RELU, RELU6, QUANTIZE between 8-bit types) as
256-entry lookup tables (arithmetic.lookup, the ONNX path's tables, vpermi2b on AVX-512 VBMI) whose
entries are the interpreter's (LEAKY_RELU: XNNPACK's fixed-point vlrelu, tabulated); MUL, broadcasting ADD, PAD (folded into the next convolution), resizes,
CONCATENATION, SOFTMAX, TRANSPOSE, SPLIT; and the int32 shape arithmetic of a Keras Reshape with a
dynamic batch (SHAPE, STRIDED_SLICE, PACK), evaluated at import (the batch is the model's, 1).

Each converter is ``f(importer, op, inputs, output) -> value`` (a list for several outputs), as
tflite_importer.CONVERTERS holds them. Tables: XNNPACK builds its quantized unary kernels' lookup
tables from its reference float functions (``src/operators/unary-elementwise-nc.c``): each of the 256
inputs dequantized in float32, the function, the result divided by the output scale, rounded half to
even, plus the zero point, saturated; tests/test_tflite_ops.py checks every table against LiteRT on
every input.
"""
from __future__ import annotations

import math

import numpy as np
from tvm import relax

from tvm_integration.ops.output_stage import QUANT_RANGES
from tvm_integration.qnn import tflite_arithmetic as ta
from tvm_integration.qnn.importer import ModelError

NHWC_AXIS_IN_NCHW = [0, 2, 3, 1]


# -- 256-entry tables ----------------------------------------------------------------------------
def _table(imp, index: int, out_index: int, function, same_params=False):
    """The lookup of tensor ``index`` through ``function`` (float32 real values -> real values, numpy)."""
    x, out = imp.quantized(index), imp.quantized(out_index)
    (sx, zx), (sy, zy) = x.scalar(), out.scalar()
    lo, hi = QUANT_RANGES[x.dtype]
    q = np.arange(lo, hi + 1)
    real = (np.float32(sx) * (q - zx).astype(np.float32)).astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        y = np.asarray(function(real), np.float32)
        scaled = (y / np.float32(sy)).astype(np.float32)
    olo, ohi = QUANT_RANGES[out.dtype]
    table = np.clip(np.rint(np.clip(scaled, -2.0 ** 30, 2.0 ** 30)) + zy, olo, ohi).astype(out.dtype)
    return imp.emit("lookup", [imp.values[index]], [table], offset=-lo)


def _f32(function):
    def run(x):
        return np.asarray(function(x.astype(np.float32)), np.float32)
    return run


def logistic(imp, op, ins, out):
    return _table(imp, ins[0], out, _f32(lambda x: np.float32(1) / (np.float32(1) + np.exp(-x))))


def tanh(imp, op, ins, out):
    return _table(imp, ins[0], out, _f32(np.tanh))


def hard_swish(imp, op, ins, out):
    return _table(imp, ins[0], out, _f32(lambda x: x * np.clip(x + np.float32(3), 0, 6) / np.float32(6)))


def leaky_relu(imp, op, ins, out_index):
    """XNNPACK's qs8/qu8 vlrelu: multipliers ``lrintf(256 * scale)`` (scale ``sx / sy``, times alpha for
    the negative side, in float32), ``((zy << 8) + 128 + (x - zx) * multiplier) >> 8``, saturated."""
    alpha = np.float32(imp.options(op, "LeakyReluOptions").Alpha())
    x, out = imp.quantized(ins[0]), imp.quantized(out_index)
    (sx, zx), (sy, zy) = x.scalar(), out.scalar()
    positive = np.float32(np.float32(sx) / np.float32(sy))
    multipliers = [int(np.rint(np.float32(256) * s)) for s in (np.float32(alpha * positive), positive)]
    lo, hi = QUANT_RANGES[x.dtype]
    q = np.arange(lo, hi + 1) - zx
    y = ((zy << 8) + 128 + q * np.where(q < 0, *multipliers)) >> 8
    table = np.clip(y, *QUANT_RANGES[out.dtype]).astype(out.dtype)
    return imp.emit("lookup", [imp.values[ins[0]]], [table], offset=-lo)


def relu(imp, op, ins, out, lo=0.0, hi=math.inf):
    return _table(imp, ins[0], out, _f32(lambda x: np.clip(x, np.float32(lo), np.float32(hi))))


def quantize(imp, op, ins, out):
    """QUANTIZE of an 8-bit tensor into other 8-bit parameters (int8 <-> uint8 at a model's edges):
    ``rint((x - zx) * (sx / sy)) + zy`` saturated, a table."""
    x, y = imp.tensor(ins[0]), imp.quantized(out)
    if x.dtype not in ("int8", "uint8") or y.dtype not in ("int8", "uint8"):
        raise ModelError(f"{imp.path}: QUANTIZE from {x.dtype} to {y.dtype}: only between 8-bit types")
    (sx, zx), (sy, zy) = x.scalar(), y.scalar()
    lo, hi = QUANT_RANGES[x.dtype]
    ratio = np.float32(np.float32(sx) / np.float32(sy))
    q = (np.arange(lo, hi + 1) - zx).astype(np.float32)
    olo, ohi = QUANT_RANGES[y.dtype]
    table = np.clip(np.rint(q * ratio) + zy, olo, ohi).astype(y.dtype)
    return imp.emit("lookup", [imp.values[ins[0]]], [table], offset=-lo)


# -- binary elementwise ---------------------------------------------------------------------------
def mul(imp, op, ins, out_index):
    options = imp.options(op, "MulOptions")
    ins = imp.constant_last(ins)
    a, b, out = imp.quantized(ins[0]), imp.quantized(ins[1]), imp.quantized(out_index)
    (sa, za), (sb, zb), (sc, zc) = a.scalar(), b.scalar(), out.scalar()
    scale = np.float32(np.float32(np.float32(sa) * np.float32(sb)) / np.float32(sc))
    lo, hi = ta.MUL_SCALE_RANGE
    if not lo <= scale < hi:
        raise ModelError(f"{imp.path}: MUL with a_scale * b_scale / y_scale = {scale:g} outside [2**-16, 256): "
                         "LiteRT runs it on its builtin kernel, which qsynth does not reproduce")
    clamp = imp.activation_clamp(options.FusedActivationFunction(), out)
    rank = len(out.shape)
    return imp.emit("tflite_mul", [imp.operand(ins[0], rank), imp.operand(ins[1], rank)], a_zero_point=za,
                    b_zero_point=zb, scale=float(scale), out_zero_point=zc, out_dtype=out.dtype, clamp=clamp)


# -- data movement --------------------------------------------------------------------------------
def pad(imp, op, ins, out_index):
    """Zero padding (at the input's zero point); recorded so that a convolution reading it pads instead."""
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
