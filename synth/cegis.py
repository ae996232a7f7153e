"""Counterexample-guided inductive synthesis with Z3, and minimisation by length or estimated cycles.

A ``Problem`` is one stage of a kernel: inputs, a specification and a precondition, written once
over the lane algebra. ``cegis`` solves

    ∃ holes. ∀ x. pre(x) ⇒ sketch[holes](x) = spec(x)

by alternating a synthesis query over a finite set of examples with a verification of the
candidate (cheap random testing first, then a sound proof). ``minimise`` tries sketch lengths in
increasing order; each length that comes back ``unsat`` is evidence of minimality: no program of
that length exists even for the finite example set.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import z3

from isa_specs.isa import ISA
from isa_specs.lanes import NUMPY, Z3
from sketches.program import IllTyped, Program
from synth.cost_model import SCALE
from synth.proof import Obligation, prove_equal

log = logging.getLogger("qsynth.cegis")
LATENCY_SLACK = 1     # lengths beyond the shortest searched for a cheaper program under --cost latency


@dataclass
class Problem:
    """One synthesis stage: ``spec(B, inputs) -> outputs`` holds when ``pre(B, inputs)``.

    ``sample(rng, n)`` draws ``n`` inputs satisfying ``pre`` (one uint8 array per input);
    ``fast_prove(program)`` is an optional sound prover tried before Z3 (it returns an
    ``Obligation`` or ``None`` when it cannot decide). ``observe(B, outputs)``, when set, maps the
    program's outputs (of ``output_bits``) to what the spec describes: a *relational* stage such as
    "the lanes of acc' sum to sum(acc) + a·b", where the layout of acc' is left to the synthesizer.
    """
    name: str
    isa: ISA
    input_names: list[str]
    input_bits: list[int]
    output_bits: list[int]
    spec: Callable
    sample: Callable
    pre: Callable | None = None
    fast_prove: Callable | None = None
    observe: Callable | None = None
    ranges: list | None = None           # per-input LaneRange (None: any bits), when described so
    constants: dict = field(default_factory=dict)   # input index -> fixed value

    def run(self, B, program, inputs):
        """The program's outputs as the spec sees them; ``IllTyped`` unless the program returns the
        stage's outputs, as many and as wide."""
        if program.output_bits(self.isa) != list(self.output_bits):
            raise IllTyped(f"{self.name}: the program returns {program.output_bits(self.isa)} bits, "
                           f"the stage {list(self.output_bits)}")
        outs = program.run(B, self.isa, inputs)
        return self.observe(B, outs) if self.observe else outs

    def z3_inputs(self):
        return [z3.BitVec(n, b) for n, b in zip(self.input_names, self.input_bits)]

    def numpy_inputs(self, arrays):
        return [NUMPY.from_bytes(a, b) for a, b in zip(arrays, self.input_bits)]


@dataclass
class Attempt:
    """The outcome of CEGIS on one sketch."""
    status: str                      # found | unsat | timeout | unknown
    program: Program | None = None
    iterations: int = 0
    examples: int = 0
    synth_seconds: float = 0.0
    verify_seconds: float = 0.0
    obligation: Obligation | None = None
    detail: dict = field(default_factory=dict)


def _values(arrays, row):
    return [int.from_bytes(a[row].tobytes(), "little") for a in arrays]


def mismatch_row(problem: Problem, program: Program, arrays) -> int | None:
    """First sample row where program and spec differ, or None."""
    n = arrays[0].shape[0]
    ins = problem.numpy_inputs(arrays)
    got = problem.run(NUMPY, program, ins)
    want = problem.spec(NUMPY, ins)
    bad = np.zeros(n, bool)
    for g, w in zip(got, want):
        bad |= np.any(NUMPY.to_bytes(g, n) != NUMPY.to_bytes(w, n), axis=1)
    return int(np.argmax(bad)) if bad.any() else None


def cegis(problem: Problem, sketch, deadline: float, rng: np.random.Generator, n_init: int = 2,
          n_test: int = 256, constraints=()) -> Attempt:
    """``constraints`` restrict the holes further (a cost bound)."""
    att = Attempt("unknown")
    solver = z3.SolverFor("QF_BV")
    solver.add(sketch.well_formed())
    solver.add(sketch.output_widths(problem.output_bits))
    solver.add(list(constraints))

    def add_example(values):
        consts = [z3.BitVecVal(v, b) for v, b in zip(values, problem.input_bits)]
        want = problem.spec(Z3, consts)
        got = [reg[bits] for reg, bits in zip(sketch.symbolic_outputs(consts), problem.output_bits)]
        if problem.observe:
            got = problem.observe(Z3, got)
        for g, w in zip(got, want):
            solver.add(g == z3.simplify(w))
        att.examples += 1

    init = problem.sample(rng, n_init)
    for row in range(n_init):
        add_example(_values(init, row))
    while True:
        att.iterations += 1
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            att.status = "timeout"
            return att
        solver.set("timeout", max(1, int(remaining * 1000)))
        t0 = time.monotonic()
        result = solver.check()
        att.synth_seconds += time.monotonic() - t0
        if result == z3.unsat:
            att.status = "unsat"
            return att
        if result != z3.sat:
            att.status = "timeout"
            return att
        program = sketch.decode(solver.model(), problem.input_names)
        t0 = time.monotonic()
        tests = problem.sample(rng, n_test)
        row = mismatch_row(problem, program, tests)
        if row is not None:                       # cheap counterexample
            att.verify_seconds += time.monotonic() - t0
            add_example(_values(tests, row))
            continue
        obligation = problem.fast_prove(program) if problem.fast_prove else None
        if obligation is None:
            obligation, cex = prove_equal(problem, program, deadline)
            if cex is not None:
                att.verify_seconds += time.monotonic() - t0
                add_example(cex)
                continue
        att.verify_seconds += time.monotonic() - t0
        att.obligation = obligation
        if obligation.result != "proved":
            att.status = "timeout"
            return att
        att.status, att.program = "found", program
        return att


def minimise(problem: Problem, make_sketch: Callable[[int], object], lengths, deadline: float,
             rng: np.random.Generator, cycles=None) -> tuple[Attempt | None, list[dict]]:
    """Shortest length in ``lengths`` with a proved program; evidence lists the lengths ruled out.

    With a ``cycles`` model (``synth.cost_model.Cycles``) the search goes on from the shortest
    program: at that length and ``LATENCY_SLACK`` longer ones, CEGIS is asked for a program whose
    estimate is below the best so far, until that is unsat (evidence: no cheaper program of that
    length) or time runs out (the best proved program is kept, the evidence says "timeout")."""
    evidence, best, best_length = [], None, None
    for length in lengths:
        if best is not None and length > best_length + LATENCY_SLACK:
            break
        while True:
            sketch = make_sketch(length)
            below = None if best is None else cycles.of(best.program)
            bound = () if below is None else (z3.ULT(cycles.symbolic(sketch), below),)
            att = cegis(problem, sketch, deadline, rng, constraints=bound)
            evidence.append({"stage": problem.name, "length": length, "status": att.status,
                             "iterations": att.iterations, "examples": att.examples,
                             "synth_seconds": round(att.synth_seconds, 3), "verify_seconds": round(att.verify_seconds, 3),
                             **({} if below is None else {"cycles_below": below / SCALE})})
            log.info("%s", evidence[-1])
            if att.status != "found":
                break
            if cycles is None:                  # length: the first program found is the answer
                return att, evidence
            best, best_length = att, length
        if time.monotonic() >= deadline:
            break
    return best, evidence
