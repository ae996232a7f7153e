"""A benchmark row says how many of its model's tile shapes this host's tuning log chose
(bench/tuned_shapes.py): the keys it counts must be the very keys the operators look up when the model
compiles, or a row would call itself tuned while its layers took the untuned rule; for an ONNX model and
for a TFLite one, read by its own frontend. A logged tile counts only where the shape's weights admit it
(a layer of reduce_range weights runs the u8r7 tile, which a log timed on other weights never chose)."""
import json
from pathlib import Path

import pytest
import tflite

from tvm_integration.bench import int8_models, tuned_shapes
from tvm_integration.kernels import tuning
from tvm_integration.qnn.lower import pipeline
from tvm_integration.qnn.runtime import model

TFLITE = Path(__file__).resolve().parent / "data" / "tflite"


def looked_up_while_lowering(path, monkeypatch) -> set[str]:
    """The tuning-log keys the operators look up (``tuning.choose``) while the model at ``path`` is lowered
    as ``compile_model`` lowers it (the operators are built there; what follows only compiles them)."""
    looked_up = set()
    choose = tuning.choose
    monkeypatch.setattr(tuning, "choose", lambda key, *args, **kw: looked_up.add(key) or choose(key, *args, **kw))
    pipeline.lower(model.read(path)[0])
    return looked_up


def chosen(path, keys=None) -> dict:
    """A tuning log that chooses, for each tile shape of the model at ``path`` (those of ``keys``), a tile
    its weights admit."""
    shapes = {tuned_shapes.key_of(kind, args): (kind, args) for kind, args in tuned_shapes.shapes(path)}
    return {key: {"kernel": tuned_shapes.candidates(*shape)[0].intrin} for key, shape in shapes.items()
            if keys is None or key in keys}


def test_counted_keys_are_the_keys_the_operators_look_up(tmp_path, monkeypatch):
    path = int8_models.quantize(int8_models.resnet(size=32, widths=(8, 16, 16, 32), classes=10), tmp_path / "r.onnx")
    looked_up = looked_up_while_lowering(path, monkeypatch)
    counted = {tuned_shapes.key_of(kind, args) for kind, args in tuned_shapes.shapes(path)}
    assert counted == looked_up and len(counted) > 3
    log = tmp_path / "host.json"
    log.write_text(json.dumps(chosen(path, sorted(counted)[:2])))
    covered = tuned_shapes.coverage(path, log)
    assert covered == {"log": "host.json", "shapes": len(counted), "tuned": 2}
    assert tuned_shapes.label(covered) == f"partly (2/{len(counted)})"
    log.write_text(json.dumps(chosen(path)))
    assert tuned_shapes.label(tuned_shapes.coverage(path, log)) == "tuned"
    log.write_text(json.dumps({key: {"kernel": "a tile the weights do not admit"} for key in counted}))
    assert tuned_shapes.label(tuned_shapes.coverage(path, log)) == "untuned"
    log.write_text("{}")
    assert tuned_shapes.label(tuned_shapes.coverage(path, log)) == "untuned"


def builtin_ops(path) -> list[str]:
    """The builtin operator names of a .tflite model's main subgraph, read from its flatbuffer (``tflite``)."""
    model = tflite.Model.GetRootAsModel(path.read_bytes(), 0)
    names = {v: k for k, v in vars(tflite.BuiltinOperator).items() if not k.startswith("_")}
    codes = [model.OperatorCodes(i) for i in range(model.OperatorCodesLength())]
    graph = model.Subgraphs(0)
    code = [codes[graph.Operators(i).OpcodeIndex()] for i in range(graph.OperatorsLength())]
    return [names[max(c.BuiltinCode(), c.DeprecatedBuiltinCode())] for c in code]


# resnet_int8: 5 convolutions (one behind a PAD) and a fully connected layer, every one a distinct shape;
# mnv2_uint8: uint8 activations, 6 convolutions and a fully connected layer of 5 distinct shapes, and
# 2 depthwise convolutions, which take no tile.
@pytest.mark.parametrize("name, distinct", [("resnet_int8", 6), ("mnv2_uint8", 5)])
def test_a_tflite_models_counted_keys_are_the_keys_its_operators_look_up(name, distinct, tmp_path, monkeypatch):
    path = TFLITE / f"{name}.tflite"
    ops = builtin_ops(path)
    found = tuned_shapes.shapes(path)
    assert len(found) == ops.count("CONV_2D") + ops.count("FULLY_CONNECTED")
    counted = {tuned_shapes.key_of(kind, args) for kind, args in found}
    assert counted == looked_up_while_lowering(path, monkeypatch) and len(counted) == distinct
    log = tmp_path / "host.json"
    one = sorted(counted)[0]
    log.write_text(json.dumps({**chosen(path, {one}), "dense m9 n9 k9 int8": {"kernel": "any"}}))
    assert tuned_shapes.coverage(path, log) == {"log": "host.json", "shapes": distinct, "tuned": 1}
    log.write_text(json.dumps(chosen(path)))
    assert tuned_shapes.label(tuned_shapes.coverage(path, log)) == "tuned"
