"""`qsynth isa` bad input: one line naming what is accepted, non-zero exit. Run through the CLI's main in this
process (a process of its own: 0.7-0.9 s of CPU each; test_cli runs the entry point from the shell)."""
import pytest

from qsynth.cli import main


@pytest.mark.parametrize("argv,needle", [
    (["isa", "check", "--isa", "arm"], "'arm' is not one of 'neon', 'avx2', 'avx512', 'amx'"),
    (["isa", "check", "--isa", "neon", "--samples", "0"], "must be a positive integer"),
    (["isa", "check", "--isa", "neon", "--instruction", "uadalp,frob"], "unknown neon instruction(s) frob; accepted:"),
    (["isa", "list", "--isa", "x87"], "'x87' is not one of"),
])
def test_bad_input(argv, needle, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1


def test_check_reports_json_rows_for_every_form(capsys):
    import json
    status = main(["isa", "check", "--isa", "neon", "--instruction", "uadalp,cnt", "--samples", "64", "--json"])
    out, err = capsys.readouterr()
    assert status == 0, err
    rows = json.loads(out)
    assert {r["instruction"] for r in rows} == {"uadalp", "cnt"}
    assert all(r["status"] == "passed" and r["samples"] >= 64 and r["mismatches"] == 0 for r in rows)
