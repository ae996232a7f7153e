"""A program as C statements on vector registers: the loads of its inputs, one intrinsic call per live
instruction, the stores of its outputs. Intrinsic names, operand types and immediates come from the
forms' prototypes in ``isa_specs`` (never formatted by hand); a register whose C type differs from
the operand's (NEON ``uint8x16_t`` fed to a ``uint16x8_t`` operand) gets a ``vreinterpret`` cast."""
from __future__ import annotations

from dataclasses import dataclass, field

from emit import EmitError
from emit.c_vectors import convert, memory
from emit.convention import Layout, Piece
from emit.schedule import issue_order
from isa_specs.instruction import CType
from sketches.program import Program

PREFIX = "v_"      # program registers become C variables v_<name>: never clash with parameters


@dataclass
class Step:
    """One statement group of the function body; ``kind`` selects the template branch."""
    kind: str
    name: str = ""
    ctype: str = ""
    expr: str = ""
    fields: dict = field(default_factory=dict)


def address(lay: Layout, piece: Piece) -> str:
    """C expression of the piece's first byte, as a (const) uint8_t pointer."""
    buf = lay.buffers[piece.buffer]
    byte = "uint8_t" if buf.writable else "const uint8_t"
    terms = [buf.name if buf.pointee == byte else f"({byte} *){buf.name}"]
    if piece.row:
        unit = "" if buf.unit == 1 else f"{buf.unit} * "
        terms.append(f"(ptrdiff_t){piece.row} * {unit}{buf.name}_stride")
    if piece.offset:
        terms.append(str(piece.offset))
    return " + ".join(terms)


def instruction_forms(program: Program, isa) -> list:
    """(instruction, form) of every program instruction, checked against the ISA table."""
    rows = []
    for ins in program.body:
        if ins.op.form_id not in isa.forms:
            raise EmitError(f"{ins.op.form_id} is not a {isa.name} instruction form")
        insn, form = isa.forms[ins.op.form_id]
        if (ins.op.imm is None) != (not form.imm) or (form.imm and ins.op.imm not in form.imm):
            raise EmitError(f"{ins.op}: immediate must be one of {list(form.imm)}")
        if len(ins.args) != len(form.registers):
            raise EmitError(f"{ins.op}: {len(ins.args)} operands for {len(form.registers)} registers")
        rows.append((insn, form))
    return rows


def constant_bytes(constant: dict, bits: int) -> bytes:
    """A cache entry's constant (``{"value": hex, "bits": n}``) as the little-endian register bytes."""
    if constant["bits"] != bits:
        raise EmitError(f"constant of {constant['bits']} bits feeds a {bits}-bit program input")
    return int(constant["value"], 16).to_bytes(bits // 8, "little")


def input_steps(program: Program, isa, lay: Layout, constants: dict, live: set[int],
                types: dict[int, CType]) -> dict[int, Step]:
    """Loads of the live inputs by register: vector loads, 32-bit splats (k4b), constants from byte
    arrays. Records each input register's C type in ``types``."""
    steps = {}
    for r, (name, bits) in enumerate(zip(program.inputs, program.input_bits)):
        if r not in live:
            continue
        var = PREFIX + name
        if name in constants:
            mem = memory(isa.name, bits)
            data = list(constant_bytes(constants[name], bits))
            steps[r] = Step("const", var, mem.ctype, fields={"data": data, "mem": mem})
            types[r] = CType.parse(mem.ctype)
            continue
        slot = lay.inputs[name]
        if slot.repeat > 1:
            word = slot.pieces[0].nbytes
            try:
                splat, ctype = memory(isa.name, bits).splats[word]
            except KeyError:
                raise EmitError(f"input {name}: no {word}-byte splat into a {bits}-bit {isa.name} register") from None
            steps[r] = Step("splat", var, ctype, address(lay, slot.pieces[0]), {"splat": splat, "word": f"uint{8 * word}_t"})
            types[r] = CType.parse(ctype)
        elif len(slot.pieces) == 1:
            mem = memory(isa.name, bits)
            steps[r] = Step("load", var, mem.ctype, address(lay, slot.pieces[0]), {"mem": mem})
            types[r] = CType.parse(mem.ctype)
        else:
            raise EmitError(f"input {name}: multi-row inputs exist only in the AMX tile layout")
    return steps


def body_steps(program: Program, live: set[int], forms: list, types: dict[int, CType],
               loads: dict[int, Step], registers: int) -> list[Step]:
    """One step per live instruction: the intrinsic call (operands cast to the prototype's types,
    immediates as literals), each input's load placed right before its first use. gcc does not
    schedule before register allocation on x86, so source order is register pressure: with every
    load hoisted, a 6x32 vpdpbusd tile's 24 broadcasts spilled."""
    n = len(program.inputs)
    loads, steps = dict(loads), []
    for k in issue_order(program, live, registers):
        ins, (_, form) = program.body[k], forms[k]
        steps += [loads.pop(a) for a in dict.fromkeys(ins.args) if a in loads]
        var = PREFIX + program.name(n + k)
        args = [convert(PREFIX + program.name(a), types[a], op.ctype) for a, op in zip(ins.args, form.registers)]
        types[n + k] = form.result
        regs = iter(args)
        call = [str(ins.op.imm) if op.ctype.is_imm else next(regs) for op in form.operands]
        steps.append(Step("op", var, form.result.name, f"{form.intrinsic}({', '.join(call)})", {"op": str(ins.op)}))
    return list(loads.values()) + steps          # inputs no instruction reads (an output as is) first


def output_steps(program: Program, isa, lay: Layout, types: dict[int, CType]) -> list[Step]:
    """Stores of the outputs: over their slots (int8) or added lane-wise to them (bitserial)."""
    steps = []
    for reg, slot in zip(program.outputs, lay.outputs):
        var, have = PREFIX + program.name(reg), types[reg]
        if have.bits != slot.nbytes * 8:
            raise EmitError(f"output {program.name(reg)} has {have.bits} bits, its slot {slot.nbytes * 8}")
        mem = memory(isa.name, have.bits)
        value = convert(var, have, CType.parse(mem.ctype))
        if lay.accumulate:
            out = lay.buffers[slot.pieces[0].buffer].name
            steps.append(Step("accumulate", var, lay.lane_type, value,
                              {"mem": mem, "lanes": have.bits // lay.accumulate, "out": out,
                               "unsigned": f"uint{lay.accumulate}_t"}))
        else:
            steps.append(Step("store", var, expr=value, fields={"mem": mem, "address": address(lay, slot.pieces[0])}))
    return steps
