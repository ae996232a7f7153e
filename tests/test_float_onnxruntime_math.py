"""Tanh and ReduceMean as onnxruntime's CPU kernels compute them (issues 31/32: BERT's pooler ends in
Tanh, SqueezeNet's head in ReduceMean, both after the last DequantizeLinear), bit for bit against
onnxruntime: MLAS's rational tanh (mlas_math.tanh) and Eigen's vectorized sum of each plane
(reduce_mean.mean_func)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

pytest.importorskip("onnxruntime")
pytestmark = pytest.mark.filterwarnings("ignore:.*has no quantized op")

from test_float_ops import assert_exact, float_model, functions


def test_tanh_exact_everywhere(tmp_path):
    """A dense sweep of [-10, 10] (past the clamp at 9), 2^(-k/4) toward 0 down to subnormals, the
    clamp edges and their neighbours, infinities, NaN and random values."""
    edges = np.array([9.0, -9.0, np.inf, -np.inf, np.nan, 0.0, -0.0, 1e-38, -1e-45, 3.4e38], np.float32)
    edges = np.concatenate([edges, np.nextafter(edges[:2], np.float32(0)), np.nextafter(edges[:2], edges[2:4])])
    tiny = np.float32(2.0) ** -np.arange(0, 149, 0.25, dtype=np.float32)
    x = np.concatenate([np.linspace(-10, 10, 60001, dtype=np.float32), tiny, -tiny, edges,
                        np.random.default_rng(6).standard_normal(4000).astype(np.float32) * 3])
    x = x.reshape(1, -1)
    path = float_model(tmp_path / "tanh.onnx", [helper.make_node("Tanh", ["x"], ["y"])], [("x", x.shape)])
    assert_exact(path, {"x": x})
    assert "qsynth_tanh" in functions(path)


def dequantized_mean_model(path, shape, axes, keepdims):
    """SqueezeNet's head: a uint8 tensor dequantized, then a float ReduceMean (onnxruntime allocates the
    dequantized tensor, so its planes sit where Eigen's alignment says)."""
    out_shape = [1 if a in axes else d for a, d in enumerate(shape)] if keepdims else \
        [d for a, d in enumerate(shape) if a not in axes]
    nodes = [helper.make_node("DequantizeLinear", ["x", "scale", "zero"], ["f"]),
             helper.make_node("ReduceMean", ["f"], ["y"], axes=list(axes), keepdims=keepdims)]
    graph = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.UINT8, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
                              [numpy_helper.from_array(np.array(0.0371, np.float32), "scale"),
                               numpy_helper.from_array(np.array(117, np.uint8), "zero")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


@pytest.mark.parametrize("shape,axes,keepdims", [((1, 10, 13, 13), (2, 3), 1), ((1, 7, 7, 7), (2, 3), 1),
                                                 ((1, 5, 6, 6), (2, 3), 1), ((1, 9, 1, 5), (2, 3), 1),
                                                 ((2, 6, 5, 3), (2, 3), 0), ((1, 4, 32, 32), (2, 3), 1),
                                                 ((3, 11), (1,), 1), ((3, 11), (0, 1), 0)],
                         ids=["13x13", "7x7", "6x6", "1x5", "batch_2", "32x32", "rows", "scalar"])
def test_reduce_mean_exact(tmp_path, shape, axes, keepdims):
    """Eigen's sum of each plane from its first 16-byte-aligned element (a plane of N elements at
    offset c * N: its head and tail vary with c), two 4-lane accumulators, then / N. Planes of 169, 49, 36,
    5, 15 and 1024 elements, rows of 11, and the whole tensor to a scalar."""
    x = np.random.default_rng(7).integers(0, 256, shape, dtype=np.uint8)
    path = dequantized_mean_model(tmp_path / "mean.onnx", shape, axes, keepdims)
    assert_exact(path, {"x": x})
    assert "qsynth_mean" in functions(path)
