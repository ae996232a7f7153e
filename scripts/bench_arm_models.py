#!/usr/bin/env python3
"""Whole models on Arm core models, estimated cycles (tvm_integration/bench/arm_models.py): the
built-in int8 ResNet-18, MobileNetV2 and MobileNetV3 (tvm_integration/bench/int8_models.py, 224x224, QDQ
u8/s8 per-channel), the W1A1 and W2A2 ResNet-18 (bench/lowbit_models.py, QCDQ, their inner layers on
the NEON bitserial operators) and the encoders of benchmarks/transformers.md (issue 50; built by
scripts/bench_transformers.build, static QDQ and dynamic) and the zoo of benchmarks/zoo.md (scripts/make_zoo.py's
models, read from ``--zoo-dir``) compiled by qsynth for each core, next to
onnxruntime's AArch64 build on the
same model (int8: onnxruntime fuses a low-bit model's QCDQ groups onto its int8 kernels) and on the
float original (fp32; the low-bit rows: the float ResNet-18), each run once under qemu-aarch64 as the
core, every block of its measured inference costed once by llvm-mca's model of the core. The keras.applications
TFLite models (tflite_NAME: scripts/make_tflite_applications.py's NAME.tflite, read from ``--tflite-dir``) run
next to LiteRT's AArch64 build instead (bench/litert_aarch64.py), their own table.

    python scripts/bench_arm_models.py [--models resnet18,...,bert_l4_s128_static,tflite_resnet50,...]
                                       [--cores cortex-a53,cortex-a72,cortex-a76] [--tvm-default] [--out benchmarks]
                                       [--update] [--zoo-dir DIR] [--tflite-dir DIR]

``--update`` re-runs only the given rows and keeps the others of ``OUT/models_arm.json``; every row
records the run that measured it (provenance.record), and the table prints each. A core is costed on the
scheduling model mca.STAND_IN gives it, named in the table (core_models.py).
"""
from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import onnx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scripts import bench_transformers, make_zoo  # noqa: E402
from scripts.make_tflite_applications import APPLICATIONS  # noqa: E402
from synth.files import write_atomically  # noqa: E402
from tvm_integration.bench import core_models, litert_aarch64, mca, provenance, zoo  # noqa: E402
from tvm_integration.bench.arm_models import bench_arm_model  # noqa: E402
from tvm_integration.bench.int8_models import write_pair  # noqa: E402
from tvm_integration.bench.lowbit_models import resnet_lowbit  # noqa: E402
from tvm_integration.qemu import cross  # noqa: E402
from tvm_integration.qnn.runtime import arm_reference  # noqa: E402

LOWBIT = {"resnet18_w1a1": (1, 1), "resnet18_w2a2": (2, 2)}      # name: (abits, wbits)
ENCODERS = tuple(bench_transformers.MODELS)      # benchmarks/transformers.md's, static and dynamic
ZOO = tuple(make_zoo.MODELS)
TFLITE = tuple(f"tflite_{name}" for name in APPLICATIONS)    # make_tflite_applications.py's, as tflite_NAME
MODELS = ("resnet18", "mobilenet_v2", "mobilenet_v3", *LOWBIT, *ENCODERS, *ZOO, *TFLITE)
CORES = core_models.REPORTED
TARGETS = ["- ResNet-18 int8 on Cortex-A53: at most 0.7x onnxruntime int8's cycles, and at least 3.9x fewer "
           "than fp32 (at most 0.256x onnxruntime fp32).",
           "- MobileNetV2 int8 on Cortex-A53 and A72: at most 0.8x onnxruntime int8's cycles.",
           "- W1A1 ResNet-18 on Cortex-A53: at least 8x fewer cycles than onnxruntime fp32 (at most 0.125x).",
           "- The encoders (issue 50) on Cortex-A53 and on the out-of-order Cortex-A72 and A76: at most 0.8x "
           "onnxruntime int8's cycles, exact against each op kind's stated reference.",
           "- The zoo's CNNs (issue 50) on Cortex-A53 and Cortex-A76: at most 0.7x onnxruntime int8's cycles, exact "
           "against each op kind's stated reference.",
           "- The keras.applications TFLite models (issue 50) on Cortex-A53 and Cortex-A76: at most 0.7x the cycles "
           "of LiteRT's AArch64 build, exact against it."]
CHECKS = [("resnet18", "cortex-a53", "onnxruntime_int8", 0.7), ("resnet18", "cortex-a53", "onnxruntime_fp32", 0.256),
          ("mobilenet_v2", "cortex-a53", "onnxruntime_int8", 0.8),
          ("mobilenet_v2", "cortex-a72", "onnxruntime_int8", 0.8),
          ("resnet18_w1a1", "cortex-a53", "onnxruntime_fp32", 0.125),
          *((m, c, "onnxruntime_int8", 0.8) for m in ENCODERS for c in ("cortex-a53", "cortex-a72", "cortex-a76")),
          *((m, c, "onnxruntime_int8", 0.7) for m in ZOO for c in ("cortex-a53", "cortex-a76")),
          *((m, c, "litert_int8", 0.7) for m in TFLITE for c in ("cortex-a53", "cortex-a76"))]
# (model, core, column, its bound)
RUNTIMES = {"model.so": "model", "tvm_default.so": "model", "libtvm_runtime.so": "runtime",
            "libtvm_ffi.so": "runtime"}
BASELINE_LIBRARIES = ("libonnxruntime.so.1", litert_aarch64.LIBRARY)     # a baseline's kernels and framework


def tools() -> dict:
    import onnxruntime

    def first(cmd):
        return next((line.strip() for line in subprocess.run(cmd, capture_output=True, text=True, check=False)
                     .stdout.splitlines() if "version" in line.lower()), cmd[0])
    return {"llvm-mca": first([mca.tool("llvm-mca-19", "llvm-mca"), "--version"]),
            "qemu": first([cross.QEMU[0], "--version"]), "onnxruntime": onnxruntime.__version__}


def parts(column: dict) -> dict[str, float]:
    """A column's cycles by kind of code: the model's own library (ours: the compiled model; onnxruntime's
    and LiteRT's: their library, its kernels and its framework), the TVM runtime, and the C/C++ libraries."""
    out = {"model": 0.0, "runtime": 0.0, "libc": 0.0}
    for library, c in column["by_library"].items():
        out["model" if library in BASELINE_LIBRARIES else RUNTIMES.get(library, "libc")] += c
    return out


def zoo_pair(name: str, zoo_dir: Path | None) -> tuple[Path, Path]:
    """The zoo model ``name`` and its float original, as make_zoo.py wrote them into ``zoo_dir``; exits
    naming what is missing otherwise."""
    int8, fp32 = ((zoo_dir or Path()) / f"{name}.{kind}.onnx" for kind in ("int8", "fp32"))
    if zoo_dir is None or not (int8.exists() and fp32.exists()):
        sys.exit(f"{name}: give --zoo-dir, a folder where scripts/make_zoo.py wrote {int8.name} and {fp32.name}")
    return int8, fp32


def tflite_model(name: str, tflite_dir: Path | None) -> Path:
    """The TFLite model ``name`` (tflite_NAME) as make_tflite_applications.py wrote it into ``tflite_dir``;
    exits naming what is missing otherwise."""
    path = (tflite_dir or Path()) / f"{name.removeprefix('tflite_')}.tflite"
    if tflite_dir is None or not path.exists():
        sys.exit(f"{name}: give --tflite-dir, a folder where scripts/make_tflite_applications.py wrote {path.name}")
    return path


def model_pair(name: str, directory: Path, zoo_dir: Path | None,
               tflite_dir: Path | None) -> tuple[Path, Path | None]:
    """The model benchmarked and its float original (write_pair's; an encoder's bench_transformers.build's;
    a zoo model's make_zoo.py wrote into ``zoo_dir``); a low-bit ResNet-18's float original is the float
    ResNet-18, the same layout. A TFLite model has none: LiteRT's AArch64 build is its one baseline."""
    if name in TFLITE:
        return tflite_model(name, tflite_dir), None
    if name in ZOO:
        return zoo_pair(name, zoo_dir)
    if name in ENCODERS:
        bench_transformers.build(directory, name)
        return directory / f"{name}.int8.onnx", directory / f"{name}.fp32.onnx"
    if name not in LOWBIT:
        return write_pair(name, directory)
    path = directory / f"{name}.qcdq.onnx"
    onnx.save(resnet_lowbit(*LOWBIT[name])[0], str(path))
    fp32 = directory / "resnet18.fp32.onnx"
    return path, fp32 if fp32.exists() else write_pair("resnet18", directory)[1]


def lowbit_lines(rows: list[dict]) -> list[str]:
    """Each low-bit row's cycles against the int8 ResNet-18 row of its core (qsynth's and onnxruntime's)."""
    out = []
    for r in rows:
        base = next((b for b in rows if b["model"] == "resnet18" and b["core"] == r["core"]), None)
        if r["model"] in LOWBIT and base is not None:
            ours = r["columns"]["qsynth"]["cycles"]
            out.append(f"- {r['model']} on {r['core']}: {ours / base['columns']['qsynth']['cycles']:.2f}x qsynth's "
                       f"int8 ResNet-18, {ours / base['columns']['onnxruntime_int8']['cycles']:.2f}x onnxruntime "
                       "int8's ResNet-18.")
    return ["", "Low-bit ResNet-18 against the int8 ResNet-18 on the same core (cycles, ratio = low-bit qsynth / "
            "int8):", *out] if out else []


def kloop_lines(rows: list[dict]) -> list[str]:
    """Each row's compiled model split into its K loops (blocks with a vector multiply) and the rest,
    with its largest function (arm_models.by_function) and its three costliest operators (the functions
    of one operator summed, zoo.kind)."""
    out = []
    for r in rows:
        ours = r["columns"]["qsynth"]
        if "k_loop" in ours:
            model = sum(ours["by_function"].values())
            name, largest = next(iter(ours["by_function"].items()))
            operators = defaultdict(float)
            for function, c in ours["by_function"].items():
                operators[zoo.kind(function.removesuffix("_compute_"))] += c
            top = ", ".join(f"{k} {c / 1e6:.1f}" for k, c in sorted(operators.items(), key=lambda kv: -kv[1])[:3])
            out.append(f"- {r['model']} on {r['core']}: {ours['k_loop'] / 1e6:.1f} of {model / 1e6:.1f} M in K loops "
                       f"({ours['k_loop'] / model:.0%}); largest function {name} {largest / 1e6:.1f} M; by operator "
                       f"{top} M.")
    return ["", "qsynth's compiled model by where its cycles go (K loops: the blocks holding a vector multiply):",
            *out] if out else []


def reference_lines(rows: list[dict]) -> list[str]:
    """Each model's op kinds by the reference they follow (arm_reference), with those not known to be exact
    against it and those where onnxruntime's AArch64 build departs from the ONNX definition; then what
    explains each row's differences from the two onnxruntime builds, where the row records it."""
    out, seen = [], set()
    for r in rows:
        if "follows" not in r or r["model"] in seen:
            continue
        seen.add(r["model"])
        kinds = [f"{arm_reference.REFERENCES[ref]}: {', '.join(k for k, f in r['follows'].items() if f == ref)}"
                 for ref in dict.fromkeys(r["follows"].values())]
        departs = f"; onnxruntime's AArch64 build departs from the ONNX definition on {', '.join(r['runtime_departs'])}"
        out.append(f"- {r['model']}: " + "; ".join(kinds) + (departs if r["runtime_departs"] else "")
                   + "".join(f"; {line}" for line in r["not_exact"]) + ".")
    explained = [f"- {r['model']} on {r['core']}: " + " ".join(f"{line}." for line in r["explanation"])
                 for r in rows if r.get("explanation")]
    return (["", "The reference each op kind follows (tvm_integration/qnn/runtime/arm_reference.py; rows measured "
             "before it was recorded are not listed):", *out] if out else []) + \
        (["", "What each row's differences from the two onnxruntime builds come from (arm_models.explanation; rows "
          "measured before it was recorded are not listed):", *explained] if explained else [])


def diff_cell(row: dict) -> str:
    """The largest differences from the ONNX definition, onnxruntime AArch64 and the stated reference
    ('-': not measured by the row's run)."""
    stated = row.get("max_abs_diff_vs_stated")
    return (f"{row['max_abs_diff_vs_onnxruntime']:.3g} / {row['max_abs_diff_vs_onnxruntime_aarch64']:.3g} / "
            + ("-" if stated is None else f"{stated:.3g}"))


def cell(row: dict, name: str) -> str:
    """A baseline column's cell: its Mcycles and ratio, "refused: REASON" where TVM's own import refused
    the model, or "-" where it did not run."""
    column = row["columns"].get(name)
    if column is None:
        return "-"
    if column["cycles"] is None:
        return f"refused: {column['refused']}"
    return f"{column['cycles'] / 1e6:.1f} ({row['ratios'][name]:.2f}x)"


def tflite_lines(rows: list[dict]) -> list[str]:
    """The TFLite models' table: each against LiteRT's AArch64 build on the same core, which is both its
    baseline and its one reference (arm_models._tflite_row); then the models that build failed to run."""
    failed = [f"- {r['model']} on {r['core']}: not measured, LiteRT's AArch64 build failed: {r['failed']}"
              for r in rows if "failed" in r]
    runs = provenance.lines(rows, lambda r: f"{r['model']}/{r['core']}")     # those of the failed rows too
    rows = [r for r in rows if "failed" not in r]
    if not rows and not failed:
        return []
    out = ["", "## keras.applications as TFLite, against LiteRT's AArch64 build", "",
           ("Each model of scripts/make_tflite_applications.py (full-integer TensorFlow conversion, random "
            "seeded weights) compiled by qsynth for the core and run next to LiteRT's AArch64 build (the registry's "
            "ai-edge-litert aarch64 wheel's libLiteRt.so, its C API from a C driver: XNNPACK's kernels, "
            "tvm_integration/bench/litert_aarch64.py) on the same file, counted and costed as above. That build is "
            "every op kind's stated reference here (diff: the largest |qsynth - LiteRT| over the int8 logits, "
            "in steps, and how many of them differ). Input: each over its integer range, numpy's default_rng(0)."),
           "", *runs, "",
           "| model | core (llvm-mca's scheduling model) | qsynth Mcycles | LiteRT int8 Mcycles (ratio) "
           "| qsynth model / runtime / libc Mcycles | LiteRT library / libc Mcycles | diff from LiteRT (differing) |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        ours, theirs = parts(r["columns"]["qsynth"]), parts(r["columns"]["litert_int8"])
        out.append(f"| {r['model']} | {core_models.label(r['core'], r['mca_cpu'])} | "
                   f"{r['columns']['qsynth']['cycles'] / 1e6:.1f} | {cell(r, 'litert_int8')} | "
                   f"{ours['model'] / 1e6:.1f} / {ours['runtime'] / 1e6:.1f} / {ours['libc'] / 1e6:.1f} | "
                   f"{theirs['model'] / 1e6:.1f} / {theirs['libc'] / 1e6:.1f} | {r['max_abs_diff_vs_stated']:.3g} "
                   f"({r['differing']['stated']} of {r['differing']['outputs']}) |")
    return out + ([""] + failed if failed else [])


def markdown(run: dict) -> str:
    order = {name: i for i, name in enumerate(MODELS)}
    ordered = sorted(run["rows"], key=lambda r: (order.get(r["model"], len(order)), r["core"]))
    tflite = [r for r in ordered if r["model"] in TFLITE]
    ordered = [r for r in ordered if "failed" not in r]
    rows = [r for r in ordered if r["model"] not in TFLITE]
    names = ["onnxruntime_int8", "onnxruntime_fp32", "tvm_default"]
    names = [n for n in names if any(n in r["columns"] for r in rows)]
    out = ["# Whole models on Arm cores: estimated cycles", "",
           (f"Each model compiled by qsynth for the core (`qsynth compile --target neon --mcpu CORE`) and "
            f"onnxruntime {run['tools']['onnxruntime']}'s AArch64 build (the registry's aarch64 wheel, its C API "
            "from a C driver) on the same quantized model (int8: QDQ; a dynamic encoder's, quantize_dynamic's) and on "
            "its float original (fp32; the W1A1 and W2A2 "
            "ResNet-18 are QCDQ models, whose groups onnxruntime fuses onto its int8 kernels, and their float "
            "original is the float ResNet-18), batch 1, 1 thread, "
            f"each run under {run['tools']['qemu']} as the core (`-cpu CORE`, a /proc/cpuinfo naming it): one "
            "warm-up inference, then one measured inference whose executed blocks are counted by a qemu plugin "
            f"and each costed once by {run['tools']['llvm-mca']} on the core's model (tvm_integration/bench/"
            "qemu_blocks.py, mca.py). A column counts every block its process ran during the measured "
            "inference: the model's code, the runtime driving it (TVM's VM; onnxruntime's session and "
            "executor, inside libonnxruntime with its MLAS kernels) and the C/C++ libraries. No caches, memory "
            "stalls or branch mispredictions: block throughput on a warm core (docs/measurements.md). "
            "ratio = qsynth / baseline (below 1: qsynth needs fewer cycles). diff: the largest |qsynth - "
            "reference| over the output (the model's float logits or tokens; 0: bit-exact) against each "
            "reference (issue 50): the ONNX definition as onnxruntime's x86 exact mode computes it on this host (its "
            "QLinearAdd rounds by MLAS's float ratios, not as defined), onnxruntime's AArch64 build under qemu (whose "
            "QLinearAdd rounds ties away from zero), and the stated one, each op "
            "kind's own reference (that build on the same model with its QDQ Adds left unfused, so computed as "
            "ONNX defines them: ort_aarch64.adds_as_defined). Input: standard normal, numpy's default_rng(0)."),
           "", *provenance.lines(rows, lambda r: f"{r['model']}/{r['core']}"), "",
           "| model | core (llvm-mca's scheduling model) | qsynth Mcycles | " + " | ".join(f"{n} Mcycles (ratio)" for n in names)
           + " | qsynth model / runtime / libc Mcycles | onnxruntime_int8 library / libc Mcycles "
           "| diff ONNX / AArch64 / stated |",
           "|---|---|---|" + "---|" * len(names) + "---|---|---|"]
    for r in rows:
        cells = [cell(r, n) for n in names]
        ours, theirs = parts(r["columns"]["qsynth"]), parts(r["columns"]["onnxruntime_int8"])
        out.append(f"| {r['model']} | {core_models.label(r['core'], r.get('mca_cpu', r['core']))} | "
                   f"{r['columns']['qsynth']['cycles'] / 1e6:.1f} | "
                   + " | ".join(cells) + f" | {ours['model'] / 1e6:.1f} / {ours['runtime'] / 1e6:.1f} / "
                   f"{ours['libc'] / 1e6:.1f} | {theirs['model'] / 1e6:.1f} / {theirs['libc'] / 1e6:.1f} | {diff_cell(r)} |")
    out += lowbit_lines(rows)
    out += reference_lines(ordered)
    out += kloop_lines(ordered)
    out += ["", "Targets (issues 34 and 50):", *TARGETS, "", "Measured:"]
    for model, core, versus, bound in CHECKS:
        r = next((r for r in ordered if r["model"] == model and r["core"] == core and versus in r["ratios"]), None)
        if r is not None:
            ratio = r["ratios"][versus]
            fewer = f", {1 / ratio:.2f}x fewer cycles" if ratio < 1 else ""
            out.append(f"- {model} on {core}: {ratio:.2f}x {versus}{fewer} (target at most {bound}x: "
                       f"{'met' if ratio <= bound else 'missed'}).")
    out += tflite_lines(tflite)
    return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--cores", default=",".join(CORES))
    ap.add_argument("--tvm-default", action="store_true", help="also TVM's default build of each model (slow)")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks")
    ap.add_argument("--update", action="store_true", help="keep the rows of OUT/models_arm.json not re-run here")
    ap.add_argument("--zoo-dir", type=Path, help="where scripts/make_zoo.py wrote the zoo's models")
    ap.add_argument("--tflite-dir", type=Path,
                    help="where scripts/make_tflite_applications.py wrote the tflite_NAME models' NAME.tflite")
    a = ap.parse_args()
    logging.getLogger("root").setLevel(logging.ERROR)      # quantize_static's pre-processing advice
    names = a.models.split(",")
    for name in names:                                 # before the first row: each model is known and there
        if name not in MODELS:
            sys.exit(f"unknown model {name!r}; known: {', '.join(MODELS)}")
        if name in ZOO:
            zoo_pair(name, a.zoo_dir)
        elif name in TFLITE:
            tflite_model(name, a.tflite_dir)
    record, rows = provenance.record(threads=1), []
    with tempfile.TemporaryDirectory(prefix="qsynth-arm-models-") as tmp:
        for name in names:
            int8, fp32 = model_pair(name, Path(tmp), a.zoo_dir, a.tflite_dir)
            for core in a.cores.split(","):
                try:
                    row = bench_arm_model(int8, core, fp32, with_tvm_default=a.tvm_default)
                except litert_aarch64.Failed as e:       # the table says which model LiteRT cannot run, and why
                    row = {"core": core, "failed": e.reason}
                rows.append(dict(row, model=name))
                print(json.dumps(rows[-1]), flush=True)
    record = provenance.finished(record)
    rows = [dict(r, run=record) for r in rows]
    run = {"run": record, "tools": tools(), "rows": rows}
    if a.update and (a.out / "models_arm.json").exists():
        done = {(r["model"], r["core"]) for r in rows}
        earlier = json.loads((a.out / "models_arm.json").read_text())["rows"]
        run["rows"] = [r for r in earlier if (r["model"], r["core"]) not in done] + rows
    a.out.mkdir(parents=True, exist_ok=True)
    write_atomically(a.out / "models_arm.json", (json.dumps(run, indent=1) + "\n").encode())
    write_atomically(a.out / "models_arm.md", markdown(run).encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
