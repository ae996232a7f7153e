"""The cycle estimate ``--cost latency`` minimises: the bit-vector formula over a sketch's holes must
give, for every assignment of the holes, the estimate of the program those holes decode to."""
from __future__ import annotations

import time

import numpy as np
import pytest
import z3

from isa_specs import costs, get_isa
from sketches import menus
from sketches.linear import LinearSketch
from sketches.program import Instr, Op, Program
from sketches.tree import Level, TreeSketch
from synth import bitserial
from synth.cost_model import SCALE, Cycles
from synth.spec import BitserialSpec
from synth.stages import synthesize_stage


def _assignments(sketch, count: int):
    """Up to ``count`` distinct well-formed hole assignments (each model blocked once seen)."""
    solver = z3.Solver()
    solver.add(sketch.well_formed())
    holes = [h for sk in getattr(sketch, "level_sketches", [sketch]) for h in [*sk.op, *(a for r in sk.arg for a in r)]]
    while count and solver.check() == z3.sat:
        model = solver.model()
        yield model
        solver.add(z3.Or([h != model.eval(h, model_completion=True) for h in holes]))
        count -= 1


def _check(sketch, isa_name: str, uarch: str, count: int = 40) -> int:
    cycles = Cycles(isa_name, uarch)
    symbolic = cycles.symbolic(sketch)
    seen = 0
    for model in _assignments(sketch, count):
        program = sketch.decode(model, [f"x{i}" for i in range(len(program_inputs(sketch)))])
        assert model.eval(symbolic, model_completion=True).as_long() == cycles.of(program), program.lines()
        seen += 1
    return seen


def program_inputs(sketch):
    return sketch.input_bits if hasattr(sketch, "input_bits") else [sketch.bits] * sketch.n_inputs


def test_linear_sketch_estimate_matches_decoded_programs():
    isa = get_isa("neon")
    sketch = LinearSketch(isa, menus.bitserial("neon", 128)["compute"], [128, 128], 4)
    for uarch in costs.UARCHS["neon"]:
        assert _check(sketch, "neon", uarch) == 40


def test_tree_sketch_estimate_matches_decoded_programs():
    isa = get_isa("avx512")
    menu = menus.bitserial("avx512", 512)
    # 16 registers: the first level's eight applications make the issue bound count
    sketch = TreeSketch(isa, menu["pair"], menu["each"], 16, 512, (Level("pair", 3), Level("pair", 3)))
    assert _check(sketch, "avx512", "icelake-server") == 40


def test_estimate_is_the_longer_of_critical_path_and_issue_bound():
    """and → cnt is a chain of two; with six independent cnts the issue bound dominates."""
    def fig(form):
        c = costs.cost("neon", form, "cortex-a53")
        return round(c.latency * SCALE), round(c.rthroughput * SCALE)
    chain = Program("neon", ("w", "a"), (128, 128), (Instr(Op("and.16b"), (0, 1)), Instr(Op("cnt.16b"), (2,))), (3,))
    (la, ta), (lc, tc) = fig("and.16b"), fig("cnt.16b")
    assert Cycles("neon", "cortex-a53").of(chain) == max(la + lc, ta + tc)
    wide = Program("neon", ("a",), (128,), tuple(Instr(Op("cnt.16b"), (0,)) for _ in range(6)), (1,))
    assert Cycles("neon", "cortex-a53").of(wide) == max(lc, 6 * tc)


def test_latency_cost_proves_no_cheaper_program_exists():
    """NEON A3W3's weight-plane sum: under --cost latency CEGIS keeps asking for a program cheaper
    than the best so far; the result is proved, no dearer than the shortest program, and the
    evidence holds an unsat query for "cheaper than it" at its length and the next."""
    spec = BitserialSpec.for_isa("neon", 3, 3, "unipolar", layout="tile")
    stage = {s.problem.name: s for s in bitserial.stages(spec, get_isa("neon"))}["weights"]
    cycles = Cycles.default("neon")
    shortest = synthesize_stage(stage, time.monotonic() + 120, np.random.default_rng(0))
    cheapest = synthesize_stage(stage, time.monotonic() + 120, np.random.default_rng(0), cycles)
    assert [o.result for o in cheapest["obligations"]] == ["proved"]
    assert len(cheapest["program"]) == len(shortest["program"])
    cost = cycles.of(cheapest["program"])
    assert cost <= cycles.of(shortest["program"])
    ruled_out = [(e["length"], e["status"]) for e in cheapest["evidence"] if e.get("cycles_below") == cost / SCALE]
    n = len(cheapest["program"])
    assert ruled_out == [(n, "unsat"), (n + 1, "unsat")], cheapest["evidence"]


def test_latency_cost_without_figures_is_refused_up_front():
    with pytest.raises(costs.Unavailable, match="tdp"):
        Cycles.default("amx")
