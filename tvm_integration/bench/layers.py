"""One ResNet-18 conv layer (the synthesis paper's Table 1: C2-C12), batch 1, int8: our conv2d (NHWC,
tensorized with a cached kernel, bias + float requantize to u8 fused) next to, in the same run,
onnxruntime int8 (a one-conv QDQ model quantized by onnxruntime: u8 activations, s8 per-channel
weights) and fp32, OpenVINO on the same int8 model (openvino_baseline.py; see ``OPENVINO_NOTE``), TVM
0.27's own lowering of the integer conv (R.nn.conv2d(u8, s8, out_dtype=int32),
legalized, default pipeline), and our schedule with the kernel replaced by plain TIR. Every time is
the median of ``trials`` runs, ours, onnxruntime's and OpenVINO's side by side (``timing.side_by_side``); the peak
of the tile's multiply instruction (``peak_instruction``, scripts/peak_x86.c) is probed before the layer; our output is checked against numpy in the
same run. Used by ``qsynth bench-layer`` and
scripts/bench_layers.py. The thread count is TVM's (TVM_NUM_THREADS, read when its pool starts).
"""
from __future__ import annotations

import functools
import json
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import tvm

from tvm_integration.bench import openvino_baseline
from tvm_integration.bench.timing import median_seconds, side_by_side, tvm_batch_timer, tvm_seconds
from tvm_integration.kernels import selection, tuning
from tvm_integration.ops.conv2d import conv2d, conv_geometry, pair
from tvm_integration.ops.output_stage import OutputStage, ScaleRequantize

PEAK_PROBE = Path(__file__).resolve().parent.parent.parent / "scripts" / "peak_x86.c"

# name: (H=W, IC, OC, kernel, stride); padding kernel // 2
LAYERS = {"C2": (56, 64, 64, 3, 1), "C3": (56, 64, 64, 1, 1), "C4": (56, 64, 128, 3, 2), "C5": (56, 64, 128, 1, 2),
          "C6": (28, 128, 128, 3, 1), "C7": (28, 128, 256, 3, 2), "C8": (28, 128, 256, 1, 2),
          "C9": (14, 256, 256, 3, 1), "C10": (14, 256, 512, 3, 2), "C11": (14, 256, 512, 1, 2),
          "C12": (7, 512, 512, 3, 1)}

OPENVINO_NOTE = ("OpenVINO runs the one-conv model with its fixed cost per model (quantizing the float input, "
                 "layout reorders: 0.15-0.5 ms on an AMX Xeon, more than many layers), so its layer times are "
                 "pessimistic for it; its whole-model times (bench-model) are the fair comparison")


class Layer:
    """One layer's tensors (random, fixed seed), its MAC count and the numpy reference output."""

    def __init__(self, name: str):
        self.name = name
        hw, ic, oc, k, s = LAYERS[name]
        self.hw, self.ic, self.oc, self.k, self.s, self.pad = hw, ic, oc, k, s, k // 2
        self.out_hw = (hw + 2 * self.pad - k) // s + 1
        self.macs = self.out_hw ** 2 * oc * ic * k * k
        rng = np.random.default_rng(18)
        self.x = rng.integers(0, 256, (1, hw, hw, ic)).astype(np.uint8)
        self.w = rng.integers(-128, 128, (oc, ic, k, k)).astype(np.int8)
        self.bias = rng.integers(-20000, 20000, oc).astype(np.int32)
        self.scale = (rng.uniform(0.5, 2.0, oc) / (128 * 128 * np.sqrt(ic * k * k))).astype(np.float32)
        self.stage = OutputStage(bias=self.bias, requantize=ScaleRequantize(self.scale, 128, "uint8"))

    def reference(self) -> np.ndarray:
        x = np.pad(self.x.astype(np.int64), ((0, 0), (self.pad, self.pad), (self.pad, self.pad), (0, 0)))
        n = self.out_hw
        acc = np.zeros((1, n, n, self.oc), np.int64)
        for i in range(self.k):
            for j in range(self.k):
                window = x[:, i:i + self.s * n:self.s, j:j + self.s * n:self.s, :]
                acc += window @ self.w[:, :, i, j].astype(np.int64).T
        acc = acc.astype(np.int32) + self.bias
        return np.clip(np.rint(acc.astype(np.float32) * self.scale) + 128, 0, 255).astype(np.uint8)

    def ours(self, use_kernel: bool = True, isa: str = "host"):
        return conv2d(self.w, self.x.shape, "NHWC", self.s, self.pad, 1, "uint8", self.stage, isa, use_kernel)

    def tuning_key(self) -> str:
        """The tuning log's key of the layer's int8 conv2d (u8 activations)."""
        _, _, pads = conv_geometry(self.x.shape, "NHWC", self.w.shape, pair(self.s), self.pad)
        return tuning.conv2d_key(self.x.shape, "NHWC", self.w.shape, pair(self.s), pads, 1, "uint8")

    def kernel(self, isa: str = "host"):
        """The tile conv2d uses for this layer: the tuning log's choice, else the least-padding one."""
        _, (oh, ow), _ = conv_geometry(self.x.shape, "NHWC", self.w.shape, pair(self.s), self.pad)
        depth = int(np.prod(self.w.shape[1:]))
        return tuning.choose(self.tuning_key(), selection.int8_candidates(isa, depth), oh * ow, self.oc, depth=depth)


def tvm_default_seconds(layer: Layer, trials: int) -> float:
    """TVM's own lowering: R.nn.conv2d(u8, s8, out_dtype=int32), NCHW, legalized by the default pipeline."""
    from tvm import relax
    from tvm.script import relax as R
    bb = relax.BlockBuilder()
    x = relax.Var("x", R.Tensor((1, layer.ic, layer.hw, layer.hw), "uint8"))
    w = relax.Var("w", R.Tensor(layer.w.shape, "int8"))
    with bb.function("main", [x, w]):
        with bb.dataflow():
            y = bb.emit_output(relax.op.nn.conv2d(x, w, strides=layer.s, padding=layer.pad, out_dtype="int32"))
        bb.emit_func_output(y)
    vm = relax.VirtualMachine(tvm.compile(bb.get(), target=tvm.target.Target(selection.int8_target())), tvm.cpu())
    args = [tvm.runtime.tensor(np.ascontiguousarray(layer.x.transpose(0, 3, 1, 2))), tvm.runtime.tensor(layer.w)]
    return median_seconds(lambda: vm["main"](*args), max(3, trials // 3))


def onnxruntime_models(layer: Layer, directory: Path) -> dict[str, Path]:
    """The layer as a one-conv ONNX model, fp32 and int8 (quantize_static, QDQ, u8 activations, s8
    per-channel weights), written to ``directory``."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    wf = layer.w.astype(np.float32) / 128
    shape = [1, layer.ic, layer.hw, layer.hw]
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[layer.pad] * 4, strides=[layer.s] * 2)
    graph = helper.make_graph([node], layer.name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(wf, "w"), numpy_helper.from_array(np.zeros(layer.oc, np.float32), "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9                       # onnxruntime reads at most IR 13; onnx 1.23 writes 14
    fp32, int8 = directory / f"{layer.name}.onnx", directory / f"{layer.name}.int8.onnx"
    onnx.save(model, fp32)
    rng = np.random.default_rng(0)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.batches = iter([{"x": rng.uniform(0, 1, shape).astype(np.float32)} for _ in range(4)])

        def get_next(self):
            return next(self.batches, None)

    quantize_static(str(fp32), str(int8), Reader(), quant_format=QuantFormat.QDQ, activation_type=QuantType.QUInt8,
                    weight_type=QuantType.QInt8, per_channel=True)
    return {"onnxruntime_fp32": fp32, "onnxruntime_int8": int8}


def float_input(layer: Layer) -> dict[str, np.ndarray]:
    """The one-conv models' input (their float ``x``, NCHW)."""
    return {"x": np.random.default_rng(0).uniform(0, 1, [1, layer.ic, layer.hw, layer.hw]).astype(np.float32)}


def onnxruntime_runner(path: Path, threads: int, layer: Layer):
    """A function running the layer's model once in a new onnxruntime session."""
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    x = float_input(layer)
    return lambda: session.run(None, x)


def onnxruntime_runners(layer: Layer, threads: int, models: dict[str, Path]) -> dict:
    """Name -> a function making a run function of onnxruntime on each of ``models`` (name -> path, from
    ``onnxruntime_models``): the baselines of ``side_by_side``."""
    return {name: functools.partial(onnxruntime_runner, path, threads, layer) for name, path in models.items()}


def onnxruntime_seconds(layer: Layer, threads: int, trials: int, directory: Path) -> dict[str, float]:
    """Median seconds of onnxruntime fp32 and int8 on the layer, one session alive at a time (as
    ``side_by_side`` on more than one thread)."""
    runners = onnxruntime_runners(layer, threads, onnxruntime_models(layer, directory))
    return {name: median_seconds(make(), trials) for name, make in runners.items()}


def openvino_runners(layer: Layer, threads: int, int8: Path) -> tuple[dict, dict]:
    """OpenVINO's configurations on the layer's int8 model: (baselines of ``side_by_side``, each one's
    report: its difference from onnxruntime int8 on the same input, or why it is unavailable)."""
    x = float_input(layer)
    expected = onnxruntime_runner(int8, threads, layer)()
    return openvino_baseline.baselines(int8, x, {"y": expected[0]}, threads)


def peak_instruction(kernel) -> tuple[str, int] | None:
    """(scripts/peak_x86.c probe, MACs per instruction) of the bound the layer is compared with: a VNNI
    tile's vpdpbusd zmm; an exact AVX2 tile's multiply pipes (vpmaddwd ymm, 16 MACs: the s8s7 and w16 rows
    issue two multiplies per 32 MACs at best); None for other kernels."""
    if "avx512vnni" in kernel.features:
        return "vpdpbusd_zmm", 64
    if kernel.spec.isa == "avx2" and kernel.spec.types in ("s8s7", "w16"):
        return "vpmaddwd_ymm", 16
    return None


def peak_gmacs(probe: Path, instruction: tuple[str, int]) -> float:
    """The ``instruction`` probe's rate times its MACs, in G MAC/s, measured now."""
    name, macs = instruction
    rate = json.loads(subprocess.run([str(probe), name], capture_output=True, text=True, check=True).stdout)
    return rate[name] * macs / 1e9


def bench(layer: Layer, threads: int, trials: int, probe: tuple[Path, tuple[str, int]] | None, directory: Path,
          ours, plain) -> dict:
    peak = peak_gmacs(*probe) if probe else None
    args = ours.args(layer.x)
    correct = bool(np.array_equal(ours(layer.x), layer.reference()))
    models = onnxruntime_models(layer, directory)
    openvino, openvino_report = openvino_runners(layer, threads, models["onnxruntime_int8"])
    baselines = side_by_side(tvm_batch_timer(ours.module, args),
                             onnxruntime_runners(layer, threads, models) | openvino, trials, threads)
    t_ours = baselines.pop("ours")
    if threads == 1:
        baselines["tvm_default"] = tvm_default_seconds(layer, trials)
        baselines["ours_plain_tir"] = tvm_seconds(plain.module, plain.args(layer.x), max(3, trials // 3))
    gmacs = layer.macs / t_ours / 1e9
    return {"layer": layer.name, "threads": threads, "shape": LAYERS[layer.name], "macs": layer.macs,
            "correct": correct, "ours_ms": t_ours * 1e3, "gmacs": gmacs,
            "baselines": {k: v * 1e3 for k, v in baselines.items()},
            "speedups": {k: v / t_ours for k, v in baselines.items()},
            "peak_gmacs": peak, "percent_of_peak": 100 * gmacs / (peak * threads) if peak else None,
            "openvino": openvino_report, "notes": [OPENVINO_NOTE]}


def bench_layer(name: str, threads: int, trials: int, isa: str = "host") -> dict:
    """One row: the layer on ``isa``'s kernel and every baseline, timed in this process."""
    layer = Layer(name)
    kernel = layer.kernel(isa)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        probe, instruction = tmp / "peak", peak_instruction(kernel)
        have_probe = instruction and selection.usable(kernel) is None and subprocess.run(
            ["gcc", "-O2", "-o", str(probe), str(PEAK_PROBE)], capture_output=True).returncode == 0
        plain = layer.ours(use_kernel=False, isa=isa) if threads == 1 else None
        row = bench(layer, threads, trials, (probe, instruction) if have_probe else None, tmp, layer.ours(isa=isa), plain)
    return dict(row, kernel=kernel.intrin)
