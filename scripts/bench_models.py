#!/usr/bin/env python3
"""Whole models, batch 1, through the QNN pipeline (tvm_integration.qnn) next to onnxruntime int8 on
the same quantized model, onnxruntime fp32 on its float original and TVM 0.27's own import of the
quantized model, in the same run: ResNet-18 (224x224, random weights, QDQ u8/s8 per-channel, as
onnxruntime.quantization writes it) and MobileNetV2 (the same, with depthwise convolutions), each at
1 and 2 threads (one worker process per thread count: TVM sizes its pool once per process). Our
output is compared with onnxruntime's on the same input in every row.

    python scripts/bench_models.py [--models resnet18,mobilenet_v2] [--threads 1,2] [--trials 20] [--out benchmarks]
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from synth.files import write_atomically  # noqa: E402
from tvm_integration.qnn.models import BUILT_IN, write_pair  # noqa: E402

MODELS = tuple(BUILT_IN)
TARGETS = ["- AMX host: ResNet-18 at most 0.4x onnxruntime int8 latency; no AMX: at most 0.9x, "
           "and at least 3.8x onnxruntime fp32 faster.",
           "- MobileNetV2: at most 1.0x onnxruntime int8 latency.",
           "- Compile time of ResNet-18 at most 60 s."]


def worker(a) -> None:
    from tvm_integration.qnn.bench import bench_model
    for name in a.models.split(","):
        row = bench_model(Path(a.dir) / f"{name}.int8.onnx", Path(a.dir) / f"{name}.fp32.onnx", int(a.threads),
                          a.trials)
        print(json.dumps({"name": name, **row}), flush=True)


def markdown(rows: list[dict], command: str) -> str:
    names = ["onnxruntime_int8", "onnxruntime_fp32", "tvm_default"]
    lines = ["# Whole models through the QNN pipeline, batch 1", "",
             f"Host: {rows[0]['host']}; {command}", "",
             "Ours: the QDQ model imported into Relax, rewritten to integer arithmetic, legalized and dispatched "
             "to the tensorized int8 operators (tvm_integration/qnn). Times: median ms; x = baseline / ours "
             "(above 1: we are faster). tvm_default: TVM 0.27's own import of the same quantized model (conv and "
             "matmul in float, default schedules). diff: largest |ours - onnxruntime| on the output (0: bit-exact). "
             "The machine's 2 cores are shared with other jobs: expect noise.", "",
             "| model | threads | ours ms | " + " | ".join(names) + " | diff | compile s |",
             "|---|---|---|" + "---|" * len(names) + "---|---|"]
    for r in rows:
        cells = [f"{r['baselines'][n]:.2f} ({r['speedups'][n]:.2f}x)" if n in r["baselines"] else "-" for n in names]
        lines.append(f"| {r['name']} | {r['threads']} | {r['ours_ms']:.2f} | " + " | ".join(cells)
                     + f" | {r['max_abs_diff_vs_onnxruntime']:g} | {r['compile_s']:.1f} |")
    lines += ["", "Targets (issue 15):", *TARGETS]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--dir", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        worker(a)
        return 0
    unknown = set(a.models.split(",")) - set(MODELS)
    if unknown:
        ap.error(f"unknown models {sorted(unknown)}; accepted: {', '.join(MODELS)}")
    rows = []
    with tempfile.TemporaryDirectory() as directory:
        logging.getLogger("root").setLevel(logging.ERROR)      # quantize_static's pre-processing advice
        for name in a.models.split(","):
            write_pair(name, directory)
        for threads in a.threads.split(","):
            env = {**os.environ, "TVM_NUM_THREADS": threads}
            result = subprocess.run([sys.executable, __file__, "--worker", "--dir", directory, "--models", a.models,
                                     "--threads", threads, "--trials", str(a.trials)],
                                    env=env, capture_output=True, text=True)
            if result.returncode:
                sys.stderr.write(result.stderr)
                return 1
            rows += [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    load = " / ".join(f"{v:.2f}" for v in os.getloadavg())
    command = (f"`python scripts/bench_models.py --models {a.models} --threads {a.threads} --trials {a.trials}`; "
               f"load average at the end (1/5/15 min): {load}")
    a.out.mkdir(parents=True, exist_ok=True)
    write_atomically(a.out / "models.json", json.dumps({"command": command, "rows": rows}, indent=1))
    write_atomically(a.out / "models.md", markdown(rows, command))
    print(markdown(rows, command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
