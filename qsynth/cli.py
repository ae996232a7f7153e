"""The ``qsynth`` command line, built with typer: one module per command (or group of commands) under
``qsynth/commands/``. A command module holds the command line: its options, the checks of their
values, the files it reads and writes and the printing of the result; the work is done by calls of
typed functions of the library (``synth``, ``emit``, ``tvm_integration``) or of the modules beside
this one that only the commands use (the sweep and its Ray executor, the host report, the benchmark
report and its figures, the progress display).

Conventions every command keeps:

* ``--help`` describes it and ends with an example (the ``epilog``); ``--json`` wherever a result is
  printed (the JSON on stdout, nothing else there);
* long steps show progress on stderr when it is a terminal (``qsynth.progress``);
* the exit status is 0 when the work succeeded, 1 when it failed (a kernel not proved, a mismatch, a
  cache entry that does not re-prove, a model refused, a missing toolchain; a command returns 1 or raises
  ``qsynth.commands.common.WorkFailed``), 2 for bad usage (typer's own argument errors, and
  ``qsynth.commands.common.UsageError`` raised by a command);
* an error is one line on stderr, ``qsynth: ...``; ``qsynth --debug ...`` shows the traceback instead.

Adding a command is one new module and one line here:

1. write ``qsynth/commands/<name>.py`` with the command as a function whose parameters are
   ``typer.Option``/``typer.Argument``, returning its exit status, importing the library inside the
   function (``qsynth --help`` imports every command module), and a ``register(app)`` that adds it::

       def register(app: typer.Typer) -> None:
           app.command("bench-model", epilog="Example: qsynth bench-model m.onnx --json")(bench_model)

   (a group of sub-commands: a ``typer.Typer()`` of its own and ``app.add_typer(group, name=...)``,
   as ``qsynth/commands/cache.py`` does);
2. add the module's name to ``COMMANDS`` below.
"""
from __future__ import annotations

import importlib
import sys

import typer

COMMANDS = (
    "qsynth.commands.isa",
    "qsynth.commands.synthesize",
    "qsynth.commands.sweep",
    "qsynth.commands.host",
    "qsynth.commands.bench_layer",
    "qsynth.commands.cache",
    "qsynth.commands.kernels",
    "qsynth.commands.qnn",
    "qsynth.commands.demo",
    "qsynth.commands.report",
)


class _State:
    debug = False


def _root(verbose: bool = typer.Option(False, "-v", "--verbose", help="log every CEGIS attempt"),
          debug: bool = typer.Option(False, "--debug", help="show the traceback of an error")) -> None:
    """Program synthesis of quantized SIMD microkernels, proved with Z3, kept in a proof-carrying
    kernel library, emitted as C and run through TVM.

    Example: qsynth synth --isa neon --kernel bitserial --abits 1 --wbits 1 --encoding unipolar"""
    _State.debug = debug
    if verbose:
        import logging
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")


def build_app() -> typer.Typer:
    app = typer.Typer(name="qsynth", no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                      rich_markup_mode="markdown",
                      context_settings={"help_option_names": ["-h", "--help"]})
    app.callback()(_root)
    for name in COMMANDS:
        importlib.import_module(name).register(app)
    return app


def _fail(message: str, code: int) -> int:
    print(f"qsynth: {message}", file=sys.stderr)
    return code


def main(argv: list[str] | None = None) -> int:
    """Run ``qsynth`` with ``argv`` (default: the process's arguments); returns the exit status."""
    from isa_specs.check import ToolchainError
    from synth.cache import CacheError
    from tvm_integration.torch_kept_out import keep_torch_out_of_tvm
    keep_torch_out_of_tvm()                             # no command passes torch tensors to TVM: 3 s less a start
    _State.debug = False
    command = typer.main.get_command(build_app())
    try:
        status = command.main(args=sys.argv[1:] if argv is None else list(argv), prog_name="qsynth",
                              standalone_mode=False)
        return status if isinstance(status, int) else 0
    except typer.TyperException as e:                   # bad usage: typer's checks and our UsageError
        # `qsynth` or `qsynth cache` alone: the help. typer keeps this class in its private _click
        # package and tells it by name too (typer/rich_utils.py)
        if type(e).__name__ == "NoArgsIsHelpError":
            print(e.format_message(), file=sys.stderr)
            return 2
        message = " ".join(e.format_message().replace("Value error, ", "").split())
        return _fail(f"error: {message}", e.exit_code)
    except typer.Abort:                                 # Ctrl-C
        return _fail("interrupted", 130)
    except (BrokenPipeError, SystemExit) as e:          # output piped into `head`: not an error
        if not isinstance(e, BrokenPipeError) and not isinstance(e.__context__, BrokenPipeError):
            raise                                       # (typer turns a broken pipe into exit 1)
        import os
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as e:
        if _State.debug:
            raise
        if isinstance(e, CacheError):                   # an entry corrupt or not re-proved here: never used
            return _fail(f"kernel cache: {e}", 1)
        if isinstance(e, ToolchainError):
            return _fail(f"toolchain error: {e}", 1)
        from tvm_integration.qnn.semantics.errors import ModelError
        if isinstance(e, ModelError):                   # a model the QNN pipeline refuses
            return _fail(f"model: {e}", 1)
        return _fail(f"{type(e).__name__}: {' '.join(str(e).split())} (qsynth --debug ... shows the traceback)", 1)


if __name__ == "__main__":
    sys.exit(main())
