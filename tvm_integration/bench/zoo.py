"""The zoo of real architectures (issue 31, scripts/make_zoo.py builds them, scripts/bench_zoo.py runs
this): one model's row from a library compiled once (``CompiledModel.load``, so one compile serves
every thread count) next to onnxruntime int8 on the same QDQ file, onnxruntime fp32 on its float
original and OpenVINO int8 (models.py, openvino_baseline.py, timing.side_by_side); its difference
from onnxruntime in steps of the output's scale; and, for the models that are slower or not exact,
where the time goes: CPU time per function of ours (``time.thread_time`` around each VM call: at one
TVM thread every kernel runs on the calling thread, and CPU time is what load from other jobs on the
shared machine disturbs least), grouped by operator, next to onnxruntime's own per-operator profile."""
from __future__ import annotations

import functools
import json
import os
import re
import tempfile
import time
from pathlib import Path

import numpy as np
import tvm
from tvm import relax

from tvm_integration.bench import openvino_baseline, tuned_shapes
from tvm_integration.bench.models import onnxruntime_session, reference_session, side_by_side_ms
from tvm_integration.bench.timing import batch_timer, median_seconds, side_by_side
from tvm_integration.qnn.runtime.model import CompiledModel


def inputs(model: CompiledModel, count: int, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """``count`` standard normal inputs (the zoo's models take one float image)."""
    rng = np.random.default_rng(seed)
    return [{n: rng.standard_normal(s).astype(d) for n, (s, d) in model.inputs.items()} for _ in range(count)]


def difference(model: CompiledModel, path: Path, feeds: list[dict], threads: int) -> dict:
    """``compared``: ours on ``feeds`` against onnxruntime's exact mode (``models.reference_session``); and
    its default's outputs against the same (``onnxruntime_int8_default``): on x86 hosts without VNNI the
    default saturates vpmaddubsw, so what it gets wrong is the figure a faster row of it comes with."""
    def outputs(session) -> list[dict]:
        return [dict(zip(model.outputs, session.run(None, feed))) for feed in feeds]
    exact, scales = outputs(reference_session(path, threads)), output_scales(path)
    return compared([model(feed) for feed in feeds], exact, scales) | {
        "onnxruntime_int8_default": compared(outputs(onnxruntime_session(path, threads)), exact, scales)}


def compared(ours: list[dict], wanted: list[dict], scales: dict[str, float]) -> dict:
    """The largest |ours - wanted| over the runs (each a dict output name -> array, in the model's order) and
    outputs, absolute and in steps of the output's quantization scale (``scales``, ``output_scales``), how
    many output values differ (of how many), and how many top-1 classes of the first output agree."""
    absolute, steps, top1, differing, values = 0.0, 0.0, 0, 0, 0
    for got, want in zip(ours, wanted, strict=True):
        for name, w in want.items():
            d = np.abs(got[name].astype(np.float64) - w.astype(np.float64))
            absolute = max(absolute, float(d.max()))
            steps = None if steps is None or name not in scales else max(steps, float(d.max()) / scales[name])
            differing, values = differing + int(np.count_nonzero(d)), values + d.size
        first = next(iter(want))
        top1 += int(np.argmax(got[first]) == np.argmax(want[first]))
    return {"max_abs_diff": absolute, "max_diff_steps": None if steps is None else round(steps, 6),
            "differing": differing, "values": values, "top1_agree": top1, "compared": len(ours)}


SHAPE_OR_FLOAT_TAIL = ("Reshape", "Flatten", "Squeeze", "ReduceMean", "GlobalAveragePool")


def output_scales(path: Path) -> dict[str, float]:
    """Output name -> the scale of the DequantizeLinear producing it or, for an output that a float
    reshape or mean computes from a dequantized tensor (SqueezeNet: ``ReduceMean(DQ(x))``, which
    quantize_static leaves in float), that tensor's scale: a difference in steps of the last quantized
    tensor."""
    import onnx
    scales = openvino_baseline.output_scales(path)
    graph = onnx.load(str(path), load_external_data=False).graph
    producers = {o: n for n in graph.node for o in n.output}
    constants = {t.name: onnx.numpy_helper.to_array(t) for t in graph.initializer}
    for output in graph.output:
        node = producers.get(output.name)
        while node is not None and output.name not in scales and node.op_type in SHAPE_OR_FLOAT_TAIL:
            node = producers.get(node.input[0])
            if node is not None and node.op_type == "DequantizeLinear" and node.input[1] in constants \
                    and constants[node.input[1]].size == 1:
                scales[output.name] = float(constants[node.input[1]].reshape(()))
    return scales


def row(name: str, library: Path, path: Path, fp32: Path | None, threads: int, trials: int,
        openvino: bool = True) -> dict:
    """The benchmark row of the model ``name``: ``library`` (our build of ``path``, saved by
    ``CompiledModel.save``) timed side by side with onnxruntime int8 on ``path`` (its default and its
    exact mode), fp32 on ``fp32`` and OpenVINO int8 on ``path``, at ``threads`` threads (the process's
    TVM pool must have that size: TVM_NUM_THREADS before the first run). At one thread also by CPU time
    (``cpu_baselines``: every baseline's, OpenVINO's its worker process's), side by side again."""
    model = CompiledModel.load(library, threads=threads)
    feeds = inputs(model, 3)
    diff = difference(model, path, feeds, threads)
    feed = feeds[0]
    expected = dict(zip(model.outputs, reference_session(path, threads).run(None, feed)))
    # each run function in a session of its own, made when timed (timing.side_by_side); the exact mode is
    # the fair peer where the default saturates (x86 without VNNI)
    runs = {"onnxruntime_int8": lambda: _run(onnxruntime_session(path, threads), feed),
            "onnxruntime_int8_exact": lambda: _run(reference_session(path, threads), feed)}
    if fp32 is not None and fp32.exists():
        runs["onnxruntime_fp32"] = lambda: _run(onnxruntime_session(fp32, threads), feed)
    more, report = openvino_baseline.baselines(path, feed, expected, threads) if openvino else ({}, {})
    times = side_by_side_ms(model, feed, runs | more, trials)
    ours = times.pop("ours")
    cpu = {}
    if threads == 1:                # CPU time: what the load of other jobs on a shared machine disturbs least
        seconds = side_by_side(batch_timer(lambda: model.vm.invoke_stateful("main"), clock=time.process_time),
                               runs | {k: functools.partial(start, cpu=True) for k, start in more.items()}, trials, 1,
                               clock=time.process_time)
        cpu_times = {k: v * 1e3 for k, v in seconds.items()}
        cpu = {"ours_cpu_ms": cpu_times.pop("ours"), "onnxruntime_int8_cpu_ms": cpu_times["onnxruntime_int8"],
               "cpu_baselines": cpu_times}
    return {"name": name, "threads": threads, "ours_ms": ours, "baselines": times, "tuning": tuned_shapes.coverage(path),
            "speedups": {k: v / ours for k, v in times.items()}, **cpu, **diff, "openvino": report}


def _run(session, feed: dict):
    return lambda: session.run(None, feed)


def kind(function: str) -> str:
    """The operator a VM function belongs to: its name without the numbers TVM appends
    (``qsynth_conv2d17`` -> ``qsynth_conv2d``)."""
    return re.sub(r"\d+$", "", function.split(".")[-1] if function.startswith("vm.builtin") else function)


def cpu_profile(model: CompiledModel, feed: dict, repeat: int = 10) -> dict[str, list]:
    """Where a run's CPU time goes, per VM function: name -> [CPU ms per run, wall ms per run, calls
    per run], by ``time.thread_time`` (and ``perf_counter``) around every call the VM makes; the
    medians over ``repeat`` runs. Meaningful at one TVM thread (every kernel on this thread)."""
    args = model.arguments(feed)
    per_run: list[dict[str, list[float]]] = []
    starts: list[tuple[float, float]] = []

    def instrument(func, symbol, before_run, ret_value, *call_args):
        if before_run:
            starts.append((time.thread_time(), time.perf_counter()))
        else:
            cpu, wall = starts.pop()
            entry = per_run[-1].setdefault(str(symbol), [0.0, 0.0, 0])
            entry[0] += time.thread_time() - cpu
            entry[1] += time.perf_counter() - wall
            entry[2] += 1
        return 0

    vm = relax.VirtualMachine(model.executable, tvm.cpu())
    vm.set_instrument(instrument)
    for _ in range(repeat + 1):             # the first run warms up
        per_run.append({})
        vm["main"](*args)
    per_run = per_run[1:]
    names = {n for run in per_run for n in run}
    return {n: [float(np.median([run.get(n, [0.0, 0.0, 0])[0] for run in per_run])) * 1e3,
                float(np.median([run.get(n, [0.0, 0.0, 0])[1] for run in per_run])) * 1e3,
                int(max(run.get(n, [0, 0, 0])[2] for run in per_run))] for n in names}


def cpu_ms(fn, repeat: int = 20) -> float:
    """Median CPU ms of the process (every thread) per call of ``fn``."""
    return median_seconds(fn, repeat, clock=time.process_time) * 1e3


def onnxruntime_profile(path: Path, feed: dict, repeat: int = 10) -> dict[str, list]:
    """onnxruntime's own profile of the model at one thread: its (fused) operator type -> [ms per run
    as its profiler measures it, nodes]."""
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    with tempfile.TemporaryDirectory() as tmp:
        options.enable_profiling = True
        options.profile_file_prefix = os.path.join(tmp, "ort")
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        for _ in range(repeat + 1):
            session.run(None, feed)
        events = json.loads(Path(session.end_profiling()).read_text())
    totals: dict[str, list] = {}
    nodes: dict[str, set] = {}
    runs = [e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"]
    first_end = runs[0]["ts"] + runs[0]["dur"] if runs else 0
    for e in events:
        if e.get("cat") != "Node" or not e.get("name", "").endswith("_kernel_time") or e["ts"] < first_end:
            continue
        op = e.get("args", {}).get("op_name", "?")
        totals.setdefault(op, [0.0, 0])[0] += e["dur"] / 1e3 / repeat
        nodes.setdefault(op, set()).add(e["name"])
    return {op: [ms, len(nodes[op])] for op, (ms, _) in totals.items()}


def where_the_time_goes(library: Path, path: Path, repeat: int = 10) -> dict:
    """For one model at one thread: our CPU ms per run and onnxruntime int8's (process CPU time), our
    CPU ms per operator kind (functions, calls) and the ten slowest functions, onnxruntime's ms per
    operator type."""
    model = CompiledModel.load(library, threads=1)
    feed = inputs(model, 1)[0]
    functions = cpu_profile(model, feed, repeat)
    kinds: dict[str, list] = {}
    for name, (cpu, wall, calls) in functions.items():
        entry = kinds.setdefault(kind(name), [0.0, 0.0, 0, 0])
        entry[0] += cpu
        entry[1] += wall
        entry[2] += 1
        entry[3] += calls
    model.vm.set_input("main", *model.arguments(feed))
    session = onnxruntime_session(path, 1)
    theirs = cpu_ms(lambda: session.run(None, feed))
    by_op = onnxruntime_profile(path, feed, repeat)
    # onnxruntime's profiler adds its own memory accounting to every node (runs 3-4x slower profiled):
    # its per-operator times are scaled to the unprofiled CPU time, as shares of it
    total = sum(ms for ms, _ in by_op.values()) or 1.0
    by_op = {op: [ms * theirs / total, nodes] for op, (ms, nodes) in by_op.items()}
    return {"ours_cpu_ms": cpu_ms(lambda: model.vm.invoke_stateful("main")),
            "onnxruntime_int8_cpu_ms": theirs,
            "ours_by_kind": dict(sorted(kinds.items(), key=lambda kv: -kv[1][0])),
            "ours_slowest": sorted(([n, *v] for n, v in functions.items()), key=lambda r: -r[1])[:10],
            "onnxruntime_by_op": dict(sorted(by_op.items(), key=lambda kv: -kv[1][0]))}
