"""onnxruntime's quantizer options (issue 49) on a small network built in code: conv/relu, a residual
block, global average pool and gemm, quantized by quantize_static with each option users set and by
quantize_dynamic; every one compiled and compared with onnxruntime's exact result (bench/models.
reference_session). With int8 activations (quantize_static's default) onnxruntime's x86 build keeps
every Conv whose input tensor another node also reads in float (qnn/ort_fusion.py); qsynth computes
those as MLAS sums them (docs/measurements.md, "int8 activations on x86")."""
from __future__ import annotations

import logging
import platform

import numpy as np
import onnx
import onnxruntime.quantization as ort_quant
import pytest
from onnx import TensorProto, helper, numpy_helper

from tvm_integration.bench.models import reference_session
from tvm_integration.qnn import ort_fusion

pytestmark = pytest.mark.skipif(platform.machine() != "x86_64", reason="onnxruntime's x86 fusions")

SHAPE = (1, 16, 24, 24)


def network(seed: int = 0) -> onnx.ModelProto:
    """input -> conv3x3 -> relu -> [conv3x3 -> relu -> conv3x3] + skip -> relu -> conv1x1/2 -> relu -> GAP
    -> flatten -> gemm (10), random weights and biases."""
    rng = np.random.default_rng(seed)
    inits, nodes = [], []

    def conv(name, x, cin, cout, k, stride=1):
        w = (rng.standard_normal((cout, cin, k, k)) / np.sqrt(cin * k * k)).astype(np.float32)
        inits.extend([numpy_helper.from_array(w, f"{name}.w"),
                      numpy_helper.from_array((rng.standard_normal(cout) * 0.1).astype(np.float32), f"{name}.b")])
        nodes.append(helper.make_node("Conv", [x, f"{name}.w", f"{name}.b"], [name], name=name, pads=[k // 2] * 4,
                                      strides=[stride, stride]))
        return name

    def relu(x):
        nodes.append(helper.make_node("Relu", [x], [f"{x}.relu"], name=f"{x}.relu"))
        return f"{x}.relu"

    c = SHAPE[1]
    stem = relu(conv("stem", "input", c, c, 3))
    body = conv("c2", relu(conv("c1", stem, c, c, 3)), c, c, 3)
    nodes.append(helper.make_node("Add", [body, stem], ["sum"], name="add"))
    down = relu(conv("down", relu("sum"), c, 2 * c, 1, stride=2))
    nodes += [helper.make_node("GlobalAveragePool", [down], ["gap"], name="gap"),
              helper.make_node("Flatten", ["gap"], ["flat"], name="flatten"),
              helper.make_node("Gemm", ["flat", "fc.w", "fc.b"], ["output"], name="fc", transB=1)]
    inits += [numpy_helper.from_array((rng.standard_normal((10, 2 * c)) * 0.3).astype(np.float32), "fc.w"),
              numpy_helper.from_array((rng.standard_normal(10) * 0.1).astype(np.float32), "fc.b")]
    graph = helper.make_graph(nodes, "residual", [helper.make_tensor_value_info("input", TensorProto.FLOAT, SHAPE)],
                              [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def feeds(count: int, seed: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [{"input": rng.standard_normal(SHAPE).astype(np.float32)} for _ in range(count)]


def options():
    q = ort_quant
    pc_rr = dict(per_channel=True, reduce_range=True)
    return {
        "per_channel_reduce_range": pc_rr,                                       # issue 49's table, (a)
        "percentile": dict(pc_rr, calibrate_method=q.CalibrationMethod.Percentile),
        "u8u8_per_tensor": dict(activation_type=q.QuantType.QUInt8, weight_type=q.QuantType.QUInt8),
        "u8s8_per_channel": dict(per_channel=True, activation_type=q.QuantType.QUInt8),
        "s8s8_per_tensor": {},
        "qoperator": dict(per_channel=True, quant_format=q.QuantFormat.QOperator),
        "symmetric": dict(per_channel=True, extra_options={"ActivationSymmetric": True, "WeightSymmetric": True}),
        "keep_activations": dict(per_channel=True, extra_options={"QDQKeepRemovableActivations": True}),
        "entropy": dict(per_channel=True, calibrate_method=q.CalibrationMethod.Entropy),
        "dynamic": None,
    }


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    directory = tmp_path_factory.mktemp("ort-quantizer-options")
    path = directory / "residual.fp32.onnx"
    onnx.save(network(), str(path))
    pre = directory / "residual.pre.onnx"
    logging.getLogger("root").setLevel(logging.ERROR)
    from onnxruntime.quantization.shape_inference import quant_pre_process
    quant_pre_process(str(path), str(pre))
    return pre


def quantized(source, name: str):
    path = source.with_name(f"residual.{name}.onnx")
    if not path.exists():
        opts = options()[name]
        if opts is None:
            ort_quant.quantize_dynamic(str(source), str(path))
        else:
            data = iter(feeds(4, 1))

            class Reader(ort_quant.CalibrationDataReader):
                def get_next(self):
                    return next(data, None)
            ort_quant.quantize_static(str(source), str(path), Reader(), **opts)
    return path


def differences(path) -> int:
    from tvm_integration.qnn.model import compile_model
    model = compile_model(path, threads=1)
    session = reference_session(path)
    return sum(int(np.count_nonzero(model(f)[model.outputs[0]] != session.run(None, f)[0])) for f in feeds(3, 2))


@pytest.mark.parametrize("name", list(options()))
def test_quantizer_option_is_exact(source, name):
    assert differences(quantized(source, name)) == 0


def test_int8_convs_read_twice_stay_float(source):
    """onnxruntime's x86 build (QDQS8ToU8Transformer, then ConvNodeGroupSelector) keeps in float the
    convs whose int8 input or output another node reads too (the stem's output is also the skip: stem
    and c1; its optimized model has these two Conv nodes), and fuses the others (c2, down, fc) and every
    conv of uint8 activations."""
    assert ort_fusion.float_layers(onnx.load(str(quantized(source, "s8s8_per_tensor")))) == {"stem", "c1"}
    assert ort_fusion.float_layers(onnx.load(str(quantized(source, "u8s8_per_channel")))) == frozenset()
    assert ort_fusion.float_layers(onnx.load(str(quantized(source, "qoperator")))) == frozenset()


def conv_model(path, seed: int):
    """DQ(x, int8) -> Conv 3x3 (32 -> 16 channels: K = 288, three of MLAS's K blocks) -> Q, the input
    also read by a second Conv: both run in float on x86."""
    rng = np.random.default_rng(seed)
    c, m = 32, 16
    x_scale, y_scale = np.float32(0.05), np.float32(0.01)
    w = rng.integers(-127, 128, (m, c, 3, 3)).astype(np.int8)
    w_scale = (rng.uniform(0.5, 1.5, m) / 127 / 16).astype(np.float32)
    inits = [numpy_helper.from_array(np.array(v, dt), n) for n, v, dt in (
        ("xs", x_scale, np.float32), ("xz", 3, np.int8), ("ys", y_scale, np.float32), ("yz", -5, np.int8))]
    inits += [numpy_helper.from_array(w, "w"), numpy_helper.from_array(w_scale, "ws"),
              numpy_helper.from_array(np.zeros(m, np.int8), "wz")]
    nodes = [helper.make_node("QuantizeLinear", ["input", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"], axis=0)]
    outputs = []
    for k in (1, 2):
        nodes += [helper.make_node("Conv", ["xd", "wd"], [f"y{k}"], name=f"conv{k}", pads=[1] * 4, strides=[k, k]),
                  helper.make_node("QuantizeLinear", [f"y{k}", "ys", "yz"], [f"q{k}"]),
                  helper.make_node("DequantizeLinear", [f"q{k}", "ys", "yz"], [f"out{k}"])]
        outputs.append(helper.make_tensor_value_info(f"out{k}", TensorProto.FLOAT, (1, m, 32 // k, 32 // k)))
    graph = helper.make_graph(nodes, "conv", [helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                                                            (1, c, 32, 32))], outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))


def test_float_conv_sums_as_mlas(tmp_path, monkeypatch):
    """The float convs as MLAS sums them: equal to onnxruntime; the integer conv (what qsynth computed
    before) differs where the float sum rounds across a half step."""
    from tvm_integration.qnn.model import compile_model
    path = tmp_path / "conv.onnx"
    conv_model(path, 0)
    assert ort_fusion.float_layers(onnx.load(str(path))) == {"conv1", "conv2"}
    xs = [{"input": np.random.default_rng(seed).uniform(-6, 6, (1, 32, 32, 32)).astype(np.float32)} for seed in range(6)]
    session = reference_session(path)
    want = [session.run(None, x) for x in xs]
    ours = compile_model(path, threads=1)
    for x, w in zip(xs, want):
        for name, expected in zip(["out1", "out2"], w):
            np.testing.assert_array_equal(ours(x)[name], expected, err_msg=name)
    monkeypatch.setattr(ort_fusion, "float_layers", lambda model: frozenset())
    integer = compile_model(path, threads=1)
    assert sum(int(np.count_nonzero(integer(x)["out1"] != w[0])) for x, w in zip(xs, want)) > 0
