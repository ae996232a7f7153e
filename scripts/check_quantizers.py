#!/usr/bin/env python3
"""Issue 49's check: a torchvision ResNet-18 (random weights, exported as scripts/make_zoo.py does)
quantized by each quantizer option users set, compiled with ``compile_model`` and compared with
onnxruntime's exact result (``reference_session``) on 3 standard-normal inputs (3000 logits); and a
4-layer BERT (scripts/bench_transformers.py's bert_l4_s128 float model, 3 x 98304 outputs) quantized by
NNCF with ``model_type=TRANSFORMER`` (SmoothQuant, float projections: ``nncf_bert_transformer``).

onnxruntime: ``quant_pre_process`` then ``quantize_static`` (8 standard-normal calibration inputs) with
each option of OPTIONS, or ``quantize_dynamic``; NNCF (``pip install nncf==3.4.0``, not a dependency):
``nncf.quantize`` on the ONNX backend, presets performance and mixed, and model_type transformer for the
BERT. The models are tens of MB each (written to --out, never commit them); an existing one is reused.

    python scripts/check_quantizers.py [--out /tmp/ort49] [--models s8s8_per_channel,nncf_bert_transformer,...]
"""
from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

import numpy as np

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
        "nncf_performance": "PERFORMANCE",
        "nncf_mixed": "MIXED",
        "nncf_bert_transformer": "TRANSFORMER",
    }


def build(out: Path, name: str) -> Path:
    """The quantized ResNet-18 (or BERT) of option ``name`` (made once)."""
    import make_zoo
    path = out / f"{name}.onnx"
    if path.exists():
        return path
    option = options()[name]
    if option == "TRANSFORMER":
        return build_bert(path)
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
    if option is None:
        q.quantize_dynamic(str(pre), str(path))
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


def compare(path: Path) -> tuple[int, int, float]:
    """(outputs that differ from reference_session, outputs compared, the largest difference) on 3
    standard-normal inputs."""
    from tvm_integration.bench.models import reference_session
    from tvm_integration.qnn.runtime.model import compile_model
    model, session = compile_model(path, threads=1), reference_session(path)
    rng = np.random.default_rng(1)
    count, total, largest = 0, 0, 0.0
    for _ in range(3):
        x = {name: rng.standard_normal(shape).astype(np.float32) for name, (shape, _) in model.inputs.items()}
        d = np.abs(model(x)[model.outputs[0]].astype(np.float64) - session.run(None, x)[0])
        count, total, largest = count + int(np.count_nonzero(d)), total + d.size, max(largest, float(d.max()))
    return count, total, largest


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("/tmp/ort49"))
    ap.add_argument("--models", default=",".join(options()))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    logging.getLogger("root").setLevel(logging.ERROR)
    for name in args.models.split(","):
        start = time.time()
        count, total, largest = compare(build(args.out, name))
        print(f"{name}: {count} of {total} outputs differ, max {largest:.3g} ({time.time() - start:.0f} s)",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
