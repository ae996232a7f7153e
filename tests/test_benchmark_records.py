"""Issue 48's target, 0 figures in benchmarks/ without a record. Every benchmarks/*.json names the runs
behind its figures, each with its record (tvm_integration/bench/provenance.py) or, for a run from before
records that this host cannot redo, a mark saying what the record lacks, where the run was made and why
it was not rerun (``unrecorded``); a file whose rows come from several runs names each row's run; and
its table (the landing page for lowbit_accuracy.json) prints every run's record or mark. The tables whose
figures do not depend on the host that ran them (llvm-mca's estimates of AArch64 code run under qemu, and
the synthesis sweep's table of the kernel cache) are moreover their writer's table of their JSON, the
record's line included, so that no figure there is edited by hand or left from another run."""
import importlib
import json
from pathlib import Path

import pytest

from qsynth.benchmarks_report import SOURCES
from tvm_integration.bench import provenance

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
MCA = {"layers_neon_int8": "mca_neon_int8_layers", "layers_bitserial_neon": "mca_bitserial_layers",
       "layers_depthwise_neon": "mca_neon_depthwise",
       "layers_depthwise_shufflenet": "mca_neon_depthwise"}      # table: the script that writes it
FINISHED = {"commit", "command", "host", "threads", "load_before", "load_after", "date", "seconds"}
JSONS = sorted(p.stem for p in BENCH.glob("*.json"))


def unrecorded(data) -> list[str]:
    """What in a benchmark JSON has neither a record nor a mark: no run at all, a run with neither, rows
    of which only some name their run, or rows of a file of several runs that none of its runs lists."""
    runs = provenance.runs(data)
    if not runs:
        return ["no run"]
    found = [f"run {r['command']!r}" for r in runs if not FINISHED <= set(r) and not r.get("unrecorded")]
    rows = data if isinstance(data, list) else data.get("rows", [])
    own = [bool(provenance.runs(row)) for row in rows]
    if any(own):
        found += [f"row {i} names no run" for i, o in enumerate(own) if not o]
    elif isinstance(data, dict) and len(data.get("runs", [])) > 1:         # several runs, each listing the models whose rows it made
        listed = {m for run in data["runs"] for m in run["models"]}
        found += [f"row {row['name']} is no run's" for row in rows if row["name"] not in listed]
    return found


@pytest.mark.parametrize("name", JSONS)
def test_every_figure_has_a_record_or_a_mark(name):
    assert unrecorded(json.loads((BENCH / f"{name}.json").read_text())) == []


@pytest.mark.parametrize("name", JSONS)
def test_every_table_prints_the_record_or_mark_of_each_run(name):
    table = BENCH / f"{name}.md"
    pages = ([table] if table.is_file() else []) + ([BENCH / "README.md"] if name in SOURCES else [])
    assert pages, f"{name}.json has no table"
    for page in pages:
        for run in provenance.runs(json.loads((BENCH / f"{name}.json").read_text())):
            assert provenance.described(run) in page.read_text(), f"{page.name} does not print {run['command']!r}"


@pytest.mark.parametrize("name", sorted(MCA))
def test_an_mca_table_is_its_json_with_the_record_of_its_run(name):
    data = json.loads((BENCH / f"{name}.json").read_text())
    assert FINISHED <= set(data.get("run", {})), f"{name}.json has no run record"
    assert data["run"]["command"].startswith(f"python scripts/{MCA[name]}.py ")
    md = (BENCH / f"{name}.md").read_text()
    assert importlib.import_module(f"scripts.{MCA[name]}").table(data) == md
    assert f"- Run: {provenance.line(data['run'])}." in md


# Tables each made whole by their script's ``markdown(data)`` from their JSON, of either host; a script that
# keeps notes written by hand between its markers (TFLite's, the zoo's) reads them back with ``kept_notes``.
RENDERED = {"models": "bench_models", "models_znver3": "bench_models", "models_held_avx2": "bench_models",
            "models_held_avx512bw": "bench_models", "transformers_znver3": "bench_transformers",
            "transformers": "bench_transformers", "zoo": "bench_zoo", "zoo_znver3": "bench_zoo",
            "tflite_models": "bench_tflite", "tflite_models_znver3": "bench_tflite",
            "quantizers_znver3": "check_quantizers"}


@pytest.mark.parametrize("name", sorted(RENDERED))
def test_a_table_is_its_scripts_rendering_of_its_json(name):
    data, table = json.loads((BENCH / f"{name}.json").read_text()), (BENCH / f"{name}.md").read_text()
    script = importlib.import_module(f"scripts.{RENDERED[name]}")
    notes = (script.kept_notes(table),) if hasattr(script, "kept_notes") else ()
    assert script.markdown(data, *notes) == table


def test_every_synthesis_row_carries_the_record_of_the_sweep_that_listed_it():
    from qsynth.sweep import markdown
    data = json.loads((BENCH / "synthesis.json").read_text())
    assert FINISHED <= set(data["run"]) and data["run"]["command"].startswith("qsynth sweep")
    assert all(FINISHED <= set(k.get("run", {})) for k in data["kernels"])
    assert markdown(data["run"], data["kernels"]) == (BENCH / "synthesis.md").read_text()
    assert f"Last run: {provenance.line(data['run'])}" in (BENCH / "README.md").read_text()
