#!/usr/bin/env python3
"""Rerun one benchmark table's command from its JSON record and print its old and new figures side by side,
so that a published figure can be checked by anyone: the command is the record's (tvm_integration/bench/
provenance.py; the latest run when a table mixes several), run from the checkout's root with its output
sent to a temporary folder (the committed JSON is read, never written).

    python scripts/reproduce.py TABLE [--match REGEX] [--dry-run] [--new FILE]

TABLE names benchmarks/TABLE.json (models_arm, zoo, ...). ``--new FILE`` compares against a JSON written
before instead of rerunning; ``--match`` keeps the figures whose path matches.
"""
from __future__ import annotations

import argparse
import json
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tvm_integration.bench import provenance  # noqa: E402

KEYS = ("model", "name", "layer", "config", "encoding", "core", "threads", "case", "isa")   # what names a row
JSON_OUTPUT = ("scripts/bench_digits.py", "scripts/bench_bitserial_layers.py")     # --json FILE, not --out DIR
SKIPPED = {"run", "runs", "meta", "bench", "seconds", "load_before", "load_after", "by_function", "by_library"}


def latest(data) -> dict:
    """The run to reproduce: the latest with a full record, else the last command recorded."""
    found = provenance.runs(data)
    if not found:
        raise SystemExit("the table records no command to rerun")
    complete = [r for r in found if "commit" in r]
    return max(complete, key=lambda r: r["date"]) if complete else found[-1]


def rerun_command(command: str, old: Path, folder: Path) -> list[str]:
    """``command`` writing into ``folder`` (which holds a copy of ``old``, for runs that merge into it):
    a script run by this Python, or a ``qsynth`` command by this Python's ``qsynth.cli`` (so that it
    runs this checkout's code; ``qsynth sweep`` merges its rows into ``--out``'s synthesis.json)."""
    program, script, *args = shlex.split(command)
    shutil.copy(old, folder / old.name)
    if program == "qsynth":
        return [sys.executable, "-m", "qsynth.cli", script, *without_out(args), "--out", str(folder)]
    if "--json" in args:
        args[args.index("--json") + 1] = str(folder / old.name)
    elif script in JSON_OUTPUT:
        args += ["--json", str(folder / old.name)]
    else:
        args = [*without_out(args), "--out", str(folder)]
    return [sys.executable, script, *args]


def without_out(args: list[str]) -> list[str]:
    """``args`` less its ``--out DIR``."""
    if "--out" not in args:
        return args
    i = args.index("--out")
    return args[:i] + args[i + 2:]


def figures(data, path: str = "") -> dict[str, float]:
    """The JSON's numbers by path; a list of rows is keyed by what names each row (``KEYS``)."""
    out: dict[str, float] = {}
    if isinstance(data, dict):
        for key, value in data.items():
            if key not in SKIPPED:
                out |= figures(value, f"{path}.{key}" if path else key)
    elif isinstance(data, list):
        for i, item in enumerate(data):
            name = "/".join(str(item[k]) for k in KEYS if isinstance(item, dict) and k in item) or str(i)
            out |= figures(item, f"{path}[{name}]")
    elif isinstance(data, (int, float)) and not isinstance(data, bool):
        out[path] = float(data)
    return out


def side_by_side(old, new, match: str | None) -> list[str]:
    """One line per figure both hold: old, new, new / old."""
    a, b = figures(old), figures(new)
    lines = []
    for path in (p for p in a if p in b and (match is None or re.search(match, p))):
        ratio = f"{b[path] / a[path]:.3f}" if a[path] else "-"
        lines.append(f"{path}\t{a[path]:.6g}\t{b[path]:.6g}\t{ratio}")
    return ["figure\told\tnew\tnew/old", *lines]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("table", help="benchmarks/TABLE.json")
    ap.add_argument("--match", help="only the figures whose path matches this regular expression")
    ap.add_argument("--dry-run", action="store_true", help="print the command and exit")
    ap.add_argument("--new", type=Path, help="compare with this JSON instead of rerunning")
    a = ap.parse_args()
    old = ROOT / "benchmarks" / f"{a.table}.json"
    if not old.is_file():
        ap.error(f"no {old}")
    data = json.loads(old.read_text())
    run = latest(data)
    print(f"record: {json.dumps(run)}", flush=True)
    with tempfile.TemporaryDirectory(prefix="qsynth-reproduce-") as tmp:
        new = a.new
        if new is None:
            command = rerun_command(run["command"], old, Path(tmp))
            print(f"rerun: {shlex.join(command)}", flush=True)
            if a.dry_run:
                return 0
            if subprocess.run(command, cwd=ROOT).returncode:
                print("the rerun failed", file=sys.stderr)
                return 1
            new = Path(tmp) / old.name
        print("\n".join(side_by_side(data, json.loads(new.read_text()), a.match)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
