"""Small BERT- and ViT-style encoders built with onnx.helper (transformers and torch are not installed),
laid out as torch exports BertModel: LayerNorm, Q/K/V MatMul + Add on [1, S, H], Reshape/Transpose to
heads, Q.K^T MatMul (K transposed to [1, h, d, S]), Div by sqrt(d), Softmax, attention.V MatMul,
Transpose/Reshape back, output projection, residual Add, LayerNorm, GELU (Erf) feed-forward. Used by
the tests and by scripts/bench_transformers.py."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


class _Graph:
    """The nodes and initializers of one encoder, its weights drawn in order from one generator."""

    def __init__(self, hidden: int, heads: int, seq: int, seed: int):
        self.rng = np.random.default_rng(seed)
        self.hidden, self.nodes, self.inits = hidden, [], []
        d = hidden // heads
        self.heads_shape = self.const("heads_shape", np.array([1, seq, heads, d], np.int64))
        self.flat_shape = self.const("flat_shape", np.array([1, seq, hidden], np.int64))
        self.root = self.const("sqrt_d", np.array(np.sqrt(d), np.float32))
        self.half, self.one, self.sqrt2 = (self.const(n, np.array(v, np.float32))
                                           for n, v in (("half", 0.5), ("one", 1.0), ("sqrt2", np.sqrt(2))))

    def const(self, name, array):
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def node(self, op, inputs, name, **attrs):
        self.nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        return name

    def linear(self, x, k, n, name):
        w = self.const(name + ".w", (self.rng.standard_normal((k, n)) / np.sqrt(k)).astype(np.float32))
        b = self.const(name + ".b", (0.1 * self.rng.standard_normal(n)).astype(np.float32))
        return self.node("Add", [self.node("MatMul", [x, w], name + ".mm"), b], name)

    def layer_norm(self, x, name):
        g = self.const(name + ".g", (1 + 0.1 * self.rng.standard_normal(self.hidden)).astype(np.float32))
        b = self.const(name + ".beta", (0.1 * self.rng.standard_normal(self.hidden)).astype(np.float32))
        return self.node("LayerNormalization", [x, g, b], name, axis=-1, epsilon=1e-12)

    def heads(self, x, name, perm):
        return self.node("Transpose", [self.node("Reshape", [x, self.heads_shape], name + "r")], name + "t", perm=perm)

    def layer(self, x, p, ffn, scores_bias=None):
        """One post-norm encoder layer on ``x`` [1, S, H]; ``scores_bias``: added to Q.K^T / sqrt(d)."""
        hidden, node = self.hidden, self.node
        q = self.heads(self.linear(x, hidden, hidden, p + ".q"), p + ".q", [0, 2, 1, 3])
        k = self.heads(self.linear(x, hidden, hidden, p + ".k"), p + ".k", [0, 2, 3, 1])
        v = self.heads(self.linear(x, hidden, hidden, p + ".v"), p + ".v", [0, 2, 1, 3])
        scores = node("Div", [node("MatMul", [q, k], p + ".qk"), self.root], p + ".scaled")
        if scores_bias is not None:
            scores = node("Add", [scores, scores_bias], p + ".masked")
        probs = node("Softmax", [scores], p + ".softmax", axis=-1)
        context = node("Reshape", [node("Transpose", [node("MatMul", [probs, v], p + ".av")], p + ".ct",
                                        perm=[0, 2, 1, 3]), self.flat_shape], p + ".context")
        x = self.layer_norm(node("Add", [self.linear(context, hidden, hidden, p + ".o"), x], p + ".res1"), p + ".ln1")
        h = self.linear(x, hidden, ffn, p + ".ff1")
        erf = node("Erf", [node("Div", [h, self.sqrt2], p + ".g0")], p + ".g1")
        gelu = node("Mul", [node("Mul", [h, node("Add", [erf, self.one], p + ".g2")], p + ".g3"), self.half],
                    p + ".gelu")
        return self.layer_norm(node("Add", [self.linear(gelu, ffn, hidden, p + ".ff2"), x], p + ".res2"), p + ".ln2")

    def model(self, inputs, output, shape) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, "encoder", inputs,
                                  [helper.make_tensor_value_info(output, TensorProto.FLOAT, shape)], self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        onnx.checker.check_model(model)
        return model


def encoder(hidden: int = 64, heads: int = 2, seq: int = 16, layers: int = 1, ffn: int | None = None,
            seed: int = 0, embedding_norm: bool = True, ids: int | None = None) -> onnx.ModelProto:
    """``embedding_norm=False``: the input goes straight into the first layer's projections (no float
    op before the first Softmax). ``ids=V``: BERT's int64 inputs instead of the float one: input_ids
    [1, S] (a Gather from a V x H embedding table) and attention_mask [1, S] (0 masks a key out: -10000
    added to its scores)."""
    g = _Graph(hidden, heads, seq, seed)
    if ids is None:
        x, inputs = "input", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, seq, hidden])]
    else:
        table = g.const("word_embeddings", (0.5 * g.rng.standard_normal((ids, hidden))).astype(np.float32))
        x = g.node("Gather", [table, "input_ids"], "embeddings")
        mask = g.node("Cast", ["attention_mask"], "mask_f", to=TensorProto.FLOAT)
        bias = g.node("Mul", [g.node("Sub", [g.const("mask_one", np.array(1, np.float32)), mask], "mask_not"),
                              g.const("mask_min", np.array(-10000, np.float32))], "mask_bias")
        bias = g.node("Unsqueeze", [bias, g.const("mask_axes", np.array([1, 2], np.int64))], "scores_bias")
        inputs = [helper.make_tensor_value_info(n, TensorProto.INT64, [1, seq]) for n in ("input_ids", "attention_mask")]
    x = g.layer_norm(x, "embeddings.ln") if embedding_norm else x
    for i in range(layers):
        x = g.layer(x, f"l{i}", ffn or 4 * hidden, None if ids is None else "scores_bias")
    return g.model(inputs, x, [1, seq, hidden])


def vit(image: int = 224, patch: int = 16, hidden: int = 384, heads: int = 6, layers: int = 6, embed: str = "conv",
        seed: int = 0) -> onnx.ModelProto:
    """A ViT-style image encoder: non-overlapping patches embedded by a strided Conv (``embed="conv"``,
    as torch's ViT) or cut by Reshape/Transpose and embedded by a MatMul (``"matmul"``), plus a learned
    position embedding, then the encoder layers; output the tokens [1, (image / patch)^2, H]."""
    grid = image // patch
    seq = grid * grid
    g = _Graph(hidden, heads, seq, seed)
    if embed == "conv":
        fan_in = 3 * patch * patch
        w = g.const("patch.w", (g.rng.standard_normal((hidden, 3, patch, patch)) / np.sqrt(fan_in)).astype(np.float32))
        b = g.const("patch.b", (0.1 * g.rng.standard_normal(hidden)).astype(np.float32))
        x = g.node("Conv", ["image", w, b], "patch", kernel_shape=[patch, patch], strides=[patch, patch])
        x = g.node("Reshape", [x, g.const("patch_shape", np.array([1, hidden, seq], np.int64))], "patch_flat")
        x = g.node("Transpose", [x], "tokens", perm=[0, 2, 1])
    elif embed == "matmul":
        x = g.node("Reshape", ["image", g.const("grid", np.array([1, 3, grid, patch, grid, patch], np.int64))], "cut")
        x = g.node("Transpose", [x], "patches6", perm=[0, 2, 4, 1, 3, 5])
        x = g.node("Reshape", [x, g.const("rows", np.array([1, seq, 3 * patch * patch], np.int64))], "patches")
        x = g.linear(x, 3 * patch * patch, hidden, "patch")
    else:
        raise ValueError(f"embed is conv or matmul, not {embed!r}")
    position = g.const("position", (0.02 * g.rng.standard_normal((1, seq, hidden))).astype(np.float32))
    x = g.layer_norm(g.node("Add", [x, position], "embedded"), "embeddings.ln")
    for i in range(layers):
        x = g.layer(x, f"l{i}", 4 * hidden)
    return g.model([helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, image, image])], x,
                   [1, seq, hidden])


def calibration(seq: int, hidden: int, count: int = 8, seed: int = 1) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"input": rng.standard_normal((1, seq, hidden)).astype(np.float32)} for _ in range(count)]
