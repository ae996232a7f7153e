"""Plain-data rows describing instructions: one ``Instruction`` per mnemonic, one ``Form`` per
register arrangement (NEON ``8b``/``16b``/``4h``…, x86 ``xmm``/``ymm``/``zmm``).

Operand widths and element types come from the form's C prototype, written as in the vendor's
intrinsics reference, so the intrinsic, its types and the semantics can never drift apart.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

_VECTOR = re.compile(r"(u?)int(8|16|32|64)x(\d+)_t")
_SCALAR = re.compile(r"(u?)int(8|16|32|64)_t")
_X86 = re.compile(r"__m(128|256|512)i")
_PROTOTYPE = re.compile(r"^\s*(\w+)\s+(\w+)\s*\((.*)\)\s*$")


@dataclass(frozen=True)
class CType:
    """A C operand type: total bits, element bits and signedness (x86 vectors: 8-bit, untyped)."""
    name: str
    bits: int
    elem_bits: int
    signed: bool
    is_imm: bool = False

    @staticmethod
    def parse(name: str) -> "CType":
        name = name.replace("const ", "").strip()
        if name == "int":
            return CType(name, 32, 32, True, is_imm=True)
        if m := _VECTOR.fullmatch(name):
            return CType(name, int(m[2]) * int(m[3]), int(m[2]), m[1] != "u")
        if m := _SCALAR.fullmatch(name):
            return CType(name, int(m[2]), int(m[2]), m[1] != "u")
        if m := _X86.fullmatch(name):
            return CType(name, int(m[1]), 8, False)
        raise ValueError(f"unknown C operand type {name!r}")


@dataclass(frozen=True)
class Operand:
    name: str
    ctype: CType


@dataclass(frozen=True)
class Form:
    """One encoding of an instruction, identified as ``mnemonic.arrangement``.

    ``params`` are passed to the semantics as keyword arguments (element size, lane half…);
    ``imm`` lists the immediate values the form accepts, when its prototype has an ``int`` operand.
    ``c_body`` replaces the default ``r = intrinsic(args)`` harness call for forms whose intrinsic
    does not map registers to registers (AMX tiles); it is C code reading the operand variables
    ``a0, a1, …`` (byte arrays) and writing the byte array ``r``.
    """
    arrangement: str
    prototype: str
    params: dict = field(default_factory=dict)
    imm: tuple[int, ...] = ()
    c_body: str | None = None
    operand_bits: tuple[int, ...] = ()
    result_bits: int = 0

    def __post_init__(self):
        m = _PROTOTYPE.match(self.prototype)
        if not m:
            raise ValueError(f"malformed prototype {self.prototype!r}")
        has_imm = any(o.ctype.is_imm for o in self.operands)
        if has_imm != bool(self.imm):
            raise ValueError(f"{self.prototype}: immediate operand and imm values must come together")
        if self.c_body and not (self.operand_bits and self.result_bits):
            raise ValueError(f"{self.prototype}: a custom c_body needs operand_bits and result_bits")

    @property
    def intrinsic(self) -> str:
        return _PROTOTYPE.match(self.prototype)[2]

    @property
    def result(self) -> CType:
        if self.c_body:
            return CType("bytes", self.result_bits, 8, False)
        return CType.parse(_PROTOTYPE.match(self.prototype)[1])

    @property
    def operands(self) -> tuple[Operand, ...]:
        args = [a.strip() for a in _PROTOTYPE.match(self.prototype)[3].split(",") if a.strip()]
        out = []
        for a in args:
            ctype, name = a.rsplit(" ", 1)
            out.append(Operand(name.strip("*"), CType.parse(ctype)))
        return tuple(out)

    @property
    def registers(self) -> tuple[Operand, ...]:
        """The register (non-immediate) operands, in semantic order."""
        if self.c_body:
            return tuple(Operand(f"a{i}", CType("bytes", b, 8, False)) for i, b in enumerate(self.operand_bits))
        return tuple(o for o in self.operands if not o.ctype.is_imm)


@dataclass(frozen=True)
class Instruction:
    """One row: the mnemonic as in the vendor manual, its semantics and its forms.

    ``semantics(B, *registers, imm=..., **form.params)`` returns the result value.
    ``feature`` names the CPU feature the host must have to execute it (see ``isa.host``).
    ``ref`` cites the vendor pseudocode the semantics follows.
    """
    mnemonic: str
    semantics: Callable
    forms: tuple[Form, ...]
    feature: str
    ref: str
    commutative: bool = False

    def __post_init__(self):
        if not self.forms:
            raise ValueError(f"{self.mnemonic}: no forms")
        names = [f.arrangement for f in self.forms]
        if len(set(names)) != len(names):
            raise ValueError(f"{self.mnemonic}: duplicate arrangements {names}")

    def form_id(self, form: Form) -> str:
        return f"{self.mnemonic}.{form.arrangement}"


def evaluate(B, insn: Instruction, form: Form, regs, imm: int | None = None):
    """Run the semantics of ``insn`` in ``form`` on backend ``B``."""
    kwargs = dict(form.params)
    if form.imm:
        kwargs["imm"] = imm
    return insn.semantics(B, *regs, **kwargs)
