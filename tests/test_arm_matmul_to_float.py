"""A MatMul or Gemm of an int8 activation by constant int8 weights with no QuantizeLinear after it, built for
Arm, against onnxruntime's AArch64 build under qemu and numpy (issue 49).

That build fuses int8 activations as they are (``QDQIsInt8Allowed``): the MatMul is MatMulIntegerToFloat and
the Gemm with a DQ(int32) C QGemm to float32, ``float32(acc (+ c)) * float32(sx * sw)``, as onnxruntime's x86
build computes them once it has turned the activation uint8 (tests/test_ort_matmul_to_float.py). qsynth took
the fusion for uint8 activations only, so on Arm it multiplied the dequantized values in float: 10 657 of the
matmul's 12 288 outputs and 5 332 of the Gemm's 6 144 differed from that build (up to 7.6e-6).

A QOperator model's QGemm (com.microsoft) with int8 A and B is onnxruntime's kernel itself, in both builds:
with an int8 output ``float32(acc + c) * float32(sa * sb / sy)`` rounded half to even, as qsynth's dense
computes; with a float output as above, which qsynth took for the QDQ MatMul on Arm too (5 333 of 6 144 differed),
and on x86 for a QDQ pair that build would not fuse (5 333 differed: ort_fusion.qgemms_to_float)."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.test_ort_matmul_to_float import gemm_model, matmul_model
from tvm_integration.bench import mca
from tvm_integration.bench.models import reference_session
from tvm_integration.qemu import cross_model

MISSING = cross_model.missing_tools() or mca.missing_tools()
pytestmark = [pytest.mark.qemu,
              pytest.mark.skipif(MISSING is not None, reason=f"onnxruntime's AArch64 build runs under qemu: {MISSING}")]

CORE = "cortex-a53"


def fused(path, x: np.ndarray, gemm: bool) -> np.ndarray:
    """numpy's MatMulIntegerToFloat / QGemm to float32 of the model at ``path`` (int8 x, zero points 0)."""
    inits = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer}
    sx = inits["x.s"]
    q = np.clip(np.rint(x / sx), -128, 127).astype(np.int64)           # QuantizeLinear: float32 division, to even
    w = inits["w"].astype(np.int64)
    acc = q @ (w.T if gemm else w) + (inits["b.q"] if "b.q" in inits else 0)
    return acc.astype(np.float32) * (sx * inits["w.s"]).astype(np.float32)


@pytest.mark.parametrize("gemm", [False, True])
def test_int8_matmul_by_weights_is_matmul_integer_to_float_on_arm(tmp_path, gemm):
    from tvm_integration.bench import ort_aarch64
    from tvm_integration.qnn.runtime.model import compile_model
    path = tmp_path / "m.onnx"
    shapes = gemm_model(path, 64, per_channel=True, bias=True) if gemm else matmul_model(path, (2, 64))
    feeds = {"x": np.random.default_rng(2).standard_normal(shapes["x"]).astype(np.float32)}
    (arm,), _ = ort_aarch64.run(path, feeds, ["y"], CORE, counted=False)
    np.testing.assert_array_equal(arm, fused(path, feeds["x"], gemm))
    np.testing.assert_array_equal(compile_model(path, target="neon", mcpu=CORE)(feeds)["y"], arm)
    np.testing.assert_array_equal(compile_model(path)(feeds)["y"], reference_session(str(path)).run(["y"], feeds)[0])


def qgemm_model(path, rng) -> dict[str, np.ndarray]:
    """Two com.microsoft QGemms of one int8 A [64, 512] (zero point 3) by int8 B [96, 512] (transB, a scale
    per row, zero point 0) with an int32 C: ``y`` float32, ``q`` int8 (scale 0.9, zero point -5); their
    parameters, by name."""
    params = {"a.s": np.array(0.02, np.float32), "a.z": np.array(3, np.int8),
              "w": rng.integers(-127, 128, (96, 512)).astype(np.int8),
              "w.s": (rng.uniform(0.5, 1.5, 96) / 300).astype(np.float32), "w.z": np.zeros(96, np.int8),
              "c": rng.integers(-20000, 20000, 96).astype(np.int32), "q.s": np.array(0.9, np.float32),
              "q.z": np.array(-5, np.int8)}
    gemm = ["a", "a.s", "a.z", "w", "w.s", "w.z", "c"]
    nodes = [helper.make_node("QGemm", gemm, ["y"], "gemm_y", domain="com.microsoft", transB=1),
             helper.make_node("QGemm", [*gemm, "q.s", "q.z"], ["q"], "gemm_q", domain="com.microsoft", transB=1)]
    graph = helper.make_graph(nodes, "qgemm", [helper.make_tensor_value_info("a", TensorProto.INT8, (64, 512))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, (64, 96)),
                               helper.make_tensor_value_info("q", TensorProto.INT8, (64, 96))],
                              [numpy_helper.from_array(v, k) for k, v in params.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return params


def test_int8_qgemm_equals_the_aarch64_build(tmp_path):
    from tvm_integration.bench import ort_aarch64
    from tvm_integration.qnn.runtime.model import compile_model
    rng = np.random.default_rng(3)
    p = qgemm_model(tmp_path / "qgemm.onnx", rng)
    feeds = {"a": rng.integers(-128, 128, (64, 512)).astype(np.int8)}
    acc = (feeds["a"].astype(np.int64) - p["a.z"]) @ p["w"].astype(np.int64).T + p["c"]
    scale = (p["a.s"] * p["w.s"]).astype(np.float32)
    expected = {"y": acc.astype(np.float32) * scale,
                "q": np.clip(np.rint(acc.astype(np.float32) * (scale / p["q.s"])) + p["q.z"], -128, 127).astype(np.int8)}
    arm = dict(zip(("y", "q"), ort_aarch64.run(tmp_path / "qgemm.onnx", feeds, ["y", "q"], CORE, counted=False)[0]))
    ours = compile_model(tmp_path / "qgemm.onnx", target="neon", mcpu=CORE)(feeds)
    x86 = compile_model(tmp_path / "qgemm.onnx")(feeds)
    for name in ("y", "q"):
        np.testing.assert_array_equal(arm[name], expected[name], err_msg=name)
        np.testing.assert_array_equal(ours[name], arm[name], err_msg=name)
        np.testing.assert_array_equal(x86[name], expected[name], err_msg=name)     # onnxruntime's x86 build too
