"""One model's row of the model benchmark: our compiled model next to, in the same run and process,
onnxruntime on the same quantized model (its integer kernels), onnxruntime on the float original when
given, OpenVINO on the same quantized model (openvino_baseline.py: its default and, on AMX hosts, VNNI
only, each in a worker process) and TVM 0.27's own import of the quantized model (which runs conv and
matmul in float between quantize and dequantize, unscheduled). A TFLite model's baselines are LiteRT's
default interpreter (XNNPACK) on it and on its float original when given. Every time is a median, ours
and the runtimes' side by side (``timing.side_by_side``); our output, OpenVINO's and onnxruntime's
default's are compared with the reference runtime's on the same input first (for ONNX models
onnxruntime's exact mode, also timed: its default saturates on x86 hosts without VNNI). Used by ``qsynth bench-model``, ``qsynth demo`` and
scripts/bench_models.py."""
from __future__ import annotations

import collections
import functools
import os
import time
from pathlib import Path

import numpy as np
import onnx
import tvm
from tvm import relax

from isa_specs import host
from tvm_integration.bench import inputs, openvino_baseline, tuned_shapes
from tvm_integration.bench.timing import median_seconds, side_by_side
from tvm_integration.qnn.runtime.model import compile_model


def median_ms(fn, trials: int) -> float:
    return median_seconds(fn, trials) * 1e3


def side_by_side_ms(model, feeds, baselines: dict, trials: int) -> dict[str, float]:
    """Median ms of our model (``"ours"``, TVM's evaluator on inputs already on the device) and of each
    baseline (name -> a function making its run function, a new session, or a ``SelfTimed`` worker's
    batch timer), ``timing.side_by_side``."""
    model.vm.set_input("main", *model.arguments(feeds))
    evaluator = model.vm.time_evaluator("invoke_stateful", tvm.cpu(), number=1, repeat=1)
    evaluator("main")
    threads = model.threads or os.cpu_count() or 1           # None: TVM's pool, one thread per core
    seconds = side_by_side(lambda: evaluator("main").results[0], baselines, trials, threads)
    return {k: v * 1e3 for k, v in seconds.items()}


# onnxruntime's session option for its exact U8S8 integer kernels on x86 hosts without VNNI: by default
# MLAS multiplies u8 x s8 with vpmaddubsw, whose int16 sum of two products saturates (its documentation
# says so), and ResNet-18's logits differ from the exact result in about 200 of 1000 on a Zen 3 host
# (docs/measurements.md). On VNNI hosts both settings are exact.
EXACT_OPTION = ("session.x64quantprecision", "1")


def onnxruntime_session(path, threads: int, exact: bool = False):
    """onnxruntime on ``path`` (or a serialized model): its default (what a user times), or ``exact``:
    the reference every bit-exactness check compares with (``EXACT_OPTION``)."""
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    if exact:
        options.add_session_config_entry(*EXACT_OPTION)
    return ort.InferenceSession(path if isinstance(path, bytes) else str(path), options,
                                providers=["CPUExecutionProvider"])


def reference_session(path, threads: int = 1):
    """The exact integer reference (``path``: a file, or a serialized model): onnxruntime with ``EXACT_OPTION``. Two gaps of that mode
    (onnxruntime 1.32, docs/measurements.md): a model with an initializer that two nodes read fails
    to initialize ("AddInitializerWithOrtValue ... Attempt to replace the existing tensor"), as does one
    reading a dequantized constant twice, so it runs on a copy where each read has its own
    (``unshared_constants``); and the mode registers no kernel
    for int8 (signed) activations (QLinearConv, QLinearMatMul: NOT_IMPLEMENTED), so such a model takes
    the default session, whose S8S8 kernels do not take the saturating U8S8 path."""
    from onnxruntime.capi.onnxruntime_pybind11_state import Fail, NotImplemented as NoKernel
    try:
        return onnxruntime_session(path, threads, exact=True)
    except NoKernel:
        return onnxruntime_session(path, threads)
    except Fail as e:
        if "Attempt to replace the existing tensor" not in str(e):
            raise
        model = onnx.load_model_from_string(path) if isinstance(path, bytes) else onnx.load(str(path))
        return onnxruntime_session(unshared_constants(model).SerializeToString(), threads, True)


def unshared_constants(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` in which every read of a constant is its own: a DequantizeLinear of an
    initializer whose output is read more than once is cloned, one per read (also two inputs of one
    node: torchvision's BatchNormalization with scale and variance both the one constant of ones), and
    every initializer read more than once is copied, one per read. The same computation, which
    onnxruntime's exact mode initializes (docs/measurements.md)."""
    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    by_name = {t.name: t for t in graph.initializer}
    reads = collections.defaultdict(list)
    for node in graph.node:
        for j, name in enumerate(node.input):
            reads[name].append((node, j))
    nodes = []
    for node in graph.node:
        uses = reads[node.output[0]]
        if node.op_type != "DequantizeLinear" or node.input[0] not in by_name or len(uses) < 2 or \
                any(o.name == node.output[0] for o in graph.output):
            nodes.append(node)
            continue
        for k, (reader, j) in enumerate(uses):
            clone = onnx.NodeProto()
            clone.CopyFrom(node)
            clone.name, clone.output[0] = f"{node.name}__read{k}", f"{node.output[0]}__read{k}"
            reader.input[j] = clone.output[0]
            nodes.append(clone)
    graph.ClearField("node")
    graph.node.extend(nodes)
    readers = collections.Counter(x for node in graph.node for x in node.input if x in by_name)
    for n, node in enumerate(graph.node):
        for j, name in enumerate(node.input):
            if readers.get(name, 0) > 1:
                copy = onnx.TensorProto()
                copy.CopyFrom(by_name[name])
                copy.name = f"{name}__reader{n}_{j}"
                graph.initializer.append(copy)
                node.input[j] = copy.name
    return model


def litert_runner(path, threads: int):
    """(run, input specs) of LiteRT's default interpreter on the .tflite model ``path``: ``run(feeds)``
    returns the outputs in the model's order."""
    from ai_edge_litert.interpreter import Interpreter
    interpreter = Interpreter(model_path=str(path), num_threads=threads)
    interpreter.allocate_tensors()
    inputs = {d["name"]: d for d in interpreter.get_input_details()}

    def run(feeds):
        for name, x in feeds.items():
            interpreter.set_tensor(inputs[name]["index"], x)
        interpreter.invoke()
        return [interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()]
    return run, {name: (tuple(d["shape"]), d["dtype"]) for name, d in inputs.items()}


def random_inputs(specs: dict, rng: np.random.Generator, ranges: dict | None = None) -> dict[str, np.ndarray]:
    """Inputs for ``specs`` (name -> (shape, dtype)): an input of ``ranges`` (name -> (low, high), e.g.
    ``inputs.ranges`` of an ONNX model: ids within the embedding, masks of 0/1) from low to high - 1;
    otherwise standard normal floats, 8- and 16-bit integers over their range (quantized data), and
    wider integers 0 or 1 (ids, positions or flags: valid for a mask and any table of two rows or more;
    random 64-bit values are valid for nothing)."""
    feeds = {}
    for name, (shape, dtype) in specs.items():
        kind = np.dtype(dtype).kind
        if ranges and name in ranges:
            feeds[name] = rng.integers(*ranges[name], shape).astype(dtype)
        elif kind == "f":
            feeds[name] = rng.standard_normal(shape).astype(dtype)
        elif np.dtype(dtype).itemsize <= 2:
            info = np.iinfo(dtype)
            feeds[name] = rng.integers(info.min, info.max + 1, shape).astype(dtype)
        else:
            feeds[name] = rng.integers(0, 2, shape).astype(dtype)
    return feeds


class Refused(Exception):
    """TVM's own import refuses the model (QOperator ops it has no converter for): its column records
    the reason instead of a time."""


def tvm_own_import(path):
    """TVM 0.27's own Relax import of the quantized model at ``path``, with TVM's converters only (ours
    are given to our importer per call, qnn/onnx/importer.py), or Refused with TVM's reason."""
    from tvm.relax.frontend.onnx import from_onnx
    try:
        return from_onnx(onnx.load(str(path)), keep_params_in_input=False)
    except NotImplementedError as e:        # tvm.error.OpNotImplemented: an op without a converter
        raise Refused(str(e).strip().splitlines()[0]) from e


def tvm_own_ms(path, feeds, trials: int) -> float:
    """TVM 0.27's own Relax import and default build of the quantized model (Refused: no time)."""
    mod = tvm_own_import(path)
    vm = relax.VirtualMachine(tvm.compile(mod, target=tvm.target.Target(host.tvm_target())), tvm.cpu())
    args = [tvm.runtime.tensor(v) for v in feeds.values()]
    return median_ms(lambda: vm["main"](*args), trials)


def bench_model(path: str | Path, fp32: str | Path | None = None, threads: int = 1, trials: int = 20,
                tvm_trials: int = 3, with_tvm_own: bool = True, with_openvino: bool = True,
                feeds: dict[str, np.ndarray] | None = None) -> dict:
    """The row, on ``feeds`` (name -> array) and random values the model accepts for the inputs they
    leave out (``random_inputs`` in the ``inputs.ranges`` of an ONNX model); ``openvino`` (ONNX models)
    reports each OpenVINO configuration (openvino_baseline.baselines): its difference from onnxruntime,
    or why it is unavailable; a baseline that refuses the model has time None and its reason in
    ``refused`` (name -> reason), and no speedup."""
    path = Path(path)
    start = time.perf_counter()
    model = compile_model(path, threads=threads)
    compile_s = time.perf_counter() - start
    rng = np.random.default_rng(0)
    tflite = path.suffix == ".tflite"
    given = feeds or {}
    drawn = random_inputs({n: s for n, s in model.inputs.items() if n not in given}, rng,
                          None if tflite else inputs.ranges(onnx.load(str(path), load_external_data=False)))
    feeds = {name: given[name] if name in given else drawn[name] for name in model.inputs}
    reference = "litert" if tflite else "onnxruntime"

    def runner(model_path, inputs, exact=False):
        """A run function on the model at ``model_path`` in a new session of the reference runtime
        (``exact``: onnxruntime's exact mode, ``EXACT_OPTION``)."""
        if tflite:
            run, _ = litert_runner(model_path, threads)
        else:
            run = functools.partial(onnxruntime_session(model_path, threads, exact).run, None)
        return lambda: run(inputs)
    expected = runner(path, feeds, exact=True)()
    ours = model(feeds)
    diff = max(float(np.max(np.abs(ours[n].astype(np.float64) - e.astype(np.float64)))) if e.size else 0.0
               for n, e in zip(model.outputs, expected))
    runs = {f"{reference}_int8": lambda: runner(path, feeds)}
    default = None
    if not tflite:        # the default's own answers, and its exact mode timed beside it
        default = openvino_baseline.compare(dict(zip(model.outputs, runner(path, feeds)())),
                                            dict(zip(model.outputs, expected)), openvino_baseline.output_scales(path))
        runs[f"{reference}_int8_exact"] = lambda: runner(path, feeds, exact=True)
    if fp32 is not None:
        float_feeds = random_inputs(litert_runner(fp32, threads)[1], rng) if tflite else feeds
        runs[f"{reference}_fp32"] = lambda: runner(fp32, float_feeds)
    openvino = None
    if with_openvino and not tflite:
        more, openvino = openvino_baseline.baselines(path, feeds, dict(zip(model.outputs, expected)), threads)
        runs |= more
    baselines = side_by_side_ms(model, feeds, runs, trials)
    ours_ms = baselines.pop("ours")
    refused = {}
    if with_tvm_own and not tflite:
        try:
            baselines["tvm_default"] = tvm_own_ms(path, feeds, tvm_trials)
        except Refused as e:
            baselines["tvm_default"], refused["tvm_default"] = None, str(e)
    row = {"model": path.name, "threads": threads, "host": host.model().uarch, "ours_ms": ours_ms,
           "baselines": baselines, "refused": refused,
           "speedups": {k: v / ours_ms for k, v in baselines.items() if v is not None},
           "reference": reference, f"max_abs_diff_vs_{reference}": diff,
           "compile_s": compile_s, **({} if default is None else {f"{reference}_int8_default": default}),
           "tuning": tuned_shapes.coverage(path)}
    return row if openvino is None else dict(row, openvino=openvino)
