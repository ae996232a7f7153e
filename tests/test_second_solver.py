"""Bitwuzla as the second opinion of the mutation suite (synth/proof.py's bitwuzla_query): it must agree
with Z3 on the cached programs and their refused mutants, and ``classify`` must turn to it when plain
Z3 answers unknown (two NEON reduction mutants took Z3 past 600 s; Bitwuzla proves them in ~200 s,
scripts/mutation_suite.py)."""
from __future__ import annotations

import time

import pytest

from isa_specs import get_isa
from sketches.program import Program
from synth import cache, mutants, proof
from synth.kernel import family, spec_from_key

pytestmark = pytest.mark.solver
KERNEL = "bitserial_a1w1_hybrid_acc_8x64_neon"  # stages both solvers decide in ms; two of its mutants are equivalent


def _entry() -> dict:
    return next(e for e in map(cache.read, cache.entries()) if e["name"] == KERNEL)


def _stages(entry: dict) -> dict:
    spec = spec_from_key(entry["spec"])
    return {s.problem.name: s.problem for s in family(spec).stages(spec, get_isa(spec.isa))}


def test_bitwuzla_proves_the_cached_stages_and_refutes_an_edited_one():
    entry = _entry()
    problems = _stages(entry)
    for name, stage in entry["stages"].items():
        ob, _ = proof.prove_equal(problems[name], Program.from_json(stage["program"]), time.monotonic() + 120,
                                  proof.bitwuzla_query)
        assert (ob.method, ob.result) == ("bitwuzla", "proved"), ob
    wrong = next(m for m in mutants.mutants(entry) if m.kind == "dropped instruction")
    [(name, stage)] = [(n, s) for n, s in wrong.entry["stages"].items() if s != entry["stages"][n]]
    ob, _ = proof.prove_equal(problems[name], Program.from_json(stage["program"]), time.monotonic() + 120,
                              proof.bitwuzla_query)
    assert ob.result == "refuted", ob


def test_classify_asks_bitwuzla_when_z3_answers_unknown(tmp_path, monkeypatch):
    entry = _entry()

    def z3_gives_up(problem, program, deadline, query=proof.z3_query):
        if query is proof.z3_query:
            return proof.Obligation("z3 gave up", "z3", "unknown", 0.0), None
        return proof.prove_equal(problem, program, deadline, query)

    monkeypatch.setattr(mutants, "prove_equal", z3_gives_up)
    edits = [m for m in mutants.mutants(entry) if m.kind in ("opcode", "operand swap")]  # where its equivalents are
    rows = [mutants.classify(m, entry, tmp_path, solver_seconds=120) for m in edits]
    equivalent = [r for r in rows if r["outcome"] == "equivalent"]
    assert len(equivalent) == 2 and all("bitwuzla" in r["reason"] for r in equivalent), rows
    assert {r["outcome"] for r in rows} <= {"refused", "equivalent"}, rows
