"""``qsynth bench-layer``: bad input is one line and exit 2; a real row is checked against numpy in
the same run and carries every baseline, OpenVINO's among them (times themselves are benchmarks, not asserted).
Every case runs in this process (``cli.main``, the CLI's entry point): a process of its own imported TVM
and torch again (3.5 s each, 7 s for the real row)."""
import json
import os

import pytest

from conftest import HOST_RUNS, skip_if
from qsynth import cli
from tvm_integration.kernels import selection


@pytest.mark.parametrize("argv, message", [
    (["--layer", "C1"], "unknown layer 'C1'; accepted: C2,"),
    (["--layer", "C6", "--config", "fp16"], "--config must be int8 or AxWy"),
    (["--layer", "C6", "--isa", "neon"], "'neon' is not one of 'host'"),
    (["--layer", "C6", "--threads", "0"], "must be a positive integer"),
])
def test_bad_input_is_one_line_and_exit_2(argv, message, capsys):
    assert cli.main(["bench-layer", *argv]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and message in err


def test_an_isa_the_host_lacks_is_refused(host_runs, capsys):
    lacking = [isa for isa in selection.INT8_ISAS if host_runs.cannot_run(selection.int8_kernel(isa))]
    if not lacking:
        pytest.skip("this host runs a kernel of every ISA")
    assert cli.main(["bench-layer", "--layer", "C6", "--isa", lacking[0]]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--isa {lacking[0]}: this host cannot run" in err


@skip_if(HOST_RUNS.int8_why)
def test_smallest_layer_row_is_correct_with_every_baseline(host_runs, monkeypatch, capsys):
    monkeypatch.setitem(os.environ, "TVM_NUM_THREADS", "1")         # what bench-layer sets for --threads 1
    status = cli.main(["bench-layer", "--layer", "C12", "--trials", "3", "--json"])
    out, err = capsys.readouterr()
    assert status == 0, err[-2000:]
    row = json.loads(out)
    assert row["correct"] is True
    openvino = {"openvino_int8", "openvino_int8_vnni"} if host_runs.lacks("amx-int8") is None else {"openvino_int8"}
    assert {"onnxruntime_fp32", "onnxruntime_int8", "tvm_default", *openvino} <= set(row["baselines"]) \
        == set(row["speedups"])
    assert row["ours_ms"] > 0 and row["gmacs"] > 0
    # OpenVINO on the one-conv model: its difference from onnxruntime int8 reported, its fixed cost noted; held
    # with a host model that lacks VNNI (QSYNTH_HOST_FEATURES=avx2), OpenVINO saturates as on such a host
    assert set(row["openvino"]) == openvino
    assert all(r["max_diff_steps"] <= 8 for r in row["openvino"].values() if "environment" not in r or host_runs.vnni)
    assert any("fixed cost per model" in note for note in row["notes"])
