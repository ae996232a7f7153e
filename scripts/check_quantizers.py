#!/usr/bin/env python3
"""Issue 49's check: a torchvision ResNet-18 (random weights, exported as scripts/make_zoo.py does)
quantized by each quantizer option users set, compiled with ``compile_model`` and compared with
onnxruntime's exact result (``reference_session``) on 3 standard-normal inputs (3000 logits); and a
4-layer BERT (scripts/bench_transformers.py's bert_l4_s128 float model, 3 x 98304 outputs) quantized by
NNCF with ``model_type=TRANSFORMER`` (SmoothQuant, float projections: ``nncf_bert_transformer``), and
a Hugging Face BertModel of that shape quantized by PyTorch's PT2E (``pt2e_hf_bert``).

onnxruntime: ``quant_pre_process`` then ``quantize_static`` (8 standard-normal calibration inputs) with
each option of OPTIONS, or ``quantize_dynamic`` (its defaults; per channel, u8 weights); NNCF (``pip install
nncf==3.4.0``, not a dependency): ``nncf.quantize`` on the ONNX backend, presets performance and mixed, and
model_type transformer for the BERT. The models are tens of MB each (written to --out, never commit them); an
existing one is reused.

``--target neon [--mcpu CORE]``: each model compiled for AArch64 and run under qemu as CORE on the same 3
inputs, compared with the stated reference on Arm (qnn/runtime/arm_reference.py: onnxruntime's AArch64 build
under qemu, its QDQ Adds as ONNX defines them) and, for information, with onnxruntime's x86 exact mode.

``--bench``: the same set through the zoo's compile (a process per model, the library kept in --out)
and worker (scripts/bench_zoo.py, tvm_integration/bench/zoo.py ``row``), one thread: exactness as above,
and qsynth timed side by side with onnxruntime int8 (its default and its exact mode) and OpenVINO int8 on
the same file, by wall and by CPU time; models slower than onnxruntime int8 (CPU time) or not exact
profiled (``zoo.where_the_time_goes``). Writes ``<benchmarks>/quantizers_<uarch>.{json,md}``; with
``--update``, re-runs only the given models and keeps the other rows of that file, each row with the record
of the run that measured it (the table prints each run and, when they are several, its rows).

    python scripts/check_quantizers.py [--out /tmp/ort49] [--models s8s8_per_channel,nncf_bert_transformer,...]
    python scripts/check_quantizers.py --target neon [--mcpu cortex-a76] [--models ...]
    python scripts/check_quantizers.py --bench [--trials 10] [--recompile] [--no-openvino] [--no-profile] [--update]
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))


def options() -> dict:
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType
    pc, rr = dict(per_channel=True), dict(per_channel=True, reduce_range=True)
    u8 = dict(activation_type=QuantType.QUInt8)
    return {
        "per_channel_reduce_range": rr,
        "percentile": dict(rr, calibrate_method=CalibrationMethod.Percentile),
        "s8s8_per_channel": pc,
        "s8s8_per_tensor": {},
        "add_qdq_pair_to_weight": dict(pc, extra_options={"AddQDQPairToWeight": True}),
        "dedicated_qdq_pair": dict(pc, extra_options={"DedicatedQDQPair": True}),
        "keep_removable_activations": dict(pc, extra_options={"QDQKeepRemovableActivations": True}),
        "entropy": dict(pc, calibrate_method=CalibrationMethod.Entropy),
        "distribution": dict(pc, calibrate_method=CalibrationMethod.Distribution),
        "symmetric": dict(pc, extra_options={"ActivationSymmetric": True, "WeightSymmetric": True}),
        "u8u8_per_tensor": dict(u8, weight_type=QuantType.QUInt8),
        "u8s8_per_channel": dict(pc, **u8),
        "u8s8_per_channel_reduce_range": dict(rr, **u8),
        "u8s8_qoperator": dict(pc, quant_format=QuantFormat.QOperator, **u8),
        "s8s8_qoperator": dict(pc, quant_format=QuantFormat.QOperator),
        "s8s8_qoperator_reduce_range": dict(rr, quant_format=QuantFormat.QOperator),
        "dynamic": None,
        "dynamic_u8_per_channel": dict(dynamic=True, per_channel=True, weight_type=QuantType.QUInt8),
        "nncf_performance": "PERFORMANCE",
        "nncf_mixed": "MIXED",
        "nncf_bert_transformer": "TRANSFORMER",
        "pt2e_arm_inductor": "PT2E",
        "pt2e_hf_bert": "PT2E_HF_BERT",
        "brevitas_resnet_w8a8": "BREVITAS_W8A8",
        "brevitas_resnet_w2a2": "BREVITAS_W2A2",
    }


def build(out: Path, name: str) -> Path:
    """The quantized ResNet-18 (or BERT) of option ``name`` (made once), ``NAME.int8.onnx``: the name
    scripts/bench_zoo.py's compile and worker read."""
    import make_zoo
    path = out / f"{name}.int8.onnx"
    if path.exists():
        return path
    option = options()[name]
    if option == "TRANSFORMER":
        return build_bert(path)
    if option == "PT2E":
        return build_pt2e(path)
    if option == "PT2E_HF_BERT":
        return build_pt2e_bert(path)
    if str(option).startswith("BREVITAS"):
        return build_brevitas(path, int(option[-1]))
    fp32, pre = out / "resnet18.fp32.onnx", out / "resnet18.pre.onnx"
    if not fp32.exists():
        import torch
        torch.manual_seed(0)
        model = make_zoo.torchvision_models().resnet18(weights=None).eval()
        make_zoo.export_module(model, {"input": torch.randn(1, 3, 224, 224)}, ["output"], fp32)
    calibration = make_zoo.normal_inputs((1, 3, 224, 224), 8)
    if isinstance(option, str):
        import nncf
        import onnx
        quantized = nncf.quantize(onnx.load(str(fp32)), nncf.Dataset(calibration), subset_size=8,
                                  preset=getattr(nncf.QuantizationPreset, option))
        onnx.save(quantized, str(path))
        return path
    from onnxruntime import quantization as q
    from onnxruntime.quantization.shape_inference import quant_pre_process
    if not pre.exists():
        quant_pre_process(str(fp32), str(pre))
    if option is None or option.get("dynamic"):
        q.quantize_dynamic(str(pre), str(path), **{k: v for k, v in (option or {}).items() if k != "dynamic"})
        return path
    feeds = iter(calibration)

    class Reader(q.CalibrationDataReader):
        def get_next(self):
            return next(feeds, None)
    q.quantize_static(str(pre), str(path), Reader(), **option)
    return path


def build_bert(path: Path) -> Path:
    """bench_transformers' 4-layer BERT (sequence 128) quantized by NNCF as a transformer, with the
    ResNet's 8 standard-normal calibration inputs (make_zoo.normal_inputs)."""
    import bench_transformers
    import make_zoo
    import nncf
    import onnx
    model = bench_transformers.float_model("bert_l4_s128")
    calibration = make_zoo.normal_inputs((1, 128, 768), 8)
    quantized = nncf.quantize(model, nncf.Dataset(calibration), subset_size=len(calibration),
                              model_type=nncf.ModelType.TRANSFORMER)
    onnx.save(quantized, str(path))
    return path


def build_pt2e(path: Path) -> Path:
    """The ResNet-18 quantized by PyTorch's PT2E flow (torchao): ``torch.export``, ``prepare_pt2e`` with
    ArmInductorQuantizer's default config (per-tensor int8; X86InductorQuantizer fails in prepare_pt2e on
    this model with torch 2.13 and torchao 0.18, docs/measurements.md), the 8 calibration inputs,
    ``convert_pt2e``, then exported as the zoo is (torch.onnx's dynamo exporter, make_zoo.export_module)."""
    import make_zoo
    import torch
    torch.manual_seed(0)
    model = make_zoo.torchvision_models().resnet18(weights=None).eval()
    return pt2e_exported(model, torch.randn(1, 3, 224, 224), path)


def pt2e_exported(model, example, path: Path) -> Path:
    """``model`` (its one input shaped as ``example``) through PT2E with ArmInductorQuantizer's default
    config, calibrated on 8 standard-normal inputs (make_zoo.normal_inputs), exported to ``path``."""
    import make_zoo
    import torch
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e
    from torchao.quantization.pt2e.quantizer.arm_inductor_quantizer import (
        ArmInductorQuantizer, get_default_arm_inductor_quantization_config)
    quantizer = ArmInductorQuantizer().set_global(get_default_arm_inductor_quantization_config())
    prepared = prepare_pt2e(torch.export.export(model, (example,)).module(), quantizer)
    for feed in make_zoo.normal_inputs(tuple(example.shape), 8):
        prepared(*(torch.from_numpy(v) for v in feed.values()))
    make_zoo.export_module(convert_pt2e(prepared), {"input": example}, ["output"], path)
    return path


def build_pt2e_bert(path: Path) -> Path:
    """A Hugging Face BERT (``pip install transformers==5.23.0``, not a dependency; ``BertModel`` of
    bert_l4_s128's shape: 4 layers, hidden 768, 12 heads, feed-forward 3072, random weights, eager
    attention, no pooler) fed its embeddings (``inputs_embeds`` [1, 128, 768], so that the 3 standard-normal
    inputs are valid), quantized by PT2E with ArmInductorQuantizer as ``build_pt2e`` (its Linears become
    ``MatMul(DQ(x), Transpose(DQ(W))) + bias``) and exported by torch.onnx's dynamo exporter."""
    import make_zoo
    import torch
    make_zoo.torchvision_models()           # transformers imports torchvision: without its compiled operators
    from transformers import BertConfig, BertModel
    torch.manual_seed(0)
    config = BertConfig(num_hidden_layers=4, hidden_size=768, num_attention_heads=12, intermediate_size=3072,
                        max_position_embeddings=128, attn_implementation="eager")

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = BertModel(config, add_pooling_layer=False).eval()

        def forward(self, embeddings):
            return self.bert(inputs_embeds=embeddings).last_hidden_state
    example = torch.randn(1, 128, 768)      # drawn before the weights, as the row's model was made
    return pt2e_exported(Encoder().eval(), example, path)


def build_brevitas(path: Path, bits: int) -> Path:
    """A small torchvision-style ResNet in Brevitas' quantized modules (``pip install brevitas==0.13.4
    onnxoptimizer==0.4.2``, pyproject's lowbit extra), random weights, exported as QCDQ (QuantizeLinear ->
    Clip -> DequantizeLinear below 8 bits) at opset 13, as scripts/train_digits_lowbit.py exports: a 7x7
    stride-2 stem and max pool, two BasicBlocks (the second strided, with a 1x1 downsample), each residual
    Add's operands requantized by one shared signed 8-bit quantizer, global average pool and a fully
    connected layer. The stem, the classifier and the Adds stay 8-bit; the blocks' convs take ``bits``-bit
    weights and their ReLUs ``bits``-bit activations. Scales from Brevitas' calibration mode on the 8
    calibration inputs (the graph a QAT run exports, without the training that only moves its values)."""
    import make_zoo
    import torch
    import torch.nn as nn
    try:
        import brevitas.nn as qnn
        from brevitas.export import export_onnx_qcdq
        from brevitas.graph.calibrate import calibration_mode
        from brevitas.quant import Int8ActPerTensorFloat, Int8WeightPerTensorFloat, Int32Bias, Uint8ActPerTensorFloat
    except ImportError as e:
        raise RuntimeError(f"the Brevitas rows need brevitas==0.13.4 and onnxoptimizer==0.4.2 (the lowbit extra): {e}")

    def conv(cin, cout, kernel, stride, weight_bits):
        return qnn.QuantConv2d(cin, cout, kernel, stride=stride, padding=kernel // 2, bias_quant=Int32Bias,
                               weight_quant=Int8WeightPerTensorFloat, weight_bit_width=weight_bits,
                               return_quant_tensor=True)

    def relu(act_bits, quant_tensor=True):
        return qnn.QuantReLU(act_quant=Uint8ActPerTensorFloat, bit_width=act_bits, return_quant_tensor=quant_tensor)

    class Block(nn.Module):
        def __init__(self, cin, cout, stride, last=False):
            super().__init__()
            self.conv1, self.relu1 = conv(cin, cout, 3, stride, bits), relu(bits)
            self.conv2 = conv(cout, cout, 3, 1, bits)
            self.downsample = conv(cin, cout, 1, stride, bits) if stride != 1 else None
            self.residual = qnn.QuantIdentity(act_quant=Int8ActPerTensorFloat, return_quant_tensor=True)
            self.relu2 = relu(bits, quant_tensor=not last)

        def forward(self, x):
            shortcut = x if self.downsample is None else self.downsample(x)
            y = self.conv2(self.relu1(self.conv1(x)))
            return self.relu2(self.residual(y) + self.residual(shortcut))

    class ResNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.input = qnn.QuantIdentity(act_quant=Int8ActPerTensorFloat, return_quant_tensor=True)
            self.stem, self.stem_relu = conv(3, 32, 7, 2, 8), relu(8)
            self.pool = nn.MaxPool2d(3, stride=2, padding=1)          # a QuantTensor in, one out
            self.blocks = nn.Sequential(Block(32, 32, 1), Block(32, 64, 2, last=True))
            self.pooled = qnn.QuantIdentity(act_quant=Uint8ActPerTensorFloat, return_quant_tensor=True)
            self.fc = qnn.QuantLinear(64, 100, bias=True, bias_quant=Int32Bias, weight_quant=Int8WeightPerTensorFloat)

        def forward(self, x):
            x = self.blocks(self.pool(self.stem_relu(self.stem(self.input(x)))))
            return self.fc(self.pooled(x.mean((2, 3))))

    torch.manual_seed(0)
    model = ResNet().eval()
    with torch.no_grad(), calibration_mode(model):
        for feed in make_zoo.normal_inputs((1, 3, 64, 64), 8):
            model(torch.from_numpy(feed["input"]))
    export_onnx_qcdq(model, torch.zeros(1, 3, 64, 64), export_path=str(path), dynamo=False, opset_version=13,
                     input_names=["input"], output_names=["output"])
    return path


def compare(path: Path) -> dict:
    """``zoo.difference`` of the model compiled here from onnxruntime's exact result on 3 standard-normal
    inputs."""
    from tvm_integration.bench import zoo
    from tvm_integration.qnn.runtime.model import compile_model
    model = compile_model(path, threads=1)
    return zoo.difference(model, path, zoo.inputs(model, 3), 1)


def compare_arm(path: Path, core: str) -> dict:
    """The model compiled for ``core`` (``--target neon``), run under qemu on the 3 inputs of ``compare``,
    against the stated reference on Arm (``stated``: onnxruntime's AArch64 build under qemu, with any op it
    computes otherwise than ONNX defines as defined, arm_models.stated_model; qnn/runtime/arm_reference.py)
    and, for information, onnxruntime's x86 exact mode (``x86``): ``zoo.compared`` of each."""
    import tempfile

    from tvm_integration.bench import arm_models, ort_aarch64, zoo
    from tvm_integration.bench.models import reference_session
    from tvm_integration.qnn.runtime.model import compile_model
    model = compile_model(path, target="neon", mcpu=core)
    feeds = zoo.inputs(model, 3)
    ours = [model(feed) for feed in feeds]
    session, scales = reference_session(path), zoo.output_scales(path)
    x86 = [dict(zip(model.outputs, session.run(None, feed))) for feed in feeds]
    with tempfile.TemporaryDirectory(prefix="qsynth-check-quantizers-") as work:
        stated_path = arm_models.stated_model(path, model.op_kinds, Path(work))
        stated = [dict(zip(model.outputs, ort_aarch64.run(stated_path, feed, model.outputs, core,
                                                                   counted=False)[0]))
                  for feed in feeds]
    return {"stated": zoo.compared(ours, stated, scales), "x86": zoo.compared(ours, x86, scales),
            "op_kinds": sorted(map(str, model.op_kinds))}


def described(option) -> str:
    """An option of ``options()`` in words: the quantizer and its arguments."""
    if option is None:
        return "quantize_dynamic, defaults"
    if isinstance(option, dict) and option.get("dynamic"):
        return "quantize_dynamic, " + ", ".join(f"{k}={getattr(v, 'name', v)}" for k, v in option.items()
                                                if k != "dynamic")
    if str(option).startswith("BREVITAS"):
        return f"Brevitas 0.13.4, a small ResNet, W{option[-1]}A{option[-1]} blocks, QCDQ export"
    if option == "PT2E":
        return "PyTorch PT2E (torchao 0.18), ArmInductorQuantizer, torch.onnx's dynamo exporter"
    if option == "PT2E_HF_BERT":
        return "PyTorch PT2E (torchao 0.18), ArmInductorQuantizer, a Hugging Face BertModel (transformers 5.23)"
    if isinstance(option, str):
        return "NNCF, 4-layer BERT, model_type TRANSFORMER" if option == "TRANSFORMER" else f"NNCF, preset {option}"
    return "quantize_static, " + (", ".join(f"{k}={getattr(v, 'name', v)}" for k, v in option.items()) or "defaults")


def bench(args, names: list[str]) -> int:
    """The --bench run: build, compile and time ``names``; write the record and its table."""
    from isa_specs import host
    from scripts import bench_zoo
    from synth.files import write_atomically
    from tvm_integration.bench import provenance
    record = provenance.record(1)
    for name in names:
        build(args.out, name)
    compiles = bench_zoo.compile_all(args.out, names, args.recompile)
    ready = [n for n in names if "error" not in compiles[n]]
    rows = bench_zoo.subprocess_rows(["--worker", "1", "--models", ",".join(ready), "--dir", str(args.out),
                                      "--trials", str(args.trials)] + (["--no-openvino"] if args.no_openvino else []),
                                     1) if ready else []
    profiles = {}
    for r in rows:
        if bench_zoo.is_slow_or_inexact(r) and not args.no_profile:
            profiles |= {p.pop("name"): p for p in
                         bench_zoo.subprocess_rows(["--profile-one", r["name"], "--dir", str(args.out)], 1)}
    record = provenance.finished(record)
    data = {"host": bench_zoo.host_line(), "run": record,
            "quantizers": {n: described(options()[n]) for n in names}, "compile": compiles,
            "rows": [dict(r, run=record) for r in rows], "profiles": profiles}
    stem = args.benchmarks / f"quantizers_{host.model().uarch}"
    if args.update and stem.with_suffix(".json").exists():
        data = merged(json.loads(stem.with_suffix(".json").read_text()), data)
    write_atomically(stem.with_suffix(".json"), json.dumps(data, indent=1) + "\n")
    write_atomically(stem.with_suffix(".md"), markdown(data))
    print(markdown(data))
    return 0 if len(rows) == len(names) and all(r.get("max_abs_diff") == 0 for r in rows) else 1


def merged(earlier: dict, run: dict) -> dict:
    """The table of ``earlier`` (a --bench JSON) with the models of ``run`` replaced or added, in the order of
    ``options()``; each earlier row keeps the record of its run (a file from before row records: its ``run``)."""
    order = list(options())
    again = set(run["quantizers"])
    quantizers = earlier["quantizers"] | run["quantizers"]
    rows = [dict(r, run=r.get("run", earlier["run"])) for r in earlier["rows"] if r["name"] not in again] + run["rows"]
    return {"host": run["host"], "run": run["run"],
            "quantizers": dict(sorted(quantizers.items(), key=lambda q: order.index(q[0]))),
            "compile": {n: c for n, c in earlier["compile"].items() if n not in again} | run["compile"],
            "rows": sorted(rows, key=lambda r: order.index(r["name"])),
            "profiles": {n: p for n, p in earlier["profiles"].items() if n not in again} | run["profiles"]}


RUNTIMES = {"onnxruntime_int8": "onnxruntime int8", "onnxruntime_int8_exact": "its exact mode",
            "openvino_int8": "OpenVINO int8"}


def misses(rows: dict[str, dict]) -> list[str]:
    """The rows below a target by CPU time: slower than onnxruntime int8, or (an NNCF model) than OpenVINO."""
    out = []
    for name, r in rows.items():
        targets = ("onnxruntime_int8", "openvino_int8") if name.startswith("nncf") else ("onnxruntime_int8",)
        for runtime in targets:
            if runtime in r.get("cpu_baselines", {}) and r["cpu_baselines"][runtime] < r["ours_cpu_ms"]:
                out.append(f"{name} {r['cpu_baselines'][runtime] / r['ours_cpu_ms']:.2f}x {RUNTIMES[runtime]}")
    return out


def markdown(data: dict) -> str:
    """The table of a --bench run (its JSON, ``data``)."""
    from scripts import bench_zoo
    from tvm_integration.bench import provenance, tuned_shapes
    rows = {r["name"]: r for r in data["rows"]}
    runs = provenance.lines(data["rows"], lambda r: r["name"], lambda r: r.get("run", data["run"])) if data["rows"] \
        else [f"- Run: {provenance.line(data['run'])}."]
    lines = ["# Quantizer outputs: exactness and speed, 1 thread", "", f"Host: {data['host']}.", "", *runs, "",
             "Written by `scripts/check_quantizers.py --bench` (its docstring says how the models are made: "
             "torchvision ResNet-18 and a 4-layer BERT, random weights, 8 standard-normal calibration inputs). "
             "exact: qsynth's outputs against onnxruntime's exact mode (`session.x64quantprecision` = 1) on 3 "
             "standard-normal inputs, values that differ of those compared. Times: medians of ms per inference, "
             "qsynth and each runtime in interleaved rounds (`timing.side_by_side`), first by CPU time (the "
             "process's, OpenVINO's that of its worker process: what the other jobs on these 2 shared cores "
             "disturb least), then by wall time; x: the runtime's time / qsynth's (at least 1.00x: qsynth as "
             "fast or faster). OpenVINO compiles the same QDQ file (its native input for the NNCF rows); "
             "OpenVINO exact: its outputs against the same reference. tuning: the share of the model's int8 tile "
             "shapes this host's tuning log chose.", "",
             "| model | quantizer | exact | CPU ms qsynth | " + " | ".join(f"{v} (x)" for v in RUNTIMES.values())
             + " | wall ms qsynth | " + " | ".join(RUNTIMES.values()) + " | OpenVINO exact | compile s | tuning |",
             "|---|---|---|---|" + "---|" * len(RUNTIMES) + "---|" + "---|" * len(RUNTIMES) + "---|---|---|"]
    width = lines[-1].count("|") - 1
    for name, quantizer in data["quantizers"].items():
        r, c = rows.get(name), data["compile"].get(name, {})
        if r is None or "error" in r or "error" in c:
            why = f"compile fails: {c['error']}" if "error" in c else f"fails: {r['error']}" if r else "not run"
            lines.append(f"| {name} | {quantizer} | {why} |" + " |" * (width - 3))
            continue
        cpu = r.get("cpu_baselines", {})
        ov = r["openvino"].get("openvino_int8", {})
        ov_exact = f"{ov['differing']} of {ov['compared']}" if "differing" in ov else ov.get("unavailable", "-")
        lines.append(
            f"| {name} | {quantizer} | {r['differing']} of {r['values']} | {r['ours_cpu_ms']:.2f} | "
            + " | ".join(f"{cpu[k]:.2f} ({cpu[k] / r['ours_cpu_ms']:.2f}x)" if k in cpu else "-" for k in RUNTIMES)
            + f" | {r['ours_ms']:.2f} | " + " | ".join(f"{r['baselines'][k]:.2f}" if k in r["baselines"] else "-"
                                                       for k in RUNTIMES)
            + f" | {ov_exact} | {c['compile_s']:.0f} | {tuned_shapes.label(r.get('tuning'))} |")
    lines += ["", "Below the targets by CPU time (at least 1.0x onnxruntime int8 for every row, 1.0x OpenVINO "
              "for the NNCF rows): " + (", ".join(misses(rows)) or "none") + ".", ""]
    if data["profiles"]:
        lines += ["## Where the time goes", "",
                  "Rows slower than onnxruntime int8 by CPU time, or not exact (`zoo.where_the_time_goes`): CPU ms "
                  "per inference by operator (TVM's function names without their numbers) next to onnxruntime's "
                  "own profile, scaled to its unprofiled CPU time. docs/measurements.md says why.", "",
                  *bench_zoo.profile_lines(data["profiles"])]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("/tmp/ort49"))
    ap.add_argument("--models", default=",".join(options()))
    ap.add_argument("--target", choices=("host", "neon"), default="host",
                    help="neon: compile for AArch64, run under qemu, compare with the stated reference on Arm")
    ap.add_argument("--mcpu", default="cortex-a53", help="the Arm core of --target neon")
    ap.add_argument("--bench", action="store_true", help="time the set too; write quantizers_<uarch>.{json,md}")
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--benchmarks", type=Path, default=ROOT / "benchmarks", help="where --bench writes")
    ap.add_argument("--recompile", action="store_true", help="compile even where --out holds a library")
    ap.add_argument("--no-openvino", action="store_true")
    ap.add_argument("--no-profile", action="store_true")
    ap.add_argument("--update", action="store_true", help="--bench: keep the rows of the models not re-run here")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    logging.getLogger("root").setLevel(logging.ERROR)
    names = args.models.split(",")
    if args.bench:
        if args.target != "host":
            ap.error("--bench times the host build only; --target neon checks exactness")
        return bench(args, names)
    for name in names:
        start = time.time()
        if args.target == "host":
            d = compare(build(args.out, name))
            print(f"{name}: {d['differing']} of {d['values']} outputs differ, max {d['max_abs_diff']:.3g} "
                  f"({time.time() - start:.0f} s)", flush=True)
            continue
        try:
            d = compare_arm(build(args.out, name), args.mcpu)
        except Exception as e:                      # a refusal or a failure: the row says which, the rest run
            print(f"{name} on {args.mcpu}: fails: {type(e).__name__}: {e}", flush=True)
            continue
        print(f"{name} on {args.mcpu}: " + ", ".join(
            f"from {ref} {d[ref]['differing']} of {d[ref]['values']} outputs differ, max {d[ref]['max_abs_diff']:.3g}"
            for ref in ("stated", "x86")) + f" ({time.time() - start:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
