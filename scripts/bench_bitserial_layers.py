#!/usr/bin/env python3
"""ResNet-18 layers on the bitserial conv2d (tvm_integration/bitserial_bench.py), each next to its
plain-TIR schedule, our int8 conv2d and onnxruntime int8/fp32, measured in the same run; one line
per (layer, config, encoding), and the rows as JSON with ``--json``. Threads: TVM_NUM_THREADS.

    TVM_NUM_THREADS=1 python scripts/bench_bitserial_layers.py --layers C6 --configs A1W1 A2W2 --json out.json
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

from tvm_integration.bench import LAYERS, Layer, onnxruntime_seconds
from tvm_integration.bitserial_bench import bench_bitserial_layer, parse_config


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", nargs="+", default=list(LAYERS))
    ap.add_argument("--configs", nargs="+", default=["A1W1", "A2W2"])
    ap.add_argument("--encodings", nargs="+", default=["unipolar"])
    ap.add_argument("--trials", type=int, default=15)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    threads = int(os.environ.get("TVM_NUM_THREADS", os.cpu_count()))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.layers:
            onnx = onnxruntime_seconds(Layer(name), threads, args.trials, Path(tmp))
            for text in args.configs:
                for encoding in args.encodings:
                    r = bench_bitserial_layer(name, parse_config(text, encoding), threads, args.trials, onnx=onnx)
                    rows.append(r)
                    s = r["speedups"]
                    print(f"{name:>4} {r['config']} {encoding:<8} correct={r['correct']} ours {r['ours_ms']:.3f} ms "
                          f"({r['gmacs']:.0f} G MAC/s)  vs plain TIR {s['plain_tir']:.2f}x  int8 ours {s['int8_ours']:.2f}x  "
                          f"ort int8 {s['onnxruntime_int8']:.2f}x  ort fp32 {s['onnxruntime_fp32']:.2f}x", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0 if all(r["correct"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
