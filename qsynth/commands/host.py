"""``qsynth host``: this CPU, and which ISAs and cached kernels it can run."""
from __future__ import annotations

import typer

from qsynth.commands.common import JSON_HELP, print_json


def host(json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> int:
    """This host's CPU model (vendor, family/model, LLVM's name for the model number and the features
    the flags show that its CPU lacks or the reverse, the TVM target from the flags), which ISAs and
    cached kernels it can run, and why not."""
    from isa_specs import host as host_model
    from qsynth import host_report
    rep = host_report.report(host_model.model(), host_report.library_kernels())
    if json:
        print_json(rep)
    else:
        print(host_report.render(rep))
    return 0


def register(app: typer.Typer) -> None:
    app.command("host", epilog="Example: qsynth host --json")(host)
