#!/usr/bin/env python3
"""Tune the int8 operators' tile per shape on this host and write the tuning log
(tvm_integration/tuning_logs/<uarch>-<tag>.json): the ResNet-18 layers of the layer benchmark (C2-C12) and
every tensorized convolution and dense of the named models as the QNN pipeline compiles them: the
built-in CNNs (int8_models), the encoders of scripts/bench_transformers.py (bert_l4_s128_static, ...) and
quantized .onnx and .tflite files named by path (/tmp/zoo/resnet50.int8.onnx, tests/data/tflite/*.tflite).
Each candidate tile is compiled, its output compared with the others' on random data, and timed
by CPU time, one thread (the least of ``--trials`` rounds that run a batch of every candidate in
turn). ``--models ""``: the benchmark layers alone.

    python scripts/tune_layers.py [--models resnet18,mobilenet_v2,bert_l4_s128_static] [--trials 9] [--no-layers]

A name that is neither a model above nor an existing .onnx or .tflite file is refused before any tuning
(one line, exit 2).
"""
from __future__ import annotations

import argparse
import functools
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

os.environ["TVM_NUM_THREADS"] = "1"      # CPU time of this thread is the operator's
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tvm_integration.bench import tuned_shapes  # noqa: E402
from tvm_integration.bench.layers import LAYERS, Layer  # noqa: E402
from tvm_integration.bench.timing import batch_timer  # noqa: E402
from tvm_integration.kernels import tuning  # noqa: E402
from tvm_integration.ops.conv2d import build_conv2d  # noqa: E402
from tvm_integration.ops.dense import build_dense  # noqa: E402
from tvm_integration.ops.output_stage import OutputStage, ScaleRequantize  # noqa: E402


MODEL_FILES = (".onnx", ".tflite")


def unknown_model(name: str) -> str | None:
    """Why ``name`` names no model ``quantized_model`` can give, or None."""
    from scripts import bench_transformers
    from tvm_integration.bench import int8_models
    if Path(name).suffix in MODEL_FILES:
        return None if Path(name).is_file() else f"{name}: no such file"
    if name in bench_transformers.MODELS or name in int8_models.BUILT_IN:
        return None
    return (f"{name!r} is no model: accepted are {', '.join([*int8_models.BUILT_IN, *bench_transformers.MODELS])} "
            f"and paths of quantized {' or '.join(MODEL_FILES)} files")


def quantized_model(name: str, directory: Path) -> Path:
    """The int8 ONNX file of a built-in model (tvm_integration/bench/int8_models.py) or of an encoder of
    scripts/bench_transformers.py, written into ``directory``; or ``name`` itself, a quantized .onnx or
    .tflite file (the zoo's, scripts/make_zoo.py; TFLite's, read by its own frontend)."""
    from scripts import bench_transformers
    from tvm_integration.bench import int8_models
    if Path(name).suffix in MODEL_FILES:
        return Path(name)
    if name in bench_transformers.MODELS:
        bench_transformers.build(directory, name)
        return directory / f"{name}.int8.onnx"
    return Path(int8_models.write_pair(name, directory)[0])


def model_shapes(name: str) -> list[tuple]:
    """(kind, arguments) of every tensorized op of a model, as qnn/lower/bind.py builds them."""
    with tempfile.TemporaryDirectory() as directory:
        return tuned_shapes.shapes(quantized_model(name, Path(directory)))


def layer_shapes() -> list[tuple]:
    shapes = []
    for name in LAYERS:
        layer = Layer(name)
        shapes.append(("conv2d", (layer.w, layer.x.shape, (layer.s, layer.s), (layer.pad,) * 4, 1, "uint8")))
    return shapes


def measure(kind: str, args: tuple, candidates, trials: int) -> dict[str, float]:
    """Least CPU ms per call of each candidate tile over ``trials`` batches, after checking that all
    compute the same output: on the shared 2-vCPU host wall-clock medians tripled under load (C6's
    6x64 VNNI tile 1.15 ms by wall clock, 0.34 ms by CPU time). The output stage
    is the models' (bias, per-channel requantize to u8): its vector shape depends on the tile, and it
    decides some layers (a 1x1 56x56x64: 6x64 0.094 ms, 7x64 0.105; equal with an int32 output)."""
    rng = np.random.default_rng(1)
    cols = args[0].shape[0]
    stage = OutputStage(bias=rng.integers(-1000, 1000, cols).astype(np.int32),
                        requantize=ScaleRequantize((rng.random(cols) * 1e-3).astype(np.float32), 128, "uint8"))
    if kind == "dense":
        weight, m, dtype = args
        ops = [build_dense(weight, m, dtype, stage, kernel=k).compile() for k in candidates]
    else:
        weight, shape, stride, padding, groups, dtype = args
        ops = [build_conv2d(weight, shape, "NHWC", stride, padding, groups, dtype, stage, kernel=k).compile()
               for k in candidates]
    info = np.iinfo(ops[0].in_dtype)
    x = np.random.default_rng(0).integers(info.min, info.max + 1, ops[0].in_shape).astype(ops[0].in_dtype)
    outputs = [op(x) for op in ops]
    if any(not np.array_equal(o, outputs[0]) for o in outputs):
        raise AssertionError(f"{tuned_shapes.key_of(kind, args)}: the candidate tiles disagree")
    # interleaved rounds: a burst of load on the shared machine hits every candidate alike
    timers = [batch_timer(functools.partial(op.module["main"], *op.args(x)), clock=time.thread_time) for op in ops]
    samples = [[timer() for timer in timers] for _ in range(trials)]
    return {k.intrin: min(round_[i] for round_ in samples) * 1e3 for i, k in enumerate(candidates)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet18,mobilenet_v2")
    ap.add_argument("--trials", type=int, default=9)
    ap.add_argument("--no-layers", action="store_true", help="the models' shapes only, not the benchmark layers")
    a = ap.parse_args()
    names = [name for name in a.models.split(",") if name]
    wrong = [why for why in map(unknown_model, names) if why]
    if wrong:
        print(f"tune_layers: {'; '.join(wrong)}", file=sys.stderr)
        return 2
    logging.getLogger("root").setLevel(logging.ERROR)
    path = tuning.host_log()
    # the models' layers first: a benchmark layer of the same shape (and key) has random weights, -128
    # among them, which only the w16 tiles admit, so it would time those alone for the model's layer too
    shapes = [s for name in names for s in model_shapes(name)]
    shapes += [] if a.no_layers else layer_shapes()
    seen = set()
    for kind, args in shapes:
        key = tuned_shapes.key_of(kind, args)
        if key in seen:
            continue
        seen.add(key)
        times = measure(kind, args, tuned_shapes.candidates(kind, args), a.trials)
        best = tuning.record(key, times, path)
        print(f"{key}: {best}  " + "  ".join(f"{k.split('_')[-2]} {v:.3f} ms" for k, v in times.items()), flush=True)
    print(f"{len(seen)} shapes -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
