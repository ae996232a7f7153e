#!/usr/bin/env python3
"""Issue 45's split route, measured before it is built: ResNet-18's 3x3 layers on the exact w16 tile
against the saturating ``vpmaddubsw`` row run on weights split into a part whose pairs cannot saturate
(B_safe) plus a sparse rest (B_fix) added by the operators' existing correction (packing.correction).

For each pair of adjacent K bytes (k even, k + 1) of a weight column, ``vpmaddubsw`` is exact on every
u8 activation when the positive weights sum to at most 128 and the negative ones to at least -128
(255 * 128 fits int16). ``pair_safe`` moves each unsafe pair's excess out of its larger element (one
nonzero of B_fix per unsafe pair). The row is the program a tile proved under that pair bound would
run (``vpmaddubsw``, ``vpmaddwd`` by ones, ``vpaddd``): the u7s8 5x16x4 tile's, which this script
synthesizes with ``qsynth synth`` into a scratch copy of the kernel cache (u7s8 is proved for A < 128
and is no tile an operator takes; on B_safe its instructions are exact for every u8 A, which the
``exact`` columns check against the w16 output on inputs 30% of which are 255). Columns, CPU ms per
call, medians of ``--trials`` interleaved rounds, one thread: ``w16`` (5x16x2, ResNet-18's tuned tile);
``row`` the vpmaddubsw row on B_safe alone (not exact: the speed the split could at best reach);
``row+fix`` with B_fix through ``packing.correction`` (what the operators do for s8s7's clamped
weights); ``w16+fix`` the same correction on w16 (its cost alone). Writes
``<out>/pair_split_<uarch>.{json,md}``.

    python scripts/bench_pair_split.py [--trials 15] [--out benchmarks]
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

ROW_TILE = ("u7s8", 5, 16, 4)
W16_TILE = "int8_w16_k4b_5x16x2_avx2"


def pair_safe(w: np.ndarray) -> np.ndarray:
    """``w[g, n, k]`` (int8) -> B_safe: in each (even, odd) k pair whose positive weights sum past 128 (or
    negative ones below -128) the larger (smaller) element gives up the excess; it keeps its sign."""
    g, n, k = w.shape
    p = np.pad(w.astype(np.int32), ((0, 0), (0, 0), (0, k % 2))).reshape(g, n, -1, 2)
    over = np.clip(p, 0, None).sum(3) - 128
    under = np.clip(p, None, 0).sum(3) + 128
    safe = p.copy()
    for mask, which, excess in ((over > 0, np.argmax(p, axis=3), over), (under < 0, np.argmin(p, axis=3), under)):
        gi, ni, ki = np.nonzero(mask)
        safe[gi, ni, ki, which[mask]] -= excess[mask]
    return safe.reshape(g, n, -1)[:, :, :k].astype(np.int8)


def split_correction(w: np.ndarray, n_padded: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """B_safe and B_fix = w - B_safe as ``packing.clamped``'s sparse correction (``fix_index``, ``fix_amount``)."""
    safe = pair_safe(w)
    rest = w.astype(np.int32) - safe
    counts = (rest != 0).sum(axis=2)
    g, _, _ = w.shape
    index = np.zeros((g, n_padded, max(1, int(counts.max()))), np.int32)
    amount = np.zeros_like(index)
    for gi, ni in zip(*np.nonzero(counts)):
        ks = np.flatnonzero(rest[gi, ni])
        index[gi, ni, :len(ks)], amount[gi, ni, :len(ks)] = ks, rest[gi, ni, ks]
    return safe, {"fix_index": index, "fix_amount": amount}


def block_share(w: np.ndarray, columns: int) -> float:
    """The share of (k pair, ``columns`` output columns) blocks holding an unsafe pair: what a correction
    vectorised over such blocks would run."""
    o = w.shape[0]
    p = w.transpose(0, 2, 3, 1).reshape(o, -1, 2).astype(np.int32)
    bad = (np.clip(p, 0, None).sum(2) > 128) | (np.clip(p, None, 0).sum(2) < -128)
    return float(bad[:o // columns * columns].reshape(o // columns, columns, -1).any(1).mean())


def worker(model: Path, trials: int) -> None:
    os.environ["TVM_NUM_THREADS"] = "1"
    from tvm_integration.bench import tuned_shapes
    from tvm_integration.bench.timing import batch_timer
    from tvm_integration.kernels import int8, packing
    from tvm_integration.ops import direct, gemm
    from tvm_integration.ops.conv2d import build_conv2d
    from tvm_integration.ops.output_stage import OutputStage, ScaleRequantize

    kernels = {k.spec.name: k for k in int8.proved_kernels("avx2")}
    w16, row = kernels[W16_TILE], kernels["int8_{}_k4b_{}x{}x{}_avx2".format(*ROW_TILE)]
    clamped = packing.clamped
    configs = (("w16", w16, clamped), ("row", row, lambda w, lo, hi, npad: (pair_safe(w), {})),
               ("row+fix", row, lambda w, lo, hi, npad: split_correction(w, npad)),
               ("w16+fix", w16, lambda w, lo, hi, npad: split_correction(w, npad)))
    seen = set()
    for kind, args in tuned_shapes.shapes(model):
        weight, shape, stride, padding, groups, dtype = args if kind == "conv2d" else (args[0], None, None, 0, 1, "")
        key = (weight.shape, shape, stride)
        if kind != "conv2d" or weight.shape[2:] != (3, 3) or key in seen:
            continue
        seen.add(key)
        rng = np.random.default_rng(1)
        cols = weight.shape[0]
        stage = OutputStage(bias=rng.integers(-1000, 1000, cols).astype(np.int32),
                            requantize=ScaleRequantize((rng.random(cols) * 1e-3).astype(np.float32), 128, "uint8"))
        ops = []
        for _, kernel, split in configs:     # the operators' weight split, replaced for this build
            direct.clamped = gemm.clamped = split
            ops.append(build_conv2d(weight, shape, "NHWC", stride, padding, groups, dtype, stage, kernel=kernel).compile())
        direct.clamped = gemm.clamped = clamped
        data = np.random.default_rng(0)
        x = data.integers(0, 256, ops[0].in_shape).astype(np.uint8)
        x[data.random(x.shape) < 0.3] = 255
        outs = [op(x) for op in ops]
        timers = [batch_timer(functools.partial(op.module["main"], *op.args(x)), clock=time.thread_time) for op in ops]
        ms = np.median(np.array([[t() for t in timers] for _ in range(trials)]), axis=0) * 1e3
        matrix = weight.transpose(0, 2, 3, 1).reshape(1, cols, -1)
        fixes = int((pair_safe(matrix) != matrix).sum())
        print(json.dumps({"weight": list(weight.shape), "input": list(shape), "stride": stride[0],
                          "macs": int(np.prod(outs[0].shape)) * int(np.prod(weight.shape[1:])),
                          "fixes": fixes, "fix_share": fixes / weight.size,
                          "blocks8": block_share(weight, 8), "blocks16": block_share(weight, 16),
                          "ms": {name: float(m) for (name, _, _), m in zip(configs, ms)},
                          "exact": {name: bool(np.array_equal(o, outs[0])) for (name, _, _), o in zip(configs, outs)}}),
              flush=True)


def markdown(rows: list[dict], run: dict) -> str:
    from tvm_integration.bench import provenance
    lines = ["# The split route on AVX2: vpmaddubsw on pair-safe weights + a sparse correction", "",
             "Written by scripts/bench_pair_split.py (its docstring says what each column is). CPU ms per call, "
             "one thread; x: / w16.", "", f"Run: {provenance.line(run)}", "",
             "| layer | fixes (% of weights) | (k pair, 8 cols) blocks with a fix | w16 ms | row ms (x) | row+fix ms (x) "
             "| w16+fix ms (x) | row+fix exact |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ms, base = r["ms"], r["ms"]["w16"]
        lines.append(f"| {r['weight']} at {r['input'][1]}x{r['input'][2]} s{r['stride']} | {r['fixes']} "
                     f"({100 * r['fix_share']:.2f}%) | {100 * r['blocks8']:.1f}% | {base:.3f} | "
                     + " | ".join(f"{ms[k]:.3f} ({ms[k] / base:.2f})" for k in ("row", "row+fix", "w16+fix"))
                     + f" | {r['exact']['row+fix']} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=15)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks")
    ap.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        worker(a.worker, a.trials)
        return 0
    from isa_specs import host
    from synth.files import write_atomically
    from tvm_integration.bench import int8_models, provenance
    run = provenance.record(1)
    with tempfile.TemporaryDirectory() as tmp:
        model = int8_models.write_pair("resnet18", Path(tmp))[0]
        cache = Path(tmp) / "kernel_cache"
        shutil.copytree(ROOT / "kernel_cache", cache)
        env = dict(os.environ, QSYNTH_CACHE=str(cache), PYTHONPATH=str(ROOT))
        types, mr, nr, k = ROW_TILE
        synth = [sys.executable, "-c", "import sys; from qsynth.cli import main; sys.exit(main())", "synth", "--isa",
                 "avx2", "--kernel", "int8", "--types", types, "--mr", str(mr), "--nr", str(nr), "--k", str(k)]
        subprocess.run(synth, env=env, check=True, capture_output=True)
        proc = subprocess.run([sys.executable, __file__, "--worker", str(model), "--trials", str(a.trials)], env=env,
                              capture_output=True, text=True)
    if proc.returncode:
        print(proc.stderr[-3000:], file=sys.stderr)
        return 1
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    run = provenance.finished(run)
    a.out.mkdir(parents=True, exist_ok=True)
    name = f"pair_split_{host.model().uarch}"
    write_atomically(a.out / f"{name}.json", json.dumps({"run": run, "rows": rows}, indent=1) + "\n")
    write_atomically(a.out / f"{name}.md", markdown(rows, run))
    print(markdown(rows, run))
    return 0 if all(r["exact"]["row+fix"] and r["exact"]["w16+fix"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
