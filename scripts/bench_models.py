#!/usr/bin/env python3
"""Whole models, batch 1, through the QNN pipeline (tvm_integration.qnn) next to onnxruntime int8 on
the same quantized model, onnxruntime fp32 on its float original, OpenVINO int8 on the same quantized
model (and on AMX hosts OpenVINO held to VNNI: tvm_integration/bench/openvino_baseline.py) and TVM
0.27's own import of the quantized model, in the same run: ResNet-18 (224x224, random weights, QDQ u8/s8 per-channel, as
onnxruntime.quantization writes it), MobileNetV2 (the same, with depthwise convolutions), a
MobileNetV3-Small-style model (HardSwish, squeeze-and-excitation) and a YOLO-style neck (SiLU, nearest
Resize, Concat: tvm_integration/bench/int8_models.py), each at
1 and 2 threads (one worker process per thread count: TVM sizes its pool once per process). Our
output is compared with onnxruntime's on the same input in every row.

Low-bit ResNet-18 (issue 16): ``resnet18_w1a1`` (bipolar weights, binary activations) and
``resnet18_w2a2`` (int2 weights, 2-bit activations), stem and classifier int8, built in code in QCDQ
form (tvm_integration/bench/lowbit_models.py, power-of-two scales: onnxruntime's result is exact whether
it computes a group in float between DQ and Q or, as its default optimizations do, fuses it onto its
int8 kernels), so onnxruntime is their reference (bit for bit, and the numpy integer network on its
calibration input); their speedups are against the int8 ``resnet18`` row of the same worker
(``--models`` must include resnet18): our int8 build, onnxruntime int8 and fp32.

    python scripts/bench_models.py [--models resnet18,mobilenet_v2,mobilenet_v3,silu_fpn,resnet18_w1a1,resnet18_w2a2]
                                   [--threads 1,2] [--trials 20] [--out benchmarks]
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

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from synth.files import write_atomically  # noqa: E402
from tvm_integration.bench.int8_models import BUILT_IN, write_pair  # noqa: E402
from tvm_integration.bench import provenance, tuned_shapes  # noqa: E402

LOWBIT = {"resnet18_w1a1": (1, 1), "resnet18_w2a2": (2, 2)}      # name: (abits, wbits)
MODELS = (*BUILT_IN, *LOWBIT)
TARGETS = ["- AMX host: ResNet-18 at most 0.4x onnxruntime int8 latency; no AMX: at most 0.9x, "
           "and at least 3.8x onnxruntime fp32 faster.",
           "- MobileNetV2: at most 1.0x onnxruntime int8 latency.",
           "- Compile time of ResNet-18 at most 60 s."]
OPENVINO_TARGETS = ["- AMX host, 1 thread: ResNet-18 at most 0.8x openvino_int8 latency, MobileNetV2 at most 0.9x; "
                    "host without AMX: both at most 0.9x openvino_int8."]
# The other whole-model tables, each written by its own script (their models need torch, transformers or
# TensorFlow to build, and hours to run): listed at the end of models.md so that one file leads to all.
OTHER_TABLES = [("zoo.md", "scripts/bench_zoo.py", "issue 31: nine torchvision architectures, qsynth next to "
                 "onnxruntime int8/fp32 and OpenVINO int8, 1 and 2 threads, exactness and where the time goes"),
                ("transformers.md", "scripts/bench_transformers.py", "issue 32: BERT-base-width encoders (4 and 12 "
                 "layers, sequence 128 and 384, static and dynamic quantization) and ViT-style encoders, next to "
                 "onnxruntime int8/fp32 and OpenVINO int8, 1 and 2 threads"),
                ("tflite_models.md", "scripts/bench_tflite.py", "issue 33: keras.applications as TensorFlow's "
                 "converter writes them, next to LiteRT, OpenVINO and onnxruntime, 1 and 2 threads"),
                ("models_arm.md", "scripts/bench_arm_models.py", "issue 34: ResNet-18, MobileNetV2/V3 and the "
                 "low-bit ResNet-18 compiled for AArch64, estimated cycles on Cortex-A53/A72/A76 next to "
                 "onnxruntime's aarch64 build")]
LOWBIT_TARGETS = ["- W1A1 ResNet-18: at least 10x onnxruntime fp32 and at least 2.5x our int8 build, 1 thread."]


def worker(a) -> None:
    from tvm_integration.bench.models import bench_model
    for name in a.models.split(","):
        if name in LOWBIT:
            print(json.dumps({"name": name, **lowbit_row(name, Path(a.dir), int(a.threads), a.trials)}), flush=True)
            continue
        row = bench_model(Path(a.dir) / f"{name}.int8.onnx", Path(a.dir) / f"{name}.fp32.onnx", int(a.threads),
                          a.trials)
        print(json.dumps({"name": name, **row}), flush=True)


def write_lowbit(name: str, directory: Path) -> None:
    """``NAME.qcdq.onnx`` and ``NAME.calibration.npz`` (its calibration input and the logits of the
    numpy integer network on it)."""
    import onnx
    from tvm_integration.bench.lowbit_models import resnet_lowbit
    model, x, logits = resnet_lowbit(*LOWBIT[name])
    onnx.save(model, str(directory / f"{name}.qcdq.onnx"))
    np.savez(directory / f"{name}.calibration.npz", x=x, logits=logits)


def lowbit_row(name: str, directory: Path, threads: int, trials: int) -> dict:
    """bench_model's row of a low-bit model (onnxruntime on the QCDQ model: the reference, its time in
    ``onnxruntime_qcdq_ms``) plus whether ours equals the numpy integer network."""
    from tvm_integration.bench.models import bench_model
    from tvm_integration.qnn.runtime.model import compile_model
    path = directory / f"{name}.qcdq.onnx"
    row = bench_model(path, None, threads, trials, with_tvm_own=False, with_openvino=False)
    row["onnxruntime_qcdq_ms"] = row.pop("baselines")["onnxruntime_int8"]
    row["baselines"], row["speedups"] = {}, {}
    calibration = np.load(directory / f"{name}.calibration.npz")
    model = compile_model(path, threads=threads)
    ours = model({"input": calibration["x"]})[model.outputs[0]]
    row["equal_to_numpy"] = bool(np.array_equal(ours, calibration["logits"]))
    return row


def lowbit_speedups(rows: list[dict]) -> None:
    """Each low-bit row's speedups against the int8 resnet18 row of its thread count."""
    for r in rows:
        base = next((b for b in rows if b["name"] == "resnet18" and b["threads"] == r["threads"]), None)
        if r["name"] in LOWBIT and base is not None:
            r["vs_resnet18"] = {"qsynth_int8": base["ours_ms"] / r["ours_ms"],
                                **{k: v / r["ours_ms"] for k, v in base["baselines"].items() if k != "tvm_default"}}


def openvino_steps(row: dict) -> str:
    """The largest difference of OpenVINO's outputs from onnxruntime's over its configurations, in steps
    of the output's quantization scale ("-" when none ran)."""
    steps = [r["max_diff_steps"] for r in row.get("openvino", {}).values() if r.get("max_diff_steps") is not None]
    return f"{max(steps):g}" if steps else "-"


def wrong(row: dict) -> str:
    """How many outputs onnxruntime's default and OpenVINO get wrong: "default / OpenVINO of N"."""
    default = row.get("onnxruntime_int8_default")
    if default is None:
        return "-"
    ov = [r["differing"] for r in row.get("openvino", {}).values() if "differing" in r]
    return f"{default['differing']} / {max(ov) if ov else '-'} of {default['compared']}"


def cell(row: dict, name: str) -> str:
    """A baseline's cell: its ms and speedup, "refused: REASON" where its runtime refused the model (TVM's
    own import of a QOperator model), or "-" where it did not run."""
    if name not in row["baselines"]:
        return "-"
    if row["baselines"][name] is None:
        return f"refused: {row['refused'][name]}"
    return f"{row['baselines'][name]:.2f} ({row['speedups'][name]:.2f}x)"


def markdown(data: dict) -> str:
    """The table of ``models.json``: its run's record (provenance.described) above it."""
    rows, run = data["rows"], data["run"]
    names = ["onnxruntime_int8", "onnxruntime_int8_exact", "onnxruntime_fp32", "openvino_int8", "openvino_int8_vnni",
             "tvm_default"]
    unavailable = sorted({f"{name} ({r['threads']} thread(s)): {report['unavailable']}" for r in rows
                          for name, report in r.get("openvino", {}).items() if "unavailable" in report})
    lines = ["# Whole models through the QNN pipeline, batch 1", "",
             f"- Run: {provenance.described(run)}", "",
             "Ours: the QDQ model imported into Relax, rewritten to integer arithmetic, legalized and dispatched "
             "to the tensorized int8 operators (tvm_integration/qnn). Times: median ms; x = baseline / ours "
             "(above 1: we are faster). tvm_default: TVM 0.27's own import of the same quantized model (conv and "
             "matmul in float, default schedules; \"refused: ...\" where it has no converter for the model's "
             "QOperator ops). openvino_int8: OpenVINO's CPU plugin on the same QDQ file "
             "(`compile_model(path, \"CPU\", {INFERENCE_NUM_THREADS: n, PERFORMANCE_HINT: LATENCY})`), "
             "openvino_int8_vnni: the same with `ONEDNN_MAX_CPU_ISA=AVX512_CORE_VNNI` (AMX hosts only), each in a "
             "worker process timed in turn with ours. onnxruntime_int8_exact: onnxruntime with "
             "`session.x64quantprecision` = 1, the exact reference (its default saturates `vpmaddubsw` on x86 hosts "
             "without VNNI). diff: largest |ours - the exact reference| on the output (0: bit-exact); wrong: outputs "
             "of onnxruntime's default / OpenVINO that differ from the exact reference; OpenVINO steps: largest "
             "|OpenVINO - the exact reference| in steps of the output's quantization scale; tuning: how many of the "
             "model's int8 tile shapes this host's tuning log chose (tuned, partly k/n, untuned: the rest take "
             "kernels/tuning.py's least-padding rule). The machine's 2 cores "
             "are shared with other jobs: expect noise.",
             "", "| model | threads | ours ms | " + " | ".join(names) + " | diff | wrong | OpenVINO steps | compile s "
             "| tuning |",
             "|---|---|---|" + "---|" * len(names) + "---|---|---|---|---|"]
    for r in (r for r in rows if r["name"] not in LOWBIT):
        cells = [cell(r, n) for n in names]
        lines.append(f"| {r['name']} | {r['threads']} | {r['ours_ms']:.2f} | " + " | ".join(cells)
                     + f" | {r['max_abs_diff_vs_onnxruntime']:g} | {wrong(r)} | {openvino_steps(r)} | {r['compile_s']:.1f} "
                     f"| {tuned_shapes.label(r.get('tuning'))} |")
    if unavailable:
        lines += ["", "OpenVINO unavailable: " + "; ".join(unavailable)]
    held = sorted({" ".join(f"{k}={v}" for k, v in r["openvino"]["openvino_int8"]["environment"].items())
                   for r in rows if "environment" in r.get("openvino", {}).get("openvino_int8", {})})
    if held:
        lines += ["", f"Held host: qsynth's host model was held to {', '.join(run['host']['features'])} "
                  f"(`QSYNTH_HOST_FEATURES`), and openvino_int8 to the same instructions (`{'`, `'.join(held)}`). "
                  "onnxruntime cannot be held (MLAS dispatches on the CPU's own flags): its columns ran on "
                  "everything the CPU has."]
    lines += ["", "Targets (issue 15):", *TARGETS, "", "Targets (issue 30):", *OPENVINO_TARGETS]
    lowbit = [r for r in rows if r["name"] in LOWBIT]
    if lowbit:
        versus = ["qsynth_int8", "onnxruntime_int8", "onnxruntime_fp32"]
        lines += ["", "## Low-bit ResNet-18 (issue 16)", "",
                  "The same layout at W1A1 (bipolar weights on the hybrid encoding, binary activations) and W2A2 "
                  "(int2 weights, 2-bit activations), stem and classifier int8, QCDQ (tvm_integration/bench/"
                  "lowbit_models.py); x = the int8 resnet18 row's time (same worker, same thread count) / ours. "
                  "diff: largest |ours - onnxruntime| on the same low-bit model (exact by construction: power-of-two "
                  "scales); numpy: ours equals the integer network on its calibration input. onnxruntime QCDQ ms: "
                  "onnxruntime on the low-bit model itself (its default optimizations fuse the QCDQ groups onto "
                  "its int8 kernels).",
                  "", "| model | threads | ours ms | " + " | ".join(f"vs resnet18 {v}" for v in versus)
                  + " | diff | numpy | onnxruntime QCDQ ms | compile s |",
                  "|---|---|---|" + "---|" * len(versus) + "---|---|---|---|"]
        for r in lowbit:
            cells = [f"{r['vs_resnet18'][v]:.2f}x" if v in r.get("vs_resnet18", {}) else "-" for v in versus]
            lines.append(f"| {r['name']} | {r['threads']} | {r['ours_ms']:.2f} | " + " | ".join(cells)
                         + f" | {r['max_abs_diff_vs_onnxruntime']:g} | {r['equal_to_numpy']} | "
                         f"{r['onnxruntime_qcdq_ms']:.2f} | {r['compile_s']:.1f} |")
        lines += ["", "Targets (issue 16):", *LOWBIT_TARGETS]
    lines += ["", "## Other models", "", *(f"- [{name}]({name}) (`python {script}`): {what}."
                                          for name, script, what in OTHER_TABLES)]
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
    record = provenance.record([int(t) for t in a.threads.split(",")])      # the code the workers load
    with tempfile.TemporaryDirectory() as directory:
        logging.getLogger("root").setLevel(logging.ERROR)      # quantize_static's pre-processing advice
        for name in a.models.split(","):
            if name in LOWBIT:
                write_lowbit(name, Path(directory))
            else:
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
    lowbit_speedups(rows)
    data = {"run": provenance.finished(record), "rows": rows}
    a.out.mkdir(parents=True, exist_ok=True)
    write_atomically(a.out / "models.json", json.dumps(data, indent=1))
    write_atomically(a.out / "models.md", markdown(data))
    print(markdown(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
