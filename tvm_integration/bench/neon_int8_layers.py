"""ResNet-18's conv layers on the NEON int8 conv2d (ops/neon_gemm.py), costed with llvm-mca on an Arm
core model next to the plain-TIR schedule built for the same core (mca.py's method: run once under
qemu, checked against numpy, every block that ran costed by llvm-mca times its runs).

*K loop*: the blocks holding a vector multiply (umull, uadalp, sdot, sudot, smull, smlal, mul, mla on
vector registers): the GEMM's K loop in either build; *operator*: every block (padding, packing, K
loop, output stage). The layer's tensors are bench/layers.py's recipe (random, fixed seed, bias and a
per-channel float requantize to u8), plus the 7x7 stride-2 stem (C1) on a 3-channel 224x224 input.
"""
from __future__ import annotations

import re

import numpy as np

from tvm_integration.bench import mca
from tvm_integration.bench.layers import LAYERS
from tvm_integration.kernels import neon_int8
from tvm_integration.ops import neon_gemm as ops
from tvm_integration.ops.output_stage import OutputStage, ScaleRequantize

# name: (H=W, IC, OC, kernel, stride); padding kernel // 2
NEON_LAYERS = {"C1": (224, 3, 64, 7, 2), **LAYERS}
_MULTIPLY = re.compile(r"^(umull2?|smull2?|umlal2?|smlal2?|uadalp|sadalp|sdot|udot|sudot|usdot|mul|mla)\s+v\d")


def layer_tensors(name: str):
    """(x NHWC u8, w OIHW s8, stage, stride, padding, the numpy reference output)."""
    hw, ic, oc, k, s = NEON_LAYERS[name]
    pad = k // 2
    rng = np.random.default_rng(18)
    x = rng.integers(0, 256, (1, hw, hw, ic)).astype(np.uint8)
    w = rng.integers(-128, 128, (oc, ic, k, k)).astype(np.int8)
    bias = rng.integers(-20000, 20000, oc).astype(np.int32)
    scale = (rng.uniform(0.5, 2.0, oc) / (128 * 128 * np.sqrt(ic * k * k))).astype(np.float32)
    stage = OutputStage(bias=bias, requantize=ScaleRequantize(scale, 128, "uint8"))
    xp = np.pad(x.astype(np.int64), ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    n = (hw + 2 * pad - k) // s + 1
    acc = np.zeros((1, n, n, oc), np.int64)
    for i in range(k):
        for j in range(k):
            acc += xp[:, i:i + s * n:s, j:j + s * n:s, :] @ w[:, :, i, j].astype(np.int64).T
    acc = acc.astype(np.int32) + bias
    expected = np.clip(np.rint(acc.astype(np.float32) * scale) + 128, 0, 255).astype(np.uint8)
    return x, w, stage, s, pad, expected


def is_multiply(instruction: str) -> bool:
    return bool(_MULTIPLY.match(instruction))


def costed(op, x, core: str) -> dict:
    """llvm-mca cycles on ``core`` of the whole operator and of its vector-multiply blocks."""
    blocks = mca.profile(op, x)
    cycles = mca.block_cycles(blocks, core)
    return {"operator": sum(b.runs * c for b, c in zip(blocks, cycles)),
            "k_loop": sum(b.runs * c for b, c in zip(blocks, cycles) if any(map(is_multiply, b.instructions)))}


def mca_layer(name: str, core: str) -> dict:
    """One layer on ``core``: our operator (the core's tile) and the plain-TIR one, each built for the
    core, checked against numpy and costed."""
    x, w, stage, stride, pad, expected = layer_tensors(name)
    row = {"layer": name, "core": core, "kernel": neon_int8.tile_for(core).intrin[len("qsynth_"):],
           "macs": int(np.prod(expected.shape) * np.prod(w.shape[1:]))}
    for label, use_kernel in (("ours", True), ("plain_tir", False)):
        op = ops.conv2d(w, x.shape, stride, pad, stage=stage, mcpu=core, use_kernel=use_kernel)
        row[f"{label}_correct"] = bool(np.array_equal(op(x), expected))
        row[label] = costed(op, x, core)
    row["ratio"] = {part: row["ours"][part] / row["plain_tir"][part] for part in ("operator", "k_loop")}
    return row
