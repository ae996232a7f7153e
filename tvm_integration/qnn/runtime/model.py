"""``compile_model``: a model file through its frontend, the one lowering (pipeline.py), the build, and
the compiled model.

    model = compile_model("resnet_int8.onnx", target="host", threads=2)     # or a .tflite model
    outputs = model({"input": x})            # numpy in, numpy out, names as in the ONNX/TFLite graph
    model.save("resnet_int8.so")             # the library and its signature (.so + .so.json)
    model = CompiledModel.load("resnet_int8.so")

A compiled model checks its inputs (names, shapes, dtypes) before running, each failure one line.
"""
from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import tvm
from tvm import relax

from synth.files import write_atomically
from tvm_integration.kernels import neon_int8 as neon_kernels
from tvm_integration.qnn.float import float_ops, neon_float
from tvm_integration.qnn.lower import bind, pipeline
from tvm_integration.qnn.onnx import importer, ort_fusion, rewrite
from tvm_integration.qnn.runtime import arm_reference
from tvm_integration.qnn.semantics.errors import ModelError
from tvm_integration.qnn.tflite import importer as tflite_importer


def lower(model: onnx.ModelProto, target: str = "host", stage: str = "bind", mcpu: str | None = None,
          lowbit: str = "fastest"):
    """The ONNX model's Relax module after ``stage`` (import, rewrite, legalize or bind): every stage can
    be printed, built and compared with onnxruntime on its own (``mcpu``: the AArch64 core of ``neon``;
    ``lowbit``: the 1-3-bit layers' operator, legalize.py)."""
    stages = ("import", "rewrite", *pipeline.STAGES)
    if stage not in stages:
        raise ValueError(f"stage must be one of {stages}, got {stage!r}")
    if stage == "import":
        return importer.to_relax(onnxruntime_view(model, target)[0])
    mod, _ = rewritten(model, target)
    if stage == "rewrite":
        return mod
    return pipeline.lower(mod, target, mcpu, stage, lowbit)


def rewritten(model: onnx.ModelProto, target: str) -> tuple[tvm.IRModule, onnx.ModelProto]:
    """The ONNX model imported and rewritten into integer ops as onnxruntime's build for ``target`` fuses
    them (the AArch64 one keeps int8 activations), and the model as that build types it (onnxruntime_view)."""
    model, layers = onnxruntime_view(model, target)
    rules = (neon_float if target == "neon" else float_ops).legalize_map()
    return rewrite.rewrite(importer.to_relax(model), layers, int8_allowed=target == "neon",
                           qgemms=ort_fusion.qgemms_to_float(model),
                           table_ops={name: rules[name] for name in rewrite.TABLE_OPS}), model


def input_specs(path: str | Path, allow_float: bool = False) -> dict[str, tuple[tuple[int, ...], str]]:
    """The inputs of the ONNX or TFLite model at ``path``, name -> (shape, dtype); ModelError if the
    pipeline cannot compile it."""
    if Path(path).suffix == ".tflite":
        return tflite_importer.load(path).specs()
    return importer.input_specs(importer.load(path, allow_float=allow_float))


def onnxruntime_view(model: onnx.ModelProto, target: str) -> tuple[onnx.ModelProto, dict[str, str]]:
    """``model`` as onnxruntime's build for ``target`` types it and the layers it computes in float there,
    with the float biases of those layers quantized as it quantizes them (ort_fusion.py: on x86 its int8
    pairs turned uint8 first; on neon its AArch64 build, which keeps int8 activations; both with repeated
    QuantizeLinear/DequantizeLinear nodes merged)."""
    neon = target == "neon"
    model = ort_fusion.merged(model) if neon else ort_fusion.converted(model)
    layers = ort_fusion.float_layers(model, int8_allowed=neon)
    return ort_fusion.quantized_biases(model, layers), layers


def read(path: str | Path, allow_float: bool = False, target: str = "host") -> tuple[tvm.IRModule, dict, list[str]]:
    """(Relax module, input specs, output names) of the model at ``path`` as its frontend reads it: an
    ONNX model imported and rewritten (for ``target``: onnxruntime_view), a TFLite model imported; what
    ``pipeline.lower`` takes."""
    if Path(path).suffix == ".tflite":
        tflite = tflite_importer.load(path)
        return tflite.run(), tflite.specs(), tflite.output_names()
    mod, model = rewritten(importer.load(path, allow_float=allow_float), target)
    return mod, importer.input_specs(model), [o.name for o in model.graph.output]


def compile_model(path: str | Path, target: str = "host", threads: int | None = None,
                  allow_float: bool = False, mcpu: str | None = None, lowbit: str = "fastest") -> "CompiledModel":
    """The ONNX (QDQ or QOperator) or full-integer TFLite model at ``path``, compiled; ``target="neon"``:
    for the AArch64 core ``mcpu`` (LLVM's name; None: a generic v8.0 core), an arm_model.ArmModel;
    ``lowbit``: the operator of the 1-3-bit layers (legalize.py: "fastest", "bitserial" or "int8")."""
    if mcpu is not None and target != "neon":
        raise ModelError(f"mcpu {mcpu}: a core is chosen for target neon only, not {target}")
    if target == "neon":
        try:
            neon_kernels.core_family(mcpu)       # an unknown core: refused before any work
        except ValueError as e:
            raise ModelError(str(e))
    mod, inputs, outputs = read(path, allow_float, target)
    op_kinds = arm_reference.kinds(mod, Path(path).suffix == ".tflite") if target == "neon" else None
    return build(pipeline.lower(mod, target, mcpu, lowbit=lowbit), inputs, outputs, target, threads, mcpu, op_kinds)


def build(mod: tvm.IRModule, inputs: dict, outputs: list[str], target: str = "host", threads: int | None = None,
          mcpu: str | None = None, op_kinds: list[str] | None = None) -> "CompiledModel":
    """The lowered module ``mod`` (``pipeline.lower`` of ``read``'s) built into the compiled model, compile_model's
    last step; apart so that a caller that reads the lowered module (which tiles it calls) lowers once."""
    build_target = bind.model_target(target, mcpu)
    executable = tvm.compile(mod, target=tvm.target.Target(build_target))
    if target == "neon":
        from tvm_integration.qemu import cross_model
        from tvm_integration.qnn.runtime.arm_model import ArmModel
        if missing := cross_model.missing_functions(executable):
            raise ModelError(f"TVM's AArch64 runtime has no {', '.join(missing)}, which this model needs (TVM "
                             "defines it in its compiler, not in the runtime it publishes for AArch64); the "
                             "library would fail when run there")
        return ArmModel(executable, inputs, outputs, build_target, threads, op_kinds=op_kinds)
    return CompiledModel(executable, inputs, outputs, threads)


def set_threads(threads: int | None) -> None:
    """TVM's worker pool size (None: TVM's default, one per core). TVM reads TVM_NUM_THREADS when
    its pool starts, at the first parallel run of the process, and keeps that size: a process runs
    at one thread count (runtime.config_threadpool, tried here, did not change the count in 0.27)."""
    if threads is not None:
        if threads < 1:
            raise ValueError(f"threads must be at least 1, got {threads}")
        os.environ["TVM_NUM_THREADS"] = str(threads)


class CompiledModel:
    def __init__(self, executable, inputs: dict, outputs: list[str], threads: int | None = None):
        self.executable = executable
        self.inputs = {name: (tuple(shape), dtype) for name, (shape, dtype) in inputs.items()}
        self.outputs = list(outputs)
        self.threads = threads
        set_threads(threads)
        # one device tensor per input, refilled each run: a new 600 KB tensor per run is a fresh
        # mapping of pages to fault in (0.2 ms of a 9 ms ResNet-18 on Zen 4)
        self._input_tensors = {name: tvm.runtime.empty(shape, dtype) for name, (shape, dtype) in self.inputs.items()}

    @functools.cached_property
    def vm(self) -> relax.VirtualMachine:
        """Made on first use: making it JIT-compiles an executable that ``compile_model`` built, which
        a model only exported and then loaded from its library (``artifacts.compiled_model``) never needs
        (the JIT took 4.8 s of a 13.5 s build of a tiny ResNet)."""
        return relax.VirtualMachine(self.executable, tvm.cpu())

    @functools.cached_property
    def _main(self):
        return self.vm["main"]     # looked up once: the lookup took 0.15 ms a run (MobileNetV2 runs 6.1)

    def checked(self, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        """The inputs in the model's order, C-contiguous, each checked (name, shape, dtype): ModelError."""
        missing = [n for n in self.inputs if n not in feeds]
        unknown = [n for n in feeds if n not in self.inputs]
        if missing or unknown:
            raise ModelError(f"inputs: missing {missing}, unknown {unknown}; the model takes "
                             + ", ".join(f"{n} {d}{list(s)}" for n, (s, d) in self.inputs.items()))
        args = []
        for name, (shape, dtype) in self.inputs.items():
            x = np.asarray(feeds[name])
            if x.shape != shape or x.dtype != np.dtype(dtype):
                raise ModelError(f"input {name!r} must be {dtype}{list(shape)}, got {x.dtype}{list(x.shape)}")
            # np.require, not np.ascontiguousarray: that one makes a 0-d input (a scale fed as a graph
            # input) 1-d, which the () tensor refuses
            args.append(np.require(x, requirements="C"))
        return args

    def arguments(self, feeds: dict[str, np.ndarray]) -> list:
        return [self._input_tensors[name].copyfrom(x) for name, x in zip(self.inputs, self.checked(feeds))]

    def __call__(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        result = self._main(*self.arguments(feeds))
        results = list(result) if len(self.outputs) > 1 else [result]
        return {name: r.numpy() for name, r in zip(self.outputs, results)}

    def time(self, feeds: dict[str, np.ndarray], repeat: int = 10) -> float:
        """Median seconds of one run (TVM's time evaluator, inputs already on the device)."""
        self.vm.set_input("main", *self.arguments(feeds))
        timer = self.vm.time_evaluator("invoke_stateful", tvm.cpu(), number=1, repeat=repeat, min_repeat_ms=20)
        return float(np.median(timer("main").results))

    def profile(self, feeds: dict[str, np.ndarray], repeat: int = 5) -> list[tuple[str, float, int]]:
        """Where a run's time goes: (function, median milliseconds per run, calls per run) for every
        function the VM calls, slowest first, timed by the VM's instrument hook around each call."""
        args = self.arguments(feeds)
        spent: dict[str, list[float]] = {}
        starts: list[float] = []

        def instrument(func, symbol, before_run, ret_value, *call_args):
            if before_run:
                starts.append(time.perf_counter())
            else:
                spent.setdefault(str(symbol), []).append(time.perf_counter() - starts.pop())
            return 0

        vm = relax.VirtualMachine(self.executable, tvm.cpu())
        vm.set_instrument(instrument)
        for _ in range(repeat):
            vm["main"](*args)
        rows = [(name, float(np.sum(t)) / repeat * 1e3, len(t) // repeat) for name, t in spent.items()]
        return sorted(rows, key=lambda r: -r[1])

    def signature(self) -> dict:
        """The inputs (name -> [shape, dtype]) and outputs, as ``save`` writes them beside the library."""
        return {"inputs": {n: [list(s), d] for n, (s, d) in self.inputs.items()}, "outputs": self.outputs}

    def export(self, library: str | Path) -> None:
        """The library alone at ``library`` (TVM's debug lines kept off stderr); its temporary files go
        where ``tempfile`` puts them (``artifacts.workspace`` makes that a private folder)."""
        with _without_tvm_debug_lines():
            self.executable.export_library(str(library))

    def save(self, path: str | Path) -> None:
        """The library at ``path`` and its signature at ``path`` + ``.json``, each written atomically;
        built in a temporary directory, so nothing but ``path`` and its signature lands beside it."""
        path = Path(path)
        if not path.parent.is_dir() or not os.access(path.parent, os.W_OK):
            raise ModelError(f"cannot write {path}: {path.parent} is not a writable directory")
        with tempfile.TemporaryDirectory() as tmp:
            library = Path(tmp) / "model.so"
            self.export(library)
            write_atomically(path, library.read_bytes())
        write_atomically(Path(str(path) + ".json"), json.dumps(self.signature()))

    @staticmethod
    def signature_of(path: Path) -> dict:
        """The signature ``save`` wrote beside the library at ``path``; ModelError when either is missing."""
        meta = Path(str(path) + ".json")
        if not path.is_file() or not meta.is_file():
            raise ModelError(f"{path}: no compiled model there (needs {path.name} and {meta.name})")
        return json.loads(meta.read_text())

    @staticmethod
    def load(path: str | Path, threads: int | None = None, signature: dict | None = None) -> "CompiledModel":
        """The library at ``path``, with ``signature`` (default: read from ``path`` + ``.json``). Loading
        runs the library's code: load only what you wrote (``qsynth run`` checks its cache first,
        ``artifacts.py``)."""
        path = Path(path)
        if signature is None:
            signature = CompiledModel.signature_of(path)
        inputs = {n: (tuple(s), d) for n, (s, d) in signature["inputs"].items()}
        with _without_tvm_debug_lines():
            library = tvm.runtime.load_module(str(path))
        return CompiledModel(library, inputs, signature["outputs"], threads)


@contextlib.contextmanager
def _without_tvm_debug_lines():
    """TVM 0.27 logs ``Scope Saving:`` and ``Scope Loaded:`` at WARNING for every memory scope of an
    executable it saves or loads (src/runtime/vm/executable.cc, leftover debug lines: 132 for
    MobileNetV3, on every ``qsynth run``); the library is not affected. Whatever else goes to stderr
    meanwhile (the C compiler's messages) is passed on."""
    sys.stderr.flush()
    stderr = os.dup(2)
    with tempfile.TemporaryFile() as log:
        os.dup2(log.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(stderr, 2)
            os.close(stderr)
            log.seek(0)
            sys.stderr.writelines(line for line in log.read().decode(errors="replace").splitlines(keepends=True)
                                  if "Scope Saving:" not in line and "Scope Loaded:" not in line)
