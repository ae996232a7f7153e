#!/usr/bin/env python3
"""ResNet-18 conv layers C2-C12 (the synthesis paper's Table 1), batch 1: our int8 conv2d (NHWC,
tensorized with the host's cached kernel, bias + float requantize to u8 fused) next to, in the same
run, onnxruntime int8 (a one-conv QDQ model quantized by onnxruntime: u8 activations, s8 per-channel
weights) and fp32, OpenVINO on the same int8 model (and on AMX hosts OpenVINO held to VNNI), TVM 0.27's
own lowering of the integer conv (R.nn.conv2d(u8, s8, out_dtype=int32),
legalized, default pipeline), and our schedule with the kernel replaced by plain TIR. Every time is
the median of ``--trials`` runs; the peak of the tile's multiply (scripts/peak_x86.c: vpdpbusd zmm, or
vpmaddwd ymm for the exact AVX2 tiles) is probed before each layer. Our output is checked against numpy in the same run.

    python scripts/bench_layers.py [--layers C2,C6] [--threads 1,2] [--trials 9] [--out benchmarks]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tvm_integration.bench import provenance  # noqa: E402
from tvm_integration.bench.layers import LAYERS, OPENVINO_NOTE, bench_layer  # noqa: E402


def markdown(rows: list[dict], meta: dict) -> str:
    names = ["onnxruntime_int8", "onnxruntime_fp32", "openvino_int8", "openvino_int8_vnni", "tvm_default",
             "ours_plain_tir"]
    unavailable = sorted({f"{name} ({r['threads']} thread(s)): {report['unavailable']}" for r in rows
                          for name, report in r.get("openvino", {}).items() if "unavailable" in report})
    steps = [report["max_diff_steps"] for r in rows for report in r.get("openvino", {}).values()
             if report.get("max_diff_steps") is not None]
    lines = ["# ResNet-18 conv layers, int8, batch 1", "",
             f"- Run: {provenance.described(meta['run'])}" if "run" in meta else
             f"- Run: {provenance.described(meta)}; host {meta['host']}", "", f"Kernels: {meta['kernel']}.", "",
             "Ours: NHWC conv2d + bias + requantize to u8, tensorized with the cached kernel. Times: median ms; "
             "x = baseline time / ours. % peak: of one core's rate of the tile's multiply (probed before each row: "
             "vpdpbusd zmm, 64 MACs, for the VNNI tiles; vpmaddwd ymm, 16 MACs, for the exact AVX2 ones) "
             "times the threads. The machine's 2 cores are shared with other jobs: expect noise, most at 2 threads. "
             "openvino_int8: OpenVINO's CPU plugin on the onnxruntime int8 model (LATENCY hint, the row's threads); "
             "openvino_int8_vnni: the same with ONEDNN_MAX_CPU_ISA=AVX512_CORE_VNNI (AMX hosts only); each in a worker "
             f"process timed in turn with ours. {OPENVINO_NOTE}.", "",
             "| layer | threads | tile | ours ms | G MAC/s | % peak | correct | " + " | ".join(names) + " |",
             "|---|---|---|---|---|---|---|" + "---|" * len(names)]
    for r in rows:
        cells = [f"{r['baselines'][n]:.3f} ({r['speedups'][n]:.2f}x)" if n in r["baselines"] else "-" for n in names]
        pct = f"{r['percent_of_peak']:.0f}%" if r["percent_of_peak"] else "-"
        tile = r["kernel"].split("_")[-2].rsplit("x", 1)[0]
        lines.append(f"| {r['layer']} | {r['threads']} | {tile} | {r['ours_ms']:.3f} | {r['gmacs']:.1f} | {pct} | "
                     f"{r['correct']} | " + " | ".join(cells) + " |")
    for t in sorted({r["threads"] for r in rows}):
        sel = [r for r in rows if r["threads"] == t]
        geo = np.exp(np.mean([np.log(r["speedups"]["onnxruntime_int8"]) for r in sel]))
        lines.append(f"\nGeometric mean speedup over onnxruntime int8, {t} thread(s): {geo:.2f}x")
    if steps:
        lines.append(f"\nOpenVINO's outputs differ from onnxruntime int8's by at most {max(steps):g} "
                     f"step{'' if max(steps) == 1 else 's'} of the output's quantization scale")
    if unavailable:
        lines.append("\nOpenVINO unavailable: " + "; ".join(unavailable))
    one = {r["layer"]: r["ours_ms"] for r in rows if r["threads"] == 1}
    two = {r["layer"]: r["ours_ms"] for r in rows if r["threads"] == 2}
    if one.keys() & two.keys():
        lines.append("\nOurs, 2-thread speedup over 1 thread: " + ", ".join(
            f"{name} {one[name] / two[name]:.2f}x" for name in LAYERS if name in one and name in two))
    return "\n".join(lines) + "\n"


def worker(a) -> None:
    """One thread count (TVM reads TVM_NUM_THREADS when its thread pool starts): JSON rows on stdout."""
    for name in a.layers.split(","):
        print(json.dumps(bench_layer(name, int(a.threads), a.trials)), flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", default=",".join(LAYERS))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--trials", type=int, default=9)
    ap.add_argument("--out", default=str(ROOT / "benchmarks"))
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        worker(a)
        return 0
    rows, record = [], provenance.record([int(t) for t in a.threads.split(",")])
    for threads in a.threads.split(","):
        cmd = [sys.executable, __file__, "--worker", "--threads", threads, "--layers", a.layers, "--trials", str(a.trials)]
        proc = subprocess.run(cmd, env=dict(os.environ, TVM_NUM_THREADS=threads), capture_output=True, text=True)
        if proc.returncode:
            print(proc.stderr[-3000:], file=sys.stderr)
            return 1
        rows += [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
        print("\n".join(json.dumps(r) for r in rows[-len(a.layers.split(",")):]), flush=True)
    rows.sort(key=lambda r: (list(LAYERS).index(r["layer"]), r["threads"]))
    meta = {"run": provenance.finished(record),
            "kernel": ", ".join(f"`{k}`" for k in sorted({r["kernel"] for r in rows}))
            + " (per layer: the tuning log's tile, tvm_integration/tuning_logs/)"}
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "layers.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    (out / "layers.md").write_text(markdown(rows, meta))
    return 0 if all(r["correct"] for r in rows) else 1

if __name__ == "__main__":
    sys.exit(main())
