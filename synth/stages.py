"""Staged kernels: synthesize every stage, inline them into one program, prove the whole.

The kernel proof is compositional: each stage program is proved equal to its stage spec under the
stage precondition (Z3 or linear forms); then the kernel with every stage replaced by its spec is
evaluated on the linear-form backend (bit operations and popcounts as uninterpreted atoms) and
compared lane by lane with the kernel reference, checking at every stage use that the values
flowing in satisfy that stage's lane ranges.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from isa_specs.lanes import NUMPY
from sketches.program import Builder, IllTyped, Program
from synth.cegis import Problem, minimise, mismatch_row
from isa_specs.linear_forms import LINEAR, Unknown, _signed, _single, _unsigned, lanes_equal
from synth.proof import Obligation, prove_equal
from isa_specs.ranges import LaneRange, linear_inputs, sample


@dataclass
class Stage:
    problem: Problem
    make_sketch: Callable[[int], object]
    sizes: range                          # sketch sizes to try, cheapest first
    out_ranges: list[LaneRange] | None = None
    in_ranges: list[LaneRange | None] = field(default_factory=list)


@dataclass(frozen=True)
class StageUse:
    stage: str
    inputs: list[str]
    outputs: list[str]


class SynthesisFailed(RuntimeError):
    """No proved program was found for a stage within the sketch sizes and the time limit."""


def prove_stage(problem, program, deadline: float, tests: int = 64) -> Obligation:
    """The sound fast prover when it decides, else Z3; an ill-typed program, or one that differs
    from the spec on one of ``tests`` random inputs, is refuted at once."""
    try:
        inputs = problem.sample(np.random.default_rng(0), tests)
        row = mismatch_row(problem, program, inputs)
        if row is not None:
            return Obligation(f"{problem.name}: program = spec", "testing", "refuted", 0.0,
                              detail=f"differs on random input {row} of seed 0")
        obligation = problem.fast_prove(program) if problem.fast_prove else None
        return obligation if obligation is not None else prove_equal(problem, program, deadline)[0]
    except IllTyped as e:
        return Obligation(f"{problem.name}: program = spec", "type check", "refuted", 0.0, detail=str(e))


def synthesize_stage(stage: Stage, deadline: float, rng, cycles=None) -> dict:
    """The stage's shortest proved program; with a ``cycles`` model, the cheapest one found."""
    t0 = time.monotonic()
    sketch = stage.make_sketch(max(stage.sizes))
    if hasattr(sketch, "solve"):         # a sketch with its own search (chain, composite)
        program, evidence = sketch.solve(stage.problem, deadline, rng, cycles)
        obligation = prove_stage(stage.problem, program, deadline) if program else None
        if obligation is None or obligation.result != "proved":
            raise SynthesisFailed(f"stage {stage.problem.name!r}: no proved program from the "
                                  f"{type(sketch).__name__} sketch")
        return {"program": program, "obligations": [obligation], "evidence": evidence,
                "synth_seconds": sum(e.get("synth_seconds", 0) for e in evidence), "verify_seconds": obligation.seconds,
                "wall_seconds": time.monotonic() - t0}
    att, evidence = minimise(stage.problem, stage.make_sketch, stage.sizes, deadline, rng, cycles)
    if att is None:
        last = evidence[-1]["status"] if evidence else "no sketch tried"
        reason = "time limit reached" if time.monotonic() >= deadline or last == "timeout" else "no sketch size worked"
        raise SynthesisFailed(f"stage {stage.problem.name!r}: {reason} (tried {len(evidence)} sketch sizes)")
    return {"program": att.program, "obligations": [att.obligation], "evidence": evidence,
            "synth_seconds": sum(e["synth_seconds"] for e in evidence),
            "verify_seconds": sum(e["verify_seconds"] for e in evidence), "wall_seconds": time.monotonic() - t0}


@dataclass
class Composite:
    """A sketch for a stage too long for one CEGIS query (AVX2's 7-instruction nibble-table popcount
    stalled at length 5): the stage is split into parts, each synthesized and minimised on its own,
    and wired together by ``uses`` over the stage's input names. The assembled program is then
    proved against the *stage's* spec, so the split itself is checked, never assumed."""
    parts: dict[str, Stage]
    uses: list[StageUse]
    outputs: list[str]

    def solve(self, problem: Problem, deadline: float, rng, cycles=None):
        programs, evidence = {}, []
        for name, part in self.parts.items():
            result = synthesize_stage(part, deadline, rng, cycles)
            programs[name] = result["program"]
            evidence += [dict(e, stage=f"{problem.name}.{e['stage']}") for e in result["evidence"]]
        return inline(problem.isa.name, problem.input_names, problem.input_bits, self.uses, programs,
                      self.outputs), evidence


def inline(isa: str, names: list[str], bits: list[int], uses: list[StageUse], programs: dict[str, Program],
           outputs: list[str]) -> Program:
    builder = Builder(isa, names, bits)
    reg = {n: i for i, n in enumerate(names)}
    for use in uses:
        outs = builder.inline(programs[use.stage], [reg[n] for n in use.inputs])
        reg.update(zip(use.outputs, outs))
    return builder.program([reg[n] for n in outputs])


def _within(value, r: LaneRange) -> bool:
    for lane in LINEAR.lanes(value, r.lane_bits):
        f = _single(lane)
        v = _signed(f) if r.lo < 0 else _unsigned(f)
        if v.lo < r.lo or v.hi > r.hi:
            return False
    return True


def kernel_inputs(spec, constants: dict):
    """Names, bits, lane ranges and constant positions of a kernel's program inputs."""
    names = [*spec.input_names, *constants]
    bits = [*spec.input_bits, *(b for _, b in constants.values())]
    ranges = [*spec.lane_ranges(), *[None] * len(constants)]
    cidx = {len(spec.input_names) + i: v for i, (v, _) in enumerate(constants.values())}
    return names, bits, ranges, cidx


def check_signature(spec, program: Program, isa, constants: dict) -> None:
    """``IllTyped`` unless the program is well typed and takes the kernel's inputs and constants and
    returns its outputs, as many and as wide."""
    names, bits, _, _ = kernel_inputs(spec, constants)
    if list(program.inputs) != names or list(program.input_bits) != bits:
        raise IllTyped(f"program inputs {list(zip(program.inputs, program.input_bits))}, "
                       f"kernel inputs {list(zip(names, bits))}")
    if program.output_bits(isa) != spec.output_bits:
        raise IllTyped(f"program returns {program.output_bits(isa)} bits, the kernel {spec.output_bits}")


def prove_composition(spec, stages: dict[str, Stage], uses: list[StageUse], outputs: list[str],
                      constants: dict, program: Program, isa) -> Obligation:
    """Kernel = spec on linear forms: first the whole program directly; where the abstraction cannot
    follow it (table lookups), with every stage replaced by its proved spec."""
    t0 = time.monotonic()
    name = "kernel: program = kernel spec"
    names, bits, ranges, cidx = kernel_inputs(spec, constants)
    try:
        check_signature(spec, program, isa, constants)
    except IllTyped as e:
        return Obligation(name, "type check", "refuted", 0.0, detail=str(e))
    try:
        xs = linear_inputs(names, bits, ranges, cidx)
        want = spec.reference(LINEAR, xs[:len(spec.input_names)])
    except Unknown as e:
        return Obligation(name, "linear-forms", "unknown", round(time.monotonic() - t0, 4), detail=str(e))
    try:
        got = program.run(LINEAR, isa, xs)
        if all(lanes_equal(g, w, spec.out_lane_bits) for g, w in zip(got, want)):
            return Obligation(name + " (whole program)", "linear-forms", "proved", round(time.monotonic() - t0, 4))
    except Unknown:
        pass
    name = "kernel: composition of stage specs = kernel spec"
    try:
        env = dict(zip(names, xs))
        for use in uses:
            stage = stages[use.stage]
            if stage.problem.observe:
                raise Unknown(f"stage {use.stage} is relational")
            args = [env[n] for n in use.inputs]
            for arg, r, n in zip(args, stage.in_ranges, use.inputs):
                if r is not None and not _within(arg, r):
                    raise Unknown(f"{n} may leave the range {r} of stage {use.stage}")
            env.update(zip(use.outputs, stage.problem.spec(LINEAR, args)))
        ok = all(lanes_equal(env[o], w, spec.out_lane_bits) for o, w in zip(outputs, want))
    except Unknown as e:
        return Obligation(name, "linear-forms", "unknown", round(time.monotonic() - t0, 4), detail=str(e))
    # differing forms are no refutation (the abstraction is incomplete): not proved, and not "wrong"
    return Obligation(name, "linear-forms", "proved" if ok else "unknown", round(time.monotonic() - t0, 4))


def random_test(spec, program: Program, isa, constants: dict, n: int, seed: int = 0) -> int:
    """Mismatches of the assembled program against the reference on ``n`` random inputs (numpy)."""
    rng = np.random.default_rng(seed)
    names, bits, ranges, cidx = kernel_inputs(spec, constants)
    arrays = sample(bits, ranges, cidx, rng, n)
    ins = [NUMPY.from_bytes(a, b) for a, b in zip(arrays, bits)]
    check_signature(spec, program, isa, constants)
    got = program.run(NUMPY, isa, ins)
    want = spec.reference(NUMPY, ins[:len(spec.input_names)])
    return int(sum(np.any(NUMPY.to_bytes(g, n) != NUMPY.to_bytes(w, n), axis=1).sum() for g, w in zip(got, want)))
