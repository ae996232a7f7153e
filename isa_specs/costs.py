"""Per-form cost figures (latency, reciprocal throughput) on named micro-architectures.

The figures live in ``isa_specs/cost_tables/<isa>.json``, written by ``scripts/measure_costs.py`` from
LLVM's scheduling models through llvm-mca, so every number carries the model and command it came
from instead of being a hand-typed guess. A form the model has no real figure for (AMX tiles in
LLVM 14) is listed under ``unavailable`` with the reason, which ``cost`` puts in its KeyError.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import z3

COSTS_DIR = Path(__file__).parent / "cost_tables"
# Costs in integer hundredths of a cycle (every figure in the tables is a multiple of 0.01), so the
# symbolic cost of a sketch is bit-vector arithmetic like the rest of a synthesis query.
SCALE = 100        # cost units per cycle
BITS = 32          # width of a symbolic cost (no overflow below 4e7 cycles)

# Micro-architectures per ISA, the first being the default. Each must select a distinct LLVM 14
# scheduling model (the script checks this): LLVM 14 models cortex-a72 with its Cortex-A57 model,
# neoverse-n1 with that same model, and sapphirerapids with the Skylake-server model, so neither
# neoverse-n1 nor sapphirerapids adds information for NEON/AVX; AMX has no other CPU.
UARCHS: dict[str, tuple[str, ...]] = {
    "neon": ("cortex-a53", "cortex-a72", "cortex-a55"),
    "avx2": ("icelake-server", "skylake-avx512"),
    "avx512": ("icelake-server", "skylake-avx512"),
    "amx": ("sapphirerapids",),
}


@dataclass(frozen=True)
class Cost:
    latency: int          # cycles from operands ready to result ready
    rthroughput: float    # cycles per instruction when many independent ones issue back to back
    uarch: str
    source: str           # the scheduling model and llvm-mca command the figures come from


class Unavailable(KeyError):
    """The scheduling model has no figure for this instruction (reason in the message)."""


@cache
def table(isa_name: str) -> dict:
    """The parsed ``cost_tables/<isa>.json`` (read once per process)."""
    path = COSTS_DIR / f"{isa_name}.json"
    if not path.exists():
        raise KeyError(f"no cost table for ISA {isa_name!r} ({path} missing): run scripts/measure_costs.py {isa_name}")
    return json.loads(path.read_text())


def emits_nothing(isa_name: str, form_id: str, uarch: str) -> bool:
    """clang emits no instruction for the form (a register view such as vget_low): measure_costs.py
    records it as unavailable with an empty lowering (``to ``, without``)."""
    return "to ``, without" in table(isa_name).get("unavailable", {}).get(form_id, {}).get(uarch, "")


def cost(isa_name: str, form_id: str, uarch: str | None = None) -> Cost:
    """Cost of ``form_id`` (``mnemonic.arrangement``) on ``uarch`` (default: the ISA's first)."""
    if isa_name not in UARCHS:
        raise KeyError(f"unknown ISA {isa_name!r}; accepted: {', '.join(UARCHS)}")
    uarch = uarch or UARCHS[isa_name][0]
    t = table(isa_name)
    if uarch not in t["source"]:
        raise KeyError(f"{isa_name}: no figures for uarch {uarch!r}; measured: {', '.join(sorted(t['source']))}")
    if reason := t.get("unavailable", {}).get(form_id, {}).get(uarch):
        raise Unavailable(f"{isa_name}: no cost for {form_id} on {uarch}: {reason}")
    try:
        figures = t["forms"][form_id][uarch]
    except KeyError:
        raise KeyError(f"{isa_name}: no cost for form {form_id!r} on {uarch!r}: "
                       f"rerun scripts/measure_costs.py {isa_name}") from None
    return Cost(figures["latency"], figures["rthroughput"], uarch, t["source"][uarch])


def bv(units: int):
    """A cost in units as a symbolic cost."""
    return z3.BitVecVal(units, BITS)


def bv_max(a, b):
    return z3.If(z3.UGT(a, b), a, b)
