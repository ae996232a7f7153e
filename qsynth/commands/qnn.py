"""``qsynth compile``, ``qsynth run``, ``qsynth inspect`` and ``qsynth bench-model``: the QNN pipeline
(``tvm_integration.qnn``) on the command line.

    qsynth compile resnet_int8.onnx -o resnet_int8.so [--target host] [--threads 2]
    qsynth run resnet_int8.onnx --input x.npy --output y.npy [--input name=path.npy ...] [--profile]
    qsynth bench-model resnet_int8.onnx --fp32 resnet.onnx --threads 1 --json
    qsynth inspect w2a2.onnx [--target host] [--json]

``run`` compiles once and keeps the library next to the model (``.MODEL.<key>.so``, the key a hash of
the model, the target and the compiler's sources), so the next run loads it. Every failure is a
``ModelError``, one line and exit 1 (qsynth/cli.py); no output file is written unless the whole run
succeeded.
"""
from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path
from typing import TYPE_CHECKING, List, Literal, Optional

import typer

from qsynth.commands.common import JSON_HELP, int8_kernel_here, positive, print_json
from qsynth.progress import spinner

if TYPE_CHECKING:
    import numpy as np

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
    from tvm_integration.qnn.model import compile_model
    out = Path(output)
    _writable(out, "-o")
    with spinner(f"compiling {model}"):
        compiled = compile_model(model, target=target, threads=threads, allow_float=allow_float)
        compiled.save(out)
    print(f"{out} ({', '.join(f'{n} {d}{list(s)}' for n, (s, d) in compiled.inputs.items())} -> "
          f"{', '.join(compiled.outputs)})")
    return 0


def run(model: str = MODEL,
        input: List[str] = typer.Option(..., "--input", metavar="[NAME=]PATH.npy",
                                        help="an input array (repeat for several inputs)"),
        output: str = typer.Option(..., "--output", help=".npy (one output) or .npz"),
        target: Target = TARGET, threads: Optional[int] = THREADS, allow_float: bool = ALLOW_FLOAT,
        profile: bool = typer.Option(False, "--profile", help="print where a run's time goes, per function")) -> int:
    """Run a pre-quantized ONNX or TFLite model on numpy inputs (compiled once, the library kept next to the
    model)."""
    from tvm_integration.qnn.importer import ModelError
    from tvm_integration.qnn.model import CompiledModel, compile_model, input_specs
    out = Path(output)
    _writable(out, "--output")
    _runs_here(target)
    model_path = Path(model)
    with spinner(f"running {model}"):
        feeds = _inputs(input, list(input_specs(model_path, allow_float=allow_float)))
        artifact = _artifact_path(model_path, target)
        if artifact.is_file():
            compiled = CompiledModel.load(artifact, threads=threads)
        else:
            compiled = compile_model(model_path, target=target, threads=threads, allow_float=allow_float)
            try:
                compiled.save(artifact)
            except ModelError:
                pass                    # a read-only model directory: run without keeping the library
        outputs = compiled(feeds)
        _save_outputs(outputs, out)
        times = compiled.profile(feeds) if profile else None
    if times is not None:
        print(f"{'function':40} {'ms/run':>8} {'calls':>6}")
        for name, ms, calls in times:
            print(f"{name:40} {ms:8.3f} {calls:6}")
    return 0


def _runs_here(target: str) -> None:
    """``run`` executes what it builds: an explicit target whose kernels this host cannot run (``--target
    amx`` without AMX) is refused up front, in one line, instead of a crash in the first tile call;
    ``compile`` builds for it (a library for another machine)."""
    if target not in ("host", "neon"):      # neon: compile_model refuses it by name
        int8_kernel_here("target", target, f"; qsynth compile --target {target} builds the library for a machine "
                                           "that can")


def bench_model(model: str = MODEL,
                fp32: Optional[str] = typer.Option(None, help="the float original, for onnxruntime fp32 (a "
                                                           ".tflite model: LiteRT fp32)"),
                threads: int = typer.Option(1, callback=positive, help="TVM, onnxruntime and OpenVINO threads"),
                trials: int = typer.Option(20, callback=positive, help="timed runs"),
                json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> int:
    """A model on our build next to onnxruntime int8/fp32, OpenVINO int8 (and, on AMX hosts, OpenVINO held to
    VNNI) and TVM's own import (a .tflite model: next to LiteRT's default interpreter)."""
    from tvm_integration.bench.models import bench_model as run_bench
    from tvm_integration.qnn.model import set_threads
    set_threads(threads)
    with spinner(f"compiling and timing {model}"):
        row = run_bench(model, fp32, threads, trials)
    if json:
        print_json(row)
        return 0
    reference = row["reference"]
    print(f"{row['model']} on {row['host']}, {row['threads']} thread(s); compiled in {row['compile_s']:.1f} s; "
          f"largest difference from {reference}: {row[f'max_abs_diff_vs_{reference}']:g}")
    print(f"  {'ours':18} {row['ours_ms']:9.2f} ms")
    for name, ms in row["baselines"].items():
        print(f"  {name:18} {ms:9.2f} ms   speedup {row['speedups'][name]:.2f}x")
    if "openvino" in row:
        from tvm_integration.bench.openvino_baseline import describe
        print("\n".join(describe(name, report) for name, report in row["openvino"].items()))
    return 0


def inspect(model: str = MODEL, target: Target = TARGET, allow_float: bool = ALLOW_FLOAT,
            json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> int:
    """Each conv/dense layer's precision (AxWy, encoding), operator and kernel, without compiling."""
    from tvm_integration.qnn.importer import ModelError, load
    from tvm_integration.qnn.inspect import layers, table
    if Path(model).suffix == ".tflite":
        raise ModelError(f"{model}: inspect reads ONNX models (TFLite models are int8: every layer on the int8 "
                         "operators)")
    rows = layers(load(model, allow_float=allow_float), target)
    if json:
        print_json([dict(layer=r.layer, op=r.kind, weights=r.shape, abits=r.precision.abits, wbits=r.precision.wbits,
                         encoding=r.precision.encoding, note=r.precision.weights, operator=r.operator,
                         kernel=r.kernel) for r in rows])
    else:
        print(table(rows))
    return 0


def _artifact_path(model: Path, target: str) -> Path:
    """Where ``run`` keeps the library of ``model`` for ``target``: beside the model, named by a hash of
    the model, the target and the compiler's sources (emit, tvm_integration, and the verifier's
    fingerprint), so a change to any of them compiles anew."""
    import emit
    import tvm_integration
    from synth import trust
    digest = hashlib.sha256(model.read_bytes())
    digest.update(target.encode())
    for package in (emit, tvm_integration):
        for source in sorted(Path(package.__file__).parent.rglob("*.py")):
            digest.update(source.read_bytes())
    digest.update(trust.fingerprint().encode())
    return model.with_name(f".{model.name}.{digest.hexdigest()[:16]}.so")


def _inputs(specs: list[str], names: list[str]) -> dict[str, np.ndarray]:
    """``--input [NAME=]PATH.npy`` options -> the model's feeds (NAME may be left out of a model's only input)."""
    import numpy as np
    from tvm_integration.qnn.importer import ModelError
    feeds = {}
    for spec in specs:
        name, _, path = spec.rpartition("=")
        if not name:
            if len(names) != 1:
                raise ModelError(f"--input {spec}: the model takes {len(names)} inputs ({', '.join(names)}); "
                                 "give each as NAME=PATH.npy")
            name = names[0]
        try:
            feeds[name] = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise ModelError(f"--input {spec}: cannot read a .npy array from {path} ({e})")
    return feeds


def _save_outputs(outputs: dict[str, np.ndarray], path: Path) -> None:
    """One output: a .npy file; several: a .npz archive, each under its output name; atomically."""
    import numpy as np
    from synth.files import write_atomically
    from tvm_integration.qnn.importer import ModelError
    buffer = io.BytesIO()
    if len(outputs) == 1 and path.suffix == ".npy":
        np.save(buffer, next(iter(outputs.values())))
    elif path.suffix == ".npz":
        np.savez(buffer, **outputs)
    else:
        raise ModelError(f"--output {path}: the model has {len(outputs)} output(s); write one to a .npy file "
                         "or any number to a .npz file")
    try:
        write_atomically(path, buffer.getvalue())
    except OSError as e:
        raise ModelError(f"cannot write {path}: {e.strerror}")


def _writable(path: Path, what: str) -> None:
    """Fail before compiling when the output cannot be written."""
    from tvm_integration.qnn.importer import ModelError
    if not path.parent.is_dir() or not os.access(path.parent, os.W_OK):
        raise ModelError(f"{what} {path}: {path.parent} is not a writable directory")


def register(app: typer.Typer) -> None:
    app.command("compile", epilog="Example: qsynth compile resnet_int8.onnx -o resnet_int8.so --threads 2")(compile)
    app.command("run", epilog="Example: qsynth run resnet_int8.onnx --input x.npy --output y.npy")(run)
    app.command("inspect", epilog="Example: qsynth inspect w2a2.onnx")(inspect)
    app.command("bench-model", epilog="Example: qsynth bench-model resnet_int8.onnx --fp32 resnet.onnx --json")(
        bench_model)
