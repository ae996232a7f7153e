"""Adversarial mutants of a cache entry: what a corrupted file or a forger could store, content hash
recomputed. The verifier must refuse each one, or plain Z3 must show it equivalent to its spec.

A stage mutant edits one stage program (opcode swaps within and across lane widths and arities,
saturating variants, operand swaps and replacements, immediates, dropped instructions, outputs,
widths, and byte-split-lane constructions like issue 18's finding 1) and re-inlines the kernel
program, as a forger would; a field mutant edits what emission reads besides the program
(constants, name, stage wiring, key, text). ``classify`` stores the mutant in a scratch cache and
asks ``synth.trust.verdict``, then, when it is accepted, plain Z3 (no linear forms) whether it is
really equivalent, and Bitwuzla where Z3 answers unknown.
"""
from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from isa_specs import get_isa
from sketches.program import IllTyped, Instr, Op, Program
from synth import cache, trust
from synth.kernel import family, spec_from_key
from synth.proof import bitwuzla_query, prove_equal
from synth.stages import StageUse, inline, kernel_inputs

# Forms that build issue 18's finding 1 around a stage output o with stage inputs x, y:
# max(o, ((x + y) - y) >> top) in byte lanes: zero in no lane, but once "proved".
SPLIT_LANE_EXPLOITS = {
    "avx512": [("vpaddb.zmm", "vpsubb.zmm", "vpsrlq.zmm#63", "vpmaxub.zmm"),
               ("vpaddb.zmm", "vpsubb.zmm", "vpsrlw.zmm#15", "vpmaxub.zmm")],
}


# A few cached kernels per ISA, both kernel kinds, with and without constant registers.
SUITE = [
    "bitserial_a1w1_unipolar_8x64in128_neon", "bitserial_a1w1_hybrid_acc_8x64_neon", "int8_u8u8_rows_4x4x8_neon",
    "int8_s8s8_k4_4x4x16_neon", "bitserial_a1w1_unipolar_acc_4x256_avx2", "int8_u7s8_k4b_6x8x4_avx2",
    "bitserial_a1w1_unipolar_acc_8x512_avx512", "bitserial_a1w1_hybrid_acc_8x512_avx512",
    "int8_u8s8_k4b_8x48x16_avx512", "int8_u8s8_tile_32x32x256_amx",
]


@dataclass
class Mutant:
    kind: str
    description: str
    entry: dict


def _with_body(program: Program, body, outputs=None, input_bits=None) -> Program:
    return Program(program.isa, program.inputs, tuple(input_bits or program.input_bits), tuple(body),
                   tuple(program.outputs if outputs is None else outputs))


def _stage_mutants(program: Program, isa) -> Iterator[tuple[str, str, Program]]:
    n_in = len(program.inputs)
    for k, ins in enumerate(program.body):
        _, form = isa.forms[ins.op.form_id]
        arity = len(form.registers)

        def edited(op=ins.op, args=ins.args):
            body = list(program.body)
            body[k] = Instr(op, tuple(args))
            return _with_body(program, body)

        for fid, (_, other) in isa.forms.items():
            if fid == ins.op.form_id:
                continue
            if len(other.registers) == arity:
                same = [o.ctype.bits for o in other.registers] == [o.ctype.bits for o in form.registers]
                for imm in dict.fromkeys((other.imm[0], other.imm[-1])) if other.imm else (None,):
                    yield ("opcode" if same else "opcode, other widths", f"t{k}: {ins.op} -> {fid}", edited(Op(fid, imm)))
            elif len(other.registers) < arity and not other.imm:
                yield "opcode, other arity", f"t{k}: {ins.op} -> {fid}", edited(Op(fid), ins.args[:len(other.registers)])
        for imm in form.imm:
            if imm != ins.op.imm:
                yield "immediate", f"t{k}: {ins.op} -> #{imm}", edited(Op(ins.op.form_id, imm))
        for i in range(arity):
            for j in range(i + 1, arity):
                if ins.args[i] != ins.args[j]:
                    args = list(ins.args)
                    args[i], args[j] = args[j], args[i]
                    yield "operand swap", f"t{k}: operands {i} <-> {j}", edited(args=args)
            for r in range(n_in + k):
                if r != ins.args[i]:
                    args = list(ins.args)
                    args[i] = r
                    yield "operand", f"t{k}: operand {i} -> {program.name(r)}", edited(args=args)
        if ins.args:                            # drop t_k: its users read its first operand instead
            reg = n_in + k
            remap = lambda r: ins.args[0] if r == reg else r - (r > reg)
            body = [Instr(i.op, tuple(remap(a) for a in i.args)) for i in program.body[:k] + program.body[k + 1:]]
            yield "dropped instruction", f"drop t{k} ({ins.op})", _with_body(program, body, [remap(r) for r in program.outputs])
    last = n_in + len(program.body)
    for o, reg in enumerate(program.outputs):
        for r in range(last):
            if r != reg:
                outs = list(program.outputs)
                outs[o] = r
                yield "output", f"output {o} -> {program.name(r)}", _with_body(program, program.body, outs)
    yield "outputs", "no outputs", _with_body(program, program.body, [])
    yield "outputs", "one output more", _with_body(program, program.body, [*program.outputs, program.outputs[-1]])
    yield "widths", "inputs half as wide", _with_body(program, program.body, input_bits=[b // 2 for b in program.input_bits])
    for add, sub, shift, pick in SPLIT_LANE_EXPLOITS.get(program.isa, ()):
        if len(program.inputs) < 2 or not program.outputs:
            continue
        base, body = last, list(program.body)
        body += [Instr(Op.parse(add), (0, 1)), Instr(Op.parse(sub), (base, 1)), Instr(Op.parse(shift), (base + 1,)),
                 Instr(Op.parse(pick), (base + 2, program.outputs[0]))]
        yield "split-lane exploit", f"output 0 -> {pick}(output 0, {shift}(({add} x y) - y))", \
            _with_body(program, body, [base + 3, *program.outputs[1:]])


def reinlined(entry: dict, stage: str, program: Program) -> dict:
    """The entry with one stage program replaced and the kernel program, text and length redone."""
    spec = spec_from_key(entry["spec"])
    uses = [StageUse(s, i, o) for s, i, o in entry["uses"]]
    programs = {n: Program.from_json(s["program"]) for n, s in entry["stages"].items()}
    programs[stage] = program
    constants = {k: (int(v["value"], 16), v["bits"]) for k, v in entry["constants"].items()}
    names, bits, _, _ = kernel_inputs(spec, constants)
    out = copy.deepcopy(entry)
    out["stages"][stage]["program"] = program.to_json()
    try:
        outputs = family(spec).assemble(spec)[1]
        kernel = inline(spec.isa, names, bits, uses, programs, outputs)
        out["program"], out["program_text"], out["length"] = kernel.to_json(), kernel.lines(), len(kernel)
    except (AssertionError, IndexError, KeyError, IllTyped):
        pass                     # not inlinable: the stored kernel program stays the original
    return out


def _field_mutants(entry: dict) -> Iterator[Mutant]:
    def edited(kind, description, **fields):
        return Mutant(kind, description, dict(copy.deepcopy(entry), **fields))

    for name, c in entry["constants"].items():
        for value in (int(c["value"], 16) ^ 1, 0):
            if value != int(c["value"], 16):
                yield edited("constants", f"{name} = {value:#x}",
                             constants=dict(entry["constants"], **{name: dict(c, value=hex(value))}))
    renames = [entry["name"].replace("unipolar", "hybrid"), entry["name"].replace("hybrid", "unipolar"),
               entry["name"].replace("u8s8", "s8s8"), entry["name"].replace("s8s8", "u8s8"), entry["name"] + "x"]
    for name in dict.fromkeys(n for n in renames if n != entry["name"]):
        yield edited("name", f"renamed {name}", name=name)
    if len(entry["uses"]) > 1:
        yield edited("wiring", "first two stage uses swapped", uses=[entry["uses"][1], entry["uses"][0], *entry["uses"][2:]])
    first = entry["uses"][0]
    if len(first[1]) > 1:
        yield edited("wiring", "inputs of the first use swapped",
                     uses=[[first[0], [first[1][1], first[1][0], *first[1][2:]], first[2]], *entry["uses"][1:]])
    yield edited("key", "engine version changed", key=dict(entry["key"], engine=entry["key"]["engine"] + "0"))
    yield edited("text", "program text edited", program_text=entry["program_text"][1:])
    yield edited("text", "length edited", length=entry["length"] + 1)
    stage = next(iter(entry["stages"]))
    yield edited("stages", f"stage {stage} removed", stages={k: v for k, v in entry["stages"].items() if k != stage})
    body = entry["program"]["body"]
    if len(body) > 1:
        yield edited("program", "kernel program: last two instructions' operands exchanged (stages untouched)",
                     program=dict(entry["program"], body=[*body[:-2], [body[-2][0], body[-1][1]], [body[-1][0], body[-2][1]]]))


def mutants(entry: dict) -> Iterator[Mutant]:
    isa = get_isa(entry["program"]["isa"])
    for stage, s in entry["stages"].items():
        for kind, description, program in _stage_mutants(Program.from_json(s["program"]), isa):
            yield Mutant(kind, f"{stage}: {description}", reinlined(entry, stage, program))
    yield from _field_mutants(entry)


def classify(mutant: Mutant, original: dict, scratch: Path, solver_seconds: float = 600.0) -> dict:
    """``refused`` (with the verifier's reason), ``equivalent`` (accepted, and plain Z3 -- or Bitwuzla
    where Z3 answers unknown -- proves every edited stage equal to its spec, with no other field
    changed), ``wrongly accepted``, or ``undecided`` (accepted, neither solver answered in time)."""
    plain = {k: v for k, v in mutant.entry.items() if k not in ("cache_key", "content_hash", "format")}
    path = cache.store(plain, scratch)
    v = trust.verdict(path)
    path.unlink()
    row = {"kind": mutant.kind, "mutant": mutant.description}
    if not v["ok"]:
        return dict(row, outcome="refused", reason=v["failures"][0])
    spec = spec_from_key(mutant.entry["spec"])
    stages = {s.problem.name: s.problem for s in family(spec).stages(spec, get_isa(spec.isa))}
    same = ("name", "constants", "uses", "key", "spec")
    if any(mutant.entry[f] != original[f] for f in same):
        return dict(row, outcome="wrongly accepted", reason="a field other than the program changed")
    provers = set()
    for name, s in mutant.entry["stages"].items():
        if s["program"] != original["stages"][name]["program"]:
            program = Program.from_json(s["program"])
            ob, _ = prove_equal(stages[name], program, time.monotonic() + solver_seconds)
            if ob.result == "unknown":
                ob, _ = prove_equal(stages[name], program, time.monotonic() + solver_seconds, bitwuzla_query)
            prover = f"{ob.solver} (plain Z3 unknown)" if ob.method == "bitwuzla" else "plain Z3"
            if ob.result != "proved":
                return dict(row, outcome="wrongly accepted" if ob.result == "refuted" else "undecided",
                            reason=f"{prover}: {ob.result}")
            provers.add(prover)
    return dict(row, outcome="equivalent",
                reason=f"{', '.join(sorted(provers))} proves the edited stages equal to their specs")
