"""Attention's Q.K^T of two int8 activations with no QuantizeLinear after it (NNCF's BERT, model_type=transformer),
built for Arm, against onnxruntime's AArch64 build under qemu and numpy (issue 49).

That build fuses int8 activations as they are (``QDQIsInt8Allowed``), so ``MatMul(DQ(q), DQ(k))`` becomes
MatMulIntegerToFloat: the integer product times float32(sq * sk). Its x86 build cannot fuse an int8 pair that no
QuantizeLinear it may turn uint8 produces, and multiplies the dequantized values in float. Taking the float
matmul on Arm too made 161 286 of layer 3's 196 608 scores differ (up to 1.9e-6), and 3 of its 98 304
quantized attention outputs."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tvm_integration.bench import mca
from tvm_integration.bench.models import reference_session
from tvm_integration.qemu import cross_model

MISSING = cross_model.missing_tools() or mca.missing_tools()
pytestmark = [pytest.mark.qemu,
              pytest.mark.skipif(MISSING is not None, reason=f"onnxruntime's AArch64 build runs under qemu: {MISSING}")]

HEADS, ROWS, DEPTH, CORE = 4, 64, 64, "cortex-a53"
SQ, SK = np.float32(0.037245058), np.float32(0.033849027)          # the NNCF BERT's layer-3 q and k scales


def scores_model(path):
    """``Div(MatMul(DQ(q), DQ(k)), 8)``, q and k int8 inputs with zero point 0, no QuantizeLinear after."""
    c = lambda name, a: numpy_helper.from_array(a, name)
    inits = [c("sq", SQ), c("sk", SK), c("zero", np.int8(0)), c("root", np.float32(8.0))]
    nodes = [helper.make_node("DequantizeLinear", ["q", "sq", "zero"], ["dq"]),
             helper.make_node("DequantizeLinear", ["k", "sk", "zero"], ["dk"]),
             helper.make_node("MatMul", ["dq", "dk"], ["qk"]), helper.make_node("Div", ["qk", "root"], ["scores"])]
    graph = helper.make_graph(nodes, "scores", [
        helper.make_tensor_value_info("q", TensorProto.INT8, [1, HEADS, ROWS, DEPTH]),
        helper.make_tensor_value_info("k", TensorProto.INT8, [1, HEADS, DEPTH, ROWS])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, HEADS, ROWS, ROWS])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path.write_bytes(model.SerializeToString())


def test_int8_scores_are_matmul_integer_to_float_on_arm(tmp_path):
    from tvm_integration.bench import ort_aarch64
    from tvm_integration.qnn.runtime.model import compile_model
    path = tmp_path / "scores.onnx"
    scores_model(path)
    rng = np.random.default_rng(0)
    feeds = {"q": rng.integers(-128, 128, (1, HEADS, ROWS, DEPTH)).astype(np.int8),
             "k": rng.integers(-128, 128, (1, HEADS, DEPTH, ROWS)).astype(np.int8)}
    acc = feeds["q"].astype(np.int64) @ feeds["k"].astype(np.int64)        # |acc| < 2**24: exact in float32
    fused = acc.astype(np.float32) * np.float32(SQ * SK) / np.float32(8)
    (arm,), _ = ort_aarch64.run(path, feeds, ["scores"], CORE, counted=False)
    np.testing.assert_array_equal(arm, fused)
    ours = compile_model(path, target="neon", mcpu=CORE)(feeds)["scores"]
    np.testing.assert_array_equal(ours, arm)
    # x86: no fusion there, the float matmul of the dequantized values, which rounds otherwise
    x86 = reference_session(str(path)).run(["scores"], feeds)[0]
    assert np.count_nonzero(x86 != arm) > 0
    np.testing.assert_array_equal(compile_model(path)(feeds)["scores"], x86)
