"""Quantized transformer encoders (issue 32) against onnxruntime: MatMuls of any rank with constant
weights on the int8 dense, activation x activation MatMuls (Q.K^T, attention.V) on the batched
operator (ops/batch_matmul.py), both bit-exact with onnxruntime's QLinearMatMul; whole encoders
quantized static and dynamic, bit-exact (QLinearSoftmax alone: test_qlinear_softmax.py)."""
from __future__ import annotations

import logging

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from tvm import tirx

from transformer_models import calibration, encoder
from tvm_integration import compile_model
from tvm_integration.bench import int8_models
from tvm_integration.bench.models import reference_session
from tvm_integration.qnn.onnx.importer import load
from tvm_integration.qnn.runtime.model import lower

logging.getLogger("root").setLevel(logging.ERROR)      # quantize_static's pre-processing advice
RANGES = {"uint8": (0, 255), "int8": (-128, 127)}
TYPES = {"uint8": TensorProto.UINT8, "int8": TensorProto.INT8}


def qlinear_matmul(path, a_shape, a_dtype, b_shape, b_dtype, params, b_constant=None):
    """One QLinearMatMul node (onnxruntime's integer kernel: MLAS's gemm and MlasRequantizeOutput);
    ``params``: (sa, za, sb, zb, sy, zy, y dtype); B a graph input, or the constant ``b_constant``."""
    sa, za, sb, zb, sy, zy, y_dtype = params
    inits = [numpy_helper.from_array(np.array(v, dtype), n) for v, dtype, n in (
        (sa, np.float32, "sa"), (za, a_dtype, "za"), (sb, np.float32, "sb"), (zb, b_dtype, "zb"), (sy, np.float32, "sy"),
        (zy, y_dtype, "zy"))]
    inputs = [helper.make_tensor_value_info("a", TYPES[a_dtype], a_shape)]
    if b_constant is None:
        inputs.append(helper.make_tensor_value_info("b", TYPES[b_dtype], b_shape))
    else:
        inits.append(numpy_helper.from_array(b_constant, "b"))
    out_shape = list(np.broadcast_shapes(tuple(a_shape[:-2]), tuple(b_shape[:-2]))) + [a_shape[-2], b_shape[-1]]
    node = helper.make_node("QLinearMatMul", ["a", "sa", "za", "b", "sb", "zb", "sy", "zy"], ["y"])
    graph = helper.make_graph([node], "qmm", inputs, [helper.make_tensor_value_info("y", TYPES[y_dtype], out_shape)],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def near(rng, zero_point, dtype, shape, spread):
    """Values within ``spread`` of the zero point: products small enough that the result is not
    saturated and rounding ties are frequent (the scales below make the multiplier a power of two)."""
    lo, hi = RANGES[dtype]
    return np.clip(zero_point + rng.integers(-spread, spread + 1, shape), lo, hi).astype(dtype)


def assert_exact(path, feeds_of, runs=3):
    model = compile_model(path, threads=1)
    session = reference_session(path)
    rng = np.random.default_rng(0)
    for _ in range(runs):
        feeds = feeds_of(rng)
        np.testing.assert_array_equal(model(feeds)["y"], session.run(None, feeds)[0])
    return model


HEADS = ((1, 2, 16, 32), (1, 2, 32, 16))                  # Q.K^T per head
# (A type, B type, A shape, B shape): each signedness pair per head; broadcasting as numpy's matmul
CASES = [("uint8", "int8", *HEADS), ("int8", "int8", *HEADS), ("uint8", "uint8", *HEADS),
         ("uint8", "uint8", (2, 3, 5, 24), (3, 24, 7)),     # B broadcast over the leading batch axis
         ("int8", "int8", (3, 9, 40), (1, 40, 6)),          # B's batch axis of 1 repeated
         ("uint8", "int8", (9, 20), (2, 20, 11))]           # A 2-D, broadcast


@pytest.mark.parametrize("a_dtype,b_dtype,a_shape,b_shape", CASES,
                         ids=["u8s8", "s8s8", "u8u8", "broadcast", "ones", "a2d"])
def test_activation_matmul_exact(tmp_path, a_dtype, b_dtype, a_shape, b_shape):
    """Both operands at run time, zero points on both sides (row and column sums): every output equal
    to onnxruntime's, ties included (multiplier 1/16: every accumulator = 8 mod 16 is a tie)."""
    za, zb = (131 if a_dtype == "uint8" else -7), (118 if b_dtype == "uint8" else 5)
    path = qlinear_matmul(tmp_path / "m.onnx", a_shape, a_dtype, b_shape, b_dtype,      # onnxruntime: y typed as a
                          (1 / 64, za, 1 / 64, zb, 1 / 16, 128 if a_dtype == "uint8" else 0, a_dtype))
    assert_exact(path, lambda rng: {"a": near(rng, za, a_dtype, a_shape, 12),
                                    "b": near(rng, zb, b_dtype, b_shape, 12)})
    rng = np.random.default_rng(0)
    a, b = near(rng, za, a_dtype, a_shape, 12), near(rng, zb, b_dtype, b_shape, 12)
    acc = np.matmul(a.astype(np.int64) - za, b.astype(np.int64) - zb)
    ties = int((acc % 16 == 8).sum())
    assert ties > 0
    assert "qsynth_batch_matmul" in model_functions(path)


def test_activation_matmul_saturates_and_signed_output(tmp_path):
    """Full-range operands (the output saturates at both ends), s8 x s8 with an int8 output."""
    shape_a, shape_b = (1, 4, 24, 64), (1, 4, 64, 24)
    path = qlinear_matmul(tmp_path / "m.onnx", shape_a, "int8", shape_b, "int8",
                          (0.02, 100, 0.01, -3, 0.05, -10, "int8"))
    assert_exact(path, lambda rng: {"a": rng.integers(-128, 128, shape_a).astype(np.int8),
                                    "b": rng.integers(-128, 128, shape_b).astype(np.int8)})


def model_functions(path) -> set[str]:
    return functions_of(lower(load(path)))


def functions_of(mod) -> set[str]:
    """The names of a lowered model's functions, without TVM's numbering."""
    return {g.name_hint.rstrip("0123456789") for g, f in mod.functions.items() if isinstance(f, tirx.PrimFunc)}


@pytest.mark.parametrize("a_shape,a_dtype", [((1, 16, 48), "uint8"), ((2, 3, 10, 48), "int8")], ids=["3d_u8", "4d_s8"])
def test_constant_weight_matmul_any_rank_on_the_dense(tmp_path, a_shape, a_dtype):
    """A [..., M, K] activation by a constant [K, N]: the int8 dense over the flattened rows, exact."""
    rng = np.random.default_rng(1)
    w = rng.integers(-128, 128, (48, 40)).astype(np.int8)
    za = 3 if a_dtype == "int8" else 128
    path = qlinear_matmul(tmp_path / "m.onnx", a_shape, a_dtype, w.shape, "int8",
                          (1 / 64, za, 1 / 64, 0, 1 / 16, 128 if a_dtype == "uint8" else 0, a_dtype), b_constant=w)
    assert_exact(path, lambda r: {"a": near(r, za, a_dtype, a_shape, 6)})
    rewritten = lower(load(path), stage="rewrite")
    assert "relax.matmul" not in str(rewritten["main"]) and "qnn_dense" in str(rewritten["main"])
    assert "qsynth_dense" in model_functions(path)


def quantized_tensors(path, out_path):
    """The QDQ model at ``path`` with every activation QuantizeLinear's output added as an output:
    (its path, {tensor: the op it quantizes})."""
    model = onnx.load(str(path))
    inferred = {v.name: v for v in onnx.shape_inference.infer_shapes(model).graph.value_info}
    producer = {n.output[0]: n for n in model.graph.node}
    constants = {i.name for i in model.graph.initializer}
    names = {}
    for n in model.graph.node:
        if n.op_type == "QuantizeLinear" and n.input[0] not in constants and n.output[0] in inferred:
            model.graph.output.append(inferred[n.output[0]])
            names[n.output[0]] = producer[n.input[0]].op_type if n.input[0] in producer else "input"
    onnx.save(model, str(out_path))
    return out_path, names


@pytest.mark.parametrize("per_channel", [True, False], ids=["per_channel", "per_tensor"])
def test_encoder_against_onnxruntime(tmp_path, per_channel):
    """A BERT-style layer quantized by quantize_static (QDQ, u8 activations, s8 weights): every MatMul
    runs on an integer operator (the 3-D projections on the dense, Q.K^T and attention.V on the batched
    operator, K^T read through its transpose), Softmax as onnxruntime's QLinearSoftmax, LayerNorm as
    its kernel (layer_norm.py), the Div and Erf as lookup tables: every quantized tensor and the
    output equal onnxruntime's."""
    seq, hidden = 16, 64
    source = int8_models.quantize(encoder(hidden, 2, seq, 1, embedding_norm=False), tmp_path / "enc.onnx",
                                  per_channel=per_channel, data=calibration(seq, hidden))
    bound = lower(load(source))
    assert {"qsynth_batch_matmul", "qsynth_dense", "qnn_qlinear_softmax", "qsynth_layer_norm"} <= functions_of(bound)
    assert not any(g.name_hint.startswith("matmul") for g in bound.functions)       # no float matmul left
    # Q, K^T, V and the probabilities read in place; the one transpose left is the context's, after
    assert str(bound["main"]).count("R.call_tir(transpose") == 1
    path, names = quantized_tensors(source, tmp_path / "enc_all.onnx")
    model = compile_model(path, threads=1)
    session = reference_session(path)
    rng = np.random.default_rng(0)
    for _ in range(3):
        feeds = {"input": rng.standard_normal((1, seq, hidden)).astype(np.float32)}
        expected = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
        ours = model(feeds)
        for name, op in names.items():
            np.testing.assert_array_equal(ours[name], expected[name], err_msg=f"{name} ({op})")
        final = next(iter(model.outputs))
        np.testing.assert_array_equal(ours[final], expected[final])


def test_dynamic_encoder_exact(tmp_path):
    """A BERT-style layer quantized by quantize_dynamic: onnxruntime fuses it into MatMulIntegerToFloat,
    DynamicQuantizeMatMul, FusedMatMul (Q.K^T times 1 / sqrt d), SkipLayerNormalization and Gelu;
    qsynth computes each as that kernel does (the dequantize chain of each integer matmul in one pass,
    the same pass as the Gelu or SkipLayerNormalization after it; each input's max and min in one), so
    the output is onnxruntime's bit for bit."""
    from onnxruntime.quantization import QuantType, quantize_dynamic
    seq, hidden = 16, 64
    onnx.save(encoder(hidden, 2, seq, 1), str(tmp_path / "f.onnx"))
    quantize_dynamic(str(tmp_path / "f.onnx"), str(tmp_path / "d.onnx"), weight_type=QuantType.QInt8)
    path = tmp_path / "d.onnx"
    model = compile_model(path, threads=1)
    session = reference_session(path)
    rng = np.random.default_rng(0)
    for _ in range(3):
        feeds = {"input": rng.standard_normal((1, seq, hidden)).astype(np.float32)}
        np.testing.assert_array_equal(model(feeds)[next(iter(model.outputs))], session.run(None, feeds)[0])
    functions = model_functions(path)
    assert {"qsynth_skip_layer_norm", "qsynth_layer_norm", "qsynth_float_matmul", "qsynth_dequantized_gelu",
            "qsynth_dequantized", "qsynth_range"} <= functions


@pytest.mark.parametrize("x_shape", [(1, 12, 40), (2, 2, 6, 40)], ids=["3d", "4d"])
def test_dynamic_matmul_integer_any_rank_on_the_dense(tmp_path, x_shape):
    """quantize_dynamic's form, DynamicQuantizeLinear -> MatMulInteger with a constant s8 weight, of a
    3-D and a 4-D activation: the int8 dense over the flattened rows, the zero point computed at run
    time subtracted after it; the int32 result equal to onnxruntime's."""
    rng = np.random.default_rng(2)
    w = rng.integers(-128, 128, (40, 24)).astype(np.int8)
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["xq", "xs", "xz"]),
             helper.make_node("MatMulInteger", ["xq", "w", "xz", "wz"], ["y"])]
    graph = helper.make_graph(nodes, "dq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, [*x_shape[:-1], 24])],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array(0, np.int8), "wz")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    path = tmp_path / "dq.onnx"
    onnx.save(model, str(path))
    assert_exact(path, lambda r: {"x": (r.standard_normal(x_shape) + 0.7).astype(np.float32)})
    assert "qsynth_dense" in model_functions(path)
