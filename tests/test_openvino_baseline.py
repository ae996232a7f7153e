"""OpenVINO as a baseline (tvm_integration/bench/openvino_baseline.py): on a small QDQ model its worker
runs, its outputs are those of OpenVINO run directly (in the environment it reports) and its difference
from onnxruntime is reported in steps of the output's scale read from the ONNX file; on an AMX host the VNNI-only
configuration really leaves AMX; where OpenVINO cannot be imported, crashes or cannot read the model,
each configuration is reported unavailable with the reason instead of failing the benchmark, and
``qsynth bench-model`` says so; the worker times its batches by wall or by CPU time. Times are not
asserted (benchmarks, not tests)."""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import openvino as ov
import pytest

from conftest import HOST_RUNS
from isa_specs import host
from qsynth.cli import main
from tvm_integration.bench import int8_models, openvino_baseline
from tvm_integration.bench.timing import side_by_side

DATA = Path(__file__).resolve().parent / "data"
HOST_HAS_AMX = HOST_RUNS.lacks("amx-int8") is None       # OpenVINO's default then runs AMX


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """The demo's --quick model: a narrow 32x32 ResNet-style network, QDQ by onnxruntime."""
    logging.getLogger("root").setLevel(logging.ERROR)
    return int8_models.quantize(int8_models.resnet(32, (8, 16, 16, 32), 10),
                                tmp_path_factory.mktemp("ov") / "tiny.int8.onnx")


@pytest.fixture(scope="module")
def mlp(tmp_path_factory) -> Path:
    """A QDQ MLP (MatMuls, Gemm): what ``bench-model`` lists and reports about OpenVINO does not depend
    on the model, and this one compiles (ours and TVM's default build) in a fraction of ``tiny``'s time."""
    logging.getLogger("root").setLevel(logging.ERROR)
    return int8_models.quantize(int8_models.mlp(), tmp_path_factory.mktemp("ov") / "mlp.int8.onnx")


def onnxruntime_outputs(path: Path, feeds: dict) -> dict:
    from tvm_integration.bench.models import reference_session
    session = reference_session(path)
    return {o.name: v for o, v in zip(session.get_outputs(), session.run(None, feeds))}


def feeds_of() -> dict:
    return {"input": np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype(np.float32)}


def fake_openvino(tmp_path: Path, body: str, monkeypatch) -> None:
    """An ``openvino`` package ahead of the real one on the workers' path, whose import runs ``body``."""
    (tmp_path / "openvino").mkdir()
    (tmp_path / "openvino" / "__init__.py").write_text(body)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))


def openvino_directly(model: Path, x: np.ndarray, environment: dict, tmp_path: Path) -> np.ndarray:
    """OpenVINO's default configuration on ``x``, run without the baseline's worker: in a process of its own
    with the environment the report names (a host model held by QSYNTH_HOST_FEATURES holds oneDNN's ISA, which
    oneDNN reads once, when it loads: this process's OpenVINO may already run unheld)."""
    np.save(tmp_path / "x.npy", x)
    run = ("import sys, numpy as np, openvino as ov\n"
           "c = ov.Core().compile_model(sys.argv[1], 'CPU',\n"
           "                            {'INFERENCE_NUM_THREADS': 1, 'PERFORMANCE_HINT': 'LATENCY'})\n"
           "np.save(sys.argv[3], c({'input': np.load(sys.argv[2])})[c.outputs[0]])")
    subprocess.run([sys.executable, "-c", run, str(model), str(tmp_path / "x.npy"), str(tmp_path / "y.npy")],
                   env={**os.environ, **environment}, check=True)
    return np.load(tmp_path / "y.npy")


@pytest.mark.parametrize("cpuinfo, expected", [
    ("cpuinfo_sapphirerapids.txt", {"openvino_int8", "openvino_int8_vnni"}),
    ("cpuinfo_zen4.txt", {"openvino_int8"}), ("cpuinfo_skylake.txt", {"openvino_int8"})])
def test_vnni_only_is_run_where_amx_is(cpuinfo, expected):
    flags = host.parse_cpuinfo((DATA / cpuinfo).read_text()).flags
    configurations = openvino_baseline.configurations(flags, flags)
    assert set(configurations) == expected
    assert configurations["openvino_int8"] == {}


@pytest.mark.parametrize("features, isa", [("avx2", "AVX2"), ("avx2,avxvnni", "AVX2_VNNI"),
                                           ("avx2,avx512f,avx512bw,avx512vl", "AVX512_CORE"),
                                           ("avx2,avx512f,avx512bw,avx512vl,avx512vnni", "AVX512_CORE_VNNI")])
def test_a_held_host_model_holds_openvino_to_the_same_instructions(features, isa):
    """QSYNTH_HOST_FEATURES=avx2 on a Sapphire Rapids stands for an AVX2-only host: OpenVINO then runs
    that host's instructions too (oneDNN's cap), not AMX beside qsynth's AVX2 code."""
    cpu = host.parse_cpuinfo((DATA / "cpuinfo_sapphirerapids.txt").read_text())
    held = host.restricted(cpu, features)
    assert openvino_baseline.configurations(held.flags, cpu.flags) == {"openvino_int8": {"ONEDNN_MAX_CPU_ISA": isa}}


def test_runs_and_reports_its_difference_from_onnxruntime(tiny, tmp_path):
    feeds = feeds_of()
    expected = onnxruntime_outputs(tiny, feeds)
    runs, report = openvino_baseline.baselines(tiny, feeds, expected, threads=1)
    assert set(runs) == set(report) == ({"openvino_int8", "openvino_int8_vnni"} if HOST_HAS_AMX else {"openvino_int8"})
    direct = openvino_directly(tiny, feeds["input"], report["openvino_int8"].get("environment", {}), tmp_path)
    (name, want), = expected.items()
    graph = onnx.load(str(tiny)).graph
    dq = next(n for n in graph.node if n.output[0] == name)
    scale = float(onnx.numpy_helper.to_array(next(t for t in graph.initializer if t.name == dq.input[1])))
    r = report["openvino_int8"]
    assert r["version"] == ov.__version__.split("-")[0]
    assert r["max_abs_diff"] == pytest.approx(float(np.max(np.abs(direct - want))), abs=1e-6)
    assert r["max_diff_steps"] == pytest.approx(r["max_abs_diff"] / scale, abs=1e-3)
    assert r["differing"] == int(np.count_nonzero(direct != want)) and r["compared"] == want.size
    if HOST_RUNS.vnni:
        assert r["max_diff_steps"] <= 8      # not bit-exact, but the same quantized network
    # without VNNI its vpmaddubsw saturates: 13 steps on the Zen 3 host (docs/measurements.md)
    assert r["primitives"] and all("I8" in p for p in r["primitives"])
    if HOST_HAS_AMX:
        assert any("amx" in p for p in r["primitives"])
        assert not any("amx" in p for p in report["openvino_int8_vnni"]["primitives"])
    times = side_by_side(lambda: 1e-3, runs, trials=2, threads=1)
    assert set(times) == {"ours", *runs} and all(t > 0 for t in times.values())
    assert runs["openvino_int8"](cpu=True)() > 0        # its batches timed by the worker's CPU time


@pytest.mark.parametrize("body, reason", [
    ("raise ImportError('no wheel for this CPU')", "cannot import openvino (ImportError: no wheel for this CPU)"),
    ("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)", "the OpenVINO worker ended (exit code -11)")])
def test_openvino_that_cannot_load_is_reported_unavailable(tiny, tmp_path, monkeypatch, body, reason):
    fake_openvino(tmp_path, body, monkeypatch)
    feeds = feeds_of()
    runs, report = openvino_baseline.baselines(tiny, feeds, onnxruntime_outputs(tiny, feeds), threads=1)
    assert runs == {}
    assert report and all(r == {"unavailable": report["openvino_int8"]["unavailable"]} for r in report.values())
    assert report["openvino_int8"]["unavailable"].startswith(reason)
    assert "\n" not in report["openvino_int8"]["unavailable"]


def test_a_model_openvino_cannot_read_is_reported_unavailable(custom_op_model):
    x = np.zeros((1, 4), np.float32)
    runs, report = openvino_baseline.baselines(custom_op_model, {"x": x}, {"y": x}, threads=1)
    assert runs == {} and report["openvino_int8"]["unavailable"].startswith("OpenVINO cannot run custom.onnx: ")


def _bench_model(path: Path, capsys, *argv: str) -> str:
    """``qsynth bench-model`` in this process (its OpenVINO worker is a process of its own, started with
    this environment): what it prints, once it exits 0."""
    assert main(["bench-model", str(path), "--trials", "2", *argv]) == 0
    return capsys.readouterr().out


def test_bench_model_lists_openvino_among_the_baselines(mlp, capsys):
    """Every configuration is reported; those OpenVINO compiles are timed. OpenVINO 2026.4.1 refuses this MLP
    in its default configuration on the AMX Xeon ("Not enough gp registers in the pool", its snippets'
    register assignment), and compiles it held to VNNI."""
    row = json.loads(_bench_model(mlp, capsys, "--json"))
    configurations = {"openvino_int8", "openvino_int8_vnni"} if HOST_HAS_AMX else {"openvino_int8"}
    assert set(row["openvino"]) == configurations
    ran = {name for name, r in row["openvino"].items() if "unavailable" not in r}
    assert ran and ran <= set(row["baselines"]) == set(row["speedups"])
    assert all(row["openvino"][name]["max_diff_steps"] is not None for name in ran)
    assert all(r["unavailable"].startswith("OpenVINO cannot run mlp.int8.onnx: ")
               for name, r in row["openvino"].items() if name not in ran)


def test_bench_model_without_openvino_says_why_and_succeeds(mlp, tmp_path, monkeypatch, capsys):
    fake_openvino(tmp_path, "raise ImportError('not installed here')", monkeypatch)
    out = _bench_model(mlp, capsys)
    assert "  onnxruntime_int8 " in out and "  openvino_int8 " not in out
    assert "openvino_int8: unavailable: cannot import openvino (ImportError: not installed here)" in out
