"""What the command modules share: the usage error, option checks, JSON output, the ISA choices."""
from __future__ import annotations

import json

from typing import Literal

import typer

ISAS = ("neon", "avx2", "avx512", "amx")
Isa = Literal[ISAS]


class UsageError(typer.TyperException):
    """Bad input from the user: reported on one line, exit status 2, nothing written."""
    exit_code = 2


class WorkFailed(typer.TyperException):
    """The work itself failed (e.g. no program within the time limit): one line, exit status 1."""
    exit_code = 1


def positive(value: int | None) -> int | None:
    """Option callback: a positive integer (or the option left out)."""
    if value is not None and value < 1:
        raise typer.BadParameter(f"must be a positive integer (>= 1), got {value}")
    return value


def positive_seconds(value: float | None) -> float | None:
    if value is not None and not value > 0:
        raise typer.BadParameter(f"must be a positive number of seconds, got {value:g}")
    return value


def int8_kernel_here(option: str, isa: str, hint: str = ""):
    """The int8 kernel ``--<option> <isa>`` selects, refused as bad usage (with ``hint``) when this
    host cannot run it: a command that executes what it builds stops before building."""
    from tvm_integration.kernels import selection
    try:
        kernel = selection.int8_kernel(isa)
    except selection.SelectionError as e:
        raise UsageError(str(e))
    if (why := selection.usable(kernel)) is not None:
        raise UsageError(f"--{option} {isa}: this host cannot run {kernel.intrin} ({why}){hint}")
    return kernel


def print_json(obj) -> None:
    print(json.dumps(obj, indent=1))


JSON_HELP = "print the result as JSON on stdout"


def require_avx2() -> None:
    """UsageError unless this host runs AVX2, the least every x86 kernel of qsynth needs (x86-64-v3:
    Haswell, Zen 1 and later)."""
    from isa_specs import host
    why = host.lacks("avx2", host.cpu_flags())
    if why:
        raise UsageError(f"this host cannot run qsynth's x86 kernels: {why} (they need x86-64 with AVX2: "
                         "Intel Haswell, AMD Zen or later)")
