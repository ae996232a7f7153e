#!/usr/bin/env python3
"""The model zoo of issue 31: real architectures from their torchvision definitions with random weights
(never downloaded), exported by torch's ONNX exporter at 224x224, batch 1, and quantized by
``onnxruntime.quantization.quantize_static`` as a user would (QDQ, u8 activations, s8 per-channel
weights, a calibration set of random inputs). For each model it writes ``NAME.fp32.onnx`` (the float
original, one file) and ``NAME.int8.onnx`` into ``--out`` (default /tmp/zoo: the models are tens of MB
each, never commit them). scripts/bench_zoo.py benchmarks them.

Needs torch and torchvision (the ``lowbit`` extra pins torch==2.13.0; torchvision from PyPI) and
onnxruntime. PyPI's torchvision ``_C.so`` links CUDA libraries on a CPU-only machine; this script does
not need its operators, so its meta registrations (the only import that loads it) are stubbed.

    python scripts/make_zoo.py [--models resnet50,...] [--out /tmp/zoo] [--calibration 8] [--force]
"""
from __future__ import annotations

import argparse
import logging
import sys
import time
import types
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# name: torchvision constructor (every one called with weights=None: random weights, nothing downloaded)
MODELS = {"resnet50": "resnet50", "mobilenet_v3_large": "mobilenet_v3_large", "efficientnet_b0": "efficientnet_b0",
          "shufflenet_v2": "shufflenet_v2_x1_0", "densenet121": "densenet121", "regnet_y_400mf": "regnet_y_400mf",
          "googlenet": "googlenet", "squeezenet1_1": "squeezenet1_1", "convnext_tiny": "convnext_tiny"}
SIZE = 224


def torchvision_models():
    """torchvision.models, imported without its compiled operators (see the module's docstring)."""
    sys.modules.setdefault("torchvision._meta_registrations", types.ModuleType("torchvision._meta_registrations"))
    import torchvision
    return torchvision.models


def export_module(model, inputs: dict, outputs: list[str], path: Path) -> None:
    """The torch module ``model`` (in eval mode) exported by torch's exporter at opset 18 to ``path``
    (one file, no external data), its inputs named and fed as ``inputs`` (name -> example tensor),
    its outputs named ``outputs``."""
    import onnx
    import torch
    raw = path.with_suffix(".export.onnx")
    with torch.no_grad():
        torch.onnx.export(model, tuple(inputs.values()), str(raw), input_names=list(inputs),
                          output_names=outputs, opset_version=18)
    proto = onnx.load(str(raw))                  # the exporter may write the weights beside, as external data
    proto.ir_version = min(proto.ir_version, 10)
    onnx.save(proto, str(path))
    raw.unlink()
    Path(str(raw) + ".data").unlink(missing_ok=True)


def export(name: str, path: Path) -> None:
    """The float model ``name`` exported to ``path``, input ``input`` float32[1, 3, 224, 224], output
    ``output``."""
    import torch
    torch.manual_seed(0)
    ctor = getattr(torchvision_models(), MODELS[name])
    extra = {"aux_logits": False, "init_weights": True} if name == "googlenet" else {}
    model = ctor(weights=None, **extra).eval()
    export_module(model, {"input": torch.randn(1, 3, SIZE, SIZE)}, ["output"], path)


def quantize(fp32: Path, path: Path, data: list[dict[str, np.ndarray]]) -> None:
    """``fp32`` quantized by quantize_static to ``path``: QDQ, u8 activations, s8 per-channel weights,
    calibrated on ``data`` (a list of feeds)."""
    import onnx

    from tvm_integration.bench import int8_models
    int8_models.quantize(onnx.load(str(fp32)), path, data=data)


def normal_inputs(shape: tuple[int, ...], count: int) -> list[dict[str, np.ndarray]]:
    """``count`` feeds of one standard normal input ``input`` of ``shape`` (seed 0)."""
    rng = np.random.default_rng(0)
    return [{"input": rng.standard_normal(shape).astype(np.float32)} for _ in range(count)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--out", type=Path, default=Path("/tmp/zoo"))
    ap.add_argument("--calibration", type=int, default=8, help="random calibration inputs")
    ap.add_argument("--force", action="store_true", help="rebuild models already in --out")
    a = ap.parse_args()
    names = a.models.split(",")
    unknown = sorted(set(names) - set(MODELS))
    if unknown:
        ap.error(f"unknown models {unknown}; known: {', '.join(MODELS)}")
    a.out.mkdir(parents=True, exist_ok=True)
    logging.getLogger("root").setLevel(logging.ERROR)      # quantize_static's pre-processing advice
    for name in names:
        fp32, int8 = a.out / f"{name}.fp32.onnx", a.out / f"{name}.int8.onnx"
        if int8.exists() and fp32.exists() and not a.force:
            print(f"{name}: already in {a.out}", flush=True)
            continue
        start = time.perf_counter()
        export(name, fp32)
        quantize(fp32, int8, normal_inputs((1, 3, SIZE, SIZE), a.calibration))
        print(f"{name}: {int8} ({int8.stat().st_size / 1e6:.1f} MB) and {fp32.name}, "
              f"{time.perf_counter() - start:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
