"""Small low-bit CNNs built in code (onnx.helper) in the three forms qsynth imports, and the numpy
reference of their integer network: one spec, so the ONNX graph and the reference cannot drift apart.

A spec is a list of layers; each quantized layer is a conv (or dense) whose integer weights are
drawn in the declared weight range, a bias in the accumulator's scale, and an output quantized to
``bits`` (signed or not, zero point ``zp``), Relu or not. Scales are powers of two and weights
small, so the float computation onnxruntime and QONNX's executor do between DQ and Q is exact and
every runtime must agree bit for bit.

* ``qdq``: ONNX's INT4/UINT4/INT2/UINT2 tensors (opset 25);
* ``qcdq``: QuantizeLinear to int8/uint8 -> Clip -> DequantizeLinear, weights as integer constants
  under a Clip (as Brevitas exports them), one layer's weights as QuantizeLinear of floats;
* ``qonnx``: Quant nodes (weights: Quant of the float weights; bipolar weights: BipolarQuant; biases:
  32-bit Quant of the float bias, as Brevitas exports them).
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

LOWBIT_TYPES = {(4, True): TensorProto.INT4, (4, False): TensorProto.UINT4, (2, True): TensorProto.INT2,
                (2, False): TensorProto.UINT2, (8, True): TensorProto.INT8, (8, False): TensorProto.UINT8}
QONNX = "qonnx.custom_op.general"


def qrange(bits: int, signed: bool, narrow: bool = False) -> tuple[int, int]:
    if bits == 1 and signed:
        return -1, 1                                   # bipolar
    if signed:
        return -(1 << (bits - 1)) + int(narrow), (1 << (bits - 1)) - 1
    return 0, (1 << bits) - 1


def float_dense(n):
    return dict(op="float_dense", cout=n)


def conv(cout, k=3, stride=1, pad=1, wbits=2, wsigned=True, bipolar=False, bits=2, signed=False, zp=0, relu=True,
         narrow=False, per_channel=False):
    return dict(op="conv", cout=cout, k=k, stride=stride, pad=pad, wbits=wbits, wsigned=wsigned, bipolar=bipolar,
                bits=bits, signed=signed, zp=zp, relu=relu, narrow=narrow, per_channel=per_channel)


def dense(n, wbits=2, wsigned=True, bipolar=False, bits=2, signed=False, zp=0, relu=True, per_channel=False):
    return dict(op="dense", cout=n, wbits=wbits, wsigned=wsigned, bipolar=bipolar, bits=bits, signed=signed, zp=zp,
                relu=relu, narrow=False, per_channel=per_channel)


def make(spec, input_shape, form: str, seed: int = 0, input_bits: int = 8, input_signed: bool = False):
    """(onnx model, layers): ``layers`` holds the drawn integers the numpy reference runs."""
    rng = np.random.default_rng(seed)
    g = _Graph(form)
    x = g.quantize("x", 2.0 ** -4, 0, input_bits, input_signed, False)
    shape = list(input_shape)
    scale, layers = 2.0 ** -4, []
    zx = 0
    for i, layer in enumerate(spec):
        name = f"{layer['op']}{i}"
        if layer["op"] in ("maxpool", "flatten"):          # data movement: re-quantized with the same parameters
            bits, signed, zp, out_scale = layers[-1]["out"]
            if layer["op"] == "maxpool":
                y = g.node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2], name=name)
                shape = [shape[0], shape[1], shape[2] // 2, shape[3] // 2]
            else:
                y = g.node("Flatten", [x], name=name)
                shape = [shape[0], int(np.prod(shape[1:]))]
            x = g.quantize(y, out_scale, zp, bits, signed, False)
            layers.append(dict(layer, out=layers[-1]["out"]))
            continue
        if layer["op"] == "float_dense":                    # a float last layer: dyadic weights, exact sums
            w = (rng.integers(-8, 9, (shape[1], layer["cout"])) / 8).astype(np.float32)
            x = g.node("MatMul", [x, g.init(w)], name=name)
            shape = [shape[0], layer["cout"]]
            layers.append(dict(layer, w=w))
            continue
        cin = shape[1]
        wshape = (layer["cout"], cin, layer["k"], layer["k"]) if layer["op"] == "conv" else (cin, layer["cout"])
        lo, hi = qrange(layer["wbits"], layer["wsigned"], layer.get("narrow"))
        w = rng.choice([-1, 1], wshape) if layer["bipolar"] else rng.integers(lo, hi + 1, wshape)
        if layer.get("per_channel"):                       # weights (and so the bias) scaled per output channel
            w_scale = (2.0 ** -rng.integers(1, 4, layer["cout"])).astype(np.float32)
        else:
            w_scale = 2.0 ** -int(rng.integers(1, 4))
        bias = rng.integers(-8, 9, layer["cout"])
        out_scale = 2.0 ** -int(rng.integers(0, 3))
        wq = g.weight(w, w_scale, layer["wbits"], layer["wsigned"], layer["bipolar"], layer.get("narrow"), name)
        b = g.bias(bias, scale * w_scale, name)
        if layer["op"] == "conv":
            y = g.node("Conv", [x, wq, b], kernel_shape=[layer["k"]] * 2, strides=[layer["stride"]] * 2,
                       pads=[layer["pad"]] * 4, name=name)
            size = (shape[2] + 2 * layer["pad"] - layer["k"]) // layer["stride"] + 1
            shape = [shape[0], layer["cout"], size, size]
        else:
            y = g.node("Gemm", [x, wq, b], name=name)
            shape = [shape[0], layer["cout"]]
        if layer["relu"]:
            y = g.node("Relu", [y], name=f"{name}_relu")
        out = (layer["bits"], layer["signed"], layer["zp"], out_scale)
        x = g.quantize(y, out_scale, layer["zp"], layer["bits"], layer["signed"], layer.get("narrow"))
        layers.append(dict(layer, w=w, w_scale=w_scale, bias=bias, x_scale=scale, x_zp=zx, out=out))
        scale, zx = out_scale, layer["zp"]
    g.outputs.append(helper.make_tensor_value_info(x, TensorProto.FLOAT, shape))
    return g.model(input_shape), layers


class _Graph:
    def __init__(self, form: str):
        self.form, self.nodes, self.inits, self.outputs, self.count = form, [], [], [], 0

    def fresh(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}_{self.count}"

    def init(self, array, dtype=None) -> str:
        name = self.fresh("c")
        array = np.asarray(array)
        if dtype is None:
            self.inits.append(numpy_helper.from_array(array, name))
        else:
            self.inits.append(helper.make_tensor(name, dtype, list(array.shape), array.flatten().tolist()))
        return name

    def node(self, op: str, inputs, name: str = "", domain: str = "", **attrs) -> str:
        out = self.fresh(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], name=name or out, domain=domain, **attrs))
        return out

    def quantize(self, x: str, scale: float, zp: int, bits: int, signed: bool, narrow: bool) -> str:
        """x (float) -> quantized and dequantized (float), in the graph's form."""
        s = self.init(np.float32(scale))
        if self.form == "qonnx":
            return self.node("Quant", [x, s, self.init(np.float32(zp)), self.init(np.float32(bits))], domain=QONNX,
                             signed=int(signed), narrow=int(narrow), rounding_mode="ROUND")
        if self.form == "qdq" and not narrow:
            z = self.init(np.array(zp), LOWBIT_TYPES[(bits, signed)])
            return self.node("DequantizeLinear", [self.node("QuantizeLinear", [x, s, z]), s, z])
        container = TensorProto.INT8 if signed else TensorProto.UINT8
        z = self.init(np.array(zp), container)
        lo, hi = qrange(bits, signed, narrow)
        q = self.node("QuantizeLinear", [x, s, z])
        c = self.node("Clip", [q, self.init(np.array(lo), container), self.init(np.array(hi), container)])
        return self.node("DequantizeLinear", [c, s, z])

    def weight(self, w, scale, bits, signed, bipolar, narrow, name) -> str:
        """DQ(w) (Quant in QONNX); a per-channel ``scale`` [O] along the weight's output axis (0 for a
        conv's OIHW, 1 for a dense's [K, N]): a DequantizeLinear ``axis``, a broadcastable Quant scale."""
        axis = 0 if w.ndim == 4 else 1
        shape = [1] * w.ndim
        shape[axis] = -1
        per_channel = np.ndim(scale) == 1
        attrs = dict(axis=axis) if per_channel else {}
        zeros = np.zeros(np.shape(scale), np.int64)
        s = self.init(np.float32(scale))
        if self.form == "qonnx":
            scale = np.reshape(scale, shape) if per_channel else scale
            s = self.init(np.float32(scale))
            wf = self.init((w * scale).astype(np.float32))
            if bipolar:
                return self.node("BipolarQuant", [wf, s], domain=QONNX)
            return self.node("Quant", [wf, s, self.init(np.float32(0)), self.init(np.float32(bits))], domain=QONNX,
                             signed=int(signed), narrow=int(bool(narrow)), rounding_mode="ROUND")
        if self.form == "qdq" and (bits in (2, 4) or bipolar):
            ty = TensorProto.INT2 if bipolar else LOWBIT_TYPES[(bits, signed)]
            return self.node("DequantizeLinear", [self.init(w, ty), s, self.init(zeros, ty)], **attrs)
        container = (TensorProto.INT8, np.int8) if signed or bipolar else (TensorProto.UINT8, np.uint8)
        lo, hi = qrange(bits, signed, narrow) if not bipolar else (-1, 1)
        z = self.init(zeros.astype(container[1]))
        if self.form == "qcdq" and name.endswith("0"):       # the first layer: QuantizeLinear of floats
            wf = w * (np.reshape(scale, shape) if per_channel else scale)
            ints = self.node("QuantizeLinear", [self.init(wf.astype(np.float32)), s, z], **attrs)
        else:
            ints = self.init(w.astype(container[1]))
        if bits < 8 or bipolar:
            ints = self.node("Clip", [ints, self.init(np.array(lo, container[1])), self.init(np.array(hi, container[1]))])
        return self.node("DequantizeLinear", [ints, s, z], **attrs)

    def bias(self, bias, scale, name) -> str:
        if self.form == "qonnx":           # as Brevitas exports it: a 32-bit Quant of the float bias
            return self.node("Quant", [self.init((bias * scale).astype(np.float32)), self.init(np.float32(scale)),
                                       self.init(np.float32(0)), self.init(np.float32(32))], domain=QONNX,
                             signed=1, narrow=0, rounding_mode="ROUND")
        attrs = dict(axis=0) if np.ndim(scale) == 1 else {}
        return self.node("DequantizeLinear", [self.init(bias.astype(np.int32)), self.init(np.float32(scale)),
                                              self.init(np.zeros(np.shape(scale), np.int32))], **attrs)

    def model(self, input_shape) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, "lowbit", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                        list(input_shape))],
                                  self.outputs, self.inits)
        opsets = [helper.make_opsetid("", 25 if self.form == "qdq" else 13)]
        if self.form == "qonnx":
            opsets.append(helper.make_opsetid(QONNX, 1))
        model = helper.make_model(graph, opset_imports=opsets)
        model.ir_version = 11 if self.form == "qdq" else 8
        return model


def reference(layers, x: np.ndarray, input_bits: int = 8, input_signed: bool = False) -> np.ndarray:
    """The integer network in numpy: int64 accumulation of ``(x - zx)(w - 0)`` + bias, requantized by
    ``acc * (sx sw / sy)`` rounded half to even (exact: powers of two), clamped; returns the float output."""
    lo, hi = qrange(input_bits, input_signed)
    q = np.clip(np.round(x.astype(np.float32) / np.float32(2.0 ** -4)), lo, hi).astype(np.int64)
    scale, zp = 2.0 ** -4, 0
    for layer in layers:
        if layer["op"] == "float_dense":
            return ((q - zp) * scale).astype(np.float32) @ layer["w"]
        if layer["op"] == "maxpool":
            b, c, h, w = q.shape
            q = q[:, :, :h // 2 * 2, :w // 2 * 2].reshape(b, c, h // 2, 2, w // 2, 2).max(axis=(3, 5))
            continue
        if layer["op"] == "flatten":
            q = q.reshape(q.shape[0], -1)
            continue
        xc = q - layer["x_zp"]
        if layer["op"] == "conv":
            acc = conv_int(xc, layer["w"], layer["stride"], layer["pad"])
            acc = acc + layer["bias"][None, :, None, None]
        else:
            acc = xc @ layer["w"] + layer["bias"][None]
        bits, signed, zp, out_scale = layer["out"]
        lo, hi = qrange(bits, signed, layer.get("narrow"))
        if layer["relu"]:
            lo = max(lo, zp)
        w_scale = np.reshape(layer["w_scale"], (1, -1) + (1, 1) * (acc.ndim == 4))
        q = np.clip(np.round(acc * (layer["x_scale"] * w_scale / out_scale)) + zp, lo, hi).astype(np.int64)
        scale = out_scale
    return ((q - zp) * scale).astype(np.float32)


def conv_int(x: np.ndarray, w: np.ndarray, stride: int, pad: int) -> np.ndarray:
    """Integer NCHW conv2d, zero padding (x already has its zero point removed)."""
    b, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1
    out = np.zeros((b, o, oh, ow), np.int64)
    for i in range(kh):
        for j in range(kw):
            window = xp[:, :, i:i + stride * oh:stride, j:j + stride * ow:stride]
            out += np.einsum("bchw,oc->bohw", window, w[:, :, i, j])
    return out
