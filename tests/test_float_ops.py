"""The float ops of a quantized transformer (issue 32 item 4, tvm_integration/qnn/float_ops.py) against
onnxruntime's CPU kernels, each op a one-node model compiled through the whole pipeline
(``allow_float``): the float matmul of two activations, Softmax, Erf and GELU bit-exact."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

ort = pytest.importorskip("onnxruntime")
pytestmark = pytest.mark.filterwarnings("ignore:.*has no quantized op")

from tvm_integration import compile_model
from tvm_integration.bench.models import onnxruntime_session
from tvm_integration.qnn import float_ops
from tvm_integration.qnn.importer import load
from tvm_integration.qnn.model import lower


def float_model(path, nodes, inputs, constants=(), out_shape=None):
    """One float graph; ``out_shape`` default: the first input's."""
    out_shape = inputs[0][1] if out_shape is None else out_shape
    graph = helper.make_graph(nodes, "f", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
                              [numpy_helper.from_array(np.asarray(v, np.float32), n) for n, v in constants])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def assert_exact(path, feeds):
    model = compile_model(path, threads=1, allow_float=True)
    expected = onnxruntime_session(path, 1).run(None, feeds)[0]
    ours = model(feeds)["y"]
    assert ours.shape == expected.shape
    np.testing.assert_array_equal(ours, expected)


def functions(path) -> set[str]:
    return {g.name_hint.rstrip("0123456789") for g in lower(load(path, allow_float=True)).functions}


@pytest.mark.parametrize("a_shape,b_shape", [((1, 2, 16, 32), (1, 2, 32, 16)), ((1, 2, 16, 16), (1, 2, 16, 32)),
                                             ((2, 8, 300), (300, 24)), ((3, 5, 200), (1, 200, 128)),
                                             ((7, 40), (2, 40, 33))],
                         ids=["qk", "av", "k_blocks", "k_blocks_wide", "broadcast_odd"])
def test_float_matmul_exact(tmp_path, a_shape, b_shape):
    """MLAS's sgemm sums each output as one FMA chain per K block (its block depends on N:
    float_ops.stride_k); K of 300 and 200 cross blocks, 33 columns take no vector width."""
    rng = np.random.default_rng(0)
    path = float_model(tmp_path / "mm.onnx", [helper.make_node("MatMul", ["a", "b"], ["y"])],
                       [("a", a_shape), ("b", b_shape)],
                       out_shape=[*np.broadcast_shapes(a_shape[:-2], b_shape[:-2]), a_shape[-2], b_shape[-1]])
    assert_exact(path, {"a": rng.standard_normal(a_shape).astype(np.float32),
                        "b": rng.standard_normal(b_shape).astype(np.float32)})
    assert "qsynth_float_matmul" in functions(path) and "matmul" not in functions(path)


def test_stride_k_follows_n():
    assert [float_ops.stride_k(k, n) for k, n in ((64, 128), (128, 64), (300, 32), (700, 16), (1100, 200))] == \
        [64, 256, 512, 1024, 128]


@pytest.mark.parametrize("shape", [(1, 2, 16, 16), (2, 3, 50), (4, 128)], ids=["heads", "odd_row", "long_row"])
def test_softmax_exact(tmp_path, shape):
    """MLAS's softmax: exp by its polynomial, the AVX-512 kernel's lane sums, times 1 / sum; rows of
    16, of 50 (a partial vector) and 128; values spread wide enough that some exps underflow."""
    x = (np.random.default_rng(1).standard_normal(shape) * 12).astype(np.float32)
    path = float_model(tmp_path / "sm.onnx", [helper.make_node("Softmax", ["x"], ["y"], axis=-1)], [("x", shape)])
    assert_exact(path, {"x": x})
    assert "qsynth_softmax" in functions(path)


def test_erf_exact_everywhere(tmp_path):
    """MLAS's erf on a dense sweep of [-5, 5] (both polynomials, the split at 0.921875, the clamp) and
    random values."""
    x = np.concatenate([np.linspace(-5, 5, 40000, dtype=np.float32),
                        np.random.default_rng(2).standard_normal(24000).astype(np.float32)]).reshape(1, 64, 1000)
    path = float_model(tmp_path / "erf.onnx", [helper.make_node("Erf", ["x"], ["y"])], [("x", x.shape)])
    assert_exact(path, {"x": x})
    assert "qsynth_erf" in functions(path)


def test_gelu_as_onnxruntime_fuses_it(tmp_path):
    """torch's exact GELU, x * (erf(x / sqrt 2) + 1) * 0.5: onnxruntime fuses it into Gelu (erf of
    x * float32(1 / sqrt 2)); qsynth rewrites it the same way, so the two agree bit for bit where
    the graph as written would differ (x / sqrt 2 rounds differently from x * (1 / sqrt 2))."""
    shape = (1, 16, 256)
    nodes = [helper.make_node("Div", ["x", "sqrt2"], ["g0"]), helper.make_node("Erf", ["g0"], ["g1"]),
             helper.make_node("Add", ["g1", "one"], ["g2"]), helper.make_node("Mul", ["x", "g2"], ["g3"]),
             helper.make_node("Mul", ["g3", "half"], ["y"])]
    path = float_model(tmp_path / "gelu.onnx", nodes, [("x", shape)],
                       [("sqrt2", np.sqrt(2)), ("one", 1.0), ("half", 0.5)])
    x = (np.random.default_rng(3).standard_normal(shape) * 3).astype(np.float32)
    assert_exact(path, {"x": x})
    assert "qsynth_gelu" in functions(path)
    divided = (x / np.float32(np.sqrt(2))).astype(np.float32)
    assert (divided != (x * np.float32(0.70710678118654752440)).astype(np.float32)).any()


@pytest.mark.parametrize("kind", ["ReduceMax", "ReduceMin"])
def test_whole_tensor_reduction(tmp_path, kind):
    """DynamicQuantizeLinear's range: the max / min of every element, vectorized (exact in any order)."""
    shape = (1, 37, 70)
    x = np.random.default_rng(4).standard_normal(shape).astype(np.float32)
    path = float_model(tmp_path / "r.onnx", [helper.make_node(kind, ["x"], ["y"], keepdims=0)], [("x", shape)],
                       out_shape=[])
    assert_exact(path, {"x": x})
    assert f"qsynth_{kind[6:].lower()}" in functions(path)


@pytest.mark.parametrize("shape,spread", [((1, 16, 64), (3.0, 0.5)), ((2, 3, 40), (0.01, 100.0)), ((37, 768), (50.0, -3.0))],
                         ids=["bert_small", "offset", "wide"])
def test_layer_norm_exact(tmp_path, shape, spread):
    """onnxruntime 1.32's LayerNormalization kernel: the mean summed in double lanes, the variance a
    second float pass of FMA lane sums over x - mean (layer_norm.py); a large offset against a small
    spread is where a one-pass variance would cancel."""
    rng = np.random.default_rng(5)
    n = shape[-1]
    path = float_model(tmp_path / "ln.onnx", [helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], axis=-1,
                                                               epsilon=1e-12)], [("x", shape)],
                       [("g", 1 + 0.1 * rng.standard_normal(n)), ("b", 0.1 * rng.standard_normal(n))])
    assert_exact(path, {"x": (rng.standard_normal(shape) * spread[0] + spread[1]).astype(np.float32)})
    assert "qsynth_layer_norm" in functions(path)


def test_add_layer_norm_as_skip_layer_norm(tmp_path):
    """Add of two [1, S, H] tensors into a LayerNormalization: onnxruntime fuses the pair into
    SkipLayerNormalization (Welford's running mean and variance in float, no FMA), and so does qsynth."""
    shape, rng = (1, 16, 64), np.random.default_rng(6)
    nodes = [helper.make_node("Add", ["a", "b"], ["s"]),
             helper.make_node("LayerNormalization", ["s", "g", "beta"], ["y"], axis=-1, epsilon=1e-12)]
    path = float_model(tmp_path / "skip.onnx", nodes, [("a", shape), ("b", shape)],
                       [("g", 1 + 0.1 * rng.standard_normal(64)), ("beta", 0.1 * rng.standard_normal(64))])
    assert_exact(path, {"a": (rng.standard_normal(shape) * 3 + 0.5).astype(np.float32),
                        "b": rng.standard_normal(shape).astype(np.float32)})
    assert "qsynth_skip_layer_norm" in functions(path) and "qsynth_layer_norm" not in functions(path)
