"""``qsynth emit`` and ``qsynth test-kernels``: the C kernel library and its test on this machine
(the work is ``synth/emit_cli.py``'s)."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import List, Literal, Optional

import typer

from synth.commands.common import ISAS, JSON_HELP, positive

ISA = typer.Option("all", help="only this ISA's entries")
IsaOrAll = Literal[(*ISAS, "all")]
CONFIGS = typer.Option(None, "--configs", metavar="NAME_SUBSTRING[,...]",
                       help="only entries whose name contains one of these (comma-separated, or repeat the option)")


def _configs(values: Optional[List[str]]) -> list[str] | None:
    names = [c for v in values or () for c in v.split(",") if c]
    return names or None


def _compilers(text: str) -> list[str]:
    from synth.emit import COMPILERS
    names = [c for c in text.split(",") if c]
    unknown = [c for c in names if c not in COMPILERS]
    if unknown or not names:
        raise typer.BadParameter(f"unknown compiler(s) {', '.join(unknown) or repr(text)}; "
                                 f"accepted: {', '.join(COMPILERS)}")
    return names


def emit(isa: IsaOrAll = ISA, configs: Optional[List[str]] = CONFIGS,
         output: Path = typer.Option(..., "-o", "--output", help="output directory"),
         json: bool = typer.Option(False, "--json", help="print manifest.json's content on stdout")) -> int:
    """Write the C kernel library (one header per kernel, qsynth_kernels.h, manifest.json) from the
    entries proved here; nothing is written if any selected entry does not re-prove (exit 1)."""
    from synth import emit_cli
    return emit_cli.cmd_emit(SimpleNamespace(isa=isa, configs=_configs(configs), output=output, json=json))


def test_kernels(isa: IsaOrAll = ISA, configs: Optional[List[str]] = CONFIGS,
                 samples: int = typer.Option(1000, callback=positive, help="inputs per kernel and compiler"),
                 compilers: str = typer.Option("gcc,clang", callback=_compilers, help="comma-separated subset of gcc,clang"),
                 seed: int = typer.Option(0, help="random seed of the inputs"),
                 json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> int:
    """Compile every emitted kernel and test it against the numpy spec (exit 1 on any failure)."""
    from synth import emit_cli
    return emit_cli.cmd_test_kernels(SimpleNamespace(isa=isa, configs=_configs(configs), samples=samples,
                                                     compilers=compilers, seed=seed, json=json))


def register(app: typer.Typer) -> None:
    app.command("emit", epilog="Example: qsynth emit --isa neon --configs a1w1,int8 -o out/")(emit)
    app.command("test-kernels", epilog="Example: qsynth test-kernels --isa avx512 --samples 200 --compilers gcc")(
        test_kernels)
