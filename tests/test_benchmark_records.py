"""Issue 48's target, 0 figures in benchmarks/ without a record, for the tables whose figures do not
depend on the host that ran them (llvm-mca's estimates of AArch64 code run under qemu, and the synthesis
sweep's table of the kernel cache): each committed JSON holds the record of the run that made it
(tvm_integration/bench/provenance.py), and its committed table is its writer's table of that JSON, the
record's line included, so that no figure there is edited by hand or left from another run."""
import importlib
import json
from pathlib import Path

import pytest

from tvm_integration.bench import provenance

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
MCA = {"layers_neon_int8": "mca_neon_int8_layers", "layers_bitserial_neon": "mca_bitserial_layers",
       "layers_depthwise_neon": "mca_neon_depthwise"}      # table: the script that writes it
FINISHED = {"commit", "command", "host", "threads", "load_before", "load_after", "date", "seconds"}


@pytest.mark.parametrize("name", sorted(MCA))
def test_an_mca_table_is_its_json_with_the_record_of_its_run(name):
    data = json.loads((BENCH / f"{name}.json").read_text())
    assert FINISHED <= set(data.get("run", {})), f"{name}.json has no run record"
    assert data["run"]["command"].startswith(f"python scripts/{MCA[name]}.py ")
    md = (BENCH / f"{name}.md").read_text()
    assert importlib.import_module(f"scripts.{MCA[name]}").table(data) == md
    assert f"- Run: {provenance.line(data['run'])}." in md


def test_every_synthesis_row_carries_the_record_of_the_sweep_that_listed_it():
    from qsynth.sweep import markdown
    data = json.loads((BENCH / "synthesis.json").read_text())
    assert FINISHED <= set(data["run"]) and data["run"]["command"].startswith("qsynth sweep")
    assert all(FINISHED <= set(k.get("run", {})) for k in data["kernels"])
    assert markdown(data["run"], data["kernels"]) == (BENCH / "synthesis.md").read_text()
    assert f"Last run: {provenance.line(data['run'])}" in (BENCH / "README.md").read_text()
