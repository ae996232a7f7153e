#!/usr/bin/env python3
"""The digits models of issue 16: a small CNN on scikit-learn's digits trained in float, then
quantization-aware trained with Brevitas at W8A8, W3A3, W2A2 and W1A1, exported, and scored by the
reference executors:

    python scripts/train_digits_lowbit.py --models DIR --json FILE     # DIR/digits_*.onnx, FILE: their top-1

Both are named on every run, so that a rerun never replaces the committed test fixtures unasked:
``--models tests/data/lowbit --json benchmarks/lowbit_accuracy.json`` refreshes them (then
``scripts/bench_digits.py`` times them); another folder checks whether this machine trains the same files.

Needs the ``lowbit`` extra (torch, brevitas, onnxoptimizer) and the ``test`` one (scikit-learn, qonnx).
Seeded and single-threaded: the same files on every run on one machine (about 2 minutes).

The network (8x8 grey images, x / 16 in [0, 1]): conv 3x3 1->16, conv 3x3/2 16->32, conv 3x3/2 32->32,
fully connected 128->10, ReLU after each conv. Quantized, as is common, the first and last layers
keep 8-bit weights; the image is 8-bit unsigned, the logits 8-bit signed, and every activation
between them (the outputs of the three convs) and the weights of conv2 and conv3 have the
configuration's widths. Biases are int32 in the accumulator's scale (``Int32Bias``).
Weights: Brevitas' default quantizer (``Int8WeightPerTensorFloat`` at the configuration's width:
signed, narrow range, so W2 is {-1, 0, 1}; one scale per layer from max |w|); W1: bipolar ±1 times a
per-layer constant (the float layer's mean |w|). Activations: unsigned, one scale per tensor
(``Uint8ActPerTensorFloat`` at the width), initialized from the 99.999th percentile over the first
300 training steps, then learned.
Per-channel weight scales (``Int8WeightPerChannelFloat``) gave W2A2 97.2% here, no better.

Exports (``keep_initializers_as_inputs=False``, batch of ``BATCH`` images):

* ``*_qcdq.onnx`` (W8A8, W3A3, W2A2): ``export_onnx_qcdq``, QuantizeLinear -> Clip -> DequantizeLinear,
  weights as int8 constants under a Clip; reference executor onnxruntime;
* ``*_qonnx.onnx`` (W2A2, W1A1): ``export_qonnx``, Quant / BipolarQuant nodes; reference executor
  qonnx's ``execute_onnx``. Brevitas 0.13.4 cannot export W1A1 as QCDQ (its QCDQ handlers assert
  ``bit_width > 1``), and its QONNX handler writes every 1-bit quantizer as BipolarQuant, signed or
  not: the unsigned 1-bit activations are written back as ``Quant(bits=1, signed=0)`` here
  (``unsigned_binary_activations``), which is what the torch model computes;
* ``digits_fp32.onnx``: the float network (``torch.onnx.export``); reference executor onnxruntime.

Every export is checked against the torch model it came from: the reference executor's predictions
must be Brevitas' own on at least 99% of the test images (the float rounding between DQ and Q may
move a logit by one step), or the script fails.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

ROOT = Path(__file__).resolve().parent.parent
BATCH = 64                          # images per model call; the test set is padded to whole batches
TRAIN_IMAGES = 1400                 # of 1797; the rest (397) is the test set
SPLIT_SEED = 1                      # the permutation tests/test_qnn_accuracy.py splits by
QONNX_DOMAIN = "qonnx.custom_op.general"


@dataclass(frozen=True)
class Config:
    name: str
    wbits: int                      # weights of conv2 and conv3 (1: bipolar)
    abits: int                      # activations between the first and the last layer
    forms: tuple[str, ...]          # exports: "qcdq", "qonnx"


CONFIGS = (Config("W8A8", 8, 8, ("qcdq",)), Config("W3A3", 3, 3, ("qcdq",)),
           Config("W2A2", 2, 2, ("qcdq", "qonnx")), Config("W1A1", 1, 1, ("qonnx",)))


@dataclass(frozen=True)
class Schedule:
    float_epochs: int = 40
    float_lr: float = 3e-3
    qat_epochs: int = 40
    qat_lr: float = 2e-3
    batch: int = 32
    seed: int = 0


def load_digits():
    """(x_train, y_train, x_test, y_test): [N, 1, 8, 8] float32 in [0, 1], int64 labels."""
    from sklearn.datasets import load_digits as sk_load
    digits = sk_load()
    x = (digits.images / 16.0).astype(np.float32)[:, None]
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(SPLIT_SEED).permutation(len(x))
    train, test = order[:TRAIN_IMAGES], order[TRAIN_IMAGES:]
    return x[train], y[train], x[test], y[test]


def float_net():
    import torch.nn as nn

    class FloatNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
            self.conv2 = nn.Conv2d(16, 32, 3, stride=2, padding=1)
            self.conv3 = nn.Conv2d(32, 32, 3, stride=2, padding=1)
            self.fc = nn.Linear(128, 10)

        def forward(self, x):
            x = self.conv1(x).relu()
            x = self.conv2(x).relu()
            x = self.conv3(x).relu()
            return self.fc(x.flatten(1))

    return FloatNet()


def quant_net(config: Config, float_model):
    """The Brevitas network of ``config``, its weights and biases taken from ``float_model``."""
    import torch
    import torch.nn as nn
    import brevitas.nn as qnn
    from brevitas.quant import (Int8ActPerTensorFloat, Int8WeightPerTensorFloat, Int32Bias,
                                SignedBinaryWeightPerTensorConst, Uint8ActPerTensorFloat)

    def weights(bits: int, layer):
        if bits == 1:
            scale = float(layer.weight.detach().abs().mean())
            return dict(weight_quant=SignedBinaryWeightPerTensorConst.let(scaling_const=scale))
        return dict(weight_quant=Int8WeightPerTensorFloat, weight_bit_width=bits)

    def conv(cin, cout, stride, bits, layer):
        return qnn.QuantConv2d(cin, cout, 3, stride=stride, padding=1, bias_quant=Int32Bias,
                               return_quant_tensor=True, **weights(bits, layer))

    def relu(bits):
        return qnn.QuantReLU(act_quant=Uint8ActPerTensorFloat, bit_width=bits, return_quant_tensor=True)

    f = float_model

    class QuantNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.inp = qnn.QuantIdentity(act_quant=Uint8ActPerTensorFloat, bit_width=8, return_quant_tensor=True)
            self.conv1 = conv(1, 16, 1, 8, f.conv1)
            self.act1 = relu(config.abits)
            self.conv2 = conv(16, 32, 2, config.wbits, f.conv2)
            self.act2 = relu(config.abits)
            self.conv3 = conv(32, 32, 2, config.wbits, f.conv3)
            self.act3 = relu(config.abits)
            self.fc = qnn.QuantLinear(128, 10, bias_quant=Int32Bias, return_quant_tensor=True,
                                      **weights(8, f.fc))
            self.out = qnn.QuantIdentity(act_quant=Int8ActPerTensorFloat, bit_width=8)

        def forward(self, x):
            x = self.act1(self.conv1(self.inp(x)))
            x = self.act2(self.conv2(x))
            x = self.act3(self.conv3(x))
            return self.out(self.fc(x.flatten(1)))

    model = QuantNet()
    with torch.no_grad():
        for name in ("conv1", "conv2", "conv3", "fc"):
            getattr(model, name).weight.copy_(getattr(f, name).weight)
            getattr(model, name).bias.copy_(getattr(f, name).bias)
    return model


def train(model, x, y, epochs: int, lr: float, schedule: Schedule, seed: int):
    """Adam on cross-entropy, cosine learning rate, minibatches in a seeded order."""
    import torch
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    steps_per_epoch = len(x) // schedule.batch
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, epochs * steps_per_epoch)
    model.train()
    for _ in range(epochs):
        for batch in np.array_split(rng.permutation(len(x)), steps_per_epoch):
            idx = torch.from_numpy(batch)
            loss = torch.nn.functional.cross_entropy(model(xt[idx]), yt[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
    model.eval()
    return model


def torch_predictions(model, x) -> np.ndarray:
    import torch
    with torch.no_grad():
        return model(torch.from_numpy(x)).argmax(1).numpy()


def batches(x: np.ndarray):
    """``x`` in whole batches of BATCH images (the last one padded with zero images)."""
    pad = -len(x) % BATCH
    x = np.concatenate([x, np.zeros((pad, *x.shape[1:]), x.dtype)])
    return [x[i:i + BATCH] for i in range(0, len(x), BATCH)]


def export(model, form: str, path: Path) -> None:
    import torch
    from brevitas.export import export_onnx_qcdq, export_qonnx
    example = torch.zeros(BATCH, 1, 8, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if form == "fp32":
            torch.onnx.export(model, example, str(path), input_names=["input"], output_names=["logits"],
                              opset_version=13, dynamo=False)
        elif form == "qcdq":
            export_onnx_qcdq(model, example, export_path=str(path), dynamo=False, opset_version=13,
                             keep_initializers_as_inputs=False, input_names=["input"], output_names=["logits"])
        else:
            export_qonnx(model, example, export_path=str(path), dynamo=False, keep_initializers_as_inputs=False,
                         input_names=["input"], output_names=["logits"])
            unsigned_binary_activations(path)


def unsigned_binary_activations(path: Path) -> int:
    """Brevitas writes every 1-bit quantizer as BipolarQuant (±scale); on an activation (a tensor that
    is not a constant) ours are unsigned, {0, scale}: rewrite those as QONNX ``Quant`` with 1 bit,
    unsigned. Returns how many nodes were rewritten."""
    model = onnx.load(str(path))
    constants = {i.name for i in model.graph.initializer}
    constants |= {o for n in model.graph.node if n.op_type == "Constant" for o in n.output}
    count = 0
    for i, node in enumerate(model.graph.node):
        if node.op_type != "BipolarQuant" or node.input[0] in constants:
            continue
        zero, bits = f"{node.name}_zero_point", f"{node.name}_bit_width"
        model.graph.initializer.extend([numpy_helper.from_array(np.array(0, np.float32), zero),
                                        numpy_helper.from_array(np.array(1, np.float32), bits)])
        quant = helper.make_node("Quant", [node.input[0], node.input[1], zero, bits], list(node.output),
                                 name=node.name, domain=QONNX_DOMAIN, signed=0, narrow=0, rounding_mode="ROUND")
        model.graph.node.remove(node)
        model.graph.node.insert(i, quant)
        count += 1
    if count:
        onnx.save(model, str(path))
    return count


def reference_outputs(path: Path, form: str, x: np.ndarray) -> np.ndarray:
    """The logits of the model at ``path`` on ``x`` by its reference executor (onnxruntime; qonnx's
    ``execute_onnx`` for QONNX), run on whole batches."""
    outputs = []
    if form == "qonnx":
        from qonnx.core.modelwrapper import ModelWrapper
        from qonnx.core.onnx_exec import execute_onnx
        from qonnx.transformation.infer_shapes import InferShapes
        wrapper = ModelWrapper(str(path)).transform(InferShapes())     # the executor needs every shape
        name_in, name_out = wrapper.graph.input[0].name, wrapper.graph.output[0].name
        for xb in batches(x):
            outputs.append(execute_onnx(wrapper, {name_in: xb})[name_out])
    else:
        from tvm_integration.bench.models import reference_session
        session = reference_session(path)    # exact: the default saturates vpmaddubsw without VNNI
        for xb in batches(x):
            outputs.append(session.run(None, {session.get_inputs()[0].name: xb})[0])
    return np.concatenate(outputs)[:len(x)]


def reference_predictions(path: Path, form: str, x: np.ndarray) -> np.ndarray:
    """Top-1 of the model at ``path`` on ``x`` by its reference executor."""
    return reference_outputs(path, form, x).argmax(1)


def shown(path: Path) -> str:
    """``path`` relative to the repository when it is inside it."""
    return str(path.resolve().relative_to(ROOT)) if path.resolve().is_relative_to(ROOT) else str(path)


def reference_name(form: str) -> str:
    return "qonnx execute_onnx" if form == "qonnx" else "onnxruntime"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=Path, required=True,
                    help="where the exports go (tests/data/lowbit: the committed fixtures)")
    ap.add_argument("--json", type=Path, required=True,
                    help="where their top-1 goes (benchmarks/lowbit_accuracy.json: the committed figures)")
    ap.add_argument("--qat-epochs", type=int, default=Schedule.qat_epochs)
    ap.add_argument("--qat-lr", type=float, default=Schedule.qat_lr)
    ap.add_argument("--configs", default=",".join(c.name for c in CONFIGS))
    a = ap.parse_args()
    from tvm_integration.bench import provenance
    record = provenance.record(1)                       # torch.set_num_threads(1)
    import torch
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    logging.disable(logging.WARNING)                     # the exporters' advice
    warnings.filterwarnings("ignore")
    schedule = Schedule(qat_epochs=a.qat_epochs, qat_lr=a.qat_lr)
    a.models.mkdir(parents=True, exist_ok=True)
    x_train, y_train, x_test, y_test = load_digits()
    start = time.time()

    torch.manual_seed(schedule.seed)
    fp32 = train(float_net(), x_train, y_train, schedule.float_epochs, schedule.float_lr, schedule, schedule.seed)
    path = a.models / "digits_fp32.onnx"
    export(fp32, "fp32", path)
    predicted = reference_predictions(path, "fp32", x_test)
    rows = [dict(config="fp32", top1=float(np.mean(predicted == y_test)), reference="onnxruntime",
                 model=shown(path), torch_top1=float(np.mean(torch_predictions(fp32, x_test) == y_test)))]
    exports = []
    print(f"fp32: top-1 {rows[0]['top1']:.4f} ({time.time() - start:.0f} s)", flush=True)

    for config in (c for c in CONFIGS if c.name in a.configs.split(",")):
        torch.manual_seed(schedule.seed)
        model = train(quant_net(config, fp32), x_train, y_train, schedule.qat_epochs, schedule.qat_lr, schedule,
                      schedule.seed)
        ours = torch_predictions(model, x_test)
        for form in config.forms:
            path = a.models / f"digits_{config.name.lower()}_{form}.onnx"
            export(model, form, path)
            predicted = reference_predictions(path, form, x_test)
            exports.append(dict(config=config.name, form=form, model=shown(path),
                                reference=reference_name(form), top1=float(np.mean(predicted == y_test)),
                                agreement_with_brevitas=float(np.mean(predicted == ours)),
                                bytes=path.stat().st_size))
            print(f"{config.name} {form}: top-1 {exports[-1]['top1']:.4f} (brevitas {np.mean(ours == y_test):.4f}, "
                  f"agreement {exports[-1]['agreement_with_brevitas']:.4f}; {time.time() - start:.0f} s)", flush=True)
        first = next(e for e in exports if e["config"] == config.name)
        rows.append(dict(config=config.name, top1=first["top1"], reference=first["reference"], model=first["model"],
                         torch_top1=float(np.mean(ours == y_test))))

    result = dict(run=provenance.finished(record),
                  data=f"sklearn load_digits: {len(x_train)} train / {len(x_test)} test images "
                       f"(permutation seed {SPLIT_SEED}), x / 16",
                  batch=BATCH, schedule=schedule.__dict__, versions=versions(), rows=rows, exports=exports)
    a.json.write_text(json.dumps(result, indent=2) + "\n")
    print(a.json)
    failed = [e for e in exports if e["agreement_with_brevitas"] < 0.99]
    if failed:
        print(f"exports that disagree with their Brevitas model: {failed}", file=sys.stderr)
        return 1
    return 0


def versions() -> dict:
    from importlib.metadata import version
    return {name: version(name) for name in ("torch", "brevitas", "onnx", "onnxruntime", "qonnx", "scikit-learn")}


if __name__ == "__main__":
    sys.exit(main())
