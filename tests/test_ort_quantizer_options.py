"""onnxruntime's quantizer options (issue 49) on a small network built in code: conv/relu, a residual
block, global average pool and gemm, quantized by quantize_static with each option users set and by
quantize_dynamic; every one compiled and compared with onnxruntime's exact result (bench/models.
reference_session). With int8 activations (quantize_static's default) onnxruntime's x86 build keeps
every Conv whose input tensor another node also reads in float (qnn/onnx/ort_fusion.py); qsynth computes
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
from tvm_integration.qnn.onnx import ort_fusion

pytestmark = pytest.mark.skipif(platform.machine() != "x86_64", reason="onnxruntime's x86 fusions")

SHAPE = (1, 16, 24, 24)


def save_model(path, name: str, nodes, inputs, outputs, inits) -> None:
    """One graph as a model of opset 13 (IR 8, what the quantizers write) saved at ``path``."""
    model = helper.make_model(helper.make_graph(nodes, name, inputs, outputs, inits),
                              opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(path))


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
        "u8u8_per_channel_qoperator": dict(per_channel=True, quant_format=q.QuantFormat.QOperator,
                                           activation_type=q.QuantType.QUInt8, weight_type=q.QuantType.QUInt8),
        "dynamic": None,
        "dynamic_u8_per_channel": dict(dynamic=True, per_channel=True, weight_type=q.QuantType.QUInt8),
    }


def other_options():
    """Options only ``test_float_layers_are_onnxruntimes`` quantizes with."""
    return {"dedicated_pairs": dict(extra_options={"DedicatedQDQPair": True})}


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
        opts = {**options(), **other_options()}[name]
        if opts is None or opts.get("dynamic"):
            ort_quant.quantize_dynamic(str(source), str(path), **{k: v for k, v in (opts or {}).items() if k != "dynamic"})
        else:
            data = iter(feeds(4, 1))

            class Reader(ort_quant.CalibrationDataReader):
                def get_next(self):
                    return next(data, None)
            ort_quant.quantize_static(str(source), str(path), Reader(), **opts)
    return path


def assert_equals_onnxruntime(path, xs: list[dict[str, np.ndarray]]):
    """The compiled model's output "out" equals onnxruntime's exact result on every input of ``xs``."""
    from tvm_integration.qnn.runtime.model import compile_model
    session = reference_session(path)
    model = compile_model(path, threads=1)
    for x in xs:
        np.testing.assert_array_equal(model(x)["out"], session.run(["out"], x)[0])


def differences(path) -> int:
    from tvm_integration.qnn.runtime.model import compile_model
    model = compile_model(path, threads=1)
    session = reference_session(path)
    return sum(int(np.count_nonzero(model(f)[model.outputs[0]] != session.run(None, f)[0])) for f in feeds(3, 2))


@pytest.mark.parametrize("name", list(options()))
def test_quantizer_option_is_exact(source, name):
    assert differences(quantized(source, name)) == 0


@pytest.mark.parametrize("name", ["u8u8_per_channel_qoperator", "dynamic_u8_per_channel"])
def test_weight_zero_points_per_column_run_on_the_tiles(source, name):
    """u8 weights per channel (QGemm, MatMulInteger) whose zero points differ column by column take
    the tiles as ``w - zw`` (arithmetic.nine_bit): all five layers tensorized (exact: above)."""
    from test_u8u8 import tensorized
    from tvm_integration.qnn.onnx.importer import load
    from tvm_integration.qnn.runtime.model import lower
    path = quantized(source, name)
    graph = onnx.load(str(path)).graph
    zero_points = [numpy_helper.to_array(i) for i in graph.initializer if i.name.endswith("zero_point")]
    assert any(z.size > 1 and len(set(z.tolist())) > 1 for z in zero_points)
    assert tensorized(lower(load(path))) == 5


def onnxruntime_float_nodes(path) -> set[str]:
    """The Conv, MatMul, Gemm, Add, Mul and pooling nodes left in float in onnxruntime's optimized model
    (the default session's, which fuses as the exact mode's)."""
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.optimized_model_filepath = str(path.with_suffix(".optimized.onnx"))
    ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    kept = ("Conv", "MatMul", "Gemm", "Add", "Mul", "GlobalAveragePool", "AveragePool")
    return {n.name for n in onnx.load(options.optimized_model_filepath).graph.node if n.domain == "" and n.op_type in kept}


@pytest.mark.parametrize("name, expected", [("s8s8_per_tensor", {"stem", "c1", "add"}), ("u8s8_per_channel", set()),
                                            ("qoperator", set()), ("dedicated_pairs", {"stem", "c1", "add"})])
def test_float_layers_are_onnxruntimes(source, name, expected):
    """ort_fusion.float_layers names the nodes onnxruntime's x86 build leaves in float: with int8
    activations the convs whose input another node reads too (the stem's output is also the skip: stem,
    c1: QDQS8ToU8Transformer leaves that pair int8, ConvNodeGroupSelector refuses int8) and the Add of
    that int8 skip and c2's uint8 output (BinaryNodeGroupSelector); nothing with uint8 activations. With
    DedicatedQDQPair (a Q/DQ pair per reader) the same: CommonSubexpressionElimination merges the pairs
    first (ort_fusion.merged)."""
    path = quantized(source, name)
    assert set(ort_fusion.float_layers(onnx.load(str(path)))) == expected == onnxruntime_float_nodes(path)


def conv_model(path, seed: int, relu: bool = False):
    """DQ(x, int8) -> Conv 3x3 (32 -> 16 channels: K = 288, three of MLAS's K blocks) -> Q, the input
    also read by a second Conv: both run in float on x86. ``relu``: uint8 activations, one Conv read
    once, then a Relu before its Q whose zero point (10) is not the type's least: the Relu is no
    no-op of Q, so onnxruntime does not fuse that Conv either."""
    rng = np.random.default_rng(seed)
    c, m = 32, 16
    x_scale, y_scale = np.float32(0.05), np.float32(0.01)
    w = rng.integers(-127, 128, (m, c, 3, 3)).astype(np.int8)
    w_scale = (rng.uniform(0.5, 1.5, m) / 127 / 16).astype(np.float32)
    kind = np.uint8 if relu else np.int8
    inits = [numpy_helper.from_array(np.array(v, dt), n) for n, v, dt in (
        ("xs", x_scale, np.float32), ("xz", 131 if relu else 3, kind), ("ys", y_scale, np.float32),
        ("yz", 10 if relu else -5, kind))]
    inits += [numpy_helper.from_array(w, "w"), numpy_helper.from_array(w_scale, "ws"),
              numpy_helper.from_array(np.zeros(m, np.int8), "wz")]
    nodes = [helper.make_node("QuantizeLinear", ["input", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"], axis=0)]
    outputs = []
    for k in (1,) if relu else (1, 2):
        nodes += [helper.make_node("Conv", ["xd", "wd"], [f"y{k}"], name=f"conv{k}", pads=[1] * 4, strides=[k, k])]
        if relu:
            nodes += [helper.make_node("Relu", [f"y{k}"], [f"r{k}"])]
        nodes += [helper.make_node("QuantizeLinear", [f"r{k}" if relu else f"y{k}", "ys", "yz"], [f"q{k}"]),
                  helper.make_node("DequantizeLinear", [f"q{k}", "ys", "yz"], [f"out{k}"])]
        outputs.append(helper.make_tensor_value_info(f"out{k}", TensorProto.FLOAT, (1, m, 32 // k, 32 // k)))
    save_model(path, "conv", nodes, [helper.make_tensor_value_info("input", TensorProto.FLOAT, (1, c, 32, 32))],
               outputs, inits)


@pytest.mark.parametrize("relu", [False, True])
def test_float_conv_sums_as_mlas(tmp_path, monkeypatch, relu):
    """The float convs as MLAS sums them: equal to onnxruntime; the integer conv (what qsynth computed
    before) differs where the float sum rounds across a half step."""
    from tvm_integration.qnn.runtime.model import compile_model
    path = tmp_path / "conv.onnx"
    conv_model(path, 0, relu)
    names = ["out1"] if relu else ["out1", "out2"]
    assert set(ort_fusion.float_layers(onnx.load(str(path)))) == {n.replace("out", "conv") for n in names}
    xs = [{"input": np.random.default_rng(seed).uniform(-6, 6, (1, 32, 32, 32)).astype(np.float32)} for seed in range(6)]
    session = reference_session(path)
    want = [session.run(None, x) for x in xs]
    ours = compile_model(path, threads=1)
    for x, w in zip(xs, want):
        for name, expected in zip(names, w):
            np.testing.assert_array_equal(ours(x)[name], expected, err_msg=name)
    monkeypatch.setattr(ort_fusion, "float_layers", lambda model, int8_allowed=False: {})
    integer = compile_model(path, threads=1)
    assert sum(int(np.count_nonzero(integer(x)["out1"] != w[0])) for x, w in zip(xs, want)) > 0


def test_float_conv_weights_are_dequantized_once(tmp_path):
    """The float convs' DQ(constant) weights are read as the float constant they dequantize to, made once
    when the model is compiled (bit-exact: test_float_conv_sums_as_mlas), not dequantized at every run;
    their input's DQ is computed as the conv pads its input (float_conv.conv2d_func's ``dequantize``):
    the conv reads the int8 tensor."""
    from tvm import relax
    from tvm.ir import Constant

    from tvm_integration.qnn.runtime.model import read
    path = tmp_path / "conv.onnx"
    conv_model(path, 0)
    mod = read(path)[0]
    convs = [b.value for block in mod["main"].body.blocks for b in block.bindings if isinstance(b.value, relax.Call)
             and b.value.args and getattr(b.value.args[0], "name_hint", "").startswith("qsynth_float_conv2d")]
    assert len(convs) == 2 and all(isinstance(c.args[1].fields[1], Constant) for c in convs)
    assert all(str(c.args[1].fields[0].ty.dtype) == "int8" for c in convs)


PARAMS = {"Add": (0.09954256, -10, 0.03843492, 15, 0.026444115, -10),      # scale, zero point of a, b, y
          "Mul": (0.05, 3, 0.07, -4, 0.1, 6),
          "GlobalAveragePool": (0.049, 3, 1.0, 0, 0.002, -7),       # y_scale 2 x_scale / 49: halves
          "uint8 Add": (0.09954256, -10, 0.03843492, 15, 0.026444115, 10)}


def binary_model(path, op: str):
    """``a`` -> Q (int8) -> DQ -> ``op`` (with ``b`` -> Q -> DQ for Add and Mul) -> Q -> DQ -> output.
    ``op`` "Add", "Mul", "GlobalAveragePool": ``a``'s integers also read by a second DequantizeLinear (a
    graph output), so that pair stays int8 on x86 while the others become uint8 and onnxruntime runs
    ``op`` in float. "uint8 Add": an Add to uint8, both int8 pairs become uint8 on x86 and it is
    fused. Its inputs: every pair of int8 values for Add and Mul ([1, 256, 16, 16] each), a
    [1, 16, 7, 7] image for GlobalAveragePool."""
    binary, twice = op != "GlobalAveragePool", op != "uint8 Add"
    shape = (1, 256, 16, 16) if binary else (1, 16, 7, 7)
    params = PARAMS[op]
    types = (np.float32, np.int8) * 2 + (np.float32, np.int8 if twice else np.uint8)
    inits = [numpy_helper.from_array(np.array(v, t), n) for n, v, t in zip(("as", "az", "bs", "bz", "ys", "yz"), params, types)]
    nodes = [helper.make_node("QuantizeLinear", ["a", "as", "az"], ["aq"]),
             helper.make_node("DequantizeLinear", ["aq", "as", "az"], ["ad"])]
    nodes += [helper.make_node("DequantizeLinear", ["aq", "as", "az"], ["a_again"])] if twice else []
    if binary:
        nodes += [helper.make_node("QuantizeLinear", ["b", "bs", "bz"], ["bq"]),
                  helper.make_node("DequantizeLinear", ["bq", "bs", "bz"], ["bd"])]
    nodes += [helper.make_node(op.split()[-1], ["ad", "bd"] if binary else ["ad"], ["y"], name="op"),
              helper.make_node("QuantizeLinear", ["y", "ys", "yz"], ["yq"]),
              helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["out"])]
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in ("a", "b")[:1 + binary]]
    outputs = [helper.make_tensor_value_info("out", TensorProto.FLOAT, shape if binary else (*shape[:2], 1, 1))]
    outputs += [helper.make_tensor_value_info("a_again", TensorProto.FLOAT, shape)] if twice else []
    save_model(path, "op", nodes, inputs, outputs, inits)
    if binary:           # the value each int8 code dequantizes to, every (a, b) pair once
        codes = np.arange(-128, 128, dtype=np.float32)
        a, b = np.meshgrid(codes, codes, indexing="ij")
        return [{"a": ((a - params[1]) * params[0]).reshape(shape).astype(np.float32),
                 "b": ((b - params[3]) * params[2]).reshape(shape).astype(np.float32)}]
    return [{"a": np.random.default_rng(seed).uniform(-6, 6, shape).astype(np.float32)} for seed in range(20)]


@pytest.mark.parametrize("op", list(PARAMS))
def test_binary_and_pool_ops(tmp_path, op):
    """An Add, Mul or GlobalAveragePool onnxruntime's x86 build does not fuse (its inputs' and output's
    types differ after the int8 -> uint8 conversion: a residual Add in an S8S8 ResNet) runs as
    dequantize, the float op, quantize: as QLinearAdd, QLinearMul and QLinearGlobalAveragePool, 3 of
    the 65536 sums, 122 of the products and 34 of the 320 means differed. A fused QLinearAdd of int8
    pairs onnxruntime turns uint8 (NNCF's residual Adds) computes in their uint8 values, where the
    int8 values round differently on 4 of the 65536 pairs."""
    path = tmp_path / f"{op}.onnx"
    xs = binary_model(path, op)
    assert set(ort_fusion.float_layers(onnx.load(str(path)))) == (set() if op == "uint8 Add" else {"op"})
    assert_equals_onnxruntime(path, xs)


def maxpool_model(path) -> list[dict[str, np.ndarray]]:
    """NNCF's pattern: DQ -> MaxPool read by a Conv and the residual Add, with no QuantizeLinear after
    the MaxPool (x: uint8; the Conv's output int8, the Add's uint8 after a Relu)."""
    rng = np.random.default_rng(3)
    w = rng.integers(-127, 128, (16, 16, 3, 3)).astype(np.int8)
    inits = [numpy_helper.from_array(np.array(v, t), n) for n, v, t in (
        ("xs", 0.02, np.float32), ("xz", 0, np.uint8), ("ws", 0.002, np.float32), ("wz", 0, np.int8),
        ("cs", 0.05, np.float32), ("cz", 3, np.int8), ("ys", 0.03, np.float32), ("yz", 0, np.uint8))]
    inits.append(numpy_helper.from_array(w, "w"))
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             helper.make_node("MaxPool", ["xd"], ["pool"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"]),
             helper.make_node("Conv", ["pool", "wd"], ["c"], name="conv", pads=[1] * 4),
             helper.make_node("QuantizeLinear", ["c", "cs", "cz"], ["cq"]),
             helper.make_node("DequantizeLinear", ["cq", "cs", "cz"], ["cd"]),
             helper.make_node("Add", ["cd", "pool"], ["sum"], name="add"),
             helper.make_node("Relu", ["sum"], ["relu"]),
             helper.make_node("QuantizeLinear", ["relu", "ys", "yz"], ["yq"]),
             helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["out"])]
    save_model(path, "pool", nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 16, 32, 32))],
               [helper.make_tensor_value_info("out", TensorProto.FLOAT, (1, 16, 16, 16))], inits)
    return [{"x": np.random.default_rng(seed).uniform(0, 5, (1, 16, 32, 32)).astype(np.float32)} for seed in range(4)]


def test_dequantize_carried_past_maxpool(tmp_path):
    """onnxruntime carries the DequantizeLinear past the MaxPool (QDQPropagationTransformer): the Conv and
    the Add then read integers and are fused (QLinearConv, QLinearAdd); qdq_propagation.py does the same
    before the import, where the rewrite saw a float Conv and Add of a float tensor."""
    path = tmp_path / "pool.onnx"
    xs = maxpool_model(path)
    assert_equals_onnxruntime(path, xs)


def brevitas_pool_model(path) -> list[dict[str, np.ndarray]]:
    """Brevitas' pattern: DQ -> MaxPool read by a Conv and by the residual's own QuantizeLinear. onnxruntime
    carries no DequantizeLinear past a MaxPool read twice, so the Conv reads a float tensor: a float Conv
    (32 -> 16 channels, K = 288: three of MLAS's K blocks), its output a graph output, unquantized."""
    rng = np.random.default_rng(5)
    inits = [numpy_helper.from_array(np.array(v, t), n) for n, v, t in (
        ("xs", 0.02, np.float32), ("xz", 0, np.uint8), ("rs", 0.04, np.float32), ("rz", 0, np.int8))]
    inits += [numpy_helper.from_array(rng.integers(-127, 128, (16, 32, 3, 3)).astype(np.int8), "w"),
              numpy_helper.from_array((rng.uniform(0.5, 1.5, 16) / 127 / 16).astype(np.float32), "ws"),
              numpy_helper.from_array(np.zeros(16, np.int8), "wz"),
              numpy_helper.from_array(rng.normal(0, 0.1, 16).astype(np.float32), "b")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             helper.make_node("MaxPool", ["xd"], ["pool"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"], axis=0),
             helper.make_node("Conv", ["pool", "wd", "b"], ["out"], name="conv", pads=[1] * 4),
             helper.make_node("QuantizeLinear", ["pool", "rs", "rz"], ["rq"]),
             helper.make_node("DequantizeLinear", ["rq", "rs", "rz"], ["skip"])]
    save_model(path, "pool", nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 32, 32, 32))],
               [helper.make_tensor_value_info("out", TensorProto.FLOAT, (1, 16, 16, 16)),
                helper.make_tensor_value_info("skip", TensorProto.FLOAT, (1, 32, 16, 16))], inits)
    return [{"x": np.random.default_rng(seed).uniform(0, 5, (1, 32, 32, 32)).astype(np.float32)} for seed in range(3)]


def test_conv_of_a_float_tensor_sums_as_mlas(tmp_path):
    """A Conv whose input no DequantizeLinear carries over is one of onnxruntime's float Convs too: named
    by float_layers (so `qsynth inspect` shows it) and summed as MLAS sums it, bit for bit, not by TVM's
    own conv2d (a sum of another order, and 10x slower on Brevitas' ResNet)."""
    path = tmp_path / "pool.onnx"
    xs = brevitas_pool_model(path)
    assert set(ort_fusion.float_layers(onnx.load(str(path)))) == {"conv"} == onnxruntime_float_nodes(path)
    assert_equals_onnxruntime(path, xs)


def pt2e_pool_model(path) -> list[dict[str, np.ndarray]]:
    """PyTorch PT2E's pattern (torchao's ArmInductorQuantizer, exported by torch.onnx dynamo): int8
    activations, ``Conv -> Relu -> MaxPool -> Q`` with no QuantizeLinear before the MaxPool, a Conv
    without bias."""
    rng = np.random.default_rng(5)
    w = rng.integers(-127, 128, (32, 16, 3, 3)).astype(np.int8)
    inits = [numpy_helper.from_array(np.array(v, t), n) for n, v, t in (
        ("xs", 0.02, np.float32), ("xz", 0, np.int8), ("ws", 0.0021, np.float32), ("wz", 0, np.int8),
        ("ys", 0.11, np.float32), ("yz", -128, np.int8))]
    inits.append(numpy_helper.from_array(w, "w"))
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"]),
             helper.make_node("Conv", ["xd", "wd"], ["c"], name="conv", pads=[1] * 4),
             helper.make_node("Relu", ["c"], ["relu"]),
             helper.make_node("MaxPool", ["relu"], ["pool"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("QuantizeLinear", ["pool", "ys", "yz"], ["yq"]),
             helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["out"])]
    save_model(path, "pt2e", nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 16, 32, 32))],
               [helper.make_tensor_value_info("out", TensorProto.FLOAT, (1, 32, 16, 16))], inits)
    return [{"x": np.random.default_rng(seed).uniform(-2.5, 2.5, (1, 16, 32, 32)).astype(np.float32)} for seed in range(4)]


def test_quantize_carried_back_past_maxpool(tmp_path):
    """onnxruntime carries the QuantizeLinear back past the MaxPool (QDQPropagationTransformer, before it
    carries DequantizeLinears forward): the Relu before it is then a no-op of the Q and the Conv is fused
    (QLinearConv); qdq_propagation.py does the same, where the rewrite saw a float Conv."""
    from tvm_integration.qnn.onnx.importer import load
    from tvm_integration.qnn.runtime.report import layers
    path = tmp_path / "pt2e.onnx"
    xs = pt2e_pool_model(path)
    assert [(r.layer, r.operator) for r in layers(load(path))] == [("conv", "int8")]
    assert_equals_onnxruntime(path, xs)


def pt2e_block_model(path, bias: bool) -> list[dict[str, np.ndarray]]:
    """PyTorch PT2E's residual block (torchao's ArmInductorQuantizer, exported by torch.onnx dynamo): int8
    activations, ``Conv -> Relu -> Q -> DQ -> Conv -> Add(skip) -> Relu``, its float output compared
    bit for bit. onnxruntime computes both Convs in float (their input is read twice): the first with
    its float bias quantized (WeightBiasQuantization: ort_fusion.quantized_biases), the second, with a
    bias, fused with the Add into a FusedConv summing onto the skip (onnx/float_convs.py); without a
    bias, a float Conv and a float Add."""
    rng, c, h = np.random.default_rng(7), 16, 28
    inits = [numpy_helper.from_array(np.array(v, t), n) for n, v, t in (
        ("xs", 0.03, np.float32), ("xz", 0, np.int8), ("ws", 0.004, np.float32), ("wz", 0, np.int8),
        ("ys", 0.05, np.float32), ("yz", -128, np.int8))]
    inits += [numpy_helper.from_array(rng.integers(-127, 128, (c, c, 3, 3)).astype(np.int8), n) for n in ("w1", "w2")]
    inits += [numpy_helper.from_array(rng.standard_normal(c).astype(np.float32), n) for n in ("b1", "b2")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w1", "ws", "wz"], ["w1d"]),
             helper.make_node("DequantizeLinear", ["w2", "ws", "wz"], ["w2d"]),
             helper.make_node("Conv", ["xd", "w1d", *["b1"][:bias]], ["c1"], name="c1", pads=[1] * 4),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("QuantizeLinear", ["r1", "ys", "yz"], ["r1q"]),
             helper.make_node("DequantizeLinear", ["r1q", "ys", "yz"], ["r1d"]),
             helper.make_node("Conv", ["r1d", "w2d", *["b2"][:bias]], ["c2"], name="c2", pads=[1] * 4),
             helper.make_node("Add", ["c2", "xd"], ["sum"], name="add"),
             helper.make_node("Relu", ["sum"], ["out"])]
    save_model(path, "pt2e_block", nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, c, h, h))],
               [helper.make_tensor_value_info("out", TensorProto.FLOAT, (1, c, h, h))], inits)
    return [{"x": np.random.default_rng(seed).uniform(-3, 3, (1, c, h, h)).astype(np.float32)} for seed in range(3)]


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
def test_pt2e_residual_block_is_onnxruntimes(tmp_path, bias):
    """Exact, and ``qsynth inspect`` names both Convs float, each with why (report.layers)."""
    from tvm_integration.qnn.onnx.importer import load
    from tvm_integration.qnn.runtime.report import layers
    path = tmp_path / "block.onnx"
    xs = pt2e_block_model(path, bias)
    rows = {r.layer: r for r in layers(load(path))}
    assert {name: r.operator for name, r in rows.items()} == {"c1": "float", "c2": "float"}
    assert "int8 activations" in rows["c1"].kernel and "reaches no QuantizeLinear" in rows["c2"].kernel
    assert ("FusedConv" in rows["c2"].kernel) == bias
    assert_equals_onnxruntime(path, xs)


def classifier_model(path) -> list[dict[str, np.ndarray]]:
    """NNCF's head: DQ -> GlobalAveragePool -> Q -> DQ -> Flatten -> Gemm (transB, float bias, float
    output), 100 channels into 1003 classes (K and N not multiples of MLAS's 8 lanes and 4 rows)."""
    rng = np.random.default_rng(4)
    k, n = 100, 1003
    w = rng.integers(-127, 128, (n, k)).astype(np.int8)
    inits = [numpy_helper.from_array(np.array(v, t), name) for name, v, t in (
        ("xs", 0.02, np.float32), ("xz", 0, np.uint8), ("ps", 0.01, np.float32), ("pz", 0, np.uint8))]
    inits += [numpy_helper.from_array(w, "w"), numpy_helper.from_array((rng.uniform(0.5, 1.5, n) / 300).astype(
        np.float32), "ws"), numpy_helper.from_array(np.zeros(n, np.int8), "wz"),
        numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), "bias")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             helper.make_node("GlobalAveragePool", ["xd"], ["pool"]),
             helper.make_node("QuantizeLinear", ["pool", "ps", "pz"], ["pq"]),
             helper.make_node("DequantizeLinear", ["pq", "ps", "pz"], ["pd"]),
             helper.make_node("Flatten", ["pd"], ["flat"]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"], axis=0),
             helper.make_node("Gemm", ["flat", "wd", "bias"], ["out"], name="fc", transB=1)]
    save_model(path, "head", nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, k, 7, 7))],
               [helper.make_tensor_value_info("out", TensorProto.FLOAT, (1, n))], inits)
    return [{"x": np.random.default_rng(seed).uniform(0, 5, (1, k, 7, 7)).astype(np.float32)} for seed in range(4)]


def test_float_gemm_of_one_row(tmp_path):
    """The float Gemm of one row (transB, float bias) as MLAS's M = 1 kernel sums it (float_gemv.py);
    the blocked sgemm's order (float_matmul.py) differed in the last bit on most of the 1003 outputs."""
    path = tmp_path / "head.onnx"
    xs = classifier_model(path)
    assert_equals_onnxruntime(path, xs)


def brevitas_head_model(path) -> list[dict[str, np.ndarray]]:
    """Brevitas' QCDQ classifier: DQ(uint8 x) -> Gemm(DQ(Clip(int8 W, -127, 127)), DQ(int32 bias)), float
    output. onnxruntime folds the weight's Clip and fuses the group into QGemm to float32: ``float32(acc +
    bias) * float32(sx * sw)``."""
    rng = np.random.default_rng(4)
    k, n = 64, 100
    xs, ws = np.float32(0.02), np.float32(0.003)
    inits = [numpy_helper.from_array(np.array(v, t), name) for name, v, t in (
        ("xs", xs, np.float32), ("xz", 0, np.uint8), ("ws", ws, np.float32), ("wz", 0, np.int8),
        ("bs", xs * ws, np.float32), ("bz", 0, np.int32), ("lo", -127, np.int8), ("hi", 127, np.int8))]
    inits += [numpy_helper.from_array(rng.integers(-127, 128, (n, k)).astype(np.int8), "w"),
              numpy_helper.from_array(rng.integers(-20000, 20000, n).astype(np.int32), "b")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             helper.make_node("Clip", ["w", "lo", "hi"], ["wc"]),
             helper.make_node("DequantizeLinear", ["wc", "ws", "wz"], ["wd"]),
             helper.make_node("DequantizeLinear", ["b", "bs", "bz"], ["bd"]),
             helper.make_node("Gemm", ["xd", "wd", "bd"], ["out"], name="fc", transB=1)]
    save_model(path, "brevitas_head", nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, k))],
               [helper.make_tensor_value_info("out", TensorProto.FLOAT, (1, n))], inits)
    return [{"x": np.random.default_rng(seed).uniform(0, 5, (1, k)).astype(np.float32)} for seed in range(4)]


def test_gemm_of_clipped_weights_to_float_is_qgemm(tmp_path):
    """The integer dense with the bias in the accumulator, as QGemm computes it; the Gemm was left in float
    while the weight's Clip stood (73 of 100 outputs differed, by up to 1.9e-6; Brevitas' small ResNet:
    212 of 300 logits)."""
    path = tmp_path / "head.onnx"
    xs = brevitas_head_model(path)
    assert_equals_onnxruntime(path, xs)


def pt2e_linear_model(path) -> list[dict[str, np.ndarray]]:
    """PyTorch PT2E's Linear as torch.onnx writes it (a Hugging Face BERT's projections): int8 x,
    ``MatMul(DQ(x), Transpose(DQ(W))) + bias`` with a float bias and output, [1, 32, 256] x [256, 64]."""
    rng = np.random.default_rng(5)
    k, n = 256, 64
    inits = [numpy_helper.from_array(np.array(v, t), name) for name, v, t in (
        ("xs", 0.03, np.float32), ("xz", -5, np.int8), ("ws", 0.004, np.float32), ("wz", 0, np.int8))]
    inits += [numpy_helper.from_array(rng.integers(-127, 128, (n, k)).astype(np.int8), "w"),
              numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), "bias")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"]),
             helper.make_node("Transpose", ["wd"], ["wt"], perm=[1, 0]),
             helper.make_node("MatMul", ["xd", "wt"], ["mm"], name="linear"),
             helper.make_node("Add", ["mm", "bias"], ["out"])]
    save_model(path, "pt2e_linear", nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 32, k))],
               [helper.make_tensor_value_info("out", TensorProto.FLOAT, (1, 32, n))], inits)
    return [{"x": np.random.default_rng(seed).standard_normal((1, 32, k)).astype(np.float32)} for seed in range(3)]


def test_pt2e_linear_of_transposed_weights_is_a_float_gemm(tmp_path):
    """onnxruntime folds DQ(W) -> Transpose -> Q (the pair QDQ propagation puts after the Transpose) into
    a constant (qdq_propagation.folded_units), so the MatMul is one by constant weights, and MatMulAddFusion
    makes it and its bias a float Gemm, summed onto the bias. Read as a matmul of two activations with the
    bias added after, most outputs differed in the last bit (a PT2E Hugging Face BERT: 97 090 of 98 304)."""
    path = tmp_path / "linear.onnx"
    xs = pt2e_linear_model(path)
    assert_equals_onnxruntime(path, xs)
