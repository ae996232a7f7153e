"""A QOperator model's QLinearAdd on Arm (issue 49): a com.microsoft op with no ONNX definition, so its
reference is the runtime's kernel, on Arm MLAS's NEON QLinearAdd (integer multipliers, ties away from zero;
its float formula where it refuses the scale ratios). Each add below, on every pair of 8-bit inputs, against
onnxruntime's AArch64 build under qemu (and, built for x86, against its x86 exact mode, whose kernel the x86
build follows): ties, the scales of ResNet-18 and of bert_l4_s128_static, s8s8_qoperator's add_1 (two of its
pairs 23.4999961 steps: 23 by both builds, 24 by the QDQ definition), a scalar operand, three sets of scales
MLAS refuses (where its float formula rounds 5 pairs otherwise than the QDQ definition; where GCC's FMA of the
first input's product, and where one of the second's would, round one pair otherwise than unfused products),
and an add fused into a convolution's output stage; and adds whose scales and zero points are graph inputs, for
which that kernel computes its multipliers on each call. QLinearMul, also com.microsoft, likewise on every pair
(MLAS's formula in numpy too: on Arm one FMA, on x86 two roundings);
QLinearSigmoid's and QLinearLeakyRelu's tables on every input (MLAS's logistic in numpy too)."""
from __future__ import annotations

import re
import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tvm_integration.bench import mca
from tvm_integration.bench.models import reference_session
from tvm_integration.qemu import cross_model
from tvm_integration.qnn.runtime import arm_reference

MISSING = cross_model.missing_tools() or mca.missing_tools()
pytestmark = [pytest.mark.qemu,
              pytest.mark.skipif(MISSING is not None, reason=f"onnxruntime's AArch64 build runs under qemu: {MISSING}")]

CORE = "cortex-a53"
F32, BITS = np.float32, lambda bits: np.uint32(bits).view(np.float32)
TIE = (F32(1), 0, F32(1), 0, F32(2), 0)                     # sa, za, sb, zb, sc, zc: (a + b) / 2
# output -> (inputs, parameters); a, b: every u8 pair, a8, b8: every s8 pair, s: one u8, x and r: 8 channels of
# the u8 pairs, x through an identity QLinearConv first
ADDS = {
    "tie": ("a", "b", TIE),
    "tie8": ("a8", "b8", TIE),
    "scalar": ("a", "s", TIE),
    "resnet18": ("a", "b", (BITS(1035373532), 122, BITS(1023517066), 0, BITS(1030512369), 0)),
    "l1q": ("a", "b", (BITS(1024997483), 133, BITS(992712695), 127, BITS(1024721843), 136)),
    "s8s8_add_1": ("a8", "b8", (BITS(1021763243), 11, BITS(1009815609), -128, BITS(1015962639), -128)),
    "float_formula": ("a", "b", (BITS(887813050), 81, BITS(1036136413), 190, BITS(1026769171), 45)),
    "float_fma_a": ("a", "b", (BITS(1025035941), 239, BITS(899443147), 209, BITS(1030662894), 171)),
    "float_fma_b": ("a", "b", (BITS(897502834), 62, BITS(1026496122), 42, BITS(1027761889), 12)),
    "conv_residual": ("y", "r", TIE),
}
CHANNELS = 8


def model(path):
    """One com.microsoft QLinearAdd per ADDS entry; y = QLinearConv(x) by the identity, scales 1."""
    node, inits, nodes = helper.make_node, [], []

    def constant(name, value, dtype):
        inits.append(numpy_helper.from_array(np.array(value, dtype), name))
        return name
    one, zero_u8 = constant("one", 1.0, F32), constant("zero_u8", 0, np.uint8)
    nodes.append(node("QLinearConv", ["x", one, zero_u8,
                                      constant("w", np.eye(CHANNELS, dtype=np.int8).reshape(CHANNELS, -1, 1, 1), np.int8),
                                      constant("sw", np.ones(CHANNELS), F32), constant("zw", np.zeros(CHANNELS), np.int8),
                                      one, zero_u8], ["y"]))
    for out, (a, b, (sa, za, sb, zb, sc, zc)) in ADDS.items():
        dtype = np.int8 if a == "a8" else np.uint8
        params = [constant(f"{out}_{k}", v, F32 if k.startswith("s") else dtype)
                  for k, v in (("sa", sa), ("za", za), ("sb", sb), ("zb", zb), ("sc", sc), ("zc", zc))]
        nodes.append(node("QLinearAdd", [a, *params[:2], b, *params[2:4], *params[4:]], [out], domain="com.microsoft"))
    shapes = {"a": [1, 65536], "b": [1, 65536], "a8": [1, 65536], "b8": [1, 65536], "s": [1, 1],
              "x": [1, CHANNELS, 256, 256], "r": [1, CHANNELS, 256, 256]}
    info = lambda name, operand: helper.make_tensor_value_info(
        name, TensorProto.INT8 if operand == "a8" else TensorProto.UINT8, shapes[operand])
    inputs = [info(name, name if name != "b8" else "a8") for name in shapes]
    outputs = [info(out, "x" if a == "y" else a) for out, (a, _, _) in ADDS.items()]
    graph = helper.make_graph(nodes, "qlinear_adds", inputs, outputs, inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8
    onnx.save(m, str(path))


def feeds() -> dict[str, np.ndarray]:
    u8, s8 = (np.meshgrid(np.arange(lo, lo + 256), np.arange(lo, lo + 256), indexing="ij") for lo in (0, -128))
    image = lambda v: np.broadcast_to(v.reshape(1, 1, 256, 256), (1, CHANNELS, 256, 256)).astype(np.uint8)
    return {"a": u8[0].reshape(1, -1).astype(np.uint8), "b": u8[1].reshape(1, -1).astype(np.uint8),
            "a8": s8[0].reshape(1, -1).astype(np.int8), "b8": s8[1].reshape(1, -1).astype(np.int8),
            "s": np.array([[1]], np.uint8), "x": image(u8[0]), "r": image(u8[1])}


def qdq_definition(a, b, sa, za, sb, zb, sc, zc):
    """A QDQ Add as ONNX defines it (what ours computed for QLinearAdd before), in numpy."""
    lo, hi = (-128, 127) if a.dtype == np.int8 else (0, 255)
    fa, fb = ((x.astype(np.int32) - z).astype(F32) * F32(s) for x, s, z in ((a, sa, za), (b, sb, zb)))
    return np.clip(np.rint((fa + fb) / F32(sc)) + zc, lo, hi).astype(a.dtype)


def test_qlinear_add_equals_each_onnxruntime_build_it_is_built_for(tmp_path):
    from tvm_integration.bench import ort_aarch64
    from tvm_integration.qnn.lower import pipeline
    from tvm_integration.qnn.runtime.model import compile_model, read
    model(tmp_path / "adds.onnx")
    inputs, names = feeds(), list(ADDS)
    ours = compile_model(tmp_path / "adds.onnx", target="neon", mcpu=CORE)
    assert arm_reference.follows(ours.op_kinds)["qlinear_add"] == arm_reference.AARCH64
    ours = ours(inputs)
    arm = dict(zip(names, ort_aarch64.run(tmp_path / "adds.onnx", inputs, names, CORE, counted=False)[0]))
    for name in names:
        np.testing.assert_array_equal(ours[name], arm[name], err_msg=name)
    operands = lambda a, b: (inputs["x" if a == "y" else a], inputs[b])
    differ = {name: int(np.count_nonzero(arm[name] != qdq_definition(*operands(a, b), *quant)))
              for name, (a, b, quant) in ADDS.items()}
    assert differ == {"tie": 16384, "tie8": 16512, "scalar": 16384, "resnet18": 1, "l1q": 4, "s8s8_add_1": 2,
                      "float_formula": 5, "float_fma_a": 1, "float_fma_b": 0, "conv_residual": 131072}
    lowered = pipeline.lower(read(tmp_path / "adds.onnx", target="neon")[0], "neon", CORE)
    assert len([g for g in lowered.functions if "add" in g.name_hint]) == len(ADDS) - 1   # conv_residual: fused
    x86 = compile_model(tmp_path / "adds.onnx")(inputs)
    for name, expected in zip(names, reference_session(str(tmp_path / "adds.onnx")).run(names, inputs)):
        np.testing.assert_array_equal(x86[name], expected, err_msg=name)


RUN_TIME = ("tie", "tie8", "l1q", "s8s8_add_1", "float_formula", "float_fma_a")       # ADDS entries


def run_time_model(path):
    """One com.microsoft QLinearAdd per RUN_TIME entry, its six scales and zero points 0-d graph inputs."""
    inputs, nodes, outputs = [], [], []
    for out in RUN_TIME:
        a, b, _ = ADDS[out]
        dtype = TensorProto.INT8 if a == "a8" else TensorProto.UINT8
        params = [f"{out}_{k}" for k in ("sa", "za", "sb", "zb", "sc", "zc")]
        inputs += [helper.make_tensor_value_info(p, TensorProto.FLOAT if p[-2] == "s" else dtype, []) for p in params]
        nodes.append(helper.make_node("QLinearAdd", [a, *params[:2], b, *params[2:]], [out], domain="com.microsoft"))
        outputs.append(helper.make_tensor_value_info(out, dtype, [1, 65536]))
    inputs += [helper.make_tensor_value_info(x, TensorProto.INT8 if x.endswith("8") else TensorProto.UINT8, [1, 65536])
               for x in ("a", "b", "a8", "b8")]
    graph = helper.make_graph(nodes, "run_time_adds", inputs, outputs)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8
    onnx.save(m, str(path))


def test_qlinear_add_of_run_time_scales_equals_each_onnxruntime_build(tmp_path):
    """Before, neon computed MLAS's AVX2 formula here: 16 384, 16 512, 2, 1 and 20 pairs of the first five
    adds differed from the AArch64 build."""
    from tvm_integration.bench import ort_aarch64
    from tvm_integration.qnn.runtime.model import compile_model
    path = tmp_path / "run_time_adds.onnx"
    run_time_model(path)
    inputs = {k: v for k, v in feeds().items() if k in ("a", "b", "a8", "b8")}
    for out in RUN_TIME:
        dtype = np.int8 if ADDS[out][0] == "a8" else np.uint8
        for k, v in zip(("sa", "za", "sb", "zb", "sc", "zc"), ADDS[out][2]):
            inputs[f"{out}_{k}"] = np.array(v, F32 if k[0] == "s" else dtype)
    ours = compile_model(path, target="neon", mcpu=CORE)
    assert arm_reference.follows(ours.op_kinds)["qlinear_add_runtime"] == arm_reference.AARCH64
    arm = ort_aarch64.run(path, inputs, list(RUN_TIME), CORE, counted=False)[0]
    for name, got, expected in zip(RUN_TIME, (ours(inputs)[n] for n in RUN_TIME), arm):
        np.testing.assert_array_equal(got, expected, err_msg=name)
    x86 = compile_model(path)(inputs)
    for name, expected in zip(RUN_TIME, reference_session(str(path)).run(list(RUN_TIME), inputs)):
        np.testing.assert_array_equal(x86[name], expected, err_msg=name)


# QLinearMul (com.microsoft; and a QDQ Mul, which onnxruntime fuses into it): MLAS's kernel, float32(acc) * (sa * sb
# / sc) + zc rounded half to even, where GCC contracted the NEON kernel's multiply and add into one FMA for the
# AArch64 build; x86's SSE2 kernel rounds twice. output -> (a, b, parameters, form); form: "constant" (initializers),
# "qdq" (DQ -> Mul -> Q), "run_time" (six 0-d graph inputs), "mixed" (scales graph inputs, zero points initializers).
# MUL_U8: tests/test_qnn.py's QDQ u8 Mul; MUL_S8, MUL_MIXED: found by a numpy search of 3000 random scales (29 differ)
MUL_U8 = (F32(0.1), 100, F32(0.004), 3, F32(0.02), 7)
MUL_S8 = (BITS(1032954914), 89, BITS(1002800866), -112, BITS(1028612637), 77)
MUL_MIXED = (BITS(1009744585), 34, BITS(1022968064), 120, BITS(1028038287), 145)
MULS = {
    "mul_tie": ("a", "b", TIE, "constant"),
    "mul_tie8": ("a8", "b8", TIE, "constant"),
    "mul_scalar": ("a", "s", (F32(0.0173), 131, F32(0.0291), 77, F32(0.0517), 129), "constant"),
    "mul_u8": ("a", "b", MUL_U8, "constant"),
    "mul_s8": ("a8", "b8", MUL_S8, "constant"),
    "mul_qdq_u8": ("a", "b", MUL_U8, "qdq"),
    "mul_qdq_s8": ("a8", "b8", MUL_S8, "qdq"),
    "mul_run_time_u8": ("a", "b", MUL_U8, "run_time"),
    "mul_run_time_s8": ("a8", "b8", MUL_S8, "run_time"),
    "mul_mixed": ("a", "b", MUL_MIXED, "mixed"),
}


def mul_model(path) -> dict[str, np.ndarray]:
    """One QLinearMul (or QDQ Mul) per MULS entry; the values of its graph inputs that are parameters."""
    inits, nodes, inputs, fed = [], [], [], {}
    for out, (a, b, quant, form) in MULS.items():
        dtype = np.int8 if a == "a8" else np.uint8
        names = [f"{out}_{k}" for k in ("sa", "za", "sb", "zb", "sc", "zc")]
        for name, v in zip(names, quant):
            value = np.array(v, F32 if name[-2] == "s" else dtype)
            if form == "run_time" or form == "mixed" and name[-2] == "s":
                fed[name] = value
                inputs.append(helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(value.dtype), []))
            else:
                inits.append(numpy_helper.from_array(value, name))
        if form == "qdq":
            nodes += [helper.make_node("DequantizeLinear", [a, *names[:2]], [f"{out}_da"]),
                      helper.make_node("DequantizeLinear", [b, *names[2:4]], [f"{out}_db"]),
                      helper.make_node("Mul", [f"{out}_da", f"{out}_db"], [f"{out}_f"]),
                      helper.make_node("QuantizeLinear", [f"{out}_f", *names[4:]], [out])]
        else:
            nodes.append(helper.make_node("QLinearMul", [a, *names[:2], b, *names[2:]], [out], domain="com.microsoft"))
    operand = lambda name: TensorProto.INT8 if name.endswith("8") else TensorProto.UINT8
    inputs += [helper.make_tensor_value_info(x, operand(x), [1, 65536] if x != "s" else [1, 1])
               for x in ("a", "b", "a8", "b8", "s")]
    outputs = [helper.make_tensor_value_info(out, operand(a), [1, 65536]) for out, (a, *_) in MULS.items()]
    m = helper.make_model(helper.make_graph(nodes, "qlinear_muls", inputs, outputs, inits),
                          opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8
    onnx.save(m, str(path))
    return fed


def mlas_mul(a, b, sa, za, sb, zb, sc, zc, fused: bool):
    """MLAS's QLinearMul in numpy: ``fused``, the product and zc in one FMA (float64 holds acc * ratio + zc exactly
    for ratios of at least 2^-13, so one rounding to float32 is the FMA's); else the product rounded first."""
    acc = ((a.astype(np.int32) - za) * (b.astype(np.int32) - zb)).astype(F32)
    ratio = F32(F32(sa) * F32(sb)) / F32(sc)
    assert ratio >= 2.0 ** -13
    y = (acc.astype(np.float64) * np.float64(ratio) + zc).astype(F32) if fused else acc * ratio + F32(zc)
    lo, hi = (-128, 127) if a.dtype == np.int8 else (0, 255)
    return np.clip(np.rint(y), lo, hi).astype(a.dtype)


def test_qlinear_mul_equals_each_onnxruntime_build(tmp_path):
    """Before, neon computed x86's two roundings: the AArch64 build differed from it on the pairs counted below."""
    from tvm_integration.bench import ort_aarch64
    from tvm_integration.qnn.runtime.model import compile_model
    path = tmp_path / "muls.onnx"
    inputs = {k: v for k, v in feeds().items() if k in ("a", "b", "a8", "b8", "s")} | mul_model(path)
    names = list(MULS)
    ours = compile_model(path, target="neon", mcpu=CORE)
    assert {k: arm_reference.follows(ours.op_kinds)[k] for k in ("mul", "qlinear_mul_runtime")} == \
        {"mul": arm_reference.AARCH64, "qlinear_mul_runtime": arm_reference.AARCH64}
    ours = ours(inputs)
    arm = dict(zip(names, ort_aarch64.run(path, inputs, names, CORE, counted=False)[0]))
    x86 = compile_model(path)(inputs)
    reference = dict(zip(names, reference_session(str(path)).run(names, inputs)))
    twice = {}
    for out, (a, b, quant, _) in MULS.items():
        operands = inputs[a], np.broadcast_to(inputs[b], inputs[a].shape)
        np.testing.assert_array_equal(arm[out], mlas_mul(*operands, *quant, fused=True), err_msg=out)
        np.testing.assert_array_equal(ours[out], arm[out], err_msg=out)
        np.testing.assert_array_equal(reference[out], mlas_mul(*operands, *quant, fused=False), err_msg=out)
        np.testing.assert_array_equal(x86[out], reference[out], err_msg=out)
        twice[out] = int(np.count_nonzero(arm[out] != reference[out]))
    assert twice == {"mul_tie": 0, "mul_tie8": 0, "mul_scalar": 0, "mul_u8": 65, "mul_s8": 16, "mul_qdq_u8": 65,
                     "mul_qdq_s8": 16, "mul_run_time_u8": 65, "mul_run_time_s8": 16, "mul_mixed": 21}


def test_qlinear_mul_multiplies_int16_lanes_and_rounds_in_integers_on_an_out_of_order_core(tmp_path):
    """On Arm the operands less their zero points are int16 lanes (exact: within +-255) multiplied by smull (umull), and
    the FMA's result is rounded by adding 1.5 * 2^23 and reading the sum's bits, then narrowed and clamped in
    integers (output_stage.round_narrowed). Before, tbl widened each byte to int32 and fminnm, fmaxnm and frintx clamped
    and rounded in float: EfficientNet-B0's SiLU and squeeze-and-excitation Muls on the A76 (N1 model) took 1.009
    Mcycles for 144x56x56, now 0.817 (onnxruntime's AArch64 build 0.696). Every u8 and s8 pair, as MLAS's NEON
    kernel computes it (``mlas_mul``, which test_qlinear_mul_equals_each_onnxruntime_build checks against it)."""
    from tvm_integration.qemu import cross
    from tvm_integration.qnn.runtime.model import compile_model
    path = tmp_path / "muls.onnx"
    inputs = {k: v for k, v in feeds().items() if k in ("a", "b", "a8", "b8", "s")} | mul_model(path)
    model = compile_model(path, target="neon", mcpu="cortex-a76")
    ours = model(inputs)
    for out, (a, b, quant, form) in MULS.items():
        operands = inputs[a], np.broadcast_to(inputs[b], inputs[a].shape)
        np.testing.assert_array_equal(ours[out], mlas_mul(*operands, *quant, fused=True), err_msg=out)
    model.save(tmp_path / "m.so")
    code = subprocess.run([cross.CC.replace("gcc", "objdump"), "-d", "--no-show-raw-insn", str(tmp_path / "m.so")],
                          capture_output=True, text=True, check=True).stdout
    muls = [f for f in code.split("\n\n") if re.search(r"<qnn_mul\d*_compute_>:", f)]
    assert len(muls) >= 3, len(muls)             # u8 and s8 pairs, a u8 scalar (equal ones built once)
    # the u8 and s8 pairs multiply int16 lanes (umull: zero points 0), a scalar operand by its splat
    assert sum(bool(re.search(r"\t[su]mull", f)) for f in muls) >= 2
    for function in muls:
        assert "fadd" in function, function
        assert not re.search(r"\t(tbl|fminnm|fmaxnm|frintx)\b", function), function


# onnxruntime's QLinearSigmoid (com.microsoft) builds a 256-entry table: each input dequantized, MLAS's logistic
# (on Arm its generic kernel: Eigen's rational function, FMA chains, x clamped to [-18, 18]), quantized; a QDQ
# Sigmoid is fused into one. output -> (op, input, (x scale, x zero point, y scale, y zero point), attributes); v:
# every u8 value, v8 every s8 value; "Sigmoid": DQ -> Sigmoid -> Q, "FloatSigmoid": DQ -> Sigmoid, a float output.
# SIGMOID_U8, SIGMOID_S8: found by a numpy search of 20 000 random scales (11 tables differ from the correctly
# rounded sigmoid's, each on one entry); SIGMOID_STEPS: output steps of 1e-6, where the logistic's absolute error
# (its p / q + 0.5 cancels for x < 0) shows
SIGMOID_U8 = (BITS(1039292727), 190, F32(1 / 256), 199)
SIGMOID_S8 = (BITS(1028631877), 72, F32(1 / 256), 41)
SIGMOID_STEPS = (F32(0.2), 0, F32(1e-6), -128)
LOOKUPS = {
    "sigmoid_u8": ("QLinearSigmoid", "v", (F32(0.05), 128, F32(1 / 256), 0), {}),
    "sigmoid_s8": ("QLinearSigmoid", "v8", (F32(0.05), 0, F32(1 / 256), -128), {}),
    "sigmoid_found_u8": ("QLinearSigmoid", "v", SIGMOID_U8, {}),
    "sigmoid_found_s8": ("QLinearSigmoid", "v8", SIGMOID_S8, {}),
    "sigmoid_steps": ("QLinearSigmoid", "v8", SIGMOID_STEPS, {}),
    "sigmoid_qdq": ("Sigmoid", "v", SIGMOID_U8, {}),
    "sigmoid_float": ("FloatSigmoid", "v8", (F32(0.2), 3, None, None), {}),
    "leaky_relu_u8": ("QLinearLeakyRelu", "v", (F32(0.03), 100, F32(0.02), 20), {"alpha": 0.1}),
    "leaky_relu_s8": ("QLinearLeakyRelu", "v8", (F32(0.045), -7, F32(0.011), 9), {"alpha": 0.3333}),
}


def lookup_model(path):
    inits, nodes = [], []
    for out, (op, v, quant, attrs) in LOOKUPS.items():
        dtype = np.int8 if v == "v8" else np.uint8
        names = [f"{out}_{k}" for k, value in zip(("xs", "xz", "ys", "yz"), quant) if value is not None]
        inits += [numpy_helper.from_array(np.array(value, F32 if name.endswith("s") else dtype), name)
                  for name, value in zip(names, quant)]
        if op in ("Sigmoid", "FloatSigmoid"):
            nodes += [helper.make_node("DequantizeLinear", [v, *names[:2]], [f"{out}_d"]),
                      helper.make_node("Sigmoid", [f"{out}_d"], [out if op == "FloatSigmoid" else f"{out}_f"])]
            if op == "Sigmoid":
                nodes.append(helper.make_node("QuantizeLinear", [f"{out}_f", *names[2:]], [out]))
        else:
            nodes.append(helper.make_node(op, [v, *names], [out], domain="com.microsoft", **attrs))
    operand = lambda name: TensorProto.INT8 if name.endswith("8") else TensorProto.UINT8
    outputs = [helper.make_tensor_value_info(out, TensorProto.FLOAT if op == "FloatSigmoid" else operand(v), [1, 256])
               for out, (op, v, _, _) in LOOKUPS.items()]
    inputs = [helper.make_tensor_value_info(v, operand(v), [1, 256]) for v in ("v", "v8")]
    graph = helper.make_graph(nodes, "lookups", inputs, outputs, inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8
    onnx.save(m, str(path))


LOGISTIC_ALPHA = [F32(c) for c in (4.37031012579801e-11, 1.15627324459942e-07, 6.08574864600143e-05,
                                   8.51377133304701e-03, 2.48287947061529e-01)]
LOGISTIC_BETA = [F32(c) for c in (6.10247389755681e-13, 5.76102136993427e-09, 6.29106785017040e-06,
                                  1.70198817374094e-03, 1.16817656904453e-01, 9.93151921023180e-01)]


def mlas_logistic(x):
    """MLAS's logistic.cpp generic kernel in numpy, each multiply-add one rounding (in float64, then float32)."""
    fma = lambda a, b, c: (np.float64(a) * np.float64(b) + np.float64(c)).astype(F32)
    x = np.clip(x, F32(-18), F32(18))
    square = x * x
    p, q = LOGISTIC_ALPHA[0], LOGISTIC_BETA[0]
    for c in LOGISTIC_ALPHA[1:]:
        p = fma(p, square, c)
    for c in LOGISTIC_BETA[1:]:
        q = fma(q, square, c)
    return np.clip(p * x / q + F32(0.5), F32(0), F32(1))


def test_qlinear_sigmoid_equals_onnxruntime_aarch64(tmp_path):
    """Before, neon's table was TVM's sigmoid of each value: the AArch64 build's tables of SIGMOID_U8 (also as a QDQ
    Sigmoid), SIGMOID_S8 and SIGMOID_STEPS differed from it on 1, 1 and 3 entries. QLinearLeakyRelu's tables
    (``v >= 0 ? v : alpha * v``) were equal as they are. The x86 build equals its exact mode, whose tables are the
    AArch64 build's (its FMA3 logistic kernel is the same arithmetic); with TVM's sigmoid it differed on those
    entries too, and the float Sigmoid on 164 of 256 outputs."""
    from tvm_integration.bench import ort_aarch64
    from tvm_integration.qnn.runtime.model import compile_model
    path = tmp_path / "lookups.onnx"
    lookup_model(path)
    inputs = {"v": np.arange(256).astype(np.uint8).reshape(1, -1),
              "v8": np.arange(-128, 128).astype(np.int8).reshape(1, -1)}
    names = list(LOOKUPS)
    ours = compile_model(path, target="neon", mcpu=CORE)
    assert arm_reference.follows(ours.op_kinds)["sigmoid"] == arm_reference.AARCH64
    ours = ours(inputs)
    arm = dict(zip(names, ort_aarch64.run(path, inputs, names, CORE, counted=False)[0]))
    for out, (op, v, (xs, xz, ys, yz), _) in LOOKUPS.items():
        np.testing.assert_array_equal(ours[out], arm[out], err_msg=out)
        if "Sigmoid" in op:
            y = mlas_logistic(xs * (inputs[v].astype(np.int32) - xz).astype(F32))
            lo, hi = (-128, 127) if v == "v8" else (0, 255)
            expected = y if ys is None else np.clip(np.rint(y / ys) + yz, lo, hi).astype(inputs[v].dtype)
            np.testing.assert_array_equal(arm[out], expected, err_msg=out)
    x86 = compile_model(path)(inputs)
    for out, reference in zip(names, reference_session(path).run(names, inputs)):
        np.testing.assert_array_equal(x86[out], reference, err_msg=out)
