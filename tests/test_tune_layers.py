"""scripts/tune_layers.py's models: built-in names, encoders, and quantized .onnx and .tflite files by
path (a TFLite model read by its own frontend); any other name is refused before any tuning."""
import subprocess
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


def test_a_name_that_is_no_model_is_refused_before_tuning(tmp_path):
    gone = tmp_path / "gone.tflite"
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "tune_layers.py"), "--models", f"resnet18,resnet19,{gone}"],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert run.returncode == 2 and run.stdout == "", run
    assert run.stderr.startswith("tune_layers: 'resnet19' is no model: accepted are resnet18, mobilenet_v2, ")
    assert "bert_l4_s128_static" in run.stderr and "quantized .onnx or .tflite files" in run.stderr
    assert run.stderr.endswith(f"; {gone}: no such file\n") and run.stderr.count("\n") == 1, run.stderr
