"""The float ops of an Arm build against their reference, onnxruntime's AArch64 build under qemu
(qnn/float/neon_float.py, qnn/runtime/arm_reference.py; issue 50). Where that build rounds otherwise than its x86 build
(LayerNormalization, SkipLayerNormalization, Softmax, quantize_dynamic's MatMul output stage), the test
also checks the two builds differ on the same inputs, so a build following MLAS's x86 order would fail.

One ONNX model holds one op of each kind (each its own output), quantized by quantize_dynamic (one
MatMul by a constant becomes DynamicQuantizeLinear + MatMulInteger, another stays float); a second holds the float ops a
quantize_static model keeps between Q and DQ (LayerNormalization; Softmax and AveragePool: onnxruntime's
QLinearSoftmax and QLinearAveragePool);
a third is a dynamically quantized BERT-style encoder layer (tests/transformer_models.py)."""
import logging

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
import tvm
from tvm import relax

from tvm_integration.bench import mca
from tvm_integration.bench.models import reference_session
from tvm_integration.qemu import cross_model
from tvm_integration.qnn.runtime import arm_reference

MISSING = cross_model.missing_tools() or mca.missing_tools()
pytestmark = [pytest.mark.qemu,
              pytest.mark.skipif(MISSING is not None, reason=f"onnxruntime's AArch64 build runs under qemu: {MISSING}")]

ROWS, HIDDEN, CORE = 64, 768, "cortex-a53"
# output -> (op kind, whether onnxruntime's AArch64 and x86 builds differ on it)
OUTPUTS = {"layer_norm": ("layer_norm", True), "skip_layer_norm": ("layer_norm", True),
           "softmax": ("softmax", True), "softmax_tail": ("softmax", True), "gelu": ("gelu", False),
           "tanh": ("tanh", False), "mean": ("reduce_mean", True), "pool": ("reduce_mean", True),
           "scores": ("float_matmul", False), "scores_tail": ("float_matmul", False),
           "scores_28": ("float_matmul", False),
           "dynamic": ("dynamic_quantize", True), "patch": ("float_conv", True),
           "dense": ("float_dense", False), "conv": ("float_conv", True)}


def _model(nodes, inputs, outputs, inits, dtype=TensorProto.FLOAT):
    info = lambda names: [helper.make_tensor_value_info(n, dtype if n in ("q", "qy", "qs", "qp", "qa") else
                                                        TensorProto.FLOAT, s) for n, s in names]
    model = helper.make_model(helper.make_graph(nodes, "ops", info(inputs), info(outputs), inits),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def float_ops(rng):
    """Each float op kind on BERT-like shapes, one output each."""
    c = lambda name, a: numpy_helper.from_array(np.asarray(a, np.float32), name)
    node = helper.make_node
    inits = [c("g", 1 + 0.1 * rng.standard_normal(HIDDEN)), c("b", 0.1 * rng.standard_normal(HIDDEN)),
             c("w", rng.standard_normal((HIDDEN, HIDDEN)) / np.sqrt(HIDDEN)),
             c("bias", 0.1 * rng.standard_normal(HIDDEN)),
             c("sqrt2", np.sqrt(2)), c("one", 1.0), c("half", 0.5), c("root", 8.0),
             c("pw", rng.standard_normal((96, 3, 16, 16)) / np.sqrt(768)),
             c("wd", rng.standard_normal((HIDDEN, 96)) / np.sqrt(HIDDEN)),
             c("cw", rng.standard_normal((32, 32, 3, 3)) / 17)]
    nodes = [node("LayerNormalization", ["x", "g", "b"], ["layer_norm"], axis=-1, epsilon=1e-12),
             node("Add", ["x", "r"], ["sum"]),
             node("LayerNormalization", ["sum", "g", "b"], ["skip_layer_norm"], axis=-1, epsilon=1e-12),
             node("Softmax", ["s"], ["softmax"], axis=-1), node("Softmax", ["t"], ["softmax_tail"], axis=-1),
             node("Div", ["x", "sqrt2"], ["g0"]), node("Erf", ["g0"], ["g1"]), node("Add", ["g1", "one"], ["g2"]),
             node("Mul", ["x", "g2"], ["g3"]), node("Mul", ["g3", "half"], ["gelu"]),
             node("Tanh", ["x"], ["tanh"]), node("ReduceMean", ["x"], ["mean"], axes=[-1]),
             node("GlobalAveragePool", ["image"], ["pool"]),
             node("MatMul", ["qh", "kh"], ["qk"]), node("Div", ["qk", "root"], ["scores"]),
             node("MatMul", ["qh", "kt"], ["qt"]), node("Div", ["qt", "root"], ["scores_tail"]),
             node("MatMul", ["qh", "k28"], ["q28"]), node("Div", ["q28", "root"], ["scores_28"]),
             node("MatMul", ["x", "w"], ["xw"]), node("Add", ["xw", "bias"], ["dynamic"]),
             node("Conv", ["patches", "pw"], ["patch"], kernel_shape=[16, 16], strides=[16, 16]),
             node("MatMul", ["x", "wd"], ["dense"], name="float_dense"),
             node("Conv", ["maps", "cw"], ["conv"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])]
    inputs = [("x", [1, ROWS, HIDDEN]), ("r", [1, ROWS, HIDDEN]), ("s", [1, 4, ROWS, ROWS]), ("t", [1, 2, 37, 37]),
              ("qh", [1, 4, ROWS, 64]), ("kh", [1, 4, 64, ROWS]), ("kt", [1, 4, 64, 37]), ("k28", [1, 4, 64, 56]),
              ("image", [1, 256, 7, 7]), ("patches", [1, 3, 64, 64]), ("maps", [1, 32, 14, 14])]
    outputs = [("layer_norm", [1, ROWS, HIDDEN]), ("skip_layer_norm", [1, ROWS, HIDDEN]),
               ("softmax", [1, 4, ROWS, ROWS]), ("softmax_tail", [1, 2, 37, 37]), ("gelu", [1, ROWS, HIDDEN]),
               ("tanh", [1, ROWS, HIDDEN]), ("mean", [1, ROWS, 1]), ("pool", [1, 256, 1, 1]),
               ("scores", [1, 4, ROWS, ROWS]), ("scores_tail", [1, 4, ROWS, 37]), ("scores_28", [1, 4, ROWS, 56]),
               ("dynamic", [1, ROWS, HIDDEN]), ("patch", [1, 96, 4, 4]), ("dense", [1, ROWS, 96]),
               ("conv", [1, 32, 14, 14])]
    feeds = {"x": 1.5 * rng.standard_normal((1, ROWS, HIDDEN)) + 0.2, "r": rng.standard_normal((1, ROWS, HIDDEN)),
             "s": 3 * rng.standard_normal((1, 4, ROWS, ROWS)), "t": 3 * rng.standard_normal((1, 2, 37, 37)),
             "qh": rng.standard_normal((1, 4, ROWS, 64)), "kh": rng.standard_normal((1, 4, 64, ROWS)),
             "kt": rng.standard_normal((1, 4, 64, 37)), "k28": rng.standard_normal((1, 4, 64, 56)),
             "image": rng.uniform(0, 6, (1, 256, 7, 7)), "patches": rng.standard_normal((1, 3, 64, 64)),
             "maps": rng.standard_normal((1, 32, 14, 14))}
    return _model(nodes, inputs, outputs, inits), {k: v.astype(np.float32) for k, v in feeds.items()}


def qdq_ops(rng):
    """Q(LayerNorm(DQ(q))), Q(Softmax(DQ(qs))) and Q(AveragePool(DQ(qs))), as quantize_static leaves them (u8)."""
    c = lambda name, a, t=np.float32: numpy_helper.from_array(np.asarray(a, t), name)
    node = helper.make_node
    inits = [c("g", 1 + 0.1 * rng.standard_normal(HIDDEN)), c("b", 0.1 * rng.standard_normal(HIDDEN)),
             c("xs", 0.05), c("xz", 128, np.uint8), c("ys", 0.03), c("yz", 120, np.uint8),
             c("ss", 0.11), c("sz", 131, np.uint8), c("ps", 1 / 256), c("pz", 0, np.uint8)]
    nodes = [node("DequantizeLinear", ["q", "xs", "xz"], ["fx"]),
             node("LayerNormalization", ["fx", "g", "b"], ["fy"], axis=-1, epsilon=1e-12),
             node("QuantizeLinear", ["fy", "ys", "yz"], ["qy"]),
             node("DequantizeLinear", ["qs", "ss", "sz"], ["fs"]), node("Softmax", ["fs"], ["fp"], axis=-1),
             node("QuantizeLinear", ["fp", "ps", "pz"], ["qp"]),
             node("AveragePool", ["fs"], ["fa"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             node("QuantizeLinear", ["fa", "ys", "yz"], ["qa"])]
    model = _model(nodes, [("q", [1, 4 * ROWS, HIDDEN]), ("qs", [1, 4, ROWS, ROWS])],
                   [("qy", [1, 4 * ROWS, HIDDEN]), ("qp", [1, 4, ROWS, ROWS]), ("qa", [1, 4, ROWS, ROWS])], inits,
                   TensorProto.UINT8)
    feeds = {"q": rng.integers(0, 256, (1, 4 * ROWS, HIDDEN)).astype(np.uint8),
             "qs": rng.integers(0, 256, (1, 4, ROWS, ROWS)).astype(np.uint8)}
    return model, feeds


def three_ways(path, feeds):
    """{output: (ours under qemu, onnxruntime AArch64 under qemu, onnxruntime x86 exact mode)}."""
    from tvm_integration.bench import ort_aarch64
    from tvm_integration.qnn.runtime.model import compile_model
    names = [o.name for o in onnx.load(str(path)).graph.output]
    ours = compile_model(path, target="neon", mcpu=CORE, allow_float=True)(feeds)
    arm, _ = ort_aarch64.run(path, feeds, names, CORE, counted=False)
    x86 = reference_session(str(path)).run(names, feeds)
    return {n: (ours[n], a, x) for n, a, x in zip(names, arm, x86)}


@pytest.fixture(scope="module")
def ops(tmp_path_factory):
    from onnxruntime.quantization import QuantType, quantize_dynamic
    folder = tmp_path_factory.mktemp("arm-float-ops")
    model, feeds = float_ops(np.random.default_rng(0))
    onnx.save(model, str(folder / "float.onnx"))
    logging.getLogger().setLevel(logging.ERROR)
    quantize_dynamic(str(folder / "float.onnx"), str(folder / "ops.onnx"), weight_type=QuantType.QInt8,
                     op_types_to_quantize=["MatMul"], nodes_to_exclude=["float_dense"])
    return three_ways(folder / "ops.onnx", feeds)


def test_float_ops_equal_onnxruntime_aarch64(ops):
    for name, (kind, orders_differ) in OUTPUTS.items():
        ours, arm, x86 = ops[name]
        np.testing.assert_array_equal(ours, arm, err_msg=name)
        assert np.array_equal(arm, x86) != orders_differ, (name, np.count_nonzero(arm != x86))
        assert arm_reference.KINDS[kind].exact and arm_reference.KINDS[kind].reference == arm_reference.AARCH64


def test_qdq_float_ops_equal_onnxruntime_aarch64(tmp_path):
    model, feeds = qdq_ops(np.random.default_rng(1))
    onnx.save(model, str(tmp_path / "qdq.onnx"))
    results = three_ways(tmp_path / "qdq.onnx", feeds)
    for name in ("qy", "qp", "qa"):
        np.testing.assert_array_equal(results[name][0], results[name][1], err_msg=name)
    assert not np.array_equal(results["qy"][1], results["qy"][2])     # LayerNorm: the two builds' orders differ
    assert arm_reference.KINDS["qlinear_softmax"].exact and arm_reference.KINDS["avg_pool2d"].exact


@pytest.mark.parametrize("shape", [(1, 32, 13, 13), (1, 104, 7, 7)], ids=["16_lanes", "8_lanes_odd_planes"])
def test_a_mean_over_an_image_held_nhwc_reads_it_in_place_in_the_aarch64_order(tmp_path, shape):
    """A squeeze-and-excitation's pooling on Arm: dequantized and averaged on the NHWC image, never transposed
    (EfficientNet-B0 transposed its 112x112x32 ... images before), each plane summed as onnxruntime's AArch64
    build sums it (reduce_mean.NEON_PAIRS), which here differs from the x86 build's order."""
    from test_float_onnxruntime_math import dequantized_mean_model
    from tvm_integration.qnn.runtime.model import lower
    x = (np.random.default_rng(10).random(shape, dtype=np.float32) * 9).astype(np.float32)
    path = dequantized_mean_model(tmp_path / "se.onnx", shape, (2, 3), 1, quantized_in=True)
    ours, arm, x86 = three_ways(path, {"x": x})["y"]
    np.testing.assert_array_equal(ours, arm)
    assert not np.array_equal(arm, x86)
    main = lower(onnx.load(str(path)), target="neon", mcpu=CORE)["main"]
    called = {b.value.args[0].name_hint: int(np.prod([int(d) for d in b.var.ty.shape]))
              for b in main.body.blocks[0].bindings if isinstance(b.value, relax.Call)
              and isinstance(b.value.args[0], tvm.ir.GlobalVar)}
    assert any(name.startswith("qsynth_mean") for name in called), called
    assert all(size == shape[0] * shape[1] for name, size in called.items() if name.startswith("transpose")), called


def test_dynamic_encoder_equals_onnxruntime_aarch64(tmp_path):
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from transformer_models import encoder
    onnx.save(encoder(hidden=128, heads=2, seq=32, layers=1), str(tmp_path / "float.onnx"))
    quantize_dynamic(str(tmp_path / "float.onnx"), str(tmp_path / "dynamic.onnx"), weight_type=QuantType.QInt8)
    x = np.random.default_rng(0).standard_normal((1, 32, 128)).astype(np.float32)
    ((ours, arm, x86),) = three_ways(tmp_path / "dynamic.onnx", {"input": x}).values()
    np.testing.assert_array_equal(ours, arm)
    assert not np.array_equal(arm, x86)


def test_dynamic_per_channel_matmul_equals_onnxruntime_aarch64(tmp_path):
    """quantize_dynamic with per_channel (u8 weights, a scale and zero point per column): MatMulInteger -> Cast ->
    Mul by the scales' vector -> Add of the bias, which both builds fuse into MatMulIntegerToFloat, the
    AArch64 build's output stage one FMA per column scale as for one scale (it was a multiply, then an add:
    6 of 20 logits of test_ort_quantizer_options' network differed)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic
    rng = np.random.default_rng(3)
    c = lambda name, a: numpy_helper.from_array(np.asarray(a, np.float32), name)
    node = helper.make_node
    nodes = [node("MatMul", ["x", "w"], ["xw"]), node("Add", ["xw", "bias"], ["y"])]
    inits = [c("w", rng.standard_normal((256, 96)) * rng.uniform(0.1, 2, 96) / 16), c("bias", rng.standard_normal(96))]
    onnx.save(_model(nodes, [("x", [1, ROWS, 256])], [("y", [1, ROWS, 96])], inits), str(tmp_path / "float.onnx"))
    quantize_dynamic(str(tmp_path / "float.onnx"), str(tmp_path / "dynamic.onnx"), per_channel=True,
                     weight_type=QuantType.QUInt8)
    scales = [numpy_helper.to_array(i) for i in onnx.load(str(tmp_path / "dynamic.onnx")).graph.initializer
              if i.name.endswith("_scale")]
    assert [s.shape for s in scales] == [(96,)]
    x = rng.standard_normal((1, ROWS, 256)).astype(np.float32)
    ((ours, arm, x86),) = three_ways(tmp_path / "dynamic.onnx", {"x": x}).values()
    np.testing.assert_array_equal(ours, arm)
    assert not np.array_equal(arm, x86)


def test_softmax_rows_reduce_in_vectors(tmp_path):
    """neon_float.softmax_func takes a row's maximum in eight lanes, then across them, and its four lane sums
    as vectors (scalar loops before), its exps and outputs in vectors but for the last d % 4 (a row of 197: all
    scalar before), and still equals onnxruntime's AArch64 build: rows of 8, 12 (the sums in vectors, the
    maximum not), 64 and 197, the maximum in each lane position, and differences from it below exp's clamp at -88.4."""
    from tvm_integration.qnn.float import neon_float
    script = neon_float.softmax_func((3, 197)).script()
    assert "top_rf" in script and script.count("T.vectorized") == 4          # maxima, sums, exps, outputs
    widths = (8, 12, 64, 197)
    info = lambda name, d: helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, 12, d])
    nodes = [helper.make_node("Softmax", [f"x{d}"], [f"y{d}"], axis=-1) for d in widths]
    graph = helper.make_graph(nodes, "softmax", [info(f"x{d}", d) for d in widths], [info(f"y{d}", d) for d in widths])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "softmax.onnx"))
    rng = np.random.default_rng(5)
    feeds = {}
    for d in widths:
        x = 40 * rng.standard_normal((1, 12, d))
        x[0, np.arange(12), np.arange(12) % d] = 200.0          # the maximum in each position of a row's lanes
        feeds[f"x{d}"] = x.astype(np.float32)
    for name, (ours, arm, _) in three_ways(tmp_path / "softmax.onnx", feeds).items():
        np.testing.assert_array_equal(ours, arm, err_msg=name)


def test_a_scalar_constant_reaches_an_arm_operator():
    """A 0-d constant stays 0-d on its way to an operator run under qemu (cross.write took it through
    np.ascontiguousarray, which made it [1], and the compiled function refused it): quantize_dynamic's dequantize
    chain with its run-time scalar scale equals numpy's float32 (acc - correction) * scale + bias."""
    from tvm_integration.kernels.selection import aarch64_target
    from tvm_integration.qemu import cross
    from tvm_integration.qnn.float import float_ops
    shape = (5, 24)
    target = tvm.target.Target(aarch64_target("cortex-a53"))
    executable = tvm.compile(tvm.IRModule({"main": float_ops.dequantized_func(shape)}), target=target)
    rng = np.random.default_rng(11)
    correction = rng.integers(-900, 900, shape[-1]).astype(np.int32)
    scale = np.array(0.00731, np.float32)
    bias = rng.standard_normal(shape[-1]).astype(np.float32)
    acc = rng.integers(-5000, 5000, shape).astype(np.int32)
    op = cross.QemuOperator(executable, [correction, scale, bias], shape, "float32", shape, "int32", shape)
    np.testing.assert_array_equal(op(acc), (acc - correction).astype(np.float32) * scale + bias)


def test_neon_matmul_tiles_do_not_depend_on_the_x86_host(monkeypatch):
    """A float MatMul built for Arm takes NEON's register tile (4 x 16 floats, 16 of its 32 registers) on an
    AVX-512 host too; B's 196 columns (ViT's keys), 49 whole vectors, in 2 x 28 tiles of 7 vectors, unpadded
    (x86 pads them to 224, its 32-lane tiles); 37 columns padded to 48, not 64.
    test_float_ops_equal_onnxruntime_aarch64's ``scores_28`` (56 columns) and ``scores_tail`` (37) check the values."""
    from tvm_integration.qnn.float import float_matmul
    monkeypatch.setattr(float_matmul.host, "x86_features", lambda model: {"avx2", "avx512f"})
    script = float_matmul.matmul_func((1, 6, 196, 64), (1, 6, 64, 196), 0.125, neon=True).script()
    assert "padded" not in script and "T.unroll(2)" in script and "T.unroll(7)" in script
    assert "T.vectorized(4)" in script and "T.vectorized(28)" not in script
    script = float_matmul.matmul_func((1, 4, 64, 64), (1, 4, 64, 37), 0.125, neon=True).script()
    assert "(1, 4, 64, 48)" in script and "T.unroll(4)" in script and "T.vectorized(16)" in script


def test_skip_layer_norm_of_a_dequantize_chain_stores_its_sum_once():
    """On Arm a SkipLayerNormalization whose first input is quantize_dynamic's dequantize chain computes a + b +
    bias in a pass of its own (layer_norm._stored), not inlined into both the statistics' pass and the
    outputs'; test_dynamic_encoder_equals_onnxruntime_aarch64 checks its values against onnxruntime's AArch64 build."""
    from tvm_integration.qnn.float import float_ops, layer_norm
    shape = (1, 32, 64)
    script = layer_norm.skip_layer_norm_func(shape, 1e-12, bias=True, first=float_ops.dequantize_chain(shape, True),
                                             fused=True).script()
    assert 'T.sblock("v")' in script


def float32_divisions(mod, prefix: str) -> list[str]:
    """The lines of ``mod``'s PrimFuncs named ``prefix``... that divide, but for a double reciprocal's
    division (output_stage.divided, computed once, not per value)."""
    return [line for g, func in mod.functions.items() if g.name_hint.startswith(prefix)
            for line in func.script().splitlines() if " / " in line and "float64" not in line]


def test_layer_norms_and_quantizes_divide_by_products():
    """LayerNormalization's and SkipLayerNormalization's divisions (Welford's d / k, m2 / n and (v - mean) / std)
    and a QuantizeLinear's by a constant scale are products by double reciprocals on Arm (output_stage.divided,
    quotient): no float32 division left. test_float_ops_equal_onnxruntime_aarch64 and
    test_qdq_float_ops_equal_onnxruntime_aarch64 check their values."""
    from tvm_integration.qnn.runtime.model import lower
    model, _ = qdq_ops(np.random.default_rng(1))
    mod = lower(model, target="neon", mcpu=CORE)
    assert any(g.name_hint.startswith("qnn_quantize") for g in mod.functions)
    assert not float32_divisions(mod, "qnn_quantize") and not float32_divisions(mod, "qsynth_layer_norm")
    model, _ = float_ops(np.random.default_rng(0))
    mod = lower(model, target="neon", mcpu=CORE)
    assert any(g.name_hint.startswith("qsynth_skip_layer_norm") for g in mod.functions)
    assert not float32_divisions(mod, "qsynth_skip_layer_norm") and not float32_divisions(mod, "qsynth_layer_norm")


@pytest.mark.parametrize("shape", [(ROWS, HIDDEN), (5, 13)])
def test_dynamic_quantize_equals_onnxruntime_aarch64_without_a_division(tmp_path, shape):
    """DynamicQuantizeLinear's quantize by its run-time scale multiplies by the scale's double reciprocal and
    converts with its rounding, fcvtns (neon_quantize.runtime_quantized), no float division left, its range
    is taken by fmax and fmin (tensor_range.range_func, as MLAS's MlasFindMinMaxElement), and the whole equals
    the AArch64 build's division: on a power-of-two scale with every value a tie, and on normal values (scales
    not a power of two); [5, 13]: four vectors of 16 values and one value alone."""
    from tvm_integration.bench import ort_aarch64
    from tvm_integration.qnn.runtime.model import compile_model, lower
    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "scale", "zero_point"])
    info = helper.make_tensor_value_info
    outputs = [info("y", TensorProto.UINT8, shape), info("scale", TensorProto.FLOAT, []),
               info("zero_point", TensorProto.UINT8, [])]
    model = helper.make_model(helper.make_graph([node], "dql", [info("x", TensorProto.FLOAT, shape)], outputs),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "dql.onnx"))
    mod = lower(model, target="neon", mcpu=CORE)
    quantizes = [f.script() for g, f in mod.functions.items() if g.name_hint.startswith("quantize")]
    assert quantizes and not float32_divisions(mod, "quantize")
    assert all("llvm.aarch64.neon.fcvtns" in script for script in quantizes)
    ranges = [f.script() for g, f in mod.functions.items() if g.name_hint.startswith("qsynth_range")]
    assert ranges and all("llvm.maximum" in script and "llvm.minimum" in script for script in ranges)    # fmax, fmin
    rng = np.random.default_rng(3)
    ties = (rng.integers(0, 255, shape) + 0.5) / 16          # scale (255 / 16) / 255 = 1/16: x / s ties
    ties[0, :2] = (0, 255 / 16)
    compiled = compile_model(tmp_path / "dql.onnx", target="neon", mcpu=CORE, allow_float=True)
    names = [o.name for o in outputs]
    feeds = [{"x": x.astype(np.float32)}
             for x in (ties, 1.5 * rng.standard_normal(shape) + 0.2, 0.01 * rng.standard_normal(shape))]
    arms = ort_aarch64.run_each(tmp_path / "dql.onnx", feeds, names, CORE)
    for ours, arm in zip(compiled.each(feeds), arms, strict=True):
        for name, theirs in zip(names, arm):
            np.testing.assert_array_equal(ours[name], theirs, err_msg=name)


# bert_l4_s128_static's l1.q bias Add: sa, za, sb, zb, sc, zc (the scales' float32 bits as stored)
L1Q = (np.uint32(1024997483).view(np.float32), 133, np.uint32(992712695).view(np.float32), 127,
       np.uint32(1024721843).view(np.float32), 136)


def qdq_add_model(path, shape, conv_channels=None, quant=L1Q):
    """c = QDQ Add of a and b with ``quant``'s parameters, u8 tensors of ``shape``; ``conv_channels``: a first goes
    through an identity 1x1 Conv (weights 1, scale 1, its output scale and zero point a's), so that the Add
    is the conv's residual add (bind.fused_add)."""
    sa, za, sb, zb, sc, zc = quant
    node, f32 = helper.make_node, np.float32
    inits = [numpy_helper.from_array(np.array(v, f32 if k == "s" else np.uint8), f"{k}{name}")
             for name, scale, zero in (("a", sa, za), ("b", sb, zb), ("c", sc, zc)) for k, v in (("s", scale), ("z", zero))]
    nodes = [node("DequantizeLinear", ["a", "sa", "za"], ["fa" if conv_channels is None else "fx"])]
    if conv_channels is not None:
        inits += [numpy_helper.from_array(np.eye(conv_channels, dtype=np.int8).reshape(conv_channels, -1, 1, 1), "w"),
                  numpy_helper.from_array(np.ones(conv_channels, f32), "sw"),
                  numpy_helper.from_array(np.zeros(conv_channels, np.int8), "zw")]
        nodes += [node("DequantizeLinear", ["w", "sw", "zw"], ["fw"], axis=0), node("Conv", ["fx", "fw"], ["conv"]),
                  node("QuantizeLinear", ["conv", "sa", "za"], ["qa"]), node("DequantizeLinear", ["qa", "sa", "za"], ["fa"])]
    nodes += [node("DequantizeLinear", ["b", "sb", "zb"], ["fb"]), node("Add", ["fa", "fb"], ["f"]),
              node("QuantizeLinear", ["f", "sc", "zc"], ["c"])]
    u8 = lambda name: helper.make_tensor_value_info(name, TensorProto.UINT8, shape)
    model = helper.make_model(helper.make_graph(nodes, "add", [u8("a"), u8("b")], [u8("c")], inits),
                              opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


def defined_add(a, b, quant=L1Q):
    """The ONNX definition with ``quant``'s parameters, in numpy."""
    sa, za, sb, zb, sc, zc = quant
    fa, fb = ((x.astype(np.int32) - z).astype(np.float32) * s for x, s, z in ((a, sa, za), (b, sb, zb)))
    return np.clip(np.rint((fa + fb) / sc) + zc, 0, 255).astype(np.uint8)


def test_qdq_add_is_the_onnx_definition(tmp_path):
    """A QDQ Add on Arm computes the ONNX definition (dequantize each input, add, divide by the output's
    scale, each in float32, round half to even), on every input pair of L1Q. onnxruntime computes it
    otherwise in both builds, each fusing it into QLinearAdd: the x86 exact mode by MLAS's float ratios
    (fma(a, sa/sc, fma(b, sb/sc, zc - ...)): (197, 95) is 63.4999979 steps, 64 there, 63 by the definition),
    the AArch64 build by integer multipliers (ties away from zero)."""
    qdq_add_model(tmp_path / "add.onnx", [1, 65536])
    a, b = (v.reshape(1, -1).astype(np.uint8) for v in np.meshgrid(np.arange(256), np.arange(256), indexing="ij"))
    defined = defined_add(a, b)
    ((ours, arm, x86),) = three_ways(tmp_path / "add.onnx", {"a": a, "b": b}).values()
    np.testing.assert_array_equal(ours, defined)
    assert (a[x86 != defined].tolist(), b[x86 != defined].tolist()) == ([96, 197], [38, 95])
    assert np.count_nonzero(arm != defined)


def test_qdq_add_fused_into_a_conv_is_the_onnx_definition(tmp_path):
    """The same Add as a convolution's residual add, computed in the conv's output stage (the op list has
    no add of its own): the definition on every input pair, in each of 8 channels. The conv's result reaches
    the add as its exact float32 value, and the add is still one of two u8 tensors: L1Q's product by 1/sc rounds
    every pair alike, so no double reciprocal (before, the float32 type refused it: ResNet-50's residual convs
    on the A76 spent about half their cycles converting to double and back)."""
    from tvm_integration.qnn.lower import pipeline
    from tvm_integration.qnn.runtime.model import compile_model, read
    shape = [1, 8, 256, 256]
    qdq_add_model(tmp_path / "residual.onnx", shape, conv_channels=8)
    lowered = pipeline.lower(read(tmp_path / "residual.onnx", target="neon")[0], "neon", CORE)
    assert not [g.name_hint for g in lowered.functions if "add" in g.name_hint]
    assert not [g.name_hint for g, func in lowered.functions.items() if "float64" in func.script()]
    a, b = (np.broadcast_to(v, shape).astype(np.uint8) for v in np.meshgrid(np.arange(256), np.arange(256),
                                                                          indexing="ij"))
    ours = compile_model(tmp_path / "residual.onnx", target="neon", mcpu=CORE)({"a": a, "b": b})["c"]
    np.testing.assert_array_equal(ours, defined_add(a, b))


# bert_l4_s128_static's l0.g2 Add (GELU's 1 + erf, the 1 a u8 constant): the product by 1/sc rounds 1 input pair otherwise
G2 = (np.uint32(1006665854).view(np.float32), 128, np.uint32(998277249).view(np.float32), 0,
      np.uint32(1006665854).view(np.float32), 0)


def test_qdq_add_multiplies_by_the_reciprocal_only_where_every_pair_rounds_alike():
    """A QDQ Add on Arm multiplies the sum by 1/sc instead of dividing (several times cheaper) only where
    that gives all 65 536 input pairs the definition's output: L1Q's does (its compiled form is checked
    on every pair above), G2's does not, and keeps the division."""
    from tvm_integration.ops.output_stage import divides_alike
    a, b = (v.astype(np.uint8) for v in np.meshgrid(np.arange(256), np.arange(256), indexing="ij"))
    reciprocal = divides_alike(L1Q, ("uint8", "uint8"), (-136, 119))
    sa, za, sb, zb, _, zc = L1Q
    fa, fb = ((x.astype(np.int32) - z).astype(np.float32) * s for x, s, z in ((a, sa, za), (b, sb, zb)))
    np.testing.assert_array_equal(np.clip(np.rint((fa + fb) * reciprocal) + zc, 0, 255), defined_add(a, b))
    sa, za, sb, zb, sc, zc = G2
    fa, fb = ((x.astype(np.int32) - z).astype(np.float32) * s for x, s, z in ((a, sa, za), (b, sb, zb)))
    multiplied, divided = (np.clip(np.rint(y), 0, 255) for y in ((fa + fb) * (np.float32(1) / sc), (fa + fb) / sc))
    assert np.count_nonzero(multiplied != divided) == 1
    assert divides_alike(G2, ("uint8", "uint8"), (0, 255)) is None


def test_qdq_add_divides_by_a_double_product_where_the_reciprocal_rounds_otherwise(tmp_path):
    """G2's Add, whose product by 1/sc rounds a pair otherwise, divides as the float32 product by sc's double
    reciprocal (output_stage.quotient; no division left): the definition on every input pair."""
    from tvm_integration.qnn.runtime.model import compile_model, lower
    qdq_add_model(tmp_path / "g2.onnx", [1, 65536], quant=G2)
    assert not float32_divisions(lower(onnx.load(str(tmp_path / "g2.onnx")), target="neon", mcpu=CORE), "qnn_add")
    a, b = (v.reshape(1, -1).astype(np.uint8) for v in np.meshgrid(np.arange(256), np.arange(256), indexing="ij"))
    ours = compile_model(tmp_path / "g2.onnx", target="neon", mcpu=CORE)({"a": a, "b": b})["c"]
    np.testing.assert_array_equal(ours, defined_add(a, b, G2))


def test_qlinear_add_float_path_equals_onnxruntime_aarch64(tmp_path):
    """MLAS's NEON QLinearAdd falls back to float (division, nearbyintf) where a scale ratio is refused
    (below 2^-14 or not below 256): there the AArch64 build is the reference, and it agrees with ours (the
    ONNX definition) on every input pair."""
    f32, node = np.float32, helper.make_node
    cases = {"c1": (f32(3.0), 3, f32(0.01), 128, f32(0.009), 7), "c2": (f32(1e-6), 0, f32(0.02), 100, f32(0.5), 9)}
    inits, nodes = [], []
    for out, parameters in cases.items():
        for (name, (scale, zero)) in zip("abc", zip(parameters[::2], parameters[1::2])):
            inits += [numpy_helper.from_array(np.array(scale, f32), f"s{name}{out}"),
                      numpy_helper.from_array(np.array(zero, np.uint8), f"z{name}{out}")]
        nodes += [node("DequantizeLinear", ["a", f"sa{out}", f"za{out}"], [f"fa{out}"]),
                  node("DequantizeLinear", ["b", f"sb{out}", f"zb{out}"], [f"fb{out}"]),
                  node("Add", [f"fa{out}", f"fb{out}"], [f"f{out}"]),
                  node("QuantizeLinear", [f"f{out}", f"sc{out}", f"zc{out}"], [out])]
    assert all(not all(2.0 ** -14 <= r < 256 for r in (sa / sc, sb / sc)) for sa, _, sb, _, sc, _ in cases.values())
    u8 = lambda name: helper.make_tensor_value_info(name, TensorProto.UINT8, [1, 65536])
    model = helper.make_model(helper.make_graph(nodes, "adds", [u8("a"), u8("b")], [u8("c1"), u8("c2")], inits),
                              opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "adds.onnx"))
    a, b = (v.reshape(1, -1).astype(np.uint8) for v in np.meshgrid(np.arange(256), np.arange(256), indexing="ij"))
    for name, (ours, arm, _) in three_ways(tmp_path / "adds.onnx", {"a": a, "b": b}).items():
        np.testing.assert_array_equal(ours, arm, err_msg=name)


# name: (input channels, height and width, output channels, groups, kernel, stride, padding)
GROUPED = {"dw3": (64, 28, 64, 64, 3, 1, 1), "dw3s2": (64, 28, 64, 64, 3, 2, 1),
           "dw3_unpadded": (64, 28, 64, 64, 3, 1, 0), "dw5": (64, 28, 64, 64, 5, 1, 2),
           "dw3_multiplier2": (32, 28, 64, 32, 3, 1, 1), "g2_3x3": (64, 14, 64, 2, 3, 1, 1),
           "g8_1x1": (64, 14, 64, 8, 1, 1, 0), "g4_3x3s2": (64, 28, 128, 4, 3, 2, 1)}


def test_float_grouped_convs_equal_onnxruntime_aarch64(tmp_path):
    """Grouped and depthwise Convs left in float (float_grouped_conv), each with a bias: MLAS's im2col and
    sgemm group by group (neon_float._conv2d), a depthwise one on TVM's conv2d. With TVM's conv2d for all,
    g2_3x3 differed on 10 949 of 12 544 outputs and g4_3x3s2 on 16 318 of 25 088; onnxruntime's x86 build
    differs from AArch64 on those two (its NCHWc kernels)."""
    rng = np.random.default_rng(0)
    nodes, inits, outputs = [], [], []
    for name, (ci, h, co, g, k, s, p) in GROUPED.items():
        inits += [numpy_helper.from_array((rng.standard_normal((co, ci // g, k, k)) / np.sqrt(ci // g * k * k))
                                          .astype(np.float32), f"w_{name}"),
                  numpy_helper.from_array((0.1 * rng.standard_normal(co)).astype(np.float32), f"b_{name}")]
        nodes.append(helper.make_node("Conv", [f"x{ci}_{h}", f"w_{name}", f"b_{name}"], [name], group=g,
                                      kernel_shape=[k, k], strides=[s, s], pads=[p] * 4))
        outputs.append((name, [1, co, (h + 2 * p - k) // s + 1, (h + 2 * p - k) // s + 1]))
    images = sorted({(ci, h) for ci, h, *_ in GROUPED.values()})
    onnx.save(_model(nodes, [(f"x{ci}_{h}", [1, ci, h, h]) for ci, h in images], outputs, inits),
              str(tmp_path / "grouped.onnx"))
    feeds = {f"x{ci}_{h}": rng.standard_normal((1, ci, h, h)).astype(np.float32) for ci, h in images}
    results = three_ways(tmp_path / "grouped.onnx", feeds)
    for name, (ours, arm, x86) in results.items():
        np.testing.assert_array_equal(ours, arm, err_msg=name)
        assert np.array_equal(arm, x86) == (name not in ("g2_3x3", "g4_3x3s2")), name
    assert arm_reference.KINDS["float_grouped_conv"].exact and \
        arm_reference.KINDS["float_grouped_conv"].reference == arm_reference.AARCH64



def nncf_block(path, channels=64, size=56):
    """NNCF's residual block (preset performance, ResNet-18): int8 activations with zero point 0 into a Conv
    (a float bias) -> Relu -> uint8, that uint8 tensor into the branch's Conv -> int8, and the Add of the two
    -> Relu -> uint8; weights int8 per channel, zero point 0. Returns its input."""
    rng, f32, node = np.random.default_rng(0), np.float32, helper.make_node
    inits = [numpy_helper.from_array((0.05 * rng.standard_normal(channels)).astype(f32), "bias")]
    for name, scale, zero in (("x", 0.03, np.int8(0)), ("r", 0.006, np.uint8(0)), ("c", 0.01, np.int8(0)),
                              ("y", 0.012, np.uint8(0))):
        inits += [numpy_helper.from_array(np.array(scale, f32), f"s{name}"), numpy_helper.from_array(np.array(zero), f"z{name}")]
    for name in "ab":
        inits.append(numpy_helper.from_array(rng.integers(-127, 128, (channels, channels, 3, 3)).astype(np.int8), f"w{name}"))
        scales = rng.uniform(0.5, 1.5, channels) / (127 * np.sqrt(channels * 9))
        inits += [numpy_helper.from_array(scales.astype(f32), f"sw{name}"),
                  numpy_helper.from_array(np.zeros(channels, np.int8), f"zw{name}")]
    nodes = [node("QuantizeLinear", ["x", "sx", "zx"], ["qx"]), node("DequantizeLinear", ["qx", "sx", "zx"], ["fx"]),
             node("DequantizeLinear", ["wa", "swa", "zwa"], ["fwa"], axis=0),
             node("Conv", ["fx", "fwa", "bias"], ["conv_a"], pads=[1] * 4, name="conv_a"),
             node("Relu", ["conv_a"], ["ra"]), node("QuantizeLinear", ["ra", "sr", "zr"], ["qr"]),
             node("DequantizeLinear", ["qr", "sr", "zr"], ["fr"]),
             node("DequantizeLinear", ["wb", "swb", "zwb"], ["fwb"], axis=0),
             node("Conv", ["fr", "fwb"], ["conv_b"], pads=[1] * 4, name="conv_b"),
             node("QuantizeLinear", ["conv_b", "sc", "zc"], ["qc"]), node("DequantizeLinear", ["qc", "sc", "zc"], ["fc"]),
             node("Add", ["fc", "fr"], ["sum"], name="add"), node("Relu", ["sum"], ["rs"]),
             node("QuantizeLinear", ["rs", "sy", "zy"], ["y"])]
    shape = [1, channels, size, size]
    model = helper.make_model(helper.make_graph(nodes, "nncf_block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                                                [helper.make_tensor_value_info("y", TensorProto.UINT8, shape)], inits),
                              opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return {"x": rng.standard_normal(shape).astype(f32)}


def test_nncf_block_is_float_where_onnxruntime_aarch64_does_not_fuse(tmp_path):
    """onnxruntime's AArch64 build fuses int8 activations as they are, so NNCF's groups whose input and output
    types differ (int8 -> uint8 Conv, uint8 -> int8 Conv, int8 + uint8 Add) stay in float there, a Conv summed by
    MLAS's sgemm; its x86 build turns the int8 pairs uint8 first and fuses all three. As integer ops, 5 of the
    200 704 outputs were one step from that build (NNCF's ResNet-18: 2999 of 3000 logits, up to 0.039)."""
    from tvm_integration.qnn.onnx import ort_fusion
    from tvm_integration.qnn.runtime.model import read
    feeds = nncf_block(tmp_path / "block.onnx")
    model = onnx.load(str(tmp_path / "block.onnx"))
    assert set(ort_fusion.float_layers(model, int8_allowed=True)) == {"conv_a", "conv_b", "add"}
    assert ort_fusion.float_layers(model) == {}
    assert "float_conv" in arm_reference.kinds(read(tmp_path / "block.onnx", target="neon")[0])
    ((ours, arm, _),) = three_ways(tmp_path / "block.onnx", feeds).values()
    np.testing.assert_array_equal(ours, arm)
