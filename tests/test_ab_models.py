"""scripts/ab_models.py, the in-process A/B of two builds beside OpenVINO: a model compiled by a tree
and saved, then its libraries and OpenVINO timed in turn, each reported with its ratio to OpenVINO
(times are not asserted: benchmarks, not tests). Its ``main`` runs in this process (a process of its own
would import TVM again: 7 s of CPU each)."""
from __future__ import annotations

import logging
import shutil
import sys

import pytest

from tvm_integration.bench import int8_models


def ab_models(monkeypatch, *argv: str) -> int:
    """The script's ``main`` on ``argv``; what it changes of the process (sys.path, TVM_NUM_THREADS) undone
    after the test."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("TVM_NUM_THREADS", "1")
    monkeypatch.setattr(sys, "argv", ["ab_models.py", *argv])
    from scripts import ab_models
    return ab_models.main()


def test_compiles_and_times_two_builds_beside_openvino(tmp_path, monkeypatch, capsys):
    logging.getLogger("root").setLevel(logging.ERROR)
    # a QDQ MLP: what is asserted (a library compiled, saved, loaded and timed in turn beside OpenVINO)
    # does not depend on the model, and this one compiles in a fraction of a ResNet's time. One hidden
    # layer: OpenVINO 2026.4.1 refuses MLPs of two on the AMX Xeon (test_a_model_openvino_refuses_is_one_line)
    model = int8_models.quantize(int8_models.mlp(hidden=(128,)), tmp_path / "mlp.int8.onnx")
    assert ab_models(monkeypatch, "compile", str(model), str(tmp_path / "a.so")) == 0
    for suffix in ("", ".json"):                 # the same build twice, as two libraries
        shutil.copy(tmp_path / f"a.so{suffix}", tmp_path / f"b.so{suffix}")
    capsys.readouterr()
    assert ab_models(monkeypatch, "time", str(model), str(tmp_path / "a.so"), str(tmp_path / "b.so"),
                     "--rounds", "2", "--warm", "1", "--calls", "2") == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line for line in out.splitlines()}
    assert set(rows) == {"a.so", "b.so", "openvino_int8"}, out
    assert all("/ OpenVINO" in line for line in rows.values()) and "/ OpenVINO 1.000" in rows["openvino_int8"]



def test_a_model_openvino_refuses_is_one_line(custom_op_model, tmp_path, monkeypatch):
    """A model OpenVINO cannot compile stops the timing with its reason on one line, before any library
    is loaded, not with OpenVINO's traceback."""
    with pytest.raises(SystemExit) as stopped:
        ab_models(monkeypatch, "time", str(custom_op_model), str(tmp_path / "never-built.so"))
    message = str(stopped.value.code)
    assert message.startswith("OpenVINO cannot compile custom.onnx: ") and "\n" not in message, message
