#!/usr/bin/env python3
"""Measure latency and reciprocal throughput of every instruction form with LLVM's scheduling models.

For each form a one-line C function calling its intrinsic is compiled with clang-14, so the
instruction timed is the one the compiler emits for the intrinsic, with real operands; the
instruction carrying the form's mnemonic is then timed alone by ``llvm-mca-14 -instruction-info``
on each micro-architecture of ``isa_specs.costs.UARCHS``, and the figures are written to
``isa_specs/cost_tables/<isa>.json`` together with the model and command they come from.

What the compiled code can hide is printed and recorded rather than silently timed:
* Compiled in isolation, an intrinsic may lower to another mnemonic (clang picks the FP-domain
  ``vandps`` for ``_mm256_and_si256`` when no integer instruction surrounds it). The form's own
  mnemonic is then timed on the operands clang chose, and clang's output is kept under
  ``isolated_lowering``.
* A scheduling model may lack the instruction and time it as a placeholder (LLVM 14's
  Skylake-server model, used for sapphirerapids, gives AMX tile instructions latency 100). Such
  figures go under ``unavailable`` with the reason instead of ``forms``.
* Two CPU names may select the same model (cortex-a72 and neoverse-n1 both get the Cortex-A57
  model in LLVM 14); a UARCHS entry repeating a model is an error, and each source names the
  model's resources.

Usage: python scripts/measure_costs.py [ISA ...]   (default: every ISA whose module imports)
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from dataclasses import dataclass
from os.path import commonprefix
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from isa_specs import ISA_NAMES, get_isa                      # noqa: E402
from isa_specs.costs import COSTS_DIR, UARCHS                 # noqa: E402
from isa_specs.instruction import Form, Instruction           # noqa: E402
from isa_specs.isa import ISA                                 # noqa: E402
from synth.files import write_atomically                       # noqa: E402

CLANG, MCA = "clang-14", "llvm-mca-14"
PLACEHOLDER_LATENCY = 100   # the latency LLVM's x86 models give instructions they have no timing for
SKIPPED = {"ret", "retq", "vzeroupper"}                      # ABI epilogue, not the form's work
# Assembler aliases that clang prints as the instruction they stand for (same encoding, same cost):
# Arm ARM C7.2, "UXTL, UXTL2: Unsigned extend Long. This is an alias of USHLL, USHLL2" (shift 0).
ALIASES = {"uxtl": "ushll", "uxtl2": "ushll2", "sxtl": "sshll", "sxtl2": "sshll2"}


def triple(isa: ISA) -> str:
    return "aarch64-linux-gnu" if isa.name == "neon" else "x86_64-linux-gnu"


def machine_flags(isa: ISA) -> list[str]:
    """The ``-m`` flags of the ISA's harness toolchain: they enable the extensions the forms need."""
    return [f for f in isa.toolchain.cflags if f.startswith("-m")]


def mca_attrs(isa: ISA) -> str:
    """The same extensions as llvm-mca ``-mattr`` (its assembler rejects e.g. sdot on cortex-a53)."""
    attrs = []
    for f in machine_flags(isa):
        if f.startswith("-march="):
            attrs += ["+" + ext for ext in f.split("+")[1:]]
        elif "=" not in f:
            attrs.append("+" + f[2:])
    return ",".join(attrs)


# ---------------------------------------------------------------- compiling the intrinsics

@dataclass(frozen=True)
class Probe:
    """One compiled call: a form with one immediate value, as C function ``name``; ``memory``
    passes the register operands through pointers, for instructions whose source can only be
    memory (``vbroadcasti32x4``): their figures then include the load."""
    form_id: str
    insn: Instruction
    form: Form
    imm: int | None
    memory: bool
    name: str


def imm_order(values: tuple[int, ...]) -> list[int | None]:
    """Immediates to try, middle first: edge values (shift by 0, extract of the low half) often
    compile to no instruction or another one, so the first value whose lowering carries the
    mnemonic is timed."""
    if not values:
        return [None]
    mid = len(values) // 2
    return sorted(values, key=lambda v: (abs(values.index(v) - mid), values.index(v)))


def c_function(p: Probe) -> str:
    form = p.form
    if form.c_body:
        # as in the check harness: operands are byte arrays a0, a1, …, the body writes r
        sizes = [b // 8 for b in form.operand_bits]
        loads = "".join(f"  const uint8_t *a{i} = in + {sum(sizes[:i])};\n" for i in range(len(sizes)))
        return (f"void {p.name}(const uint8_t *in, uint8_t *out) {{\n{loads}"
                f"  uint8_t r[{form.result_bits // 8}];\n  {form.c_body}\n  memcpy(out, r, sizeof r);\n}}\n")
    regs = iter(f"a{i}" for i in range(len(form.registers)))
    deref, ptr = ("*", " *") if p.memory else ("", " ")
    args = [str(p.imm) if op.ctype.is_imm else deref + next(regs) for op in form.operands]
    params = ", ".join(f"const {op.ctype.name}{ptr}a{i}" for i, op in enumerate(form.registers))
    return f"{form.result.name} {p.name}({params}) {{ return {form.intrinsic}({', '.join(args)}); }}\n"


def compile_probes(isa: ISA, probes: list[Probe]) -> dict[str, list[str]]:
    """Function name → its instructions (tab-separated asm text), from one clang -S run."""
    source = (f"#include <stdint.h>\n#include <string.h>\n#include {isa.header}\n"
              + "".join(c_function(p) for p in probes))
    cmd = [CLANG, f"--target={triple(isa)}", "-O2", "-S", *machine_flags(isa), "-x", "c", "-", "-o", "-"]
    proc = subprocess.run(cmd, input=source, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    comment = "//" if triple(isa).startswith("aarch64") else "#"
    bodies: dict[str, list[str]] = {}
    current = None
    for line in proc.stdout.splitlines():
        if m := re.match(r"^(\w+):", line):
            current = bodies.setdefault(m[1], [])
        elif current is not None and line[:1].isspace():
            text = line.split(comment)[0].strip()
            if text and not text.startswith("."):
                current.append(text)
    return bodies


def mnemonic(asm: str) -> str:
    """First token that is not an encoding prefix such as ``{vex}``."""
    return next(t for t in asm.split() if not t.startswith("{")).lower()


def substitute(asm: str, new: str) -> str:
    old = mnemonic(asm)
    return re.sub(rf"(?i)(^|\s){re.escape(old)}(\s|$)", rf"\g<1>{new}\g<2>", asm, count=1)


# ---------------------------------------------------------------- timing

@dataclass(frozen=True)
class Timing:
    latency: int
    rthroughput: float
    resources: tuple[str, ...]    # names the scheduling model's processor resources


def mca_command(isa: ISA, cpu: str) -> str:
    attrs = mca_attrs(isa)
    return f"llvm-mca -mtriple={triple(isa)} -mcpu={cpu}" + (f" -mattr={attrs}" if attrs else "")


def mca(isa: ISA, cpu: str, asm: str) -> Timing:
    cmd = [MCA, *mca_command(isa, cpu).split()[1:], "-instruction-info", "-iterations=1"]
    proc = subprocess.run(cmd, input=asm + "\n", capture_output=True, text=True)
    if proc.returncode or "not a recognized processor" in proc.stderr:
        raise RuntimeError(f"{' '.join(cmd)} <<< {asm!r}: {proc.stderr.strip()[-1000:]}")
    lines = proc.stdout.splitlines()
    row = lines[next(i for i, l in enumerate(lines) if l.rstrip().endswith("Instructions:") and l.startswith("[1]")) + 1]
    _uops, latency, rthroughput = row.split()[:3]
    start = lines.index("Resources:") + 1
    resources = tuple(l.split(" - ", 1)[1].strip() for l in lines[start:] if " - " in l and l.startswith("["))
    return Timing(int(latency), float(rthroughput), resources)


def llvm_version() -> str:
    out = subprocess.run([MCA, "--version"], capture_output=True, text=True).stdout
    return re.search(r"LLVM version (\S+)", out)[1]


def resolve(isa: ISA, probes: list[Probe], bodies: dict[str, list[str]]) -> tuple[str | None, str | None, str]:
    """(asm to time, clang's isolated lowering when it lacks the mnemonic, reason if neither).

    The first probe (register operands before memory ones, middle immediate first) whose code has
    the mnemonic wins; else the form's mnemonic replaces that of the first single-instruction
    register lowering in which llvm-mca accepts the replacement."""
    want = probes[0].insn.mnemonic.lower()
    for p in probes:
        for asm in bodies[p.name]:
            if mnemonic(asm) in (want, ALIASES.get(want)):
                if p.memory:
                    print(f"{isa.name} {p.form_id}: only a memory operand gives {want}: its figures include the load")
                return asm, None, ""
    work = {p.name: [i for i in bodies[p.name] if mnemonic(i) not in SKIPPED] for p in probes}
    for p in probes:
        if len(work[p.name]) == 1 and not p.memory:
            try:
                mca(isa, UARCHS[isa.name][0], substitute(work[p.name][0], want))
            except RuntimeError:
                continue
            return substitute(work[p.name][0], want), work[p.name][0], ""
    isolated = "; ".join(work[probes[0].name])
    return None, isolated, f"clang-14 lowers {probes[0].form.intrinsic} to `{isolated}`, without {want}"


def measure(isa: ISA) -> dict:
    probes = [Probe(insn.form_id(form), insn, form, imm, memory, f"probe_{k}_{'m' if memory else 'r'}{j}")
              for k, (insn, form) in enumerate(isa.forms.values())
              for memory in ((False,) if form.c_body else (False, True))
              for j, imm in enumerate(imm_order(form.imm))]
    bodies = compile_probes(isa, probes)
    version, uarchs = llvm_version(), UARCHS[isa.name]
    out = {"source": {}, "forms": {}, "lowering": {}, "isolated_lowering": {}, "unavailable": {}}
    models: dict[tuple[str, ...], str] = {}
    for form_id in isa.forms:
        mine = [p for p in probes if p.form_id == form_id]
        asm, isolated, reason = resolve(isa, mine, bodies)
        if isolated:
            out["isolated_lowering"][form_id] = " ".join(isolated.split())
            print(f"{isa.name} {form_id}: {mine[0].form.intrinsic} compiles in isolation to `{isolated}`"
                  + (f"; timing `{asm}`" if asm else ""))
        if asm is None:
            out["unavailable"][form_id] = {u: reason for u in uarchs}
            print(f"{isa.name} {form_id}: UNAVAILABLE: {reason}")
            continue
        out["lowering"][form_id] = " ".join(asm.split())
        for uarch in uarchs:
            t = mca(isa, uarch, asm)
            if models.setdefault(t.resources, uarch) != uarch:
                raise SystemExit(f"{uarch} and {models[t.resources]} select the same LLVM scheduling model: "
                                 f"keep one in isa_specs.costs.UARCHS[{isa.name!r}]")
            model = commonprefix(t.resources) or ", ".join(t.resources)
            out["source"][uarch] = f"LLVM {version} scheduling model ({model}* resources), {mca_command(isa, uarch)}"
            if t.latency >= PLACEHOLDER_LATENCY:
                why = (f"LLVM {version}'s model for {uarch} ({model}*) has no timing for {mnemonic(asm)}: "
                       f"it gives the placeholder latency {t.latency}")
                out["unavailable"].setdefault(form_id, {})[uarch] = why
                print(f"{isa.name} {form_id} on {uarch}: UNAVAILABLE: {why}")
            else:
                out["forms"].setdefault(form_id, {})[uarch] = {"latency": t.latency, "rthroughput": t.rthroughput}
    return {k: v for k, v in out.items() if v or k in ("source", "forms", "lowering")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("isas", nargs="*", help=f"among {', '.join(ISA_NAMES)}; default: every one whose module imports")
    names = parser.parse_args().isas
    for name in names or ISA_NAMES:
        try:
            isa = get_isa(name)
        except ModuleNotFoundError as e:
            if names or e.name != f"isa_specs.{name}":
                raise
            print(f"{name}: skipped ({e})")
            continue
        data = measure(isa)
        write_atomically(COSTS_DIR / f"{name}.json", json.dumps(data, indent=2, sort_keys=True) + "\n")
        print(f"{name}: {len(data['forms'])}/{len(isa.forms)} forms timed on {', '.join(UARCHS[name])}"
              f" -> {COSTS_DIR / f'{name}.json'}")


if __name__ == "__main__":
    main()
