"""Stage 1, import: an ONNX model into Relax, every quantized op in QDQ form.

TVM 0.27's Relax ONNX frontend reads QuantizeLinear / DequantizeLinear but not onnxruntime's
QOperator ops. The converters below are registered with that frontend (its converter map is
extended, not forked) and express each QOperator op as what it means: dequantize its inputs, run the
float op, quantize the result. QDQ and QOperator models then reach the rewrite (rewrite.py) in one
form, and the rewrite turns each such group into integer arithmetic. The integer bias of
QLinearConv stays an int32 constant under a dequantize, so nothing is rounded on the way.

``load`` refuses, each with one line: a file that is not an ONNX model, operators that neither the
frontend nor these converters support (all of them, with node names), and a model with no
quantized op (unless ``allow_float``).
"""
from __future__ import annotations

import functools
import warnings
from pathlib import Path

import numpy as np
import onnx
from tvm import relax
from tvm.ir import Constant
from tvm.relax.frontend.onnx import from_onnx, onnx_frontend

QUANTIZED_OPS = {"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "QLinearConv", "QLinearMatMul",
                 "QLinearAdd", "QLinearMul", "QLinearGlobalAveragePool", "QLinearAveragePool", "QLinearConcat",
                 "QLinearLeakyRelu", "QLinearSigmoid", "QGemm", "ConvInteger", "MatMulInteger"}
ONNXRUNTIME_OPSET = 13      # onnxruntime 1.31 reads IR version <= 13 (shared/docs/design.md)


class ModelError(ValueError):
    """The model cannot be compiled by this pipeline; the message says why and what is accepted."""


def _dq(x, scale, zero_point, axis=1):
    axis = min(axis, max(x.ty.ndim - 1, 0))
    if zero_point is None:
        zero_point = relax.const(0, x.ty.dtype.dtype)
    return relax.op.dequantize(x, scale, zero_point, axis=axis, out_dtype="float32")


def _q(bb, x, scale, zero_point):
    x = bb.normalize(x)
    axis = min(1, max(x.ty.ndim - 1, 0))
    return relax.op.quantize(x, scale, zero_point, axis=axis, out_dtype=zero_point.ty.dtype.dtype)


def _bias_scale(x_scale, w_scale):
    """``x_scale * w_scale`` (the scale an int32 bias is in), folded when both are constants."""
    if isinstance(x_scale, Constant) and isinstance(w_scale, Constant):
        return relax.const((x_scale.value.numpy() * w_scale.value.numpy()).astype(np.float32))
    return relax.op.multiply(x_scale, w_scale)


def _weight_axis(scale) -> int:
    """Per-channel weight scales are along the output channels (axis 0)."""
    return 0 if len(scale.ty.shape) and int(scale.ty.shape[0]) > 1 else 1


class QLinearConv(onnx_frontend.OnnxOpConverter):
    @classmethod
    def _impl_v10(cls, bb, inputs, attr, params):
        x, xs, xz, w, ws, wz, ys, yz = inputs[:8]
        bias = inputs[8] if len(inputs) > 8 else None
        conv_inputs = [_dq(x, xs, xz), _dq(w, ws, wz, axis=_weight_axis(ws)),
                       None if bias is None else _dq(bias, _bias_scale(xs, ws), relax.const(0, "int32"), axis=0)]
        y = onnx_frontend.Conv._impl_v11(bb, [e if e is None else bb.normalize(e) for e in conv_inputs], attr, params)
        return _q(bb, y, ys, yz)


class QLinearMatMul(onnx_frontend.OnnxOpConverter):
    @classmethod
    def _impl_v10(cls, bb, inputs, attr, params):
        a, as_, az, b, bs, bz, ys, yz = inputs
        return _q(bb, relax.op.matmul(_dq(a, as_, az), _dq(b, bs, bz, axis=b.ty.ndim - 1)), ys, yz)


class QGemm(onnx_frontend.OnnxOpConverter):
    """com.microsoft QGemm: A, a_scale, a_zp, B, b_scale, b_zp, C (int32), y_scale, y_zp."""
    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        a, as_, az, b, bs, bz = inputs[:6]
        c = inputs[6] if len(inputs) > 6 else None
        ys, yz = (inputs[7], inputs[8]) if len(inputs) > 8 else (None, None)
        dq_b = _dq(b, bs, bz, axis=0 if attr.get("transB", 0) else 1)
        dq_c = None if c is None else _dq(c, _bias_scale(as_, bs), relax.const(0, "int32"), axis=0)
        gemm_attr = {k: v for k, v in attr.items() if k in ("transA", "transB", "alpha")}
        inputs = [None if e is None else bb.normalize(e) for e in (_dq(a, as_, az), dq_b, dq_c)]
        y = onnx_frontend.Gemm._impl_v13(bb, inputs, gemm_attr, params)
        return y if ys is None else _q(bb, y, ys, yz)


class ConvInteger(onnx_frontend.OnnxOpConverter):
    """ConvInteger as TVM's frontend writes MatMulInteger: ``conv2d(x - zx, w - zw)`` in int32 (the
    subtracted input padded with 0 is the input padded with its zero point, as onnxruntime pads);
    the rewrite puts it on the tiles."""
    @classmethod
    def _impl_v10(cls, bb, inputs, attr, params):
        x, w = (relax.op.astype(v, "int32") for v in inputs[:2])
        zx, zw = (inputs[i] if len(inputs) > i else None for i in (2, 3))
        if zx is not None:
            x = relax.op.subtract(x, relax.op.astype(zx, "int32"))
        if zw is not None:
            zw = bb.normalize(relax.op.astype(zw, "int32"))
            w = relax.op.subtract(w, relax.op.reshape(zw, [-1, 1, 1, 1]) if zw.ty.ndim == 1 else zw)
        return onnx_frontend.Conv._impl_v11(bb, [bb.normalize(x), bb.normalize(w), None], attr, params)


def _binary(op):
    class Converter(onnx_frontend.OnnxOpConverter):
        @classmethod
        def _impl_v1(cls, bb, inputs, attr, params):
            a, as_, az, b, bs, bz, cs, cz = inputs
            return _q(bb, op(_dq(a, as_, az), _dq(b, bs, bz)), cs, cz)
    return Converter


class QLinearConcat(onnx_frontend.OnnxOpConverter):
    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        ys, yz, rest = inputs[0], inputs[1], inputs[2:]
        parts = [_dq(rest[i], rest[i + 1], rest[i + 2]) for i in range(0, len(rest), 3)]
        return _q(bb, relax.op.concat(parts, axis=attr["axis"]), ys, yz)


def _unary(float_op):
    """QLinearGlobalAveragePool / LeakyRelu / Sigmoid / AveragePool (x, x_scale, x_zp, y_scale, y_zp):
    the float op between DQ and Q; ``float_op(bb, x, attr)``."""
    class Converter(onnx_frontend.OnnxOpConverter):
        @classmethod
        def _impl_v1(cls, bb, inputs, attr, params):
            if attr.get("channels_last", 0):
                raise ModelError("QOperator ops with channels_last=1 are not supported (NCHW only)")
            x, xs, xz, ys, yz = inputs
            return _q(bb, float_op(bb, bb.normalize(_dq(x, xs, xz)), attr), ys, yz)
    return Converter


class IntegerClip(onnx_frontend.OnnxOpConverter):
    """Clip of an integer tensor by constant bounds (QCDQ's clip to a b-bit range, lowbit.py) as one
    ``relax.clip`` the rewrite reads (the frontend writes it as two TE calls); others as before."""
    @classmethod
    def _impl_v11(cls, bb, inputs, attr, params):
        x, bounds = inputs[0], [None if b is None else constant_value(b) for b in inputs[1:3]]
        if "int" not in str(x.ty.dtype.dtype) or len(inputs) < 3 or any(b is None for b in bounds):
            return onnx_frontend.Clip._impl_v13(bb, inputs, attr, params)
        return relax.op.clip(x, relax.prim_value(int(bounds[0])), relax.prim_value(int(bounds[1])))


def constant_value(expr):
    return expr.value.numpy() if isinstance(expr, Constant) else None


def _named(converter):
    """``converter`` whose result is bound to a variable named after the ONNX node, so that the rewrite
    and ``qsynth inspect`` can name layers (LAYER_NAMES maps the variable's name back to the node's)."""
    class Named(converter):
        @classmethod
        def get_converter(cls, opset):
            convert = converter.get_converter(opset)

            def named(bb, inputs, attr, params):
                node = attr["tvm_custom"]["name"]
                var = bb.emit(convert(bb, inputs, attr, params), name_hint=node or "layer")
                LAYER_NAMES[var.name] = node
                return var
            return named
    return Named


LAYER_NAMES: dict[str, str] = {}      # Relax variable name -> ONNX node name, for the named layers
LAYERS = ("Conv", "MatMul", "Gemm")

CONVERTERS = {"Clip": IntegerClip, "ConvInteger": ConvInteger, "QLinearConv": QLinearConv, "QLinearMatMul": QLinearMatMul, "QGemm": QGemm,
              "QLinearAdd": _binary(relax.op.add), "QLinearMul": _binary(relax.op.multiply),
              "QLinearGlobalAveragePool": _unary(lambda bb, x, attr: relax.op.mean(x, axis=[2, 3], keepdims=True)), "QLinearConcat": QLinearConcat,
              "QLinearLeakyRelu": _unary(lambda bb, x, attr: relax.op.nn.leakyrelu(x, attr.get("alpha", 0.01))),
              "QLinearSigmoid": _unary(lambda bb, x, attr: relax.op.sigmoid(x)),
              "QLinearAveragePool": _unary(lambda bb, x, attr: onnx_frontend.AveragePool._impl_v1(
                  bb, [x], {k: v for k, v in attr.items() if k != "channels_last"}, None))}


@functools.cache
def register_converters() -> None:
    """Extend the frontend's converter map with ours (once per process)."""
    original = onnx_frontend._get_convert_map
    onnx_frontend._get_convert_map = lambda: {**original(), **CONVERTERS,
                                              **{op: _named(original()[op]) for op in LAYERS}}


def supported_ops() -> set[str]:
    register_converters()
    return set(onnx_frontend._get_convert_map()) | {"Constant"}


def load(path: str | Path, allow_float: bool = False) -> onnx.ModelProto:
    """The checked model at ``path``, or ModelError."""
    path = Path(path)
    if not path.is_file():
        raise ModelError(f"{path}: no such file")
    try:
        model = onnx.load(str(path))
        onnx.checker.check_model(model)
    except Exception as e:      # protobuf and checker errors have many types; all mean "not a model"
        raise ModelError(f"{path} is not a valid ONNX model ({type(e).__name__}: {str(e).splitlines()[0][:200]})")
    if not model.graph.node:
        raise ModelError(f"{path} is not a valid ONNX model (its graph has no nodes)")
    from tvm_integration.qnn import lowbit
    model = lowbit.normalize(model)
    for node in model.graph.node:
        if not node.name and node.op_type in LAYERS:
            node.name = node.output[0]        # layers are named in messages and by qsynth inspect
    unsupported = [f"{n.op_type} ({n.name or 'unnamed'})" for n in model.graph.node if n.op_type not in supported_ops()]
    if unsupported:
        raise ModelError(f"{path}: unsupported operators: {', '.join(unsupported)}")
    if not any(n.op_type in QUANTIZED_OPS for n in model.graph.node):
        if allow_float:
            warnings.warn(f"{path} has no quantized op: it runs in float, not on the integer kernels")
            return model
        raise ModelError(f"{path} is a float model (no QuantizeLinear, DequantizeLinear or QLinear* op): the integer "
                         "pipeline compiles pre-quantized models; quantize it first (onnxruntime.quantization), or "
                         "pass allow_float / --allow-float to run it in float")
    return model


def input_specs(model: onnx.ModelProto) -> dict[str, tuple[tuple[int, ...], str]]:
    """Graph inputs (not initializers) as name -> (shape, numpy dtype); symbolic dimensions are refused."""
    initializers = {t.name for t in model.graph.initializer}
    specs = {}
    for value in model.graph.input:
        if value.name in initializers:
            continue
        tensor = value.type.tensor_type
        dims = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in tensor.shape.dim)
        if any(d < 1 for d in dims):
            raise ModelError(f"input {value.name!r} has a symbolic or unknown dimension {dims}: give the model "
                             "static input shapes")
        specs[value.name] = (dims, np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type)).name)
    return specs


def to_relax(model: onnx.ModelProto):
    """The Relax module of ``model`` (parameters as constants, input names kept)."""
    register_converters()
    specs = input_specs(model)
    shapes = {name: list(shape) for name, (shape, _) in specs.items()}
    dtypes = {name: dtype for name, (_, dtype) in specs.items()}
    return from_onnx(model, shape_dict=shapes, dtype_dict=dtypes, keep_params_in_input=False,
                     sanitize_input_names=False)
