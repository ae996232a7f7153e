"""Sequence models in the command line (issue 32 item 5): ``qsynth inspect`` names every MatMul of a
quantized encoder with its precision and operator (the int8 dense, the int8 batch_matmul of two
activations, or a float matmul), and BERT's int64 ``input_ids`` / ``attention_mask`` go through
``run`` (``compile``'s compile) and ``inspect``, equal to onnxruntime; an id outside its embedding is refused
(the compiled Gather does not check its indices)."""
from __future__ import annotations

import json
import logging

import numpy as np
import onnx
import pytest

from qsynth.cli import main
from transformer_models import calibration, encoder
from tvm_integration.bench import int8_models
from tvm_integration.bench.models import reference_session
from tvm_integration.qnn.onnx.importer import load
from tvm_integration.qnn.runtime.report import layers

SEQ, HIDDEN, VOCAB = 16, 64, 100
DENSE = ["l0.q.mm", "l0.k.mm", "l0.v.mm", "l0.o.mm", "l0.ff1.mm", "l0.ff2.mm"]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """The static and dynamic quantized 1-layer encoder on a float input, and the static one on ids and
    a mask (calibrated with a fifth of the keys masked out)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic
    logging.getLogger().setLevel(logging.ERROR)
    folder = tmp_path_factory.mktemp("encoders")
    onnx.save(encoder(HIDDEN, 2, SEQ, 1), str(folder / "f.onnx"))
    quantize_dynamic(str(folder / "f.onnx"), str(folder / "dynamic.onnx"), weight_type=QuantType.QInt8)
    int8_models.quantize(encoder(HIDDEN, 2, SEQ, 1), folder / "static.onnx", data=calibration(SEQ, HIDDEN))
    rng = np.random.default_rng(1)
    data = [{"input_ids": rng.integers(0, VOCAB, (1, SEQ)), "attention_mask": (rng.random((1, SEQ)) < 0.8).astype(np.int64)}
            for _ in range(8)]
    int8_models.quantize(encoder(HIDDEN, 2, SEQ, 1, ids=VOCAB), folder / "ids.onnx", data=data)
    return folder


def test_inspect_names_each_matmul(models, capsys):
    """Static QDQ: the projections and feed-forward on the int8 dense, Q.K^T and attention.V on the int8
    batch_matmul with its tile, no float matmul; quantize_dynamic leaves those two float (onnxruntime
    computes them so), and inspect says so."""
    static = layers(load(models / "static.onnx"))
    assert [r.layer for r in static if r.kind == "dense"] == DENSE
    matmuls = [r for r in static if r.kind == "batch_matmul"]
    assert [r.layer for r in matmuls] == ["l0.qk", "l0.av"] and {r.operator for r in static} == {"int8"}
    assert all(str(r.precision).startswith("A8W8 int8 (u8 x u8") and r.kernel.startswith("int8_") for r in matmuls)
    assert matmuls[0].shape == "1x2x16x32 @ 1x2x32x16"
    assert main(["inspect", str(models / "dynamic.onnx"), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert sorted(r["op"] for r in rows) == ["dense"] * 6 + ["matmul"] * 2
    integer = [n.name for n in onnx.load(str(models / "dynamic.onnx")).graph.node if n.op_type == "MatMulInteger"]
    assert [r["layer"] for r in rows if r["op"] == "dense"] == integer and all(integer)   # each named after its node
    floats = [r for r in rows if r["op"] == "matmul"]
    assert [r["layer"] for r in floats] == ["l0.qk", "l0.av"]
    assert all(r["encoding"] == "float32" and r["operator"] == "float" and "float_matmul" in r["kernel"] for r in floats)
    assert main(["inspect", str(models / "dynamic.onnx")]) == 0
    assert "float32" in capsys.readouterr().out


def test_ids_and_mask_through_compile_run_and_inspect(models, tmp_path, capsys):
    """int64 ids (negative ones too, as Gather takes them) and a mask with keys masked out: run (which
    compiles as ``compile`` does) equal to onnxruntime, inspected; an id past the embedding is one line
    and exit 2, not a crash."""
    path = models / "ids.onnx"
    rng = np.random.default_rng(2)
    ids, mask = rng.integers(-VOCAB, VOCAB, (1, SEQ)), np.ones((1, SEQ), np.int64)
    mask[0, 11:] = 0
    np.save(tmp_path / "ids.npy", ids)
    np.save(tmp_path / "mask.npy", mask)
    feeds = ["--input", f"input_ids={tmp_path / 'ids.npy'}", "--input", f"attention_mask={tmp_path / 'mask.npy'}"]
    assert main(["run", str(path), *feeds, "--output", str(tmp_path / "y.npy")]) == 0
    want = reference_session(path).run(None, {"input_ids": ids, "attention_mask": mask})[0]
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), want)
    assert main(["inspect", str(path)]) == 0
    assert capsys.readouterr().out.count("batch_matmul") == 2
    ids[0, 3] = VOCAB
    np.save(tmp_path / "ids.npy", ids)
    assert main(["run", str(path), *feeds, "--output", str(tmp_path / "bad.npy")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "input_ids" in err and "100 rows" in err, err
    assert not (tmp_path / "bad.npy").exists()
