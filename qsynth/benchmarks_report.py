"""The benchmark report: ``benchmarks/*.json`` (written by the benchmark scripts and ``qsynth sweep``) ->
``benchmarks/README.md`` with its figures in ``benchmarks/figures/`` (qsynth/figures.py), for
``qsynth report``. The report only reads and redraws what the JSON files hold; a file that is absent is
a note in its section, never a guess."""
from __future__ import annotations

import json
import re
import statistics
from dataclasses import dataclass
from pathlib import Path

from synth.files import write_atomically
from tvm_integration.bench import provenance

# The synthesis paper's Table 2 (CGO 2020, Cortex-A53 NEON): compute, reduction, verify, total seconds,
# as printed (A3W1's total is printed as 158.3 though its parts add up to 96.3)
PAPER_TABLE2 = {"A1W1": (2.4, 9.0, 5.8, 17.2), "A2W1": (21.0, 13.9, 10.6, 45.5), "A1W2": (62.2, 12.7, 15.2, 90.1),
                "A3W1": (62.2, 18.9, 15.2, 158.3), "A1W3": (63.8, 32.1, 15.4, 109.7),
                "A2W2": (90.4, 52.4, 15.5, 158.3)}
CONFIGS = ["A1W1", "A1W2", "A2W1", "A2W2", "A1W3", "A3W1", "A2W3", "A3W2", "A3W3"]
NAME_CONFIG = re.compile(r"bitserial_a(\d)w(\d)_")
SOURCES = ("layers_bitserial", "layers", "synthesis", "kernels", "models", "lowbit_accuracy")   # README.md's files
PAPER_TILE = re.compile(r"bitserial_a\dw\d_unipolar_8x128_neon$")      # the paper's 8x8·8x1 layout, Q registers


class ReportError(ValueError):
    """A benchmark file is there but cannot be read: nothing is written."""


@dataclass(frozen=True)
class Written:
    """What ``write_report`` wrote: the README, the titles of its sections, the figures, and a note for
    each part left out (its data absent or incomplete)."""
    readme: str
    sections: list[str]
    figures: list[str]
    notes: list[str]


def write_report(benchmarks: Path) -> Written:
    """Write ``benchmarks``/README.md and its figures from the JSON files there."""
    data = {name: _load(benchmarks / f"{name}.json") for name in SOURCES}
    sections = [_layers(data["layers_bitserial"], data["layers"]), _synthesis(data["synthesis"]),
                _kernels(data["kernels"]), _models(data["models"]), _pareto(data["lowbit_accuracy"])]
    for section in sections:
        for name, png in section["figures"].items():
            write_atomically(benchmarks / "figures" / name, png)
    others = sorted(p.name for p in benchmarks.glob("*.md") if p.name != "README.md")
    write_atomically(benchmarks / "README.md", markdown(sections, others))
    return Written(readme=str(benchmarks / "README.md"), sections=[s["title"] for s in sections],
                   figures=[str(benchmarks / "figures" / n) for s in sections for n in s["figures"]],
                   notes=[n for s in sections for n in s["notes"]])


def _load(path: Path):
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ReportError(f"{path}: not readable JSON ({e})")


def _section(title: str, lines: list[str], figures: dict | None = None, notes: list[str] | None = None) -> dict:
    return {"title": title, "lines": lines, "figures": figures or {}, "notes": notes or []}


def _absent(title: str, file: str, how: str) -> dict:
    note = f"no {file}: {how}"
    return _section(title, [f"_Not shown: {note}._"], notes=[note])


def _config_key(config: str) -> int:
    return CONFIGS.index(config) if config in CONFIGS else len(CONFIGS)


def _table(header: list[str], rows: list[list]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + \
        ["| " + " | ".join("–" if c is None else str(c) for c in row) + " |" for row in rows]


def _layers(bitserial, int8) -> dict:
    """The paper's Figure 10 for this host: each layer's speedup over onnxruntime fp32 per
    configuration (1 thread), with the int8 operator beside; and Figure 11's C2 across configurations."""
    from qsynth import figures
    title = "Bitserial layers: speedup per quantization configuration (the paper's Figures 10 and 11)"
    if bitserial is None:
        return _absent(title, "layers_bitserial.json", "run python scripts/bench_bitserial_layers.py")
    rows = [r for r in bitserial if r["threads"] == 1 and r["correct"]]
    wrong = [f"{r['layer']} {r['config']} {r['encoding']}" for r in bitserial if not r["correct"]]
    layers = sorted({r["layer"] for r in rows}, key=lambda n: int(n[1:]))
    labels = sorted({(r["config"], r["encoding"]) for r in rows}, key=lambda c: (_config_key(c[0]), c[1]))
    fp32 = {(r["layer"], r["config"], r["encoding"]): r["speedups"]["onnxruntime_fp32"] for r in rows}
    series = {f"{c} {e}": [fp32.get((layer, c, e)) for layer in layers] for c, e in labels}
    if int8 is not None:
        by_layer = {r["layer"]: r for r in int8["rows"] if r["threads"] == 1 and r["correct"]}
        series["int8"] = [by_layer[layer]["speedups"].get("onnxruntime_fp32") if layer in by_layer else None
                          for layer in layers]
    lines = ["Each ResNet-18 layer (the paper's Table 1, batch 1, NHWC) on our operators, 1 thread: speedup = "
             "onnxruntime fp32's time on the layer / ours (`layers_bitserial.json`"
             + (", int8: `layers.json`" if int8 is not None else "") + "). The paper's Figure 10 is the same "
             "measure on a Cortex-A53 against TVM fp32.", "", *_run_lines([bitserial, int8]), "",
             "![speedup per layer](figures/layers_speedup.png)", ""]
    lines += _table(["layer", *series], [[layer, *(f"{v[i]:.2f}x" if v[i] else None for v in series.values())]
                                         for i, layer in enumerate(layers)])
    lines += ["", "Geometric means: " + ", ".join(
        f"{name} {statistics.geometric_mean([v for v in vals if v]):.2f}x" for name, vals in series.items()
        if any(vals)) + "."]
    figs = {"layers_speedup.png": figures.grouped_bars(layers, series, "Speedup over onnxruntime fp32, 1 thread",
                                                       "speedup (x)", reference=1.0)}
    if "C2" in layers:      # Figure 11: one layer across configurations, against each baseline
        c2 = [r for r in rows if r["layer"] == "C2"]
        names = [f"{r['config']} {r['encoding']}" for r in sorted(c2, key=lambda r: (_config_key(r["config"]),
                                                                                    r["encoding"]))]
        baselines = sorted({b for r in c2 for b in r["speedups"]})
        per = {b: [next(r["speedups"].get(b) for r in c2 if f"{r['config']} {r['encoding']}" == n) for n in names]
               for b in baselines}
        figs["c2_configs.png"] = figures.grouped_bars(names, {f"over {b}": v for b, v in per.items()},
                                                      "Layer C2 across configurations, 1 thread", "speedup (x)",
                                                      log=True, reference=1.0)
        lines += ["", "Layer C2 at every configuration measured, against each baseline (the paper's Figure 11; "
                  "`plain_tir` is the same schedule with `T.popcount` instead of the kernel, `int8_ours` our int8 "
                  "conv2d); log scale:", "", "![C2 across configurations](figures/c2_configs.png)"]
    if wrong:
        lines += ["", f"Left out, their output was wrong in that run: {', '.join(wrong)}."]
    return _section(title, lines, figs)


def _run_lines(data: list) -> list[str]:
    """One line per run behind a section's figures: its record, or its mark (provenance.described)."""
    return [f"- Run: {provenance.described(run)}." for run in provenance.runs(data)]


def _config_of(name: str) -> str:
    m = NAME_CONFIG.match(name)
    return f"A{m[1]}W{m[2]}" if m else "int8"


def _synthesis(synthesis) -> dict:
    """Synthesis time per configuration next to the paper's Table 2."""
    from qsynth import figures
    title = "Synthesis time per configuration (the paper's Table 2)"
    if synthesis is None:
        return _absent(title, "synthesis.json", "run qsynth sweep")
    kernels = [k for k in synthesis["kernels"] if k["status"] == "proved"]
    isas = sorted({k["name"].rsplit("_", 1)[1] for k in kernels})
    configs = sorted({_config_of(k["name"]) for k in kernels}, key=_config_key)
    tile = {_config_of(k["name"]): k for k in kernels if PAPER_TILE.search(k["name"])}
    median = {(c, i): statistics.median(k["wall_seconds"] for k in kernels
                                        if _config_of(k["name"]) == c and k["name"].endswith("_" + i))
              for c in configs for i in isas
              if any(_config_of(k["name"]) == c and k["name"].endswith("_" + i) for k in kernels)}
    rows = [[c, *(PAPER_TABLE2[c] if c in PAPER_TABLE2 else (None,) * 4),
             tile[c]["length"] if c in tile else None, _seconds(tile[c]["wall_seconds"] if c in tile else None),
             *(_seconds(median.get((c, i))) for i in isas)] for c in configs]
    run = synthesis["run"]
    lines = [f"`synthesis.json`: {len(synthesis['kernels'])} kernels by `qsynth sweep` (its last run: "
             f"{run['kernels']} kernels, {run.get('executor', 'local')}, {run['jobs']} jobs, {run['wall_seconds']} s "
             f"wall, {run['from_cache']} loaded from the cache; loaded kernels keep the times of their synthesis, "
             "and the rows of kernels a run did not sweep stay). Seconds are synthesis + proof, wall, per kernel. "
             "The paper (Cortex-A53 NEON tiles, Rosette) reports compute, reduction and verify seconds and "
             "their total as printed (its A3W1 total, 158.3, is not the sum of its parts); ours: the NEON 8x128 "
             "unipolar tile (the paper's layout) and the median over every kernel of the configuration per ISA.", "",
             *_sweep_runs(run, synthesis["kernels"]), "![synthesis time](figures/synthesis_time.png)", ""]
    lines += _table(["config", "paper compute s", "paper reduction s", "paper verify s", "paper total s",
                     "ours NEON tile instr", "ours NEON tile s", *(f"ours {i} median s" for i in isas)], rows)
    series = {"paper total (Cortex-A53)": [PAPER_TABLE2.get(c, (None,) * 4)[3] for c in configs],
              "ours, NEON 8x128 tile": [tile[c]["wall_seconds"] if c in tile else None for c in configs]}
    series |= {f"ours, {i} median": [median.get((c, i)) for c in configs] for i in isas}
    fig = figures.grouped_bars(configs, series, "Synthesis + proof time per configuration", "seconds (log)", log=True)
    return _section(title, lines, {"synthesis_time.png": fig})


def _sweep_runs(run: dict, kernels: list[dict]) -> list[str]:
    """The last sweep's record (provenance.py) and the records of the earlier runs that wrote the other
    rows (synthesis.md names their rows); nothing for a file from before records."""
    if "commit" not in run:
        return []
    earlier = [k for k in kernels if (k.get("run") or {}).get("date") != run["date"]]
    if not earlier:
        return [f"Last run: {provenance.line(run)}; every row is this run's.", ""]
    return [f"Last run: {provenance.line(run)}; {len(earlier)} rows are earlier runs' (`synthesis.md` names "
            "their rows):", "", *provenance.lines([k for k in earlier if k.get("run")]), ""]


def _seconds(value: float | None) -> str | None:
    return None if value is None else f"{value:.2f}"


def _kernels(kernels) -> dict:
    """Each x86 kernel's rate as a fraction of its instruction's measured peak, by ISA."""
    from qsynth import figures
    title = "Kernels: % of peak per ISA"
    if kernels is None:
        return _absent(title, "kernels.json", "run python scripts/bench_kernels.py")
    rows = kernels.get("x86", [])
    measured = sorted((r for r in rows if r.get("fraction_of_peak") is not None),
                      key=lambda r: (r["isa"], r["name"]))
    unmeasured = [r for r in rows if r.get("fraction_of_peak") is None]
    isas = sorted({r["isa"] for r in measured})
    colors = {i: figures.COLORS[n] for n, i in enumerate(isas)}
    machine = kernels.get("machine", {})
    lines = [f"`kernels.json` ({machine.get('cpu', '?')}, {machine.get('uarch', '?')}): each cached x86 kernel on "
             "an L1-resident workload, its rate over the peak of the instruction that bounds it (vpdpbusd for int8, "
             "vpopcntq for AVX-512 bitserial), probed right before it. NEON kernels are estimated with llvm-mca "
             f"(cycles, no peak): {len(kernels.get('neon', []))} rows in `kernels.md`.", "", *_run_lines([kernels]), ""]
    figs = {}
    if measured:
        figs["kernels_peak.png"] = figures.horizontal_bars(
            [r["name"] for r in measured], [100 * r["fraction_of_peak"] for r in measured],
            [colors[r["isa"]] for r in measured], colors, "Kernel rate as % of its instruction's peak",
            "% of peak", limit=100.0)
        lines += ["![% of peak](figures/kernels_peak.png)", ""]
        lines += _table(["ISA", "kernels", "median % of peak", "range"],
                        [[i, len(v), f"{100 * statistics.median(v):.0f}%", f"{100 * min(v):.0f}–{100 * max(v):.0f}%"]
                         for i in isas for v in [[r["fraction_of_peak"] for r in measured if r["isa"] == i]]])
        lines.append("")
        lines += _table(["kernel", "ISA", "instructions", "% of peak", "peak instruction"],
                        [[r["name"], r["isa"], r.get("length"), f"{100 * r['fraction_of_peak']:.0f}%",
                          r.get("peak_instruction")] for r in measured])
    if unmeasured:
        reasons = {}
        for r in unmeasured:
            why = r.get("peak_skipped") or "no peak instruction defined for it (scripts/bench_kernels.py peak_of)"
            reasons.setdefault(f"{r['isa']}: {why}", []).append(r["name"])
        lines += ["", "Without a % of peak:", ""]
        lines += [f"- {why}: {len(names)} kernel{'s' * (len(names) != 1)}" for why, names in reasons.items()]
    skipped = kernels.get("x86_skipped", {})
    if skipped:
        lines += ["", "Not run on this host: " + "; ".join(f"{k} ({v})" for k, v in skipped.items()) + "."]
    return _section(title, lines, figs)


def _models(models) -> dict:
    from qsynth import figures
    title = "Models: latency"
    if models is None:
        return _absent(title, "models.json", "run python scripts/bench_models.py")
    rows = models["rows"]
    groups = [f"{r['name']} {r['threads']}t" for r in rows]
    baselines = sorted({b for r in rows for b in r["baselines"]})
    series = {"qsynth": [r["ours_ms"] for r in rows]} | {b: [r["baselines"].get(b) for r in rows] for b in baselines}
    lines = [f"`models.json` ({provenance.described(models['run'])}): median ms per inference, "
             "batch 1; every row's output compared with onnxruntime's (largest difference in the table). Log scale.",
             "", "![model latency](figures/models_latency.png)", ""]
    lines += _table(["model", "threads", "qsynth ms", *(f"{b} ms" for b in baselines), "max diff vs onnxruntime",
                     "compile s"],
                    [[r["name"], r["threads"], f"{r['ours_ms']:.2f}",
                      *(_baseline_cell(r, b) for b in baselines),
                      f"{r['max_abs_diff_vs_onnxruntime']:g}", f"{r['compile_s']:.0f}"] for r in rows])
    fig = figures.grouped_bars(groups, series, "Model latency (lower is better)", "ms per inference (log)", log=True)
    return _section(title, lines, {"models_latency.png": fig})


def _baseline_cell(row: dict, name: str) -> str | None:
    """A baseline's ms, "refused: REASON" where its runtime refused the model, or None (not run)."""
    if row["baselines"].get(name) is not None:
        return f"{row['baselines'][name]:.2f}"
    return f"refused: {row['refused'][name]}" if name in row.get("refused", {}) else None


def _pareto(accuracy) -> dict:
    """Accuracy vs throughput of the low-bit models (issue 16's data): rows with a ``config``, a
    ``top1`` (fraction or %) and ``images_per_s`` or ``ms`` per image; a row without a time (its model
    did not run, ``qsynth_error`` says why) is listed as not measured and left out of the figure.
    ``runtime``, where a row has it, names what was timed."""
    from qsynth import figures
    title = "Low-bit models: accuracy / throughput Pareto front"
    if accuracy is None:
        return _absent(title, "lowbit_accuracy.json", "the low-bit models' accuracy run has not produced it yet")
    rows = accuracy["rows"] if isinstance(accuracy, dict) else accuracy
    points, unmeasured, runtimes = {}, {}, {}
    for r in rows:
        if "config" not in r or r.get("top1") is None:
            note = f"lowbit_accuracy.json: a row without config and top1: {sorted(r)}"
            return _section(title, [f"_Not shown: {note}._"], notes=[note])
        top1 = 100 * r["top1"] if r["top1"] <= 1 else r["top1"]
        speed = r.get("images_per_s") or (1000.0 / r["ms"] if r.get("ms") else None)
        if speed is None:
            unmeasured[r["config"]] = (top1, r.get("qsynth_error", "no time in the row"))
            continue
        points[r["config"]] = (speed, top1)
        if r.get("runtime"):
            runtimes[r["config"]] = r["runtime"]
    if not points:
        note = "lowbit_accuracy.json: no row has images_per_s or ms"
        return _section(title, [f"_Not shown: {note}._"], notes=[note])
    front = [n for n, (x, y) in points.items()
             if not any(x2 >= x and y2 >= y and (x2, y2) != (x, y) for x2, y2 in points.values())]
    lines = ["`lowbit_accuracy.json`: top-1 accuracy against throughput; the dashed line joins the configurations "
             "no other beats on both.", "", "![Pareto front](figures/pareto.png)", ""]
    if isinstance(accuracy, dict) and accuracy.get("data"):
        lines += [f"Data: {accuracy['data']}.", ""]
    if isinstance(accuracy, dict) and "run" in accuracy:
        lines += [f"Trained and exported by {provenance.described(accuracy['run'])}.", ""]
    if isinstance(accuracy, dict) and "bench" in accuracy:
        lines += [f"Top-1 of the committed models and times by {provenance.described(accuracy['bench']['run'])}.", ""]
    if isinstance(accuracy, dict) and "retrain" in accuracy:
        retrain = accuracy["retrain"]
        lines += [f"Retrained by {provenance.described(retrain['run'])}: top-1 "
                  + ", ".join(f"{r['config']} {100 * r['top1']:.1f}%" for r in retrain["rows"])
                  + f"; {retrain['note']}.", ""]
    lines += _table(["config", "top-1", "images/s", "on the front"],
                    [[n, f"{y:.1f}%", f"{x:.1f}", "yes" if n in front else ""] for n, (x, y) in points.items()]
                    + [[n, f"{top1:.1f}%", "not measured", ""] for n, (top1, _) in unmeasured.items()])
    if runtimes:
        lines += ["", "Timed: " + "; ".join(f"{n} on {runtime}" for n, runtime in runtimes.items()) + "."]
    notes = [f"lowbit_accuracy.json: {n} not measured: {why}" for n, (_, why) in unmeasured.items()]
    if notes:
        lines += ["", *(f"Not measured: {n}: {why}." for n, (_, why) in unmeasured.items())]
    fig = figures.pareto(points, front, "Accuracy vs throughput", "images per second", "top-1 accuracy (%)")
    return _section(title, lines, {"pareto.png": fig}, notes)


def markdown(sections: list[dict], others: list[str]) -> str:
    lines = ["# Benchmarks", "",
             "Generated by `qsynth report` from the JSON files in this folder (do not edit by hand: rerun it). "
             "The machine is shared, so timings carry the noise their JSON files note.", ""]
    lines += [f"- [{s['title']}](#{_anchor(s['title'])})" for s in sections]
    for s in sections:
        lines += ["", f"## {s['title']}", "", *s["lines"]]
    if others:
        lines += ["", "## Detailed tables", "", "Written by the benchmark scripts themselves: "
                  + ", ".join(f"[{n}]({n})" for n in others) + "."]
    return "\n".join(lines) + "\n"


def _anchor(title: str) -> str:
    """GitHub's heading anchor: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")
