"""The trust model of the kernel library (issue 18): a tampered entry with a recomputed content
hash fails `qsynth cache verify` by name and is never used; malformed entries get a verdict, not
a traceback; re-proved entries are stamped and load without re-proving."""
import copy
import gc
import json
import os
import subprocess
import sys

import pytest

from sketches.program import Program
from synth import cache, trust
from synth.mutants import reinlined
from test_linear_forms import EXPLOITS


def _entry(name: str) -> dict:
    return next(e for e in map(cache.read, cache.entries()) if e["name"] == name)


def _store(entry: dict, root) -> str:
    plain = {k: v for k, v in entry.items() if k not in ("cache_key", "content_hash", "format")}
    return cache.store(plain, root).name


def _edit_constant(entry: dict, name: str, value: int) -> dict:
    out = copy.deepcopy(entry)
    out["constants"][name]["value"] = hex(value)
    return out


def _tampered() -> dict[str, dict]:
    """Entries as issue 18's findings describe them, each stored with a valid content hash."""
    a1w1 = _entry("bitserial_a1w1_unipolar_acc_8x512_avx512")
    body, outputs = EXPLOITS["finding 1: vpsrlq #63 of byte-split lanes, dropped by a range-decided vpmaxub"]
    exploit = Program.from_json({**a1w1["stages"]["compute"]["program"], "body": body, "outputs": outputs})
    lut = _entry("bitserial_a1w1_unipolar_acc_4x256_avx2")
    u8u8 = _entry("int8_u8u8_rows_4x4x8_neon")
    renamed = dict(copy.deepcopy(a1w1), name=a1w1["name"].replace("unipolar", "hybrid"))
    renamed["key"] = dict(renamed["key"], cost="latency")       # its own file beside the finding-1 entry
    accumulate = copy.deepcopy(a1w1)       # vpaddq -> vpaddb in the accumulate stage: wraps per byte
    accumulate["stages"]["accumulate"]["program"]["body"][0][0] = "vpaddb.zmm"
    accumulate = reinlined(accumulate, "accumulate", Program.from_json(accumulate["stages"]["accumulate"]["program"]))
    accumulate["key"] = dict(accumulate["key"], engine=accumulate["key"]["engine"] + "x")
    arity = copy.deepcopy(lut)             # an opcode of another arity in the compute stage
    arity["stages"]["compute"]["program"]["body"][0] = ["vpmovzxbw.ymm", [0]]
    arity["key"] = dict(arity["key"], cost="latency")
    sdot = _entry("int8_s8s8_k4_4x4x16_neon")
    narrow = copy.deepcopy(sdot)           # a 128-bit register where sdot.4s_lane takes 64 bits
    row = narrow["stages"]["row"]["program"]
    row["body"] = [["sdot.4s_lane#0", ins[1]] if ins[0].startswith("sdot") else ins for ins in row["body"]]
    narrow = reinlined(narrow, "row", Program.from_json(row))
    empty = copy.deepcopy(sdot)            # a stage with no outputs
    empty["key"] = dict(empty["key"], cost="latency")
    empty = reinlined(empty, "row", Program.from_json({**empty["stages"]["row"]["program"], "outputs": []}))
    return {
        "finding 1": reinlined(a1w1, "compute", exploit),
        "AVX2 nibble table edited": _edit_constant(lut, "lut", int(lut["constants"]["lut"]["value"], 16) ^ (1 << 8)),
        "NEON u8u8 zero seed edited": _edit_constant(u8u8, "zero", 1),
        "unipolar renamed hybrid": renamed,
        "vpaddq -> vpaddb": accumulate,
        "opcode of another arity": arity,
        "128-bit operand to sdot.4s_lane": narrow,
        "stage with no outputs": empty,
    }


@pytest.fixture(scope="module")
def tampered_cache(tmp_path_factory):
    root = tmp_path_factory.mktemp("tampered")
    files = {what: _store(entry, root) for what, entry in _tampered().items()}
    assert len(set(files.values())) == len(files)
    (root / "0badjson00000000000000000.json").write_text("{not json")
    missing = {k: v for k, v in _entry("int8_u8s8_k4_4x4x16_neon").items() if k != "stages"}
    files["malformed: no stages"] = _store(missing, root)
    files["good"] = _store(_entry("bitserial_a1w1_unipolar_8x64in128_neon"), root)
    return root, files


def _qsynth(*argv, cache_root, trust_store):
    env = dict(os.environ, QSYNTH_CACHE=str(cache_root), QSYNTH_TRUST=str(trust_store))
    return subprocess.run([sys.executable, "-m", "qsynth.cli", *argv], capture_output=True, text=True, env=env,
                          timeout=600)


def test_cache_verify_refuses_every_tampered_entry_by_name(tampered_cache, tmp_path):
    root, files = tampered_cache
    proc = _qsynth("cache", "verify", "-j", "2", cache_root=root, trust_store=tmp_path / "trust.json")
    assert proc.returncode == 1
    assert "Traceback" not in proc.stdout + proc.stderr
    lines = {line.split()[1]: line for line in proc.stdout.splitlines() if line.startswith(("ok", "FAIL"))}
    for what, file in files.items():
        assert lines[file].startswith("ok" if what == "good" else "FAIL"), (what, lines[file])
    assert lines["0badjson00000000000000000.json"].startswith("FAIL") and "unreadable" in lines["0badjson00000000000000000.json"]
    assert "constants are the spec's: refuted" in lines[files["AVX2 nibble table edited"]]
    assert "constants are the spec's: refuted" in lines[files["NEON u8u8 zero seed edited"]]
    assert "name is the spec's: refuted" in lines[files["unipolar renamed hybrid"]]
    assert "compute: program = spec: refuted" in lines[files["finding 1"]]
    assert "the form takes 64" in lines[files["128-bit operand to sdot.4s_lane"]]
    assert "malformed entry" in lines[files["malformed: no stages"]]
    assert proc.stdout.rstrip().endswith(f"{len(files) + 1} entries, {len(files)} failed")
    stamps = json.loads((tmp_path / "trust.json").read_text())
    assert list(stamps) == [cache.read(root / files["good"])["content_hash"]]


def test_tampered_entry_is_never_emitted_or_returned(tampered_cache, tmp_path):
    root, files = tampered_cache
    store = tmp_path / "trust.json"
    proc = _qsynth("emit", "--configs", "a1w1_unipolar_acc_8x512", "-o", str(tmp_path / "out"), cache_root=root,
                   trust_store=store)
    assert proc.returncode == 1 and not (tmp_path / "out").exists()
    assert f"refusing {files['finding 1']}" in proc.stderr and "Traceback" not in proc.stderr
    proc = _qsynth("synth", "--isa", "avx512", "--kernel", "bitserial", "--abits", "1", "--wbits", "1",
                   "--encoding", "unipolar", "--layout", "acc", cache_root=root, trust_store=store)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith(f"qsynth: kernel cache: {files['finding 1']}")


def test_stamped_entry_loads_without_reproving(tmp_path, monkeypatch):
    monkeypatch.setenv("QSYNTH_TRUST", str(tmp_path / "trust.json"))
    path = cache.entries()[0]
    assert trust.load(path) == cache.read(path)                      # proved now, then stamped
    assert trust.stamped(cache.read(path))
    monkeypatch.setattr("synth.kernel.verify", lambda entry: pytest.fail("a stamped entry was re-proved"))
    assert trust.load(path) == cache.read(path)
    monkeypatch.setattr(trust, "fingerprint", lambda: "another verifier")
    assert not trust.stamped(cache.read(path))                       # a changed verifier re-proves


@pytest.mark.parametrize("exposure", ["store writable by others", "folder writable by others"])
def test_stamps_others_can_change_are_ignored(tmp_path, monkeypatch, capsys, exposure):
    """A stamp makes an entry load unproved, so a store another user could have written is not read."""
    store = tmp_path / "shared" / "trust.json"
    monkeypatch.setenv("QSYNTH_TRUST", str(store))
    path = cache.entries()[0]
    trust.load(path)                                                 # proved, then stamped
    assert trust.stamped(cache.read(path))
    if exposure.startswith("store"):
        store.chmod(0o666)
    else:
        store.parent.chmod(0o777)
    proved = []
    monkeypatch.setattr("synth.kernel.verify", lambda entry: proved.append(entry["name"]) or [])
    assert not trust.stamped(cache.read(path))
    assert trust.load(path) == cache.read(path) and proved == [cache.read(path)["name"]]
    assert f"trust store {store} ignored" in capsys.readouterr().err


class _Finalized:
    """Cyclic garbage whose finalizer, run in any process but the one that made it, leaves a file named
    by that process's id: a stand-in for the onnxruntime session a test had dropped, whose destructor
    hung in a prover forked from the test (pthread_cond_destroy in onnxruntime's thread pool)."""

    def __init__(self, folder):
        self.cycle, self.maker, self.folder = self, os.getpid(), folder

    def __del__(self):
        if os.getpid() != self.maker:
            (self.folder / str(os.getpid())).touch()


def test_provers_do_not_inherit_the_callers_garbage(tmp_path, monkeypatch):
    """verify_paths with 2 jobs from this (pytest) process: the provers prove, and none of them runs a
    finalizer of this process's garbage. With the former fork Pool each forked prover collected the
    object below within its first proof (several thousand allocations each) and left its file."""
    monkeypatch.setenv("QSYNTH_TRUST", str(tmp_path / "trust.json"))
    seen = tmp_path / "finalized"
    seen.mkdir()
    # the hazard is live here: a forked child that collects garbage finalizes the parent's
    gc.collect()
    _Finalized(seen)
    child = os.fork()
    if child == 0:
        gc.collect()
        os._exit(0)
    os.waitpid(child, 0)
    assert [p.name for p in seen.iterdir()] == [str(child)]
    gc.collect()                                    # collected here: its own process, no file
    (seen / str(child)).unlink()
    paths = cache.entries()[:4]
    thresholds = gc.get_threshold()
    gc.set_threshold(2000, 10, 10)                  # not collected here before the provers start
    try:
        _Finalized(seen)
        verdicts = list(trust.verify_paths(paths, jobs=2))
    finally:
        gc.set_threshold(*thresholds)
        gc.collect()
    assert [v["path"] for v in verdicts] == [str(p) for p in paths] and all(v["ok"] for v in verdicts)
    assert list(seen.iterdir()) == []
    assert all(trust.stamped(cache.read(p)) for p in paths)


def test_provers_from_a_script_without_main_guard_and_from_python_c(tmp_path):
    """multiprocessing's spawn and forkserver workers import the caller's __main__: a script calling
    the loader at top level, unguarded, re-ran in every worker and the Pool replaced them for ever."""
    script = tmp_path / "script.py"
    script.write_text("from synth import cache, trust\nprint('top level', flush=True)\n"
                      "print([v['ok'] for v in trust.verify_paths(cache.entries()[:3], 2)])\n")
    for i, argv in enumerate(([str(script)], ["-c", script.read_text()])):
        env = dict(os.environ, QSYNTH_TRUST=str(tmp_path / f"trust{i}.json"))
        proc = subprocess.run([sys.executable, *argv], capture_output=True, text=True, env=env, timeout=300)
        assert (proc.returncode, proc.stdout) == (0, "top level\n[True, True, True]\n"), proc.stderr
        assert len(json.loads((tmp_path / f"trust{i}.json").read_text())) == 3


def test_a_prover_that_dies_refuses_its_entry(tmp_path, monkeypatch):
    """A crashed prover: its entry gets a failed verdict with the exit status, a new prover takes the
    next one, nothing is stamped, and the run ends."""
    monkeypatch.setenv("QSYNTH_TRUST", str(tmp_path / "trust.json"))
    monkeypatch.setattr(trust, "_PROVER", "import os, sys; sys.stdin.readline(); os._exit(3)")
    paths = cache.entries()[:3]
    verdicts = list(trust.verify_paths(paths, jobs=2))
    assert [v["path"] for v in verdicts] == [str(p) for p in paths]
    assert all(v["failures"] == ["the prover process died (exit status 3)"] for v in verdicts)
    assert not any(trust.stamped(cache.read(p)) for p in paths)


def test_processes_loading_at_once_prove_each_entry_once(tmp_path):
    """Two processes load the same unstamped entries at the same moment (the suite's xdist workers while
    collecting): one re-proves them, the other waits for its stamps instead of proving them again."""
    script = tmp_path / "load.py"
    script.write_text(
        "import os, sys, time\nfrom synth import cache, trust\n"
        "proving = trust.verify_paths\n"
        "def counted(paths, jobs=None):\n"
        "    paths = list(paths)\n    print(len(paths), flush=True)\n    return proving(paths, jobs)\n"
        "trust.verify_paths = counted\n"
        "open(sys.argv[1], 'w').close()\n"
        "while not os.path.exists(sys.argv[2]):\n    time.sleep(0.01)\n"      # both start together
        "entries, refused = trust.load_all(cache.entries()[:4], 1)\n"
        "print(len(entries), len(refused), flush=True)\n")
    env = dict(os.environ, QSYNTH_TRUST=str(tmp_path / "trust.json"), PYTHONPATH=os.pathsep.join(sys.path))
    ready = [tmp_path / "a", tmp_path / "b"]
    procs = [subprocess.Popen([sys.executable, str(script), str(mine), str(other)], stdout=subprocess.PIPE,
                              text=True, env=env) for mine, other in (ready, ready[::-1])]
    outputs = [p.communicate(timeout=300)[0].split() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert all(out[-2:] == ["4", "0"] for out in outputs), outputs           # each loads all four
    assert sorted(int(out[0]) if len(out) == 3 else 0 for out in outputs) == [0, 4], outputs
