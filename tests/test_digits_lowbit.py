"""The committed digits models of issue 16 (scripts/train_digits_lowbit.py trains and exports them;
the training itself is not a test): their ONNX form is what Brevitas writes at the configuration's
widths, their reference executor reproduces the top-1 committed in benchmarks/lowbit_accuracy.json,
and compiled by qsynth, W1A1 gives the reference executor's logits and W2A2 classifies the held-out
images within 2 points of the float network."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

pytest.importorskip("sklearn.datasets", reason="scikit-learn is not installed (pip install -e '.[test]')",
                   exc_type=ModuleNotFoundError)

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "tests" / "data" / "lowbit"

from scripts.train_digits_lowbit import batches, load_digits, reference_outputs, reference_predictions  # noqa: E402

ACCURACY = json.loads((ROOT / "benchmarks" / "lowbit_accuracy.json").read_text())


def row(config: str) -> dict:
    return next(r for r in ACCURACY["rows"] if r["config"] == config)


@pytest.fixture(scope="module")
def held_out() -> tuple[np.ndarray, np.ndarray]:
    """The test images and labels every committed top-1 is measured on."""
    _, _, x, y = load_digits()
    return x, y


def qsynth_logits(path: Path, x: np.ndarray, lowbit: str = "fastest") -> np.ndarray:
    """The logits of the model at ``path`` compiled by qsynth (its 1-3-bit layers on ``lowbit``), on ``x``
    in whole batches."""
    from tvm_integration.qnn.runtime.model import compile_model
    model = compile_model(path, threads=1, lowbit=lowbit)
    name_in, name_out = next(iter(model.inputs)), model.outputs[0]
    return np.concatenate([model({name_in: xb})[name_out] for xb in batches(x)])[:len(x)]


def constants(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}


def producers(model: onnx.ModelProto) -> dict[str, onnx.NodeProto]:
    return {o: n for n in model.graph.node for o in n.output}


def clip_range(clip: onnx.NodeProto, values: dict) -> tuple[int, int]:
    return int(values[clip.input[1]]), int(values[clip.input[2]])


def qcdq_ranges(path: Path) -> list[tuple[tuple[int, int], tuple[int, int] | None]]:
    """Per Conv/Gemm: (the weight's Clip bounds, the input activation's Clip bounds or None when the
    input is 8-bit: Q -> DQ without a Clip), read through DequantizeLinear as the QCDQ form has it."""
    model = onnx.load(str(path))
    values, made_by = constants(model), producers(model)
    layers = []
    for node in (n for n in model.graph.node if n.op_type in ("Conv", "Gemm")):
        x = node.input[0]
        if made_by[x].op_type == "Flatten":
            x = made_by[x].input[0]
        x_dq, w_dq = made_by[x], made_by[node.input[1]]
        assert x_dq.op_type == w_dq.op_type == "DequantizeLinear", node.name
        w_clip = made_by[w_dq.input[0]]
        assert w_clip.op_type == "Clip" and w_clip.input[0] in values, node.name      # int8 constants under a Clip
        assert values[w_clip.input[0]].dtype == np.int8
        x_q = made_by[x_dq.input[0]]
        x_range = clip_range(x_q, values) if x_q.op_type == "Clip" else None
        if x_range is not None:
            assert made_by[x_q.input[0]].op_type == "QuantizeLinear", node.name
        else:
            assert x_q.op_type == "QuantizeLinear", node.name
        layers.append((clip_range(w_clip, values), x_range))
    return layers


def test_w2a2_qcdq_has_2_bit_clips_inside_and_8_bit_ends():
    model = onnx.load(str(MODELS / "digits_w2a2_qcdq.onnx"))
    assert {n.domain for n in model.graph.node} == {""}
    assert not {"Quant", "BipolarQuant"} & {n.op_type for n in model.graph.node}
    # conv1: 8-bit image, 8-bit weights; conv2, conv3: 2-bit activations [0, 3], narrow 2-bit weights
    # [-1, 1]; fc: 2-bit activations, 8-bit weights
    assert qcdq_ranges(MODELS / "digits_w2a2_qcdq.onnx") == [((-127, 127), None), ((-1, 1), (0, 3)),
                                                              ((-1, 1), (0, 3)), ((-127, 127), (0, 3))]


def test_w3a3_and_w8a8_widths():
    assert [w for w, _ in qcdq_ranges(MODELS / "digits_w3a3_qcdq.onnx")] == [(-127, 127), (-3, 3), (-3, 3),
                                                                              (-127, 127)]
    assert [x for _, x in qcdq_ranges(MODELS / "digits_w3a3_qcdq.onnx")] == [None, (0, 7), (0, 7), (0, 7)]
    # 8-bit activations are Q -> DQ, no Clip
    assert qcdq_ranges(MODELS / "digits_w8a8_qcdq.onnx") == [((-127, 127), None)] * 4


def test_w1a1_qonnx_has_bipolar_weights_and_unsigned_1_bit_activations():
    model = onnx.load(str(MODELS / "digits_w1a1_qonnx.onnx"))
    values = constants(model)
    bipolar = [n for n in model.graph.node if n.op_type == "BipolarQuant"]
    assert len(bipolar) == 2 and all(n.input[0] in values for n in bipolar)       # conv2, conv3 weights only
    one_bit = [n for n in model.graph.node if n.op_type == "Quant" and float(values[n.input[3]]) == 1]
    assert len(one_bit) == 3                                                     # the three inner activations
    for node in one_bit:
        attributes = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        assert attributes["signed"] == 0 and attributes["narrow"] == 0, node.name


@pytest.mark.parametrize("config, form", [("W2A2", "qcdq"), ("fp32", "fp32"), ("W1A1", "qonnx")])
def test_reference_executor_reproduces_the_committed_top1(config, form, held_out):
    if form == "qonnx":
        pytest.importorskip("qonnx", reason="qonnx is not installed (pip install -e '.[test]')", exc_type=ModuleNotFoundError)
    x, y = held_out
    name = "digits_fp32.onnx" if form == "fp32" else f"digits_{config.lower()}_{form}.onnx"
    top1 = float(np.mean(reference_predictions(MODELS / name, form, x) == y))
    assert top1 == row(config)["top1"]


def test_w2a2_within_2_points_of_fp32(held_out):
    """The committed W2A2 model compiled by qsynth classifies the held-out images at most 2 points
    below the float network (onnxruntime)."""
    x, y = held_out
    w2a2 = float(np.mean(qsynth_logits(ROOT / row("W2A2")["model"], x).argmax(1) == y))
    fp32 = float(np.mean(reference_predictions(ROOT / row("fp32")["model"], "fp32", x) == y))
    assert w2a2 >= fp32 - 0.02, (w2a2, fp32)


@pytest.mark.parametrize("config, form", [("W2A2", "qcdq"), ("W3A3", "qcdq"), ("W1A1", "qonnx")])
def test_low_bit_layers_on_the_int8_operator_equal_the_reference_executor(config, form, held_out):
    """A 1-3-bit code is an int8 value: with ``lowbit="int8"`` the inner A1W1-A3W3 convolutions run on
    the int8 tiles, and the logits still equal the reference executor's (onnxruntime's exact mode;
    qonnx's for the bipolar W1A1), bit for bit, on the first 64 held-out images."""
    if form == "qonnx":
        pytest.importorskip("qonnx", reason="qonnx is not installed (pip install -e '.[test]')", exc_type=ModuleNotFoundError)
    from tvm_integration.qnn.onnx.importer import load
    from tvm_integration.qnn.runtime.report import layers
    path = MODELS / f"digits_{config.lower()}_{form}.onnx"
    assert [r.operator for r in layers(load(path), lowbit="int8")] == ["int8"] * 4
    x = held_out[0][:64]
    np.testing.assert_array_equal(qsynth_logits(path, x, lowbit="int8"), reference_outputs(path, form, x))


# -- Brevitas' 32-bit bias Quant nodes, folded at import (qnn/onnx/lowbit.py) ------------------------------------
def fold_wide_quants(model: onnx.ModelProto) -> tuple[onnx.ModelProto, dict[str, tuple[np.ndarray, np.ndarray]]]:
    """``model`` with each Quant wider than 8 bits of a constant replaced by lowbit.wide_quant_constant's
    value, everything else QONNX as exported; name -> (the float constant, its folded value)."""
    from tvm_integration.qnn.onnx import lowbit
    values = constants(model)
    folded, kept, changed = onnx.ModelProto(), [], {}
    folded.CopyFrom(model)
    for node in folded.graph.node:
        if node.op_type == "Quant" and node.input[0] in values and float(values[node.input[3]]) > 8:
            attributes = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
            value = lowbit.wide_quant_constant(*(values[i] for i in node.input), attributes["signed"],
                                               attributes["narrow"])
            folded.graph.initializer.append(numpy_helper.from_array(value, node.output[0]))
            changed[node.name] = (values[node.input[0]], value)
        else:
            kept.append(node)
    del folded.graph.node[:]
    folded.graph.node.extend(kept)
    return folded, changed


@pytest.mark.parametrize("config", ["W1A1", "W2A2"])
def test_folded_bias_quants_leave_the_qonnx_executor_outputs_unchanged(config, held_out):
    pytest.importorskip("qonnx", reason="qonnx is not installed (pip install -e '.[test]')", exc_type=ModuleNotFoundError)
    from qonnx.core.modelwrapper import ModelWrapper
    from qonnx.core.onnx_exec import execute_onnx
    from qonnx.transformation.infer_shapes import InferShapes
    model = onnx.load(str(MODELS / f"digits_{config.lower()}_qonnx.onnx"))
    folded, changed = fold_wide_quants(model)
    # the four biases (conv1-3, fc), each moved onto its quantization grid by the fold
    assert len(changed) == 4 and all(name.endswith("bias_quant/export_handler/Quant") for name in changed)
    assert all(not np.array_equal(raw, value) for raw, value in changed.values())
    exported, ours = (ModelWrapper(m).transform(InferShapes()) for m in (model, folded))
    name_in, name_out = model.graph.input[0].name, model.graph.output[0].name
    x, _ = held_out
    for xb in batches(x):
        np.testing.assert_array_equal(execute_onnx(ours, {name_in: xb})[name_out],
                                      execute_onnx(exported, {name_in: xb})[name_out])


def test_w1a1_qonnx_through_qsynth_equals_the_qonnx_executor(held_out):
    """The Brevitas W1A1 export (bipolar weights, binary activations, 32-bit bias Quants) compiled by
    qsynth: logits equal to qonnx's executor on every test image, so the committed top-1; the
    classifier (DQ -> Flatten -> Gemm) on the int8 dense, the inner convolutions bitserial."""
    pytest.importorskip("qonnx", reason="qonnx is not installed (pip install -e '.[test]')", exc_type=ModuleNotFoundError)
    from tvm_integration.qnn.onnx.importer import load
    from tvm_integration.qnn.runtime.report import layers
    path = MODELS / "digits_w1a1_qonnx.onnx"
    assert [(r.kind, r.operator) for r in layers(load(path), lowbit="bitserial")] == [
        ("conv2d", "int8"), ("conv2d", "bitserial"), ("conv2d", "bitserial"), ("dense", "int8")]
    x, y = held_out
    ours = qsynth_logits(path, x, lowbit="bitserial")
    np.testing.assert_array_equal(ours, reference_outputs(path, "qonnx", x))
    assert float(np.mean(ours.argmax(1) == y)) == row("W1A1")["top1"]

