"""``qsynth isa list`` and ``qsynth isa check``: the instruction-set specifications."""
from __future__ import annotations

from typing import Optional

import typer

from qsynth.commands.common import JSON_HELP, Isa, UsageError, positive, print_json
from qsynth.progress import spinner

isa_app = typer.Typer(help="Instruction-set specifications: list them, check them against the machine.",
                      no_args_is_help=True, rich_markup_mode="markdown")

ISA = typer.Option(..., "--isa", help="instruction set")


@isa_app.command("list", epilog="Example: qsynth isa list --isa neon --json")
def isa_list(isa: Isa = ISA, json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> int:
    """List instructions, lane shapes, intrinsics and costs."""
    from isa_specs import costs, get_isa
    spec = get_isa(isa)
    uarchs = costs.UARCHS.get(spec.name, ())
    rows = []
    for insn in spec.instructions:
        for form in insn.forms:
            fid = insn.form_id(form)
            row = {"instruction": insn.mnemonic, "form": form.arrangement, "intrinsic": form.intrinsic,
                   "prototype": form.prototype, "feature": insn.feature,
                   "operands": [op.ctype.name for op in form.registers], "result": form.result.name,
                   "imm": list(form.imm), "ref": insn.ref, "costs": {}}
            for uarch in uarchs:
                try:
                    c = costs.cost(spec.name, fid, uarch)
                    row["costs"][uarch] = {"latency": c.latency, "rthroughput": c.rthroughput}
                except KeyError:
                    pass
            rows.append(row)
    if json:
        print_json(rows)
        return 0
    print(f"{spec.name}: {spec.description}; {len(spec.instructions)} instructions, {len(rows)} forms")
    print(f"{'form':<20} {'intrinsic':<28} {'operands -> result':<44} " + " ".join(f"{u:>16}" for u in uarchs))
    for r in rows:
        shape = f"{', '.join(r['operands'])} -> {r['result']}"
        cost = " ".join(f"{_fmt_cost(r['costs'].get(u)):>16}" for u in uarchs)
        print(f"{r['instruction'] + '.' + r['form']:<20} {r['intrinsic']:<28} {shape:<44} {cost}")
    return 0


def _fmt_cost(c) -> str:
    return "-" if c is None else f"lat {c['latency']} tp {c['rthroughput']:g}"


@isa_app.command("check", epilog="Example: qsynth isa check --isa neon --instruction uadalp,cnt --samples 200")
def isa_check(isa: Isa = ISA,
              samples: int = typer.Option(500, callback=positive, help="inputs per instruction form"),
              z3_samples: int = typer.Option(16, callback=positive, help="inputs also evaluated with the Z3 semantics"),
              instruction: Optional[str] = typer.Option(None, help="comma-separated mnemonics to check (default: all)"),
              seed: int = typer.Option(0, help="random seed of the inputs"),
              json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> int:
    """Differential test of the semantics against real execution (exit 1 on any mismatch)."""
    from isa_specs import get_isa
    from isa_specs.check import check_isa
    spec = get_isa(isa)
    only = None
    if instruction:
        known = [i.mnemonic for i in spec.instructions]
        only = set(instruction.split(","))
        unknown = sorted(only - set(known))
        if unknown:
            raise UsageError(f"unknown {spec.name} instruction(s) {', '.join(unknown)}; accepted: {', '.join(known)}")
    with spinner(f"checking {spec.name} instructions"):
        rows = check_isa(spec, samples, z3_samples=z3_samples, seed=seed, only=only)
    if json:
        print_json(rows)
    else:
        print(f"{'instruction':<14} {'form':<10} {'intrinsic':<28} {'samples':>8} {'mismatch':>8} "
              f"{'z3':>4} {'z3 mis':>6}  status")
        for r in rows:
            print(f"{r['instruction']:<14} {r['form']:<10} {r['intrinsic']:<28} {r['samples']:>8} "
                  f"{r['mismatches']:>8} {r['z3_samples']:>4} {r['z3_mismatches']:>6}  {r['status']} {r['reason']}")
        counts = {s: sum(r["status"] == s for r in rows) for s in ("passed", "failed", "skipped")}
        print(f"{len(rows)} forms: {counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped")
    return 1 if any(r["status"] == "failed" for r in rows) else 0


def register(app: typer.Typer) -> None:
    app.add_typer(isa_app, name="isa")
