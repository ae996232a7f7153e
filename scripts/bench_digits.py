#!/usr/bin/env python3
"""The digits models of issue 16 (scripts/train_digits_lowbit.py) through qsynth: each exported model's
top-1 by its reference executor (onnxruntime; qonnx's executor for QONNX), measured again on the file
as committed (``top1``, so that the figure carries this run's record), then the model compiled by
``tvm_integration.compile_model``, run on every test image, its top-1, its predictions' agreement with
the reference executor's and its largest |logit| difference from them, and its latency next to
onnxruntime's on the same model (none for QONNX: onnxruntime does not run Quant / BipolarQuant). Fills
``top1``, ``ms`` / ``images_per_s`` of
benchmarks/lowbit_accuracy.json's rows (qsynth's; onnxruntime's for fp32, which qsynth does not
compile), which ``qsynth report`` draws as the accuracy/throughput Pareto plot:

    python scripts/bench_digits.py [--trials 50] [--threads 1] [--json benchmarks/lowbit_accuracy.json]

Times: median ms per call on one batch of BATCH test images (inputs already on the device for
qsynth, TVM's time evaluator; onnxruntime's ``run`` by wall clock, as tvm_integration/bench/models.py).
A model that fails to compile keeps its row without times and the reason in ``qsynth_error``.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tvm_integration.bench import provenance  # noqa: E402
from scripts.train_digits_lowbit import BATCH, batches, load_digits, reference_outputs  # noqa: E402


def onnxruntime_ms(path: Path, x: np.ndarray, threads: int, trials: int) -> float:
    from tvm_integration.bench.models import median_ms, onnxruntime_session
    session = onnxruntime_session(path, threads)
    feeds = {session.get_inputs()[0].name: x}
    return median_ms(lambda: session.run(None, feeds), trials)


def qsynth_run(path: Path, expected: np.ndarray, x: np.ndarray, y: np.ndarray, threads: int, trials: int) -> dict:
    """qsynth's top-1, agreement and exactness against the reference executor's logits ``expected``, and
    latency, on ``path``."""
    from tvm_integration.qnn.runtime.model import compile_model
    from tvm_integration.qnn.semantics.errors import ModelError
    start = time.perf_counter()
    try:
        model = compile_model(path, threads=threads)
    except (ModelError, RuntimeError, ValueError) as e:           # the importer's one-line refusals
        return {"qsynth_error": str(e).splitlines()[0]}
    compile_s = time.perf_counter() - start
    name_in, name_out = next(iter(model.inputs)), model.outputs[0]
    ours = np.concatenate([model({name_in: xb})[name_out] for xb in batches(x)])[:len(x)]
    ms = model.time({name_in: batches(x)[0]}, repeat=trials) * 1e3
    return {"qsynth_top1": float(np.mean(ours.argmax(1) == y)),
            "agreement": float(np.mean(ours.argmax(1) == expected.argmax(1))),
            "max_abs_diff": float(np.max(np.abs(ours.astype(np.float64) - expected))),
            "ms": ms, "images_per_s": BATCH * 1e3 / ms, "compile_s": round(compile_s, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, default=ROOT / "benchmarks" / "lowbit_accuracy.json")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--trials", type=int, default=50)
    a = ap.parse_args()
    os.environ["TVM_NUM_THREADS"] = str(a.threads)              # before TVM's pool starts
    logging.disable(logging.WARNING)
    record = provenance.record(a.threads)
    result = json.loads(a.json.read_text())
    _, _, x, y = load_digits()
    first = batches(x)[0]
    for export in result["exports"]:
        path = ROOT / export["model"]
        for key in ("qsynth_error", "qsynth_top1", "agreement", "max_abs_diff", "ms", "images_per_s", "compile_s"):
            export.pop(key, None)
        expected = reference_outputs(path, export["form"], x)
        export["top1"] = float(np.mean(expected.argmax(1) == y))
        export.update(qsynth_run(path, expected, x, y, a.threads, a.trials))
        if export["form"] == "qcdq":
            export["onnxruntime_ms"] = onnxruntime_ms(path, first, a.threads, a.trials)
        print(f"{export['config']} {export['form']}: " + ", ".join(
            f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in export.items()
            if k in ("qsynth_top1", "agreement", "max_abs_diff", "ms", "onnxruntime_ms", "qsynth_error")), flush=True)
    for row in result["rows"]:
        for key in ("ms", "images_per_s", "runtime", "qsynth_top1", "agreement", "onnxruntime_ms", "qsynth_error"):
            row.pop(key, None)
        if row["config"] == "fp32":
            ms = onnxruntime_ms(ROOT / row["model"], first, a.threads, a.trials)
            top1 = float(np.mean(reference_outputs(ROOT / row["model"], "fp32", x).argmax(1) == y))
            row.update(top1=top1, ms=ms, images_per_s=BATCH * 1e3 / ms, runtime="onnxruntime fp32")
            continue
        export = next(e for e in result["exports"] if e["model"] == row["model"])
        row["top1"] = export["top1"]
        if "qsynth_error" in export:
            row["qsynth_error"] = export["qsynth_error"]
            continue
        row.update(ms=export["ms"], images_per_s=export["images_per_s"], runtime="qsynth",
                   qsynth_top1=export["qsynth_top1"], agreement=export["agreement"])
        if "onnxruntime_ms" in export:
            row["onnxruntime_ms"] = export["onnxruntime_ms"]
    result["bench"] = {"run": provenance.finished(record), "batch": BATCH}
    a.json.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{a.json}: {provenance.described(result['bench']['run'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
