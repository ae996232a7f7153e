#!/usr/bin/env python3
"""MobileNetV2's depthwise layers on the NEON depthwise conv2d (ops/depthwise.py built for AArch64 by
ops/neon_gemm.py), costed with llvm-mca on Arm core models: the int32 form (4-lane smlal per tap) next
to the tap pairs (two taps' s8 products summed in int16, smull + smlal + saddw, with the pad pass at
stride 1 and the speculative window read at stride 2), both on the same symmetric weights (in [-127,
127], onnxruntime's), each run once under qemu-aarch64, checked against numpy, every block that ran
costed by llvm-mca times its runs (bench/mca.py).

    python scripts/mca_neon_depthwise.py --cores cortex-a72 --json out.json --md out.md
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from synth.files import write_atomically  # noqa: E402
from tvm_integration.bench import mca, provenance  # noqa: E402
from tvm_integration.bench.neon_int8_layers import costed  # noqa: E402
from tvm_integration.kernels import neon_int8  # noqa: E402
from tvm_integration.ops import depthwise  # noqa: E402
from tvm_integration.ops.neon_gemm import NEON_DEPTHWISE_TILES  # noqa: E402
from tvm_integration.ops.operator import Built  # noqa: E402
from tvm_integration.ops.output_stage import OutputStage, ScaleRequantize  # noqa: E402
from tvm_integration.qemu import cross  # noqa: E402

# (H, W, C, stride) of MobileNetV2's 3x3 depthwise layers (224x224 input), and how many it has
LAYERS = [((112, 112, 32), 1, 1), ((112, 112, 96), 2, 1), ((56, 56, 144), 1, 1), ((56, 56, 144), 2, 1),
          ((28, 28, 192), 1, 2), ((28, 28, 192), 2, 1), ((14, 14, 384), 1, 4), ((14, 14, 576), 1, 2),
          ((14, 14, 576), 2, 1), ((7, 7, 960), 1, 3)]
ZERO_POINT, PAD_VALUE = 120, 3


def layer(hwc, stride: int):
    """(x, w, stage, the numpy reference output) of one layer: random, fixed seed, u8 data padded with
    PAD_VALUE, a per-channel float requantize to u8 (in AArch64's form, as ops/neon_gemm.py builds it)."""
    rng = np.random.default_rng(2)
    (h, w_, c) = hwc
    x = rng.integers(0, 256, (1, h, w_, c)).astype(np.uint8)
    w = rng.integers(-127, 128, (c, 1, 3, 3)).astype(np.int8)
    bias = rng.integers(-3000, 3000, c).astype(np.int32)
    scale = rng.uniform(2e-4, 8e-4, c).astype(np.float32)
    xp = np.pad(x.astype(np.int64), ((0, 0), (1, 1), (1, 1), (0, 0)), constant_values=PAD_VALUE)
    oh, ow = (h - 1) // stride + 1, (w_ - 1) // stride + 1
    acc = sum(xp[:, i:i + stride * oh:stride, j:j + stride * ow:stride, :] * w[:, 0, i, j].astype(np.int64)
              for i in range(3) for j in range(3))
    expected = np.clip(np.rint((acc + bias).astype(np.float32) * scale) + ZERO_POINT, 0, 255).astype(np.uint8)
    return x, w, OutputStage(bias=bias, requantize=ScaleRequantize(scale, ZERO_POINT, "uint8"), aarch64=True), expected


def operator(x, w, stage, stride: int, core: str, pairs: bool):
    from tvm import te
    placeholder = te.placeholder(x.shape, "uint8", name="data")
    out_hw = ((x.shape[1] - 1) // stride + 1, (x.shape[2] - 1) // stride + 1)
    mod, constants, out_shape = depthwise.build(placeholder, "NHWC", w, (stride, stride), (1, 1, 1, 1), out_hw, stage,
                                                PAD_VALUE, NEON_DEPTHWISE_TILES, pairs=pairs)
    return Built(mod, constants, out_shape, "uint8", x.shape, "uint8", out_shape, neon_int8.neon_target(core)).compile()


def run_of(run: dict) -> dict:
    """The record of the run a --json file holds (provenance.record); of a file from before records, its
    command."""
    return run.get("run") or {"command": run["command"]}


def table(run: dict) -> str:
    out = [("MobileNetV2's 3x3 depthwise layers (NHWC, u8 data, bias + float requantize to u8 fused) on the NEON "
            f"depthwise conv2d, llvm-mca estimates ({run['llvm-mca']}), no Arm hardware: *int32*: each tap's "
            "products widened to int32 (smlal, 4 lanes); *pairs*: two taps' s8 products summed in int16 (smull, "
            "smlal, saddw on 8 lanes), the same symmetric weights. Each operator built for the core, run once "
            "under qemu, checked against numpy, every block that ran costed by llvm-mca times its runs."),
           "", *provenance.lines([run], run_of=run_of), "",
           "| layer | stride | count | core | int32 Mcycles | pairs Mcycles | ratio | correct |", "|---" * 8 + "|"]
    for r in run["rows"]:
        out.append(f"| {r['layer']} | {r['stride']} | {r['count']} | {r['core']} | {r['int32'] / 1e6:.3f} | "
                   f"{r['pairs'] / 1e6:.3f} | {r['pairs'] / r['int32']:.2f} | {r['correct']} |")
    for core in dict.fromkeys(r["core"] for r in run["rows"]):
        rows = [r for r in run["rows"] if r["core"] == core]
        total = {form: sum(r[form] * r["count"] for r in rows) / 1e6 for form in ("int32", "pairs")}
        out.append(f"\n{core}, the {sum(r['count'] for r in rows)} layers: int32 {total['int32']:.2f}, "
                   f"pairs {total['pairs']:.2f} Mcycles ({total['pairs'] / total['int32']:.2f}x).")
    return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cores", nargs="+", default=["cortex-a53", "cortex-a72"])
    ap.add_argument("--json", type=Path)
    ap.add_argument("--md", type=Path, help="also write the markdown table here")
    args = ap.parse_args()
    if (why := cross.missing_tools() or mca.missing_tools()) is not None:
        print(f"mca_neon_depthwise: {why}", file=sys.stderr)
        return 1
    record = provenance.record(threads=1)
    run = {"run": record, "llvm-mca": mca.tool("llvm-mca-19", "llvm-mca"), "rows": []}
    for hwc, stride, count in LAYERS:
        x, w, stage, expected = layer(hwc, stride)
        for core in args.cores:
            row = {"layer": "x".join(map(str, hwc)), "stride": stride, "count": count, "core": core, "correct": True}
            for form in ("int32", "pairs"):
                op = operator(x, w, stage, stride, core, form == "pairs")
                row["correct"] &= bool(np.array_equal(op(x), expected))
                row[form] = costed(op, x, core)["operator"]
            run["rows"].append(row)
            print(f"{row['layer']} s{stride} {core}: int32 {row['int32'] / 1e6:.3f}, pairs {row['pairs'] / 1e6:.3f} "
                  f"Mcycles, correct {row['correct']}", flush=True)
    run["run"] = provenance.finished(record)
    if args.json:
        write_atomically(args.json, json.dumps(run, indent=1) + "\n")
    if args.md:
        write_atomically(args.md, table(run))
    return 0 if all(r["correct"] for r in run["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())
