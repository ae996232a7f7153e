"""Proof obligations and their discharge. "unknown" is never "proved".

Each obligation records what was proved, by which method (``z3``, ``linear-forms``, ``definition``),
with which solver version, and how long it took, so a cache entry carries its own evidence.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import bitwuzla
import z3

from isa_specs.lanes import Z3
from isa_specs.linear_forms import LINEAR, Unknown, lanes_equal
from isa_specs.ranges import linear_inputs, sign_cases

SOLVER = f"z3 {z3.get_version_string()}"
SECOND_SOLVER = f"bitwuzla {bitwuzla.version()}"


@dataclass
class Obligation:
    name: str
    method: str
    result: str            # proved | refuted | unknown
    seconds: float
    solver: str = ""
    detail: str = ""

    def to_json(self) -> dict:
        return asdict(self)


def z3_query(name: str, claim_negation, assumptions, deadline: float):
    """Prove ``¬claim_negation`` under ``assumptions``; returns (Obligation, model or None)."""
    solver = z3.SolverFor("QF_BV")
    solver.set("timeout", max(1, int((deadline - time.monotonic()) * 1000)))
    solver.add(*assumptions)
    solver.add(claim_negation)
    t0 = time.monotonic()
    result = solver.check()
    seconds = round(time.monotonic() - t0, 4)
    if result == z3.unsat:
        return Obligation(name, "z3", "proved", seconds, SOLVER), None
    if result == z3.sat:
        return Obligation(name, "z3", "refuted", seconds, SOLVER), solver.model()
    return Obligation(name, "z3", "unknown", seconds, SOLVER, detail=solver.reason_unknown()), None


def bitwuzla_query(name: str, claim_negation, assumptions, deadline: float):
    """``z3_query``'s question put to Bitwuzla, a solver that shares no code with Z3, as SMT-LIB 2: a
    second opinion where Z3 answers unknown (its bit-blasting decides some queries Z3 cannot in
    minutes). Returns (Obligation, None): a refutation carries no counterexample."""
    script = z3.SolverFor("QF_BV")
    script.add(*assumptions, claim_negation)
    options = bitwuzla.Options()
    options.set(bitwuzla.Option.TIME_LIMIT_PER, max(1, int((deadline - time.monotonic()) * 1000)))
    parser = bitwuzla.Parser(bitwuzla.TermManager(), options)
    t0 = time.monotonic()
    parser.parse("(set-logic QF_BV)\n" + script.to_smt2(), True, False)
    result = parser.bitwuzla().check_sat()
    seconds = round(time.monotonic() - t0, 4)
    verdict = {bitwuzla.Result.UNSAT: "proved", bitwuzla.Result.SAT: "refuted"}.get(result, "unknown")
    return Obligation(name, "bitwuzla", verdict, seconds, SECOND_SOLVER), None


def prove_equal(problem, program, deadline: float, query=z3_query):
    """For all inputs satisfying the precondition, program outputs equal the spec outputs, asked of
    ``query`` (``z3_query`` or ``bitwuzla_query``). Returns (Obligation, counterexample input values
    or None)."""
    xs = problem.z3_inputs()
    got = problem.run(Z3, program, xs)
    want = problem.spec(Z3, xs)
    if not got or [g.size() for g in got] != [w.size() for w in want]:   # z3.Or([]) is false: no proof
        return Obligation(f"{problem.name}: program = spec", "definition", "refuted", 0.0,
                          detail=f"outputs of {[g.size() for g in got]} bits, spec {[w.size() for w in want]}"), None
    pre = [problem.pre(Z3, xs)] if problem.pre else []
    differ = [g != w for g, w in zip(got, want)]
    claim_negation = differ[0] if len(differ) == 1 else z3.Or(differ)     # SMT-LIB has no one-argument or
    ob, model = query(f"{problem.name}: program = spec", claim_negation, pre, deadline)
    if model is None:
        return ob, None
    return ob, [model.eval(x, model_completion=True).as_long() for x in xs]


def linear_prover(problem, ranges, constants, out_lane_bits: list[int], split: tuple[int, ...] = ()):
    """``fast_prove`` for reduction-like stages: program and spec have the same linear forms lane
    for lane (mod 2**w), so they are equal on every input within the ranges. ``split``: inputs whose
    lanes are taken case by case, by sign (``ranges.sign_cases``): the proof holds in every case."""
    def equal(program, case) -> bool:
        xs = linear_inputs(problem.input_names, problem.input_bits, ranges, constants, case)
        got = problem.run(LINEAR, program, xs)
        want = problem.spec(LINEAR, xs)
        return len(got) == len(want) == len(out_lane_bits) and all(
            lanes_equal(g, w, lb) for g, w, lb in zip(got, want, out_lane_bits))

    cases = sign_cases(problem.input_bits, ranges, list(split)) if split else [None]

    def prove(program):
        t0 = time.monotonic()
        try:
            ok = all(equal(program, case) for case in cases)
        except Unknown:
            return None
        if not ok:
            return None
        how = f", {len(cases)} sign cases" if split else ""
        return Obligation(f"{problem.name}: program = spec (no lane overflow{how})", "linear-forms", "proved",
                          round(time.monotonic() - t0, 4))
    return prove

