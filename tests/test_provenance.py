"""Every benchmark run's record (tvm_integration/bench/provenance.py): the whole command line (a run with
--recompile once recorded its command without it), the commit with a dirty tree marked, and the host."""
import subprocess

from tvm_integration.bench import provenance


def test_command_keeps_every_argument(monkeypatch):
    monkeypatch.delenv("QSYNTH_HOST_FEATURES", raising=False)
    argv = [str(provenance.ROOT / "scripts" / "bench_zoo.py"), "--recompile", "--dir", "/tmp/a b", "--threads", "1"]
    assert provenance.command(argv) == "python scripts/bench_zoo.py --recompile --dir '/tmp/a b' --threads 1"


def test_command_names_the_features_a_run_was_held_to(monkeypatch):
    """A run under QSYNTH_HOST_FEATURES takes other kernels than the CPU would: its command says so."""
    monkeypatch.setenv("QSYNTH_HOST_FEATURES", "avx2,avx512f")
    argv = [str(provenance.ROOT / "scripts" / "bench_models.py"), "--threads", "1"]
    assert provenance.command(argv) == "QSYNTH_HOST_FEATURES=avx2,avx512f python scripts/bench_models.py --threads 1"


def test_commit_marks_a_dirty_tree(tmp_path):
    def git(*args):
        return subprocess.run(["git", "-C", str(tmp_path), *args], capture_output=True, text=True, check=True).stdout
    git("init", "-q")
    (tmp_path / "f").write_text("a")
    git("add", "f")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c")
    head = git("rev-parse", "HEAD").strip()
    assert provenance.commit(tmp_path) == head
    (tmp_path / "f").write_text("b")
    assert provenance.commit(tmp_path) == head + "+dirty"


def test_record_names_host_threads_load_and_date():
    run = provenance.finished(provenance.record([1, 2]))
    assert {"commit", "command", "host", "threads", "load_before", "load_after", "date", "seconds"} <= set(run)
    assert run["threads"] == [1, 2] and len(run["load_before"]) == 3 and run["host"]["cpu"] is not None
    line = provenance.line(run)
    assert run["command"] in line and run["host"]["uarch"] in line and run["commit"][:10] in line


def test_runs_finds_every_command_once_and_a_mark_is_printed():
    mark = {"command": "python scripts/old.py", "unrecorded": "commit not recorded; made on another host"}
    data = {"run": {"command": "python scripts/a.py"}, "meta": mark, "rows": [{"ms": 1.0, "run": mark}]}
    assert provenance.runs(data) == [{"command": "python scripts/a.py"}, mark]
    assert provenance.described(mark) == "`python scripts/old.py` (commit not recorded; made on another host)"
