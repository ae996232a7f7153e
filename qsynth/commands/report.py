"""``qsynth report``: ``benchmarks/*.json`` -> ``benchmarks/README.md`` and its figures (the report
itself is qsynth/benchmarks_report.py)."""
from __future__ import annotations

from pathlib import Path

import typer

from qsynth.commands.common import JSON_HELP, UsageError, WorkFailed, print_json


def report(benchmarks: Path = typer.Option(Path("benchmarks"), help="the folder of the JSON files; README.md and "
                                           "figures/ are written there"),
           json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> int:
    """Turn the benchmark JSON files into BENCHMARKS/README.md and its PNG figures (speedup per
    quantization configuration and layer, synthesis time next to the paper's Table 2, kernel % of
    peak per ISA, model latencies, the low-bit accuracy/throughput Pareto front where its data exists)."""
    from qsynth.benchmarks_report import ReportError, write_report
    if not benchmarks.is_dir():
        raise UsageError(f"--benchmarks {benchmarks}: not a folder")
    try:
        written = write_report(benchmarks)
    except ReportError as e:
        raise WorkFailed(str(e)) from e
    if json:
        print_json({"readme": written.readme, "figures": written.figures, "notes": written.notes})
    else:
        print(f"{written.readme}: {len(written.sections)} sections, {len(written.figures)} figures"
              + "".join(f"\n  note: {n}" for n in written.notes))
    return 0


def register(app: typer.Typer) -> None:
    app.command("report", epilog="Example: qsynth report --benchmarks benchmarks")(report)
