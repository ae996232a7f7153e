"""Write docs/cli.md, the command-line reference, from the typer app itself (every command's help,
options, defaults and example), so the reference says what ``--help`` says. tests/test_docs.py
fails when the committed file differs from what this script writes: rerun it after changing an option.

    python scripts/cli_reference.py            # rewrites docs/cli.md
"""
from __future__ import annotations

import sys
from pathlib import Path

import typer
import typer._click as click

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from qsynth import cli  # noqa: E402
from synth.files import write_atomically  # noqa: E402

OUT = ROOT / "docs" / "cli.md"


def _leaves(command, path=()):
    subs = getattr(command, "commands", None)
    if not subs:
        return [(path, command)]
    return [leaf for name, sub in sorted(subs.items()) for leaf in _leaves(sub, (*path, name))]


def _params(command, name: str) -> list[str]:
    ctx = click.Context(command, info_name=name)
    rows = [p.get_help_record(ctx) for p in command.params]
    rows = [r for r in rows if r]
    if not rows:
        return []
    cell = lambda s: s.replace("|", "\\|")
    return ["| option | description |", "|---|---|"] + [f"| `{cell(o)}` | {cell(h)} |" for o, h in rows]


def reference() -> str:
    app = typer.main.get_command(cli.build_app())
    lines = ["# Command-line reference", "",
             "Generated from the `qsynth` typer app by `python scripts/cli_reference.py`; do not edit by hand "
             "(tests/test_docs.py checks it is current). `qsynth COMMAND --help` prints the same.", "",
             "Exit status of every command: 0 the work succeeded, 1 it failed, 2 bad usage; an error is one line "
             "on stderr (`qsynth --debug ...` shows its traceback).", "",
             "## `qsynth` (options before the command)", ""]
    lines += _params(app, "qsynth")
    leaves = _leaves(app)
    lines += ["", "Commands: " + ", ".join(f"[`{' '.join(p)}`](#qsynth-{'-'.join(p)})" for p, _ in leaves) + "."]
    for path, command in leaves:
        name = "qsynth " + " ".join(path)
        ctx = click.Context(command, info_name=name)
        lines += ["", f"## `{name}`", "", " ".join((command.help or "").split()), "",
                  f"    {command.get_usage(ctx)}", ""]
        lines += _params(command, name)
        if command.epilog:
            lines += ["", f"{command.epilog.replace('Example: ', 'Example: `')}`"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    write_atomically(OUT, reference())
    print(OUT)
