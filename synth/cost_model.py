"""Estimated cycles of a straight-line program, concretely and over a sketch's holes.

The estimate is max(critical-path latency, issue bound = sum of reciprocal throughputs) on one
micro-architecture, from the figures in ``isa_specs/cost_tables`` (LLVM's scheduling models).
``--cost latency`` minimises it: CEGIS is asked for a program whose *symbolic* estimate is below
the best found so far, so the same formula must hold on a decoded program and on the holes. Costs
are integers in hundredths of a cycle (every figure in the tables is a multiple of 0.01), so the
symbolic side is bit-vector arithmetic like the rest of the synthesis query.
"""
from __future__ import annotations

from dataclasses import dataclass


from isa_specs import costs
from isa_specs.costs import SCALE, bv_max
from sketches.program import Program



@dataclass(frozen=True)
class Cycles:
    isa_name: str
    uarch: str

    @staticmethod
    def default(isa_name: str) -> "Cycles":
        """The ISA's first micro-architecture: the one ``--cost latency`` minimises for. Raises
        ``costs.Unavailable`` up front when its model lacks a figure for any form of the ISA."""
        from isa_specs import get_isa
        model = Cycles(isa_name, costs.UARCHS[isa_name][0])
        for form_id in get_isa(isa_name).forms:
            model.figures(form_id)
        return model

    def figures(self, form_id: str) -> tuple[int, int]:
        """(latency, reciprocal throughput) in cost units; register views the compiler emits no
        instruction for cost nothing. Raises ``costs.Unavailable`` when the model has no figure."""
        if costs.emits_nothing(self.isa_name, form_id, self.uarch):
            return 0, 0
        c = costs.cost(self.isa_name, form_id, self.uarch)
        return round(c.latency * SCALE), round(c.rthroughput * SCALE)

    def of(self, program: Program) -> int:
        ready, issue = [0] * len(program.inputs), 0
        for ins in program.body:
            latency, throughput = self.figures(ins.op.form_id)
            ready.append(max((ready[a] for a in ins.args), default=0) + latency)
            issue += throughput
        return max(max(ready, default=0), issue)

    def symbolic(self, sketch):
        """The estimate of whatever program the sketch's holes decode to, as a bit-vector."""
        critical, issue = sketch.cycle_terms(self.figures)
        return bv_max(critical, issue)
