"""Test and benchmark models, built in code (no model hub): float ONNX graphs written with
onnx.helper (random He-initialised weights, fixed seed), quantized by onnxruntime.quantization as a
user would: ``quantize_static`` on random calibration inputs, QDQ or QOperator format.

* ``resnet``: ResNet-18's layout (7x7/2 stem, 3x3/2 max pool, four stages of two basic blocks with
  1x1/2 downsampling, residual adds, global average pool, fully connected); ``widths`` and ``size``
  shrink it for tests;
* ``mobilenet_v2``: inverted residual blocks (1x1 expand + ReLU6, 3x3 depthwise + ReLU6, 1x1
  linear project, residual add where the shape allows);
* ``mobilenet_v3``: MobileNetV3-Small's blocks (HardSwish, squeeze-and-excitation: a global pool,
  two 1x1 convolutions, HardSigmoid, a broadcast Mul);
* ``silu_fpn``: a YOLO-style neck: SiLU (``x * sigmoid(x)``), a strided branch upsampled by nearest
  Resize and concatenated with the full-resolution one;
* ``mlp``: MatMul + Add + Relu layers and a Gemm head.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 9          # onnxruntime 1.31 reads IR version <= 13; onnx 1.23 writes 14 by default


class _Graph:
    def __init__(self, seed: int):
        self.nodes, self.inits, self.rng, self.count = [], [], np.random.default_rng(seed), 0

    def name(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def const(self, array: np.ndarray, prefix: str) -> str:
        name = self.name(prefix)
        self.inits.append(numpy_helper.from_array(array.astype(np.float32), name))
        return name

    def node(self, op: str, inputs: list[str], **attrs) -> str:
        out = self.name(op.lower() + "_")
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def conv(self, x: str, cin: int, cout: int, k: int, stride: int = 1, groups: int = 1, act: str | None = "relu"):
        fan_in = cin // groups * k * k
        w = self.rng.standard_normal((cout, cin // groups, k, k)) * np.sqrt(2.0 / fan_in)
        b = self.rng.standard_normal(cout) * 0.05
        y = self.node("Conv", [x, self.const(w, "w"), self.const(b, "b")], kernel_shape=[k, k], strides=[stride] * 2,
                      pads=[k // 2] * 4, group=groups)
        return self.activation(y, act)

    def activation(self, x: str, act: str | None) -> str:
        if act == "relu":
            return self.node("Relu", [x])
        if act == "hardswish":
            return self.node("HardSwish", [x])
        if act == "silu":
            return self.node("Mul", [x, self.node("Sigmoid", [x])])
        if act == "relu6":
            return self.node("Clip", [x, self.const(np.array(0.0), "lo"), self.const(np.array(6.0), "hi")])
        return x

    def gemm(self, x: str, cin: int, cout: int) -> str:
        w = self.rng.standard_normal((cout, cin)) * np.sqrt(1.0 / cin)
        return self.node("Gemm", [x, self.const(w, "fc"), self.const(np.zeros(cout), "fcb")], transB=1)

    def model(self, x_shape, y: str, y_shape, name: str) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, [helper.make_tensor_value_info("input", TensorProto.FLOAT, x_shape)],
                                  [helper.make_tensor_value_info(y, TensorProto.FLOAT, y_shape)], self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
        model.ir_version = IR_VERSION
        onnx.checker.check_model(model)
        return model


def resnet(size: int = 224, widths=(64, 128, 256, 512), classes: int = 1000, seed: int = 18) -> onnx.ModelProto:
    g = _Graph(seed)
    x = g.conv("input", 3, widths[0], 7, stride=2)
    x = g.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = widths[0]
    for stage, width in enumerate(widths):
        for block in range(2):
            stride = 2 if stage > 0 and block == 0 else 1
            y = g.conv(x, cin, width, 3, stride)
            y = g.conv(y, width, width, 3, 1, act=None)
            shortcut = x if stride == 1 and cin == width else g.conv(x, cin, width, 1, stride, act=None)
            x = g.node("Relu", [g.node("Add", [y, shortcut])])
            cin = width
    x = g.node("Flatten", [g.node("GlobalAveragePool", [x])])
    return g.model([1, 3, size, size], g.gemm(x, cin, classes), [1, classes], "resnet")


def mobilenet_v2(size: int = 224, blocks=((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                                          (6, 160, 3, 2), (6, 320, 1, 1)),
                 stem: int = 32, head: int = 1280, classes: int = 1000, seed: int = 2) -> onnx.ModelProto:
    """``blocks``: (expansion t, channels c, repeats n, first stride s), as in the MobileNetV2 paper."""
    g = _Graph(seed)
    x, cin = g.conv("input", 3, stem, 3, stride=2, act="relu6"), stem
    for t, c, n, s in blocks:
        for i in range(n):
            stride, hidden = (s if i == 0 else 1), cin * t
            y = g.conv(x, cin, hidden, 1, act="relu6") if t != 1 else x
            y = g.conv(y, hidden, hidden, 3, stride, groups=hidden, act="relu6")
            y = g.conv(y, hidden, c, 1, act=None)
            x, cin = (g.node("Add", [x, y]) if stride == 1 and cin == c else y), c
    x = g.conv(x, cin, head, 1, act="relu6")
    x = g.node("Flatten", [g.node("GlobalAveragePool", [x])])
    return g.model([1, 3, size, size], g.gemm(x, head, classes), [1, classes], "mobilenet_v2")


def mobilenet_v3(size: int = 224, blocks=((3, 16, 16, True, "relu", 2), (3, 72, 24, False, "relu", 2),
                                          (3, 88, 24, False, "relu", 1), (5, 96, 40, True, "hardswish", 2),
                                          (5, 240, 40, True, "hardswish", 1), (5, 120, 48, True, "hardswish", 1),
                                          (5, 288, 96, True, "hardswish", 2), (5, 576, 96, True, "hardswish", 1)),
                 stem: int = 16, head: int = 576, classes: int = 1000, seed: int = 3) -> onnx.ModelProto:
    """``blocks``: (kernel, expanded channels, channels, squeeze-and-excite, activation, stride), as in
    the MobileNetV3 paper's Small table (its first eight rows)."""
    g = _Graph(seed)
    x, cin = g.conv("input", 3, stem, 3, stride=2, act="hardswish"), stem
    for k, hidden, c, se, act, stride in blocks:
        y = g.conv(x, cin, hidden, 1, act=act) if hidden != cin else x
        y = g.conv(y, hidden, hidden, k, stride, groups=hidden, act=act)
        if se:
            squeeze = max(8, hidden // 4)
            p = g.conv(g.node("GlobalAveragePool", [y]), hidden, squeeze, 1, act="relu")
            p = g.node("HardSigmoid", [g.conv(p, squeeze, hidden, 1, act=None)], alpha=1 / 6, beta=0.5)
            y = g.node("Mul", [y, p])
        y = g.conv(y, hidden, c, 1, act=None)
        x, cin = (g.node("Add", [x, y]) if stride == 1 and cin == c else y), c
    x = g.conv(x, cin, head, 1, act="hardswish")
    x = g.node("Flatten", [g.node("GlobalAveragePool", [x])])
    return g.model([1, 3, size, size], g.gemm(x, head, classes), [1, classes], "mobilenet_v3")


def silu_fpn(size: int = 224, width: int = 32, classes: int = 1000, seed: int = 4) -> onnx.ModelProto:
    g = _Graph(seed)
    x = g.conv(g.conv("input", 3, width, 3, stride=2, act="silu"), width, width, 3, act="silu")
    coarse = g.conv(g.conv(x, width, 2 * width, 3, stride=2, act="silu"), 2 * width, width // 2, 1, act="silu")
    up = g.node("Resize", [coarse, "", g.const(np.array([1, 1, 2, 2]), "up")], mode="nearest")
    x = g.conv(g.node("Concat", [x, up], axis=1), width + width // 2, width, 3, act="silu")
    x = g.node("Flatten", [g.node("GlobalAveragePool", [x])])
    return g.model([1, 3, size, size], g.gemm(x, width, classes), [1, classes], "silu_fpn")


def mlp(features: int = 64, hidden=(128, 64), classes: int = 10, batch: int = 4, seed: int = 7) -> onnx.ModelProto:
    g = _Graph(seed)
    x, cin = "input", features
    for width in hidden:
        w = g.rng.standard_normal((cin, width)) * np.sqrt(2.0 / cin)
        x = g.node("Relu", [g.node("Add", [g.node("MatMul", [x, g.const(w, "mm")]),
                                           g.const(g.rng.standard_normal(width) * 0.05, "mmb")])])
        cin = width
    return g.model([batch, features], g.gemm(x, cin, classes), [batch, classes], "mlp")


def calibration(model: onnx.ModelProto, samples: int = 8, seed: int = 0) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    return [{"input": rng.standard_normal(shape).astype(np.float32)} for _ in range(samples)]


def quantize(float_model: onnx.ModelProto, path: str | Path, fmt: str = "qdq", per_channel: bool = True,
             activations: str = "u8", weights: str = "s8", reduce_range: bool = False,
             data: list[dict[str, np.ndarray]] | None = None) -> Path:
    """Write ``float_model`` quantized by onnxruntime's ``quantize_static`` to ``path``."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    types = {"u8": QuantType.QUInt8, "s8": QuantType.QInt8}
    formats = {"qdq": QuantFormat.QDQ, "qoperator": QuantFormat.QOperator}

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.feeds = iter(data if data is not None else calibration(float_model))

        def get_next(self):
            return next(self.feeds, None)

    path = Path(path)
    source = path.with_suffix(".float.onnx")
    onnx.save(float_model, str(source))
    try:
        quantize_static(str(source), str(path), Reader(), quant_format=formats[fmt], per_channel=per_channel,
                        activation_type=types[activations], weight_type=types[weights], reduce_range=reduce_range)
    finally:
        source.unlink()
    return path


BUILT_IN = {"resnet18": resnet, "mobilenet_v2": mobilenet_v2, "mobilenet_v3": mobilenet_v3, "silu_fpn": silu_fpn}


def write_pair(name: str, directory: str | Path) -> tuple[Path, Path]:
    """``NAME.int8.onnx`` (QDQ u8/s8 per-channel) and its float original ``NAME.fp32.onnx`` in
    ``directory``, for a model of BUILT_IN."""
    if name not in BUILT_IN:
        raise ValueError(f"unknown model {name!r}; built in: {', '.join(BUILT_IN)}")
    directory = Path(directory)
    float_model = BUILT_IN[name]()
    fp32 = directory / f"{name}.fp32.onnx"
    onnx.save(float_model, str(fp32))
    return quantize(float_model, directory / f"{name}.int8.onnx"), fp32
