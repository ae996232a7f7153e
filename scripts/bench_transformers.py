#!/usr/bin/env python3
"""Quantized transformers (issue 32 item 6) through qsynth, next to onnxruntime int8 (same quantized
file), onnxruntime fp32 (the float original) and OpenVINO int8, at 1 and 2 threads; writes
benchmarks/transformers.json and benchmarks/transformers.md.

The models (tests/transformer_models.py, random weights, float input, batch 1): encoders of BERT-base
width (hidden 768, 12 heads, feed-forward 3072) with 4 and 12 layers at sequence 128 and 384, and a
ViT-style image encoder (224x224, patch 16, hidden 384, 6 heads, 6 layers) with its patch embedding as
a strided Conv or as Reshape/Transpose and a MatMul; each quantized by onnxruntime's quantize_static
(QDQ, u8 activations, s8 per-channel weights, 8 random calibration inputs) and by quantize_dynamic (s8
weights). Compiling, comparing (3 random inputs, in steps of the output's scale) and timing
(``timing.side_by_side``, CPU time at 1 thread) are the zoo's (scripts/bench_zoo.py,
tvm_integration/bench/zoo.py), in the same subprocesses; models slower than onnxruntime int8 at 1
thread are profiled there too.

    python scripts/bench_transformers.py [--models bert_l4_s128_static,...] [--dir /tmp/transformers]
                                         [--threads 1,2] [--trials 10] [--recompile] [--no-openvino]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from scripts import bench_zoo  # noqa: E402
from synth.files import write_atomically  # noqa: E402
from tvm_integration.bench import provenance, tuned_shapes  # noqa: E402

ARCHITECTURES = {"bert_l4_s128": {"layers": 4, "seq": 128}, "bert_l4_s384": {"layers": 4, "seq": 384},
                 "bert_l12_s128": {"layers": 12, "seq": 128}, "bert_l12_s384": {"layers": 12, "seq": 384},
                 "vit_conv": {"embed": "conv"}, "vit_matmul": {"embed": "matmul"}}
QUANTIZATIONS = ("static", "dynamic")
MODELS = [f"{a}_{q}" for a in ARCHITECTURES for q in QUANTIZATIONS]


def float_model(architecture: str):
    from transformer_models import encoder, vit
    spec = ARCHITECTURES[architecture]
    if architecture.startswith("vit"):
        return vit(embed=spec["embed"])
    return encoder(hidden=768, heads=12, seq=spec["seq"], layers=spec["layers"])


def calibration(model) -> list[dict]:
    """8 standard normal inputs of the model's one float input."""
    import numpy as np
    rng = np.random.default_rng(1)
    (x,) = model.graph.input
    shape = [d.dim_value for d in x.type.tensor_type.shape.dim]
    return [{x.name: rng.standard_normal(shape).astype(np.float32)} for _ in range(8)]


def build(directory: Path, name: str) -> None:
    """NAME.int8.onnx (quantized) and NAME.fp32.onnx (a link to its float original) in ``directory``,
    unless there: the file names scripts/bench_zoo.py reads."""
    import logging

    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from tvm_integration.bench import int8_models
    architecture, quantization = name.rsplit("_", 1)
    quantized, fp32, original = (directory / f"{name}.int8.onnx", directory / f"{name}.fp32.onnx",
                                 directory / f"{architecture}.float.onnx")
    if quantized.exists() and fp32.exists():
        return
    logging.getLogger().setLevel(logging.ERROR)         # quantize_static's calibration messages
    model = float_model(architecture)
    if not original.exists():
        onnx.save(model, str(original))
    if quantization == "static":
        int8_models.quantize(model, quantized, data=calibration(model))
    else:
        quantize_dynamic(str(original), str(quantized), weight_type=QuantType.QInt8)
    fp32.unlink(missing_ok=True)
    fp32.symlink_to(original.name)


def markdown(data: dict) -> str:
    rows, compiles, profiles = data["rows"], data["compile"], data.get("profiles", {})
    columns, keys = bench_zoo.baselines(rows)
    lines = ["# Quantized transformers, batch 1", "", f"Host: {data['host']}.", "",
             *provenance.lines(rows, lambda r: f"{r['name']} {r['threads']}t",
                               lambda r: bench_zoo.run_of(r, data["runs"])), "",
             "Models (`tests/transformer_models.py`, random weights, float input): `bert_lL_sS`, an encoder of "
             "BERT-base width (hidden 768, 12 heads, feed-forward 3072, post-norm, Erf GELU) with L layers at "
             "sequence S; `vit_conv` / `vit_matmul`, a ViT-style image encoder (224x224, patch 16, 196 tokens, "
             "hidden 384, 6 heads, 6 layers), its patch embedding a strided Conv or Reshape/Transpose and a MatMul. "
             "`static`: onnxruntime's quantize_static (QDQ, u8 activations, s8 per-channel weights); `dynamic`: "
             "quantize_dynamic (s8 weights). Times: median ms per inference, qsynth and the baselines timed "
             "side by side (`timing.side_by_side`); ratio = onnxruntime int8 / qsynth (above 1: qsynth is "
             "faster); onnxruntime int8, exact mode: `session.x64quantprecision` = 1, the fair peer on x86 hosts "
             "without VNNI, where the default saturates vpmaddubsw; exact: qsynth's output equals that mode's on 3 "
             "random inputs, else the largest difference in steps of the output's scale (absolute where the output "
             "is float); onnxruntime int8 wrong: how many output values its default gets wrong (differ from its exact "
             "mode: it saturates vpmaddubsw on x86 hosts without VNNI; -: the run did not record it); CPU ms: process "
             "CPU time per inference at 1 thread, what the load of other jobs on this shared machine disturbs "
             "least (wall times at load 4-8 carry 10-30% noise); tuning: how many of the model's int8 tile shapes this "
             "host's tuning log chose (tuned, partly k/n, untuned: the rest take kernels/tuning.py's least-padding "
             "rule; -: the run did not record it).", ""]
    for threads in sorted({r["threads"] for r in rows}):
        cpu = threads == 1
        lines += [f"## {threads} thread{'s' if threads > 1 else ''}", "",
                  "| model | qsynth ms | " + " | ".join(columns)
                  + " | ratio to onnxruntime int8 | exact | onnxruntime int8 wrong | compile s | tuning |"
                  + (" CPU ms qsynth / onnxruntime int8 (ratio) |" if cpu else ""),
                  "|---|---|" + "---|" * len(keys) + "---|---|---|---|---|" + ("---|" if cpu else "")]
        for name in data["models"]:
            r = next((r for r in rows if r["name"] == name and r["threads"] == threads), None)
            c = compiles.get(name, {})
            if r is None or "error" in c or "error" in r:
                why = (f"compile fails: {c['error']}" if "error" in c else
                       f"fails: {r['error']}" if r is not None else "not run")
                lines.append(f"| {name} | {why} |")
                continue
            cells = [f"{r['baselines'][k]:.2f}" if k in r["baselines"] else "-" for k in keys]
            ratio = r["speedups"].get("onnxruntime_int8")
            line = (f"| {name} | {r['ours_ms']:.2f} | " + " | ".join(cells)
                    + f" | {f'{ratio:.2f}x' if ratio else '-'} | {bench_zoo.exact_cell(r)} | {bench_zoo.default_cell(r)} | "
                    f"{c['compile_s']:.0f} | "
                    f"{tuned_shapes.label(r.get('tuning'))} |")
            if cpu and "ours_cpu_ms" in r:
                ours, theirs = r["ours_cpu_ms"], r["onnxruntime_int8_cpu_ms"]
                line += f" {ours:.2f} / {theirs:.2f} ({theirs / ours:.2f}x) |"
            lines.append(line)
        lines.append("")
    steps = [f"{r['name']} {v['max_diff_steps']:g}" for r in rows if r["threads"] == 1
             for k, v in r.get("openvino", {}).items() if k == "openvino_int8" and v.get("max_diff_steps") is not None]
    unavailable = sorted({f"{r['name']}: {v['unavailable']}" for r in rows for v in r.get("openvino", {}).values()
                          if "unavailable" in v})
    if steps:
        lines += ["OpenVINO int8's largest difference from onnxruntime, in output steps (1 thread): "
                  + ", ".join(steps) + ".", ""]
    if unavailable:
        lines += ["OpenVINO unavailable: " + "; ".join(unavailable), ""]
    if profiles:
        lines += ["## Where the time goes", "",
                  "Models slower than onnxruntime int8 at 1 thread (`zoo.where_the_time_goes`): CPU ms per inference "
                  "by operator (TVM's function names without their numbers) next to onnxruntime's own profile "
                  "(scaled to its unprofiled CPU time).", ""]
        for name, p in profiles.items():
            ours = ", ".join(f"{k} {v[0]:.2f}" for k, v in list(p["ours_by_kind"].items())[:8])
            theirs = ", ".join(f"{k} {v[0]:.2f}" for k, v in list(p["onnxruntime_by_op"].items())[:8])
            lines += [f"- **{name}**: qsynth {p['ours_cpu_ms']:.2f} CPU ms ({ours}); onnxruntime int8 "
                      f"{p['onnxruntime_int8_cpu_ms']:.2f} ({theirs})"]
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--dir", type=Path, default=Path("/tmp/transformers"))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks")
    ap.add_argument("--recompile", action="store_true", help="compile even where --dir holds a library")
    ap.add_argument("--no-openvino", action="store_true")
    ap.add_argument("--no-profile", action="store_true")
    ap.add_argument("--markdown-only", action="store_true", help="rewrite transformers.md from transformers.json")
    a = ap.parse_args()
    md, js = a.out / "transformers.md", a.out / "transformers.json"
    previous = json.loads(js.read_text()) if js.exists() else {}
    if a.markdown_only:
        if not previous:
            ap.error(f"--markdown-only renders {js}, which does not exist")
        write_atomically(md, markdown(previous))
        return 0
    names = a.models.split(",")
    unknown = sorted(set(names) - set(MODELS))
    if unknown:
        ap.error(f"unknown models {unknown}; known: {', '.join(MODELS)}")
    record = provenance.record([int(t) for t in a.threads.split(",")])
    a.dir.mkdir(parents=True, exist_ok=True)
    for name in names:
        build(a.dir, name)
    compiles = bench_zoo.compile_all(a.dir, names, a.recompile)
    ready = [n for n in names if "error" not in compiles[n]]
    threads_run = [int(t) for t in a.threads.split(",")]
    rows = []
    for threads in threads_run:
        args = ["--worker", str(threads), "--models", ",".join(ready), "--dir", str(a.dir), "--trials", str(a.trials)]
        rows += bench_zoo.subprocess_rows(args + (["--no-openvino"] if a.no_openvino else []), threads) if ready else []
    profiles = {}
    for r in rows:
        if r["threads"] == 1 and not a.no_profile and "error" not in r \
                and r["baselines"].get("onnxruntime_int8", float("inf")) < r["ours_ms"]:
            profiles |= {p.pop("name"): p for p in bench_zoo.subprocess_rows(
                ["--profile-one", r["name"], "--dir", str(a.dir)], 1)}
    run = provenance.finished(record) | {"models": names}
    kept = [r for r in previous.get("rows", []) if r["name"] not in names or r["threads"] not in threads_run]
    data = {"host": bench_zoo.host_line(),
            "runs": [r for r in previous.get("runs", []) if {(m, t) for m in r["models"] for t in r["threads"]}
                     & {(k["name"], k["threads"]) for k in kept}] + [run],
            "models": MODELS, "compile": {**previous.get("compile", {}), **compiles}, "rows": kept + rows,
            "profiles": {**{k: v for k, v in previous.get("profiles", {}).items() if k not in names}, **profiles}}
    a.out.mkdir(parents=True, exist_ok=True)
    write_atomically(js, json.dumps(data, indent=1) + "\n")
    write_atomically(md, markdown(data))
    print(md.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
