"""Whole keras.applications models as TensorFlow's converter writes them (issue 33 items 4, 5):
scripts/make_tflite_applications.py converts them (opt-in: QSYNTH_SLOW=1, with a Python that imports
TensorFlow: this one, or QSYNTH_TF_PYTHON, e.g. /tmp/tfenv/bin/python) and each is compared bit for
bit with LiteRT's default interpreter on random inputs. By default, on the small fixtures: what the
whole models led to (ResNet's zero PAD folded into its max pool only where the pad value cannot win),
and the benchmark report of scripts/bench_tflite.py on made-up rows."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tflite

from scripts import bench_tflite
from test_tflite import DATA, litert_outputs, random_feeds, requantized
from test_tflite_keras import assert_exact

from tvm_integration.bench import tuned_shapes
from tvm_integration.qnn.lower import pipeline
from tvm_integration.qnn.runtime.model import compile_model
from tvm_integration.qnn.tflite import importer as tflite_importer

ROOT = Path(__file__).resolve().parent.parent
TF_PYTHON = os.environ.get("QSYNTH_TF_PYTHON", sys.executable)

STEM_CONV, STEM_TENSORS = 1, (17, 18, 19)     # resnet_int8: CONV_2D (ReLU) -> PAD -> MAX_POOL_2D, their outputs


def _stem_at_zero_point_zero(tmp_path, relu: bool):
    """resnet_int8 with the stem's conv, PAD and pool outputs at zero point 0 (the converter gave -128,
    where nothing is below the pad value), the conv's fused ReLU kept or dropped."""
    path = requantized("resnet_int8", {t: (0.02, 0) for t in STEM_TENSORS}, tmp_path)
    if not relu:
        content = bytearray(path.read_bytes())
        options = tflite.Model.GetRootAsModel(content, 0).Subgraphs(0).Operators(STEM_CONV).BuiltinOptions()
        table = tflite.Conv2DOptions()
        table.Init(options.Bytes, options.Pos)
        assert table.FusedActivationFunction() == tflite.ActivationFunctionType.RELU
        content[table._tab.Pos + table._tab.Offset(10)] = tflite.ActivationFunctionType.NONE   # its 4th field
        path.write_bytes(content)
    return path


def _pads(path) -> list[str]:
    mod = pipeline.lower(tflite_importer.load(path).run())
    return [g.name_hint for g in mod.functions if "pad" in g.name_hint]


def test_zero_pad_folds_into_the_max_pool_after_a_relu(tmp_path):
    assert _pads(DATA / "resnet_int8.tflite") == []          # the converter's zero point -128: nothing below it
    assert _pads(_stem_at_zero_point_zero(tmp_path, relu=True)) == []


def test_zero_pad_stays_where_its_value_can_win_the_max(tmp_path):
    """Without the ReLU the stem writes values below the pad value, which LiteRT's PAD then MAX_POOL
    lets win at the border: folded into the pool (whose padding never wins) they would differ."""
    path = _stem_at_zero_point_zero(tmp_path, relu=False)
    assert len(_pads(path)) == 1
    assert_exact("resnet_int8 without the stem's ReLU", path, trials=3)


def _row(name, threads, ours, litert, steps=0, **more):
    return {"name": name, "threads": threads, "ours_ms": ours, "baselines": {"litert_int8": litert},
            "speedups": {"litert_int8": litert / ours}, "max_diff_steps": steps, "compared": 5,
            "baseline_reports": {"onnxruntime_int8": {"unavailable": "no resnet50.onnx"}}, **more}


def test_report_lists_every_row_failures_and_keeps_the_notes():
    data = {"host": "a host", "models": ["mobilenet_v2", "resnet50", "efficientnet_b0"],
            "runs": [{"command": "python scripts/bench_tflite.py", "load_before": "1", "load_after": "2",
                      "models": ["mobilenet_v2", "resnet50"], "threads": [1]}],
            "rows": [_row("mobilenet_v2", 1, 2.0, 3.0, ours_cpu_ms=2.0, litert_int8_cpu_ms=3.0, compile_s=30.0,
                          tuning={"log": "znver3-8817b8ee.json", "shapes": 7, "tuned": 2}),
                     _row("resnet50", 1, 10.0, 8.0, steps=2, ours_cpu_ms=10.0, litert_int8_cpu_ms=8.0,
                          profile={"by_kind": {"qsynth_conv2d": [6.0, 20, 20]}, "slowest": [["qsynth_conv2d3", 1.5]]}),
                     {"name": "efficientnet_b0", "threads": 1, "error": "ModelError: unsupported operators: X"}]}
    md = bench_tflite.markdown(data, "the stem costs 1 ms")
    lines = md.splitlines()
    assert "| mobilenet_v2 | 2.00 | 3.00 | 1.50x | 0 (5) | partly (2/7) | 2.00 / 3.00 (1.50x) |" in lines
    assert "| resnet50 | 10.00 | 8.00 | 0.80x | 2 (5) | - | 10.00 / 8.00 (0.80x) |" in lines     # no coverage recorded
    assert any(line.startswith("| efficientnet_b0 | fails: ModelError: unsupported operators: X |") for line in lines)
    assert "- by operator (CPU ms): qsynth_conv2d 6.00 (20 fn, 20 calls)" in lines
    assert "Compile seconds (`compile_model`, once per model): mobilenet_v2 30." in lines
    assert "- resnet50 onnxruntime_int8: unavailable: no resnet50.onnx" in lines
    notes = md.split(bench_tflite.NOTES[0], 1)[1].split(bench_tflite.NOTES[1], 1)[0]
    assert notes.strip() == "the stem costs 1 ms"
    table = [line for line in lines if line.startswith("| ")]
    assert len({line.count("|") for line in table}) == 1, "every row of the table has the header's cells"


def test_a_row_records_its_models_tuning_coverage(tmp_path):
    """bench_tflite's row says how many of the model's tile shapes this host's tuning log holds
    (tuned_shapes.coverage of the .tflite it ran), which its table prints."""
    (tmp_path / "mlp_int8.tflite").write_bytes((DATA / "mlp_int8.tflite").read_bytes())
    row = bench_tflite.row(tmp_path, "mlp_int8", threads=1, trials=2, count=1, recompile=False, openvino=False)
    assert row["tuning"] == tuned_shapes.coverage(tmp_path / "mlp_int8.tflite") and row["tuning"]["shapes"] == 3


def _tensorflow_python() -> str:
    done = subprocess.run([TF_PYTHON, "-c", "import tensorflow, keras"], capture_output=True)
    if done.returncode:
        pytest.skip(f"{TF_PYTHON} cannot import TensorFlow: pip install tensorflow-cpu==2.21.0, or set "
                    "QSYNTH_TF_PYTHON to a Python that has it")
    return TF_PYTHON


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("QSYNTH_SLOW") != "1", reason="opt-in: QSYNTH_SLOW=1 (runs TensorFlow's converter "
                    "on whole keras.applications models, minutes each)")
@pytest.mark.parametrize("name", bench_tflite.APPLICATIONS)
def test_application_converted_by_tensorflow_is_bit_exact_with_litert(tmp_path, name):
    subprocess.run([_tensorflow_python(), str(ROOT / "scripts" / "make_tflite_applications.py"), "-o", str(tmp_path),
                    name], check=True, capture_output=True)
    path = tmp_path / f"{name}.tflite"
    model = compile_model(path)
    rng = np.random.default_rng(33)
    for _ in range(3):
        feeds = random_feeds(model, rng)
        ours, expected = model(feeds), litert_outputs(path, feeds)
        assert sorted(ours) == sorted(expected)
        for output, y in expected.items():
            assert len(np.unique(y)) > 100, "logits of random weights spread over the int8 range"
            np.testing.assert_array_equal(ours[output], y, err_msg=f"{name} output {output}")
