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


def test_matmul_integer_to_float_follows_onnxruntime_aarch64(tmp_path):
    """A MatMul with a float output that onnxruntime fuses (MatMulIntegerToFloat, com.microsoft): of two int8
    activations (attention's Q.K^T) and by int8 weights. It was labelled batch_matmul and dense, as if ONNX
    defined it."""
    from tests.test_arm_int8_attention import scores_model
    from tests.test_ort_matmul_to_float import matmul_model
    scores_model(tmp_path / "scores.onnx")
    matmul_model(tmp_path / "weights.onnx", (2, 64))
    for name in ("scores", "weights"):
        names = kinds_of(tmp_path / f"{name}.onnx")
        assert arm_reference.INTEGER_TO_FLOAT in names and not {"dense", "batch_matmul"} & set(names)
        assert arm_reference.follows(names)[arm_reference.INTEGER_TO_FLOAT] == arm_reference.AARCH64
        assert arm_reference.inexact(names) == []


def test_a_tflite_models_kinds_follow_litert():
    from pathlib import Path

    from tvm_integration.qnn.runtime.model import read
    path = Path(__file__).parent / "data" / "tflite" / "cnn_int8.tflite"
    names = arm_reference.kinds(read(path, target="neon")[0], tflite=True)
    assert "tflite:conv2d" in names and set(arm_reference.follows(names).values()) == {arm_reference.LITERT}
    # measured against LiteRT's AArch64 build (tests/test_litert_aarch64.py): as Cortex-A53 it rounds a uint8 conv
    assert arm_reference.inexact(names) == [arm_reference.kind("tflite:conv2d")]
    assert arm_reference.kind("tflite:some_op").exact is None


def test_the_kinds_where_onnxruntime_aarch64_departs_from_onnx(encoders):
    static = kinds_of(encoders["static"])
    assert [k.name for k in arm_reference.departures(static)] == ["add"]      # QLinearAdd's near-ties
    assert arm_reference.departures(["dense", "softmax", "layer_norm"]) == []


def test_an_unknown_kind_is_not_called_exact():
    kind = arm_reference.kind("some_tflite_op")
    assert kind.exact is None and arm_reference.inexact(["dense", "some_tflite_op"]) == [kind]
    assert "not measured" in arm_reference.describe(kind)


def row(differing, largest, follows, not_exact=()):
    """A bench_arm_model row's reference fields: differing and largest as (onnx, aarch64, stated)."""
    names = list(follows)
    return {"differing": dict(zip(("onnx", "onnxruntime_aarch64", "stated"), differing), outputs=1000),
            "max_abs_diff": dict(zip(("onnx", "onnxruntime_aarch64"), largest)), "max_abs_diff_vs_stated": largest[2],
            "follows": follows, "not_exact": list(not_exact),
            "runtime_departs": [k.name for k in arm_reference.departures(names)],
            "x86_departs": [k.name for k in arm_reference.x86_departures(names)]}


def test_bench_model_explains_a_difference_only_when_ours_equals_the_stated_reference():
    from tvm_integration.bench.arm_models import explanation
    resnet = {"conv2d": "onnx", "add": "onnx", "global_avg_pool": "onnxruntime_aarch64", "dense": "onnx"}
    # ResNet-18 on Cortex-A53: 0 from the x86 exact mode, 1.095 from AArch64, 0 from the stated reference
    (line,) = explanation(row((0, 146, 0), (0, 1.095, 0), resnet))
    assert line.startswith("the difference from onnxruntime's AArch64 build (1.095 on 146 of 1000 outputs) comes "
                           "entirely from how it computes add: with those ops as ONNX defines them")
    assert "that build equals ours on every output (add: MLAS's NEON QLinearAdd" in line
    # a model differing from the x86 exact mode only: the kinds where that mode is not the stated reference
    (line,) = explanation(row((12, 0, 0), (0.28, 0, 0), resnet))
    assert "x86 exact mode (0.28 on 12 of 1000 outputs) comes from" in line
    assert "global_avg_pool (ONNX leaves their order open" in line and "add (MLAS's AVX2 QLinearAdd" in line
    assert "NOT explained" in explanation(row((3, 0, 0), (1, 0, 0), {"conv2d": "onnx"}))[0]
    # ours differs from the stated reference: nothing is explained, and the unmeasured kinds are named
    (line,) = explanation(row((146, 146, 2), (1.1, 1.1, 0.5), resnet, ["float_grouped_conv: not measured"]))
    assert "NOT explained" in line and "0.5 on 2 of 1000" in line and "float_grouped_conv: not measured" in line
    assert explanation(row((0, 0, 0), (0, 0, 0), resnet)) == []


def test_a_departure_says_how_and_by_how_much():
    line = arm_reference.describe_departure(arm_reference.kind("add"))
    assert line.startswith("add: follows the ONNX definition") and "ties away from zero" in line
    assert "one output step" in line


@pytest.mark.qemu
@pytest.mark.skipif(cross_model.missing_tools() is not None, reason=f"--target neon: {cross_model.missing_tools()}")
def test_compile_and_inspect_name_the_inexact_op_kinds(encoders, tmp_path, capsys):
    from qsynth.cli import main
    path = encoders["static"]
    names = kinds_of(path)
    inexact = arm_reference.inexact(names)
    assert main(["compile", str(path), "-o", str(tmp_path / "m.so"), "--target", "neon", "--mcpu", "cortex-a53"]) == 0
    notes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("note: ")]
    assert notes == [f"note: {arm_reference.describe(k)}" for k in inexact] + \
        [f"note: {arm_reference.describe_departure(arm_reference.kind('add'))}"]      # the QDQ Adds: not silent
    assert main(["inspect", str(path), "--target", "neon", "--mcpu", "cortex-a53"]) == 0
    assert notes[-1][len("note: "):] in capsys.readouterr().out
    path = encoders["dynamic"]
    inexact = arm_reference.inexact(kinds_of(path))
    assert main(["inspect", str(path), "--target", "neon", "--mcpu", "cortex-a53", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert [k["op"] for k in printed["op_kinds"] if k["exact"] is not True] == [k.name for k in inexact]
    assert not any(k["onnxruntime_aarch64_departs"] for k in printed["op_kinds"])
    assert {k["op"]: k["reference"] for k in printed["op_kinds"]}["softmax"] == arm_reference.AARCH64
