"""NNCF's transformer patterns (issue 49: ``nncf.quantize(..., model_type=TRANSFORMER)`` of a BERT) on
small graphs built in code, each compiled and compared with onnxruntime's exact result
(bench/models.reference_session) over several inputs: the float Gemm a projection without a
QuantizeLinear after it becomes (MatMulAddFusion, its K blocks summed onto the bias); Q.K^T of two
quantized activations with no QuantizeLinear after it (MatMulIntegerToFloat); the float bias of a
projection with a QuantizeLinear after it, which onnxruntime folds into an int32 one (QGemm)."""
from __future__ import annotations

import platform

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tvm_integration.bench.models import reference_session

pytestmark = pytest.mark.skipif(platform.machine() != "x86_64", reason="onnxruntime's x86 fusions")

ROWS, K = 16, 768              # K: six of MLAS's 128 blocks for N = 64


def save_model(path, nodes, inputs, outputs, inits) -> None:
    """One graph as a model of opset 13 (IR 8, what NNCF writes) saved at ``path``."""
    model = helper.make_model(helper.make_graph(nodes, "nncf", inputs, outputs, inits),
                              opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))


def activation(name: str, scale: float) -> tuple[list, list]:
    """(initializers, nodes) of NNCF's int8 activation pair ``name`` -> Q -> DQ -> ``name``.dq."""
    inits = [numpy_helper.from_array(np.array(scale, np.float32), f"{name}.s"),
             numpy_helper.from_array(np.array(0, np.int8), f"{name}.z")]
    nodes = [helper.make_node("QuantizeLinear", [name, f"{name}.s", f"{name}.z"], [f"{name}.q"]),
             helper.make_node("DequantizeLinear", [f"{name}.q", f"{name}.s", f"{name}.z"], [f"{name}.dq"])]
    return inits, nodes


def projection(rng, x: str, name: str, n: int) -> tuple[list, list]:
    """(initializers, nodes) of NNCF's projection ``DQ(x) @ DQ(W) + bias``: int8 weights per output
    channel (axis 1), the bias float."""
    w = rng.integers(-127, 128, (K, n)).astype(np.int8)
    inits = [numpy_helper.from_array(w, f"{name}.w"),
             numpy_helper.from_array((rng.uniform(0.5, 1.5, n) / 400).astype(np.float32), f"{name}.ws"),
             numpy_helper.from_array(np.zeros(n, np.int8), f"{name}.wz"),
             numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), f"{name}.b")]
    nodes = [helper.make_node("DequantizeLinear", [f"{name}.w", f"{name}.ws", f"{name}.wz"], [f"{name}.wd"], axis=1),
             helper.make_node("MatMul", [x, f"{name}.wd"], [f"{name}.mm"], name=f"{name}.mm"),
             helper.make_node("Add", [f"{name}.mm", f"{name}.b"], [name], name=name)]
    return inits, nodes


def inputs(count: int, shapes: dict) -> list[dict[str, np.ndarray]]:
    return [{name: np.random.default_rng(seed + 10 * i).standard_normal(shape).astype(np.float32)
             for i, (name, shape) in enumerate(shapes.items())} for seed in range(count)]


def differing(path, output: str, shapes: dict, count: int = 3) -> int:
    from tvm_integration.qnn.runtime.model import compile_model
    model, session = compile_model(path, threads=1), reference_session(path)
    return sum(int(np.count_nonzero(model(f)[output] != session.run([output], f)[0])) for f in inputs(count, shapes))


def test_float_gemm_sums_onto_its_bias(tmp_path):
    """NNCF's value projection, ``DQ(x) @ DQ(W) + bias`` read by no QuantizeLinear: onnxruntime's
    MatMulAddFusion makes it a float Gemm, which copies the bias into its output and adds each K block's
    sum to it, ``((bias + s0) + s1) + ...``, not ``((s0 + s1) + ...) + bias`` (float_matmul.matmul_func's
    ``bias``). Before, 1334 of the 3072 outputs differed."""
    rng = np.random.default_rng(0)
    inits, nodes = activation("x", 0.03)
    more, proj = projection(rng, "x.dq", "v", 64)
    save_model(tmp_path / "v.onnx", nodes + proj, [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, ROWS, K))],
               [helper.make_tensor_value_info("v", TensorProto.FLOAT, (1, ROWS, 64))], inits + more)
    assert differing(tmp_path / "v.onnx", "v", {"x": (1, ROWS, K)}) == 0


def test_matmul_of_two_activations_to_float(tmp_path):
    """NNCF's attention scores, ``DQ(q) @ Transpose(DQ(k))`` then a Div, no QuantizeLinear after the
    MatMul: onnxruntime's MatMulIntegerToFloat on the pairs its x86 build turned uint8, the integer
    product times float32(sq * sk) (activation_matmul.to_float), not the float matmul of the
    dequantized values. Before, 1280 of the 3 x 512 scores differed."""
    shape = (1, 2, ROWS, 64)
    inits, nodes = activation("q", 0.05)
    more, k_nodes = activation("k", 0.04)
    nodes += k_nodes + [helper.make_node("Transpose", ["k.dq"], ["kt"], perm=[0, 1, 3, 2]),
                        helper.make_node("MatMul", ["q.dq", "kt"], ["qk"], name="qk"),
                        helper.make_node("Div", ["qk", "root"], ["scores"])]
    inits += more + [numpy_helper.from_array(np.array(8, np.float32), "root")]
    save_model(tmp_path / "qk.onnx", nodes, [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in "qk"],
               [helper.make_tensor_value_info("scores", TensorProto.FLOAT, (1, 2, ROWS, ROWS))], inits)
    assert differing(tmp_path / "qk.onnx", "scores", {"q": shape, "k": shape}) == 0


def test_float_bias_rounds_as_onnxruntime_folds_it(tmp_path):
    """NNCF's query projection, ``Q(DQ(x) @ DQ(W) + bias)`` with a float bias: onnxruntime's
    WeightBiasQuantization folds the bias to int32, ``Round(bias / (sx * sw))`` in float32 (half to even),
    for its QGemm; qsynth's integer bias (rewrite.QDQToInteger.integer_bias) is that initializer of its
    optimized model. Biases of 2**10 to 2**22 steps: 4 of 256 differed with a float64 quotient."""
    import onnxruntime as ort
    from tvm_integration.qnn.onnx.rewrite import QDQToInteger
    rng = np.random.default_rng(3)
    n, xs = 256, np.float32(0.03)
    ws = (rng.uniform(0.5, 1.5, n) / 400).astype(np.float32)
    bias = (rng.standard_normal(n) * 2.0 ** rng.integers(10, 22, n) * (xs * ws)).astype(np.float32)
    inits, nodes = activation("x", float(xs))
    inits += [numpy_helper.from_array(rng.integers(-127, 128, (64, n)).astype(np.int8), "q.w"),
              numpy_helper.from_array(ws, "q.ws"), numpy_helper.from_array(np.zeros(n, np.int8), "q.wz"),
              numpy_helper.from_array(bias, "q.b"), numpy_helper.from_array(np.array(1e6, np.float32), "y.s"),
              numpy_helper.from_array(np.array(0, np.int8), "y.z")]
    nodes += [helper.make_node("DequantizeLinear", ["q.w", "q.ws", "q.wz"], ["q.wd"], axis=1),
              helper.make_node("MatMul", ["x.dq", "q.wd"], ["q.mm"], name="q.mm"),
              helper.make_node("Add", ["q.mm", "q.b"], ["q"], name="q"),
              helper.make_node("QuantizeLinear", ["q", "y.s", "y.z"], ["y"])]
    save_model(tmp_path / "q.onnx", nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, (4, 64))],
               [helper.make_tensor_value_info("y", TensorProto.INT8, (4, n))], inits)
    options = ort.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / "q.optimized.onnx")
    ort.InferenceSession(str(tmp_path / "q.onnx"), options, providers=["CPUExecutionProvider"])
    (folded,) = [numpy_helper.to_array(t) for t in onnx.load(str(tmp_path / "q.optimized.onnx")).graph.initializer
                 if t.name.endswith("_bias_int32")]
    np.testing.assert_array_equal(QDQToInteger.integer_bias(bias, xs * ws, "q"), folded)
