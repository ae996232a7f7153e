"""The work of ``qsynth compile``, ``qsynth run`` and ``qsynth bench-model`` (their options are declared in
qsynth/commands/qnn.py): the QNN pipeline on the command line.

    qsynth compile resnet_int8.onnx -o resnet_int8.so [--target host] [--threads 2]
    qsynth run resnet_int8.onnx --input x.npy --output y.npy [--input name=path.npy ...] [--profile]
    qsynth bench-model resnet_int8.onnx --fp32 resnet.onnx --threads 1 --json
    qsynth inspect w2a2.onnx [--target host] [--json]

``run`` compiles once and keeps the library next to the model (``.MODEL.<key>.so``, the key a hash of
the model, the target and the compiler's sources), so the next run loads it. Every failure is one line
and a non-zero exit; no output file is written unless the whole run succeeded.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
from pathlib import Path

import numpy as np

from synth.files import write_atomically

PACKAGE = Path(__file__).resolve().parent.parent


def artifact_path(model: Path, target: str) -> Path:
    digest = hashlib.sha256(model.read_bytes())
    digest.update(target.encode())
    for source in sorted(PACKAGE.rglob("*.py")):
        digest.update(source.read_bytes())
    from synth import trust
    digest.update(trust.fingerprint().encode())
    return model.with_name(f".{model.name}.{digest.hexdigest()[:16]}.so")


def _inputs(specs: list[str], names: list[str]) -> dict[str, np.ndarray]:
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
    from tvm_integration.qnn.importer import ModelError
    if not path.parent.is_dir() or not os.access(path.parent, os.W_OK):
        raise ModelError(f"{what} {path}: {path.parent} is not a writable directory")


def cmd_compile(args) -> int:
    from tvm_integration.qnn.model import compile_model
    out = Path(args.output)
    _writable(out, "-o")
    model = compile_model(args.model, target=args.target, threads=args.threads, allow_float=args.allow_float)
    model.save(out)
    print(f"{out} ({', '.join(f'{n} {d}{list(s)}' for n, (s, d) in model.inputs.items())} -> "
          f"{', '.join(model.outputs)})")
    return 0


def cmd_run(args) -> int:
    from tvm_integration.qnn.model import CompiledModel, compile_model, input_specs
    from tvm_integration.qnn.importer import ModelError
    out = Path(args.output)
    _writable(out, "--output")
    model_path = Path(args.model)
    feeds = _inputs(args.input, list(input_specs(model_path, allow_float=args.allow_float)))
    artifact = artifact_path(model_path, args.target)
    if artifact.is_file():
        compiled = CompiledModel.load(artifact, threads=args.threads)
    else:
        compiled = compile_model(model_path, target=args.target, threads=args.threads, allow_float=args.allow_float)
        try:
            compiled.save(artifact)
        except ModelError:
            pass                        # a read-only model directory: run without keeping the library
    outputs = compiled(feeds)
    _save_outputs(outputs, out)
    if args.profile:
        print(f"{'function':40} {'ms/run':>8} {'calls':>6}")
        for name, ms, calls in compiled.profile(feeds):
            print(f"{name:40} {ms:8.3f} {calls:6}")
    return 0


def cmd_bench_model(args) -> int:
    from tvm_integration.qnn.bench import bench_model
    from tvm_integration.qnn.model import set_threads
    set_threads(args.threads)
    row = bench_model(args.model, args.fp32, args.threads, args.trials)
    if args.json:
        print(json.dumps(row, indent=1))
        return 0
    reference = row["reference"]
    print(f"{row['model']} on {row['host']}, {row['threads']} thread(s); compiled in {row['compile_s']:.1f} s; "
          f"largest difference from {reference}: {row[f'max_abs_diff_vs_{reference}']:g}")
    print(f"  {'ours':18} {row['ours_ms']:9.2f} ms")
    for name, ms in row["baselines"].items():
        print(f"  {name:18} {ms:9.2f} ms   speedup {row['speedups'][name]:.2f}x")
    return 0


def cmd_inspect(args) -> int:
    from tvm_integration.qnn.importer import ModelError, load
    from tvm_integration.qnn.inspect import layers, table
    if Path(args.model).suffix == ".tflite":
        raise ModelError(f"{args.model}: inspect reads ONNX models (TFLite models are int8: every layer on the int8 "
                         "operators)")
    rows = layers(load(args.model, allow_float=args.allow_float), args.target)
    if args.json:
        print(json.dumps([dict(layer=r.layer, op=r.kind, weights=r.shape, abits=r.precision.abits,
                               wbits=r.precision.wbits, encoding=r.precision.encoding, note=r.precision.weights,
                               operator=r.operator, kernel=r.kernel) for r in rows], indent=1))
    else:
        print(table(rows))
    return 0
