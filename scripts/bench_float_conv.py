#!/usr/bin/env python3
"""ResNet-18's float Convs (the ones onnxruntime's x86 build leaves between a DequantizeLinear and a
QuantizeLinear in an S8S8 QDQ model, docs/measurements.md), one at a time: our
``float_conv.conv2d_func`` (on the float image, and with ``--dequantize`` on the int8 one it
dequantizes as it pads) next to onnxruntime's Conv of the same image and filters (the filters a graph
input, as a DequantizeLinear's output reaches it: MlasConv, not the NCHWc kernel a constant gets).
One thread each, CPU time (``time.process_time``), medians of ``--rounds`` rounds that run every
variant in turn, so that load on the shared machine lands on all of them; every output checked equal
to onnxruntime's, bit for bit. ``--rev`` adds float_conv.py as it was at a git revision (before/after
in one run). Prints a markdown table; ``--out`` writes the rows as JSON (not into benchmarks/).

    PYTHONPATH=. python3 scripts/bench_float_conv.py [--shapes l1_3x3,l4_3x3] [--rev 86c788b] [--dequantize] [--rounds 21]
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TVM_NUM_THREADS", "1")     # read when TVM's pool starts
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import tvm  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

from tvm_integration.bench.models import onnxruntime_session  # noqa: E402
from tvm_integration.bench.timing import batch_timer  # noqa: E402
from tvm_integration.qnn.float import float_conv  # noqa: E402
from tvm_integration.qnn.lower.bind import model_target  # noqa: E402

# name: (image, filters, strides, pads, how many the S8S8 model has); the stem is no float Conv there
SHAPES = {
    "stem_7x7s2": ((1, 3, 224, 224), (64, 3, 7, 7), (2, 2), (3, 3, 3, 3), 0),
    "l1_3x3": ((1, 64, 56, 56), (64, 64, 3, 3), (1, 1), (1, 1, 1, 1), 2),
    "l2_3x3s2": ((1, 64, 56, 56), (128, 64, 3, 3), (2, 2), (1, 1, 1, 1), 1),
    "l2_1x1s2": ((1, 64, 56, 56), (128, 64, 1, 1), (2, 2), (0, 0, 0, 0), 1),
    "l2_3x3": ((1, 128, 28, 28), (128, 128, 3, 3), (1, 1), (1, 1, 1, 1), 1),
    "l3_3x3s2": ((1, 128, 28, 28), (256, 128, 3, 3), (2, 2), (1, 1, 1, 1), 1),
    "l3_1x1s2": ((1, 128, 28, 28), (256, 128, 1, 1), (2, 2), (0, 0, 0, 0), 1),
    "l3_3x3": ((1, 256, 14, 14), (256, 256, 3, 3), (1, 1), (1, 1, 1, 1), 1),
    "l4_3x3s2": ((1, 256, 14, 14), (512, 256, 3, 3), (2, 2), (1, 1, 1, 1), 1),
    "l4_1x1s2": ((1, 256, 14, 14), (512, 256, 1, 1), (2, 2), (0, 0, 0, 0), 1),
    "l4_3x3": ((1, 512, 7, 7), (512, 512, 3, 3), (1, 1), (1, 1, 1, 1), 1),
}
SCALE, ZERO_POINT = 0.0371, -3                    # the int8 image's DequantizeLinear


def revision(rev: str):
    """float_conv.py as it was at git revision ``rev``, imported from a copy."""
    text = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:tvm_integration/qnn/float/float_conv.py"],
                          capture_output=True, text=True, check=True).stdout
    path = Path(tempfile.mkdtemp()) / "float_conv.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(f"float_conv_{rev}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def ours(module, x, w, strides, pads, dequantize: bool):
    """A run function of ``module``'s compiled conv of ``x`` and ``w``, and its output tensor."""
    func = module.conv2d_func(x.shape, w.shape, strides, pads, (SCALE, ZERO_POINT, "int8") if dequantize else None)
    lib = tvm.compile(tvm.IRModule({"main": func}), target=tvm.target.Target(model_target()))
    (pt, pl, pb, pr), (sh, sw) = pads, strides
    out = np.zeros((x.shape[0], w.shape[0], (x.shape[2] + pt + pb - w.shape[2]) // sh + 1,
                    (x.shape[3] + pl + pr - w.shape[3]) // sw + 1), np.float32)
    args = [tvm.runtime.tensor(a) for a in (x, w, out)]
    main = lib["main"]
    return lambda: main(*args), args[2]


def onnxruntime_conv(x, w, strides, pads):
    """A run function of onnxruntime's Conv of ``x`` and ``w`` (one thread), returning its output."""
    node = helper.make_node("Conv", ["x", "w"], ["y"], strides=list(strides), pads=list(pads))
    graph = helper.make_graph([node], "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape),
                                               helper.make_tensor_value_info("w", TensorProto.FLOAT, w.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    session = onnxruntime_session(model.SerializeToString(), 1)
    return lambda: session.run(None, {"x": x, "w": w})[0]


def bench_shape(name: str, versions: dict, dequantize: bool, rounds: int) -> dict:
    """CPU ms (medians) of onnxruntime and of each version (``_dq``: on the int8 image), and whether
    each output equals onnxruntime's."""
    x_shape, w_shape, strides, pads, count = SHAPES[name]
    rng = np.random.default_rng(0)
    xq = rng.integers(-128, 128, x_shape).astype(np.int8)
    x = (xq.astype(np.int32) - ZERO_POINT).astype(np.float32) * np.float32(SCALE)
    w = (rng.standard_normal(w_shape) * 0.05).astype(np.float32)
    reference = onnxruntime_conv(x, w, strides, pads)
    expected = reference()
    timers, exact = {"onnxruntime": batch_timer(reference, clock=time.process_time)}, {}
    for version, module in versions.items():
        for dq in (False, True)[:1 + dequantize]:
            key = version + "_dq" * dq
            run, out = ours(module, xq if dq else x, w, strides, pads, dq)
            run()
            exact[key] = bool(np.array_equal(out.numpy(), expected))
            timers[key] = batch_timer(run, clock=time.process_time)
    samples = {key: [] for key in timers}
    for _ in range(rounds):
        for key, timer in timers.items():
            samples[key].append(timer() * 1e3)
    return {"shape": name, "count": count, "exact": exact,
            "ms": {key: float(np.median(times)) for key, times in samples.items()}}


def markdown(rows: list[dict]) -> str:
    keys = list(rows[0]["ms"])
    lines = ["| shape | count | " + " | ".join(keys) + " | exact |", "|---|---|" + "---|" * len(keys) + "---|"]
    for r in rows:
        base = r["ms"]["onnxruntime"]
        cells = [f"{v:.3f}" + ("" if k == "onnxruntime" else f" ({base / v:.2f}x)") for k, v in r["ms"].items()]
        lines.append(f"| {r['shape']} | {r['count']} | " + " | ".join(cells) + f" | {all(r['exact'].values())} |")
    totals = {k: sum(r["ms"][k] * r["count"] for r in rows) for k in keys}
    lines.append("| total x count | | " + " | ".join(f"{v:.2f}" for v in totals.values()) + " | |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", default=",".join(s for s, v in SHAPES.items() if v[-1]))
    parser.add_argument("--rev", action="append", default=[], help="also float_conv.py at this git revision")
    parser.add_argument("--dequantize", action="store_true", help="also each version on the int8 image")
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--out", type=Path, help="the rows as JSON")
    args = parser.parse_args()
    versions = {"ours": float_conv, **{rev: revision(rev) for rev in args.rev}}
    rows = []
    for name in args.shapes.split(","):
        rows.append(bench_shape(name, versions, args.dequantize, args.rounds))
        print(name, {k: round(v, 3) for k, v in rows[-1]["ms"].items()}, rows[-1]["exact"], flush=True)
    print(f"\nload average {os.getloadavg()[0]:.1f}\n\n" + markdown(rows))
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
