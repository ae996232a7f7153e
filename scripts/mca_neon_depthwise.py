#!/usr/bin/env python3
"""A model's depthwise layers (MobileNetV2's, or ShuffleNetV2's) on the NEON depthwise conv2d (ops/depthwise.py
built for AArch64 by ops/neon_gemm.py), costed with llvm-mca on Arm core models: the int32 form (4-lane
smlal per tap) next to the tap pairs (two taps' s8 products summed in int16, smull + smlal + saddw, with
the pad pass at stride 1 and the speculative window read at stride 2; channels in 8s) and, on a core with
the dot-product extension, the sdot form (ops/depthwise_dot.py, which neon_gemm.py takes there), all on
the same symmetric weights (in [-127, 127], onnxruntime's), each run once under qemu-aarch64, checked
against numpy, every block that ran costed by llvm-mca times its runs (bench/mca.py).

    python scripts/mca_neon_depthwise.py --cores cortex-a72 --json out.json --md out.md
    python scripts/mca_neon_depthwise.py --model shufflenet_v2 --cores cortex-a53 cortex-a76 --json out.json
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
from tvm_integration.ops import depthwise, depthwise_dot  # noqa: E402
from tvm_integration.ops.neon_gemm import NEON_DEPTHWISE_TILES  # noqa: E402
from tvm_integration.ops.operator import Built  # noqa: E402
from tvm_integration.ops.output_stage import OutputStage, ScaleRequantize  # noqa: E402
from tvm_integration.qemu import cross  # noqa: E402

# ((H, W, C), stride, how many the model has) of each model's 3x3 depthwise layers (224x224 input)
MODELS = {"mobilenet_v2": [((112, 112, 32), 1, 1), ((112, 112, 96), 2, 1), ((56, 56, 144), 1, 1),
                           ((56, 56, 144), 2, 1), ((28, 28, 192), 1, 2), ((28, 28, 192), 2, 1), ((14, 14, 384), 1, 4),
                           ((14, 14, 576), 1, 2), ((14, 14, 576), 2, 1), ((7, 7, 960), 1, 3)],
          "shufflenet_v2": [((56, 56, 24), 2, 1), ((56, 56, 58), 2, 1), ((28, 28, 58), 1, 3), ((28, 28, 116), 2, 2),
                            ((14, 14, 116), 1, 7), ((14, 14, 232), 2, 2), ((7, 7, 232), 1, 3)]}
NAMES = {"mobilenet_v2": "MobileNetV2", "shufflenet_v2": "ShuffleNetV2"}
FORMS = ("int32", "pairs", "sdot")
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


def forms(w, core: str) -> tuple[str, ...]:
    """The forms a layer is built in on ``core``: int32 always, the tap pairs where their channels fit,
    sdot where the core has it."""
    return ("int32", *(("pairs",) if depthwise.tap_pairs_fit("NHWC", w) else ()),
            *(("sdot",) if neon_int8.core_family(core) in ("dotprod", "i8mm") else ()))


def operator(x, w, stage, stride: int, core: str, form: str):
    from tvm import te
    placeholder = te.placeholder(x.shape, "uint8", name="data")
    out_hw = ((x.shape[1] - 1) // stride + 1, (x.shape[2] - 1) // stride + 1)
    if form == "sdot":
        mod, constants, out_shape = depthwise_dot.build(placeholder, w, (stride, stride), (1, 1, 1, 1), out_hw, stage,
                                                        PAD_VALUE, copies=neon_int8.out_of_order(core))
    else:
        mod, constants, out_shape = depthwise.build(placeholder, "NHWC", w, (stride, stride), (1, 1, 1, 1), out_hw,
                                                    stage, PAD_VALUE, NEON_DEPTHWISE_TILES, pairs=form == "pairs")
    return Built(mod, constants, out_shape, "uint8", x.shape, "uint8", out_shape, neon_int8.neon_target(core)).compile()


def run_of(run: dict) -> dict:
    """The record of the run a --json file holds (provenance.record); of a file from before records, its
    command."""
    return run.get("run") or {"command": run["command"]}


def table(run: dict) -> str:
    """The run as markdown: a column per form some row has ('-' where a layer's channels do not fit it), ratio
    = the row's last form / int32; each core's totals over the forms all its rows have."""
    names = [form for form in FORMS if any(form in r for r in run["rows"])]
    sdot = ("; *sdot*: a channel's four horizontal taps in one sdot lane (ops/depthwise_dot.py, on cores with the "
            "dot-product extension; channels not in 8s computed in 16s), ratio: the row's last form over int32"
            if "sdot" in names else "")
    out = [(f"{NAMES[run.get('model', 'mobilenet_v2')]}'s 3x3 depthwise layers (NHWC, u8 data, bias + float requantize "
            f"to u8 fused) on the NEON depthwise conv2d, llvm-mca estimates ({run['llvm-mca']}), no Arm hardware: "
            "*int32*: each tap's products widened to int32 (smlal, 4 lanes); *pairs*: two taps' s8 products summed in "
            f"int16 (smull, smlal, saddw on 8 lanes), the same symmetric weights{sdot}. Each operator built for the "
            "core, run once under qemu, checked against numpy, every block that ran costed by llvm-mca times its runs."),
           "", *provenance.lines([run], run_of=run_of), "",
           "| layer | stride | count | core | " + " | ".join(f"{n} Mcycles" for n in names) + " | ratio | correct |",
           "|---" * (6 + len(names)) + "|"]
    for r in run["rows"]:
        cells = " | ".join(f"{r[n] / 1e6:.3f}" if n in r else "-" for n in names)
        last = next(n for n in reversed(names) if n in r)
        out.append(f"| {r['layer']} | {r['stride']} | {r['count']} | {r['core']} | {cells} | "
                   f"{r[last] / r['int32']:.2f} | {r['correct']} |")
    for core in dict.fromkeys(r["core"] for r in run["rows"]):
        rows = [r for r in run["rows"] if r["core"] == core]
        total = {n: sum(r[n] * r["count"] for r in rows) / 1e6 for n in names if all(n in r for r in rows)}
        out.append(f"\n{core}, the {sum(r['count'] for r in rows)} layers: "
                   + ", ".join(f"{n} {t:.2f}" for n, t in total.items())
                   + f" Mcycles ({list(total.values())[-1] / total['int32']:.2f}x).")
    return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=sorted(MODELS), default="mobilenet_v2")
    ap.add_argument("--cores", nargs="+", default=["cortex-a53", "cortex-a72"])
    ap.add_argument("--json", type=Path)
    ap.add_argument("--md", type=Path, help="also write the markdown table here")
    args = ap.parse_args()
    if (why := cross.missing_tools() or mca.missing_tools()) is not None:
        print(f"mca_neon_depthwise: {why}", file=sys.stderr)
        return 1
    record = provenance.record(threads=1)
    run = {"run": record, "llvm-mca": mca.tool("llvm-mca-19", "llvm-mca"), "model": args.model, "rows": []}
    for hwc, stride, count in MODELS[args.model]:
        x, w, stage, expected = layer(hwc, stride)
        for core in args.cores:
            row = {"layer": "x".join(map(str, hwc)), "stride": stride, "count": count, "core": core, "correct": True}
            for form in forms(w, core):
                op = operator(x, w, stage, stride, core, form)
                row["correct"] &= bool(np.array_equal(op(x), expected))
                row[form] = costed(op, x, core)["operator"]
            run["rows"].append(row)
            print(f"{row['layer']} s{stride} {core}: " + ", ".join(f"{n} {row[n] / 1e6:.3f}" for n in FORMS if n in row)
                  + f" Mcycles, correct {row['correct']}", flush=True)
    run["run"] = provenance.finished(record)
    if args.json:
        write_atomically(args.json, json.dumps(run, indent=1) + "\n")
    if args.md:
        write_atomically(args.md, table(run))
    return 0 if all(r["correct"] for r in run["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())
