#!/usr/bin/env python3
"""ResNet-18 layers on the NEON bitserial conv2d, costed with llvm-mca on Arm core models next to the
plain-TIR schedule built for the same core (tvm_integration/bench/bitserial_layers.mca_bitserial_layer):
each operator cross-compiled for AArch64, run under qemu-aarch64 once (correct against numpy, and
its blocks counted), every block it ran costed by llvm-mca. One line per (layer, config, encoding).
The issue's NEON target: the K loop (popcounting blocks) at most 0.5x the plain-TIR one's on Cortex-A53.

    python scripts/mca_bitserial_layers.py --layers C6 --configs A1W1 --json out.json
    python scripts/mca_bitserial_layers.py --json benchmarks/layers_bitserial_neon.json   # every layer
    python scripts/mca_bitserial_layers.py --table benchmarks/layers_bitserial_neon.json > benchmarks/layers_bitserial_neon.md
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from tvm_integration.bench import mca, provenance
from tvm_integration.bench.bitserial_layers import mca_bitserial_layer, parse_config
from tvm_integration.bench.layers import LAYERS
from tvm_integration.qemu import cross

CORES = ("cortex-a53", "cortex-a72")


def tools() -> dict:
    version = lambda cmd: subprocess.run(cmd, capture_output=True, text=True).stdout.splitlines()[0].strip()
    return {"llvm-mca": f"{mca.tool('llvm-mca-19', 'llvm-mca')}: "
                        + next(line.strip() for line in subprocess.run([mca.tool("llvm-mca-19", "llvm-mca"), "--version"],
                               capture_output=True, text=True).stdout.splitlines() if "version" in line),
            "qemu": version([cross.QEMU[0], "--version"]), "cc": version([cross.CC, "--version"])}


def run_of(run: dict) -> dict:
    """The record of the run a --json file holds (provenance.record); of a file from before records, its
    command."""
    return run.get("run") or {"command": run["command"]}


def table(run: dict) -> str:
    """Markdown: per row and core the K loop's and the operator's llvm-mca cycles, ours and plain TIR,
    and their ratio; then the geometric means of the ratios per (config, encoding)."""
    rows, cores = run["rows"], run["cores"]
    out = [f"NEON bitserial conv2d, ResNet-18 layers, batch 1, NHWC: llvm-mca estimates ({run['tools']['llvm-mca']}), "
           "no Arm hardware. Each operator is built for the core (LLVM target `mcpu`, AArch64 v8.0 + NEON), run once "
           f"under qemu ({run['tools']['qemu']}) on a random input, checked against numpy, and every block of its "
           "code that ran is costed by llvm-mca (steady state, no cache misses) times the number of runs "
           "(tvm_integration/bench/mca.py). *K loop*: the blocks that popcount (the GEMM's K loop and its remainder); "
           "*operator*: every block (packing, K loop, lane sums, output stage). ratio = ours / plain TIR: "
           "below 1 ours takes fewer cycles. Issue 14's target: K loop ratio <= 0.5 on Cortex-A53.",
           "", *provenance.lines([run], run_of=run_of), ""]
    head = "| layer | config | tile | correct | " + " | ".join(
        f"{c} K loop Mcycles ours / plain | {c} K loop ratio | {c} operator ratio" for c in cores) + " |"
    out += [head, "|---" * (4 + 3 * len(cores)) + "|"]
    for r in rows:
        cells = []
        for c in cores:
            e = r["cores"][c]
            cells += [f"{e['ours']['popcount_blocks'] / 1e6:.2f} / {e['plain_tir']['popcount_blocks'] / 1e6:.2f}",
                      f"{e['ratio']['popcount_blocks']:.2f}", f"{e['ratio']['operator']:.2f}"]
        out.append(f"| {r['layer']} | {r['config']} {r['encoding']} | {r['kernel']} | {r['correct']} | " + " | ".join(cells) + " |")
    out += ["", "Geometric means over the layers (rows whose tile is plain TIR, K below half a block, included at 1.0, "
            "and listed):", "", "| config | layers | " + " | ".join(f"{c} K loop | {c} operator" for c in cores)
            + " | plain-TIR rows |", "|---" * (3 + 2 * len(cores)) + "|"]
    for key in dict.fromkeys((r["config"], r["encoding"]) for r in rows):
        group = [r for r in rows if (r["config"], r["encoding"]) == key]
        gm = lambda c, part: float(np.exp(np.mean([np.log(r["cores"][c]["ratio"][part]) for r in group])))
        plain = ", ".join(r["layer"] for r in group if r["kernel"].startswith("plain")) or "none"
        out.append(f"| {key[0]} {key[1]} | {len(group)} | "
                   + " | ".join(f"{gm(c, 'popcount_blocks'):.3f}x | {gm(c, 'operator'):.3f}x" for c in cores) + f" | {plain} |")
    return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", nargs="+", default=list(LAYERS))
    ap.add_argument("--configs", nargs="+", default=["A1W1", "A2W2"])
    ap.add_argument("--encodings", nargs="+", default=["unipolar", "hybrid"])
    ap.add_argument("--cores", nargs="+", default=list(CORES))
    ap.add_argument("--json", type=Path)
    ap.add_argument("--table", type=Path, help="print the markdown table of a --json file and exit")
    args = ap.parse_args()
    if args.table:
        print(table(json.loads(args.table.read_text())), end="")
        return 0
    for why in (cross.missing_tools(), mca.missing_tools()):
        if why:
            print(f"error: {why}", file=sys.stderr)
            return 1
    record, rows = provenance.record(threads=1), []
    for name in args.layers:
        for text in args.configs:
            for encoding in args.encodings:
                r = mca_bitserial_layer(name, parse_config(text, encoding), tuple(args.cores))
                rows.append(r)
                print(f"{name:>4} {r['config']} {encoding:<8} correct={r['correct']} " + "  ".join(
                    f"{c}: K loop {r['cores'][c]['ratio']['popcount_blocks']:.2f}x operator "
                    f"{r['cores'][c]['ratio']['operator']:.2f}x" for c in args.cores), flush=True)
    run = {"run": provenance.finished(record), "tools": tools(), "cores": args.cores, "rows": rows}
    if args.json:
        args.json.write_text(json.dumps(run, indent=1))
    return 0 if all(r["correct"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
