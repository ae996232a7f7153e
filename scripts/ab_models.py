#!/usr/bin/env python3
"""Whole models of two (or more) builds of qsynth side by side with OpenVINO, in one process, one
thread: the A/B of a change. ``compile`` saves a model built by the tree given with ``--tree`` (a git
worktree of the commit to compare; default this one) as a library; ``time`` loads the libraries and
OpenVINO on the same file and runs them in turn, rounds of ``--warm`` untimed and ``--calls`` timed
inferences each, and prints each one's median and least ms per inference over the rounds and its
ratio to OpenVINO's median. ``--between`` adds an onnxruntime session of another model (a float
one) to the rounds: each build then starts its round after that model's weights passed through the
caches, as in bench_models.py's rotation (docs/amx.md, "Session 23").

    git worktree add /tmp/old <commit>
    python scripts/ab_models.py compile --tree /tmp/old resnet18.int8.onnx old.so
    python scripts/ab_models.py compile resnet18.int8.onnx new.so
    python scripts/ab_models.py time resnet18.int8.onnx old.so new.so [--rounds 25] [--warm 3] [--calls 10]
                                     [--between resnet18.fp32.onnx]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ["TVM_NUM_THREADS"] = "1"


def compile_library(tree: Path, model: Path, out: Path) -> None:
    sys.path.insert(0, str(tree))
    from tvm_integration.qnn.runtime.model import compile_model
    compile_model(model, threads=1).save(out)


def time_libraries(model: Path, libraries: list[Path], rounds: int, warm: int, calls: int, between: Path | None):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import numpy as np
    import openvino as ov
    from tvm_integration.bench.models import onnxruntime_session
    from tvm_integration.qnn.runtime.model import CompiledModel, input_specs
    try:
        request = ov.Core().compile_model(str(model), "CPU", {"INFERENCE_NUM_THREADS": 1,
                                                              "PERFORMANCE_HINT": "LATENCY"}).create_infer_request()
    except RuntimeError as e:          # OpenVINO's message: many lines, the reason last
        sys.exit(f"OpenVINO cannot compile {model.name}: {str(e).strip().splitlines()[-1]}")
    feeds = {name: np.random.default_rng(0).random(shape, dtype=np.float32)
             for name, (shape, _) in input_specs(model, allow_float=True).items()}
    runs = {}
    for library in libraries:
        built = CompiledModel.load(library, threads=1)
        args = built.arguments(feeds)
        runs[library.name] = lambda main=built.vm["main"], args=args: main(*args)
    runs["openvino_int8"] = lambda: request.infer(feeds)
    if between is not None:
        session = onnxruntime_session(between, 1)
        inputs = dict(zip((i.name for i in session.get_inputs()), feeds.values()))   # by position
        runs[f"onnxruntime {between.name} (in the rounds, not compared)"] = lambda: session.run(None, inputs)
    ms = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            for _ in range(warm):
                run()
            start = time.perf_counter()
            for _ in range(calls):
                run()
            ms[name].append((time.perf_counter() - start) / calls * 1e3)
    reference = float(np.median(ms["openvino_int8"]))
    for name, values in ms.items():
        median = float(np.median(values))
        print(f"{name:40s} median {median:7.3f} ms  least {min(values):7.3f}  / OpenVINO {median / reference:.3f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    c = sub.add_parser("compile", help="save the model as built by --tree")
    c.add_argument("--tree", type=Path, default=Path(__file__).resolve().parent.parent)
    c.add_argument("model", type=Path)
    c.add_argument("out", type=Path)
    t = sub.add_parser("time", help="time the libraries and OpenVINO in turn")
    t.add_argument("model", type=Path)
    t.add_argument("libraries", type=Path, nargs="+")
    t.add_argument("--rounds", type=int, default=25)
    t.add_argument("--warm", type=int, default=3)
    t.add_argument("--calls", type=int, default=10)
    t.add_argument("--between", type=Path)
    a = ap.parse_args()
    if a.command == "compile":
        compile_library(a.tree.resolve(), a.model, a.out)
    else:
        time_libraries(a.model, a.libraries, a.rounds, a.warm, a.calls, a.between)
    return 0


if __name__ == "__main__":
    sys.exit(main())
