#!/usr/bin/env python3
"""ResNet-18 layers on the bitserial conv2d (tvm_integration/bench/bitserial_layers.py), each next to its
plain-TIR schedule, our int8 conv2d and onnxruntime int8/fp32, measured in the same run; one line
per (layer, config, encoding), and the rows as JSON with ``--json``. Threads: TVM_NUM_THREADS.

    TVM_NUM_THREADS=1 python scripts/bench_bitserial_layers.py --layers C6 --configs A1W1 A2W2 --json out.json
    TVM_NUM_THREADS=1 python scripts/bench_bitserial_layers.py --configs A1W1 A1W2 A2W2 A3W3 --log   # -> tuning log
    TVM_NUM_THREADS=1 python scripts/bench_bitserial_layers.py --isa avx2 --json benchmarks/layers_bitserial_avx2.json
    python scripts/bench_bitserial_layers.py --table out.json > benchmarks/layers_bitserial.md   # rows -> markdown
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

import numpy as np

from tvm_integration.bench import provenance
from tvm_integration.bench.bitserial_layers import bench_bitserial_layer, log_winners, parse_config
from tvm_integration.bench.layers import LAYERS, Layer, onnxruntime_seconds

COLUMNS = ("plain_tir", "int8_ours", "onnxruntime_int8", "onnxruntime_fp32")


def table(rows: list[dict]) -> str:
    """Markdown: one line per row (speedup = the baseline's median time / ours), then the geometric
    means of the speedups per (config, encoding, threads)."""
    isas = sorted({r.get("isa", "host") for r in rows})
    out = [*provenance.lines(rows, run_of=lambda r: r.get("run") or {"command": "python scripts/bench_bitserial_layers.py"}),
           "", "Batch 1, NHWC; medians; speedup = the baseline's time / ours "
           "(scripts/bench_bitserial_layers.py). Rows whose tile is plain TIR (1x1 layers, K at most half a "
           "kernel block) compare two builds of the same schedule in `vs plain_tir`.", ""]
    if "avx2" in isas:
        out += ["`--isa avx2`: ours and plain TIR are built for x86-64-v3 (AVX2, no AVX-512: what an AVX2 host "
                "runs); our int8 operator and onnxruntime use this host's full ISA (AVX-512), so only `vs "
                "plain_tir` is a comparison on AVX2.", ""]
    out += ["| layer | config | threads | tile | correct | ours ms | G MAC/s | " + " | ".join(f"vs {c}" for c in COLUMNS)
            + " |", "|---" * (7 + len(COLUMNS)) + "|"]
    for r in rows:
        out.append(f"| {r['layer']} | {r['config']} {r['encoding']} | {r['threads']} | {r['kernel']} | {r['correct']} | "
                   f"{r['ours_ms']:.3f} | {r['gmacs']:.0f} | " + " | ".join(f"{r['speedups'][c]:.2f}x" for c in COLUMNS) + " |")
    out += ["", "| config | threads | layers | " + " | ".join(f"geomean vs {c}" for c in COLUMNS) + " |",
            "|---" * (3 + len(COLUMNS)) + "|"]
    for key in dict.fromkeys((r["config"], r["encoding"], r["threads"]) for r in rows):
        group = [r for r in rows if (r["config"], r["encoding"], r["threads"]) == key]
        means = [float(np.exp(np.mean([np.log(r["speedups"][c]) for r in group]))) for c in COLUMNS]
        out.append(f"| {key[0]} {key[1]} | {key[2]} | {len(group)} | " + " | ".join(f"{m:.2f}x" for m in means) + " |")
    return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", nargs="+", default=list(LAYERS))
    ap.add_argument("--configs", nargs="+", default=["A1W1", "A2W2"])
    ap.add_argument("--encodings", nargs="+", default=["unipolar"])
    ap.add_argument("--trials", type=int, default=15)
    ap.add_argument("--isa", default="host", help="the tiles' ISA: host (the best this host runs), avx512 or avx2")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--table", type=Path, help="print the markdown table of a --json file and exit")
    ap.add_argument("--log", action="store_true", help="keep each row's faster exact operator (bitserial or our "
                    "int8) in this host's tuning log, which a model's 1-3-bit layer of that shape then follows")
    args = ap.parse_args()
    if args.table:
        print(table(json.loads(args.table.read_text())), end="")
        return 0
    threads = int(os.environ.get("TVM_NUM_THREADS", os.cpu_count()))
    rows, record = [], provenance.record(threads)
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.layers:
            onnx = onnxruntime_seconds(Layer(name), threads, args.trials, Path(tmp))
            for text in args.configs:
                for encoding in args.encodings:
                    r = bench_bitserial_layer(name, parse_config(text, encoding), threads, args.trials, args.isa, onnx)
                    rows.append(r)
                    s = r["speedups"]
                    print(f"{name:>4} {r['config']} {encoding:<8} correct={r['correct']} ours {r['ours_ms']:.3f} ms "
                          f"({r['gmacs']:.0f} G MAC/s)  vs plain TIR {s['plain_tir']:.2f}x  int8 ours {s['int8_ours']:.2f}x  "
                          f"ort int8 {s['onnxruntime_int8']:.2f}x  ort fp32 {s['onnxruntime_fp32']:.2f}x", flush=True)
    if args.json:
        record = provenance.finished(record)
        args.json.write_text(json.dumps([dict(r, run=record) for r in rows], indent=1))
    if args.log:
        log_winners(rows)
    return 0 if all(r["correct"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
