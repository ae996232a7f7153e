"""Stages 1 and 2 for TFLite: a full-integer .tflite model (int8 per-channel as TensorFlow's converter
writes it, or legacy uint8 per-tensor) straight into the integer ops rewrite.py produces for ONNX, so
pipeline.py lowers it as it lowers ONNX. The arithmetic is that of LiteRT's default
interpreter (its XNNPACK delegate, see litert_arithmetic.py), so a compiled model's outputs are equal to
``ai_edge_litert.interpreter.Interpreter(model_path=...)``'s.

Our own importer over the ``tflite`` flatbuffer package, not TVM 0.27's Relax TFLite frontend: that
frontend imports a quantized op as dequantize -> float op -> quantize on NHWC/HWIO tensors (fused
activations as clips on the integers), so reaching TFLite's integer ops from it would mean matching
back, op by op, what the flatbuffer states directly. Here every TFLite operator becomes one integer op
of arithmetic.py / litert_arithmetic.py with the interpreter's parameters (scales, multipliers and
activation bounds computed as it computes them). 4-D activations are held NCHW, the pipeline's layout
(bind.py keeps them NHWC between tensorized operators); the graph's inputs and outputs stay NHWC as
in the model.

The operators of Keras models beyond these (elementwise tables, MUL, PAD, resizes, SOFTMAX, shape
arithmetic...) are tflite/ops.py's.

Refused, each with one line: a file that is not a TFLite model, float or hybrid (dynamic range)
models, operators outside ``CONVERTERS`` (all of them named at once), dilated convolutions, adds and
muls whose scales the XNNPACK delegate refuses (the interpreter then runs its builtin kernel, whose
fixed-point arithmetic qsynth does not reproduce).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tvm import relax

from tvm_integration.qnn.semantics import litert_arithmetic as ta
from tvm_integration.qnn.semantics.arithmetic import linear_constants
from tvm_integration.qnn.semantics.errors import ModelError, model_file
from tvm_integration.qnn.semantics.integer_op import IntegerOp
from tvm_integration.qnn.semantics.quant import TO_NCHW, TO_NHWC, per_tensor
from tvm_integration.qnn.tflite import ops as tflite_ops

NHWC_AXIS = [0, 2, 3, 1]                                   # NHWC axis -> the NCHW value's axis
DTYPES = {2: "int32", 3: "uint8", 9: "int8"}              # tflite.TensorType values


def _tflite():
    import tflite
    return tflite


@dataclass(frozen=True)
class Tensor:
    name: str
    shape: tuple
    dtype: str
    scale: np.ndarray        # float32, per tensor (size 1) or per channel
    zero_point: np.ndarray   # int64
    data: np.ndarray | None  # constant contents, else None

    def scalar(self) -> tuple[np.float32, int]:
        return per_tensor(f"tensor {self.name!r}", self.scale, self.zero_point)


def read(path: str | Path):
    """The checked flatbuffer model at ``path``, or ModelError."""
    tfl = _tflite()
    path = model_file(path)
    buf = path.read_bytes()
    if len(buf) < 8 or buf[4:8] != b"TFL3":
        raise ModelError(f"{path} is not a valid TFLite model (no TFL3 identifier)")
    try:
        model = tfl.Model.GetRootAsModel(buf, 0)
        if model.SubgraphsLength() != 1:
            raise ModelError(f"{path}: {model.SubgraphsLength()} subgraphs; only single-graph models are supported")
        names = _check(model)
    except ModelError:
        raise
    except Exception as e:      # out-of-range offsets of a damaged flatbuffer raise many types
        raise ModelError(f"{path} is not a valid TFLite model ({type(e).__name__}: {str(e)[:200]})")
    unsupported = [f"{n} (#{i})" for i, n in enumerate(names) if n not in CONVERTERS]
    if unsupported:
        raise ModelError(f"{path}: unsupported operators: {', '.join(unsupported)}; supported: "
                         f"{', '.join(sorted(CONVERTERS))}")
    return model


def _check(model) -> list[str]:
    """Read every field the importer reads, so that a damaged flatbuffer fails here; the operators' names."""
    graph = model.Subgraphs(0)
    tensors, buffers = graph.TensorsLength(), model.BuffersLength()

    def check_indices(indices, what):
        for i in indices:
            if not -1 <= i < tensors:        # -1: an optional input left out
                raise ValueError(f"{what} refers to tensor {i} of {tensors}")
    for i in range(tensors):
        t = graph.Tensors(i)
        t.Name().decode(), t.Type(), t.ShapeAsNumpy()
        if not 0 <= t.Buffer() < buffers:
            raise ValueError(f"tensor {i} refers to buffer {t.Buffer()} of {buffers}")
        model.Buffers(t.Buffer()).DataAsNumpy()
        q = t.Quantization()
        if q is not None:
            q.ScaleAsNumpy(), q.ZeroPointAsNumpy()
    check_indices([*graph.InputsAsNumpy(), *graph.OutputsAsNumpy()], "the graph")
    names = []
    for k in range(graph.OperatorsLength()):
        op = graph.Operators(k)
        check_indices([*op.InputsAsNumpy(), *op.OutputsAsNumpy()], f"operator #{k}")
        names.append(_op_name(model, op))
    return names


def _op_name(model, op) -> str:
    tfl = _tflite()
    code = model.OperatorCodes(op.OpcodeIndex())
    number = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
    names = {v: k for k, v in vars(tfl.BuiltinOperator).items() if not k.startswith("_")}
    return names.get(number, f"CUSTOM:{code.CustomCode().decode()}" if code.CustomCode() else str(number))


def _options(op, kind):
    options = kind()
    table = op.BuiltinOptions()
    options.Init(table.Bytes, table.Pos)
    return options


class Importer:
    def __init__(self, model, path: Path):
        self.model, self.path = model, path
        self.graph = model.Subgraphs(0)
        self.builder = relax.BlockBuilder()
        self.values = {}            # tensor index -> Relax value (4-D ones NCHW)
        self.padded = {}            # PAD output index -> (its input, [top, left, bottom, right]): conv folds it
        self.floor = {}             # tensor index -> the least integer its convolution writes (its clamp)
        self.shapes = {}            # int32 shape arithmetic evaluated at import: tensor index -> numpy

    def options(self, op, kind: str):
        return _options(op, getattr(_tflite(), kind))

    def axis(self, axis: int, rank: int) -> int:
        """A model (NHWC) axis as the axis of the value held for a tensor of ``rank``."""
        axis %= rank
        return NHWC_AXIS[axis] if rank == 4 else axis

    def to_layout(self, value, index: int):
        """``value`` in the model's layout as held for tensor ``index`` (NCHW if 4-D)."""
        return self.builder.emit(relax.op.permute_dims(value, TO_NCHW)) if len(self.tensor(index).shape) == 4 else value

    def constant_last(self, ins: list[int]) -> list[int]:
        """A commutative op's two inputs with a constant second (IntegerOp.read puts constants after inputs)."""
        return ins[::-1] if self.tensor(ins[0]).data is not None and ins[0] not in self.values else ins

    def operand(self, index: int, rank: int):
        """Tensor ``index`` (a constant or a value) as an operand of a broadcasting op whose output has
        ``rank`` axes: its shape padded with leading 1s to ``rank`` as numpy does, NCHW if 4-D."""
        t = self.tensor(index)
        shape = (1,) * (rank - len(t.shape)) + t.shape
        if t.data is not None and index not in self.values:
            data = t.data.reshape(shape)
            return relax.const(data.transpose(TO_NCHW) if rank == 4 else data)
        if len(t.shape) == rank:
            return self.values[index]
        value = self.builder.emit(relax.op.reshape(self.nhwc(index), shape))
        return self.builder.emit(relax.op.permute_dims(value, TO_NCHW)) if rank == 4 else value

    # -- tensors -------------------------------------------------------------------------------
    def tensor(self, index: int) -> Tensor:
        t = self.graph.Tensors(index)
        if t.Type() not in DTYPES:
            raise ModelError(f"{self.path}: tensor {t.Name().decode()!r} is {_type_name(t.Type())}: only full-integer "
                             "(int8 or uint8) models are supported; convert with full integer quantization")
        q = t.Quantization()
        scale = np.zeros(0, np.float32) if q is None or q.ScaleLength() == 0 else q.ScaleAsNumpy().astype(np.float32)
        zero_point = np.zeros(0, np.int64) if q is None or q.ZeroPointLength() == 0 else \
            q.ZeroPointAsNumpy().astype(np.int64)
        shape = tuple(int(d) for d in t.ShapeAsNumpy()) if t.ShapeLength() else ()
        buffer = self.model.Buffers(t.Buffer())
        data = None
        if buffer is not None and buffer.DataLength():
            data = buffer.DataAsNumpy().view(DTYPES[t.Type()]).reshape(shape)
        return Tensor(t.Name().decode(), shape, DTYPES[t.Type()], scale, zero_point, data)

    def quantized(self, index: int) -> Tensor:
        t = self.tensor(index)
        if t.scale.size == 0:
            raise ModelError(f"{self.path}: tensor {t.name!r} has no quantization parameters")
        return t

    def specs(self) -> dict[str, tuple[tuple[int, ...], str]]:
        """Graph inputs as name -> (shape, numpy dtype), as importer.input_specs gives them for ONNX."""
        inputs = [self.tensor(self.graph.Inputs(i)) for i in range(self.graph.InputsLength())]
        return {t.name: (t.shape, t.dtype) for t in inputs}

    def output_names(self) -> list[str]:
        return [self.tensor(self.graph.Outputs(i)).name for i in range(self.graph.OutputsLength())]

    def nhwc(self, index: int):
        value = self.values[index]
        if len(self.tensor(index).shape) != 4:
            return value
        return self.builder.emit(relax.op.permute_dims(value, TO_NHWC))

    def emit(self, kind: str, inputs, constants=(), **params):
        return self.builder.emit(IntegerOp.call(self.builder, kind, inputs, constants, **params))

    # -- the graph -----------------------------------------------------------------------------
    def run(self):
        inputs = [self.graph.Inputs(i) for i in range(self.graph.InputsLength())]
        params = []
        for i in inputs:
            t = self.quantized(i)
            params.append(relax.Var(t.name, relax.TensorType(t.shape, t.dtype)))
        with self.builder.function("main", params):
            with self.builder.dataflow():
                for i, var in zip(inputs, params):
                    four_d = len(self.tensor(i).shape) == 4
                    self.values[i] = self.builder.emit(relax.op.permute_dims(var, TO_NCHW)) if four_d else var
                for k in range(self.graph.OperatorsLength()):
                    op = self.graph.Operators(k)
                    ins = [int(i) for i in op.InputsAsNumpy()]
                    outs = [int(o) for o in op.OutputsAsNumpy()]
                    name = _op_name(self.model, op)
                    try:
                        result = CONVERTERS[name](self, op, ins, outs[0])
                        for out, value in zip(outs, result if len(outs) > 1 else [result]):
                            if value is not None:
                                self.values[out] = value
                    except ModelError:
                        raise
                    except Exception as e:     # a damaged model's inconsistent fields reach numpy or TVM
                        raise ModelError(f"{self.path}: operator #{k} ({name}) cannot be imported, is the file "
                                         f"damaged? ({type(e).__name__}: {' '.join(str(e).split())[:200]})") from e
                results = [self.nhwc(self.graph.Outputs(i)) for i in range(self.graph.OutputsLength())]
                result = self.builder.emit_output(results[0] if len(results) == 1 else relax.Tuple(results))
            self.builder.emit_func_output(result)
        return relax.transform.DeadCodeElimination(["main"])(self.builder.get())

    # -- operators -----------------------------------------------------------------------------
    def activation_clamp(self, fused: int, out: Tensor, bound=ta.activation_bound) -> list[int]:
        """The fused activation as a range of the output's integers, each bound quantized by ``bound``
        (XNNPACK's, or ``ta.builtin_activation_bound`` for an op the delegate leaves to TFLite)."""
        a = _tflite().ActivationFunctionType
        ranges = {a.NONE: (-math.inf, math.inf), a.RELU: (0.0, math.inf), a.RELU6: (0.0, 6.0),
                  a.RELU_N1_TO_1: (-1.0, 1.0)}
        if fused not in ranges:
            raise ModelError(f"{self.path}: fused activation {fused} is not supported (NONE, RELU, RELU6, "
                             "RELU_N1_TO_1)")
        scale, zero_point = out.scalar()
        return [bound(real, scale, zero_point, out.dtype) for real in ranges[fused]]

    def linear(self, x: Tensor, w: Tensor, bias, out: Tensor, weight, clamp, **geometry):
        """conv2d / dense constants and parameters: XNNPACK's requantization scale and folded bias are
        onnxruntime's (arithmetic.linear_constants)."""
        (x_scale, x_zp), (out_scale, out_zp) = x.scalar(), out.scalar()
        w_zp, constants = linear_constants(weight, bias, x_scale, x_zp, w.scale, w.zero_point, out_scale)
        return constants, dict(x_zero_point=x_zp, w_zero_point=w_zp, out_zero_point=out_zp, out_dtype=out.dtype,
                               clamp=clamp, **geometry)

    def bias(self, ins):
        return self.tensor(ins[2]).data if len(ins) > 2 and ins[2] >= 0 else None

    def conv(self, op, ins, out_index, depthwise: bool):
        tfl = _tflite()
        options = _options(op, tfl.DepthwiseConv2DOptions if depthwise else tfl.Conv2DOptions)
        if options.DilationHFactor() != 1 or options.DilationWFactor() != 1:
            raise ModelError(f"{self.path}: dilated convolutions are not supported")
        x, w, out = self.quantized(ins[0]), self.quantized(ins[1]), self.quantized(out_index)
        if w.data is None:
            raise ModelError(f"{self.path}: convolution weights {w.name!r} are not constant")
        _, h, wd, c = x.shape
        if depthwise:
            weight, groups = w.data.transpose(3, 0, 1, 2), c     # [1, KH, KW, C*M] -> OIHW [C*M, 1, KH, KW]
        else:
            weight = w.data.transpose(0, 3, 1, 2)                 # OHWI -> OIHW
            groups = c // weight.shape[1]
        strides = [options.StrideH(), options.StrideW()]
        padding = _padding(options.Padding(), (h, wd), weight.shape[2:], strides)
        source = ins[0]
        if source in self.padded:          # a zero PAD before it: the convolution pads with the zero point
            source, extra = self.padded[source]
            padding = [p + q for p, q in zip(padding, extra)]
        clamp = self.activation_clamp(options.FusedActivationFunction(), out)
        self.floor[out_index] = clamp[0]
        constants, params = self.linear(x, w, self.bias(ins), out, weight, clamp, strides=strides, padding=padding,
                                        groups=groups)
        return self.emit("conv2d", [self.values[source]], constants, **params)

    def fully_connected(self, op, ins, out_index):
        options = _options(op, _tflite().FullyConnectedOptions)
        x, w, out = self.quantized(ins[0]), self.quantized(ins[1]), self.quantized(out_index)
        if w.data is None:
            raise ModelError(f"{self.path}: fully connected weights {w.name!r} are not constant")
        data = self.nhwc(ins[0])
        rows = int(np.prod(x.shape)) // w.data.shape[1]
        if x.shape != (rows, w.data.shape[1]):
            data = self.builder.emit(relax.op.reshape(data, (rows, w.data.shape[1])))
        clamp = self.activation_clamp(options.FusedActivationFunction(), out)
        constants, params = self.linear(x, w, self.bias(ins), out, w.data, clamp)
        result = self.emit("dense", [data], constants, **params)
        if out.shape == (rows, w.data.shape[0]):
            return result
        return self.to_layout(self.builder.emit(relax.op.reshape(result, out.shape)), out_index)   # keep_num_dims

    def add(self, op, ins, out_index):
        options = _options(op, _tflite().AddOptions)
        ins = self.constant_last(ins)
        a, b, out = self.quantized(ins[0]), self.quantized(ins[1]), self.quantized(out_index)
        (sa, za), (sb, zb), (sc, zc) = a.scalar(), b.scalar(), out.scalar()
        lo, hi = ta.ADD_SCALE_RANGE
        for name, s in ((a.name, sa), (b.name, sb)):
            if not lo <= np.float32(s / sc) < hi:
                raise ModelError(f"{self.path}: ADD input {name!r}: scale / output scale = {s / sc:g} is outside "
                                 f"[1/1024, 256), so LiteRT runs this ADD on its builtin kernel, which qsynth "
                                 "does not reproduce")
        clamp = self.activation_clamp(options.FusedActivationFunction(), out)
        rank = len(out.shape)
        return self.emit("tflite_add", [self.operand(ins[0], rank), self.operand(ins[1], rank)],
                         **ta.add_params(sa, za, sb, zb, sc), out_zero_point=zc, out_dtype=out.dtype, clamp=clamp)

    def pool(self, op, ins, out_index, kind: str):
        options = _options(op, _tflite().Pool2DOptions)
        x, out = self.quantized(ins[0]), self.quantized(out_index)
        if x.scalar() != out.scalar():
            raise ModelError(f"{self.path}: {kind} with different input and output quantization is not supported")
        pool, strides = [options.FilterHeight(), options.FilterWidth()], [options.StrideH(), options.StrideW()]
        padding = _padding(options.Padding(), x.shape[1:3], pool, strides)
        if kind == "max_pool2d":
            if options.FusedActivationFunction() != _tflite().ActivationFunctionType.NONE:
                raise ModelError(f"{self.path}: MAX_POOL_2D with a fused activation is not supported")
            source, padding = self.unpadded_max_pool_input(ins[0], padding, pool)
            return self.emit("max_pool2d", [self.values[source]], pool=pool, strides=strides, padding=padding)
        # XNNPACK takes only float average pools: TFLite's builtin kernel runs this one
        clamp = self.activation_clamp(options.FusedActivationFunction(), out, ta.builtin_activation_bound)
        return self.emit("tflite_avg_pool2d", [self.values[ins[0]]], pool=pool, strides=strides, padding=padding,
                         clamp=clamp)

    def unpadded_max_pool_input(self, index: int, padding: list[int], pool: list[int]) -> tuple[int, list[int]]:
        """(input, padding) of a max pool reading tensor ``index``: the PAD's input and the pool's padding
        grown by the PAD's where ``index`` is a zero PAD (ResNet's before its 3x3/2 pool) of a convolution
        that writes nothing below the zero point (a fused ReLU): the pad value then never wins, as the
        pool's own padding never does, provided every window keeps a tap inside; else unchanged."""
        if index not in self.padded:
            return index, padding
        source, extra = self.padded[index]
        grown = [p + q for p, q in zip(padding, extra)]
        _, zero_point = self.quantized(index).scalar()
        if self.floor.get(source, -math.inf) < zero_point or any(p >= k for p, k in zip(grown, pool + pool)):
            return index, padding
        return source, grown

    def mean(self, op, ins, out_index):
        options = _options(op, _tflite().ReducerOptions)
        x, out = self.quantized(ins[0]), self.quantized(out_index)
        axis = self.tensor(ins[1]).data
        if len(x.shape) != 4 or axis is None or sorted(int(a) % 4 for a in axis.reshape(-1)) != [1, 2]:
            raise ModelError(f"{self.path}: MEAN over axes {axis} of a {len(x.shape)}-D tensor: only the mean over "
                             "height and width of a 4-D tensor is supported")
        (x_scale, x_zp), (y_scale, y_zp) = x.scalar(), out.scalar()
        params = ta.mean_params(x_scale, x_zp, y_scale, y_zp, x.shape[1] * x.shape[2])
        return self.emit("tflite_mean", [self.values[ins[0]]], **params, out_dtype=out.dtype,
                         keepdims=bool(options.KeepDims()))

    def reshape(self, op, ins, out_index):
        x, out = self.quantized(ins[0]), self.quantized(out_index)
        if x.scalar() != out.scalar():
            raise ModelError(f"{self.path}: RESHAPE with different input and output quantization is not supported")
        result = self.builder.emit(relax.op.reshape(self.nhwc(ins[0]), out.shape))
        return self.builder.emit(relax.op.permute_dims(result, TO_NCHW)) if len(out.shape) == 4 else result


def _padding(kind: int, size, kernel, strides) -> list[int]:
    """TFLite SAME / VALID padding as [top, left, bottom, right] (the odd pixel at the bottom/right)."""
    if kind == _tflite().Padding.VALID:
        return [0, 0, 0, 0]
    ph, pw = [max(((n + s - 1) // s - 1) * s + int(k) - n, 0) for n, k, s in zip(size, kernel, strides)]
    return [ph // 2, pw // 2, ph - ph // 2, pw - pw // 2]


def _type_name(number: int) -> str:
    names = {v: k for k, v in vars(_tflite().TensorType).items() if not k.startswith("_")}
    return names.get(number, str(number)).lower()


CONVERTERS = {
    "CONV_2D": lambda imp, op, ins, out: imp.conv(op, ins, out, depthwise=False),
    "DEPTHWISE_CONV_2D": lambda imp, op, ins, out: imp.conv(op, ins, out, depthwise=True),
    "FULLY_CONNECTED": Importer.fully_connected,
    "ADD": Importer.add,
    "MAX_POOL_2D": lambda imp, op, ins, out: imp.pool(op, ins, out, "max_pool2d"),
    "AVERAGE_POOL_2D": lambda imp, op, ins, out: imp.pool(op, ins, out, "avg_pool2d"),
    "MEAN": Importer.mean,
    "RESHAPE": Importer.reshape,
    **tflite_ops.CONVERTERS,
}


def load(path: str | Path) -> Importer:
    """The importer of the checked model at ``path`` (ModelError if it cannot be compiled)."""
    path = Path(path)
    return Importer(read(path), path)

