"""Why onnxruntime's AArch64 build differs from the x86 exact mode (docs/measurements.md, "Why onnxruntime's
AArch64 build differs"): not its QuantizeLinear, which divides and rounds half to even as ONNX defines,
but its QLinearAdd (the fused DequantizeLinear, Add, QuantizeLinear). MLAS's NEON kernel replaces the scale
ratios by integer multipliers of 22 bits and rounds with a rounding right shift, half away from zero.
One model under qemu, three parts, each checked against the ONNX definition computed in numpy:

* QuantizeLinear, scale 2^-5 so that x / scale is exact, every tie and saturation: equal on both builds;
* Add, scales 1, 1 -> 2: (a + b) / 2 on ties; the AArch64 build rounds them up, ONNX to even;
* Add with ResNet-18's first residual scales over all 65 536 input pairs: one pair differs, (136, 142),
  whose value is 99.4999990 but whose float32 evaluation is 99.5 exactly, rounded to 100; AArch64 gives 99.

The x86 exact mode (bench/models.reference_session) equals the numpy definition on all of them."""
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


def model(path):
    """y = QuantizeLinear(x); c1, c2 = QDQ Add of (a1, b1) with TIE's and of (a2, b2) with RESNET's parameters."""
    inits = [helper.make_tensor("qs", TensorProto.FLOAT, [], [Q_SCALE]),
             helper.make_tensor("qz", TensorProto.UINT8, [], [Q_ZERO])]
    nodes = [helper.make_node("QuantizeLinear", ["x", "qs", "qz"], ["y"])]
    for k, (sa, za, sb, zb, sc, zc) in ((1, TIE), (2, RESNET)):
        for name, scale, zero in (("a", sa, za), ("b", sb, zb), ("c", sc, zc)):
            inits += [helper.make_tensor(f"s{name}{k}", TensorProto.FLOAT, [], [scale]),
                      helper.make_tensor(f"z{name}{k}", TensorProto.UINT8, [], [zero])]
        nodes += [helper.make_node("DequantizeLinear", [f"a{k}", f"sa{k}", f"za{k}"], [f"fa{k}"]),
                  helper.make_node("DequantizeLinear", [f"b{k}", f"sb{k}", f"zb{k}"], [f"fb{k}"]),
                  helper.make_node("Add", [f"fa{k}", f"fb{k}"], [f"fc{k}"]),
                  helper.make_node("QuantizeLinear", [f"fc{k}", f"sc{k}", f"zc{k}"], [f"c{k}"])]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None])]
    inputs += [helper.make_tensor_value_info(n, TensorProto.UINT8, [None]) for n in ("a1", "b1", "a2", "b2")]
    outputs = [helper.make_tensor_value_info(n, TensorProto.UINT8, [None]) for n in ("y", "c1", "c2")]
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


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from tvm_integration.bench import ort_aarch64
    path = tmp_path_factory.mktemp("ort-aarch64-quantize") / "quantize_add.onnx"
    model(path)
    k = np.arange(-140, 141, dtype=F32)
    x = np.concatenate([k * Q_SCALE, (k + F32(0.5)) * Q_SCALE,                        # integers and ties
                        np.random.default_rng(0).uniform(-4.5, 4.7, 4096).astype(F32)])
    a1, b1 = (v.ravel().astype(np.uint8) for v in np.meshgrid(np.arange(16), np.arange(16), indexing="ij"))
    a2, b2 = (v.ravel().astype(np.uint8) for v in np.meshgrid(np.arange(256), np.arange(256), indexing="ij"))
    feeds = {"x": x, "a1": a1, "b1": b1, "a2": a2, "b2": b2}
    outputs = ["y", "c1", "c2"]
    arm, _ = ort_aarch64.run(path, feeds, outputs, "cortex-a53")
    x86 = reference_session(str(path)).run(outputs, feeds)
    expected = [quantize(x, Q_SCALE, Q_ZERO), qdq_add(a1, b1, *TIE), qdq_add(a2, b2, *RESNET)]
    return feeds, dict(zip(outputs, arm)), dict(zip(outputs, x86)), dict(zip(outputs, expected))


def test_x86_exact_mode_is_the_onnx_definition(runs):
    _, _, x86, expected = runs
    for name in expected:
        np.testing.assert_array_equal(x86[name], expected[name], err_msg=name)


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


def test_aarch64_adds_left_unfused_are_the_onnx_definition(runs, tmp_path):
    """With each Add's float sum also a graph output (ort_aarch64.adds_as_defined), onnxruntime does not fuse
    it into QLinearAdd, and its AArch64 build computes the ONNX definition: the stated reference on Arm."""
    from tvm_integration.bench import ort_aarch64
    feeds, arm, _, expected = runs
    model(tmp_path / "fused.onnx")
    onnx.save(ort_aarch64.adds_as_defined(onnx.load(str(tmp_path / "fused.onnx"))), str(tmp_path / "defined.onnx"))
    defined, _ = ort_aarch64.run(tmp_path / "defined.onnx", feeds, ["c1", "c2"], "cortex-a53")
    assert np.count_nonzero(arm["c1"] != expected["c1"]) and np.count_nonzero(arm["c2"] != expected["c2"])
    np.testing.assert_array_equal(defined[0], expected["c1"])
    np.testing.assert_array_equal(defined[1], expected["c2"])
