"""scripts/ab_models.py, the in-process A/B of two builds beside OpenVINO: a model compiled by a tree
and saved, then its libraries and OpenVINO timed in turn, each reported with its ratio to OpenVINO
(times are not asserted: benchmarks, not tests)."""
from __future__ import annotations

import logging
import shutil
import subprocess
import sys
from pathlib import Path

from tvm_integration.bench import int8_models

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "ab_models.py"


def test_compiles_and_times_two_builds_beside_openvino(tmp_path):
    logging.getLogger("root").setLevel(logging.ERROR)
    # a QDQ MLP: what is asserted (a library compiled, saved, loaded and timed in turn beside OpenVINO)
    # does not depend on the model, and this one compiles in a fraction of a ResNet's time
    model = int8_models.quantize(int8_models.mlp(), tmp_path / "mlp.int8.onnx")
    subprocess.run([sys.executable, str(SCRIPT), "compile", str(model), str(tmp_path / "a.so")], check=True)
    for suffix in ("", ".json"):                 # the same build twice, as two libraries
        shutil.copy(tmp_path / f"a.so{suffix}", tmp_path / f"b.so{suffix}")
    run = subprocess.run([sys.executable, str(SCRIPT), "time", str(model), str(tmp_path / "a.so"), str(tmp_path / "b.so"),
                          "--rounds", "2", "--warm", "1", "--calls", "2"], capture_output=True, text=True, check=True)
    rows = {line.split()[0]: line for line in run.stdout.splitlines()}
    assert set(rows) == {"a.so", "b.so", "openvino_int8"}, run.stdout
    assert all("/ OpenVINO" in line for line in rows.values()) and "/ OpenVINO 1.000" in rows["openvino_int8"]
