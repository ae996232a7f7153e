"""``qsynth compile``, ``qsynth run`` and ``qsynth bench-model``: the QNN pipeline (the work is
``qsynth/models.py``'s ``cmd_*`` functions; this module declares their options)."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import List, Literal, Optional

import typer

from qsynth.commands.common import JSON_HELP, positive

TARGETS = ("host", "avx512", "avx2", "amx", "neon")
MODEL = typer.Argument(..., help="a pre-quantized ONNX model (QDQ or QOperator) or a full-integer TFLite model")
TARGET = typer.Option("host", help="which kernels to compile for")
Target = Literal[TARGETS]
THREADS = typer.Option(None, callback=positive, help="TVM threads (default: TVM's)")
ALLOW_FLOAT = typer.Option(False, "--allow-float", help="run a model with no quantized op, in float")


def compile(model: str = MODEL,
            output: str = typer.Option(..., "-o", "--output", help="the library (.so; its signature goes beside, "
                                                                    ".so.json)"),
            target: Target = TARGET, threads: Optional[int] = THREADS, allow_float: bool = ALLOW_FLOAT) -> int:
    """Compile a pre-quantized ONNX or TFLite model to a library."""
    from qsynth.progress import spinner
    from qsynth import models
    with spinner(f"compiling {model}"):
        return models.cmd_compile(SimpleNamespace(model=model, output=output, target=target, threads=threads,
                                               allow_float=allow_float))


def run(model: str = MODEL,
        input: List[str] = typer.Option(..., "--input", metavar="[NAME=]PATH.npy",
                                        help="an input array (repeat for several inputs)"),
        output: str = typer.Option(..., "--output", help=".npy (one output) or .npz"),
        target: Target = TARGET, threads: Optional[int] = THREADS, allow_float: bool = ALLOW_FLOAT,
        profile: bool = typer.Option(False, "--profile", help="print where a run's time goes, per function")) -> int:
    """Run a pre-quantized ONNX or TFLite model on numpy inputs (compiled once, the library kept next to the
    model)."""
    from qsynth.progress import spinner
    from qsynth import models
    with spinner(f"running {model}"):
        return models.cmd_run(SimpleNamespace(model=model, input=list(input), output=output, target=target,
                                           threads=threads, allow_float=allow_float, profile=profile))


def bench_model(model: str = MODEL,
                fp32: Optional[str] = typer.Option(None, help="the float original, for onnxruntime fp32 (a "
                                                           ".tflite model: LiteRT fp32)"),
                threads: int = typer.Option(1, callback=positive, help="TVM and onnxruntime threads"),
                trials: int = typer.Option(20, callback=positive, help="timed runs"),
                json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> int:
    """A model on our build next to onnxruntime int8/fp32 and TVM's own import (a .tflite model: next to
    LiteRT's default interpreter)."""
    from qsynth.progress import spinner
    from qsynth import models
    with spinner(f"compiling and timing {model}"):
        return models.cmd_bench_model(SimpleNamespace(model=model, fp32=fp32, threads=threads, trials=trials, json=json))


def inspect(model: str = MODEL, target: Target = TARGET, allow_float: bool = ALLOW_FLOAT,
            json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> int:
    """Each conv/dense layer's precision (AxWy, encoding), operator and kernel, without compiling."""
    from qsynth import models
    return models.cmd_inspect(SimpleNamespace(model=model, target=target, allow_float=allow_float, json=json))


def register(app: typer.Typer) -> None:
    app.command("compile", epilog="Example: qsynth compile resnet_int8.onnx -o resnet_int8.so --threads 2")(compile)
    app.command("run", epilog="Example: qsynth run resnet_int8.onnx --input x.npy --output y.npy")(run)
    app.command("inspect", epilog="Example: qsynth inspect w2a2.onnx")(inspect)
    app.command("bench-model", epilog="Example: qsynth bench-model resnet_int8.onnx --fp32 resnet.onnx --json")(
        bench_model)
