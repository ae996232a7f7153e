"""Real architectures' structures, reduced (issue 31 item 2): float graphs written with onnx.helper
in the shape torch exports torchvision's definitions, quantized by onnxruntime's ``quantize_static``
(QDQ, u8 activations, s8 per-channel weights), compiled and compared bit for bit with onnxruntime.

* ShuffleNetV2: units that ``chunk`` the channels in two (an ONNX Split, so the branches read
  ``split[0]`` and ``split[1]``; or two Slices), a branch of 1x1 / depthwise 3x3 / 1x1 convolutions,
  Concat, and the channel shuffle (Reshape [1, 2, C/2, H, W] -> Transpose -> Reshape); downsampling
  units of two strided branches; ReduceMean over H and W, Gemm;
* DenseNet: dense layers BN-ReLU-Conv1x1-BN-ReLU-Conv3x3 whose output is concatenated to their
  growing input; transitions BN-ReLU-Conv1x1-AveragePool; a BatchNormalization that follows a Concat
  stays (nothing folds it): Relax's batch_norm returns a tuple that the graph indexes.

Both failed to compile with ``Var lv.. is not defined`` (the real ShuffleNetV2 and DenseNet-121 as
well): bind.py rebuilt each binding over the new function's variables but left a TupleGetItem (``lv[0]``,
a Split's output, batch_norm's result) pointing at the old function's variable.
"""
from __future__ import annotations

import logging

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from tvm_integration.bench import int8_models
from tvm_integration.bench.models import reference_session, random_inputs
from tvm_integration.qnn.runtime.model import compile_model

logging.getLogger("root").setLevel(logging.ERROR)      # quantize_static's pre-processing advice


class Graph(int8_models._Graph):
    def ints(self, values) -> str:
        name = self.name("shape")
        self.inits.append(numpy_helper.from_array(np.asarray(values, np.int64), name))
        return name

    def batch_norm(self, x: str, c: int) -> str:
        r = self.rng
        return self.node("BatchNormalization", [x, self.const(1 + 0.1 * r.standard_normal(c), "gamma"),
                                                self.const(0.1 * r.standard_normal(c), "beta"),
                                                self.const(0.1 * r.standard_normal(c), "mean"),
                                                self.const(1 + 0.1 * r.random(c), "var")])

    def shuffle(self, x: str, c: int, hw: int) -> str:
        """torchvision's channel_shuffle with 2 groups: view, transpose(1, 2), view."""
        y = self.node("Transpose", [self.node("Reshape", [x, self.ints([1, 2, c // 2, hw, hw])])], perm=[0, 2, 1, 3, 4])
        return self.node("Reshape", [y, self.ints([1, c, hw, hw])])

    def halves(self, x: str, c: int, split: str) -> tuple[str, str]:
        if split == "Split":                     # x.chunk(2, dim=1) as torch exports it
            a, b = self.name("split_a"), self.name("split_b")
            self.nodes.append(helper.make_node("Split", [x, self.ints([c // 2, c // 2])], [a, b], axis=1))
            return a, b
        return tuple(self.node("Slice", [x, self.ints([lo]), self.ints([hi]), self.ints([1])])
                     for lo, hi in ((0, c // 2), (c // 2, c)))


def shufflenet_v2(size: int = 32, stages=((16, 2), (32, 3)), split: str = "Split", seed: int = 5) -> onnx.ModelProto:
    """``stages``: (channels, units): a downsampling unit, then units on a half of the channels."""
    g = Graph(seed)
    x = g.node("MaxPool", [g.conv("input", 3, 8, 3, stride=2)], kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4)
    cin, hw = 8, size // 4
    for cout, units in stages:
        half = cout // 2
        left = g.conv(g.conv(x, cin, cin, 3, 2, groups=cin, act=None), cin, half, 1)
        right = g.conv(g.conv(g.conv(x, cin, half, 1), half, half, 3, 2, groups=half, act=None), half, half, 1)
        hw //= 2
        x = g.shuffle(g.node("Concat", [left, right], axis=1), cout, hw)
        for _ in range(units - 1):
            kept, branch = g.halves(x, cout, split)
            branch = g.conv(g.conv(g.conv(branch, half, half, 1), half, half, 3, 1, groups=half, act=None), half, half, 1)
            x = g.shuffle(g.node("Concat", [kept, branch], axis=1), cout, hw)
        cin = cout
    x = g.node("ReduceMean", [g.conv(x, cin, 64, 1)], axes=[2, 3], keepdims=0)
    return g.model([1, 3, size, size], g.gemm(x, 64, 10), [1, 10], "shufflenet_v2")


def densenet(size: int = 32, growth: int = 8, blocks=(2, 2), seed: int = 6) -> onnx.ModelProto:
    g = Graph(seed)
    x = g.node("Relu", [g.batch_norm(g.conv("input", 3, 16, 7, stride=2, act=None), 16)])
    x = g.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4)
    c = 16
    for i, layers in enumerate(blocks):
        for _ in range(layers):
            y = g.conv(g.node("Relu", [g.batch_norm(x, c)]), c, 4 * growth, 1, act=None)
            y = g.conv(g.node("Relu", [g.batch_norm(y, 4 * growth)]), 4 * growth, growth, 3, act=None)
            x, c = g.node("Concat", [x, y], axis=1), c + growth
        if i < len(blocks) - 1:                  # transition
            x = g.conv(g.node("Relu", [g.batch_norm(x, c)]), c, c // 2, 1, act=None)
            x, c = g.node("AveragePool", [x], kernel_shape=[2, 2], strides=[2, 2]), c // 2
    x = g.node("Flatten", [g.node("GlobalAveragePool", [g.node("Relu", [g.batch_norm(x, c)])])])
    return g.model([1, 3, size, size], g.gemm(x, c, 10), [1, 10], "densenet")


MODELS = {"shufflenet_v2": shufflenet_v2, "densenet": densenet}


@pytest.mark.parametrize("name", list(MODELS))
def test_architecture_compiles_bit_exact_with_onnxruntime(tmp_path, name):
    path = int8_models.quantize(MODELS[name](), tmp_path / f"{name}.onnx")
    model = compile_model(path, threads=1)
    session = reference_session(path)
    rng = np.random.default_rng(0)
    for _ in range(3):
        feeds = random_inputs(model.inputs, rng)
        expected = session.run(None, feeds)
        assert np.unique(expected[0]).size > 3                 # not a constant output
        for out, want in zip(model.outputs, expected):
            np.testing.assert_array_equal(model(feeds)[out], want)
