"""The reduction sketch: a tree of levels over the live registers.

A *pair* level applies one combinator to every consecutive pair of live registers (halving them);
an *each* level applies one combinator to every live register. As in the CGO 2020 paper there is one
opcode choice per level, shared by all its applications; here a combinator may also be a short
straight-line program (length > 1), which x86 needs where NEON has a single ``addp``: two
shuffles and an add. Lane widths are free to widen between levels.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import z3

from sketches.linear import LinearSketch
from sketches.program import Builder, Program


@dataclass(frozen=True)
class Level:
    kind: str        # "pair" | "each"
    length: int      # instructions per application


def shapes(n_inputs: int, n_outputs: int, max_each: int = 1, max_length: int = 1):
    """Candidate level sequences with their instruction counts, cheapest first."""
    pairs = (n_inputs // n_outputs).bit_length() - 1
    if n_outputs << pairs != n_inputs:
        raise ValueError(f"cannot reduce {n_inputs} registers to {n_outputs} by pairing")
    out = []
    for n_each in range(max_each + 1):
        for where in itertools.combinations(range(pairs + n_each), n_each):
            kinds = ["each" if i in where else "pair" for i in range(pairs + n_each)]
            for lengths in itertools.product(range(1, max_length + 1), repeat=len(kinds)):
                levels = tuple(Level(k, n) for k, n in zip(kinds, lengths))
                out.append((cost(levels, n_inputs), levels))
    out.sort(key=lambda c: (c[0], len(c[1])))
    return out


def cost(levels, n_inputs: int) -> int:
    live, total = n_inputs, 0
    for lv in levels:
        if lv.kind == "pair":
            live //= 2
        total += live * lv.length
    return total


class TreeSketch:
    """Levels over ``n_inputs`` registers of ``bits`` bits each, all registers of one width but the
    outputs, of ``out_bits`` (default ``bits``): the last level may widen (a NEON D tile's row sums
    into a Q register)."""

    def __init__(self, isa, pair_ops, each_ops, n_inputs: int, bits: int, levels, out_bits: int | None = None):
        self.isa, self.n_inputs, self.bits, self.levels = isa, n_inputs, bits, levels
        self.out_bits = out_bits or bits
        self.level_sketches = [
            LinearSketch(isa, pair_ops if lv.kind == "pair" else each_ops, [bits] * (2 if lv.kind == "pair" else 1),
                         lv.length, tag=f"l{i}_") for i, lv in enumerate(levels)]

    def _widths(self):
        """Output width of every level."""
        return [self.bits] * (len(self.levels) - 1) + [self.out_bits]

    def well_formed(self):
        cs = []
        for sk, width in zip(self.level_sketches, self._widths()):
            cs += sk.well_formed() + sk.output_widths([width])
        return cs

    def output_widths(self, bits):
        return [] if all(b == self.out_bits for b in bits) else [False]

    def symbolic_outputs(self, inputs):
        regs = list(inputs)
        for lv, sk, width in zip(self.levels, self.level_sketches, self._widths()):
            groups = [regs[i:i + 2] for i in range(0, len(regs), 2)] if lv.kind == "pair" else [[r] for r in regs]
            # a level that cannot produce the width is ruled out by well_formed; any value will do
            regs = [sk.symbolic_outputs(g)[0].get(width, z3.BitVecVal(0, width)) for g in groups]
        return [{self.out_bits: r} for r in regs]

    def cycle_terms(self, figures):
        """Every register of a level is ready at once, so latencies add up level by level; the
        issue bound counts each level's combinator once per application."""
        critical, issue, live = 0, 0, self.n_inputs
        for lv, sk in zip(self.levels, self.level_sketches):
            live = live // 2 if lv.kind == "pair" else live
            c, i = sk.cycle_terms(figures)
            critical, issue = critical + c, issue + i * live
        return critical, issue

    def decode(self, model, input_names) -> Program:
        builder = Builder(self.isa.name, input_names, (self.bits,) * self.n_inputs)
        combinators = [sk.decode(model, [f"x{j}" for j in range(len(sk.input_bits))]) for sk in self.level_sketches]
        regs = list(range(self.n_inputs))
        for lv, prog in zip(self.levels, combinators):
            groups = [regs[i:i + 2] for i in range(0, len(regs), 2)] if lv.kind == "pair" else [[r] for r in regs]
            regs = [builder.inline(prog, g)[0] for g in groups]
        return builder.program(regs)
