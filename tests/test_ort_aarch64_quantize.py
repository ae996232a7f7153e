"""Why onnxruntime's AArch64 build differs from the x86 exact mode (docs/measurements.md, "Why onnxruntime's
AArch64 build differs"): not its QuantizeLinear, which divides and rounds half to even as ONNX defines,
but its QLinearAdd (the fused DequantizeLinear, Add, QuantizeLinear). MLAS's NEON kernel replaces the scale
ratios by integer multipliers of 22 bits and rounds with a rounding right shift, half away from zero.
One model under qemu, three parts, each checked against the ONNX definition computed in numpy:

* QuantizeLinear, scale 2^-5 so that x / scale is exact, every tie and saturation: equal on both builds;
* Add, scales 1, 1 -> 2: (a + b) / 2 on ties; the AArch64 build rounds them up, ONNX to even;
* Add with ResNet-18's first residual scales over all 65 536 input pairs: one pair differs, (136, 142),
  whose value is 99.4999990 but whose float32 evaluation is 99.5 exactly, rounded to 100; AArch64 gives 99;
* Add with bert_l4_s128_static's l1.q bias scales (tests/test_arm_float_ops.py's L1Q), all 65 536 pairs:
  there the x86 exact mode, which fuses the Add too (MLAS's AVX2 QLinearAdd: two FMAs over the float32
  ratios sa/sc, sb/sc), departs from the definition as well, on (96, 38) and (197, 95); the AArch64
  build on those two and on (69, 159) and (170, 216), each by one step;
* Add with MobileNetV2's add_46 scales, all 65 536 pairs: the other way round, the x86 exact mode departs on
  one pair, (140, 119), 16.5000049 steps, 133 by the definition and the AArch64 build, 132 by x86; the
  first output where MobileNetV2's two builds part (bench-model's input).

Each build's output is reproduced bit for bit by a numpy model of its formula, written here from MLAS's
sources and independent of qsynth's code: ``quantize`` and ``qdq_add`` (the ONNX definition: the AArch64
QuantizeLinear, and onnxruntime with the Add left unfused), ``neon_add`` (the AArch64 QLinearAdd) and
``avx2_add`` (the x86 exact mode's QLinearAdd; on the first two Adds it equals the definition)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tvm_integration.bench import mca
from tvm_integration.bench.models import reference_session
from tvm_integration.qemu import cross_model

MISSING = cross_model.missing_tools() or mca.missing_tools()
pytestmark = [pytest.mark.qemu,
              pytest.mark.skipif(MISSING is not None, reason=f"onnxruntime's AArch64 build runs under qemu: {MISSING}")]

F32 = np.float32
Q_SCALE, Q_ZERO = F32(2.0 ** -5), 128
TIE = (F32(1.0), 0, F32(1.0), 0, F32(2.0), 0)                  # sa, za, sb, zb, sc, zc
# ResNet-18 (int8_models "resnet18"): conv_12 + maxpool_5 -> relu_14, scales as stored (their float32 bits)
RESNET = (np.uint32(1035373532).view(F32), 122, np.uint32(1023517066).view(F32), 0,
          np.uint32(1030512369).view(F32), 0)
# bert_l4_s128_static's layer-1 Q-projection bias Add (tests/test_arm_float_ops.L1Q)
L1Q = (np.uint32(1024997483).view(F32), 133, np.uint32(992712695).view(F32), 127, np.uint32(1024721843).view(F32), 136)
# MobileNetV2 (int8_models "mobilenet_v2"): conv_30 + conv_45 -> add_46, where its two onnxruntime builds part
MOBILENET = (np.uint32(1030533767).view(F32), 122, np.uint32(1030917428).view(F32), 112,
             np.uint32(1035243221).view(F32), 116)
ADDS = {1: TIE, 2: RESNET, 3: L1Q, 4: MOBILENET}


def model(path):
    """y = QuantizeLinear(x); ck = QDQ Add of (ak, bk) with ADDS[k]'s parameters."""
    inits = [helper.make_tensor("qs", TensorProto.FLOAT, [], [Q_SCALE]),
             helper.make_tensor("qz", TensorProto.UINT8, [], [Q_ZERO])]
    nodes = [helper.make_node("QuantizeLinear", ["x", "qs", "qz"], ["y"])]
    for k, (sa, za, sb, zb, sc, zc) in ADDS.items():
        for name, scale, zero in (("a", sa, za), ("b", sb, zb), ("c", sc, zc)):
            inits += [helper.make_tensor(f"s{name}{k}", TensorProto.FLOAT, [], [scale]),
                      helper.make_tensor(f"z{name}{k}", TensorProto.UINT8, [], [zero])]
        nodes += [helper.make_node("DequantizeLinear", [f"a{k}", f"sa{k}", f"za{k}"], [f"fa{k}"]),
                  helper.make_node("DequantizeLinear", [f"b{k}", f"sb{k}", f"zb{k}"], [f"fb{k}"]),
                  helper.make_node("Add", [f"fa{k}", f"fb{k}"], [f"fc{k}"]),
                  helper.make_node("QuantizeLinear", [f"fc{k}", f"sc{k}", f"zc{k}"], [f"c{k}"])]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None])]
    inputs += [helper.make_tensor_value_info(f"{n}{k}", TensorProto.UINT8, [None]) for k in ADDS for n in "ab"]
    outputs = [helper.make_tensor_value_info(n, TensorProto.UINT8, [None]) for n in ("y", *(f"c{k}" for k in ADDS))]
    m = helper.make_model(helper.make_graph(nodes, "ort_aarch64_quantize", inputs, outputs, inits),
                          opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, str(path))


def quantize(x, scale, zero):
    """ONNX QuantizeLinear to u8: float32 division, round half to even, + zero point, saturate."""
    return np.clip(np.rint(x.astype(F32) / F32(scale)) + zero, 0, 255).astype(np.uint8)


def qdq_add(a, b, sa, za, sb, zb, sc, zc):
    """ONNX DequantizeLinear of a and b, Add, QuantizeLinear, all in float32."""
    fa = (a.astype(np.int32) - za).astype(F32) * F32(sa)
    fb = (b.astype(np.int32) - zb).astype(F32) * F32(sb)
    return quantize(fa + fb, sc, zc)


def neon_add(a, b, sa, za, sb, zb, sc, zc):
    """What MLAS's NEON QLinearAdd computes (qladd.cpp, MlasCalcQLinearAddParameters: both ratios times
    2^(21 - exponent of the greater), rounded to integers below 2^22; the sums exact in int32; a rounding
    right shift, which with the -1 added to negative sums rounds half away from zero)."""
    ra, rb = F32(sa) / F32(sc), F32(sb) / F32(sc)
    shift = 21 - (int(np.array(max(ra, rb), F32).view(np.uint32) >> 23) - 127)
    ma, mb = (int(np.rint(r * F32(2.0 ** shift))) for r in (ra, rb))
    acc = (a.astype(np.int64) - za) * ma + (b.astype(np.int64) - zb) * mb
    acc -= acc < 0
    return np.clip(((acc + (1 << (shift - 1))) >> shift) + zc, 0, 255).astype(np.uint8)


def avx2_add(a, b, sa, za, sb, zb, sc, zc):
    """What MLAS's x86 QLinearAdd computes (qladd.cpp's AVX2 path, MlasQLinearAddKernelAvx2Helper):
    ratios ra = sa/sc and rb = sb/sc in float32, the constant zc - (ra*za + rb*zb) (one FMA), then
    fma(a, ra, fma(b, rb, constant)), rounded half to even and saturated. Each FMA in float64: a u8 times a
    float32 holds at most 32 significant bits, and adding a float32 of these magnitudes stays exact within
    53, so one rounding to float32 after it is the FMA's."""
    fma = lambda x, y, z: F32(np.float64(x) * np.float64(y) + np.float64(z))
    ra, rb = F32(sa) / F32(sc), F32(sb) / F32(sc)
    fixed = F32(F32(zc) - fma(ra, F32(za), rb * F32(zb)))
    inner = (b.astype(np.float64) * np.float64(rb) + np.float64(fixed)).astype(F32)
    y = (a.astype(np.float64) * np.float64(ra) + inner.astype(np.float64)).astype(F32)
    return np.clip(np.rint(y), 0, 255).astype(np.uint8)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from tvm_integration.bench import ort_aarch64
    path = tmp_path_factory.mktemp("ort-aarch64-quantize") / "quantize_add.onnx"
    model(path)
    k = np.arange(-140, 141, dtype=F32)
    x = np.concatenate([k * Q_SCALE, (k + F32(0.5)) * Q_SCALE,                        # integers and ties
                        np.random.default_rng(0).uniform(-4.5, 4.7, 4096).astype(F32)])
    pairs = lambda n: (v.ravel().astype(np.uint8) for v in np.meshgrid(np.arange(n), np.arange(n), indexing="ij"))
    feeds = {"x": x}
    for k, n in ((1, 16), (2, 256), (3, 256), (4, 256)):
        feeds[f"a{k}"], feeds[f"b{k}"] = pairs(n)
    outputs = ["y", *(f"c{k}" for k in ADDS)]
    arm, _ = ort_aarch64.run(path, feeds, outputs, "cortex-a53", counted=False)
    x86 = reference_session(str(path)).run(outputs, feeds)
    expected = [quantize(x, Q_SCALE, Q_ZERO), *(qdq_add(feeds[f"a{k}"], feeds[f"b{k}"], *ADDS[k]) for k in ADDS)]
    return feeds, dict(zip(outputs, arm)), dict(zip(outputs, x86)), dict(zip(outputs, expected))


def test_x86_exact_mode_is_the_onnx_definition_but_near_half_steps(runs):
    feeds, _, x86, expected = runs
    for name in ("y", "c1", "c2"):
        np.testing.assert_array_equal(x86[name], expected[name], err_msg=name)
    for k in ADDS:                                  # its QLinearAdd, fused: MLAS's AVX2 formula, bit for bit
        np.testing.assert_array_equal(x86[f"c{k}"], avx2_add(feeds[f"a{k}"], feeds[f"b{k}"], *ADDS[k]))
    differ = np.nonzero(x86["c3"] != expected["c3"])[0]
    assert list(zip(feeds["a3"][differ], feeds["b3"][differ])) == [(96, 38), (197, 95)]


def test_aarch64_quantize_linear_is_the_onnx_definition(runs):
    feeds, arm, _, expected = runs
    assert np.count_nonzero(expected["y"] == 0) and np.count_nonzero(expected["y"] == 255)   # saturates both ways
    np.testing.assert_array_equal(arm["y"], expected["y"])


def test_aarch64_qlinear_add_rounds_ties_away_from_zero(runs):
    feeds, arm, _, expected = runs
    total = feeds["a1"].astype(np.int64) + feeds["b1"]
    np.testing.assert_array_equal(arm["c1"], (total + 1) // 2)                     # half up
    np.testing.assert_array_equal(arm["c1"], neon_add(feeds["a1"], feeds["b1"], *TIE))
    differ = arm["c1"] != expected["c1"]
    np.testing.assert_array_equal(differ, total % 4 == 1)                          # (a+b)/2 = 0.5, 2.5, ...: ONNX even
    a, b = feeds["a1"][differ][0], feeds["b1"][differ][0]
    assert (a, b, expected["c1"][differ][0], arm["c1"][differ][0]) == (0, 1, 0, 1)


def test_aarch64_qlinear_add_on_resnet18_scales(runs):
    feeds, arm, _, expected = runs
    np.testing.assert_array_equal(arm["c2"], neon_add(feeds["a2"], feeds["b2"], *RESNET))
    (i,) = np.nonzero(arm["c2"] != expected["c2"])[0]
    assert (feeds["a2"][i], feeds["b2"][i], expected["c2"][i], arm["c2"][i]) == (136, 142, 100, 99)


def test_aarch64_qlinear_add_on_encoder_scales(runs):
    """On L1Q's scales both fused formulas depart from the definition, each on its own pairs: (197, 95) is
    63.4999979 output steps, 63 by the definition, 64 by both builds; (69, 159) and (170, 216) only on AArch64."""
    feeds, arm, _, expected = runs
    a, b = feeds["a3"], feeds["b3"]
    np.testing.assert_array_equal(arm["c3"], neon_add(a, b, *L1Q))
    differ = np.nonzero(arm["c3"] != expected["c3"])[0]
    assert list(zip(a[differ], b[differ])) == [(69, 159), (96, 38), (170, 216), (197, 95)]
    assert [int(arm["c3"][i]) - int(expected["c3"][i]) for i in differ] == [-1, 1, -1, 1]


def test_x86_qlinear_add_on_mobilenet_v2_scales(runs):
    feeds, arm, x86, expected = runs
    a, b = feeds["a4"], feeds["b4"]
    np.testing.assert_array_equal(arm["c4"], expected["c4"])
    np.testing.assert_array_equal(arm["c4"], neon_add(a, b, *MOBILENET))
    (i,) = np.nonzero(x86["c4"] != expected["c4"])[0]
    assert (a[i], b[i], expected["c4"][i], x86["c4"][i]) == (140, 119, 133, 132)


def test_aarch64_adds_left_unfused_are_the_onnx_definition(runs, tmp_path):
    """With each Add's float sum also a graph output (ort_aarch64.adds_as_defined), onnxruntime does not fuse
    it into QLinearAdd, and its AArch64 build computes the ONNX definition: the stated reference on Arm."""
    from tvm_integration.bench import ort_aarch64
    feeds, arm, _, expected = runs
    model(tmp_path / "fused.onnx")
    onnx.save(ort_aarch64.adds_as_defined(onnx.load(str(tmp_path / "fused.onnx"))), str(tmp_path / "defined.onnx"))
    names = [f"c{k}" for k in ADDS]
    defined, _ = ort_aarch64.run(tmp_path / "defined.onnx", feeds, names, "cortex-a53", counted=False)
    for name, result in zip(names, defined):
        assert np.count_nonzero(arm[name] != expected[name]) or name == "c4", name
        np.testing.assert_array_equal(result, expected[name], err_msg=name)
