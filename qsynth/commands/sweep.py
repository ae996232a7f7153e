"""``qsynth sweep``: offline synthesis of every configuration, filling the kernel cache."""
from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Literal, Optional

import typer

from qsynth.commands.common import ISAS, JSON_HELP, UsageError, positive, positive_seconds, print_json


def sweep(isa: str = typer.Option("all", help="all, or a comma-separated list of neon, avx2, avx512, amx"),
          configs: str = typer.Option("all", help="all, or comma-separated substrings of kernel names (e.g. a1w1,int8)"),
          jobs: int = typer.Option(2, "-j", "--jobs", callback=positive, help="local worker processes (ray: processes re-proving the cached kernels)"),
          timeout: float = typer.Option(900.0, callback=positive_seconds, help="seconds per kernel"),
          out: Path = typer.Option(Path("benchmarks"), help="where synthesis.json and synthesis.md go"),
          executor: Literal["local", "ray"] = typer.Option("local", help="local worker processes, or jobs on a Ray "
                                                           "cluster (pip install 'qsynth[cluster]')"),
          address: Optional[str] = typer.Option(None, help="ray: the cluster (auto, HOST:PORT or ray://HOST:10001; "
                                                "default $RAY_ADDRESS, else a Ray instance started here)"),
          json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> int:
    """Synthesize every configuration of the chosen ISAs into the kernel cache and merge the rows of
    the kernels swept into OUT/synthesis.{json,md} (the other rows stay); exit 1 if any kernel is not
    proved. Kernels already in the cache, and the cache's other kernels of these ISAs, are loaded,
    not redone; on Ray, a worker's result is re-proved here before it is stored."""
    from qsynth.sweep import sweep as run_sweep
    isas = list(ISAS) if isa == "all" else isa.split(",")
    unknown = sorted(set(isas) - set(ISAS))
    if unknown:
        raise UsageError(f"unknown ISA(s) {', '.join(unknown)}; accepted: all, {', '.join(ISAS)}")
    wanted = None if configs == "all" else configs.split(",")
    if address is not None and executor != "ray":
        raise UsageError("--address is for --executor ray")
    from qsynth.cluster import ClusterUnavailable
    try:
        rows = run_sweep(isas, jobs, timeout, out, wanted, executor, address,
                         command=shlex.join(["qsynth", *sys.argv[1:]]))
    except ClusterUnavailable as e:
        print(f"qsynth: cluster: {e}", file=sys.stderr)
        return 1
    bad = [r for r in rows if r["status"] != "proved"]
    if json:
        print_json(rows)
    else:
        print(f"{len(rows)} kernels: {len(rows) - len(bad)} proved, {len(bad)} not; see {out}/synthesis.md")
    return 1 if bad else 0


def register(app: typer.Typer) -> None:
    app.command("sweep", epilog="Example: qsynth sweep --isa neon --configs A1W1,A2W1 --executor ray --address auto")(sweep)
