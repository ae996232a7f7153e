"""Sweeps on a Ray cluster (``qsynth sweep --executor ray``, qsynth/cluster.py), against local Ray
instances the tests start themselves: the cache is filled through Ray and every entry re-proves
here (``qsynth cache verify``); a rerun submits only the kernels missing from the cache; a worker's
tampered, misdirected or failed result is reported and nothing of it is stored."""
import copy
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'qsynth[cluster]'; scripts/bootstrap.sh "
                                        "installs it)", exc_type=ModuleNotFoundError)

from sketches.program import Program  # noqa: E402
from qsynth import cluster  # noqa: E402
from synth import cache, trust  # noqa: E402
from qsynth.sweep import sweep  # noqa: E402
from synth.mutants import reinlined  # noqa: E402
from synth.spec import BitserialSpec  # noqa: E402

pytestmark = pytest.mark.solver


def _qsynth(*argv, cache_root, trust_store):
    env = dict(os.environ, QSYNTH_CACHE=str(cache_root), QSYNTH_TRUST=str(trust_store))
    return subprocess.run([sys.executable, "-m", "qsynth.cli", *argv], capture_output=True, text=True, env=env,
                          timeout=900)


def test_sweep_on_ray_fills_the_cache_and_a_rerun_does_only_the_missing_jobs(local_ray, tmp_path):
    """The first sweep starts a Ray instance of its own; the rerun joins a running cluster (``--address``,
    the fixture's) instead of starting one, as a second start would cost 20 s of CPU for the same code."""
    root, store = tmp_path / "cache", tmp_path / "trust.json"
    # one config and encoding, its acc kernels and their GEMM-shaped variant and its lanes tiles of 2 and 3
    # columns (5 jobs); the executor does not depend on the layout, and the paper's tiles the sweep adds for
    # A1W1 (the 8x128 tile alone 26 s of search under load, then again for the rerun) are searched by test_synth
    argv = ("sweep", "--executor", "ray", "--isa", "neon", "--configs", "a1w1_unipolar_acc,a1w1_unipolar_lanes",
            "--out", str(tmp_path), "--json")
    proc = _qsynth(*argv, cache_root=root, trust_store=store)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = json.loads(proc.stdout)
    names = {r["name"] for r in rows}
    assert len(rows) == len(names) == 5 and all("a1w1_unipolar_" in n and n.endswith("_neon") for n in names)
    assert all(r["status"] == "proved" and not r["from_cache"] and r["node"] for r in rows)
    assert sorted(p.stem for p in cache.entries(root)) == sorted(r["cache_key"] for r in rows)
    assert json.loads((tmp_path / "synthesis.json").read_text())["run"]["executor"] == "ray"

    # every stored entry re-proves on a machine that trusts nothing yet
    verify = _qsynth("cache", "verify", "-j", "2", cache_root=root, trust_store=tmp_path / "fresh.json")
    assert verify.returncode == 0 and verify.stdout.rstrip().endswith("5 entries, 0 failed"), verify.stdout[-2000:]

    # two results lost (a worker killed, a job failed): the rerun, on the cluster it joins, submits those two only
    lost = sorted(rows, key=lambda r: r["name"])[:2]
    for r in lost:
        cache.path_for(r["cache_key"], root).unlink()
    kept = {p.name: p.read_bytes() for p in cache.entries(root)}
    address = ray.get_runtime_context().gcs_address
    proc = _qsynth(*argv, "--address", address, cache_root=root, trust_store=store)
    assert proc.returncode == 0, proc.stderr[-2000:]
    again = {r["name"]: r for r in json.loads(proc.stdout)}
    assert {n for n, r in again.items() if not r["from_cache"]} == {r["name"] for r in lost}
    assert all(r["status"] == "proved" for r in again.values())
    assert all(r["node"] for r in again.values() if not r["from_cache"])
    assert ray.is_initialized() and ray.cluster_resources().get("CPU") == 2       # the joined cluster is still up
    assert all((root / name).read_bytes() == data for name, data in kept.items())     # finished ones untouched
    assert len(cache.entries(root)) == 5


def _tampered_job(spec_key, cost, timeout):
    """A dishonest worker: synthesizes, then swaps ``and`` for ``orr`` in the compute stage and
    re-inlines the kernel, still claiming it proved."""
    result = cluster.run_job(spec_key, cost, timeout)
    entry = result["entry"]
    compute = Program.from_json({**entry["stages"]["compute"]["program"],
                                 "body": [["orr.8b", ins[1]] if ins[0] == "and.8b" else ins
                                          for ins in entry["stages"]["compute"]["program"]["body"]]})
    return dict(result, entry=reinlined(entry, "compute", compute))


def _misdirected_job(spec_key, cost, timeout):
    """A worker answering another kernel's job with a proved entry of its own choosing."""
    other = BitserialSpec.for_isa("neon", 1, 1, "unipolar", layout="acc", reg_bits=128)
    return cluster.run_job(other.key(), cost, timeout)


@pytest.fixture(scope="module")
def local_ray():
    from ray import cloudpickle
    cloudpickle.register_pickle_by_value(sys.modules[__name__])     # the dishonest jobs run on the workers
    ray.init(num_cpus=2, include_dashboard=False, logging_level="warning", log_to_driver=False,
             runtime_env={"py_modules": [str(cluster.ROOT / p) for p in cluster.PACKAGES]})
    yield
    ray.shutdown()


def test_a_workers_tampered_or_failed_result_is_refused_and_nothing_is_stored(local_ray, tmp_path, monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setattr(cache, "ROOT", root)
    monkeypatch.setenv("QSYNTH_TRUST", str(tmp_path / "trust.json"))
    spec = BitserialSpec.for_isa("neon", 1, 1, "unipolar", layout="acc", reg_bits=64)

    (got, result), = cluster.results([spec], "length", 60.0, None, job=_tampered_job)
    assert got == spec and result["status"] == "done" and result["entry"]["proof"]["proved"], result
    tampered = copy.deepcopy(result["entry"])
    row = cluster.row(spec, result, "length")
    assert row["status"] == "refused" and "not proved here" in row["reason"] and "compute" in row["reason"], row
    assert cache.entries(root) == [] and not (tmp_path / "trust.json").exists()

    (_, result), = cluster.results([spec], "length", 60.0, None, job=_misdirected_job)
    row = cluster.row(spec, result, "length")
    assert row == dict(row, status="refused", reason="the worker returned an entry for another kernel")
    assert cache.entries(root) == []

    (_, result), = cluster.results([spec], "length", 0.001, None)          # out of time on the worker
    row = cluster.row(spec, result, "length")
    assert row["status"] == "failed" and row["reason"] and row["node"], row
    assert cache.entries(root) == []

    (_, result), = cluster.results([spec], "length", 60.0, None)           # the honest job, retried
    row = cluster.row(spec, result, "length")
    assert row["status"] == "proved" and [p.stem for p in cache.entries(root)] == [row["cache_key"]]
    assert tampered["stages"]["compute"]["program"]["body"] != result["entry"]["stages"]["compute"]["program"]["body"]
    assert trust.stamped(cache.read(cache.entries(root)[0]))


def _killed_job(pid_file):
    """For the hybrid kernel, a job whose worker is killed (SIGKILL) as soon as its synthesis child
    runs; the worker's PID goes to ``pid_file``."""
    def kill_when_synthesizing(pid):
        while not _children_of(pid):
            time.sleep(0.01)
        os.kill(int(pid), signal.SIGKILL)

    def job(spec_key, cost, timeout):
        if spec_key["encoding"] == "hybrid":
            Path(pid_file).write_text(str(os.getpid()))
            threading.Thread(target=kill_when_synthesizing, args=(str(os.getpid()),), daemon=True).start()
        return cluster.run_job(spec_key, cost, timeout)
    return job


def _children_of(pid: str) -> list[int]:
    """Live processes started as synthesis children of worker ``pid`` (they carry its PID)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and f"QSYNTH_JOB_PARENT={pid}\0".encode() in (proc / "environ").read_bytes():
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def test_a_killed_worker_leaves_the_cache_consistent_and_the_rerun_does_only_its_job(local_ray, tmp_path,
                                                                                      monkeypatch):
    root = tmp_path / "cache"
    monkeypatch.setattr(cache, "ROOT", root)
    monkeypatch.setenv("QSYNTH_TRUST", str(tmp_path / "trust.json"))
    wanted = ["A1W1_unipolar_acc_8x64", "a1w1_hybrid_acc_8x64"]
    real_job = cluster.run_job
    monkeypatch.setattr(cluster, "run_job", _killed_job(tmp_path / "worker.pid"))
    rows = {r["name"]: r for r in sweep(["neon"], 1, 60.0, tmp_path, wanted, executor="ray")}
    assert rows["bitserial_a1w1_unipolar_acc_8x64_neon"]["status"] == "proved"
    killed = rows["bitserial_a1w1_hybrid_acc_8x64_neon"]
    assert killed["status"] == "error" and "Worker" in killed["reason"], killed
    assert "bitserial_a1w1_hybrid_acc_8x64_neon: " in (tmp_path / "synthesis.md").read_text()   # reported
    assert [trust.verdict(p)["ok"] for p in cache.entries(root)] == [True]                      # consistent
    deadline = time.monotonic() + 10
    while _children_of((tmp_path / "worker.pid").read_text()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _children_of((tmp_path / "worker.pid").read_text()) == []        # its synthesis died with it

    monkeypatch.setattr(cluster, "run_job", real_job)
    rows = {r["name"]: r for r in sweep(["neon"], 1, 60.0, tmp_path, wanted, executor="ray")}
    assert rows["bitserial_a1w1_unipolar_acc_8x64_neon"]["from_cache"] is True
    assert rows["bitserial_a1w1_hybrid_acc_8x64_neon"] == dict(rows["bitserial_a1w1_hybrid_acc_8x64_neon"],
                                                                status="proved", from_cache=False)
    assert len(cache.entries(root)) == 2


def test_a_time_limit_due_at_once_does_not_kill_the_job_process(tmp_path):
    """synth.kernel.time_limit armed its timer before its try block, so an alarm due at once (a 1 ms limit on a
    loaded host) raised before the cleanup was in place and left the timer re-firing: the job process was then
    killed by SIGALRM after writing its "failed" result, and the worker reported an error (exit status -14)
    instead. A 1 us limit makes the alarm due at once every time; the process lives on 0.3 s."""
    spec = BitserialSpec.for_isa("neon", 1, 1, "unipolar", layout="acc", reg_bits=64)
    out = tmp_path / "result.json"
    script = f"""
import time
from qsynth import cluster
cluster._job_main({json.dumps(json.dumps(spec.key()))}, "length", "0.000001", {str(out)!r})
time.sleep(0.3)
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, QSYNTH_JOB_PARENT=str(os.getpid())))
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert json.loads(out.read_text()) == {"status": "failed", "reason": "time limit reached"}
