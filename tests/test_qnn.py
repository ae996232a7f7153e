"""The QNN pipeline against onnxruntime (CPU provider, default optimizations: its integer kernels):
every compiled model must reproduce onnxruntime's output exactly."""
from __future__ import annotations

import logging
import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from tvm import tirx

from tvm_integration.bench import int8_models
from tvm_integration.bench.models import reference_session, random_inputs
from tvm_integration.qnn.onnx.importer import load
from tvm_integration.qnn.semantics.errors import ModelError
from tvm_integration import CompiledModel, compile_model  # the documented entry point
from tvm_integration.qnn.prim.schedules import SCHEDULED, TENSORIZED
from tvm_integration.qnn.lower import pipeline
from tvm_integration.qnn.runtime.model import build, lower, read

logging.getLogger("root").setLevel(logging.ERROR)      # quantize_static's pre-processing advice

TINY = {"resnet": lambda: int8_models.resnet(32, (8, 16, 16, 32), 10),
        "resnet_2_stages": lambda: int8_models.resnet(32, (8, 16), 10),     # every op kind of the four stages
        "mobilenet_v2": lambda: int8_models.mobilenet_v2(32, ((1, 8, 1, 1), (6, 12, 2, 2), (6, 16, 2, 2)), 8, 64, 10),
        "mobilenet_v3": lambda: int8_models.mobilenet_v3(32, ((3, 16, 16, True, "relu", 2), (3, 24, 16, False, "relu", 1),
                                                         (5, 48, 24, True, "hardswish", 2)), 8, 64, 10),
        "silu_fpn": lambda: int8_models.silu_fpn(32, 16, 10),
        "mlp": lambda: int8_models.mlp()}
QUANTIZATIONS = {"qdq_per_channel": {}, "qdq_per_tensor": {"per_channel": False},
                 "qdq_s8_activations": {"activations": "s8"}, "qoperator": {"fmt": "qoperator"},
                 "qdq_u8_weights": {"weights": "u8", "per_channel": False}}
# the four-stage ResNet (its 32 channels and 1x1 spatial last stage) quantized per channel is the model of
# ``qsynth demo --quick`` (the same bytes): compiled as here and compared with onnxruntime's exact mode on
# the same three inputs by test_demo's quick run; the other formats on the two stages, which hold every op
# kind of the four
CASES = [("resnet_2_stages", "qoperator"), ("resnet_2_stages", "qdq_s8_activations"),
         ("mobilenet_v2", "qdq_per_channel"), ("mobilenet_v2", "qdq_per_tensor"), ("mobilenet_v2", "qoperator"),
         ("mobilenet_v3", "qdq_per_channel"), ("silu_fpn", "qdq_per_channel"), ("silu_fpn", "qoperator"),
         ("silu_fpn", "qdq_s8_activations"), ("mlp", "qdq_per_channel"), ("mlp", "qoperator"), ("mlp", "qdq_u8_weights")]


def lowered_and_compiled(path):
    """The lowered module of the model at ``path`` (what a test reads: its kinds, its tiles) and the model
    built from it, as compile_model builds it: one lowering for both."""
    mod, inputs, outputs = read(path)
    mod = pipeline.lower(mod)
    return mod, build(mod, inputs, outputs, threads=1)


def assert_bit_exact(path, runs=3, seed=0):
    """The compiled model equals onnxruntime on ``runs`` random inputs; returns it and its lowered module."""
    mod, model = lowered_and_compiled(path)
    session = reference_session(path)
    rng = np.random.default_rng(seed)
    for _ in range(runs):
        feeds = random_inputs(model.inputs, rng)
        ours = model(feeds)
        for name, expected in zip(model.outputs, session.run(None, feeds)):
            np.testing.assert_array_equal(ours[name], expected)
    return model, mod


@pytest.mark.parametrize("name,quantization", CASES, ids=[f"{m}-{q}" for m, q in CASES])
def test_models_bit_exact_with_onnxruntime(tmp_path, name, quantization):
    path = int8_models.quantize(TINY[name](), tmp_path / f"{name}.onnx", **QUANTIZATIONS[quantization])
    assert_bit_exact(path)


def test_every_stage_is_bit_exact(tmp_path):
    """The rewritten and the legalized module, built with TVM's defaults, already match onnxruntime:
    the arithmetic is right before any kernel is involved. Two stages of the tiny ResNet hold every op
    kind of four (the 7x7 stem, 3x3 convs of stride 1 and 2, the 1x1 stride-2 shortcut, residual adds,
    pools, the classifier), and TVM's default schedules compile slowly: 16 s of CPU here against 25."""
    import tvm
    from tvm import relax
    path = int8_models.quantize(TINY["resnet_2_stages"](), tmp_path / "r.onnx", weights="u8", per_channel=False)
    model = load(path)
    session = reference_session(path)
    feeds = {"input": np.random.default_rng(3).standard_normal((1, 3, 32, 32)).astype(np.float32)}
    expected = session.run(None, feeds)[0]
    for stage in ("rewrite", "legalize"):
        vm = relax.VirtualMachine(tvm.compile(lower(model, stage=stage), target="llvm"), tvm.cpu())
        np.testing.assert_array_equal(vm["main"](tvm.runtime.tensor(feeds["input"])).numpy(), expected)


@pytest.fixture(scope="module")
def tiny_resnet(tmp_path_factory):
    """The tiny ResNet quantized per channel, lowered once for the tests that read its functions."""
    return lower(load(int8_models.quantize(TINY["resnet"](), tmp_path_factory.mktemp("resnet") / "r.onnx")))


def test_compiled_model_runs_kernels_and_no_default_loops(tiny_resnet):
    funcs = [f for f in tiny_resnet.functions.values() if isinstance(f, tirx.PrimFunc)]
    tensorized = [f for f in funcs if TENSORIZED in f.attrs]
    assert len(tensorized) == 21        # 20 convolutions and the fully connected layer
    assert all(TENSORIZED in f.attrs or SCHEDULED in f.attrs for f in funcs)


def single_conv(tmp_path, x_shape, w, stride, pads, group, x_scale, x_zp, w_scale, y_scale, y_zp, bias=None,
                x_type=TensorProto.UINT8, w_zp=0):
    """One QLinearConv node (QOperator), as onnxruntime's own tests write them; ``w_zp``: the weights'
    zero point (of w's type)."""
    co, k = w.shape[0], w.shape[2]
    out_hw = [(x_shape[2 + i] + pads[i] + pads[i + 2] - k) // stride + 1 for i in (0, 1)]
    inits = [numpy_helper.from_array(np.array(x_scale, np.float32), "xs"),
             numpy_helper.from_array(np.array(x_zp, helper.tensor_dtype_to_np_dtype(x_type)), "xz"),
             numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.asarray(w_scale, np.float32), "ws"),
             numpy_helper.from_array(np.full(np.asarray(w_scale).shape, w_zp, w.dtype), "wz"),
             numpy_helper.from_array(np.array(y_scale, np.float32), "ys"),
             numpy_helper.from_array(np.array(y_zp, helper.tensor_dtype_to_np_dtype(x_type)), "yz")]
    inputs = ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"]
    if bias is not None:
        inits.append(numpy_helper.from_array(bias.astype(np.int32), "b"))
        inputs.append("b")
    node = helper.make_node("QLinearConv", inputs, ["y"], strides=[stride] * 2, pads=pads, group=group)
    graph = helper.make_graph([node], "conv", [helper.make_tensor_value_info("x", x_type, x_shape)],
                              [helper.make_tensor_value_info("y", x_type, [1, co, *out_hw])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = int8_models.IR_VERSION
    path = tmp_path / "conv.onnx"
    onnx.save(model, str(path))
    return path


GEOMETRIES = [  # (C, H, W), O, k, stride, pads (top, left, bottom, right), groups
    ((5, 9, 11), 7, 3, 1, [1, 1, 1, 1], 1),          # nothing a multiple of a tile
    ((16, 12, 12), 50, 3, 2, [1, 0, 2, 1], 1),        # stride 2, asymmetric padding, 50 = 48 + 2 columns
    ((3, 15, 15), 8, 7, 2, [3, 3, 3, 3], 1),          # the 7x7 stem
    ((24, 6, 6), 24, 3, 1, [1, 1, 1, 1], 24),         # depthwise
    ((16, 7, 7), 32, 1, 1, [0, 0, 0, 0], 2),          # grouped 1x1
]


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=[f"c{g[0][0]}o{g[1]}k{g[2]}s{g[3]}g{g[5]}" for g in GEOMETRIES])
def test_qlinearconv_geometries(tmp_path, geometry):
    (c, h, w_), o, k, stride, pads, groups = geometry
    rng = np.random.default_rng(c * o)
    weight = rng.integers(-128, 128, (o, c // groups, k, k)).astype(np.int8)
    weight.flat[0] = -128                                                   # -128 x -128 (with x = 0 at zp 128)
    path = single_conv(tmp_path, [1, c, h, w_], weight, stride, pads, groups, 0.02, 128,
                       (rng.random(o) * 0.02 + 0.001).astype(np.float32), 0.9, 7,
                       bias=rng.integers(-3000, 3000, o))
    assert_bit_exact(path, seed=c)


def test_requantize_ties_round_half_to_even(tmp_path):
    """Scales 1 x 1 / 2: every odd accumulator is a tie; onnxruntime rounds them to even."""
    weight = np.ones((4, 3, 1, 1), np.int8)
    path = single_conv(tmp_path, [1, 3, 4, 4], weight, 1, [0] * 4, 1, 1.0, 0, np.ones(4, np.float32), 2.0, 0)
    model, _ = assert_bit_exact(path)
    x = np.random.default_rng(1).integers(0, 4, (1, 3, 4, 4)).astype(np.uint8)
    y = model({"x": x})["y"]
    assert set(np.unique(x.sum(1) % 2)) == {0, 1}                          # ties present
    np.testing.assert_array_equal(y[0, 0], np.round(x.sum(1)[0].astype(np.float64) / 2))


def test_signed_activations_qlinearconv(tmp_path):
    rng = np.random.default_rng(5)
    weight = rng.integers(-128, 128, (9, 6, 3, 3)).astype(np.int8)
    path = single_conv(tmp_path, [1, 6, 8, 8], weight, 1, [1, 1, 1, 1], 1, 0.05, -3, np.float32(0.01), 0.7, 2,
                       x_type=TensorProto.INT8)
    assert_bit_exact(path)


def test_save_load_and_profile(tmp_path, capfd):
    path = int8_models.quantize(TINY["mlp"](), tmp_path / "m.onnx")
    model = compile_model(path, threads=1)
    feeds = random_inputs(model.inputs, np.random.default_rng(0))
    capfd.readouterr()
    model.save(tmp_path / "m.so")
    assert "Scope Saving" not in capfd.readouterr().err      # TVM's debug line per memory scope
    again = CompiledModel.load(tmp_path / "m.so", threads=1)
    np.testing.assert_array_equal(again(feeds)[model.outputs[0]], model(feeds)[model.outputs[0]])
    assert "qsynth_dense" in [name for name, _, _ in model.profile(feeds)]
    with pytest.raises(ModelError, match="not a writable directory"):
        model.save(tmp_path / "missing" / "m.so")
    assert not (tmp_path / "missing").exists()


def test_bad_inputs_one_line_errors(tmp_path):
    path = int8_models.quantize(TINY["mlp"](), tmp_path / "m.onnx")
    model = compile_model(path, threads=1)
    x = np.zeros((4, 64), np.float32)
    with pytest.raises(ModelError, match=r"missing \['input'\]"):
        model({"x": x})
    with pytest.raises(ModelError, match=r"must be float32\[4, 64\], got float32\[4, 63\]"):
        model({"input": x[:, :63]})
    with pytest.raises(ModelError, match=r"must be float32\[4, 64\], got float64"):
        model({"input": x.astype(np.float64)})


def test_bad_models_refused(tmp_path):
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"not a protobuf at all")
    with pytest.raises(ModelError, match="is not a valid ONNX model"):
        load(junk)
    float_model = tmp_path / "float.onnx"
    onnx.save(TINY["mlp"](), str(float_model))
    with pytest.raises(ModelError, match="is a float model"):
        load(float_model)
    assert load(float_model, allow_float=True) is not None
    nodes = [helper.make_node("DequantizeLinear", ["x", "s", "z"], ["f"], name="dq"),
             helper.make_node("Multinomial", ["f"], ["m"], name="odd_one"),
             helper.make_node("Multinomial", ["f"], ["y"], name="other_one")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.UINT8, [2, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, [2, 1])],
                              [numpy_helper.from_array(np.array(0.1, np.float32), "s"),
                               numpy_helper.from_array(np.array(0, np.uint8), "z")])
    odd = tmp_path / "odd.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(odd))
    with pytest.raises(ModelError, match=r"unsupported operators: Multinomial \(odd_one\), Multinomial \(other_one\)$"):
        load(odd)


def _qlinearadd_candidates(ra, rb, za, zb, zc):
    """Rounded outputs over every (a, b) pair for a fixed part computed with and without an FMA."""
    from tvm_integration.qnn.semantics.arithmetic import fma32
    a, b = (g.astype(np.float32).ravel() for g in np.meshgrid(np.arange(256), np.arange(256), indexing="ij"))
    fused = np.float32(np.float32(zc) - fma32(ra, np.float32(za), np.float32(rb * np.float32(zb))))
    plain = np.float32(np.float32(zc) - np.float32(np.float32(ra * np.float32(za)) + np.float32(rb * np.float32(zb))))
    return [np.rint(np.float32(np.longdouble(a) * ra + np.longdouble(np.float32(np.longdouble(b) * rb + fixed))))
            for fixed in (fused, plain)]


def test_qlinearadd_fixed_part_as_onnxruntime(tmp_path):
    """A QLinearAdd whose output over all 65536 (a, b) pairs depends on whether the fixed part
    ``zc - (ra za + rb zb)`` is rounded once (an FMA) or twice: ours must match onnxruntime on all."""
    rng = np.random.default_rng(11)
    while True:         # parameters where the two roundings give different outputs somewhere
        sa, sb, sc = (np.float32(rng.random() * 0.05 + 0.002) for _ in range(3))
        za, zb, zc = (int(rng.integers(0, 256)) for _ in range(3))
        ra, rb = np.float32(sa / sc), np.float32(sb / sc)
        fused, plain = _qlinearadd_candidates(ra, rb, za, zb, zc)
        if np.any(np.clip(fused, 0, 255) != np.clip(plain, 0, 255)):
            break
    values = [(sa, "sa"), (np.uint8(za), "za"), (sb, "sb"), (np.uint8(zb), "zb"), (sc, "sc"), (np.uint8(zc), "zc")]
    node = helper.make_node("QLinearAdd", ["a", "sa", "za", "b", "sb", "zb", "sc", "zc"], ["y"], domain="com.microsoft")
    graph = helper.make_graph([node], "add", [helper.make_tensor_value_info(n, TensorProto.UINT8, [65536]) for n in "ab"],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, [65536])],
                              [numpy_helper.from_array(np.array(v), n) for v, n in values])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = int8_models.IR_VERSION
    onnx.save(model, str(tmp_path / "add.onnx"))
    compiled = compile_model(tmp_path / "add.onnx", threads=1)
    a, b = (g.astype(np.uint8).ravel() for g in np.meshgrid(np.arange(256), np.arange(256), indexing="ij"))
    expected = reference_session(tmp_path / "add.onnx").run(None, {"a": a, "b": b})[0]
    np.testing.assert_array_equal(compiled({"a": a, "b": b})["y"], expected)


def _mul_model(path, form: str, dtype, params, b_shape):
    """``Q(DQ(a) * DQ(b))`` (QDQ) or QLinearMul (QOperator), ``a`` of shape [1, 1, 256, 256]."""
    (sa, za), (sb, zb), (sc, zc) = params
    elem = {np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8}[dtype]
    values = [(np.float32(sa), "sa"), (dtype(za), "za"), (np.float32(sb), "sb"), (dtype(zb), "zb"),
              (np.float32(sc), "sc"), (dtype(zc), "zc")]
    if form == "qdq":
        nodes = [helper.make_node("DequantizeLinear", ["a", "sa", "za"], ["da"]),
                 helper.make_node("DequantizeLinear", ["b", "sb", "zb"], ["db"]),
                 helper.make_node("Mul", ["da", "db"], ["f"]), helper.make_node("QuantizeLinear", ["f", "sc", "zc"], ["y"])]
    else:
        nodes = [helper.make_node("QLinearMul", ["a", "sa", "za", "b", "sb", "zb", "sc", "zc"], ["y"], domain="com.microsoft")]
    graph = helper.make_graph(nodes, "mul", [helper.make_tensor_value_info("a", elem, [1, 1, 256, 256]),
                                             helper.make_tensor_value_info("b", elem, list(b_shape))],
                              [helper.make_tensor_value_info("y", elem, [1, 1, 256, 256])],
                              [numpy_helper.from_array(np.array(v), n) for v, n in values])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = int8_models.IR_VERSION
    onnx.save(model, str(path))


@pytest.mark.parametrize("form, dtype, params, b_shape", [
    # an odd output zero point: onnxruntime adds it in float32 before rounding; DQ * DQ / sc rounded
    # and then offset (the float path as imported) differed on 198 of the 65536 pairs
    ("qdq", np.uint8, ((0.1, 100), (0.004, 3), (0.02, 7)), (1, 1, 256, 256)),
    ("qdq", np.int8, ((0.0907, 121), (0.0854, 32), (0.0402, -3)), (1, 1, 256, 256)),
    ("qoperator", np.uint8, ((0.0173, 131), (0.0291, 77), (0.0517, 129)), (1, 1, 256, 256)),
    ("qdq", np.uint8, ((0.05, 128), (0.0039, 0), (0.031, 121)), (1, 1, 256, 1)),       # b broadcast
])
def test_qlinearmul_as_onnxruntime(tmp_path, form, dtype, params, b_shape):
    """Every (a, b) pair of 8-bit values through a quantized Mul: bit-exact with onnxruntime's
    QLinearMul (its QDQ fusion of Mul)."""
    path = tmp_path / "mul.onnx"
    _mul_model(path, form, dtype, params, b_shape)
    lo = np.iinfo(dtype).min
    a = np.repeat((np.arange(256) + lo).astype(dtype)[:, None], 256, 1).reshape(1, 1, 256, 256)
    b = np.repeat((np.arange(256) + lo).astype(dtype)[None, :], 256, 0).reshape(1, 1, 256, 256)
    b = b if b_shape[-1] == 256 else a[..., :1][..., ::-1, :].copy()
    expected = reference_session(path).run(None, {"a": a, "b": b})[0]
    np.testing.assert_array_equal(compile_model(path, threads=1)({"a": a, "b": b})["y"], expected)


@pytest.mark.parametrize("c_shape, constant_first", [((1, 8, 1, 1), False), ((1, 8, 1, 1), True), ((), False)])
def test_mul_by_a_quantized_constant_as_onnxruntime(tmp_path, c_shape, constant_first):
    """``Q(DQ(x) * DQ(c))`` with ``c`` a quantized initializer (a per-channel scale, a scalar), every
    u8 value of x: onnxruntime fuses it into QLinearMul like a Mul of two activations (the float
    product differed on 76 of the 8192 outputs of the first case)."""
    (sa, za), (sb, zb), (sc, zc) = (0.1, 100), (0.004, 3), (0.02, 7)
    c = np.random.default_rng(0).integers(0, 256, c_shape).astype(np.uint8)
    operands = ["dc", "dx"] if constant_first else ["dx", "dc"]
    nodes = [helper.make_node("DequantizeLinear", ["x", "sa", "za"], ["dx"]),
             helper.make_node("DequantizeLinear", ["c", "sb", "zb"], ["dc"]),
             helper.make_node("Mul", operands, ["f"]), helper.make_node("QuantizeLinear", ["f", "sc", "zc"], ["y"])]
    shape = [1, 8, 256, 4]
    values = [(np.float32(sa), "sa"), (np.uint8(za), "za"), (np.float32(sb), "sb"), (np.uint8(zb), "zb"),
              (np.float32(sc), "sc"), (np.uint8(zc), "zc"), (c, "c")]
    graph = helper.make_graph(nodes, "mul", [helper.make_tensor_value_info("x", TensorProto.UINT8, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, shape)],
                              [numpy_helper.from_array(np.array(v), n) for v, n in values])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = int8_models.IR_VERSION
    path = tmp_path / "mul.onnx"
    onnx.save(model, str(path))
    x = np.broadcast_to(np.arange(256, dtype=np.uint8)[None, None, :, None], shape).copy()
    expected = reference_session(path).run(None, {"x": x})[0]
    np.testing.assert_array_equal(compile_model(path, threads=1)({"x": x})["y"], expected)


@pytest.mark.parametrize("channels", [24, 40])
def test_elementwise_channels_16_does_not_divide_are_one_vector(channels):
    """An NHWC add on 24 channels (MobileNetV2): the channel axis is one contiguous vector; 16 lanes of
    the fused axis, each cut by div/mod, were gathered (0.139 ms instead of 0.014 for 56x56x24)."""
    import tvm
    from tvm import te
    from tvm_integration.qnn.prim.schedules import schedule
    a, b = (te.placeholder((1, 5, 7, channels), "uint8", name=n) for n in "ab")
    out = te.compute(a.shape, lambda *i: te.max(a(*i), b(*i)), name="maximum")
    func = schedule(te.create_prim_func([a, b, out]))
    assert re.findall(r"T\.vectorized\((?:T\.int64\()?(\d+)", func.script()) == [str(channels)]
    x, y = (np.random.default_rng(i).integers(0, 256, (1, 5, 7, channels), dtype=np.uint8) for i in (1, 2))
    result = tvm.runtime.empty((1, 5, 7, channels), "uint8")
    tvm.compile(func, target="llvm")(tvm.runtime.tensor(x), tvm.runtime.tensor(y), result)
    np.testing.assert_array_equal(result.numpy(), np.maximum(x, y))


def test_a_max_pool_over_many_channels_vectorizes_the_channels_alone():
    """An NHWC 3x3 stride-1 max pool over 96 channels (GoogLeNet's inception pools: 192-832): the
    channel axis split into vectors of 16 under a parallel loop over pixels and channel blocks; 16
    lanes of the fused axis each tested the window on their own (GoogLeNet's pools 8.98 of its 25.4
    CPU ms on Zen 3, 0.43 in onnxruntime)."""
    import tvm
    from tvm import te
    from tvm_integration.qnn.prim.schedules import schedule
    from tvm_integration.qnn.semantics.arithmetic import max_pool2d
    x = te.placeholder((1, 6, 5, 96), "uint8", name="x")
    out = max_pool2d(x, pool=(3, 3), strides=(1, 1), padding=(1, 1, 1, 1), layout="NHWC")
    func = schedule(te.create_prim_func([x, out]))
    script = func.script()
    [lane] = re.findall(r"for (\w+) in T\.vectorized\((?:T\.int64\()?16\)", script)
    bindings = dict(re.findall(r"(v_\w+) = T\.axis\.spatial\([^,]+, (.*)\)$", script, re.M))
    assert lane in bindings["v_ch"] and not any(lane in bindings[v] for v in ("v_n", "v_i", "v_j"))
    data = np.random.default_rng(3).integers(0, 256, (1, 6, 5, 96), dtype=np.uint8)
    padded = np.pad(data, ((0, 0), (1, 1), (1, 1), (0, 0)))
    want = np.max([padded[:, i:i + 6, j:j + 5] for i in range(3) for j in range(3)], axis=0)
    result = tvm.runtime.empty((1, 6, 5, 96), "uint8")
    tvm.compile(func, target="llvm")(tvm.runtime.tensor(data), result)
    np.testing.assert_array_equal(result.numpy(), want)


@pytest.mark.parametrize("stride", [1, 2])
def test_a_max_pool_tests_its_window_only_at_the_edges(stride):
    """A model's NHWC max pool (the qnn.op attributes bind gives it), 3x3 over 9x11x32 padded by one: the row
    and column loops partitioned, so that the windows inside the input read their nine taps with no bound
    test (lowered through TVM's LoopPartition), and only the edges test (GoogLeNet's pools on Cortex-A76's
    N1 model, 1.99 -> 1.10 Mcycles). As numpy's max over the window."""
    import tvm
    from tvm import s_tir, te, tirx
    from tvm_integration.qnn.prim.schedules import schedule
    from tvm_integration.qnn.semantics.arithmetic import max_pool2d
    x = te.placeholder((1, 9, 11, 32), "uint8", name="x")
    out = max_pool2d(x, pool=(3, 3), strides=(stride, stride), padding=(1, 1, 1, 1), layout="NHWC")
    func = schedule(te.create_prim_func([x, out]).with_attrs({"qnn.op": "max_pool2d", "qnn.layout": "NHWC"}))
    lowered = tvm.ir.transform.Sequential([
        s_tir.transform.LowerInitBlock(), s_tir.transform.ConvertBlocksToOpaque(), s_tir.transform.LowerOpaqueBlock(),
        tirx.transform.FlattenBuffer(), s_tir.transform.LoopPartition(), tirx.transform.StmtSimplify()])(
        tvm.IRModule({"main": func}))
    stores = [line for line in lowered.script().splitlines() if re.match(r"\s*max_pool\w*\[", line)]
    assert any("if_then_else" not in line for line in stores)
    data = np.random.default_rng(4).integers(0, 256, (1, 9, 11, 32), dtype=np.uint8)
    padded = np.pad(data, ((0, 0), (1, 1), (1, 1), (0, 0)))
    oh, ow = (9 - 1) // stride + 1, (11 - 1) // stride + 1
    want = np.max([padded[:, i:i + stride * oh:stride, j:j + stride * ow:stride] for i in range(3) for j in range(3)],
                  axis=0)
    result = tvm.runtime.empty(want.shape, "uint8")
    tvm.compile(func, target="llvm")(tvm.runtime.tensor(data), result)
    np.testing.assert_array_equal(result.numpy(), want)


def test_cli_run_compile_and_errors(tmp_path, capsys, monkeypatch):
    from qsynth.cli import main
    monkeypatch.setenv("QSYNTH_MODEL_CACHE", str(tmp_path / "cache" / "qsynth" / "models"))      # run's compiled-model cache
    path = int8_models.quantize(TINY["mlp"](), tmp_path / "m.onnx", fmt="qoperator")
    x = np.random.default_rng(4).standard_normal((4, 64)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    assert main(["run", str(path), "--input", str(tmp_path / "x.npy"), "--output", str(tmp_path / "y.npy"),
                 "--threads", "1"]) == 0
    expected = reference_session(path).run(None, {"input": x})[0]
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), expected)
    assert len(list((tmp_path / "cache" / "qsynth" / "models").glob("*.so"))) == 1   # kept for the next run
    assert main(["run", str(path), "--input", f"input={tmp_path / 'x.npy'}", "--output", str(tmp_path / "y2.npy"),
                 "--profile"]) == 0
    assert "qsynth_dense" in capsys.readouterr().out
    np.testing.assert_array_equal(np.load(tmp_path / "y2.npy"), np.load(tmp_path / "y.npy"))
    assert main(["compile", str(path), "-o", str(tmp_path / "m.so")]) == 0
    assert (tmp_path / "m.so").is_file() and (tmp_path / "m.so.json").is_file()
    capsys.readouterr()

    np.save(tmp_path / "bad.npy", x[:, :60])
    (tmp_path / "junk.onnx").write_bytes(b"junk")
    failures = [(["run", str(path), "--input", str(tmp_path / "bad.npy"), "--output", str(tmp_path / "z.npy")],
                 "must be float32[4, 64], got float32[4, 60]"),
                (["run", str(tmp_path / "junk.onnx"), "--input", str(tmp_path / "x.npy"), "--output",
                  str(tmp_path / "z.npy")], "is not a valid ONNX model"),
                (["run", str(path), "--input", str(tmp_path / "x.npy"), "--output", str(tmp_path / "no" / "z.npy")],
                 "is not a writable directory")]        # --target neon: tests/test_neon_models.py
    for argv, message in failures:
        assert main(argv) == 1
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1, err
    assert main(["compile", str(path), "-o", str(tmp_path / "z.so"), "--target", "sparc"]) == 2
    assert not list(tmp_path.glob("z.*"))


def test_run_refuses_a_target_this_host_cannot_run(tmp_path, capsys, monkeypatch):
    """run executes what it builds: --target amx on a host without AMX (recorded as selection.usable's
    answer there, so every host runs this) is one line, exit 2, and nothing written or compiled."""
    from qsynth.cli import main
    from tvm_integration.kernels import selection
    monkeypatch.setattr(selection, "usable", lambda kernel: "host CPU lacks amx_int8")
    path = int8_models.quantize(TINY["mlp"](), tmp_path / "m.onnx", fmt="qoperator")
    np.save(tmp_path / "x.npy", np.zeros((4, 64), np.float32))
    assert main(["run", str(path), "--input", str(tmp_path / "x.npy"), "--output", str(tmp_path / "y.npy"),
                 "--target", "amx"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--target amx: this host cannot run" in err and "amx_int8" in err, err
    assert not (tmp_path / "y.npy").exists() and not list(tmp_path.glob(".m.onnx.*"))


def test_integer_graph_of_silu_resize_concat(tmp_path):
    """SiLU, nearest Resize and a Concat of differently scaled tensors (silu_fpn) lower to integer ops
    alone: lookups (each SiLU one, its mul folded: one_tensor_mul.py), the integer resize and concat, in
    NHWC: no float op and no transpose between the input's quantize and the output's dequantize."""
    path = int8_models.quantize(TINY["silu_fpn"](), tmp_path / "s.onnx")
    mod = lower(load(path))
    funcs = {g.name_hint: f for g, f in mod.functions.items() if isinstance(f, tirx.PrimFunc)}
    kinds = sorted({str(f.attrs["qnn.op"]) for f in funcs.values() if f.attrs and "qnn.op" in f.attrs})
    assert "lookup" in kinds and "mul" not in kinds
    assert not [n for n in funcs if re.match(r"(sigmoid|multiply|tir_)", n)], sorted(funcs)
    assert [k for k in kinds if "quantize" in k] == ["dequantize", "quantize"]
    assert not transposed_images(mod)


def transposed_images(mod) -> list:
    """The shapes of the transposes of a lowered model other than those of pooled [1, C, 1, 1] vectors."""
    shapes = [b.value.ty.shape for b in mod["main"].body.blocks[0].bindings
              if hasattr(b.value, "args") and "transpose" in str(b.value.args[0]) and len(b.value.ty.shape) == 4]
    return [s for s in shapes if int(s[2]) * int(s[3]) != 1]


def op_kinds(mod) -> list[str]:
    """The ``qnn.op`` kinds of a lowered model's functions, in the module's order."""
    return [str(f.attrs["qnn.op"]) for f in mod.functions.values()
            if isinstance(f, tirx.PrimFunc) and f.attrs and "qnn.op" in f.attrs]


def test_squeeze_and_excitation_stays_nhwc(tmp_path):
    """MobileNetV3's squeeze-and-excitation multiplies the image by a [1, C, 1, 1] scale: broadcast in
    NHWC as in NCHW, so no transposes to NCHW and back around it (three per block before)."""
    path = int8_models.quantize(TINY["mobilenet_v3"](), tmp_path / "m.onnx")
    assert not transposed_images(lower(load(path)))


LOOKUP_OPS = [("Sigmoid", {}), ("HardSigmoid", {"alpha": 1 / 6, "beta": 0.5}), ("HardSwish", {}),
              ("LeakyRelu", {"alpha": 0.1}), ("Tanh", {})]


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("op,attrs", LOOKUP_OPS, ids=[o[0] for o in LOOKUP_OPS])
def test_elementwise_ops_are_exact_lookup_tables(tmp_path, op, attrs, dtype):
    """``Q(f(DQ(x)))`` for a float f becomes a 256-entry table computed at compile time: every 8-bit
    value must come out as onnxruntime's (its QLinearSigmoid-style tables, or f in float between DQ
    and Q) and the compiled graph must be the lookup alone."""
    elem = {np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8}[dtype]
    lo = np.iinfo(dtype).min
    values = [(np.float32(0.0731), "xs"), (dtype(lo + 77), "xz"), (np.float32(0.0113), "ys"), (dtype(lo + 90), "yz")]
    nodes = [helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["d"]), helper.make_node(op, ["d"], ["f"], **attrs),
             helper.make_node("QuantizeLinear", ["f", "ys", "yz"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", elem, [1, 1, 16, 16])],
                              [helper.make_tensor_value_info("y", elem, [1, 1, 16, 16])],
                              [numpy_helper.from_array(np.array(v), n) for v, n in values])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = int8_models.IR_VERSION
    onnx.save(model, str(tmp_path / "f.onnx"))
    mod, compiled = lowered_and_compiled(tmp_path / "f.onnx")
    assert op_kinds(mod) == ["lookup"]
    x = (np.arange(256) + lo).astype(dtype).reshape(1, 1, 16, 16)
    expected = reference_session(tmp_path / "f.onnx").run(None, {"x": x})[0]
    np.testing.assert_array_equal(compiled({"x": x})["y"], expected)


POOLS = [{"kernel_shape": [2, 2], "strides": [2, 2]},
         {"kernel_shape": [3, 3], "strides": [1, 1], "pads": [1, 1, 1, 1], "count_include_pad": 1},
         {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1},
         {"kernel_shape": [5, 5], "strides": [3, 3], "pads": [2, 1, 2, 1]},
         {"kernel_shape": [16, 16]}]                  # the whole input: onnxruntime's global pool


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("attrs", POOLS, ids=["2x2", "include_pad", "ceil", "5x5s3", "global"])
def test_qdq_average_pool_as_onnxruntime(tmp_path, attrs, dtype):
    """Q(AveragePool(DQ(x))), which onnxruntime fuses into QLinearAveragePool: bit-exact, with the
    padding counted or not, ceil mode, and a window as large as the input."""
    elem = {np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8}[dtype]
    lo = np.iinfo(dtype).min
    values = [(np.float32(0.05), "xs"), (dtype(lo + 128), "xz"), (np.float32(0.02), "ys"), (dtype(lo + 21), "yz")]
    nodes = [helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["d"]), helper.make_node("AveragePool", ["d"], ["f"], **attrs),
             helper.make_node("QuantizeLinear", ["f", "ys", "yz"], ["y"])]
    shape = onnx.shape_inference.infer_shapes(helper.make_model(helper.make_graph(
        nodes[1:2], "s", [helper.make_tensor_value_info("d", TensorProto.FLOAT, [1, 8, 16, 16])],
        [helper.make_tensor_value_info("f", TensorProto.FLOAT, None)]))).graph.output[0].type.tensor_type.shape
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", elem, [1, 8, 16, 16])],
                              [helper.make_tensor_value_info("y", elem, [d.dim_value for d in shape.dim])],
                              [numpy_helper.from_array(np.array(v), n) for v, n in values])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = int8_models.IR_VERSION
    onnx.save(model, str(tmp_path / "p.onnx"))
    x = np.random.default_rng(3).integers(lo, lo + 256, (1, 8, 16, 16)).astype(dtype)
    expected = reference_session(tmp_path / "p.onnx").run(None, {"x": x})[0]
    np.testing.assert_array_equal(compile_model(tmp_path / "p.onnx", threads=1)({"x": x})["y"], expected)


@pytest.mark.parametrize("size,attrs", [(16, {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
                                        (15, {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
                                        (14, {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1],
                                              "ceil_mode": 1}),
                                        (16, {"kernel_shape": [2, 2], "strides": [2, 2]})],
                         ids=["ceil16", "ceil15", "ceil_pad14", "floor"])
def test_qdq_max_pool_is_the_integer_op(tmp_path, size, attrs):
    """Q(MaxPool(DQ(x))) at equal scales is the integer max pool, ceil mode included (GoogLeNet's and
    SqueezeNet's pools: their last windows' overhang is padding, which never wins), bit-exact; ceil mode
    used to stay DQ -> float pool -> Q (6.4 of GoogLeNet's 12.4 ms)."""
    nodes = [helper.make_node("DequantizeLinear", ["x", "s", "z"], ["d"]), helper.make_node("MaxPool", ["d"], ["f"], **attrs),
             helper.make_node("QuantizeLinear", ["f", "s", "z"], ["y"])]
    inits = [numpy_helper.from_array(np.array(np.float32(0.05)), "s"), numpy_helper.from_array(np.array(np.uint8(9)), "z")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 8, size, size])],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = int8_models.IR_VERSION
    onnx.save(onnx.shape_inference.infer_shapes(model), str(tmp_path / "p.onnx"))
    mod, compiled = lowered_and_compiled(tmp_path / "p.onnx")
    assert op_kinds(mod) == ["max_pool2d"]
    x = np.random.default_rng(6).integers(0, 256, (1, 8, size, size)).astype(np.uint8)
    expected = reference_session(tmp_path / "p.onnx").run(None, {"x": x})[0]
    np.testing.assert_array_equal(compiled({"x": x})["y"], expected)
    for target, selects in (("host", True), ("neon", False)):   # on neon the taps read clamped (bind.max_pool)
        [pool] = [f for f in lower(onnx.load(str(tmp_path / "p.onnx")), target, mcpu="cortex-a76").functions.values()
                  if isinstance(f, tirx.PrimFunc) and f.attrs and f.attrs.get("qnn.op") == "max_pool2d"]
        assert ("if_then_else" in pool.script()) == selects


@pytest.mark.parametrize("hwc, pool, strides, padding, dtype", [
    ((9, 11, 24), (3, 3), (2, 2), (1, 1, 1, 1), "uint8"),     # ShuffleNetV2's stem pool: padding on every side
    ((8, 8, 24), (3, 3), (2, 2), (0, 0, 1, 1), "int8"),       # ceil mode's overhang: bottom and right only
    ((7, 6, 16), (3, 3), (1, 1), (1, 1, 1, 1), "uint8"),      # stride 1 (GoogLeNet's inception pools)
    ((6, 7, 8), (2, 2), (2, 2), (0, 0, 0, 0), "int8")], ids=["s2pad", "ceil", "s1", "unpadded"])
def test_a_clamped_max_pool_is_each_windows_max_without_selects(hwc, pool, strides, padding, dtype):
    """arithmetic.max_pool2d's ``clamped`` form (bind's on neon): a tap outside the input reads the nearest
    pixel inside, which lies in the same window, so each output is the max of its window's pixels inside
    the input (numpy), with no select left in the function; the type's least value in the input."""
    import tvm
    from tvm import te
    from tvm_integration.qnn.prim.schedules import schedule
    from tvm_integration.qnn.semantics.arithmetic import max_pool2d
    x = te.placeholder((1, *hwc), dtype, name="x")
    out = max_pool2d(x, pool=pool, strides=strides, padding=padding, layout="NHWC", clamped=True)
    func = schedule(te.create_prim_func([x, out]))
    assert "if_then_else" not in func.script()
    info = np.iinfo(dtype)
    data = np.random.default_rng(7).integers(info.min, info.max + 1, (1, *hwc)).astype(dtype)
    data[0, 0, 0], data[0, -1, -1] = info.min, info.min
    (kh, kw), (sh, sw), (pt, pl, pb, pr) = pool, strides, padding
    padded = np.pad(data.astype(np.int32), ((0, 0), (pt, pb), (pl, pr), (0, 0)), constant_values=info.min - 1)
    oh, ow = (padded.shape[1] - kh) // sh + 1, (padded.shape[2] - kw) // sw + 1
    want = np.max([padded[:, i:i + sh * oh:sh, j:j + sw * ow:sw] for i in range(kh) for j in range(kw)], axis=0)
    result = tvm.runtime.empty(tuple(int(d) for d in out.shape), dtype)
    tvm.compile(func, target="llvm")(tvm.runtime.tensor(data), result)
    np.testing.assert_array_equal(result.numpy(), want.astype(dtype))


@pytest.mark.parametrize("attrs", [{"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
                                   {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}], ids=["resnet", "ceil"])
def test_qoperator_max_pool_is_the_integer_op_in_nhwc(tmp_path, attrs):
    """QOperator's MaxPool reads the uint8 tensor itself (no DQ/Q around it): the integer max pool,
    computed in NHWC between the convolutions (max commutes with the layout), as onnxruntime's NhwcMaxPool;
    it was TVM's NCHW max_pool2d between two transposes (U8S8 QOperator ResNet-18: 3.6 of 22.3 ms)."""
    rng = np.random.default_rng(4)
    dtype, np_type = TensorProto.UINT8, np.uint8
    zero = np.array(128, np_type)
    inits = [numpy_helper.from_array(np.array(np.float32(0.05)), "s"), numpy_helper.from_array(zero, "z"),
             numpy_helper.from_array(np.array(np.float32(0.01)), "ws"), numpy_helper.from_array(np.array(np.int8(0)), "wz")]
    for name, shape in (("w1", (16, 8, 3, 3)), ("w2", (8, 16, 1, 1))):
        inits.append(numpy_helper.from_array(rng.integers(-128, 128, shape).astype(np.int8), name))
    conv = ["s", "z", "{}", "ws", "wz", "s", "z"]
    nodes = [helper.make_node("QLinearConv", ["x", *conv[:2], "w1", *conv[3:]], ["c1"], pads=[1] * 4),
             helper.make_node("MaxPool", ["c1"], ["p"], **attrs),
             helper.make_node("QLinearConv", ["p", *conv[:2], "w2", *conv[3:]], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", dtype, [1, 8, 15, 15])],
                              [helper.make_tensor_value_info("y", dtype, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = int8_models.IR_VERSION
    onnx.save(onnx.shape_inference.infer_shapes(model), str(tmp_path / "p.onnx"))
    mod, compiled = lowered_and_compiled(tmp_path / "p.onnx")
    assert sorted(op_kinds(mod)) == ["conv2d", "conv2d", "max_pool2d"]
    assert len(transposed_images(mod)) == 2                   # the model's input and output alone
    x = rng.integers(0, 256, (1, 8, 15, 15)).astype(np_type)
    expected = reference_session(tmp_path / "p.onnx").run(None, {"x": x})[0]
    np.testing.assert_array_equal(compiled({"x": x})["y"], expected)


UNARY = [("QLinearLeakyRelu", {"alpha": 0.1}), ("QLinearSigmoid", {}),
         ("QLinearAveragePool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]})]


@pytest.mark.parametrize("op,attrs", UNARY, ids=[u[0] for u in UNARY])
def test_qoperator_unary_ops(tmp_path, op, attrs):
    """QOperator forms: LeakyRelu and Sigmoid (lookup tables) and AveragePool (onnxruntime's float
    arithmetic: the Q(avg_pool(DQ)) in float differed on 14 of 512 outputs) exact on every u8 input."""
    inits = [numpy_helper.from_array(np.array(v), n) for v, n in
             [(np.float32(0.05), "xs"), (np.uint8(128), "xz"), (np.float32(0.02), "ys"), (np.uint8(20), "yz")]]
    out = [1, 8, 8, 8] if op == "QLinearAveragePool" else [1, 8, 16, 16]
    node = helper.make_node(op, ["x", "xs", "xz", "ys", "yz"], ["y"], domain="com.microsoft", **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 8, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, out)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = int8_models.IR_VERSION
    onnx.save(model, str(tmp_path / "u.onnx"))
    x = np.random.default_rng(0).integers(0, 256, (1, 8, 16, 16)).astype(np.uint8)       # every u8 value
    expected = reference_session(tmp_path / "u.onnx").run(None, {"x": x})[0].astype(int)
    np.testing.assert_array_equal(compile_model(tmp_path / "u.onnx", threads=1)({"x": x})["y"].astype(int), expected)


@pytest.mark.parametrize("name", ["mlp", "resnet_2_stages"])
def test_dynamic_quantization_runs_exact_on_the_tiles(tmp_path, name):
    """quantize_dynamic's DynamicQuantizeLinear -> MatMulInteger / ConvInteger graph: every integer
    matmul and conv runs on the tiles (the input's run-time zero point subtracted after them), the
    run-time scales stay TVM's own ops, and the output equals onnxruntime's. Two ResNet stages have
    every conv geometry of four (12.8 s of CPU against 22.4)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic
    onnx.save(TINY[name](), str(tmp_path / "f.onnx"))
    quantize_dynamic(str(tmp_path / "f.onnx"), str(tmp_path / "d.onnx"), weight_type=QuantType.QInt8)
    ops = [n.op_type for n in onnx.load(str(tmp_path / "d.onnx")).graph.node]
    assert "DynamicQuantizeLinear" in ops
    _, mod = assert_bit_exact(tmp_path / "d.onnx")
    funcs = [f for f in mod.functions.values() if isinstance(f, tirx.PrimFunc)]
    assert sum(TENSORIZED in f.attrs for f in funcs) == ops.count("MatMulInteger") + ops.count("ConvInteger") > 0


def test_matmul_integer_per_row_zero_point(tmp_path):
    """MatMulInteger allows one input zero point per row (onnxruntime does not run it): numpy's result,
    not a per-row vector broadcast along the columns (M == N would hide that)."""
    rng = np.random.default_rng(5)
    w = rng.integers(-128, 128, (6, 4), dtype=np.int8)
    node = helper.make_node("MatMulInteger", ["a", "w", "az"], ["y"])
    graph = helper.make_graph([node], "mmi", [helper.make_tensor_value_info("a", TensorProto.UINT8, [4, 6]),
                                               helper.make_tensor_value_info("az", TensorProto.UINT8, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, [4, 4])], [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = int8_models.IR_VERSION
    onnx.save(model, str(tmp_path / "m.onnx"))
    a, az = rng.integers(0, 256, (4, 6), dtype=np.uint8), np.array([3, 100, 7, 250], np.uint8)
    got = compile_model(tmp_path / "m.onnx", threads=1)({"a": a, "az": az})["y"]
    np.testing.assert_array_equal(got, (a.astype(np.int64) - az[:, None]) @ w.astype(np.int64))


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=[f"c{g[0][0]}o{g[1]}k{g[2]}s{g[3]}g{g[5]}" for g in GEOMETRIES])
def test_conv_integer_node(tmp_path, geometry):
    """One ConvInteger node, constant zero points (padding with the input's), int32 out: onnxruntime's."""
    (c, h, w), o, k, stride, pads, groups = geometry
    rng = np.random.default_rng(7)
    weight = rng.integers(-128, 128, (o, c // groups, k, k), dtype=np.int8)
    inits = [numpy_helper.from_array(weight, "w"), numpy_helper.from_array(np.array(131, np.uint8), "xz"),
             numpy_helper.from_array(np.array(0, np.int8), "wz")]
    node = helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], strides=[stride] * 2, pads=pads, group=groups)
    out_hw = [(size + pads[i] + pads[i + 2] - k) // stride + 1 for i, size in enumerate((h, w))]
    graph = helper.make_graph([node], "conv_integer", [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, c, h, w])],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, [1, o, *out_hw])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = int8_models.IR_VERSION
    onnx.save(model, str(tmp_path / "c.onnx"))
    compiled, _ = assert_bit_exact(tmp_path / "c.onnx")
    assert compiled.outputs == ["y"]


def conv_then_add(tmp_path, operand: int, conv_is_output: bool, constant_residual: bool = False):
    """QLinearConv (3x3, 16 -> 24 channels, 9x9) then QLinearAdd of its result and a second input
    ``r`` (or a constant), the convolution's result as the add's operand ``operand``; also a model
    output if asked."""
    rng = np.random.default_rng(5 + operand)
    u8 = lambda v, n: numpy_helper.from_array(np.array(v, np.uint8), n)       # noqa: E731
    f32 = lambda v, n: numpy_helper.from_array(np.array(v, np.float32), n)    # noqa: E731
    inits = [f32(0.02, "xs"), u8(120, "xz"), numpy_helper.from_array(rng.integers(-128, 128, (24, 16, 3, 3), dtype=np.int8), "w"),
             f32(rng.random(24) * 0.01 + 0.002, "ws"), numpy_helper.from_array(np.zeros(24, np.int8), "wz"),
             f32(0.37, "ys"), u8(131, "yz"), f32(0.029, "rs"), u8(97, "rz"), f32(0.043, "as"), u8(126, "az"),
             numpy_helper.from_array(rng.integers(-5000, 5000, 24).astype(np.int32), "b")]
    conv = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["y"], pads=[1] * 4)
    pair = [["y", "ys", "yz"], ["r", "rs", "rz"]]
    add = helper.make_node("QLinearAdd", [*pair[operand], *pair[1 - operand], "as", "az"], ["z"], domain="com.microsoft")
    info = lambda n: helper.make_tensor_value_info(n, TensorProto.UINT8, [1, 16 if n == "x" else 24, 9, 9])  # noqa: E731
    if constant_residual:
        inits.append(numpy_helper.from_array(rng.integers(0, 256, (1, 24, 9, 9), dtype=np.uint8), "r"))
    graph = helper.make_graph([conv, add], "conv_add", [info("x"), *([] if constant_residual else [info("r")])],
                              [info("z"), *([info("y")] if conv_is_output else [])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = int8_models.IR_VERSION
    onnx.save(model, str(tmp_path / "conv_add.onnx"))
    return tmp_path / "conv_add.onnx"


@pytest.mark.parametrize("operand", [0, 1])
@pytest.mark.parametrize("conv_is_output", [False, True])
def test_residual_add_fused_into_the_convolution(tmp_path, operand, conv_is_output):
    """An add whose operand is a convolution nothing else reads runs in that convolution's output
    stage (no add function left), either operand order, bit-exact; a convolution that is also a model
    output keeps its own add."""
    path = conv_then_add(tmp_path, operand, conv_is_output)
    _, mod = assert_bit_exact(path, runs=4)
    funcs = [f for f in mod.functions.values() if isinstance(f, tirx.PrimFunc)]
    adds = [f for f in funcs if f.attrs and f.attrs.get("qnn.op") == "qlinear_add"]
    assert len(adds) == (1 if conv_is_output else 0)
    assert sum(TENSORIZED in f.attrs for f in funcs) == 1


def test_add_of_a_constant_is_not_fused(tmp_path):
    path = conv_then_add(tmp_path, 0, False, constant_residual=True)
    _, mod = assert_bit_exact(path, runs=2)
    funcs = [f for f in mod.functions.values() if isinstance(f, tirx.PrimFunc)]
    assert [f for f in funcs if f.attrs and f.attrs.get("qnn.op") == "qlinear_add"]


def test_tiny_resnet_adds_all_fused(tiny_resnet):
    funcs = [f for f in tiny_resnet.functions.values() if isinstance(f, tirx.PrimFunc)]
    assert not [f for f in funcs if f.attrs and f.attrs.get("qnn.op") == "add"]


def classifier(kind: str) -> onnx.ModelProto:
    """A CNN's classifier as exporters write it, after a conv + Relu: GlobalAveragePool -> Flatten ->
    Gemm (PyTorch's avgpool / flatten / fc), or the whole feature map Reshape'd (batch 2) -> MatMul + Add."""
    batch = 1 if kind == "gap_flatten_gemm" else 2
    g = int8_models._Graph(11)
    x = g.conv("input", 3, 16, 3, stride=2)                                      # [batch, 16, 4, 4]
    if kind == "gap_flatten_gemm":
        y = g.gemm(g.node("Flatten", [g.node("GlobalAveragePool", [x])]), 16, 10)
    else:
        g.inits.append(numpy_helper.from_array(np.array([batch, -1], np.int64), "shape"))
        y = g.node("MatMul", [g.node("Reshape", [x, "shape"]), g.const(g.rng.standard_normal((256, 10)) / 16, "mm")])
        y = g.node("Add", [y, g.const(g.rng.standard_normal(10) * 0.05, "mmb")])
    return g.model([batch, 3, 8, 8], y, [batch, 10], kind)


def requantize_pairs_dropped(path, ops=("Flatten", "Reshape")):
    """The QDQ model at ``path`` with the QuantizeLinear -> DequantizeLinear pair quantize_static puts
    after each Flatten / Reshape removed, so that a DequantizeLinear feeds Flatten/Reshape -> Gemm/MatMul
    directly, as Brevitas' QCDQ exports and hand-written QDQ graphs have it."""
    model = onnx.load(str(path))
    consumers = {}
    for node in model.graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    dropped = []
    for node in [n for n in model.graph.node if n.op_type in ops]:
        (q,) = consumers[node.output[0]]
        (dq,) = consumers[q.output[0]]
        assert (q.op_type, dq.op_type) == ("QuantizeLinear", "DequantizeLinear")
        for user in consumers[dq.output[0]]:
            user.input[:] = [node.output[0] if i == dq.output[0] else i for i in user.input]
        dropped += [q.name, dq.name]
    kept = [n for n in model.graph.node if n.name not in dropped]
    del model.graph.node[:]
    model.graph.node.extend(kept)
    onnx.save(model, str(path))
    return path


CLASSIFIER_QUANTIZATIONS = ("qdq_per_channel", "qdq_per_tensor", "qdq_s8_activations")


@pytest.mark.parametrize("quantization", CLASSIFIER_QUANTIZATIONS)
@pytest.mark.parametrize("kind", ["gap_flatten_gemm", "reshape_matmul"])
def test_classifier_after_flatten_or_reshape_on_the_int8_dense(tmp_path, kind, quantization):
    """DequantizeLinear -> Flatten/Reshape -> Gemm/MatMul: the reshape moves to the integers and the
    Gemm/MatMul becomes the integer dense on the tiles (it stayed a float matmul), with onnxruntime's
    output. onnxruntime itself runs this group in float (no Q/DQ pair before the Gemm, so no QGemm):
    equal to the integer dense but where its float sum falls within rounding of a half step (none of
    these models' outputs on 1,000 inputs; a 512 -> 1000 classifier: 4 in 10^6, docs/operators.md)."""
    path = requantize_pairs_dropped(int8_models.quantize(classifier(kind), tmp_path / f"{kind}.onnx",
                                                    **QUANTIZATIONS[quantization]))
    graph = onnx.load(str(path)).graph
    made_by = {o: n for n in graph.node for o in n.output}
    (linear,) = [n for n in graph.node if n.op_type in ("Gemm", "MatMul")]
    shaped = made_by[linear.input[0]]
    assert (shaped.op_type, made_by[shaped.input[0]].op_type) == (
        "Flatten" if kind == "gap_flatten_gemm" else "Reshape", "DequantizeLinear")
    rewritten = str(lower(load(path), stage="rewrite")["main"])
    assert "R.matmul" not in rewritten and "qnn_dense" in rewritten
    assert re.search(r'R\.reshape\(\w+, R\.shape\(\[\d+, \d+\]\)\)', rewritten)      # on the integers
    model, mod = assert_bit_exact(path, runs=5)
    funcs = [f for f in mod.functions.values() if isinstance(f, tirx.PrimFunc)]
    dense = [f for f in funcs if TENSORIZED in f.attrs and str(f.attrs["qnn.op"]) == "dense"]
    assert len(dense) == 1 and "qsynth_dense" in [name for name, _, _ in model.profile(
        random_inputs(model.inputs, np.random.default_rng(0)))]
