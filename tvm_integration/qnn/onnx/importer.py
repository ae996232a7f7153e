"""Stage 1, import: an ONNX model into Relax, every quantized op in QDQ form but QLinearAdd.

TVM 0.27's Relax ONNX frontend reads QuantizeLinear / DequantizeLinear but not onnxruntime's
QOperator ops. The converters below extend the frontend's converter map in a copy that our importer
(``OnnxImporter``, TVM's graph importer reading that copy) is given per call; TVM's own map and
``from_onnx`` stay TVM's, so the benchmarks' tvm_default column is TVM's import even in a process that
compiled with ours. Each QOperator op is expressed as what it means: dequantize its inputs, run the
float op, quantize the result. QDQ and QOperator models then reach the rewrite (rewrite.py) in one
form, and the rewrite turns each such group into integer arithmetic. The integer bias of
QLinearConv stays an int32 constant under a dequantize, so nothing is rounded on the way. QLinearAdd,
a com.microsoft op that onnxruntime's kernel alone defines (it rounds otherwise than a QDQ Add), is
that kernel's integer op ``qlinear_add`` from the start.

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
from tvm.relax.frontend.onnx import onnx_frontend

from tvm_integration.ops.output_stage import QUANT_RANGES
from tvm_integration.qnn.semantics.errors import ModelError, model_file
from tvm_integration.qnn.semantics.quant import constant, per_tensor

QUANTIZED_OPS = {"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "QLinearConv", "QLinearMatMul",
                 "QLinearAdd", "QLinearMul", "QLinearGlobalAveragePool", "QLinearAveragePool", "QLinearConcat",
                 "QLinearLeakyRelu", "QLinearSigmoid", "QGemm", "ConvInteger", "MatMulInteger"}
ONNXRUNTIME_OPSET = 13      # onnxruntime 1.31 reads IR version <= 13 (shared/docs/design.md)


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


class _QDQ:
    """QuantizeLinear / DequantizeLinear as TVM's frontend reads them, and blocked quantization (opset
    21 ``block_size``), which it refuses: each scale and zero point repeated ``block_size`` times along
    ``axis`` (cut to the axis' length) is one per element; x, scale and zero point flattened, the op is
    per-axis along that one axis, and reshaped back. Constant parameters are expanded here (the rewrite
    reads them as constants), run-time ones by ``repeat`` and ``strided_slice`` in the graph."""
    quantize = True

    @classmethod
    def _impl_v21(cls, bb, inputs, attr, params):
        if not attr.get("block_size", 0):
            return super()._impl_v21(bb, inputs, attr, params)
        return cls.blocked(bb, inputs, attr)

    @classmethod
    def _impl_v23(cls, bb, inputs, attr, params):
        if not attr.get("block_size", 0):
            return super()._impl_v23(bb, inputs, attr, params)
        return cls.blocked(bb, inputs, attr)

    @classmethod
    def blocked(cls, bb, inputs, attr):
        op = "QuantizeLinear" if cls.quantize else "DequantizeLinear"
        x, scale = inputs[0], inputs[1]
        zp = inputs[2] if len(inputs) > 2 and inputs[2] is not None else None
        shape, block = [int(d) for d in x.ty.shape], int(attr["block_size"])
        axis = attr.get("axis", 1) % len(shape)
        blocks = -(-shape[axis] // block)
        expected = shape[:axis] + [blocks] + shape[axis + 1:]
        for name, param in (("scale", scale), ("zero point", zp)):
            if param is not None and [int(d) for d in param.ty.shape] != expected:
                raise ModelError(f"{op} with block_size {block} along axis {axis} of {shape}: its {name} must be "
                                 f"{expected}, got {[int(d) for d in param.ty.shape]}")

        def per_element(param):
            if isinstance(param, Constant):
                value = np.repeat(param.value.numpy(), block, axis).take(range(shape[axis]), axis)
                return relax.const(value.reshape(-1))
            value = bb.normalize(relax.op.repeat(param, block, axis))
            if blocks * block != shape[axis]:
                value = bb.normalize(relax.op.strided_slice(value, [axis], [0], [shape[axis]]))
            return bb.normalize(relax.op.reshape(value, [-1]))
        flat = bb.normalize(relax.op.reshape(x, [-1]))
        output_dtype = attr.get("output_dtype", 0)
        if cls.quantize:
            dtype = onnx_frontend.get_type(output_dtype) if output_dtype else \
                "uint8" if zp is None else zp.ty.dtype.dtype
            zp = relax.const(0, dtype) if zp is None else per_element(zp)
            y = relax.op.quantize(flat, per_element(scale), zp, axis=0, out_dtype=dtype)
        else:
            dtype = onnx_frontend.get_type(output_dtype) if output_dtype else scale.ty.dtype.dtype
            zp = relax.const(0, x.ty.dtype.dtype) if zp is None else per_element(zp)
            y = relax.op.dequantize(flat, per_element(scale), zp, axis=0, out_dtype=dtype)
        return relax.op.reshape(bb.normalize(y), shape)


class QuantizeLinear(_QDQ, onnx_frontend.QuantizeLinear):
    quantize = True


class DequantizeLinear(_QDQ, onnx_frontend.DequantizeLinear):
    quantize = False


def _qdq(op):
    """``op`` of two quantized tensors as DQ -> op -> Q (the rewrite fuses it)."""
    def fused(bb, a, as_, az, b, bs, bz, cs, cz):
        return _q(bb, op(_dq(a, as_, az), _dq(b, bs, bz)), cs, cz)
    return fused


def _qlinear_add(bb, a, as_, az, b, bs, bz, cs, cz):
    """QLinearAdd as the integer op ``qlinear_add`` itself, not DQ -> Add -> Q: a com.microsoft op with no
    ONNX definition, it means what onnxruntime's kernel computes, which rounds a sum near a half step
    otherwise than a QDQ Add is defined to (MLAS's QLinearAdd: on x86 ``add``'s arithmetic, on Arm integer
    multipliers, bind.py; qnn/runtime/arm_reference.py)."""
    from tvm_integration.qnn.semantics import arithmetic
    from tvm_integration.qnn.semantics.integer_op import IntegerOp
    dtype = cz.ty.dtype.dtype
    if dtype not in ("uint8", "int8") or any(x.ty.dtype.dtype != dtype for x in (a, b)):
        raise ModelError(f"QLinearAdd: inputs and output must be one 8-bit type, not {a.ty.dtype.dtype} + "
                         f"{b.ty.dtype.dtype} -> {dtype}")
    quant = [per_tensor("a QLinearAdd's tensor", constant(s), constant(z)) for s, z in ((as_, az), (bs, bz), (cs, cz))]
    return IntegerOp.call(bb, "qlinear_add", [a, b], out_dtype=dtype, clamp=list(QUANT_RANGES[dtype]),
                          **arithmetic.add_params(*quant[0], *quant[1], *quant[2]))


def _runtime(kind: str):
    """QLinearAdd / QLinearMul of scales or zero points fed at run time: the integer op ``kind`` (arithmetic.py's
    ``add_runtime`` / ``mul_runtime``), which bind.py makes MLAS's NEON kernel on Arm. A parameter given as a
    constant is bound to a variable first: an IntegerOp keeps its constants after its inputs (integer_op.py),
    which would move it out of its place among the eight operands."""
    def convert(bb, *operands, out_dtype: str):
        from tvm_integration.qnn.semantics.integer_op import IntegerOp
        operands = [bb.emit(x) if isinstance(x, Constant) else x for x in operands]
        return IntegerOp.call(bb, kind, operands, out_dtype=out_dtype)
    return convert


def _binary(fused, runtime):
    """QLinearAdd / QLinearMul: ``fused(bb, a, as_, az, b, bs, bz, cs, cz)`` (DQ -> op -> Q, or the integer op);
    with scales or zero points fed at run time (graph inputs), ``runtime(bb, a, b, as_, az, bs, bz, cs, cz,
    out_dtype=...)``: onnxruntime's arithmetic on them directly."""
    class Converter(onnx_frontend.OnnxOpConverter):
        @classmethod
        def _impl_v1(cls, bb, inputs, attr, params):
            a, as_, az, b, bs, bz, cs, cz = inputs
            if any(p is None for p in (az, bz, cz)):
                raise ModelError("QLinearAdd / QLinearMul: every zero point must be given")
            if all(isinstance(p, Constant) for p in (as_, az, bs, bz, cs, cz)):
                return fused(bb, a, as_, az, b, bs, bz, cs, cz)
            if any(int(np.prod([int(d) for d in p.ty.shape])) != 1 for p in (as_, az, bs, bz, cs, cz)):
                raise ModelError("QLinearAdd / QLinearMul: scales and zero points must be per tensor")
            return runtime(bb, a, b, as_, az, bs, bz, cs, cz, out_dtype=cz.ty.dtype.dtype)
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
        x, bounds = inputs[0], [None if b is None else constant(b) for b in inputs[1:3]]
        if "int" not in str(x.ty.dtype.dtype) or len(inputs) < 3 or any(b is None for b in bounds):
            return onnx_frontend.Clip._impl_v13(bb, inputs, attr, params)
        return relax.op.clip(x, relax.prim_value(int(bounds[0])), relax.prim_value(int(bounds[1])))


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


class GlobalAveragePool(onnx_frontend.OnnxOpConverter):
    """A 4-D GlobalAveragePool as ``adaptive_avg_pool2d`` to 1x1 rather than the frontend's mean over
    axes 2 and 3, which a ReduceMean over them also becomes: onnxruntime fuses a quantized
    GlobalAveragePool (rewrite.py) but not a ReduceMean, and computes the two float means in different
    orders (reduce_mean.py)."""
    @classmethod
    def _impl_v1(cls, bb, inputs, attr, params):
        if len(inputs[0].ty.shape) != 4:
            return onnx_frontend.GlobalAveragePool._impl_v1(bb, inputs, attr, params)
        return relax.op.nn.adaptive_avg_pool2d(inputs[0], output_size=[1, 1])


LAYER_NAMES: dict[str, str] = {}      # Relax variable name -> ONNX node name, for the named layers
LAYERS = ("Conv", "MatMul", "Gemm", "ConvInteger", "MatMulInteger")
NAMED = (*LAYERS, "Add", "Mul", "GlobalAveragePool", "AveragePool", "QGemm")   # the layers and what ort_fusion.py may name

CONVERTERS = {"Clip": IntegerClip, "QuantizeLinear": QuantizeLinear, "DequantizeLinear": DequantizeLinear,
              "ConvInteger": ConvInteger, "QLinearConv": QLinearConv, "QLinearMatMul": QLinearMatMul, "QGemm": QGemm,
              "QLinearAdd": _binary(_qlinear_add, _runtime("qlinear_add_runtime")),
              "QLinearMul": _binary(_qdq(relax.op.multiply), _runtime("qlinear_mul_runtime")),
              "GlobalAveragePool": GlobalAveragePool, "QLinearConcat": QLinearConcat,
              "QLinearGlobalAveragePool": _unary(lambda bb, x, attr: GlobalAveragePool._impl_v1(bb, [x], attr, None)),
              "QLinearLeakyRelu": _unary(lambda bb, x, attr: relax.op.nn.leakyrelu(x, attr.get("alpha", 0.01))),
              "QLinearSigmoid": _unary(lambda bb, x, attr: relax.op.sigmoid(x)),
              "QLinearAveragePool": _unary(lambda bb, x, attr: onnx_frontend.AveragePool._impl_v1(
                  bb, [x], {k: v for k, v in attr.items() if k != "channels_last"}, None))}


@functools.cache
def convert_map() -> dict:
    """The frontend's converter map with ours over it and the layers named: a copy, built once, that
    only ``OnnxImporter`` reads."""
    ours = {**onnx_frontend._get_convert_map(), **CONVERTERS}
    return {**ours, **{op: _named(ours[op]) for op in NAMED}}


def supported_ops() -> set[str]:
    return set(convert_map()) | {"Constant"}


class OnnxImporter(onnx_frontend.ONNXGraphImporter):
    """TVM's ONNX graph importer with ``convert_map`` in place of the frontend's: the two methods that
    read the frontend's map are the only ones replaced."""

    def _check_for_unsupported_ops(self, graph) -> None:
        nodes = {node.op_type for node in graph.node} - {"If"}        # If: built by the importer itself
        unsupported = sorted(nodes - supported_ops())
        if unsupported:
            raise ModelError(f"unsupported operators: {', '.join(unsupported)}")

    def _convert_operator(self, op_name, inputs, attrs, opset):
        result = convert_map()[op_name].get_converter(opset)(self.bb, inputs, attrs, [self._nodes, self._params])
        return self.bb.normalize(result) if isinstance(result, relax.Expr) else result


def load(path: str | Path, allow_float: bool = False) -> onnx.ModelProto:
    """The checked model at ``path``, or ModelError."""
    path = model_file(path)
    try:
        model = onnx.load(str(path))
        onnx.checker.check_model(model)
    except Exception as e:      # protobuf and checker errors have many types; all mean "not a model"
        raise ModelError(f"{path} is not a valid ONNX model ({type(e).__name__}: {str(e).splitlines()[0][:200]})")
    if not model.graph.node:
        raise ModelError(f"{path} is not a valid ONNX model (its graph has no nodes)")
    _refuse_float_quantization(model, path)
    from tvm_integration.qnn.onnx import lowbit, qdq_propagation
    model = qdq_propagation.propagated(lowbit.normalize(_lowbit_io(model)))
    for node in model.graph.node:
        if not node.name and node.op_type in NAMED:
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


FLOAT_QUANTIZED = ("FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "FLOAT8E8M0", "FLOAT4E2M1")


def _refuse_float_quantization(model: onnx.ModelProto, path) -> None:
    """8- and 4-bit float tensors (QuantizeLinear to float8, ...) are out of scope, in one line: the
    integer pipeline quantizes to integers, and numpy (``qsynth run``'s .npy inputs) has no such type."""
    kinds = {getattr(onnx.TensorProto, name): name for name in FLOAT_QUANTIZED if hasattr(onnx.TensorProto, name)}
    values = [("input", v.name, v.type.tensor_type.elem_type) for v in model.graph.input] + \
             [("output", v.name, v.type.tensor_type.elem_type) for v in model.graph.output] + \
             [("tensor", v.name, v.type.tensor_type.elem_type) for v in model.graph.value_info] + \
             [("initializer", t.name, t.data_type) for t in model.graph.initializer] + \
             [(f"{n.op_type} output_dtype of", n.name or n.output[0], a.i) for n in model.graph.node
              for a in n.attribute if a.name == "output_dtype"]
    for where, name, kind in values:
        if kind in kinds:
            raise ModelError(f"{path}: {where} {name!r} is {kinds[kind]}: the pipeline quantizes to integer types "
                             "(int8, uint8, int16, uint16; int4, uint4, int2, uint2 in 8-bit containers), not to "
                             "8- or 4-bit floats")


def _lowbit_io(model: onnx.ModelProto) -> onnx.ModelProto:
    """4- and 2-bit graph inputs and outputs in their 8-bit containers (int4, int2 -> int8; uint4, uint2
    -> uint8): numpy, and so ``qsynth run``'s .npy files, have no 4- or 2-bit type. An input is read
    through a Clip to its type's range (QCDQ's form, lowbit.py: the width stays declared; a container
    value outside it saturates); a QuantizeLinear whose zero point is such an input quantizes to the
    container and clips to the range (exact, as lowbit.py does for a low-bit zero-point initializer).
    Low-bit initializers are lowbit.py's."""
    from tvm_integration.qnn.onnx.lowbit import LOWBIT
    initializers = {t.name for t in model.graph.initializer}
    inputs = {v.name: v for v in model.graph.input
              if v.name not in initializers and v.type.tensor_type.elem_type in LOWBIT}
    if not inputs and not any(v.type.tensor_type.elem_type in LOWBIT for v in model.graph.output):
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    graph, nodes, ranged = copy.graph, [], {}
    for value in graph.input:
        if value.name in inputs:
            container, lo, hi = LOWBIT[value.type.tensor_type.elem_type]
            value.type.tensor_type.elem_type = container
            dtype = onnx.helper.tensor_dtype_to_np_dtype(container)
            bounds = [f"{value.name}__qsynth_{b}" for b in ("lo", "hi")]
            graph.initializer.extend(onnx.numpy_helper.from_array(np.array(v, dtype), b) for v, b in zip((lo, hi), bounds))
            ranged[value.name] = (f"{value.name}__qsynth_ranged", lo, hi, bounds)
            nodes.append(onnx.helper.make_node("Clip", [value.name, *bounds], [ranged[value.name][0]],
                                               name=f"{value.name}__qsynth_clip"))
    for value in [*graph.output, *graph.value_info]:
        if value.type.tensor_type.elem_type in LOWBIT:
            value.type.tensor_type.elem_type = LOWBIT[value.type.tensor_type.elem_type][0]
    for node in graph.node:
        zero_point = node.input[2] if node.op_type == "QuantizeLinear" and len(node.input) > 2 else ""
        for i, name in enumerate(node.input):
            if name in ranged:
                node.input[i] = ranged[name][0]
        nodes.append(node)
        if zero_point in ranged:
            out, node.output[0] = node.output[0], f"{node.output[0]}__qsynth_container"
            nodes.append(onnx.helper.make_node("Clip", [node.output[0], *ranged[zero_point][3]], [out],
                                               name=f"{out}__qsynth_clip"))
    del graph.node[:]
    graph.node.extend(nodes)
    return copy


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
    """The Relax module of ``model`` (parameters as constants, input names kept), imported at its
    ai.onnx opset as TVM's ``from_onnx`` reads it."""
    specs = input_specs(model)
    shapes = {name: list(shape) for name, (shape, _) in specs.items()}
    dtypes = {name: dtype for name, (_, dtype) in specs.items()}
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)
    return OnnxImporter(shapes, dtypes, keep_params_in_input=False, sanitize=False).from_onnx(model.graph, opset)
