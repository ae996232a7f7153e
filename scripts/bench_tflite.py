#!/usr/bin/env python3
"""Whole keras.applications models as TensorFlow's converter writes them (issue 33 item 5) through
qsynth, next to LiteRT's default interpreter (its XNNPACK delegate), OpenVINO int8 on the same .tflite
and onnxruntime int8 on tf2onnx's conversion of it, at 1 and 2 threads; writes
benchmarks/tflite_models.json and benchmarks/tflite_models.md.

The models come from scripts/make_tflite_applications.py (random weights, re-estimated BatchNorm
statistics, full-integer quantization) in --dir, with NAME.onnx beside them where tf2onnx converted
them. Each model is compiled once (its compile seconds) to a library in --dir; one worker process per
thread count (TVM sizes its pool once per process) loads the libraries, compares qsynth's outputs with
LiteRT's on --inputs random inputs (the largest difference in steps of the output, which is int8 or
uint8), and times ours and the baselines side by side (models.side_by_side_ms); at 1 thread also the
CPU time of ours and of LiteRT (zoo.cpu_ms), and, for a model slower than LiteRT, where our time goes
(zoo.cpu_profile: CPU ms per VM function). The hand-written notes between the markers of
tflite_models.md are kept.

    python scripts/bench_tflite.py [--models resnet50,...] [--dir /tmp/tflite_apps] [--threads 1,2]
                                   [--trials 20] [--inputs 5] [--recompile] [--no-openvino]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scripts.bench_zoo import host_line, run_of  # noqa: E402
from scripts.make_tflite_applications import APPLICATIONS, DEFAULT_OUT  # noqa: E402
from synth.files import write_atomically  # noqa: E402
from tvm_integration.bench import provenance, tuned_shapes  # noqa: E402

NOTES = ("<!-- notes: hand-written, kept by scripts/bench_tflite.py -->", "<!-- /notes -->")
BASELINES = {"litert_int8": "LiteRT (XNNPACK)", "openvino_int8": "OpenVINO int8",
             "openvino_int8_vnni": "OpenVINO int8 (VNNI only)", "onnxruntime_int8": "onnxruntime int8 (tf2onnx)"}


def library(directory: Path, name: str) -> Path:
    return directory / f"{name}.qsynth.so"


def load_or_compile(directory: Path, name: str, threads: int, recompile: bool):
    """The compiled model (its library in ``directory``, compiled and saved first if absent or
    ``recompile``) and its compile seconds (None if loaded)."""
    from tvm_integration.qnn.runtime.model import CompiledModel, compile_model
    if library(directory, name).exists() and not recompile:
        return CompiledModel.load(library(directory, name), threads=threads), None
    start = time.perf_counter()
    model = compile_model(directory / f"{name}.tflite", threads=threads)
    seconds = time.perf_counter() - start
    model.save(library(directory, name))
    return model, seconds


def steps(ours: dict, theirs: list, names: list[str]) -> int:
    """The largest |ours - theirs| over the outputs: 8-bit integers, so steps of the output's scale."""
    return max(int(np.abs(ours[n].astype(int) - t.astype(int)).max()) for n, t in zip(names, theirs))


def openvino_runs(path: Path, feed: dict, expected: dict, threads: int) -> tuple[dict, dict]:
    """OpenVINO's configurations on the .tflite (it reads them directly): name -> a function starting a
    worker and returning its batch timer, and name -> its report (version, primitives, the difference
    from LiteRT in output steps) or why it is unavailable."""
    from tvm_integration.bench import openvino_baseline
    from tvm_integration.bench.timing import SelfTimed
    runs, report = {}, {}
    for name, env in openvino_baseline.configurations().items():
        try:
            worker = openvino_baseline.Worker(path, threads, feed, env)
            outputs = worker.outputs if len(expected) > 1 else dict(zip(expected, worker.outputs.values()))
            report[name] = {**worker.info, **openvino_baseline.compare(outputs, expected, dict.fromkeys(expected, 1.0))}
            worker.close()
        except openvino_baseline.Unavailable as e:
            report[name] = {"unavailable": str(e)}
            continue
        runs[name] = lambda env=env: SelfTimed(openvino_baseline.Worker(path, threads, feed, env).batch)
    return runs, report


def onnxruntime_runs(onnx_path: Path, feed: dict, expected: dict, threads: int) -> tuple[dict, dict]:
    """onnxruntime int8 on tf2onnx's conversion of the model, if there: its run and its difference."""
    from tvm_integration.bench.models import onnxruntime_session
    if not onnx_path.exists():
        return {}, {"unavailable": f"no {onnx_path.name} (make_tflite_applications.py writes it where tf2onnx "
                                   "is importable)"}
    session = onnxruntime_session(onnx_path, threads)
    names = [i.name for i in session.get_inputs()]
    onnx_feed = dict(zip(names, feed.values()))
    theirs = session.run(None, onnx_feed)
    report = {"max_diff_steps": steps(dict(zip(expected, theirs)), list(expected.values()), list(expected))}

    def start():
        session = onnxruntime_session(onnx_path, threads)
        return lambda: session.run(None, onnx_feed)
    return {"onnxruntime_int8": start}, report


def where_the_time_goes(model, feed: dict, top: int = 12) -> dict:
    """Our CPU ms per run by operator kind and the slowest functions (zoo.cpu_profile, one thread)."""
    from tvm_integration.bench.zoo import cpu_profile, kind
    functions = cpu_profile(model, feed)
    kinds: dict[str, list] = {}
    for name, (cpu, _, calls) in functions.items():
        entry = kinds.setdefault(kind(name), [0.0, 0, 0])
        entry[0] += cpu
        entry[1] += 1
        entry[2] += calls
    return {"by_kind": dict(sorted(kinds.items(), key=lambda kv: -kv[1][0])),
            "slowest": sorted(([n, *v] for n, v in functions.items()), key=lambda r: -r[1])[:top]}


def litert_run(path: Path, feed: dict, threads: int):
    """A run of LiteRT's default interpreter on ``feed``, in a new interpreter."""
    from tvm_integration.bench.models import litert_runner
    run, _ = litert_runner(path, threads)
    return lambda: run(feed)


def row(directory: Path, name: str, threads: int, trials: int, count: int, recompile: bool, openvino: bool) -> dict:
    """The model's row at ``threads`` (TVM's pool already that size: TVM_NUM_THREADS set by ``main``)."""
    from tvm_integration.bench.models import litert_runner, random_inputs, side_by_side_ms
    from tvm_integration.bench.zoo import cpu_ms
    path = directory / f"{name}.tflite"
    model, compile_s = load_or_compile(directory, name, threads, recompile)
    rng = np.random.default_rng(0)
    feeds = [random_inputs(model.inputs, rng) for _ in range(count)]
    run, _ = litert_runner(path, threads)
    diff = max(steps(model(feed), run(feed), model.outputs) for feed in feeds)
    feed = feeds[0]
    expected = dict(zip(model.outputs, run(feed)))
    runs = {"litert_int8": lambda: litert_run(path, feed, threads)}
    report = {}
    if openvino:
        more, report = openvino_runs(path, feed, expected, threads)
        runs |= more
    more, report["onnxruntime_int8"] = onnxruntime_runs(directory / f"{name}.onnx", feed, expected, threads)
    runs |= more
    times = side_by_side_ms(model, feed, runs, trials)
    ours = times.pop("ours")
    result = {"name": name, "threads": threads, "ours_ms": ours, "baselines": times,
              "speedups": {k: v / ours for k, v in times.items()}, "max_diff_steps": diff, "compared": count,
              "baseline_reports": report, "tuning": tuned_shapes.coverage(path),
              **({"compile_s": compile_s} if compile_s is not None else {})}
    if threads == 1:            # CPU time: what the load of other jobs on a shared machine disturbs least
        model.vm.set_input("main", *model.arguments(feed))
        ours_cpu = cpu_ms(lambda: model.vm.invoke_stateful("main"), trials)
        result |= {"ours_cpu_ms": ours_cpu, "litert_int8_cpu_ms": cpu_ms(lambda: run(feed), trials)}
        if result["litert_int8_cpu_ms"] < ours_cpu:
            result["profile"] = where_the_time_goes(model, feed)
    return result


def worker(directory: Path, names: list[str], threads: int, trials: int, count: int, recompile: bool,
           openvino: bool) -> None:
    """One JSON row per model on stdout (a model's failure is its row)."""
    for name in names:
        try:
            r = row(directory, name, threads, trials, count, recompile, openvino)
        except Exception as e:      # noqa: BLE001
            r = {"name": name, "threads": threads, "error": f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"}
        print(json.dumps(r), flush=True)


def cell(r: dict, key: str) -> str:
    report = r.get("baseline_reports", {}).get(key, {})
    if key in r["baselines"]:
        return f"{r['baselines'][key]:.2f}"
    return "n/a" if "unavailable" in report or key == "onnxruntime_int8" else "-"


def markdown(data: dict, notes: str) -> str:
    rows = data["rows"]
    keys = [k for k in BASELINES if any(k in r.get("baselines", {}) for r in rows)] or ["litert_int8"]
    lines = ["# keras.applications as TFLite: qsynth next to LiteRT", "",
             f"Host: {data['host']}.", "",
             *provenance.lines(rows, lambda r: f"{r['name']} {r['threads']}t", lambda r: run_of(r, data["runs"])),
             "",
             "Models: `scripts/make_tflite_applications.py` (TensorFlow 2.21, keras.applications with random "
             "weights, re-estimated BatchNorm statistics, non-zero biases; full-integer quantization, int8 I/O, "
             "`mobilenet_v2_uint8` uint8 I/O; logits out). Times: median ms per inference (wall clock), qsynth and "
             "the baselines timed side by side in one process (`models.side_by_side_ms`); ratio = LiteRT / qsynth "
             "(above 1: qsynth is faster); steps: the largest |qsynth - LiteRT| over the random inputs compared, "
             "in steps of the output (0: bit-exact); CPU ms (1 thread): process CPU time per inference "
             "(`zoo.cpu_ms`), which load from the other jobs on this shared 2-core machine disturbs least; tuning: "
             "how many of the model's int8 tile shapes this host's tuning log chose (tuned, partly k/n, untuned: the "
             "rest take kernels/tuning.py's least-padding rule; -: the run did not record it).", ""]
    for threads in sorted({r["threads"] for r in rows}):
        cpu = threads == 1
        lines += [f"## {threads} thread{'s' if threads > 1 else ''}", "",
                  "| model | qsynth ms | " + " | ".join(BASELINES[k] for k in keys) + " | ratio to LiteRT | steps "
                  "vs LiteRT (inputs) | tuning |" + (" CPU ms qsynth / LiteRT (ratio) |" if cpu else ""),
                  "|---|---|" + "---|" * len(keys) + "---|---|---|" + ("---|" if cpu else "")]
        for name in data["models"]:
            r = next((r for r in rows if r["name"] == name and r["threads"] == threads), None)
            if r is None:
                continue
            if "error" in r:
                lines.append(f"| {name} | fails: {r['error']} |" + " |" * (len(keys) + 3 + cpu))
                continue
            ratio = r["speedups"].get("litert_int8")
            line = (f"| {name} | {r['ours_ms']:.2f} | " + " | ".join(cell(r, k) for k in keys)
                    + f" | {f'{ratio:.2f}x' if ratio else '-'} | {r['max_diff_steps']} ({r['compared']}) | "
                    f"{tuned_shapes.label(r.get('tuning'))} |")
            if cpu:
                line += (f" {r['ours_cpu_ms']:.2f} / {r['litert_int8_cpu_ms']:.2f} "
                         f"({r['litert_int8_cpu_ms'] / r['ours_cpu_ms']:.2f}x) |")
            lines.append(line)
        lines.append("")
    compiles = {r["name"]: r["compile_s"] for r in rows if "compile_s" in r}
    if compiles:
        lines += ["Compile seconds (`compile_model`, once per model): "
                  + ", ".join(f"{n} {s:.0f}" for n, s in compiles.items()) + ".", ""]
    reports = [f"{r['name']} {k}: " + (f"unavailable: {v['unavailable']}" if "unavailable" in v else
                                         f"{v['max_diff_steps']:g} steps" + (f" ({', '.join(v['primitives'])})"
                                                                             if v.get("primitives") else ""))
               for r in rows if r["threads"] == min(x["threads"] for x in rows)
               for k, v in r.get("baseline_reports", {}).items()]
    if reports:
        lines += ["Baselines' outputs on the first input against LiteRT's, in output steps (the same at every thread "
                  "count; OpenVINO: the primitives of its convolutions and matmuls):", "",
                  *(f"- {x}" for x in reports), ""]
    lines += ["## Notes", "", NOTES[0], notes.strip() or "(no notes written yet)", NOTES[1], ""]
    profiles = [r for r in rows if "profile" in r]
    if profiles:
        lines += ["## Where qsynth's time goes (1 thread, models slower than LiteRT)", "",
                  "`zoo.cpu_profile`: CPU ms per inference by `time.thread_time` around each VM call, grouped by "
                  "operator (TVM's function names without their numbers).", ""]
        for r in profiles:
            p = r["profile"]
            kinds = ", ".join(f"{k} {v[0]:.2f} ({v[1]} fn, {v[2]} calls)" for k, v in list(p["by_kind"].items())[:8])
            slow = ", ".join(f"{n} {cpu:.3f}" for n, cpu, *_ in p["slowest"])
            lines += [f"### {r['name']}", "", f"- CPU ms qsynth {r['ours_cpu_ms']:.2f}, LiteRT "
                      f"{r['litert_int8_cpu_ms']:.2f}", f"- by operator (CPU ms): {kinds}",
                      f"- slowest functions (CPU ms): {slow}", ""]
    return "\n".join(lines)


def kept_notes(table: str) -> str:
    """The hand-written notes of a table ``markdown`` wrote ("" where none were written), which it keeps."""
    notes = table.split(NOTES[0], 1)[1].split(NOTES[1], 1)[0] if NOTES[0] in table else ""
    return "" if notes.strip() == "(no notes written yet)" else notes


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(APPLICATIONS))
    ap.add_argument("--dir", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--inputs", type=int, default=5, help="random inputs compared with LiteRT")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks")
    ap.add_argument("--recompile", action="store_true", help="compile even where --dir holds a library")
    ap.add_argument("--no-openvino", action="store_true")
    ap.add_argument("--markdown-only", action="store_true", help="rewrite tflite_models.md from its .json")
    ap.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    names = a.models.split(",")
    unknown = sorted(set(names) - set(APPLICATIONS))
    if unknown:
        ap.error(f"unknown models {unknown}; known: {', '.join(APPLICATIONS)}")
    if a.worker:
        worker(a.dir, names, a.worker, a.trials, a.inputs, a.recompile, not a.no_openvino)
        return 0
    md, js = a.out / "tflite_models.md", a.out / "tflite_models.json"
    notes = kept_notes(md.read_text() if md.exists() else "")
    previous = json.loads(js.read_text()) if js.exists() else {}
    if a.markdown_only:
        write_atomically(md, markdown(previous, notes))
        return 0
    missing = [n for n in names if not (a.dir / f"{n}.tflite").exists()]
    if missing:
        ap.error(f"{a.dir} lacks {', '.join(missing)}: run scripts/make_tflite_applications.py -o {a.dir} first")
    rows, threads_run = [], [int(t) for t in a.threads.split(",")]
    record = provenance.record(threads_run)
    for k, threads in enumerate(threads_run):
        args = [sys.executable, __file__, "--worker", str(threads), "--models", a.models, "--dir", str(a.dir),
                "--trials", str(a.trials), "--inputs", str(a.inputs)]
        args += (["--recompile"] if a.recompile and k == 0 else []) + (["--no-openvino"] if a.no_openvino else [])
        done = subprocess.run(args, env={**os.environ, "TVM_NUM_THREADS": str(threads)}, capture_output=True, text=True)
        rows += [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        if done.returncode:
            last = [line for line in done.stderr.splitlines() if line.strip()]
            print(f"worker at {threads} threads: exit code {done.returncode}: {last[-1] if last else ''}",
                  file=sys.stderr)
    run = provenance.finished(record) | {"models": names}
    runs = [r for r in previous.get("runs", []) if set(r["models"]) - set(names)
            or set(r["threads"]) - set(threads_run)] + [run]
    data = {"host": host_line(), "runs": runs, "models": list(APPLICATIONS),
            "rows": [r for r in previous.get("rows", []) if r["name"] not in names or r["threads"] not in threads_run]
            + rows}
    write_atomically(js, json.dumps(data, indent=1) + "\n")
    write_atomically(md, markdown(data, notes))
    print(md.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
