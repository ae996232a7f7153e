"""Low-bit layers of whole models for AArch64 (issue 34 step 2): ``compile_model(..., target="neon",
mcpu=...)`` puts every bitserial conv2d and dense on the NEON bitserial operators (the cache's proved
NEON tiles, bitserial_layer.py with the isa ``neon``), run under qemu-aarch64 with TVM's AArch64
runtime: bit-exact with onnxruntime and with the numpy integer network.

The small ResNet of tests/test_lowbit_models.py at W1A1 (bipolar weights: the hybrid encoding, folded
onto the unipolar lanes tile) and W2A2 (int2 weights: unipolar codes and the T channel), and a model of
every other lowering (tests/helpers_lowbit.py): signed activations (the codes pass), unsigned weights
from 0 on a zero point of 1 (the output stage fused, padding code 1), a bitserial dense. ``qsynth
inspect --target neon --mcpu`` names each layer's NEON tile."""
import json
import re
import subprocess

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from helpers_lowbit import conv, dense, float_dense, make, reference
from tvm_integration.bench.lowbit_models import resnet_lowbit
from tvm_integration.qemu import cross, cross_model

MISSING = cross_model.missing_tools()
pytestmark = [pytest.mark.qemu,
              pytest.mark.skipif(MISSING is not None, reason=f"AArch64 models run under qemu: {MISSING}")]
SMALL = dict(size=32, widths=(8, 16, 32, 64), classes=10)
SHAPE = (1, 3, 8, 8)
MIXED = [conv(8, wbits=8, bits=2), conv(8, wbits=2, bits=2, signed=True, relu=False, per_channel=True),
         conv(8, bipolar=True, wbits=1, bits=2, zp=1), conv(8, wbits=3, wsigned=False, bits=3, per_channel=True),
         dict(op="flatten"), dense(16, wbits=2, bits=4, signed=True, relu=False), float_dense(4)]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("neon-lowbit")
    out = {}
    for abits, wbits in ((1, 1), (2, 2)):
        model, x, logits = resnet_lowbit(abits, wbits, **SMALL)
        onnx.save(model, folder / f"w{wbits}a{abits}.onnx")
        out[f"w{wbits}a{abits}"] = (folder / f"w{wbits}a{abits}.onnx", "input", x, lambda x, logits=logits: logits)
    model, layers = make(MIXED, SHAPE, "qcdq")
    onnx.save(model, folder / "mixed.onnx")
    x = (np.random.default_rng(7).standard_normal(SHAPE) * 2).astype(np.float32)
    out["mixed"] = (folder / "mixed.onnx", "x", x, lambda x: reference(layers, x))
    return out


def onnxruntime(path, feeds):
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"]).run(None, feeds)[0]


@pytest.mark.parametrize("name, mcpu", [("w1a1", "cortex-a53"), ("w2a2", "cortex-a72"), ("mixed", "cortex-a76")])
def test_lowbit_model_bit_exact_on_neon_bitserial(models, lib_dir, tmp_path, name, mcpu):
    from tvm_integration.qnn.runtime.model import compile_model
    path, input_name, x, integer_network = models[name]
    model = compile_model(path, target="neon", mcpu=mcpu)
    out = model.outputs[0]
    xr = np.random.default_rng(3).standard_normal(x.shape).astype(np.float32)
    got, got_r = (outputs[out] for outputs in model.each([{input_name: x}, {input_name: xr}]))
    np.testing.assert_array_equal(got, integer_network(x))
    assert len(np.unique(got)) > 2                                    # not a constant output
    np.testing.assert_array_equal(got_r, onnxruntime(path, {input_name: xr}))
    model.save(tmp_path / "m.so")
    code = subprocess.run([cross.CC.replace("gcc", "objdump"), "-d", str(tmp_path / "m.so")], capture_output=True,
                          text=True).stdout
    assert re.search(r"<qsynth_bitserial_(conv2d|dense)\w*>:", code)
    assert "\tcnt\tv" in code and "\tuadalp\tv" in code              # the NEON tiles' popcount and sums


def test_inspect_names_the_neon_tiles(models, capsys):
    from qsynth.cli import main
    path = models["mixed"][0]
    assert main(["inspect", str(path), "--target", "neon", "--mcpu", "cortex-a76", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    rows = printed["layers"]
    assert {k["op"]: k["reference"] for k in printed["op_kinds"]}["dense"] == "onnx"
    # the float classifier (float_dense) is listed too, as a float matmul
    assert [r["operator"] for r in rows] == ["int8", "bitserial", "bitserial", "bitserial", "bitserial", "float"]
    assert rows[0]["kernel"].startswith("int8_s8s8_k4_") and "_neon" in rows[0]["kernel"]     # sdot on A76
    assert all(re.match(r"bitserial_a\dw\d_\w+_neon", r["kernel"]) for r in rows[1:-1]), rows
    assert main(["inspect", str(path), "--target", "neon", "--mcpu", "cortex-a53"]) == 0
    assert "int8_u8u8_acc_" in capsys.readouterr().out                                     # umull/uadalp on A53
    assert main(["inspect", str(path), "--target", "neon", "--mcpu", "cortex-z99"]) == 2
    err = capsys.readouterr().err.strip()
    assert "not an AArch64 core LLVM knows" in err and len(err.splitlines()) == 1
