#!/usr/bin/env python3
"""The zoo of real architectures (issue 31) through qsynth, next to onnxruntime int8 (same QDQ file; its default and its exact mode),
onnxruntime fp32 (the float original) and OpenVINO int8 (same QDQ file), at 1 and 2 threads; writes
benchmarks/zoo.json and benchmarks/zoo.md. The models come from scripts/make_zoo.py (torchvision
definitions, random weights, quantize_static QDQ u8/s8 per-channel) in --dir.

Each model is compiled once, in a process of its own (its compile seconds; a failure is its one-line
error), to a library in --dir; one worker process per thread count loads the libraries (TVM sizes its
pool once per process), compares outputs with onnxruntime on 3 random inputs (bit-exact, or the largest
difference in steps of the output's scale) and times ours and the baselines side by side
(tvm_integration/bench/zoo.py). A model slower than onnxruntime int8 at 1 thread (CPU time), or not
exact, is then profiled at 1 thread: CPU time per operator of ours next to onnxruntime's own
per-operator profile.
Rows of models not run now are kept from the previous zoo.json; the hand-written findings between the
markers under "Where the time goes" in zoo.md are kept.

    python scripts/bench_zoo.py [--models resnet50,...] [--dir /tmp/zoo] [--threads 1,2] [--trials 20]
                                [--recompile] [--no-openvino] [--markdown-only]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from synth.files import write_atomically  # noqa: E402
from tvm_integration.bench import provenance, tuned_shapes  # noqa: E402

MODELS = ["resnet50", "mobilenet_v3_large", "efficientnet_b0", "shufflenet_v2", "densenet121", "regnet_y_400mf",
          "googlenet", "squeezenet1_1", "convnext_tiny"]
COMPILE_TIMEOUT_S = 900
FINDINGS = ("<!-- findings: hand-written, kept by scripts/bench_zoo.py -->", "<!-- /findings -->")


def library(directory: Path, name: str) -> Path:
    return directory / f"{name}.int8.qsynth.so"


def compile_one(directory: Path, name: str) -> dict:
    """Compile the model in this process and save its library: {"compile_s"} or {"error"}."""
    from tvm_integration.qnn.runtime.model import compile_model
    start = time.perf_counter()
    try:
        model = compile_model(directory / f"{name}.int8.onnx")
        seconds = time.perf_counter() - start
        model.save(library(directory, name))
    except Exception as e:          # noqa: BLE001 - a model's failure is its row, not the end of the run
        lines = [line for line in str(e).strip().splitlines() if line.strip()]
        return {"error": f"{type(e).__name__}: {lines[-1].strip() if lines else ''}"[:300]}
    return {"compile_s": seconds}


def compile_all(directory: Path, names: list[str], recompile: bool) -> dict[str, dict]:
    """name -> compile result, each compiled in a subprocess (a crash or a hang is that model's error);
    results kept in --dir (NAME.compile.json) and reused unless ``recompile``."""
    results = {}
    for name in names:
        record = directory / f"{name}.compile.json"
        if not recompile and record.exists() and (library(directory, name).exists()
                                                  or "error" in json.loads(record.read_text())):
            results[name] = json.loads(record.read_text())
            print(f"{name}: compiled before ({results[name]})", flush=True)
            continue
        try:
            done = subprocess.run([sys.executable, __file__, "--compile-one", name, "--dir", str(directory)],
                                  capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S)
            lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
            if lines:
                result = json.loads(lines[-1])
            else:
                last = [line for line in done.stderr.splitlines() if line.strip()]
                result = {"error": f"exit code {done.returncode}: {last[-1].strip() if last else ''}"[:300]}
        except subprocess.TimeoutExpired:
            result = {"error": f"no result in {COMPILE_TIMEOUT_S} s"}
        write_atomically(record, json.dumps(result))
        results[name] = result
        print(f"{name}: {result}", flush=True)
    return results


def worker(directory: Path, names: list[str], threads: int, trials: int, openvino: bool) -> None:
    """One JSON row per model on stdout (the error of a model that fails here is its row)."""
    from tvm_integration.bench.zoo import row
    for name in names:
        try:
            r = row(name, library(directory, name), directory / f"{name}.int8.onnx",
                    directory / f"{name}.fp32.onnx", threads, trials, openvino)
        except Exception as e:      # noqa: BLE001
            r = {"name": name, "threads": threads, "error": f"{type(e).__name__}: {str(e).strip()[:300]}"}
        print(json.dumps(r), flush=True)


def profile(directory: Path, name: str) -> None:
    from tvm_integration.bench.zoo import where_the_time_goes
    print(json.dumps({"name": name, **where_the_time_goes(library(directory, name), directory / f"{name}.int8.onnx")}),
          flush=True)


def subprocess_rows(args: list[str], threads: int) -> list[dict]:
    env = {**os.environ, "TVM_NUM_THREADS": str(threads)}
    done = subprocess.run([sys.executable, __file__, *args], env=env, capture_output=True, text=True)
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode:
        last = [line for line in done.stderr.splitlines() if line.strip()]
        print(f"worker {args}: exit code {done.returncode}: {last[-1] if last else ''}", file=sys.stderr)
    return rows


def host_line() -> str:
    from isa_specs import host
    flags = sorted(host.cpu_flags() & {"avx2", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni", "amx_int8",
                                       "amx_tile", "avx512_bf16"})
    name = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                 if line.startswith("model name")), platform.processor())
    return f"{name} ({host.model().uarch}), {os.cpu_count()} cores shared with other jobs; flags: {' '.join(flags)}"


def run_of(row: dict, runs: list[dict]) -> dict:
    """The run of ``runs`` (oldest first) that measured ``row``: the last to run its model at its threads
    (a run from before provenance records lacks ``threads``: it ran 1 and 2); a row none ran says so."""
    return next((r for r in reversed(runs) if row["name"] in r["models"] and row["threads"] in r.get("threads", [1, 2])),
                {"command": "no run recorded"})


def is_slow_or_inexact(r: dict) -> bool:
    """Slower than onnxruntime int8 (by CPU time where the row has it: wall time on the shared cores
    mostly measures the load), or not exact."""
    if "error" in r:
        return False
    ours, theirs = ((r["ours_cpu_ms"], r["onnxruntime_int8_cpu_ms"]) if "ours_cpu_ms" in r
                    else (r["ours_ms"], r["baselines"].get("onnxruntime_int8", float("inf"))))
    return theirs < ours or r["max_abs_diff"] != 0


def exact_cell(r: dict) -> str:
    if r["max_abs_diff"] == 0:
        return "exact"
    steps = r["max_diff_steps"]
    if steps is not None and steps < 0.01:      # a float tail after the last quantized tensor (SqueezeNet's mean)
        return f"{r['max_abs_diff']:.1e} abs (< 0.01 step)"
    steps = round(steps, 2) if steps is not None else None
    return f"{steps:g} step{'' if steps == 1 else 's'}" if steps is not None else f"{r['max_abs_diff']:g} (abs)"


def default_cell(r: dict) -> str:
    """How many output values onnxruntime int8's default gets wrong (differ from its exact mode), of how many."""
    default = r.get("onnxruntime_int8_default")
    return f"{default['differing']} of {default['values']}" if default else "-"


def baselines(rows: list[dict]) -> tuple[list[str], list[str]]:
    """(column titles, row keys) of the baselines the rows timed, in table order; the exact mode and
    OpenVINO's VNNI-only run only where some row has them."""
    timed = {k for r in rows for k in r.get("baselines", {})}
    every = [("onnxruntime int8", "onnxruntime_int8"), ("onnxruntime int8, exact mode", "onnxruntime_int8_exact"),
             ("onnxruntime fp32", "onnxruntime_fp32"), ("OpenVINO int8", "openvino_int8"),
             ("OpenVINO int8 (VNNI only)", "openvino_int8_vnni")]
    always = {"onnxruntime_int8", "onnxruntime_fp32", "openvino_int8"}
    kept = [(title, key) for title, key in every if key in always | timed]
    return [title for title, _ in kept], [key for _, key in kept]


def markdown(data: dict, findings: str) -> str:
    rows, compiles, profiles = data["rows"], data["compile"], data.get("profiles", {})
    columns, keys = baselines(rows)
    lines = ["# The zoo: real architectures, batch 1, 224x224", "",
             f"Host: {data['host']}.", "",
             *provenance.lines(rows, lambda r: f"{r['name']} {r['threads']}t", lambda r: run_of(r, data["runs"])),
             "",
             "Models: torchvision definitions with random weights (nothing downloaded), exported by torch's ONNX "
             "exporter (opset 18) and quantized by `onnxruntime.quantization.quantize_static` (QDQ, u8 activations, "
             "s8 per-channel weights, 8 random calibration inputs): `scripts/make_zoo.py`, run with torch 2.13 and "
             "torchvision 0.28. Times: median ms per inference, ours and the baselines timed side by side "
             "(`timing.side_by_side`); ratio = onnxruntime int8 / qsynth (above 1: qsynth is faster); onnxruntime "
             "int8, exact mode: `session.x64quantprecision` = 1, the fair peer on x86 hosts without VNNI, where the "
             "default saturates vpmaddubsw; exact: qsynth's output equals that mode's integer result "
             "(`models.reference_session`) on 3 random inputs, else the largest difference in steps of "
             "the output's scale; onnxruntime int8 wrong: how many output values its default gets wrong (differ "
             "from its exact mode; -: the run did not record it); compile s: `compile_model` once, in a process "
             "of its own. The 2 cores are shared with other jobs: expect noise of 10-30%. tuning: how many of the model's int8 tile shapes this host's "
             "tuning log chose (tuned, partly k/n, untuned: the rest take kernels/tuning.py's least-padding rule).", ""]
    for threads in sorted({r["threads"] for r in rows}):
        cpu = threads == 1 and any("ours_cpu_ms" in r for r in rows)
        lines += [f"## {threads} thread{'s' if threads > 1 else ''}", "",
                  "| model | qsynth ms | " + " | ".join(columns) + " | ratio to onnxruntime int8 | exact/steps | "
                  "onnxruntime int8 wrong | compile s | tuning |"
                  + (" CPU ms qsynth / onnxruntime int8 (ratio) |" if cpu else ""),
                  "|---|---|" + "---|" * len(columns) + "---|---|---|---|---|" + ("---|" if cpu else "")]
        for name in data["models"]:
            r = next((r for r in rows if r["name"] == name and r["threads"] == threads), None)
            c = compiles.get(name, {})
            if "error" in c:
                lines.append(f"| {name} | compile fails: {c['error']} |" + " |" * (len(columns) + 3))
            elif r is None:
                lines.append(f"| {name} | not run (time) |" + " |" * (len(columns) + 3))
            elif "error" in r:
                lines.append(f"| {name} | fails: {r['error']} |" + " |" * (len(columns) + 2)
                             + f" {c.get('compile_s', 0):.0f} |")
            else:
                cells = [f"{r['baselines'][k]:.2f}" if k in r["baselines"] else "-" for k in keys]
                ratio = r["speedups"].get("onnxruntime_int8")
                lines.append(f"| {name} | {r['ours_ms']:.2f} | " + " | ".join(cells)
                             + f" | {f'{ratio:.2f}x' if ratio else '-'} | {exact_cell(r)} | {default_cell(r)} | "
                             f"{c['compile_s']:.0f} | "
                             f"{tuned_shapes.label(r.get('tuning'))} |"
                             + (f" {r['ours_cpu_ms']:.2f} / {r['onnxruntime_int8_cpu_ms']:.2f} "
                                f"({r['onnxruntime_int8_cpu_ms'] / r['ours_cpu_ms']:.2f}x) |" if "ours_cpu_ms" in r
                                else " - |" if cpu else ""))
        width = len(lines[-len(data["models"]) - 1].split("|"))     # the separator row's cells, in every row
        lines[-len(data["models"]):] = [line + " |" * max(0, width - len(line.split("|"))) for line in
                                         lines[-len(data["models"]):]]
        lines.append("")
    unavailable = sorted({f"{n} ({r['name']}, {r['threads']} thread(s)): {rep['unavailable']}" for r in rows
                          for n, rep in r.get("openvino", {}).items() if "unavailable" in rep})
    steps = [f"{r['name']} {max(v['max_diff_steps'] for v in r['openvino'].values() if v.get('max_diff_steps') is not None):g}"
             for r in rows if r["threads"] == 1 and any(v.get("max_diff_steps") is not None
                                                         for v in r.get("openvino", {}).values())]
    if steps:
        lines += ["OpenVINO's largest difference from onnxruntime, in output steps (1 thread): " + ", ".join(steps)
                  + ".", ""]
    if unavailable:
        lines += ["OpenVINO unavailable: " + "; ".join(unavailable), ""]
    lines += ["## Where the time goes", "",
              "Models slower than onnxruntime int8 at 1 thread (CPU time), or not exact, profiled at 1 thread "
              "(`tvm_integration/bench/zoo.py` `where_the_time_goes`): CPU ms per inference by `time.thread_time` "
              "around each VM call, grouped by operator (TVM's function names without their numbers), next to "
              "onnxruntime's own profile by (fused) operator type (its profiler slows every node down; its times are "
              "scaled to its unprofiled CPU time per inference, i.e. shares of it).", "",
              FINDINGS[0], findings.strip() or "(no findings written yet)", FINDINGS[1], ""]
    return "\n".join(lines + profile_lines(profiles))


def profile_lines(profiles: dict) -> list[str]:
    """A section per profiled model (``zoo.where_the_time_goes``): ours by operator, onnxruntime's by
    operator, our slowest functions."""
    lines = []
    for name, p in profiles.items():
        ours = ", ".join(f"{k} {v[0]:.2f} ({v[2]} fn)" for k, v in list(p["ours_by_kind"].items())[:8])
        theirs = ", ".join(f"{k} {v[0]:.2f} ({v[1]})" for k, v in list(p["onnxruntime_by_op"].items())[:8])
        slow = ", ".join(f"{n} {cpu:.2f}" for n, cpu, *_ in p["ours_slowest"][:6])
        lines += [f"### {name}", "",
                  f"- CPU ms per inference: qsynth {p['ours_cpu_ms']:.2f}, onnxruntime int8 "
                  f"{p['onnxruntime_int8_cpu_ms']:.2f}",
                  f"- qsynth by operator (CPU ms, functions): {ours}",
                  f"- onnxruntime by operator (ms, nodes): {theirs}",
                  f"- qsynth's slowest functions (CPU ms): {slow}", ""]
    return lines


def kept_notes(table: str) -> str:
    """The hand-written findings of a table ``markdown`` wrote ("" where none were written), which it keeps."""
    findings = table.split(FINDINGS[0], 1)[1].split(FINDINGS[1], 1)[0] if FINDINGS[0] in table else ""
    return "" if findings.strip() == "(no findings written yet)" else findings


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--dir", type=Path, default=Path("/tmp/zoo"))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks")
    ap.add_argument("--recompile", action="store_true", help="compile even where --dir holds a library")
    ap.add_argument("--no-openvino", action="store_true")
    ap.add_argument("--no-profile", action="store_true")
    ap.add_argument("--markdown-only", action="store_true", help="rewrite zoo.md from zoo.json")
    ap.add_argument("--compile-one", help=argparse.SUPPRESS)
    ap.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--profile-one", help=argparse.SUPPRESS)
    a = ap.parse_args()
    names = a.models.split(",")
    if a.compile_one:
        print(json.dumps(compile_one(a.dir, a.compile_one)), flush=True)
        return 0
    if a.worker:
        worker(a.dir, names, a.worker, a.trials, not a.no_openvino)
        return 0
    if a.profile_one:
        profile(a.dir, a.profile_one)
        return 0
    md, js = a.out / "zoo.md", a.out / "zoo.json"
    findings = kept_notes(md.read_text()) if md.exists() else ""
    previous = json.loads(js.read_text()) if js.exists() else {}
    if a.markdown_only:
        if not previous:
            ap.error(f"--markdown-only renders {js}, which does not exist")
        write_atomically(md, markdown(previous, findings))
        return 0
    unknown = sorted(set(names) - set(MODELS))
    if unknown:
        ap.error(f"unknown models {unknown}; known: {', '.join(MODELS)}")
    missing = [n for n in names if not all((a.dir / f"{n}.{kind}.onnx").exists() for kind in ("int8", "fp32"))]
    if missing:
        ap.error(f"{a.dir} lacks the models {', '.join(missing)} (NAME.int8.onnx and NAME.fp32.onnx); "
                 f"write them with: python scripts/make_zoo.py --out {a.dir} --models {','.join(missing)}")
    record = provenance.record([int(t) for t in a.threads.split(",")])
    compiles = compile_all(a.dir, names, a.recompile)
    ready = [n for n in names if "error" not in compiles[n]]
    rows = []
    threads_run = [int(t) for t in a.threads.split(",")]
    for threads in threads_run:
        args = ["--worker", str(threads), "--models", ",".join(ready), "--dir", str(a.dir), "--trials", str(a.trials)]
        rows += subprocess_rows(args + (["--no-openvino"] if a.no_openvino else []), threads) if ready else []
    profiles = {}
    for r in rows:
        if r["threads"] == 1 and is_slow_or_inexact(r) and not a.no_profile:
            profiles |= {p.pop("name"): p for p in subprocess_rows(["--profile-one", r["name"], "--dir", str(a.dir)], 1)}
    run = provenance.finished(record) | {"models": names}
    # an earlier run stays listed while any of its rows (model, threads) is still in the tables
    runs = [r for r in previous.get("runs", []) if set(r["models"]) - set(names)
            or set(r.get("threads", [1, 2])) - set(threads_run)] + [run]
    data = {"host": host_line(), "runs": runs, "models": MODELS,
            "compile": {**previous.get("compile", {}), **compiles},
            "rows": [r for r in previous.get("rows", []) if r["name"] not in names or r["threads"] not in threads_run]
            + rows,
            "profiles": {**{k: v for k, v in previous.get("profiles", {}).items()
                            if k not in names or 1 not in threads_run or a.no_profile}, **profiles}}
    a.out.mkdir(parents=True, exist_ok=True)
    write_atomically(js, json.dumps(data, indent=1) + "\n")
    write_atomically(md, markdown(data, findings))
    print(md.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
