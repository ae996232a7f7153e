#!/usr/bin/env python3
"""ResNet-18 conv layers C2-C12, batch 1, int8 (bias + requantize to u8 fused, NHWC): our conv2d on the
AMX tile next to the same operator on the AVX-512 VNNI tiles, timed side by side in one run (interleaved
rounds, medians), each checked against numpy first. What kernels/selection.py's choice of AMX rests on.

    python scripts/bench_amx_layers.py [--layers C2,C6] [--trials 15] [--out benchmarks]

Writes ``<out>/amx_layers.json`` and ``.md``. Needs a host with AMX (one thread: TVM_NUM_THREADS=1).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ["TVM_NUM_THREADS"] = "1"
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from tvm_integration.bench import provenance  # noqa: E402
from synth.files import write_atomically  # noqa: E402
from tvm_integration.bench.layers import LAYERS, Layer  # noqa: E402
from tvm_integration.bench.timing import SelfTimed, batch_timer, side_by_side, tvm_batch_timer  # noqa: E402
from tvm_integration.kernels import selection  # noqa: E402

ISAS = ("amx", "avx512")


def cpu_seconds(function, args, trials: int) -> float:
    """The least CPU time (this thread's) per call over ``trials`` batches: what the operator costs
    when it has the core, which a machine shared with other jobs hides from the wall clock (on 2 busy
    vCPUs the wall-clock medians moved 2-5x between runs)."""
    run = batch_timer(lambda: function(*args), clock=time.thread_time)
    return min(run() for _ in range(trials))


def bench(name: str, trials: int) -> dict:
    layer = Layer(name)
    expected = layer.reference()
    ops = {isa: layer.ours(isa=isa) for isa in ISAS}
    correct = {isa: bool(np.array_equal(op(layer.x), expected)) for isa, op in ops.items()}
    timers = {isa: tvm_batch_timer(op.module, op.args(layer.x)) for isa, op in ops.items()}
    times = side_by_side(timers["amx"], {"avx512": lambda: SelfTimed(timers["avx512"])}, trials, 1)
    ms = {"amx": times["ours"] * 1e3, "avx512": times["avx512"] * 1e3}
    cpu_ms = {isa: cpu_seconds(op.module["main"], op.args(layer.x), trials) * 1e3 for isa, op in ops.items()}
    return {"layer": name, "macs": layer.macs, "correct": correct, "ms": ms, "cpu_ms": cpu_ms,
            "gmacs": {isa: layer.macs / (t * 1e-3) / 1e9 for isa, t in cpu_ms.items()},
            "kernels": {isa: layer.kernel(isa).spec.name for isa in ISAS},
            "amx_speedup": cpu_ms["avx512"] / cpu_ms["amx"]}


def markdown(rows: list[dict], meta: dict) -> str:
    lines = ["# ResNet-18 conv layers on AMX and on AVX-512 VNNI, int8, batch 1, one thread", "",
             f"- Run: {provenance.described(meta['run'])}" if "run" in meta else
             f"- Run: {provenance.described(meta)}; host {meta['host']}", "",
             "Load average above 1 on the 2 vCPUs: other jobs shared the core and the ratios are noisy.", "",
             "Both columns are our conv2d (bias + requantize to u8 fused, NHWC), the tile the only difference; "
             "each output checked against numpy first. CPU ms: the least CPU time of this thread per call over "
             "the batches (G MAC/s and the speedup from these); wall ms: medians of interleaved rounds.", "",
             "| layer | MACs (M) | AMX tile | AMX CPU ms | G MAC/s | VNNI tile | VNNI CPU ms | G MAC/s | AMX speedup "
             "| wall ms AMX / VNNI | correct |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['layer']} | {r['macs'] / 1e6:.0f} | {r['kernels']['amx']} | {r['cpu_ms']['amx']:.3f} | "
                     f"{r['gmacs']['amx']:.0f} | {r['kernels']['avx512']} | {r['cpu_ms']['avx512']:.3f} | "
                     f"{r['gmacs']['avx512']:.0f} | {r['amx_speedup']:.2f}x | {r['ms']['amx']:.3f} / "
                     f"{r['ms']['avx512']:.3f} | {all(r['correct'].values())} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", default=",".join(LAYERS))
    parser.add_argument("--trials", type=int, default=15)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks")
    args = parser.parse_args()
    names = args.layers.split(",")
    if unknown := [n for n in names if n not in LAYERS]:
        parser.error(f"unknown layers {unknown}; accepted: {', '.join(LAYERS)}")
    kernel = selection.int8_kernel("amx")
    if (why := selection.usable(kernel)) is not None:
        parser.error(f"this host cannot run AMX: {why}")
    rows, record = [], provenance.record(1)
    for name in names:
        rows.append(bench(name, args.trials))
        r = rows[-1]
        print(f"{name}: amx {r['cpu_ms']['amx']:.3f} ms, avx512 {r['cpu_ms']['avx512']:.3f} ms (CPU), "
              f"{r['amx_speedup']:.2f}x, correct={r['correct']}", flush=True)
    meta = {"run": provenance.finished(record)}
    args.out.mkdir(parents=True, exist_ok=True)
    write_atomically(args.out / "amx_layers.json", json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    write_atomically(args.out / "amx_layers.md", markdown(rows, meta))
    return 0 if all(all(r["correct"].values()) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
