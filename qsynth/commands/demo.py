"""``qsynth demo``: the whole path on this host in one run, for a new user. Every step is a call of
what the other commands run (the host model, the trust model, the QNN pipeline, the layer benchmark);
this module only chooses the inputs and prints one table."""
from __future__ import annotations

import functools
import logging
import os
import re
import tempfile
import time
from pathlib import Path

import typer

from qsynth.commands.bench_layer import LAYERS
from qsynth.commands.common import JSON_HELP, UsageError, positive, print_json, require_avx2
from qsynth.progress import spinner, track

X86_ISAS = ("avx2", "avx512", "amx")
# The ResNet-style model: ResNet-18 at 224x224 (1000 classes), or a narrow 32x32 one for --quick
MODEL = {"full": (224, (64, 128, 256, 512), 1000), "quick": (32, (8, 16, 16, 32), 10)}
BITSERIAL = (1, 1, "unipolar")          # the layer's configuration: A1W1, the paper's headline kernel
# the functions a tensorized operator calls: the emitted loops' extern wrappers, and the AMX loop's
# run-time wrapper (tvm_integration/kernels/amx_runtime.py)
EXTERN = re.compile(r"qs_(\w+?)_(?:kloop_extern|kruns_extern|gemm_extern|kloop_amx|kruns_amx)\b")


def demo(quick: bool = typer.Option(False, "--quick", help="a narrow 32x32 ResNet-style model and fewer timed "
                                                          "runs (compiling takes as long; the layer is the same)"),
         layer: str = typer.Option("C12", help="the ResNet-18 layer for the bitserial speedups (C2 ... C12)"),
         threads: int = typer.Option(1, callback=positive, help="TVM, onnxruntime and OpenVINO threads"),
         json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> int:
    """The main job on this host: detect the CPU, load the kernel library for it (re-proved on first
    use, missing kernels synthesized), build a pre-quantized ResNet-style model, compile it onto the
    proved kernels, check it bit for bit against onnxruntime, time it next to onnxruntime int8 and
    fp32 and OpenVINO int8, and time one ResNet-18 layer on the A1W1 bitserial kernels. Exit 1 if a kernel does not
    re-prove or cannot be synthesized, or an output differs."""
    if layer not in LAYERS:
        raise UsageError(f"unknown layer {layer!r}; accepted: {', '.join(LAYERS)} (ResNet-18, the paper's Table 1)")
    require_avx2()
    os.environ["TVM_NUM_THREADS"] = str(threads)        # read when TVM's thread pool starts
    logging.getLogger("root").setLevel(logging.ERROR)   # quantize_static's pre-processing advice
    started = time.perf_counter()
    trials = 5 if quick else 20
    result = {"host": _host()}
    synthesized = _synthesize_missing(result["host"]["runs"])
    if synthesized:
        result["host"] = _host()        # the new entries, and whether this host runs them
    result["library"], kernels = _library(result["host"], synthesized)
    result["model"] = _model("quick" if quick else "full", threads, trials, kernels)
    result["layer"] = _layer(layer, threads, 3 if quick else 7, kernels)
    result["seconds"] = round(time.perf_counter() - started, 1)
    result["load_average"] = round(os.getloadavg()[0], 2)
    failed = (result["library"]["refused"] or not all(k["proved"] for k in synthesized)
              or result["model"].get("bit_exact") is False
              or result["layer"].get("correct") is False)
    if json:
        print_json(result)
    else:
        print(render(result))
    return 1 if failed else 0


def _host() -> dict:
    """The host model and what it lacks among the x86 ISAs' features (``qsynth host``'s report)."""
    from isa_specs import host
    from qsynth import host_report
    m = host.model()
    rep = host_report.report(m, host_report.library_kernels())
    lacks = {i["isa"]: i["not_runnable"] for i in rep["isas"] if i["isa"] in X86_ISAS and i["not_runnable"]}
    return {"cpu": m.model_name, "vendor": m.vendor, "family": m.family, "model": m.model, "uarch": m.uarch,
            "uarch_known": m.uarch_known, "features": rep["host"]["features"], "lacks": lacks,
            "runs": [i["isa"] for i in rep["isas"] if i["isa"] in X86_ISAS and i["runnable"]],
            "kernels": [k for k in rep["kernels"] if k["isa"] in X86_ISAS]}


def _needed(isas: list[str]) -> list:
    """The specs the demo's operators choose among, from the sweep's list: the u8 x s8 tiles the int8
    operator tensorizes with and the GEMM-shaped tiles of the layer's bitserial configuration."""
    from qsynth.sweep import configs
    from tvm_integration.kernels.selection import EXACT_TYPES
    return [s for s in configs(isas)
            if (s.kind == "int8" and s.types in EXACT_TYPES and s.layout != "tile")
            or (s.kind == "bitserial" and (s.abits, s.wbits, s.encoding) == BITSERIAL and s.cols > 1)]


def _synthesize_missing(isas: list[str]) -> list[dict]:
    """Synthesize (and store, when proved) the needed kernels of ``isas`` missing from the cache."""
    from synth import cache
    from synth.kernel import cache_key_fields, kernel
    from synth.stages import SynthesisFailed
    missing = [s for s in _needed([i for i in isas if i != "amx"])
               if not cache.path_for(cache.cache_key(cache_key_fields(s, "length"))).exists()]
    done = []
    for spec in track(missing, len(missing), "synthesizing missing kernels"):
        try:
            entry, _ = kernel(spec)
            done.append({"name": spec.name, "proved": entry["proof"]["proved"]})
        except SynthesisFailed as e:
            done.append({"name": spec.name, "proved": False, "reason": str(e)})
    return done


def _library(host_info: dict, synthesized: list[dict]) -> tuple[dict, dict]:
    """Re-prove (``synth.trust``) every cached x86 kernel this host runs that is not stamped yet.
    Returns the summary and the entries by name."""
    from synth import cache, trust
    runnable = {k["name"] for k in host_info["kernels"] if k["runnable"]}
    paths = {}
    for path in cache.entries():
        try:
            entry = cache.read(path)
        except cache.CacheError:
            continue                # listed as unreadable by _host; never used
        if entry["name"] in runnable:
            paths[path] = entry
    unstamped = [p for p, e in paths.items() if not trust.stamped(e)]
    refused = [f"{v['file']} {v['name'] or ''}: {'; '.join(v['failures'])}"
               for v in track(trust.verify_paths(unstamped), len(unstamped), "re-proving the host's kernels")
               if not v["ok"]]
    entries = {e["name"]: e for e in paths.values()}
    summary = {"runnable": len(paths), "reproved_now": len(unstamped) - len(refused), "refused": refused,
               "synthesized": synthesized, "by_isa": {i: sum(e["spec"]["isa"] == i for e in entries.values())
                                                      for i in X86_ISAS}}
    return summary, entries


def _kernel_row(name: str, role: str, entries: dict) -> dict:
    entry = entries.get(name)
    if entry is None:
        return {"name": name, "role": role, "instructions": None, "proof": "not in this host's library"}
    methods = sorted({o["method"] for o in entry["proof"]["obligations"]})
    from synth import trust
    proof = ("proved" if entry["proof"]["proved"] else "NOT proved") + \
        (", re-proved on this machine" if trust.stamped(entry) else ", not re-proved here")
    return {"name": name, "role": role, "instructions": entry["length"], "proof": proof,
            "obligations": len(entry["proof"]["obligations"]), "methods": methods}


def _model(size: str, threads: int, trials: int, entries: dict) -> dict:
    """Build the model, compile it, compare it with onnxruntime on three inputs, time it next to
    onnxruntime and OpenVINO (``openvino``: each configuration's difference from onnxruntime, or why
    it is unavailable)."""
    from tvm_integration.kernels.selection import SelectionError, int8_kernel
    try:
        int8_kernel("host")
    except SelectionError as e:
        return {"skipped": str(e)}
    import numpy as np
    import onnx
    from tvm_integration.bench import int8_models, models, openvino_baseline
    pixels, widths, classes = MODEL[size]
    name = f"resnet{'18' if size == 'full' else '_tiny'}_{pixels}"
    with tempfile.TemporaryDirectory(prefix="qsynth-demo-") as tmp:
        float_model = int8_models.resnet(pixels, widths, classes)
        fp32 = Path(tmp) / f"{name}.fp32.onnx"
        onnx.save(float_model, str(fp32))
        with spinner(f"quantizing {name} with onnxruntime"):
            int8 = int8_models.quantize(float_model, Path(tmp) / f"{name}.int8.onnx")
        with spinner(f"compiling {name} through the QNN pipeline"):
            t0 = time.perf_counter()
            compiled, used = _compile(int8, threads)
            compile_s = time.perf_counter() - t0
        with spinner("checking against onnxruntime's exact mode and timing"):
            session = models.reference_session(int8, threads)
            rng = np.random.default_rng(0)
            exact = True
            for _ in range(3):
                feeds = models.random_inputs(compiled.inputs, rng)
                ours = compiled(feeds)
                expected = dict(zip(compiled.outputs, session.run(None, feeds)))
                exact &= all(np.array_equal(ours[n], e) for n, e in expected.items())
            del session
            default = dict(zip(compiled.outputs, models.onnxruntime_session(int8, threads).run(None, feeds)))
            default_report = openvino_baseline.compare(default, expected, openvino_baseline.output_scales(int8))
            openvino, openvino_report = openvino_baseline.baselines(int8, feeds, expected, threads)

            def runner(path):
                return functools.partial(models.onnxruntime_session(path, threads).run, None, feeds)
            times = models.side_by_side_ms(compiled, feeds, {"onnxruntime_int8": lambda: runner(int8),
                                                            "onnxruntime_fp32": lambda: runner(fp32), **openvino},
                                           trials)
            ms = {"qsynth": times.pop("ours"), **times}
    return {"name": name, "input": list(compiled.inputs["input"][0]), "threads": threads, "trials": trials,
            "bit_exact": bool(exact), "compared_inputs": 3, "compile_s": round(compile_s, 1), "ms": ms,
            "onnxruntime_default": default_report, "openvino": openvino_report, "kernels": [_kernel_row(k, "model int8", entries) for k in used]}


def _compile(path: Path, threads: int):
    """``compile_model``'s steps with the lowered module in hand, to read which proved tiles its
    operators call (their names vanish once LLVM inlines them)."""
    from tvm import tirx
    from tvm_integration.qnn.lower import pipeline
    from tvm_integration.qnn.prim import schedules
    from tvm_integration.qnn.runtime.model import build, read
    mod, inputs, outputs = read(path)
    mod = pipeline.lower(mod)
    used = sorted({m for f in mod.functions.values()
                   if isinstance(f, tirx.PrimFunc) and f.attrs and schedules.TENSORIZED in f.attrs
                   for m in EXTERN.findall(f.script())})
    return build(mod, inputs, outputs, threads=threads), used


def _layer(name: str, threads: int, trials: int, entries: dict) -> dict:
    """One ResNet-18 layer on the A1W1 bitserial conv2d next to its baselines (``qsynth bench-layer``)."""
    from tvm_integration.bench.bitserial_layers import bench_bitserial_layer
    from tvm_integration.kernels.selection import SelectionError, bitserial_kernel
    from tvm_integration.ops.bitserial_gemm import Config
    config = Config(*BITSERIAL)
    try:
        bitserial_kernel("host", config.abits, config.wbits, config.encoding)
    except SelectionError as e:
        return {"skipped": str(e)}
    try:
        with spinner(f"{name} A1W1: building and timing"):
            row = bench_bitserial_layer(name, config, threads, trials)
    except SelectionError as e:          # its int8 baseline needs an int8 tile (an AVX2-only host has none)
        return {"skipped": f"the layer's int8 baseline: {e}"}
    row["kernels"] = [_kernel_row(row["kernel"], f"layer {name} A1W1", entries)] if row["kernel"] in entries else []
    return row


def render(r: dict) -> str:
    h, lib = r["host"], r["library"]
    lines = [f"host      {h['cpu'] or '?'}: {h['uarch']}" + ("" if h["uarch_known"] else " (feature level)"),
             f"features  {' '.join(h['features']) or 'none of the x86 extensions'}"]
    lines += [(f"partly    {isa}: not {', '.join(why)} ({_reasons(why.values())})" if isa in h["runs"] else
               f"skipped   {isa}: {_reasons(why.values())}") for isa, why in h["lacks"].items()]
    by_isa = ", ".join(f"{n} {i}" for i, n in lib["by_isa"].items() if n)
    lines.append(f"library   {lib['runnable']} kernels this host runs" + (f" ({by_isa})" if by_isa else "")
                 + f"; {lib['reproved_now']} re-proved now, {len(lib['refused'])} refused, "
                 f"{len(lib['synthesized'])} synthesized")
    lines += [f"REFUSED   {line}" for line in lib["refused"]]
    lines += [f"FAILED    synthesis of {k['name']}: {k.get('reason', 'not proved')}" for k in lib["synthesized"]
              if not k["proved"]]
    kernels = r["model"].get("kernels", []) + r["layer"].get("kernels", [])
    if kernels:
        lines += ["", f"{'kernel used':<44} {'for':<16} {'instr':>5}  proof"]
        lines += [f"{k['name']:<44} {k['role']:<16} {k['instructions'] or '-':>5}  {k['proof']}"
                  + (f" ({k['obligations']} obligations, {', '.join(k['methods'])})" if k.get("methods") else "")
                  for k in kernels]
    m = r["model"]
    lines += ["", "speedup = its time / qsynth's (above 1: qsynth is faster)"]
    if "skipped" in m:
        lines.append(f"model     skipped: {m['skipped']}")
    else:
        lines += [f"model     {m['name']} (pre-quantized QDQ, input {m['input']}), compiled in {m['compile_s']} s",
                  f"          outputs on {m['compared_inputs']} random inputs "
                  + ("bit-exact with" if m["bit_exact"] else "DIFFER from")
                  + " onnxruntime's exact mode (session.x64quantprecision = 1)"]
        ours = m["ms"]["qsynth"]
        lines += [f"  {what:<18} {ms:9.2f} ms" + ("" if what == "qsynth" else f"   speedup {ms / ours:5.2f}x")
                  for what, ms in m["ms"].items()]
        from tvm_integration.bench.openvino_baseline import describe, differences
        lines += [f"          onnxruntime_int8 (its default): {differences(m['onnxruntime_default'])}"]
        lines += [f"          {describe(what, report)}" for what, report in m["openvino"].items()]
    lay = r["layer"]
    lines.append("")
    if "skipped" in lay:
        lines.append(f"layer     skipped: {lay['skipped']}")
    else:
        lines.append(f"layer     ResNet-18 {lay['layer']} {lay['config']} {lay['encoding']} on the bitserial conv2d: "
                     f"{lay['ours_ms']:.3f} ms, " + ("correct" if lay["correct"] else "WRONG") + " against numpy")
        lines += [f"  {what:<18} {ms:9.3f} ms   speedup {lay['speedups'][what]:5.2f}x"
                  for what, ms in lay["baselines"].items()]
    lines += ["", f"{r['seconds']} s; load average {r['load_average']} on {os.cpu_count()} cores "
              "(timings taken while other work runs are noisy)"]
    return "\n".join(lines)


def _reasons(reasons) -> str:
    """``host CPU lacks a``, ``host CPU lacks b`` -> ``host CPU lacks a, b`` (other reasons as they are)."""
    prefix = "host CPU lacks "
    lacked = [r.removeprefix(prefix) for r in reasons if r.startswith(prefix)]
    others = [r for r in reasons if not r.startswith(prefix)]
    return "; ".join(([prefix + ", ".join(lacked)] if lacked else []) + others)


def register(app: typer.Typer) -> None:
    app.command("demo", epilog="Example: qsynth demo --quick --json")(demo)
