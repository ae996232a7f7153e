"""A small BERT-style encoder built with onnx.helper (transformers and torch are not installed), laid
out as torch exports BertModel: LayerNorm, Q/K/V MatMul + Add on [1, S, H], Reshape/Transpose to
heads, Q.K^T MatMul (K transposed to [1, h, d, S]), Div by sqrt(d), Softmax, attention.V MatMul,
Transpose/Reshape back, output projection, residual Add, LayerNorm, GELU (Erf) feed-forward."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def encoder(hidden: int = 64, heads: int = 2, seq: int = 16, layers: int = 1, ffn: int | None = None,
            seed: int = 0, embedding_norm: bool = True) -> onnx.ModelProto:
    """``embedding_norm=False``: the input goes straight into the first layer's projections (no float
    op before the first Softmax)."""
    rng = np.random.default_rng(seed)
    ffn = ffn or 4 * hidden
    d = hidden // heads
    nodes, inits = [], []

    def const(name, array):
        inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def node(op, inputs, name, **attrs):
        nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        return name

    def linear(x, k, n, name):
        w = const(name + ".w", (rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32))
        b = const(name + ".b", (0.1 * rng.standard_normal(n)).astype(np.float32))
        return node("Add", [node("MatMul", [x, w], name + ".mm"), b], name)

    def layer_norm(x, name):
        g = const(name + ".g", (1 + 0.1 * rng.standard_normal(hidden)).astype(np.float32))
        b = const(name + ".beta", (0.1 * rng.standard_normal(hidden)).astype(np.float32))
        return node("LayerNormalization", [x, g, b], name, axis=-1, epsilon=1e-12)

    heads_shape = const("heads_shape", np.array([1, seq, heads, d], np.int64))
    flat_shape = const("flat_shape", np.array([1, seq, hidden], np.int64))
    root = const("sqrt_d", np.array(np.sqrt(d), np.float32))
    half, one, sqrt2 = const("half", np.array(0.5, np.float32)), const("one", np.array(1.0, np.float32)), \
        const("sqrt2", np.array(np.sqrt(2), np.float32))
    x = layer_norm("input", "embeddings.ln") if embedding_norm else "input"
    for i in range(layers):
        p = f"l{i}"
        q = node("Transpose", [node("Reshape", [linear(x, hidden, hidden, p + ".q"), heads_shape], p + ".qr")],
                 p + ".qt", perm=[0, 2, 1, 3])
        k = node("Transpose", [node("Reshape", [linear(x, hidden, hidden, p + ".k"), heads_shape], p + ".kr")],
                 p + ".kt", perm=[0, 2, 3, 1])
        v = node("Transpose", [node("Reshape", [linear(x, hidden, hidden, p + ".v"), heads_shape], p + ".vr")],
                 p + ".vt", perm=[0, 2, 1, 3])
        scores = node("Div", [node("MatMul", [q, k], p + ".qk"), root], p + ".scaled")
        probs = node("Softmax", [scores], p + ".softmax", axis=-1)
        context = node("Reshape", [node("Transpose", [node("MatMul", [probs, v], p + ".av")], p + ".ct",
                                        perm=[0, 2, 1, 3]), flat_shape], p + ".context")
        x = layer_norm(node("Add", [linear(context, hidden, hidden, p + ".o"), x], p + ".res1"), p + ".ln1")
        h = linear(x, hidden, ffn, p + ".ff1")
        gelu = node("Mul", [node("Mul", [h, node("Add", [node("Erf", [node("Div", [h, sqrt2], p + ".g0")], p + ".g1"),
                                                        one], p + ".g2")], p + ".g3"), half], p + ".gelu")
        x = layer_norm(node("Add", [linear(gelu, ffn, hidden, p + ".ff2"), x], p + ".res2"), p + ".ln2")
    graph = helper.make_graph(nodes, "encoder", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, seq, hidden])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, seq, hidden])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def calibration(seq: int, hidden: int, count: int = 8, seed: int = 1) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"input": rng.standard_normal((1, seq, hidden)).astype(np.float32)} for _ in range(count)]
