"""The ``qsynth`` command line: one sub-command per stage of the pipeline."""
from __future__ import annotations

import argparse
import json
import sys

from isa_specs import ISA_NAMES, get_isa


class UsageError(Exception):
    """Bad input from the user: reported on one line, exit status 2, nothing written."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):   # one line, not argparse's usage dump
        raise UsageError(message)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer (>= 1), got {value}")
    return value


# ---------------------------------------------------------------- isa
def cmd_isa_list(args) -> int:
    from isa_specs import costs
    isa = get_isa(args.isa)
    rows = []
    for insn in isa.instructions:
        for form in insn.forms:
            fid = insn.form_id(form)
            row = {"instruction": insn.mnemonic, "form": form.arrangement, "intrinsic": form.intrinsic,
                   "prototype": form.prototype, "feature": insn.feature,
                   "operands": [op.ctype.name for op in form.registers], "result": form.result.name,
                   "imm": list(form.imm), "ref": insn.ref, "costs": {}}
            for uarch in costs.UARCHS.get(isa.name, ()):
                try:
                    c = costs.cost(isa.name, fid, uarch)
                    row["costs"][uarch] = {"latency": c.latency, "rthroughput": c.rthroughput}
                except KeyError:
                    pass
            rows.append(row)
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    uarchs = costs.UARCHS.get(isa.name, ())
    print(f"{isa.name}: {isa.description}; {len(isa.instructions)} instructions, {len(rows)} forms")
    print(f"{'form':<20} {'intrinsic':<28} {'operands -> result':<44} " + " ".join(f"{u:>16}" for u in uarchs))
    for r in rows:
        shape = f"{', '.join(r['operands'])} -> {r['result']}"
        cost = " ".join(f"{_fmt_cost(r['costs'].get(u)):>16}" for u in uarchs)
        print(f"{r['instruction'] + '.' + r['form']:<20} {r['intrinsic']:<28} {shape:<44} {cost}")
    return 0


def _fmt_cost(c) -> str:
    return "-" if c is None else f"lat {c['latency']} tp {c['rthroughput']:g}"


def cmd_isa_check(args) -> int:
    from isa_specs.check import check_isa
    isa = get_isa(args.isa)
    only = None
    if args.instruction:
        known = [i.mnemonic for i in isa.instructions]
        only = set(args.instruction.split(","))
        unknown = sorted(only - set(known))
        if unknown:
            raise UsageError(f"unknown {isa.name} instruction(s) {', '.join(unknown)}; accepted: {', '.join(known)}")
    rows = check_isa(isa, args.samples, z3_samples=args.z3_samples, seed=args.seed, only=only)
    if args.json:
        print(json.dumps(rows, indent=1))
    else:
        print(f"{'instruction':<14} {'form':<10} {'intrinsic':<28} {'samples':>8} {'mismatch':>8} "
              f"{'z3':>4} {'z3 mis':>6}  status")
        for r in rows:
            print(f"{r['instruction']:<14} {r['form']:<10} {r['intrinsic']:<28} {r['samples']:>8} "
                  f"{r['mismatches']:>8} {r['z3_samples']:>4} {r['z3_mismatches']:>6}  {r['status']} {r['reason']}")
        counts = {s: sum(r["status"] == s for r in rows) for s in ("passed", "failed", "skipped")}
        print(f"{len(rows)} forms: {counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped")
    return 1 if any(r["status"] == "failed" for r in rows) else 0


# ---------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="qsynth", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    isa = sub.add_parser("isa", help="instruction-set specifications").add_subparsers(
        dest="isa_command", required=True, parser_class=_Parser)
    ls = isa.add_parser("list", help="list instructions, lane shapes, intrinsics and costs")
    ls.add_argument("--isa", required=True, choices=ISA_NAMES)
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(run=cmd_isa_list)
    ck = isa.add_parser("check", help="differential test of the semantics against real execution")
    ck.add_argument("--isa", required=True, choices=ISA_NAMES)
    ck.add_argument("--samples", type=_positive, default=500, help="inputs per instruction form")
    ck.add_argument("--z3-samples", type=_positive, default=16, help="inputs also evaluated with the Z3 semantics")
    ck.add_argument("--instruction", help="comma-separated mnemonics to check (default: all)")
    ck.add_argument("--seed", type=int, default=0)
    ck.add_argument("--json", action="store_true")
    ck.set_defaults(run=cmd_isa_check)
    return p


def main(argv: list[str] | None = None) -> int:
    from isa_specs.check import ToolchainError
    try:
        args = build_parser().parse_args(argv)
        return args.run(args)
    except UsageError as e:
        print(f"qsynth: error: {e}", file=sys.stderr)
        return 2
    except ToolchainError as e:
        print(f"qsynth: toolchain error: {e}", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
