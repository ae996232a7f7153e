#!/usr/bin/env python3
"""ResNet-18 layers (tvm_integration/bench.py's C2-C12, batch 1, NHWC) on the bitserial conv2d, next
to, in the same run: the same schedule in plain TIR (T.popcount, the old topi shape), our int8
conv2d, and onnxruntime fp32 and int8. Medians of ``--trials`` runs; our output checked against
numpy from the unpacked values. Threads: TVM_NUM_THREADS (set before TVM starts) and onnxruntime's
intra-op threads.

    TVM_NUM_THREADS=1 python scripts/bench_bitserial_layers.py --layers C6 --configs A1W1 A2W2 --json out.json
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

import numpy as np

from tvm_integration.bench import LAYERS, Layer, onnxruntime_seconds, tvm_seconds
from tvm_integration.ops.bitserial_conv2d import bitserial_conv2d
from tvm_integration.ops.bitserial_gemm import Config


def parse_config(text: str, encoding: str) -> Config:
    a, w = text.upper().removeprefix("A").split("W")
    return Config(int(a), int(w), encoding)


def conv_reference(x, w, stride, pad):
    b, h, wd, c = x.shape
    o, _, kh, kw = w.shape
    xp = np.pad(x.astype(np.int64), ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    oh = (h + 2 * pad - kh) // stride + 1
    out = np.zeros((b, oh, oh, o), np.int64)
    for i in range(kh):
        for j in range(kw):
            out += xp[:, i:i + stride * oh:stride, j:j + stride * oh:stride, :] @ w[:, :, i, j].astype(np.int64).T
    return out


def row(name: str, config: Config, trials: int, threads: int, fp_int8: dict) -> dict:
    layer = Layer(name)
    rng = np.random.default_rng(14)
    codes = rng.integers(0, 2 ** config.wbits, layer.w.shape)
    w = codes if config.encoding == "unipolar" else 2 * codes - (2 ** config.wbits - 1)
    x = rng.integers(0, 2 ** config.abits, layer.x.shape).astype(np.uint8)
    ours = bitserial_conv2d(w, x.shape, config, layer.s, layer.pad)
    plain = bitserial_conv2d(w, x.shape, config, layer.s, layer.pad, use_kernel=False)
    correct = bool(np.array_equal(ours(x), conv_reference(x, w, layer.s, layer.pad)))
    t = {"ours": tvm_seconds(ours.module, ours.args(x), trials),
         "plain_tir": tvm_seconds(plain.module, plain.args(x), trials)}
    int8 = layer.ours()
    t["int8_ours"] = tvm_seconds(int8.module, int8.args(layer.x), trials)
    t |= fp_int8
    return {"layer": name, "config": f"A{config.abits}W{config.wbits}", "encoding": config.encoding,
            "threads": threads, "correct": correct, "ours_ms": t["ours"] * 1e3,
            "gmacs": layer.macs / t["ours"] / 1e9,
            "baselines": {k: v * 1e3 for k, v in t.items() if k != "ours"},
            "speedups": {k: v / t["ours"] for k, v in t.items() if k != "ours"}}


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
                    r = row(name, parse_config(text, encoding), args.trials, threads, onnx)
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
