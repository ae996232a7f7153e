"""Instruction-set specifications: one module per ISA family, each exporting ``ISA``."""
from __future__ import annotations

import importlib

from isa_specs.isa import ISA

ISA_NAMES = ("neon", "avx2", "avx512", "amx")


def get_isa(name: str) -> ISA:
    if name not in ISA_NAMES:
        raise KeyError(f"unknown ISA {name!r}; accepted: {', '.join(ISA_NAMES)}")
    return importlib.import_module(f"isa_specs.{name}").ISA
