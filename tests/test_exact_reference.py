"""The exact integer reference. onnxruntime's default U8S8 kernels on an x86 host without VNNI multiply
with vpmaddubsw, whose int16 sum of two u8 x s8 products saturates; its ``session.x64quantprecision``
mode is exact. Every bit-exactness check compares with that mode (bench/models.reference_session), and
this file checks the mode itself against numpy's integer product, and our compiled model against both,
on a MatMulInteger whose every output saturates vpmaddubsw: u8 activations in [200, 255], weight pairs
of 127."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from isa_specs import host
from tvm_integration.bench.models import onnxruntime_session, reference_session
from tvm_integration.qnn.runtime.model import compile_model

M, K, N = 4, 64, 32


def saturating_matmul(path):
    """``y = MatMulInteger(x, W)``: x u8 [M, K] at run time, W int8 [K, N] of 127 (every pair 254 x 127 > 2^15)."""
    weight = numpy_helper.from_array(np.full((K, N), 127, np.int8), "W")
    graph = helper.make_graph([helper.make_node("MatMulInteger", ["x", "W"], ["y"])], "saturating",
                              [helper.make_tensor_value_info("x", TensorProto.UINT8, [M, K])],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, [M, N])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return np.full((K, N), 127, np.int64)


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    path = tmp_path_factory.mktemp("mmi") / "saturating.onnx"
    weight = saturating_matmul(path)
    x = np.random.default_rng(0).integers(200, 256, (M, K), dtype=np.uint8)
    return path, x, x.astype(np.int64) @ weight


def test_reference_mode_equals_numpys_integer_product(case):
    path, x, want = case
    np.testing.assert_array_equal(reference_session(path).run(None, {"x": x})[0], want)


def test_compiled_model_equals_numpys_integer_product(case):
    path, x, want = case
    model = compile_model(path)
    np.testing.assert_array_equal(model({"x": x})[model.outputs[0]], want)


# onnxruntime dispatches on the CPU's own flags, whatever QSYNTH_HOST_FEATURES holds qsynth's host model to
ONNXRUNTIME_HAS_VNNI = any(host.X86[f].cpuinfo in host.cpu_model().flags for f in host.VNNI)


@pytest.mark.skipif(ONNXRUNTIME_HAS_VNNI, reason="host CPU has VNNI: onnxruntime's default multiplies with vpdpbusd, "
                                                  "which does not saturate")
def test_onnxruntime_default_saturates_without_vnni(case):
    """Why the reference is the exact mode: on this host the default is wrong in every output."""
    path, x, want = case
    got = onnxruntime_session(path, 1).run(None, {"x": x})[0]
    assert (got != want).all()


def test_a_benchmark_row_counts_the_outputs_the_default_gets_wrong(case):
    """zoo.difference, the zoo's and transformer tables' "onnxruntime int8 wrong": ours 0, the default every
    output where it saturates (no VNNI), none where it multiplies with vpdpbusd."""
    from tvm_integration.bench import zoo
    path, x, _ = case
    row = zoo.difference(compile_model(path), path, [{"x": x}], 1)
    assert (row["differing"], row["values"]) == (0, M * N)
    assert row["onnxruntime_int8_default"]["differing"] == (0 if ONNXRUNTIME_HAS_VNNI else M * N)


def test_a_model_whose_initializers_are_shared_runs_on_an_unshared_copy(tmp_path):
    """onnxruntime's exact mode fails to initialize the committed W2A2 digits model (an initializer read
    by two nodes: "Attempt to replace the existing tensor"); reference_session runs it on a copy where
    each reader has its own. On a model where both run, the copy's outputs equal the original's."""
    import onnxruntime
    from tvm_integration.bench import int8_models
    from tvm_integration.bench.models import onnxruntime_session, unshared_constants
    digits = Path(__file__).parent / "data" / "lowbit" / "digits_w2a2_qcdq.onnx"
    with pytest.raises(onnxruntime.capi.onnxruntime_pybind11_state.Fail, match="replace the existing tensor"):
        onnxruntime_session(digits, 1, exact=True)
    x = np.random.default_rng(0).random((64, 1, 8, 8), np.float32)
    assert reference_session(digits).run(None, {"input": x})[0].shape == (64, 10)
    path = int8_models.quantize(int8_models.resnet(32, (8, 16, 16, 32), 10), tmp_path / "tiny.int8.onnx")
    copy = unshared_constants(onnx.load(str(path)))
    assert len(copy.graph.initializer) >= len(onnx.load(str(path)).graph.initializer)
    feeds = {"input": np.random.default_rng(1).standard_normal((1, 3, 32, 32), np.float32)}
    np.testing.assert_array_equal(onnxruntime_session(copy.SerializeToString(), 1, True).run(None, feeds)[0],
                                  onnxruntime_session(path, 1, True).run(None, feeds)[0])


def test_a_dequantized_constant_read_twice_by_one_node_runs_on_a_copy():
    """torchvision's DenseNet-121 and ConvNeXt-Tiny, quantized by quantize_static, fail to initialize in
    the exact mode: the exporter keeps one constant of ones that a BatchNormalization reads, through one
    DequantizeLinear, as both scale and variance. The reference runs a copy with one DequantizeLinear per
    read; its output is numpy's batch normalization of the dequantized input."""
    import onnxruntime
    channels = 4
    constants = [numpy_helper.from_array(np.array(0.1, np.float32), "x_scale"),
                 numpy_helper.from_array(np.array(128, np.uint8), "x_zero"),
                 numpy_helper.from_array(np.full(channels, 127, np.int8), "ones_q"),
                 numpy_helper.from_array(np.full(channels, 1 / 127, np.float32), "ones_scale"),
                 numpy_helper.from_array(np.zeros(channels, np.int8), "ones_zero"),
                 numpy_helper.from_array(np.zeros(channels, np.float32), "zeros")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zero"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "x_scale", "x_zero"], ["xd"]),
             helper.make_node("DequantizeLinear", ["ones_q", "ones_scale", "ones_zero"], ["ones"], axis=0),
             helper.make_node("BatchNormalization", ["xd", "ones", "zeros", "zeros", "ones"], ["y"])]
    shape = [1, channels, 2, 3]
    graph = helper.make_graph(nodes, "bn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], constants)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)]).SerializeToString()
    with pytest.raises(onnxruntime.capi.onnxruntime_pybind11_state.Fail, match="replace the existing tensor"):
        onnxruntime_session(model, 1, exact=True)
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32) * 4
    xd = ((np.clip(np.round(x / np.float32(0.1)) + 128, 0, 255) - 128) * np.float32(0.1)).astype(np.float32)
    ones = np.float32(127) * np.float32(1 / 127)
    want = xd / np.sqrt(ones + np.float32(1e-5)) * ones
    np.testing.assert_allclose(reference_session(model).run(None, {"x": x})[0], want, rtol=1e-6, atol=1e-6)
