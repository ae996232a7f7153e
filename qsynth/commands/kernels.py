"""``qsynth emit`` and ``qsynth test-kernels``: the C kernel library and its test on this machine
(the compiled-kernel harness is ``emit/harness.py``)."""
from __future__ import annotations

import json as json_module
import sys
from pathlib import Path
from typing import List, Literal, Optional

import typer

from qsynth.commands.common import ISAS, JSON_HELP, positive

ISA = typer.Option("all", help="only this ISA's entries")
IsaOrAll = Literal[(*ISAS, "all")]
CONFIGS = typer.Option(None, "--configs", metavar="NAME_SUBSTRING[,...]",
                       help="only entries whose name contains one of these (comma-separated, or repeat the option)")


def _configs(values: Optional[List[str]]) -> list[str] | None:
    names = [c for v in values or () for c in v.split(",") if c]
    return names or None


def _selected(isa: str, configs: list[str] | None) -> tuple[list[dict], list[str]]:
    """The selected entries proved here; every refused one is named on stderr."""
    from emit.harness import selected_entries
    entries, refused = selected_entries(isa, configs)
    for line in refused:
        print(f"qsynth: refusing {line}", file=sys.stderr)
    return entries, refused


def _none_selected(isa: str, configs: list[str] | None) -> int:
    print(f"qsynth: no cache entries match --isa {isa}" + (f" --configs {' '.join(configs)}" if configs else ""),
          file=sys.stderr)
    return 1


def _compilers(text: str) -> list[str]:
    from emit.toolchain import COMPILERS
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
    entries, refused = _selected(isa, _configs(configs))
    if refused:
        print(f"qsynth: emit failed: {len(refused)} selected entries are not proved here (see above); "
              "nothing written", file=sys.stderr)
        return 1
    if not entries:
        return _none_selected(isa, _configs(configs))
    from emit import EmitError
    from emit.library import emit_library
    try:
        manifest = emit_library(entries, output)
    except EmitError as e:
        print(f"qsynth: emit failed: {e}", file=sys.stderr)
        return 1
    if json:
        print(json_module.dumps(manifest, indent=1))
        return 0
    for k in manifest["kernels"]:
        print(f"{k['cache_key']}  {k['file']:<48} {k['function']}")
    print(f"{len(manifest['kernels'])} kernels, {output / manifest['header']}, {output / 'manifest.json'}")
    return 0


def test_kernels(isa: IsaOrAll = ISA, configs: Optional[List[str]] = CONFIGS,
                 samples: int = typer.Option(1000, callback=positive, help="inputs per kernel and compiler"),
                 compilers: str = typer.Option("gcc,clang", callback=_compilers, help="comma-separated subset of gcc,clang"),
                 seed: int = typer.Option(0, help="random seed of the inputs"),
                 json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> int:
    """Compile every emitted kernel and test it against the numpy spec (exit 1 on any failure)."""
    entries, refused = _selected(isa, _configs(configs))
    if not entries and not refused:
        return _none_selected(isa, _configs(configs))
    from emit.harness import check_entries
    from qsynth.progress import track
    rows = list(track(check_entries(entries, compilers, samples, seed), len(entries) * len(compilers), "testing kernels"))
    if json:
        print(json_module.dumps(rows, indent=1))
    else:
        _print_kernel_tests(rows, refused)
    return 1 if refused or any(r["status"] in ("failed", "error") for r in rows) else 0


def _print_kernel_tests(rows: list[dict], refused: list[str]) -> None:
    for r in rows:
        print(f"{r['cache_key']}  {r['name']:<44} {r['compiler']:<6} {r['execution']:<8} {r['samples']:>7} samples  {r['status']}"
              + (f" {r['reason']}" if r["status"] in ("failed", "skipped") else ""))
        if r["status"] == "error":
            print(f"  cache key {r['cache_key']}: {r['reason']}")
        if "first_mismatch" in r:
            print(f"  cache key {r['cache_key']}: first differing input "
                  + json_module.dumps(r["first_mismatch"], indent=None))
    counts = {s: sum(r["status"] == s for r in rows) for s in ("passed", "failed", "error", "skipped")}
    print(f"{len(rows)} kernel builds: " + ", ".join(f"{v} {k}" for k, v in counts.items())
          + (f"; {len(refused)} entries refused (not proved here)" if refused else ""))


def register(app: typer.Typer) -> None:
    app.command("emit", epilog="Example: qsynth emit --isa neon --configs a1w1,int8 -o out/")(emit)
    app.command("test-kernels", epilog="Example: qsynth test-kernels --isa avx512 --samples 200 --compilers gcc")(
        test_kernels)
