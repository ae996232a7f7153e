"""``qsynth sweep`` (qsynth/sweep.py) merges its rows into OUT/synthesis.{json,md}: a sweep of some
kernels replaces their rows and keeps the others, and it lists the cache's kernels outside the
configuration list too, loaded, not synthesized again. Real runs on a tiny configuration (NEON A1W1
acc tiles, well under a second of synthesis each) in a cache of their own."""
import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.solver

SWEPT = "bitserial_a1w1_unipolar_acc_8x64_neon"          # in the sweep's configuration list
EXTRA = "bitserial_a1w1_unipolar_acc_2x64_neon"          # not: made by qsynth synth --rows 2
KEPT = {"name": "bitserial_a3w3_hybrid_acc_2x256_avx2", "status": "proved", "length": 99, "cycles": {},
        "cache_key": "0123456789abcdef01234567", "from_cache": False, "synth_seconds": 1.0,
        "verify_seconds": 1.0, "wall_seconds": 2.0}      # an earlier run's row of a kernel not swept now


def _qsynth(tmp_path, *argv):
    env = dict(os.environ, QSYNTH_CACHE=str(tmp_path / "cache"), QSYNTH_TRUST=str(tmp_path / "trust.json"))
    proc = subprocess.run([sys.executable, "-m", "qsynth.cli", *argv], capture_output=True, text=True, env=env,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_a_sweep_replaces_its_rows_keeps_the_others_and_lists_every_cached_kernel(tmp_path):
    out = tmp_path / "bench"
    out.mkdir()
    stale = dict(KEPT, name=SWEPT, status="failed", reason="an earlier engine")
    (out / "synthesis.json").write_text(json.dumps({"run": {}, "kernels": [KEPT, stale]}))
    _qsynth(tmp_path, "synth", "--isa", "neon", "--kernel", "bitserial", "--layout", "acc", "--rows", "2",
            "--reg-bits", "64")
    sweep = ("sweep", "--isa", "neon", "--configs", "a1w1_unipolar_acc_8x64,a1w1_unipolar_acc_2x", "-j", "1",
             "--out", str(out), "--json")

    rows = {r["name"]: r for r in json.loads(_qsynth(tmp_path, *sweep))}
    assert set(rows) == {SWEPT, EXTRA}                              # this run's rows only
    assert rows[EXTRA]["from_cache"] and not rows[SWEPT]["from_cache"]
    written = json.loads((out / "synthesis.json").read_text())
    assert [r["name"] for r in written["kernels"]] == sorted([KEPT["name"], SWEPT, EXTRA])
    by_name = {r["name"]: r for r in written["kernels"]}
    assert by_name[KEPT["name"]] == KEPT                            # kept as it was
    assert by_name[SWEPT] == rows[SWEPT]                            # replaced: no longer the failed row
    assert written["run"]["kernels"] == 2 and written["run"]["from_cache"] == 1
    md = (out / "synthesis.md").read_text()
    assert all(f"| {n} | proved |" in md for n in (KEPT["name"], SWEPT, EXTRA)) and "Not synthesized" not in md
    assert md.count("| proved |") == 3 and "3 kernels. The last run swept 2 of them (1 loaded" in md
    # every row swept now carries this run's record (the CLI's command line, the commit), the file's run
    # too; the earlier row has none, and the table marks which run swept which row
    record = by_name[SWEPT]["run"]
    assert record == by_name[EXTRA]["run"] and "run" not in by_name[KEPT["name"]]
    assert record["command"] == "qsynth " + " ".join(sweep) and len(record["commit"].removesuffix("+dirty")) == 40
    assert {k: written["run"][k] for k in record} == record
    assert f"- Run: `{record['command']}` at {record['commit'][:10]}" in md
    assert f"{EXTRA}, {SWEPT}." in md and f"not recorded; load not recorded): {KEPT['name']}." in md

    again = {r["name"]: r for r in json.loads(_qsynth(tmp_path, *sweep))}
    assert all(r["from_cache"] for r in again.values())              # loaded, not synthesized again
    assert [r["name"] for r in json.loads((out / "synthesis.json").read_text())["kernels"]] == \
        sorted([KEPT["name"], SWEPT, EXTRA])
    assert not [p for p in out.iterdir() if p.name.startswith(".tmp-")]      # atomic writes left nothing behind
