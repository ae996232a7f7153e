"""U8U8 models (uint8 activations and uint8 weights on a zero point, onnxruntime's asymmetric weights) on
the int8 tiles (issue 49): legalize.py gives the weights as ``w - zw`` (9 bits, int16), which the w16
tiles take as they are and the byte tiles clamped with the few extremes added apart
(selection.admitted, packing.clamped); the NEON tiles as bytes on a zero point. Against onnxruntime's
exact mode, with weights at 0 and 255 and zero points near either end."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from tvm import tirx

from isa_specs import host
from test_qnn import GEOMETRIES, TINY, assert_bit_exact, single_conv
from tvm_integration.bench import int8_models
from tvm_integration.kernels import selection
from tvm_integration.qnn.semantics.arithmetic import nine_bit
from tvm_integration.qnn.prim.schedules import TENSORIZED
from tvm_integration.qnn.runtime.report import layers


def tensorized(mod) -> int:
    """How many of the lowered module's functions run a tile (bind.py's TENSORIZED)."""
    return sum(TENSORIZED in f.attrs for f in mod.functions.values() if isinstance(f, tirx.PrimFunc))


ZERO_POINTS = (3, 121, 250, 188, 60)       # one per geometry: w - zw from [-3, 252] to [-250, 5]


@pytest.mark.parametrize("geometry,w_zp", zip(GEOMETRIES, ZERO_POINTS),
                         ids=[f"c{g[0][0]}o{g[1]}k{g[2]}s{g[3]}g{g[5]}-zw{z}" for g, z in zip(GEOMETRIES, ZERO_POINTS)])
def test_u8u8_qlinearconv_runs_on_the_tiles(tmp_path, geometry, w_zp):
    _, mod = assert_bit_exact(u8u8_conv(tmp_path, geometry, w_zp), seed=geometry[0][0])
    assert tensorized(mod) == 1


def u8u8_conv(tmp_path, geometry, w_zp: int, w_scale: float = 0.003):
    """A QLinearConv of ``geometry`` (test_qnn.GEOMETRIES) on u8 input ``x`` (zero point 131) by random
    u8 weights, 0 and 255 among them, on zero point ``w_zp``."""
    (c, h, w_), o, k, stride, pads, groups = geometry
    rng = np.random.default_rng(c * o + w_zp)
    weight = rng.integers(0, 256, (o, c // groups, k, k)).astype(np.uint8)
    weight.flat[:4] = [0, 255, 255, 0]
    return single_conv(tmp_path, [1, c, h, w_], weight, stride, pads, groups, 0.02, 131, np.float32(w_scale), 0.9, 7,
                       bias=rng.integers(-3000, 3000, o), w_zp=w_zp)


def test_u8u8_resnet_every_layer_on_the_tiles(tmp_path):
    """A residual CNN quantize_static made U8U8 per tensor (zero points of its layers not 128): its 10
    convolutions and its classifier run tiles, exact. Two stages of test_qnn's tiny ResNet: they hold
    every op kind of the four (the stem, 3x3 convs of stride 1 and 2, the 1x1 stride-2 shortcut)."""
    path = int8_models.quantize(TINY["resnet_2_stages"](), tmp_path / "r.onnx", weights="u8", per_channel=False)
    graph = onnx.load(str(path)).graph
    constants = {i.name: onnx.numpy_helper.to_array(i) for i in graph.initializer}
    weight_zero_points = {int(constants[n.input[2]]) for n in graph.node if n.op_type == "DequantizeLinear"
                          and constants.get(n.input[0], np.zeros(())).ndim >= 2}
    assert weight_zero_points - {128}
    _, mod = assert_bit_exact(path, runs=2)
    assert tensorized(mod) == 11


def test_nine_bit_weights_where_they_do_not_fit_a_byte():
    w = np.array([[0, 255, 100]], np.uint8).astype(np.int16) - 128       # u8 weights as legalize's s8
    assert nine_bit(w.astype(np.int8), 121 - 128).dtype == np.int16
    assert nine_bit(w.astype(np.int8), 121 - 128).tolist() == [[-121, 134, -21]]
    narrow = np.array([[-100, 100]], np.int8)
    assert nine_bit(narrow, 20).dtype == np.int8 and nine_bit(narrow, 20).tolist() == [[-120, 80]]


def test_neon_takes_nine_bit_weights_on_its_tiles(tmp_path):
    """On Arm a U8U8 layer whose ``w - zw`` leaves [-128, 127] runs the core's tile too, its weights bytes
    on a zero point (ops/neon_gemm.byte_weights), as on x86 (exact under qemu: test_arm_u8_weights.py)."""
    rng = np.random.default_rng(1)
    weight = rng.integers(0, 256, (8, 4, 3, 3)).astype(np.uint8)
    weight.flat[:2] = [0, 255]
    path = single_conv(tmp_path, [1, 4, 6, 6], weight, 1, [1] * 4, 1, 0.02, 131, np.float32(0.003), 0.9, 7, w_zp=60)
    model = onnx.load(str(path))
    (a53,), (a76,), (x86,) = layers(model, "neon", "cortex-a53"), layers(model, "neon", "cortex-a76"), layers(model)
    assert a53.operator == a76.operator == x86.operator == "int8"
    assert a53.kernel.startswith("int8_u8u8_acc_4x4x8_neon") and "s8 weights on zero point -68" in a53.kernel
    assert a76.kernel.startswith("int8_s8s8_k4_4x4x16_neon")


RECORDED = Path(__file__).parent / "data"


@pytest.mark.parametrize("name,features,types", [
    ("zen4", None, {"u8s8"}),                                                  # VNNI: bytes, clamped
    ("sapphirerapids", "avx2,avx512f,avx512bw,avx512vl", {"w16"}),              # AVX-512BW without VNNI
    ("zen3", None, {"w16"})])
def test_recorded_hosts_take_nine_bit_weights(monkeypatch, name, features, types):
    """Which tiles each recorded host's operators take for u8 weights less a zero point: one weight per
    output channel outside [-128, 127], as calibrated weights have, goes to VNNI's byte tiles clamped
    (packing.clamped); w16 takes them as they are; many outside no byte tile takes."""
    recorded = host.parse_cpuinfo((RECORDED / f"cpuinfo_{name}.txt").read_text())
    monkeypatch.setattr(host, "model", lambda: host.restricted(recorded, features) if features else recorded)
    rng = np.random.default_rng(0)
    few = rng.integers(-128, 128, (64, 576)).astype(np.int16)
    few[:, 7] = 134
    candidates = selection.int8_candidates("host", 576)
    assert {k.spec.types for k in selection.admitted(candidates, few)} == types
    wide = (rng.integers(0, 256, (64, 576)) - 121).astype(np.int16)      # ~16 per channel above 127
    if types == {"u8s8"}:
        with pytest.raises(selection.SelectionError, match="at most 4 per output channel"):
            selection.admitted(candidates, wide)
    else:
        assert {k.spec.types for k in selection.admitted(candidates, wide)} == types
