"""The zoo's architectures in small (issue 31 item 2): blocks built from torchvision's own ResNet,
MobileNetV3, EfficientNet, ShuffleNetV2, DenseNet, RegNet, GoogLeNet, SqueezeNet and ConvNeXt modules
and a 1-layer BERT encoder from transformers' BertModel (quantize_static and quantize_dynamic), as
torch's exporter and onnxruntime's quantizer write them (tests/data/zoo/, written by
scripts/make_zoo_blocks.py). Each compiled as ``qsynth run`` compiles it and compared with onnxruntime,
output by output, bit for bit, on random inputs the model accepts (ids within the embedding, masks of 0/1)."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
import pytest

from qsynth.cli import main
from tvm_integration.bench import inputs
from tvm_integration.bench.models import reference_session, random_inputs
from tvm_integration.qnn.runtime.model import compile_model

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "zoo"
FIXTURES = ["resnet", "mobilenet_v3", "efficientnet", "shufflenet_v2", "densenet", "regnet", "googlenet", "squeezenet",
            "convnext", "bert_static", "bert_dynamic"]
RUNS = 3
def path(name: str) -> Path:
    return DATA / f"{name}.int8.onnx"


def output_names(name: str) -> list[str]:
    return [o.name for o in onnx.load(str(path(name))).graph.output]


def compared(name: str) -> list[tuple[dict, dict]]:
    """(ours, onnxruntime's) outputs, name -> array, on RUNS random inputs."""
    model = compile_model(path(name), threads=1)
    session = reference_session(path(name))
    ranges = inputs.ranges(onnx.load(str(path(name))))
    rng = np.random.default_rng(31)
    runs = []
    for _ in range(RUNS):
        feeds = random_inputs(model.inputs, rng, ranges)
        runs.append((model(feeds), dict(zip(model.outputs, session.run(None, feeds)))))
    return runs


@pytest.mark.parametrize("name", FIXTURES)
def test_block_is_bit_exact_with_onnxruntime(name):
    """Every output of the fixture, in one test: one compile of it (a test per output compiled the model
    once per xdist worker its outputs' tests landed on: BERT's two outputs twice, 14 s)."""
    outputs = output_names(name)
    for ours, expected in compared(name):
        assert sorted(ours) == sorted(expected) == sorted(outputs)
        for output in outputs:
            assert ours[output].dtype == expected[output].dtype and ours[output].shape == expected[output].shape
            np.testing.assert_array_equal(ours[output], expected[output], err_msg=f"{name} output {output}")


def ops(name: str) -> Counter:
    return Counter(node.op_type for node in onnx.load(str(path(name))).graph.node)


def attribute(name: str, op: str, key: str) -> list:
    return [onnx.helper.get_attribute_value(a) for node in onnx.load(str(path(name))).graph.node
            if node.op_type == op for a in node.attribute if a.name == key]


def test_fixtures_are_the_families_ops():
    """What makes each family itself is in its fixture as the exporter and quantizer wrote it (so a
    regenerated set cannot silently lose it), and the set stays small."""
    assert sorted(p.name for p in DATA.glob("*.onnx")) == sorted(path(name).name for name in FIXTURES)
    assert all(path(name).stat().st_size < 200_000 for name in FIXTURES)
    assert sum(path(name).stat().st_size for name in FIXTURES) < 1_500_000
    for name in FIXTURES:
        assert ops(name)["QuantizeLinear" if name != "bert_dynamic" else "DynamicQuantizeLinear"] > 0, name
    assert ops("resnet")["Add"] == 1 and ops("resnet")["Gemm"] == 1
    assert {"HardSwish", "HardSigmoid"} <= set(ops("mobilenet_v3"))
    assert ops("efficientnet")["Sigmoid"] == 4 and ops("efficientnet")["ReduceMean"] == 1     # 3 SiLU, SE's gate
    assert {"Split", "Transpose", "Concat"} <= set(ops("shufflenet_v2"))                       # the channel shuffle
    assert ops("densenet")["BatchNormalization"] == 3 and ops("densenet")["Concat"] == 2
    assert max(attribute("regnet", "Conv", "group")) == 4 and ops("regnet")["Sigmoid"] == 1
    assert attribute("googlenet", "MaxPool", "ceil_mode") == [1, 1] and ops("googlenet")["Concat"] == 1
    assert attribute("squeezenet", "MaxPool", "ceil_mode") == [1] and ops("squeezenet")["ReduceMean"] == 1
    assert ops("convnext")["LayerNormalization"] == 2 and ops("convnext")["Erf"] == 1
    assert {"Softmax", "LayerNormalization", "Erf", "Tanh", "Where"} <= set(ops("bert_static"))
    assert ops("bert_dynamic")["MatMulInteger"] == 7


def test_bert_through_inspect(capsys):
    """``qsynth inspect`` on the transformers-exported encoder: every MatMul of it on the int8 operators."""
    assert main(["inspect", str(path("bert_static"))]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[1:]]
    assert Counter(row[1] for row in rows) == {"dense": 7, "batch_matmul": 2}
    assert all("int8" in row for row in rows)


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("QSYNTH_SLOW") != "1", reason="opt-in: QSYNTH_SLOW=1 (compiles and times both "
                                                                 "encoders next to every baseline: half a minute)")
@pytest.mark.parametrize("name", ["bert_static", "bert_dynamic"])
def test_bert_through_bench_model(name, capsys):
    """``qsynth bench-model --trials 2`` on each encoder: valid ids and masks generated, every baseline run."""
    assert main(["bench-model", str(path(name)), "--trials", "2"]) == 0
    assert "onnxruntime_int8" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("QSYNTH_SLOW") != "1" or importlib.util.find_spec("transformers") is None,
                    reason="opt-in: QSYNTH_SLOW=1 with torch, torchvision and transformers importable (not test "
                           "dependencies: scripts/make_zoo_blocks.py says how)")
def test_script_reproduces_the_fixtures(tmp_path):
    """scripts/make_zoo_blocks.py writes the committed fixtures byte for byte (seeded weights and
    calibration; on another CPU onnxruntime's float calibration may round otherwise)."""
    subprocess.run([sys.executable, str(ROOT / "scripts" / "make_zoo_blocks.py"), "--out", str(tmp_path)],
                   check=True, capture_output=True)
    for name in FIXTURES:
        assert (tmp_path / path(name).name).read_bytes() == path(name).read_bytes(), f"{name} differs from the fixture"
