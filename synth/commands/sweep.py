"""``qsynth sweep``: offline synthesis of every configuration, filling the kernel cache."""
from __future__ import annotations

from pathlib import Path

import typer

from synth.commands.common import ISAS, JSON_HELP, UsageError, positive, positive_seconds, print_json


def sweep(isa: str = typer.Option("all", help="all, or a comma-separated list of neon, avx2, avx512, amx"),
          configs: str = typer.Option("all", help="all, or comma-separated substrings of kernel names (e.g. a1w1,int8)"),
          jobs: int = typer.Option(2, "-j", "--jobs", callback=positive, help="worker processes"),
          timeout: float = typer.Option(900.0, callback=positive_seconds, help="seconds per kernel"),
          out: Path = typer.Option(Path("benchmarks"), help="where synthesis.json and synthesis.md go"),
          json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> int:
    """Synthesize every configuration of the chosen ISAs into the kernel cache and write
    OUT/synthesis.{json,md}; exit 1 if any kernel is not proved."""
    from synth.sweep import sweep as run_sweep
    isas = list(ISAS) if isa == "all" else isa.split(",")
    unknown = sorted(set(isas) - set(ISAS))
    if unknown:
        raise UsageError(f"unknown ISA(s) {', '.join(unknown)}; accepted: all, {', '.join(ISAS)}")
    wanted = None if configs == "all" else configs.split(",")
    rows = run_sweep(isas, jobs, timeout, out, wanted)
    bad = [r for r in rows if r["status"] != "proved"]
    if json:
        print_json(rows)
    else:
        print(f"{len(rows)} kernels: {len(rows) - len(bad)} proved, {len(bad)} not; see {out}/synthesis.md")
    return 1 if bad else 0


def register(app: typer.Typer) -> None:
    app.command("sweep", epilog="Example: qsynth sweep --isa neon --configs a1w1,a2w1 -j 2")(sweep)
