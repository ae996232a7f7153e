"""The compute sketch: ``k`` straight-line instructions whose opcodes and operands are holes.

Encoding (a Z3 model of the holes decodes to a ``Program``):
* SSA order: slot ``t`` reads only inputs and earlier slots; the outputs are the last slots, in order.
* Type-directed operand holes: every register has a width class; an operand hole may only pick a
  register whose class is the one the chosen opcode expects there.
* Commutative opcodes take their operands in increasing register order; every slot but the outputs
  is read by a later slot (no dead code).
* Hole bit-widths are ``bit_length(n)``, not ``log2(n)``, so a menu of exactly 2**m entries still fits
  (the prototype's "2**n made every sketch unsat" bug).
"""
from __future__ import annotations

from dataclasses import dataclass

import z3

from isa_specs.instruction import evaluate
from isa_specs.isa import ISA
from isa_specs.lanes import Z3
from sketches.program import Instr, Op, Program
from isa_specs.costs import bv, bv_max


def _bv(name: str, count: int):
    return z3.BitVec(name, max(1, count.bit_length()))


def mux(index, options):
    """``options[index]`` as an If-chain (the last option is the default)."""
    result = options[-1]
    for i in range(len(options) - 2, -1, -1):
        result = z3.If(index == i, options[i], result)
    return result


@dataclass(frozen=True)
class MenuEntry:
    op: Op
    arg_bits: tuple[int, ...]
    result_bits: int
    commutative: bool


def menu(isa: ISA, ops: list[Op]) -> list[MenuEntry]:
    """Look up each op's register widths in the ISA table (the one definition of its shape)."""
    out = []
    for op in ops:
        if op.form_id not in isa.forms:
            raise KeyError(f"{isa.name} has no instruction form {op.form_id!r}")
        insn, form = isa.forms[op.form_id]
        if form.imm and op.imm not in form.imm:
            raise ValueError(f"{op}: immediate must be one of {form.imm}")
        out.append(MenuEntry(op, tuple(r.ctype.bits for r in form.registers), form.result.bits, insn.commutative))
    return out


class LinearSketch:
    """``length`` slots over ``input_bits`` inputs, producing ``n_outputs`` values (the last slots)."""

    def __init__(self, isa: ISA, ops: list[Op], input_bits: list[int], length: int, n_outputs: int = 1,
                 tag: str = "c"):
        self.isa, self.entries = isa, menu(isa, ops)
        self.input_bits, self.length, self.n_outputs = list(input_bits), length, n_outputs
        self.classes = sorted({*input_bits, *(e.result_bits for e in self.entries),
                               *(b for e in self.entries for b in e.arg_bits)})
        self.max_arity = max(len(e.arg_bits) for e in self.entries)
        n_regs = len(input_bits) + length
        self.op = [_bv(f"{tag}op{t}", len(self.entries)) for t in range(length)]
        self.arg = [[_bv(f"{tag}a{t}_{j}", n_regs) for j in range(self.max_arity)] for t in range(length)]

    def _class(self, bits: int) -> int:
        return self.classes.index(bits)

    def _reg_class(self):
        """Width class of every register as a (symbolic) integer."""
        cls = [z3.BitVecVal(self._class(b), 8) for b in self.input_bits]
        for t in range(self.length):
            cls.append(mux(self.op[t], [z3.BitVecVal(self._class(e.result_bits), 8) for e in self.entries]))
        return cls

    def well_formed(self) -> list:
        cs, n_in, cls = [], len(self.input_bits), self._reg_class()
        for t in range(self.length):
            n_avail = n_in + t
            cs.append(z3.ULT(self.op[t], len(self.entries)))
            for i, e in enumerate(self.entries):
                chosen = self.op[t] == i
                for j in range(self.max_arity):
                    a = self.arg[t][j]
                    if j < len(e.arg_bits):
                        cs.append(z3.Implies(chosen, z3.And(z3.ULT(a, n_avail),
                                                            mux(a, cls[:n_avail]) == self._class(e.arg_bits[j]))))
                    else:
                        cs.append(z3.Implies(chosen, a == 0))
                if e.commutative and len(e.arg_bits) == 2:
                    cs.append(z3.Implies(chosen, z3.ULE(self.arg[t][0], self.arg[t][1])))
        for t in range(self.length - self.n_outputs):
            reg = n_in + t
            cs.append(z3.Or([self.arg[u][j] == reg for u in range(t + 1, self.length) for j in range(self.max_arity)]))
        return cs

    def output_widths(self, bits: list[int]) -> list:
        """Constraints: output ``k`` has width ``bits[k]``."""
        if any(b not in self.classes for b in bits):
            return [z3.BoolVal(False)]
        cls = self._reg_class()[-self.n_outputs:]
        return [c == self._class(b) for c, b in zip(cls, bits)]

    def symbolic_outputs(self, inputs: list) -> list:
        """Outputs of the sketch on concrete (BitVecVal) or symbolic inputs, holes left free.

        Each register is kept as one value per width class; the type constraints guarantee that only
        the component of the register's real class is ever read."""
        regs = []
        for b, x in zip(self.input_bits, inputs):
            regs.append({c: (x if c == b else z3.BitVecVal(0, c)) for c in self.classes})
        for t in range(self.length):
            results = {c: [] for c in self.classes}
            for e in self.entries:
                insn, form = self.isa.forms[e.op.form_id]
                args = [mux(self.arg[t][j], [r[bits] for r in regs]) for j, bits in enumerate(e.arg_bits)]
                value = evaluate(Z3, insn, form, args, e.op.imm)
                for c in self.classes:
                    results[c].append(value if c == e.result_bits else z3.BitVecVal(0, c))
            regs.append({c: mux(self.op[t], results[c]) for c in self.classes})
        return regs[-self.n_outputs:]

    def cycle_terms(self, figures):
        """(critical-path latency, issue bound) of the decoded program, from each form's
        ``figures(form_id) -> (latency, throughput)``; unused operand holes are 0, an input, ready at 0."""
        ready, issue = [bv(0)] * len(self.input_bits), bv(0)
        for t in range(self.length):
            lat, tp = zip(*(figures(e.op.form_id) for e in self.entries))
            start = bv(0)
            for j in range(self.max_arity):
                start = bv_max(start, mux(self.arg[t][j], ready))
            ready.append(start + mux(self.op[t], [bv(v) for v in lat]))
            issue = issue + mux(self.op[t], [bv(v) for v in tp])
        critical = ready[0]
        for r in ready[1:]:
            critical = bv_max(critical, r)
        return critical, issue

    def decode(self, model, input_names: list[str]) -> Program:
        body = []
        for t in range(self.length):
            e = self.entries[model.eval(self.op[t], model_completion=True).as_long()]
            args = tuple(model.eval(self.arg[t][j], model_completion=True).as_long() for j in range(len(e.arg_bits)))
            body.append(Instr(e.op, args))
        n = len(self.input_bits) + self.length
        return Program(self.isa.name, tuple(input_names), tuple(self.input_bits), tuple(body),
                       tuple(range(n - self.n_outputs, n)))
