"""Which reference each op kind of an Arm build follows (qnn/runtime/arm_reference.py, issue 50), and that
``compile`` and ``inspect --target neon`` say which op kinds are not exact against theirs: small BERT-style
encoders (tests/transformer_models.py) quantized statically (QDQ: integer ops, LayerNorm in float,
QLinearSoftmax) and dynamically (float Softmax, GELU and MatMuls of activations, dynamic quantization)."""
import json
import logging

import numpy as np
import onnx
import pytest

from tvm_integration.qemu import cross_model
from tvm_integration.qnn.runtime import arm_reference

INTEGER = {"dense", "add", "batch_matmul", "quantize", "dequantize", "lookup"}


@pytest.fixture(scope="module")
def encoders(tmp_path_factory):
    """{"static": path, "dynamic": path}: a 1-layer encoder, hidden 64, 2 heads, sequence 16."""
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from transformer_models import encoder

    from tvm_integration.bench import int8_models
    folder = tmp_path_factory.mktemp("arm-reference")
    model = encoder(hidden=64, heads=2, seq=16, layers=1)
    onnx.save(model, str(folder / "float.onnx"))
    rng = np.random.default_rng(1)
    logging.getLogger().setLevel(logging.ERROR)
    int8_models.quantize(model, folder / "static.onnx",
                         data=[{"input": rng.standard_normal((1, 16, 64)).astype(np.float32)} for _ in range(4)])
    quantize_dynamic(str(folder / "float.onnx"), str(folder / "dynamic.onnx"), weight_type=QuantType.QInt8)
    return {"static": folder / "static.onnx", "dynamic": folder / "dynamic.onnx"}


def kinds_of(path):
    from tvm_integration.qnn.runtime.model import read
    return arm_reference.kinds(read(path, target="neon")[0])


def test_each_op_kind_names_its_reference(encoders):
    static, dynamic = kinds_of(encoders["static"]), kinds_of(encoders["dynamic"])
    assert {"dense", "add", "batch_matmul", "qlinear_softmax", "layer_norm"} <= set(static)
    assert {"dense", "dynamic_quantize", "float_matmul", "softmax", "gelu", "layer_norm"} <= set(dynamic)
    for names in (static, dynamic):
        follows = arm_reference.follows(names)
        assert {k for k in names if k in INTEGER} == {k for k, r in follows.items() if r == arm_reference.ONNX}
        assert all(follows[k] == arm_reference.AARCH64 for k in ("layer_norm", "softmax", "gelu", "float_matmul",
                                                                 "dynamic_quantize", "qlinear_softmax", "mul")
                   if k in names)


def test_a_tflite_models_kinds_follow_litert():
    from pathlib import Path

    from tvm_integration.qnn.runtime.model import read
    path = Path(__file__).parent / "data" / "tflite" / "cnn_int8.tflite"
    names = arm_reference.kinds(read(path, target="neon")[0], tflite=True)
    assert "tflite:conv2d" in names and set(arm_reference.follows(names).values()) == {arm_reference.LITERT}
    assert arm_reference.inexact(names) == [arm_reference.kind(n) for n in names]      # LiteRT not run on Arm


def test_the_kinds_where_onnxruntime_aarch64_departs_from_onnx(encoders):
    static = kinds_of(encoders["static"])
    assert [k.name for k in arm_reference.departures(static)] == ["add"]      # QLinearAdd's near-ties
    assert arm_reference.departures(["dense", "softmax", "layer_norm"]) == []


def test_an_unknown_kind_is_not_called_exact():
    kind = arm_reference.kind("some_tflite_op")
    assert kind.exact is None and arm_reference.inexact(["dense", "some_tflite_op"]) == [kind]
    assert "not measured" in arm_reference.describe(kind)


@pytest.mark.qemu
@pytest.mark.skipif(cross_model.missing_tools() is not None, reason=f"--target neon: {cross_model.missing_tools()}")
def test_compile_and_inspect_name_the_inexact_op_kinds(encoders, tmp_path, capsys):
    from qsynth.cli import main
    path = encoders["dynamic"]
    inexact = arm_reference.inexact(kinds_of(path))
    assert main(["compile", str(path), "-o", str(tmp_path / "m.so"), "--target", "neon", "--mcpu", "cortex-a53"]) == 0
    notes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("note: ")]
    assert notes == [f"note: {arm_reference.describe(k)}" for k in inexact]
    assert main(["inspect", str(path), "--target", "neon", "--mcpu", "cortex-a53", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert [k["op"] for k in printed["op_kinds"] if k["exact"] is not True] == [k.name for k in inexact]
    assert {k["op"]: k["reference"] for k in printed["op_kinds"]}["softmax"] == arm_reference.AARCH64
