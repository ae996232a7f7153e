#!/usr/bin/env python3
"""ResNet-18 layers on the NEON int8 conv2d, costed with llvm-mca on Arm core models next to the plain-TIR
schedule built for the same core (tvm_integration/bench/neon_int8_layers.mca_layer): each operator
cross-compiled for AArch64 with the core as LLVM's mcpu (its tile: kernels/neon_int8.tile_for), run under
qemu-aarch64 once (correct against numpy, its blocks counted), every block it ran costed by llvm-mca.

    python scripts/mca_neon_int8_layers.py --layers C12 --cores cortex-a53 --json out.json
    python scripts/mca_neon_int8_layers.py --json benchmarks/layers_neon_int8.json --md benchmarks/layers_neon_int8.md
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from tvm_integration.bench import mca, provenance
from tvm_integration.bench.neon_int8_layers import NEON_LAYERS, mca_layer
from tvm_integration.qemu import cross

CORES = ("cortex-a53", "cortex-a72")


def tools() -> dict:
    first = lambda cmd: next((line.strip() for line in subprocess.run(cmd, capture_output=True, text=True, check=False)
                              .stdout.splitlines() if "version" in line.lower()), cmd[0])
    return {"llvm-mca": first([mca.tool("llvm-mca-19", "llvm-mca"), "--version"]),
            "qemu": first([cross.QEMU[0], "--version"]), "cc": first([cross.CC, "--version"])}


def run_of(run: dict) -> dict:
    """The record of the run a --json file holds (provenance.record); of a file from before records, its
    command."""
    return run.get("run") or {"command": run["command"]}


def table(run: dict) -> str:
    rows, cores = run["rows"], run["cores"]
    out = [(f"NEON int8 conv2d (NHWC, batch 1, bias + float requantize to u8 fused), ResNet-18's layers (C1: the "
           f"7x7 stride-2 stem), llvm-mca estimates ({run['tools']['llvm-mca']}), no Arm hardware. Each operator is "
           "built for the core (LLVM `mcpu`; Cortex-A53 and A72 are v8.0, no dot product, so the tile is the "
           "umull/uadalp one, `int8_u8u8_rows_4x4x8_neon`), run once under qemu "
           f"({run['tools']['qemu']}) on a random input, checked against numpy, and every block of its code that "
           "ran is costed by llvm-mca (steady state: no cache misses, no branch mispredictions) times its runs "
           "(tvm_integration/bench/mca.py). *plain*: conv2d.py's plain-TIR schedule of the same tile shape, built "
           "for the same core. *K loop*: the blocks holding a vector multiply; *operator*: every block. "
           "ratio = ours / plain: below 1 ours takes fewer cycles."),
           "", *provenance.lines([run], run_of=run_of), ""]
    out += [("| layer | MMACs | correct | " + " | ".join(
        f"{c} Mcycles ours / plain | {c} cycles/MAC ours | {c} operator ratio | {c} K loop ratio" for c in cores) + " |"),
        "|---" * (3 + 4 * len(cores)) + "|"]
    for layer in dict.fromkeys(r["layer"] for r in rows):
        by_core = {r["core"]: r for r in rows if r["layer"] == layer}
        first = next(iter(by_core.values()))
        cells = []
        for c in cores:
            r = by_core.get(c)
            cells += (["-"] * 4 if r is None else [
                f"{r['ours']['operator'] / 1e6:.1f} / {r['plain_tir']['operator'] / 1e6:.1f}",
                f"{r['ours']['operator'] / r['macs']:.2f}", f"{r['ratio']['operator']:.2f}", f"{r['ratio']['k_loop']:.2f}"])
        correct = all(r["ours_correct"] and r["plain_tir_correct"] for r in by_core.values())
        out.append(f"| {layer} | {first['macs'] / 1e6:.1f} | {correct} | " + " | ".join(cells) + " |")
    out += ["", "Geometric means over the layers:", "", ("| core | layers | operator ratio | K loop ratio | "
            "ours Mcycles (sum) | plain Mcycles (sum) |"), "|---|---|---|---|---|---|"]
    for c in cores:
        group = [r for r in rows if r["core"] == c]
        if group:
            def gm(part, group=group):
                return float(np.exp(np.mean([np.log(r["ratio"][part]) for r in group])))
            out.append(f"| {c} | {len(group)} | {gm('operator'):.3f}x | {gm('k_loop'):.3f}x | "
                       f"{sum(r['ours']['operator'] for r in group) / 1e6:.0f} | "
                       f"{sum(r['plain_tir']['operator'] for r in group) / 1e6:.0f} |")
    return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", nargs="+", default=list(NEON_LAYERS))
    ap.add_argument("--cores", nargs="+", default=list(CORES))
    ap.add_argument("--json", type=Path)
    ap.add_argument("--md", type=Path, help="also write the markdown table here")
    ap.add_argument("--table", type=Path, help="print the markdown table of a --json file and exit")
    args = ap.parse_args()
    if args.table:
        print(table(json.loads(args.table.read_text())), end="")
        return 0
    if (why := cross.missing_tools() or mca.missing_tools()) is not None:
        print(f"mca_neon_int8_layers: {why}", file=sys.stderr)
        return 1
    record = provenance.record(threads=1)
    run = {"run": record, "tools": tools(), "cores": args.cores, "rows": []}
    for layer in args.layers:
        for core in args.cores:
            row = mca_layer(layer, core)
            run["rows"].append(row)
            print(f"{layer} {core}: operator {row['ours']['operator'] / 1e6:.1f} / {row['plain_tir']['operator'] / 1e6:.1f}"
                  f" Mcycles ({row['ratio']['operator']:.2f}x), correct {row['ours_correct']}", flush=True)
            run["run"] = provenance.finished(record)
            if args.json:
                args.json.write_text(json.dumps(run, indent=1) + "\n")
            if args.md:
                args.md.write_text(table(run))
    return 0 if all(r["ours_correct"] and r["plain_tir_correct"] for r in run["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())
