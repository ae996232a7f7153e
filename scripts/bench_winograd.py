#!/usr/bin/env python3
"""Issue 45: the 3x3 stride-1 and stride-2 convolutions of a model on the direct int8 path against integer
Winograd F(2x2, 3x3) (tvm_integration/ops/winograd.py; at stride 2 over the even/odd phases), each layer with the model's own weights and a requantizing
output stage, built as the model's compile would build it but for ``use_winograd``: ``direct`` (the
tuning log's or the untuned tile, in place or im2col as conv2d.py decides) and ``winograd`` (its s16
tile, ``winograd.choose_kernel``). Only where the host's exact tile is an int16 row (no VNNI) does a
model take Winograd; elsewhere the script says so and stops.

Columns: CPU ms per call, medians of ``--trials`` interleaved rounds, one thread; ``x``: direct /
winograd; G MAC/s: the convolution's MACs (Cout * Cin * 9 per output) over the time; products G/s:
what Winograd's GEMMs multiply (16 or 25 * tiles * Cin * Cout, tiles padded to whole row tiles) over its
time, against the multiply-pipe bound (16 MACs per ``vpmaddwd``, two a cycle); ``exact``: the two
operators' uint8 outputs equal on inputs 30% of which are 255. Writes ``<out>/winograd_<uarch>.{json,md}``.

    python scripts/bench_winograd.py [--models resnet18] [--trials 15] [--out benchmarks]
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ["TVM_NUM_THREADS"] = "1"
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402


def layers(model: Path) -> list[tuple]:
    """The distinct 3x3 convolutions of stride 1 or 2 of ``model`` (weight, NHWC input shape, stride,
    padding, dtype)."""
    from tvm_integration.bench import tuned_shapes
    seen, found = set(), []
    for kind, args in tuned_shapes.shapes(model):
        if kind != "conv2d":
            continue
        weight, shape, stride, padding, groups, dtype = args
        key = (weight.shape, shape, tuple(stride), tuple(padding))
        if weight.shape[2:] == (3, 3) and tuple(stride) in ((1, 1), (2, 2)) and groups == 1 and key not in seen:
            seen.add(key)
            found.append((weight, shape, stride[0], tuple(padding), dtype))
    return found


def measure(weight, shape, stride, padding, dtype, trials: int) -> dict:
    from tvm_integration.bench.timing import batch_timer
    from tvm_integration.ops import winograd
    from tvm_integration.ops.conv2d import build_conv2d, chosen_tiles, conv_geometry
    from tvm_integration.ops.output_stage import OutputStage, ScaleRequantize
    rng = np.random.default_rng(1)
    cols = weight.shape[0]
    stage = OutputStage(bias=rng.integers(-1000, 1000, cols).astype(np.int32),
                        requantize=ScaleRequantize((rng.random(cols) * 1e-3).astype(np.float32), 128, "uint8"))
    ops = {name: build_conv2d(weight, shape, "NHWC", stride, padding, 1, dtype, stage, use_winograd=flag).compile()
           for name, flag in (("direct", False), ("winograd", True))}
    x = rng.integers(0, 256, shape).astype(dtype)
    x[rng.random(x.shape) < 0.3] = 255
    outs = {name: op(x) for name, op in ops.items()}
    timers = [batch_timer(functools.partial(op.module["main"], *op.args(x)), clock=time.thread_time)
              for op in ops.values()]
    ms = np.median(np.array([[t() for t in timers] for _ in range(trials)]), axis=0) * 1e3
    _, (oh, ow), _ = conv_geometry(shape, "NHWC", weight.shape, (stride, stride), padding)
    tiles = -(-oh // 2) * -(-ow // 2)
    kernel = chosen_tiles(weight, shape, "NHWC", stride, padding, 1, dtype, use_winograd=True)[1]
    rows = -(-tiles // kernel.spec.mr) * kernel.spec.mr
    return {"weight": list(weight.shape), "input": list(shape), "stride": stride, "macs": oh * ow * cols * int(np.prod(weight.shape[1:])),
            "products": winograd.TRANSFORMS[stride].positions * rows * shape[3] * cols, "tile": kernel.spec.name,
            "ms": dict(zip(ops, (float(m) for m in ms))),
            "exact": bool(np.array_equal(outs["direct"], outs["winograd"]))}


# scripts/peak_x86.c on Zen 3: vpmaddwd 6.43 G/s (two a cycle), 16 MACs each (docs/measurements.md)
MULTIPLY_BOUND_GMACS = 102.9


def markdown(data: dict) -> str:
    from tvm_integration.bench import provenance
    lines = ["# Integer Winograd F(2x2, 3x3) (stride 2: over the even/odd phases) against the direct int8 "
             "convolution", "",
             "Written by scripts/bench_winograd.py (its docstring says what each column is). CPU ms per call, one "
             f"thread; x: direct / winograd; products: Winograd's multiplies as MACs, against the multiply-pipe "
             f"bound of {MULTIPLY_BOUND_GMACS} G MAC/s measured on Zen 3 (scripts/peak_x86.c).", "",
             f"Run: {provenance.line(data['run'])}", "",
             "| model | layer | direct ms | winograd ms (x) | direct G MAC/s | winograd G MAC/s | products G/s (% of bound) "
             "| s16 tile | exact |", "|---|---|---|---|---|---|---|---|---|"]
    for r in data["rows"]:
        d, w = r["ms"]["direct"], r["ms"]["winograd"]
        products = r["products"] / w / 1e6
        lines.append(f"| {r['model']} | {r['weight']} at {r['input'][1]}x{r['input'][2]}, stride {r['stride']} "
                     f"| {d:.3f} | {w:.3f} "
                     f"({d / w:.2f}x) | {r['macs'] / d / 1e6:.1f} | {r['macs'] / w / 1e6:.1f} | {products:.1f} "
                     f"({100 * products / MULTIPLY_BOUND_GMACS:.0f}%) | {r['tile']} | {r['exact']} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet18", help="comma-separated built-in models (scripts/make_models.py)")
    ap.add_argument("--trials", type=int, default=15)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks")
    a = ap.parse_args()
    from isa_specs import host
    from synth.files import write_atomically
    from tvm_integration.bench import int8_models, provenance
    from tvm_integration.kernels import selection
    from tvm_integration.ops import winograd
    kernel = selection.int8_kernel()
    if not winograd.pays(kernel):
        print(f"this host's int8 tile is {kernel.spec.name}: its convolutions do not take Winograd", file=sys.stderr)
        return 1
    run = provenance.record(1)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in a.models.split(","):
            model = int8_models.write_pair(name, Path(tmp))[0]
            for weight, shape, stride, padding, dtype in layers(model):
                rows.append({"model": name, **measure(weight, shape, stride, padding, dtype, a.trials)})
                print(json.dumps(rows[-1]), flush=True)
    data = {"run": provenance.finished(run), "rows": rows}
    a.out.mkdir(parents=True, exist_ok=True)
    stem = a.out / f"winograd_{host.model().uarch}"
    write_atomically(stem.with_suffix(".json"), json.dumps(data, indent=1) + "\n")
    write_atomically(stem.with_suffix(".md"), markdown(data))
    print(markdown(data))
    return 0 if all(r["exact"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
