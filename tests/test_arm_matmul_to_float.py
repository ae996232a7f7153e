"""A MatMul or Gemm of an int8 activation by constant int8 weights with no QuantizeLinear after it, built for
Arm, against onnxruntime's AArch64 build under qemu and numpy (issue 49).

That build fuses int8 activations as they are (``QDQIsInt8Allowed``): the MatMul is MatMulIntegerToFloat and
the Gemm with a DQ(int32) C QGemm to float32, ``float32(acc (+ c)) * float32(sx * sw)``, as onnxruntime's x86
build computes them once it has turned the activation uint8 (tests/test_ort_matmul_to_float.py). qsynth took
the fusion for uint8 activations only, so on Arm it multiplied the dequantized values in float: 10 657 of the
matmul's 12 288 outputs and 5 332 of the Gemm's 6 144 differed from that build (up to 7.6e-6)."""
import numpy as np
import onnx
import pytest
from onnx import numpy_helper

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
