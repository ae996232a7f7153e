"""Accuracy through the QNN pipeline: a small CNN trained on scikit-learn's digits (numpy, plain SGD),
exported to ONNX, quantized by onnxruntime.quantization, compiled by us. Its int8 top-1 must stay
within 1 point of the float model's, and every prediction must equal onnxruntime's int8 one."""
from __future__ import annotations

import logging

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from tvm_integration.bench import int8_models
from tvm_integration.bench.models import reference_session
from tvm_integration.qnn.runtime.model import compile_model

datasets = pytest.importorskip("sklearn.datasets", reason="scikit-learn is not installed (pip install -e '.[test]')",
                              exc_type=ModuleNotFoundError)


def im2col(x, k=3, stride=1):
    """[N, C, H, W] padded by 1 -> [N, OH, OW, C*k*k] windows (c, ky, kx order, as OIHW weights)."""
    n, c, h, w = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    oh, ow = (h + 2 - k) // stride + 1, (w + 2 - k) // stride + 1
    cols = np.stack([xp[:, :, i:i + stride * oh:stride, j:j + stride * ow:stride] for i in range(k) for j in range(k)],
                    axis=2)                                               # N, C, k*k, OH, OW
    return cols.transpose(0, 3, 4, 1, 2).reshape(n, oh, ow, c * k * k)


def train(x, y, epochs=25, lr=0.05, seed=0):
    """conv3x3(1->8) relu, conv3x3/2(8->16) relu, fully connected 256->10; softmax cross-entropy."""
    rng = np.random.default_rng(seed)
    p = {"w1": rng.standard_normal((8, 9)) * np.sqrt(2 / 9), "b1": np.zeros(8),
         "w2": rng.standard_normal((16, 72)) * np.sqrt(2 / 72), "b2": np.zeros(16),
         "w3": rng.standard_normal((10, 256)) * np.sqrt(1 / 256), "b3": np.zeros(10)}
    for _ in range(epochs):
        for batch in np.array_split(rng.permutation(len(x)), len(x) // 32):
            xb, yb = x[batch], y[batch]
            c1 = im2col(xb)                                               # B,8,8,9
            a1 = np.maximum(c1 @ p["w1"].T + p["b1"], 0)                  # B,8,8,8
            c2 = im2col(a1.transpose(0, 3, 1, 2), stride=2)               # B,4,4,72
            a2 = np.maximum(c2 @ p["w2"].T + p["b2"], 0)                  # B,4,4,16
            f = a2.transpose(0, 3, 1, 2).reshape(len(xb), 256)            # NCHW flatten, as ONNX
            logits = f @ p["w3"].T + p["b3"]
            prob = np.exp(logits - logits.max(1, keepdims=True))
            prob /= prob.sum(1, keepdims=True)
            g = (prob - np.eye(10)[yb]) / len(xb)
            grads = {"w3": g.T @ f, "b3": g.sum(0)}
            g2 = (g @ p["w3"]).reshape(len(xb), 16, 4, 4).transpose(0, 2, 3, 1) * (a2 > 0)
            grads["w2"], grads["b2"] = g2.reshape(-1, 16).T @ c2.reshape(-1, 72), g2.sum((0, 1, 2))
            gc2 = (g2 @ p["w2"]).reshape(len(xb), 4, 4, 8, 3, 3)          # back to the stride-2 windows
            g1 = np.zeros((len(xb), 8, 10, 10))
            for i in range(3):
                for j in range(3):
                    g1[:, :, i:i + 8:2, j:j + 8:2] += gc2[:, :, :, :, i, j].transpose(0, 3, 1, 2)
            g1 = g1[:, :, 1:9, 1:9].transpose(0, 2, 3, 1) * (a1 > 0)
            grads["w1"], grads["b1"] = g1.reshape(-1, 8).T @ c1.reshape(-1, 9), g1.sum((0, 1, 2))
            for name in p:
                p[name] -= lr * grads[name]
    return p


def to_onnx(p) -> onnx.ModelProto:
    inits = [numpy_helper.from_array(p["w1"].reshape(8, 1, 3, 3).astype(np.float32), "w1"),
             numpy_helper.from_array(p["b1"].astype(np.float32), "b1"),
             numpy_helper.from_array(p["w2"].reshape(16, 8, 3, 3).astype(np.float32), "w2"),
             numpy_helper.from_array(p["b2"].astype(np.float32), "b2"),
             numpy_helper.from_array(p["w3"].astype(np.float32), "w3"),
             numpy_helper.from_array(p["b3"].astype(np.float32), "b3")]
    nodes = [helper.make_node("Conv", ["input", "w1", "b1"], ["c1"], pads=[1] * 4),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1] * 4, strides=[2, 2]),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("Flatten", ["r2"], ["f"]),
             helper.make_node("Gemm", ["f", "w3", "b3"], ["logits"], transB=1)]
    graph = helper.make_graph(nodes, "digits", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 1, 8, 8])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", int8_models.OPSET)])
    model.ir_version = int8_models.IR_VERSION
    return model


def test_digits_cnn_int8_keeps_accuracy_and_matches_onnxruntime(tmp_path):
    logging.getLogger("root").setLevel(logging.ERROR)
    digits = datasets.load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None]
    y = digits.target
    order = np.random.default_rng(1).permutation(len(x))
    train_idx, test_idx = order[:1400], order[1400:]
    float_model = to_onnx(train(x[train_idx], y[train_idx]))
    calibration = [{"input": x[i:i + 1]} for i in train_idx[:200]]
    int8_path = int8_models.quantize(float_model, tmp_path / "digits.onnx", data=calibration)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    fp32 = ort.InferenceSession(float_model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    int8 = reference_session(int8_path)      # exact: the default saturates vpmaddubsw without VNNI
    ours = compile_model(int8_path, threads=1)
    predicted = {"fp32": [], "onnxruntime_int8": [], "ours": []}
    for i in test_idx:
        feeds = {"input": x[i:i + 1]}
        predicted["fp32"].append(fp32.run(None, feeds)[0].argmax())
        expected = int8.run(None, feeds)[0]
        got = ours(feeds)["logits"]
        np.testing.assert_array_equal(got, expected)
        predicted["onnxruntime_int8"].append(expected.argmax())
        predicted["ours"].append(got.argmax())
    accuracy = {k: float(np.mean(np.array(v) == y[test_idx])) for k, v in predicted.items()}
    print(accuracy)
    assert accuracy["fp32"] > 0.9, accuracy                        # the model learned the task
    assert accuracy["ours"] >= accuracy["fp32"] - 0.01, accuracy
    assert predicted["ours"] == predicted["onnxruntime_int8"]
