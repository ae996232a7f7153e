"""What a benchmark measured and under which conditions, recorded the same way by every benchmark script
(``record`` before, ``finished`` after) and printed the same way by every table (``line``), so that each
published figure can be traced to, and rerun from, its record (scripts/reproduce.py)."""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

from isa_specs import host

ROOT = Path(__file__).resolve().parents[2]


def commit(root: Path = ROOT) -> str:
    """``git rev-parse HEAD`` of ``root``, with ``+dirty`` when tracked files differ from it (the figures
    then come from uncommitted code); ``unknown`` outside a git checkout."""
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True)
    if head.returncode:
        return "unknown"
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root, capture_output=True,
                           text=True).stdout.strip()
    return head.stdout.strip() + ("+dirty" if dirty else "")


def command(argv: list[str] | None = None) -> str:
    """The command line as typed from the checkout's root: every argument, the script's path relative, and
    ``QSYNTH_HOST_FEATURES=...`` ahead of it when set (a run held to fewer features than the CPU shows)."""
    script, *args = sys.argv if argv is None else argv
    path = Path(script).resolve()
    shown = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else script
    held = os.environ.get(host.FEATURES_VARIABLE)
    return (f"{host.FEATURES_VARIABLE}={shlex.quote(held)} " if held else "") + shlex.join(["python", shown, *args])


def _load() -> list[float]:
    return [round(v, 2) for v in os.getloadavg()]


def record(threads: int | list[int] | None) -> dict:
    """A run's record as it starts: commit, command, host (CPU model name, LLVM's name for its model
    number, the x86 features qsynth sees, logical CPUs), the threads it times with, load average
    (1/5/15 min) and date."""
    m = host.model()
    return {"commit": commit(), "command": command(),
            "host": {"cpu": m.model_name, "uarch": m.uarch, "features": host.x86_features(m),
                     "cpus": os.cpu_count()},
            "threads": threads, "load_before": _load(), "date": datetime.now(timezone.utc).isoformat(timespec="seconds")}


def finished(run: dict) -> dict:
    """``run`` (``record``'s) with the load average after it and its seconds."""
    seconds = (datetime.now(timezone.utc) - datetime.fromisoformat(run["date"])).total_seconds()
    return run | {"load_after": _load(), "seconds": round(seconds)}


def line(run: dict) -> str:
    """One line of markdown for a finished record."""
    sha = run["commit"].removesuffix("+dirty")
    tree = "with uncommitted changes" if run["commit"].endswith("+dirty") else "clean"
    h = run["host"]
    threads = run["threads"] if not isinstance(run["threads"], list) else "/".join(map(str, run["threads"]))
    return (f"`{run['command']}` at {sha[:10]} (work tree {tree}), {run['date']}, {run['seconds']:.0f} s; "
            f"host {h['cpu']} ({h['uarch']} to LLVM; {' '.join(h['features']) or 'no AVX2'}; {h['cpus']} CPUs); "
            f"threads {threads}; load average {' / '.join(map(str, run['load_before']))} before, "
            f"{' / '.join(map(str, run['load_after']))} after")


def described(run: dict) -> str:
    """``line`` of a finished record; of a run from before records, what it kept and its mark
    (``unrecorded``: what the record lacks, where the run was made and why it was not rerun), or, unmarked,
    what it lacks."""
    if "commit" in run:
        return line(run)
    if "load_before" in run:
        load = f"; load average {run['load_before']} before, {run['load_after']} after"
    else:
        load = "" if "unrecorded" in run else "; load not recorded"
    return f"`{run['command']}` ({run.get('unrecorded', 'its commit and full command line not recorded')}{load})"


def runs(data) -> list[dict]:
    """Every run a benchmark JSON holds, in order, each once: each dict with a command line (a record, an
    item of ``runs``, an older file's ``meta``, a row's ``run``)."""
    if isinstance(data, list):
        found = [r for item in data for r in runs(item)]
    elif isinstance(data, dict):
        found = ([data] if isinstance(data.get("command"), str) else []) + [r for v in data.values() for r in runs(v)]
    else:
        return []
    return [r for i, r in enumerate(found) if r not in found[:i]]


def lines(rows: list[dict], label=None, run_of=None) -> list[str]:
    """One markdown item per run behind a table's ``rows``, naming its rows by ``label(row)`` when the
    table mixes runs. A row's run is ``run_of(row)``, by default its ``run`` (a finished record) or, for
    a row from before records, its ``command``."""
    runs: list[tuple[dict, list[str]]] = []
    for row in rows:
        run = run_of(row) if run_of else row.get("run") or {"command": row["command"]}
        names = next((names for r, names in runs if r == run), None)
        if names is None:
            runs.append((run, names := []))
        names.append(label(row) if label else "")
    mixed = label is not None and len(runs) > 1
    return [f"- Run: {described(run)}" + (f": {', '.join(names)}." if mixed else ".") for run, names in runs]
