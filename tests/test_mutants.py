"""The mutation suite of issue 18, sampled: for a few cached kernels per ISA, mutants stored with a
recomputed content hash are each refused by the verifier, or shown equivalent by plain Z3. The
full run is ``python scripts/mutation_suite.py`` (totals in ``benchmarks/mutation.md``)."""
from pathlib import Path

import pytest

from synth import cache
from synth.mutants import SUITE, classify, mutants

SAMPLE = 25                  # stage mutants per kernel; every field mutant and exploit is kept
ALWAYS = {"constants", "name", "wiring", "key", "text", "stages", "program", "outputs", "widths", "split-lane exploit"}


def _sample(entry: dict) -> list:
    every = list(mutants(entry))
    kept = [m for m in every if m.kind in ALWAYS]
    rest = [m for m in every if m.kind not in ALWAYS]
    return kept + rest[::max(1, len(rest) // SAMPLE)]


@pytest.mark.solver
@pytest.mark.parametrize("name", SUITE)
def test_every_mutant_is_refused_or_equivalent(name, tmp_path: Path):
    entry = next(e for e in map(cache.read, cache.entries()) if e["name"] == name)
    rows = [classify(m, entry, tmp_path) for m in _sample(entry)]
    wrong = [r for r in rows if r["outcome"] not in ("refused", "equivalent")]
    assert not wrong, wrong
    kinds = {r["kind"] for r in rows if r["outcome"] == "refused"}
    assert {"name", "key", "text", "stages", "outputs", "widths"} <= kinds
    assert entry["constants"] == {} or "constants" in kinds
