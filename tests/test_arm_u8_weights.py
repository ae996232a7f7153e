"""u8 weights on a zero point other than 128 (issue 49: onnxruntime's U8U8 quantize_static, per tensor;
QOperator QGemm and QLinearConv with u8 weights per channel; quantize_dynamic's MatMulInteger) built for
Arm run on the core's NEON tile, their weights bytes on a zero point (ops/neon_gemm.byte_weights), not on
the reference computation: each layer's operator as legalize.py chose it (report.layers), and the
outputs under qemu against the stated reference (onnxruntime's AArch64 build under qemu,
arm_models.stated_model) and onnxruntime's x86 exact mode. Zero points 0 and 255, weights 0 and 255;
Cortex-A53 (the u8 x u8 umull tile, the zero point in its row term; the s8 x s7 tile) and Cortex-A76
(sdot, the accumulator starting from the row term)."""
import logging

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from test_ort_quantizer_options import network, quantized
from test_qnn import GEOMETRIES
from test_u8u8 import u8u8_conv
from tvm_integration.bench import int8_models, mca
from tvm_integration.bench.models import reference_session
from tvm_integration.qemu import cross_model

MISSING = cross_model.missing_tools() or mca.missing_tools()
pytestmark = [pytest.mark.qemu,
              pytest.mark.skipif(MISSING is not None, reason=f"onnxruntime's AArch64 build runs under qemu: {MISSING}")]


def on_the_tiles(path, core: str) -> list[str]:
    """The operators of the model's conv2d and dense layers built for ``core`` (legalize.py's choice)."""
    from tvm_integration.qnn.runtime.report import layers
    return [layer.operator for layer in layers(onnx.load(str(path)), "neon", core)]


def assert_exact(path, core: str, feeds: list[dict[str, np.ndarray]]) -> None:
    """The model built for ``core`` equals the stated reference on Arm and onnxruntime's x86 exact mode."""
    import tempfile
    from pathlib import Path

    from tvm_integration.bench import arm_models, ort_aarch64
    from tvm_integration.qnn.runtime.model import compile_model
    model = compile_model(path, target="neon", mcpu=core)
    session = reference_session(path)
    with tempfile.TemporaryDirectory(prefix="qsynth-u8-weights-") as work:
        stated = arm_models.stated_model(path, model.op_kinds, Path(work))
        arms = ort_aarch64.run_each(stated, feeds, model.outputs, core)
    for feed, ours, arm in zip(feeds, model.each(feeds), arms, strict=True):
        for name, theirs, x86 in zip(model.outputs, arm, session.run(model.outputs, feed), strict=True):
            np.testing.assert_array_equal(ours[name], theirs)
            np.testing.assert_array_equal(ours[name], x86)


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """test_ort_quantizer_options.py's residual network, pre-processed for the quantizers."""
    from onnxruntime.quantization.shape_inference import quant_pre_process
    folder = tmp_path_factory.mktemp("arm-u8-weights")
    onnx.save(network(), str(folder / "residual.fp32.onnx"))
    logging.getLogger("root").setLevel(logging.ERROR)
    quant_pre_process(str(folder / "residual.fp32.onnx"), str(folder / "residual.pre.onnx"))
    return folder / "residual.pre.onnx"


@pytest.mark.parametrize("name, core", [("u8u8_per_tensor", "cortex-a53"), ("u8u8_per_tensor", "cortex-a76"),
                                        ("u8u8_per_channel_qoperator", "cortex-a53"),
                                        ("u8u8_per_channel_qoperator", "cortex-a76")])
def test_quantizers_u8_weights_run_on_the_tiles(source, name, core):
    """Its four convolutions and its classifier on the core's tile (they were on the reference
    computation: "9-bit weights ... the NEON tiles take bytes"), exact. (quantize_dynamic's per-channel
    model runs its layers on the tiles too; its classifier's output stage is test_arm_float_ops'
    per-channel MatMul.)"""
    path = quantized(source, name)
    assert on_the_tiles(path, core) == ["int8"] * 5
    rng = np.random.default_rng(49)
    assert_exact(path, core, [{"input": rng.standard_normal((1, 16, 24, 24)).astype(np.float32)} for _ in range(2)])


@pytest.mark.parametrize("geometry, w_zp, core", [(GEOMETRIES[0], 0, "cortex-a76"), (GEOMETRIES[1], 255, "cortex-a53"),
                                                  (GEOMETRIES[2], 255, "cortex-a76"), (GEOMETRIES[3], 0, "cortex-a53"),
                                                  (GEOMETRIES[4], 0, "cortex-a53")],
                         ids=["c5k3-zw0-a76", "c16k3s2-zw255-a53", "stem-zw255-a76", "depthwise-zw0-a53",
                              "grouped-zw0-a53"])
def test_qlinearconv_of_u8_weights_at_either_end(tmp_path, geometry, w_zp, core):
    """A QLinearConv whose u8 weights (0 and 255 among them) sit on zero point 0 or 255: ``w - zw`` spans
    [0, 255] or [-255, 0], bytes on a zero point of -128 or 127 for the tiles; a depthwise one takes them
    as they are (ops/depthwise.py)."""
    (c, h, w_), o, _, _, _, groups = geometry
    path = u8u8_conv(tmp_path, geometry, w_zp, w_scale=0.0004)
    assert on_the_tiles(path, core) == ["depthwise" if groups == o else "int8"]
    x = np.random.default_rng(w_zp).integers(0, 256, (1, c, h, w_)).astype(np.uint8)
    x.flat[:2] = (0, 255)
    assert_exact(path, core, [{"x": x}])


def matmul_model(path, weights: np.ndarray) -> None:
    """A float MatMul ``x [4, K] @ weights`` quantized by quantize_dynamic with u8 weights per tensor:
    DynamicQuantizeLinear -> MatMulInteger, whose weights' zero point follows their sign (0: all of them
    at least 0; 255: all at most 0)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="fc")], "matmul",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, weights.shape[0]])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, weights.shape[1]])],
                              [numpy_helper.from_array(weights, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = int8_models.IR_VERSION
    fp32 = path.with_suffix(".fp32.onnx")
    onnx.save(model, str(fp32))
    quantize_dynamic(str(fp32), str(path), weight_type=QuantType.QUInt8)


@pytest.mark.parametrize("sign, core", [(1, "cortex-a53"), (-1, "cortex-a76")], ids=["zw0-a53", "zw255-a76"])
def test_matmul_integer_of_u8_weights_at_either_end(tmp_path, sign, core):
    rng = np.random.default_rng(7)
    weights = (sign * rng.uniform(0, 1, (37, 10))).astype(np.float32)
    weights[:2, :2] = sign * np.array([[0, 1], [1, 0]], np.float32)        # codes 0 and 255 in the first columns
    path = tmp_path / "matmul.onnx"
    matmul_model(path, weights)
    constants = {i.name: numpy_helper.to_array(i) for i in onnx.load(str(path)).graph.initializer}
    (zero_point,) = [v for name, v in constants.items() if name.startswith("w_zero_point")]
    (codes,) = [v for name, v in constants.items() if name.startswith("w_quantized")]
    assert int(zero_point) == (0 if sign > 0 else 255) and {0, 255} <= set(codes.flat)
    assert on_the_tiles(path, core) == ["int8"]
    assert_exact(path, core, [{"x": rng.standard_normal((4, 37)).astype(np.float32)}])
