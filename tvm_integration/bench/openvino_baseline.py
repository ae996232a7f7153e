"""OpenVINO as a baseline: what users run int8 CNNs with on Xeons. The QDQ ONNX file as it is, compiled
by ``ov.Core().compile_model(path, "CPU", {"INFERENCE_NUM_THREADS": n, "PERFORMANCE_HINT": "LATENCY"})``
(``openvino_int8``); on an AMX host also with ``ONEDNN_MAX_CPU_ISA=AVX512_CORE_VNNI`` in the environment
(``openvino_int8_vnni``: oneDNN reads it when it loads, so its convolutions stay on VNNI).

Each configuration runs in a worker process of its own (this module, ``python -m``): the variable must
be set before oneDNN loads; a missing OpenVINO, a failed compile or a crash becomes a one-line reason
instead of ending the benchmark; and OpenVINO's thread pool never shares a process with TVM's or
onnxruntime's. The worker runs the model once on the benchmark's input (its outputs, compared with
onnxruntime's, in quantization steps of the output) and then times batches of inferences when asked
(``timing.batch_timer``, inputs set once as ours are; by wall clock, or by its process's CPU time), so
the benchmark interleaves them with ours (``timing.side_by_side``) without the pipe's round trip in the
time."""
from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile
import time
import weakref
from pathlib import Path

import numpy as np

CONFIGURATIONS = {"openvino_int8": {}, "openvino_int8_vnni": {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_VNNI"}}
START_TIMEOUT_S = 600           # import, compile and one inference of the largest model: seconds here
BATCH_TIMEOUT_S = 120


class Unavailable(Exception):
    """OpenVINO cannot be imported or cannot run the model here; the message says why, on one line."""


# oneDNN's names for the instruction sets it may be held to, the richest the flags show first.
ONEDNN_ISAS = [("amx_int8", "AVX512_CORE_AMX"), ("avx512_vnni", "AVX512_CORE_VNNI"), ("avx512bw", "AVX512_CORE"),
               ("avx_vnni", "AVX2_VNNI"), ("avx2", "AVX2")]


def configurations(flags: frozenset[str] | None = None,
                   cpu_flags: frozenset[str] | None = None) -> dict[str, dict[str, str]]:
    """Name -> environment of the configurations to run on a host whose model shows ``flags`` on a CPU
    showing ``cpu_flags`` (default: this one's, and qsynth's host model of it): the default everywhere,
    VNNI only where the default would use AMX. A host model held to fewer features than the CPU shows
    (``QSYNTH_HOST_FEATURES``: an AVX2-only host on a Xeon) holds OpenVINO's default to the same, through
    oneDNN's ``ONEDNN_MAX_CPU_ISA``, so that both sides run what such a host has."""
    from isa_specs import host
    flags = host.cpu_flags() if flags is None else flags
    cpu_flags = host.cpu_model().flags if cpu_flags is None else cpu_flags
    chosen = {name: env for name, env in CONFIGURATIONS.items() if not env or "amx_int8" in flags}
    if flags != cpu_flags:
        chosen["openvino_int8"] = {"ONEDNN_MAX_CPU_ISA": next(isa for flag, isa in ONEDNN_ISAS if flag in flags)}
    return chosen


class Worker:
    """One configuration's worker process on one model: ``outputs`` (name -> array) of its first run,
    ``info`` (OpenVINO's version, the primitives its convolutions and matmuls run on), ``batch()``:
    seconds per inference over one batch (``cpu``: the worker process's CPU seconds, every thread's).
    Ended by ``close()`` or when no longer referenced."""

    def __init__(self, path: Path, threads: int, feeds: dict[str, np.ndarray], env: dict[str, str],
                 cpu: bool = False):
        self._tmp = tempfile.TemporaryDirectory(prefix="qsynth-openvino-")
        tmp = Path(self._tmp.name)
        np.savez(tmp / "feeds.npz", **feeds)
        self._stderr = open(tmp / "stderr", "w+")
        self._proc = subprocess.Popen(
            [sys.executable, "-m", __name__, str(path), str(threads), str(tmp / "feeds.npz"), str(tmp / "out.npz"),
             "cpu" if cpu else "wall"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, text=True, env={**os.environ, **env})
        self._finalizer = weakref.finalize(self, _end, self._proc, self._stderr, self._tmp)
        try:
            self.info = self._reply(START_TIMEOUT_S)
            with np.load(tmp / "out.npz") as out:
                self.outputs = {name: out[name] for name in out.files}
        except Exception:
            self.close()
            raise

    def batch(self) -> float:
        self._proc.stdin.write("batch\n")
        self._proc.stdin.flush()
        return float(self._reply(BATCH_TIMEOUT_S)["seconds"])

    def close(self) -> None:
        self._finalizer()

    def _reply(self, timeout: float) -> dict:
        ready, _, _ = select.select([self._proc.stdout], [], [], timeout)
        line = self._proc.stdout.readline() if ready else ""
        if not line:
            last = _last_line(self._stderr)
            self.close()
            why = f"no answer in {timeout:.0f} s" if not ready else f"exit code {self._proc.returncode}"
            raise Unavailable(f"the OpenVINO worker ended ({why}){last}")
        reply = json.loads(line)
        if "error" in reply:
            self.close()
            raise Unavailable(reply["error"])
        return reply


def _end(proc: subprocess.Popen, stderr, tmp: tempfile.TemporaryDirectory) -> None:
    """Close the worker's stdin (it exits at end of input), kill it if it does not, remove its files."""
    try:
        proc.stdin.close()
        proc.wait(timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        proc.kill()
        proc.wait()
    proc.stdout.close()
    stderr.close()
    tmp.cleanup()


def _last_line(stderr) -> str:
    stderr.flush()
    stderr.seek(0)
    lines = [line.strip() for line in stderr.read().splitlines() if line.strip()]
    return f": {lines[-1]}" if lines else ""


def output_scales(path: Path) -> dict[str, float]:
    """Output name -> the scale of the per-tensor DequantizeLinear producing it (a QDQ model's float
    outputs), for the outputs that have one."""
    import onnx
    from onnx import numpy_helper
    graph = onnx.load(str(path), load_external_data=False).graph
    constants = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    constants |= {n.output[0]: numpy_helper.to_array(n.attribute[0].t) for n in graph.node
                  if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value"}
    producers = {o: n for n in graph.node for o in n.output}
    scales = {}
    for output in graph.output:
        node = producers.get(output.name)
        if node is not None and node.op_type == "DequantizeLinear" and constants.get(node.input[1]) is not None \
                and constants[node.input[1]].size == 1:
            scales[output.name] = float(constants[node.input[1]].reshape(()))
    return scales


def compare(outputs: dict[str, np.ndarray], expected: dict[str, np.ndarray], scales: dict[str, float]) -> dict:
    """The largest |outputs - expected| (the exact reference's) over the outputs, absolute and in
    quantization steps of each output (None when an output has no DequantizeLinear scale), and how
    many of the values differ at all; Unavailable if an output is missing."""
    absolute, steps, differing, compared = 0.0, 0.0, 0, 0
    for name, want in expected.items():
        if name not in outputs:
            raise Unavailable(f"the outputs do not include {name!r} (it named {sorted(outputs)})")
        diff = np.abs(outputs[name].astype(np.float64) - want.astype(np.float64))
        absolute = max(absolute, float(diff.max()) if want.size else 0.0)
        differing, compared = differing + int(np.count_nonzero(diff)), compared + want.size
        steps = None if steps is None or name not in scales else max(steps, absolute / scales[name])
    return {"max_abs_diff": absolute, "max_diff_steps": None if steps is None else round(steps, 3),
            "differing": differing, "compared": compared}


def baselines(path: str | Path, feeds: dict[str, np.ndarray], expected: dict[str, np.ndarray],
              threads: int) -> tuple[dict, dict]:
    """OpenVINO's configurations on the ONNX model ``path``: (name -> a function starting a worker and
    returning its ``SelfTimed`` batch timer, as ``timing.side_by_side`` takes baselines (``cpu=True``:
    timed by the worker's CPU time); name -> its report: version, primitives and the difference from
    ``expected``, onnxruntime's outputs on ``feeds``, or ``unavailable`` and why). A configuration that
    cannot run is only reported."""
    from tvm_integration.bench.timing import SelfTimed
    path = Path(path)
    scales = output_scales(path)
    runs, report = {}, {}
    for name, env in configurations().items():
        try:
            worker = Worker(path, threads, feeds, env)
            report[name] = {**worker.info, **({"environment": env} if env else {}),
                            **compare(worker.outputs, expected, scales)}
            worker.close()
        except Unavailable as e:
            report[name] = {"unavailable": str(e)}
            continue

        def start(env=env, cpu: bool = False):
            return SelfTimed(Worker(path, threads, feeds, env, cpu).batch)     # a new worker per session
        runs[name] = start
    return runs, report


def describe(name: str, report: dict) -> str:
    """One line of a configuration's report, for the commands' text output."""
    if "unavailable" in report:
        return f"{name}: unavailable: {report['unavailable']}"
    return (f"{name}: OpenVINO {report['version']}, {', '.join(report['primitives']) or 'no conv/matmul'}; "
            + differences(report))


def differences(report: dict) -> str:
    """``compare``'s report in words."""
    steps = report["max_diff_steps"]
    diff = (f"{steps:g} step{'' if steps == 1 else 's'} of the output's scale" if steps is not None
            else f"{report['max_abs_diff']:g} (absolute)")
    return (f"{report['differing']} of {report['compared']} outputs differ from the exact result"
            + (f", by up to {diff}" if report["differing"] else ""))


def _serve(path: str, threads: int, feeds_path: str, out_path: str, clock: str) -> int:
    """The worker: compile, run once, write the outputs, say so; then one batch per line of input, timed
    by ``clock`` (``wall``, or ``cpu``: the process's CPU time). Its messages go to the original stdout;
    anything else printed there (by OpenVINO too) goes to stderr."""
    channel = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)

    def say(message: dict) -> None:
        channel.write(json.dumps(message) + "\n")
        channel.flush()
    try:
        import openvino as ov
    except Exception as e:          # a missing package, or a library that does not load on this CPU
        say({"error": f"cannot import openvino ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"})
        return 1
    try:
        compiled = ov.Core().compile_model(path, "CPU", {"INFERENCE_NUM_THREADS": threads,
                                                         "PERFORMANCE_HINT": "LATENCY"})
        request = compiled.create_infer_request()
        with np.load(feeds_path) as data:
            feeds = {name: np.ascontiguousarray(data[name]) for name in data.files}
        for port in compiled.inputs:
            request.set_tensor(port, ov.Tensor(feeds[next(n for n in port.get_names() if n in feeds)]))
        request.infer()
        np.savez(out_path, **{name: request.get_tensor(port).data.copy() for port in compiled.outputs
                              for name in port.get_names()})
        primitives = sorted({_info(op, "primitiveType") for op in compiled.get_runtime_model().get_ordered_ops()
                             if _info(op, "layerType") in ("Convolution", "FullyConnected")})
    except Exception as e:
        say({"error": f"OpenVINO cannot run {Path(path).name}: {' '.join(str(e).split())[:300]}"})
        return 1
    from tvm_integration.bench.timing import batch_timer
    say({"version": ov.__version__.split("-")[0], "primitives": primitives})
    run = batch_timer(request.infer, clock=time.process_time if clock == "cpu" else time.perf_counter)
    for _ in sys.stdin:
        say({"seconds": run()})
    return 0


def _info(op, key: str) -> str:
    """A field of a runtime-model node (layer type, the primitive it runs on), "?" where absent."""
    info = op.get_rt_info()
    return info[key].astype(str) if key in info else "?"


if __name__ == "__main__":
    sys.exit(_serve(sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]))
