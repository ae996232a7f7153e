"""Stage 1, import (before TVM's frontend): every low-bit quantized form of an ONNX model into one,
QCDQ: QuantizeLinear to an 8-bit container -> Clip to the b-bit range -> DequantizeLinear, the form
Brevitas exports. A tensor's bit width is then its Clip's bounds (rewrite.py reads them;
precision.py turns them into AxWy per layer).

* ONNX's own INT4/UINT4/INT2/UINT2 tensors (opset >= 21; int2 >= 25): initializers of these types
  become int8/uint8 with the same values; a QuantizeLinear to such a type quantizes to the
  container and clips to the type's range (exact: ``saturate(round(x / s) + z)`` to [lo, hi] is
  the 8-bit saturation clipped to [lo, hi]); a DequantizeLinear of such an initializer reads it
  through a Clip to the type's range, which keeps the declared width.
* QONNX ``Quant(x, scale, zero_point, bitwidth; signed, narrow, rounding_mode)``: QuantizeLinear +
  Clip [min_int, max_int] + DequantizeLinear. QONNX computes ``round(clip(x / s + z))``; for z = 0
  and integer bounds that is ``clip(round(x / s))``, what the three ops compute (a non-zero z is
  refused: rounding half to even is not translation invariant, ``round(0.5 + 1) != round(0.5) + 1``).
  A signed 1-bit Quant is bipolar, as in QONNX's executor.
* QONNX ``Quant`` of a constant wider than 8 bits (Brevitas exports each bias as a 32-bit Quant of
  its float value): folded into the float constant QONNX's executor computes (``wide_quant_constant``);
  rewrite.py reads a float bias in the accumulator's scale.
* QONNX ``BipolarQuant(W, scale)`` of a constant: W -> ±1 (``W >= 0`` -> 1), Clip [-1, 1],
  DequantizeLinear; bipolar weights run on the hybrid encoding (precision.py). Of an activation it
  is refused: a ±1 activation is not a QuantizeLinear.
* A QuantizeLinear (or Quant) of a constant is folded into an integer initializer, ONNX's rounding
  (``x / s`` in float32, half to even), so every weight is a constant under its DequantizeLinear.
* A Clip of an integer constant (a weight's declared range: Brevitas' QuantizeLinear of float
  weights -> Clip, a QuantizeLinear to int4/int2, or integers stored wider than their Clip) reads the
  constant clipped, as onnxruntime computes it; the Clip stays and declares the width. The rewrite
  reads the constant under a weight's Clip, so a weight that saturates (``x / s`` past the b-bit
  range: a signed 3-bit weight of 5 is 3) would otherwise reach the layer unclipped.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tvm_integration.qnn.semantics.errors import ModelError

LOWBIT = {TensorProto.INT4: (TensorProto.INT8, -8, 7), TensorProto.UINT4: (TensorProto.UINT8, 0, 15),
          TensorProto.INT2: (TensorProto.INT8, -2, 1), TensorProto.UINT2: (TensorProto.UINT8, 0, 3)}
QONNX_DOMAINS = ("qonnx.custom_op.general", "onnx.brevitas", "finn.custom_op.general")
CONTAINER = {True: (TensorProto.INT8, np.int8), False: (TensorProto.UINT8, np.uint8)}


def quant_range(bits: int, signed: bool, narrow: bool) -> tuple[int, int]:
    """QONNX's min_int / max_int."""
    if signed:
        return -(1 << (bits - 1)) + int(narrow), (1 << (bits - 1)) - 1
    return 0, (1 << bits) - 1 - int(narrow)


def quantize(x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """QuantizeLinear of a constant: ``round_half_even(x / scale) + zero_point`` in float32, clipped."""
    q = np.round(x.astype(np.float32) / scale.astype(np.float32)) + zero_point.astype(np.float32)
    return np.clip(q, lo, hi).astype(np.int64)


def wide_quant_constant(x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray, bitwidth: np.ndarray,
                        signed: bool, narrow: bool) -> np.ndarray:
    """QONNX ``Quant`` (rounding ROUND) of a constant, as qonnx's executor computes it (``int_quant``:
    ``x / s + z`` clipped to [min_int, max_int] computed from the bit width's own dtype, rounded half
    to even, ``(y - z) * s``, float32), operation for operation in the operands' dtypes, so the folded
    constant equals what the executor feeds the next node."""
    bitwidth = np.asarray(bitwidth)
    y = x / scale + zero_point
    if signed:
        lo = -(2 ** (bitwidth - 1)) + 1 if narrow else -(2 ** (bitwidth - 1))
        hi = (2 ** (bitwidth - 1)) - 1
    else:
        lo, hi = 0 * bitwidth, (2 ** bitwidth) - 2 if narrow else (2 ** bitwidth) - 1
    y = np.where(y > hi, np.asarray(hi).astype(y.dtype), y)
    y = np.where(y < lo, np.asarray(lo).astype(y.dtype), y)
    return ((np.round(y) - zero_point) * scale).astype(np.float32)


class _Rewriter:
    def __init__(self, model: onnx.ModelProto):
        self.model = model
        self.graph = model.graph
        self.inits = {t.name: t for t in self.graph.initializer}
        self.nodes: list = []
        self.count = 0
        self.constant_nodes = {n.output[0]: n for n in self.graph.node if n.op_type == "Constant"}

    def fresh(self, base: str) -> str:
        self.count += 1
        return f"{base}__qsynth{self.count}"

    def add_init(self, name: str, array: np.ndarray, dtype: int | None = None) -> str:
        tensor = numpy_helper.from_array(np.asarray(array), name)
        if dtype is not None:
            tensor = helper.make_tensor(name, dtype, list(np.shape(array)), np.asarray(array).flatten().tolist())
        self.graph.initializer.append(tensor)
        self.inits[name] = tensor
        return name

    def const(self, name: str) -> np.ndarray | None:
        if name in self.inits:
            return numpy_helper.to_array(self.inits[name])
        node = self.constant_nodes.get(name)
        if node is not None and node.attribute and node.attribute[0].name == "value":
            return numpy_helper.to_array(node.attribute[0].t)
        return None

    def clip(self, x: str, out: str, lo: int, hi: int, dtype: int, name: str) -> None:
        np_dtype = helper.tensor_dtype_to_np_dtype(dtype)
        bounds = [self.add_init(self.fresh(f"{name}_lo"), np.array(lo, np_dtype)),
                  self.add_init(self.fresh(f"{name}_hi"), np.array(hi, np_dtype))]
        self.nodes.append(helper.make_node("Clip", [x, *bounds], [out], name=self.fresh(f"{name}_clip")))

    # -- ONNX's low-bit types -----------------------------------------------------------------------
    def widen_initializers(self) -> dict[str, tuple[int, int]]:
        """Low-bit initializers -> their 8-bit containers; returns name -> declared range."""
        ranges = {}
        for i, t in enumerate(self.graph.initializer):
            if t.data_type in LOWBIT:
                container, lo, hi = LOWBIT[t.data_type]
                values = numpy_helper.to_array(t).astype(np.int64)
                new = helper.make_tensor(t.name, container, list(t.dims), values.flatten().tolist())
                self.graph.initializer[i].CopyFrom(new)
                self.inits[t.name] = self.graph.initializer[i]
                ranges[t.name] = (lo, hi)
        for value in [*self.graph.value_info, *self.graph.output]:
            if value.type.tensor_type.elem_type in LOWBIT:
                value.type.tensor_type.elem_type = LOWBIT[value.type.tensor_type.elem_type][0]
        for value in self.graph.input:
            if value.type.tensor_type.elem_type in LOWBIT and value.name not in self.inits:
                raise ModelError(f"input {value.name!r} is a {TensorProto.DataType.Name(value.type.tensor_type.elem_type)} "
                                 "tensor: the model's inputs must be float or 8-bit")
        return ranges

    def quantize_linear(self, node, lowbit_zero_points: dict) -> bool:
        """A QuantizeLinear to a low-bit type (its zero point's type or ``output_dtype``) -> 8-bit + Clip."""
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if attrs.get("block_size", 0):
            raise ModelError(f"{node.op_type} {node.name or node.output[0]}: blocked quantization is not supported")
        zp = node.input[2] if len(node.input) > 2 and node.input[2] else None
        declared = lowbit_zero_points.get(zp) if zp else None
        if declared is None and attrs.get("output_dtype") in LOWBIT:
            container, lo, hi = LOWBIT[attrs["output_dtype"]]
            zp = self.add_init(self.fresh("zero_point"), np.array(0, helper.tensor_dtype_to_np_dtype(container)))
            declared = (lo, hi)
        if declared is None:
            return False
        container = TensorProto.INT8 if declared[0] < 0 else TensorProto.UINT8
        inner = self.fresh(node.output[0])
        kept = [a for a in node.attribute if a.name not in ("output_dtype",)]
        q = helper.make_node("QuantizeLinear", [node.input[0], node.input[1], zp], [inner], name=node.name)
        q.attribute.extend(kept)
        self.nodes.append(q)
        self.clip(inner, node.output[0], *declared, container, node.name or node.output[0])
        return True

    def dequantize_linear(self, node, lowbit_inits: dict) -> bool:
        """A DequantizeLinear of a low-bit initializer reads it through a Clip to the declared range."""
        if node.input[0] not in lowbit_inits:
            return False
        lo, hi = lowbit_inits[node.input[0]]
        clipped = self.fresh(node.input[0])
        self.clip(node.input[0], clipped, lo, hi, self.inits[node.input[0]].data_type, node.name or node.output[0])
        dq = helper.make_node("DequantizeLinear", [clipped, *node.input[1:]], list(node.output), name=node.name)
        dq.attribute.extend(node.attribute)
        self.nodes.append(dq)
        return True

    # -- QONNX --------------------------------------------------------------------------------------
    def quant(self, node) -> None:
        what = f"{node.op_type} {node.name or node.output[0]}"
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        scale, zero_point = self.const(node.input[1]), (self.const(node.input[2]) if node.op_type == "Quant" else 0)
        if scale is None or zero_point is None:
            raise ModelError(f"{what}: its scale and zero point must be constants")
        if node.op_type == "BipolarQuant":
            bits, signed, narrow = 1, True, False
        else:
            bitwidth = self.const(node.input[3])
            if bitwidth is None or np.size(bitwidth) != 1 or float(bitwidth) != int(bitwidth):
                raise ModelError(f"{what}: its bit width must be a constant integer")
            bits, signed, narrow = int(bitwidth), bool(attrs.get("signed", 1)), bool(attrs.get("narrow", 0))
            mode = attrs.get("rounding_mode", b"ROUND")
            mode = mode.decode() if isinstance(mode, bytes) else mode
            if mode.upper() not in ("ROUND", "HALF_EVEN"):
                raise ModelError(f"{what}: rounding mode {mode}: only ROUND (half to even) is supported")
            if np.any(np.asarray(zero_point) != 0):
                raise ModelError(f"{what}: a non-zero zero point is not supported (QONNX rounds x / s + z, "
                                 "QuantizeLinear x / s, then adds z: they differ at ties)")
            if bits > 8 and self.const(node.input[0]) is not None:
                # a constant wider than the operators (Brevitas' 32-bit bias): its float value
                self.add_init(node.output[0], wide_quant_constant(
                    self.const(node.input[0]), scale, zero_point, bitwidth, signed, narrow))
                return
            if not 1 <= bits <= 8:
                raise ModelError(f"{what}: {bits}-bit: Quant nodes of 1 to 8 bits are supported, and wider ones "
                                 "of constants")
        bipolar = bits == 1 and signed
        scale = np.asarray(scale, np.float32)
        axis, scale_1d = self.scale_axis(scale, what)
        dtype, np_dtype = CONTAINER[signed]
        x = self.const(node.input[0])
        name = node.name or node.output[0]
        zp_name = self.add_init(self.fresh(f"{name}_zero_point"), np.zeros(scale_1d.shape, np_dtype))
        scale_name = self.add_init(self.fresh(f"{name}_scale"), scale_1d)
        lo, hi = (-1, 1) if bipolar else quant_range(bits, signed, narrow)
        axis_attr = {} if axis is None else {"axis": axis}
        if x is not None:
            # a weight: folded to integers, read through a Clip that keeps its declared range
            if bipolar:
                q = np.where(x.astype(np.float32) / scale >= 0, 1, -1)
            else:
                q = quantize(x, scale, np.zeros((), np.int64), lo, hi)
            ints = self.add_init(self.fresh(f"{name}_int"), q.astype(np_dtype))
            clipped = self.fresh(f"{name}_clipped")
            self.clip(ints, clipped, lo, hi, dtype, name)
        elif bipolar:
            raise ModelError(f"{what}: bipolar (±1) activations are not supported; supported are Quant activations "
                             "of 1 to 8 bits (unsigned 1-bit: binary) and bipolar weights")
        else:
            inner, clipped = self.fresh(f"{name}_q"), self.fresh(f"{name}_clipped")
            self.nodes.append(helper.make_node("QuantizeLinear", [node.input[0], scale_name, zp_name], [inner],
                                               name=self.fresh(f"{name}_quantize"), **axis_attr))
            self.clip(inner, clipped, lo, hi, dtype, name)
        self.nodes.append(helper.make_node("DequantizeLinear", [clipped, scale_name, zp_name], [node.output[0]],
                                           name=self.fresh(f"{name}_dequantize"), **axis_attr))

    @staticmethod
    def scale_axis(scale: np.ndarray, what: str) -> tuple[int | None, np.ndarray]:
        """(the axis of a per-channel scale, the scale as 0-d or 1-d)."""
        if scale.size == 1:
            return None, scale.reshape(())
        channels = [i for i, d in enumerate(scale.shape) if d > 1]
        if len(channels) != 1:
            raise ModelError(f"{what}: scale of shape {list(scale.shape)}: per tensor or along one axis only")
        return channels[0], scale.reshape(-1)

    def fold_constant_quantize(self, node) -> bool:
        """QuantizeLinear of a constant -> the integer initializer (ONNX's arithmetic)."""
        x, scale = self.const(node.input[0]), self.const(node.input[1])
        zp = self.const(node.input[2]) if len(node.input) > 2 and node.input[2] else np.zeros((), np.uint8)
        if x is None or scale is None or zp is None or not np.issubdtype(x.dtype, np.floating):
            return False
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if scale.size > 1:
            axis = attrs.get("axis", 1) % x.ndim
            shape = [1] * x.ndim
            shape[axis] = -1
            scale, zp_b = scale.reshape(shape), zp.astype(np.int64).reshape(shape)
        else:
            zp_b = zp.astype(np.int64)
        info = np.iinfo(zp.dtype)
        q = quantize(x, scale, zp_b, int(info.min), int(info.max)).astype(zp.dtype)
        self.add_init(node.output[0], q)
        return True

    def clip_constant(self, node) -> None:
        """A Clip of an integer constant by constant bounds (a bound left out: none) reads a clipped copy
        of it; the Clip stays."""
        x = self.const(node.input[0])
        if x is None or not np.issubdtype(x.dtype, np.integer):
            return
        names = [*node.input[1:3], "", ""][:2]
        bounds = [self.const(b) if b else np.array(limit, np.int64)
                  for b, limit in zip(names, (np.iinfo(x.dtype).min, np.iinfo(x.dtype).max))]
        if any(b is None or np.size(b) != 1 for b in bounds):
            return
        clipped = np.clip(x.astype(np.int64), int(bounds[0]), int(bounds[1])).astype(x.dtype)
        if not np.array_equal(clipped, x):
            node.input[0] = self.add_init(self.fresh(node.input[0]), clipped)

    def run(self) -> onnx.ModelProto:
        lowbit_inits = self.widen_initializers()
        for node in self.graph.node:
            if node.domain in QONNX_DOMAINS and node.op_type in ("Quant", "BipolarQuant"):
                self.quant(node)
            elif node.op_type == "QuantizeLinear" and self.quantize_linear(node, lowbit_inits):
                pass
            elif node.op_type == "DequantizeLinear" and self.dequantize_linear(node, lowbit_inits):
                pass
            else:
                self.nodes.append(node)
        # folding a QuantizeLinear of a constant may expose another (Clip of an integer constant stays)
        nodes, self.nodes = self.nodes, []
        for node in nodes:
            if not (node.op_type == "QuantizeLinear" and self.fold_constant_quantize(node)):
                self.nodes.append(node)
        for node in self.nodes:
            if node.op_type == "Clip":
                self.clip_constant(node)
        del self.graph.node[:]
        self.graph.node.extend(self.nodes)
        for opset in self.model.opset_import:
            if opset.domain in QONNX_DOMAINS:
                self.model.opset_import.remove(opset)
        return self.model


def is_lowbit(model: onnx.ModelProto) -> bool:
    """Whether ``normalize`` changes anything (a low-bit type, a QONNX node, a QuantizeLinear or a Clip
    of a constant)."""
    constants = {t.name for t in model.graph.initializer} | {o for n in model.graph.node if n.op_type == "Constant"
                                                             for o in n.output}
    return any(t.data_type in LOWBIT for t in model.graph.initializer) or any(
        n.domain in QONNX_DOMAINS or (n.op_type in ("QuantizeLinear", "Clip") and n.input[0] in constants) or (
            n.op_type == "QuantizeLinear" and any(a.name == "output_dtype" and a.i in LOWBIT for a in n.attribute))
        for n in model.graph.node)


def normalize(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` in QCDQ form (the model itself when it has no low-bit form)."""
    if not is_lowbit(model):
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return _Rewriter(copy).run()
