"""A benchmark row says how many of its model's tile shapes this host's tuning log chose
(bench/tuned_shapes.py): the keys it counts must be the very keys the operators look up when the model
compiles, or a row would call itself tuned while its layers took the untuned rule."""
import json

from tvm_integration.bench import int8_models, tuned_shapes
from tvm_integration.kernels import tuning
from tvm_integration.qnn.runtime.model import compile_model


def test_counted_keys_are_the_keys_the_operators_look_up(tmp_path, monkeypatch):
    path = int8_models.quantize(int8_models.resnet(size=32, widths=(8, 16, 16, 32), classes=10), tmp_path / "r.onnx")
    looked_up = set()
    choose = tuning.choose
    monkeypatch.setattr(tuning, "choose", lambda key, *args, **kw: looked_up.add(key) or choose(key, *args, **kw))
    compile_model(path)
    counted = {tuned_shapes.key_of(kind, args) for kind, args in tuned_shapes.shapes(path)}
    assert counted == looked_up and len(counted) > 3
    log = tmp_path / "host.json"
    log.write_text(json.dumps({key: {"kernel": "any"} for key in sorted(counted)[:2]}))
    covered = tuned_shapes.coverage(path, log)
    assert covered == {"log": "host.json", "shapes": len(counted), "tuned": 2}
    assert tuned_shapes.label(covered) == f"partly (2/{len(counted)})"
    log.write_text(json.dumps({key: {"kernel": "any"} for key in counted}))
    assert tuned_shapes.label(tuned_shapes.coverage(path, log)) == "tuned"
    log.write_text("{}")
    assert tuned_shapes.label(tuned_shapes.coverage(path, log)) == "untuned"
