"""`qsynth isa` bad input: one line naming what is accepted, non-zero exit."""
import subprocess
import sys

import pytest


@pytest.mark.parametrize("argv,needle", [
    (["isa", "check", "--isa", "arm"], "'arm' is not one of 'neon', 'avx2', 'avx512', 'amx'"),
    (["isa", "check", "--isa", "neon", "--samples", "0"], "must be a positive integer"),
    (["isa", "check", "--isa", "neon", "--instruction", "uadalp,frob"], "unknown neon instruction(s) frob; accepted:"),
    (["isa", "list", "--isa", "x87"], "'x87' is not one of"),
])
def test_bad_input(argv, needle):
    proc = subprocess.run([sys.executable, "-m", "qsynth.cli", *argv], capture_output=True, text=True)
    assert proc.returncode == 2
    assert needle in proc.stderr and proc.stderr.count("\n") == 1


def test_check_reports_json_rows_for_every_form():
    import json
    proc = subprocess.run([sys.executable, "-m", "qsynth.cli", "isa", "check", "--isa", "neon", "--instruction",
                           "uadalp,cnt", "--samples", "64", "--json"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert {r["instruction"] for r in rows} == {"uadalp", "cnt"}
    assert all(r["status"] == "passed" and r["samples"] >= 64 and r["mismatches"] == 0 for r in rows)
