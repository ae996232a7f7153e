"""What ``qsynth compile``, ``run`` and ``bench-model`` take and write (issue 31): an output never
overwrites the model or an input and is never a directory; a ``.npy`` that cannot be read is a read
error naming the file; NaN or infinity in an input is refused; bench-model takes ``--input`` and
otherwise draws values the model accepts (ids within the embedding, masks of 0/1). Each bad input is
one line and exit 2, before anything is compiled or written."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from qsynth.cli import main
from tvm_integration.bench import inputs, int8_models, models


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    folder = tmp_path_factory.mktemp("mlp")
    path = int8_models.quantize(int8_models.mlp(), folder / "m.onnx", fmt="qoperator")
    np.save(folder / "x.npy", np.zeros((4, 64), np.float32))
    return path


def refused(argv, capsys, *needles):
    """``argv`` exits 2 with one line on stderr holding every needle."""
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and all(n in err for n in needles), err
    return err


def test_outputs_never_overwrite_the_model_or_an_input(mlp, tmp_path, capsys):
    model, x = mlp.read_bytes(), mlp.parent / "x.npy"
    link = tmp_path / "link.onnx"
    link.symlink_to(mlp)
    refused(["compile", str(mlp), "-o", str(mlp)], capsys, "would overwrite the input", str(mlp))
    refused(["compile", str(mlp), "-o", str(link)], capsys, "would overwrite the input")
    refused(["run", str(mlp), "--input", str(x), "--output", str(x)], capsys, "would overwrite the input")
    refused(["run", str(mlp), "--input", f"input={x}", "--output", str(mlp)], capsys, "would overwrite the input")
    assert mlp.read_bytes() == model and np.load(x).shape == (4, 64)
    assert sorted(p.name for p in mlp.parent.iterdir()) == ["m.onnx", "x.npy"]


def test_an_output_that_is_a_directory_is_refused(mlp, tmp_path, capsys):
    (tmp_path / "d").mkdir()
    refused(["compile", str(mlp), "-o", str(tmp_path / "d")], capsys, "is a directory")
    (tmp_path / "m.so.json").mkdir()                    # where the signature would go
    refused(["compile", str(mlp), "-o", str(tmp_path / "m.so")], capsys, "is a directory")
    refused(["run", str(mlp), "--input", str(mlp.parent / "x.npy"), "--output", str(tmp_path / "d")], capsys,
            "is a directory")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d", "m.so.json"]
    assert not list((tmp_path / "d").iterdir()) and not list((tmp_path / "m.so.json").iterdir())


def test_an_unreadable_npy_is_a_read_error_naming_the_file(mlp, tmp_path, capsys):
    (tmp_path / "empty.npy").write_bytes(b"")           # numpy's EOFError: was "qsynth: interrupted", exit 130
    (tmp_path / "junk.npy").write_bytes(b"\x93NUMPY junk")
    np.savez(tmp_path / "both.npz", a=np.zeros(3))
    (tmp_path / "dir.npy").mkdir()
    for name in ("empty.npy", "junk.npy", "both.npz", "dir.npy", "missing.npy"):
        path = tmp_path / name
        refused(["run", str(mlp), "--input", str(path), "--output", str(tmp_path / "y.npy")], capsys, str(path),
                "--input")
    assert not (tmp_path / "y.npy").exists()


def test_npy_headers_bytes_and_folders_are_named_for_what_they_are(mlp, tmp_path, capsys):
    """Issue 46: a header claiming [100000, 100000, 100000] was a MemoryError (an internal error, exit 1),
    random bytes were "pickled (object) data", a folder as the model "no such file"."""
    with open(tmp_path / "huge.npy", "wb") as f:
        np.lib.format.write_array_header_1_0(f, {"descr": "<f4", "fortran_order": False,
                                                 "shape": (100000, 100000, 100000)})
        f.write(bytes(64))
    (tmp_path / "random.npy").write_bytes(np.random.default_rng(0).bytes(200))
    y = str(tmp_path / "y.npy")
    refused(["run", str(mlp), "--input", str(tmp_path / "huge.npy"), "--output", y], capsys,
            "claims a float32 array of shape [100000, 100000, 100000]", "but holds 64")
    refused(["run", str(mlp), "--input", str(tmp_path / "random.npy"), "--output", y], capsys,
            "is not a .npy file")
    refused(["run", str(tmp_path), "--input", str(mlp.parent / "x.npy"), "--output", y], capsys,
            "is a directory; give the model file")
    assert not (tmp_path / "y.npy").exists()


def test_an_input_path_may_hold_an_equals_sign(mlp, tmp_path, capsys):
    """``NAME=PATH`` is split at the first ``=`` only where NAME is an input; a model's only input may
    be given by a path holding ``=`` alone too; a NAME the model lacks, where no such file exists, is
    refused naming the inputs."""
    folder = tmp_path / "a=b"
    folder.mkdir()
    np.save(folder / "x.npy", np.random.default_rng(1).standard_normal((4, 64)).astype(np.float32))
    outputs = []
    for spec in (str(folder / "x.npy"), f"input={folder / 'x.npy'}"):
        assert main(["run", str(mlp), "--input", spec, "--output", str(tmp_path / "y.npy")]) == 0
        outputs.append(np.load(tmp_path / "y.npy"))
    np.testing.assert_array_equal(*outputs)
    assert main(["run", str(mlp), "--input", f"nope={folder / 'x.npy'}", "--output", str(tmp_path / "y.npy")]) == 1
    assert "the model has no input 'nope'" in capsys.readouterr().err


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nan_or_infinity_in_an_input_is_refused(mlp, tmp_path, capsys, bad):
    x = np.zeros((4, 64), np.float32)
    x[1, 2] = bad
    np.save(tmp_path / "x.npy", x)
    for command in (["run", str(mlp), "--input", f"input={tmp_path / 'x.npy'}", "--output", str(tmp_path / "y.npy")],
                    ["bench-model", str(mlp), "--input", f"input={tmp_path / 'x.npy'}"]):
        refused(command, capsys, "input 'input' holds 1 NaN or infinite value(s)")
    assert not (tmp_path / "y.npy").exists()


def encoder(vocab: int = 50, seq: int = 8, width: int = 16) -> onnx.ModelProto:
    """A BERT-like front: token embeddings gathered by int64 ``input_ids``, masked by an int64
    ``attention_mask`` (cast to float and broadcast), then a MatMul."""
    rng = np.random.default_rng(0)
    initializers = [numpy_helper.from_array(rng.standard_normal((vocab, width)).astype(np.float32), "embedding"),
                    numpy_helper.from_array((rng.standard_normal((width, 4)) * 0.3).astype(np.float32), "w"),
                    numpy_helper.from_array(np.array([2], np.int64), "axes")]
    nodes = [helper.make_node("Gather", ["embedding", "input_ids"], ["h"]),
             helper.make_node("Cast", ["attention_mask"], ["m"], to=TensorProto.FLOAT),
             helper.make_node("Unsqueeze", ["m", "axes"], ["m3"]),
             helper.make_node("Mul", ["h", "m3"], ["hm"]),
             helper.make_node("MatMul", ["hm", "w"], ["y"])]
    graph = helper.make_graph(nodes, "encoder", [helper.make_tensor_value_info(n, TensorProto.INT64, [1, seq])
                                                  for n in ("input_ids", "attention_mask")],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, seq, 4])], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = int8_models.IR_VERSION
    return model


@pytest.fixture(scope="module")
def quantized_encoder(tmp_path_factory):
    rng = np.random.default_rng(1)
    data = [{"input_ids": rng.integers(0, 50, (1, 8)), "attention_mask": rng.integers(0, 2, (1, 8))}
            for _ in range(4)]
    return int8_models.quantize(encoder(), tmp_path_factory.mktemp("encoder") / "e.onnx", data=data)


def test_random_inputs_are_values_the_model_accepts(quantized_encoder):
    """Ids within the (dequantized) embedding's rows, the mask 0/1: onnxruntime runs on them (random
    int64 ids failed there: "indices element out of data bounds")."""
    ranges = inputs.ranges(onnx.load(str(quantized_encoder)))
    assert ranges == {"input_ids": (0, 50), "attention_mask": (0, 2)}
    specs = {"input_ids": ((1, 8), "int64"), "attention_mask": ((1, 8), "int64")}
    feeds = models.random_inputs(specs, np.random.default_rng(0), ranges)
    assert set(np.unique(feeds["attention_mask"])) <= {0, 1} and 0 <= feeds["input_ids"].min()
    assert feeds["input_ids"].max() < 50
    models.reference_session(quantized_encoder).run(None, feeds)
    unplaced = models.random_inputs({"flags": ((64,), "int64"), "q": ((64,), "uint8")}, np.random.default_rng(0))
    assert set(np.unique(unplaced["flags"])) <= {0, 1} and unplaced["q"].max() > 1


def test_bench_model_runs_an_encoder_on_given_and_drawn_inputs(quantized_encoder):
    mask = np.ones((1, 8), np.int64)
    row = models.bench_model(quantized_encoder, trials=1, with_tvm_own=False, with_openvino=False,
                             feeds={"attention_mask": mask})
    assert row["max_abs_diff_vs_onnxruntime"] == 0.0


def test_bench_model_passes_its_inputs_on(mlp, tmp_path, capsys, monkeypatch):
    """--input NAME=PATH reaches the benchmark (replaced here by a recorder: the benchmark itself is the
    test above); a name the model lacks is refused before anything runs."""
    seen = {}

    def record(model, fp32, threads, trials, feeds):
        seen.update(feeds)
        return {"model": "m"}
    monkeypatch.setattr(models, "bench_model", record)
    x = np.arange(256, dtype=np.float32).reshape(4, 64)
    np.save(tmp_path / "x.npy", x)
    assert main(["bench-model", str(mlp), "--input", f"input={tmp_path / 'x.npy'}", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"model": "m"}
    np.testing.assert_array_equal(seen["input"], x)
    assert main(["bench-model", str(mlp), "--input", f"ids={tmp_path / 'x.npy'}"]) == 1
    assert "the model has no input 'ids'" in capsys.readouterr().err
