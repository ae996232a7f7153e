"""Straight-line programs over SSA registers: the data every sketch decodes to and every later
stage (proof, cache, C emission) reads.

Register ``k`` is input ``k`` for ``k < len(inputs)``, else the result of instruction
``k - len(inputs)``. An instruction names an instruction form (``mnemonic.arrangement``), an
optional immediate and its register operands in semantic order.
"""
from __future__ import annotations

from dataclasses import dataclass

from isa_specs.instruction import evaluate
from isa_specs.isa import ISA


class IllTyped(ValueError):
    """A program that no machine could run as written: unknown form, wrong operand count or width,
    an immediate the form does not accept, a register used before it is defined."""


@dataclass(frozen=True)
class Op:
    """One menu entry a sketch may choose: a form with a fixed immediate."""
    form_id: str
    imm: int | None = None

    def __str__(self):
        return self.form_id if self.imm is None else f"{self.form_id}#{self.imm}"

    @staticmethod
    def parse(text: str) -> "Op":
        form, _, imm = text.partition("#")
        return Op(form, int(imm) if imm else None)


@dataclass(frozen=True)
class Instr:
    op: Op
    args: tuple[int, ...]


@dataclass(frozen=True)
class Program:
    isa: str
    inputs: tuple[str, ...]          # input register names
    input_bits: tuple[int, ...]
    body: tuple[Instr, ...]
    outputs: tuple[int, ...]         # registers holding the results, in order

    def __len__(self):
        return len(self.body)

    def name(self, reg: int) -> str:
        return self.inputs[reg] if reg < len(self.inputs) else f"t{reg - len(self.inputs)}"

    def lines(self) -> list[str]:
        """One instruction per line, e.g. ``t3 = cnt.16b(t2)``; outputs last."""
        n = len(self.inputs)
        out = [f"{self.name(n + i)} = {ins.op}({', '.join(self.name(a) for a in ins.args)})"
               for i, ins in enumerate(self.body)]
        out.append("return " + ", ".join(self.name(r) for r in self.outputs))
        return out

    def widths(self, isa: ISA) -> list[int]:
        """Bits of every register, inputs first; raises ``IllTyped`` unless each instruction names a
        form of ``isa`` with an immediate it accepts and earlier registers of the widths its operands
        have, and every output is a register."""
        if self.isa != isa.name:
            raise IllTyped(f"a {self.isa} program checked against {isa.name}")
        if len(self.inputs) != len(self.input_bits):
            raise IllTyped(f"{len(self.inputs)} inputs with {len(self.input_bits)} widths")
        widths = list(self.input_bits)
        for i, ins in enumerate(self.body):
            where = f"instruction {i} ({ins.op})"
            if ins.op.form_id not in isa.forms:
                raise IllTyped(f"{where}: {isa.name} has no form {ins.op.form_id!r}")
            _, form = isa.forms[ins.op.form_id]
            if form.imm and ins.op.imm not in form.imm:
                raise IllTyped(f"{where}: immediate {ins.op.imm} not among {list(form.imm)}")
            if not form.imm and ins.op.imm is not None:
                raise IllTyped(f"{where}: {ins.op.form_id} takes no immediate")
            want = [o.ctype.bits for o in form.registers]
            if len(ins.args) != len(want):
                raise IllTyped(f"{where}: {len(ins.args)} operands, the form takes {len(want)}")
            for a, bits in zip(ins.args, want):
                if not 0 <= a < len(widths):
                    raise IllTyped(f"{where}: operand register {a} is not defined before it")
                if widths[a] != bits:
                    raise IllTyped(f"{where}: operand {self.name(a)} has {widths[a]} bits, the form takes {bits}")
            widths.append(form.result.bits)
        for r in self.outputs:
            if not 0 <= r < len(widths):
                raise IllTyped(f"output register {r} does not exist")
        return widths

    def output_bits(self, isa: ISA) -> list[int]:
        widths = self.widths(isa)
        return [widths[r] for r in self.outputs]

    def run(self, B, isa: ISA, inputs: list) -> list:
        """The outputs on backend ``B``; an ill-typed program raises ``IllTyped`` before running."""
        self.widths(isa)
        if [B.width(x) for x in inputs] != list(self.input_bits):
            raise IllTyped(f"inputs of {[B.width(x) for x in inputs]} bits for a program taking {list(self.input_bits)}")
        regs = list(inputs)
        for ins in self.body:
            insn, form = isa.forms[ins.op.form_id]
            regs.append(evaluate(B, insn, form, [regs[a] for a in ins.args], ins.op.imm))
        return [regs[r] for r in self.outputs]

    def to_json(self) -> dict:
        return {"isa": self.isa, "inputs": list(self.inputs), "input_bits": list(self.input_bits),
                "body": [[str(i.op), list(i.args)] for i in self.body], "outputs": list(self.outputs)}

    @staticmethod
    def from_json(d: dict) -> "Program":
        return Program(d["isa"], tuple(d["inputs"]), tuple(d["input_bits"]),
                       tuple(Instr(Op.parse(op), tuple(args)) for op, args in d["body"]), tuple(d["outputs"]))


class Builder:
    """Assembles a kernel by inlining sub-programs (stage results) into one SSA body."""

    def __init__(self, isa: str, inputs, input_bits):
        self.isa, self.inputs, self.input_bits = isa, tuple(inputs), tuple(input_bits)
        self.body: list[Instr] = []

    def inline(self, prog: Program, feed: list[int]) -> list[int]:
        """Append ``prog`` with its inputs bound to registers ``feed``; returns its output registers."""
        assert len(feed) == len(prog.inputs), (prog.inputs, feed)
        local = list(feed)
        for ins in prog.body:
            self.body.append(Instr(ins.op, tuple(local[a] for a in ins.args)))
            local.append(len(self.inputs) + len(self.body) - 1)
        return [local[r] for r in prog.outputs]

    def program(self, outputs) -> Program:
        return Program(self.isa, self.inputs, self.input_bits, tuple(self.body), tuple(outputs))
