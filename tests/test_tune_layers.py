"""scripts/tune_layers.py's models: built-in names, encoders, and quantized .onnx and .tflite files by
path (a TFLite model read by its own frontend); any other name is refused before any tuning."""
import sys
from pathlib import Path

from scripts import tune_layers
from tvm_integration.bench import tuned_shapes

ROOT = Path(__file__).resolve().parent.parent
TFLITE = ROOT / "tests" / "data" / "tflite" / "mlp_int8.tflite"


def test_a_tflite_file_is_tuned_by_the_shapes_its_frontend_compiles():
    shapes = tune_layers.model_shapes(str(TFLITE))
    assert shapes and {kind for kind, _ in shapes} == {"dense"}
    keys = lambda found: [tuned_shapes.key_of(kind, args) for kind, args in found]
    assert keys(shapes) == keys(tuned_shapes.shapes(TFLITE))


def test_a_name_that_is_no_model_is_refused_before_tuning(tmp_path, monkeypatch, capsys):
    """The script's main in this process (already imported above): a process of its own imported TVM and
    torch again (5.3 s) to print the same line."""
    gone = tmp_path / "gone.tflite"
    monkeypatch.setattr(sys, "argv", ["tune_layers.py", "--models", f"resnet18,resnet19,{gone}"])
    monkeypatch.chdir(tmp_path)
    assert tune_layers.main() == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("tune_layers: 'resnet19' is no model: accepted are resnet18, mobilenet_v2, ")
    assert "bert_l4_s128_static" in err and "quantized .onnx or .tflite files" in err
    assert err.endswith(f"; {gone}: no such file\n") and err.count("\n") == 1, err
