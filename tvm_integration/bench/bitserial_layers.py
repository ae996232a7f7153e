"""One ResNet-18 layer (layers.py's C2-C12, batch 1, NHWC) on the bitserial conv2d, next to, in the
same run: the same schedule in plain TIR (``T.popcount``, the old topi shape), our int8 conv2d (its
tile in ``int8_kernel``: an s16 one where it runs by Winograd) and onnxruntime fp32 and int8 on the
layer. Medians of ``trials`` runs; our output checked against numpy from the unpacked values in the
same run. Used by ``qsynth bench-layer --config AxWy`` and
scripts/bench_bitserial_layers.py. Threads: TVM_NUM_THREADS (read when TVM's pool starts).

``mca_bitserial_layer``: the same layer on the NEON tile, built for an Arm core, checked against numpy
under qemu and costed with llvm-mca (mca.py) next to the plain-TIR schedule built for
the same core (scripts/mca_bitserial_layers.py)."""
from __future__ import annotations

import dataclasses
import re
import tempfile
from pathlib import Path

import numpy as np

from tvm_integration.bench import mca
from tvm_integration.bench.layers import LAYERS, Layer, onnxruntime_seconds
from tvm_integration.bench.timing import tvm_seconds
from tvm_integration.kernels import lowbit_choice, tuning
from tvm_integration.kernels.selection import aarch64_target, bitserial_kernel
from tvm_integration.ops.bitserial_conv2d import bitserial_conv2d, build_bitserial_conv2d
from tvm_integration.ops.bitserial_gemm import Config, tile_for
from tvm_integration.ops.conv2d import chosen_tiles


def parse_config(text: str, encoding: str) -> Config:
    """``A2W1`` and an encoding -> Config; ValueError naming what is accepted."""
    m = re.fullmatch(r"A(\d)W(\d)", text.upper())
    if not m:
        raise ValueError(f"--config must be int8 or AxWy with x, y in 1..3 (e.g. A1W1), got {text!r}")
    return Config(int(m[1]), int(m[2]), encoding)


def conv_reference(x: np.ndarray, w: np.ndarray, stride: int, pad: int) -> np.ndarray:
    """NHWC x, OIHW w: the integer convolution with zero padding, int64."""
    _, h, _, _ = x.shape
    o, _, kh, kw = w.shape
    xp = np.pad(x.astype(np.int64), ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    oh = (h + 2 * pad - kh) // stride + 1
    out = np.zeros((x.shape[0], oh, oh, o), np.int64)
    for i in range(kh):
        for j in range(kw):
            out += xp[:, i:i + stride * oh:stride, j:j + stride * oh:stride, :] @ w[:, :, i, j].astype(np.int64).T
    return out


def bench_bitserial_layer(name: str, config: Config, threads: int, trials: int, isa: str = "host",
                          onnx: dict[str, float] | None = None) -> dict:
    """One row; ``onnx``: onnxruntime's seconds for the layer when already measured in this run."""
    layer = Layer(name)
    w, x = layer_operands(layer, config)
    kernel = bitserial_kernel(isa, config.abits, config.wbits, config.encoding)
    ours = bitserial_conv2d(w, x.shape, config, layer.s, layer.pad, isa=isa)
    plain = bitserial_conv2d(w, x.shape, config, layer.s, layer.pad, isa=isa, use_kernel=False)     # same target
    correct = bool(np.array_equal(ours(x), conv_reference(x, w, layer.s, layer.pad)))
    t_ours = tvm_seconds(ours.module, ours.args(x), trials)
    int8 = layer.ours()
    int8_tile, s16 = chosen_tiles(layer.w, layer.x.shape, "NHWC", layer.s, layer.pad)
    baselines = {"plain_tir": tvm_seconds(plain.module, plain.args(x), trials),
                 "int8_ours": tvm_seconds(int8.module, int8.args(layer.x), trials)}
    if onnx is None:
        with tempfile.TemporaryDirectory() as tmp:
            onnx = onnxruntime_seconds(layer, threads, trials, Path(tmp))
    baselines |= onnx
    return {"layer": name, "config": f"A{config.abits}W{config.wbits}", "encoding": config.encoding,
            "isa": isa, "threads": threads, "shape": LAYERS[name], "macs": layer.macs,
            "kernel": tile_name(kernel, config, layer), "int8_kernel": (s16 or int8_tile).spec.name,
            "correct": correct, "ours_ms": t_ours * 1e3, "gmacs": layer.macs / t_ours / 1e9,
            "baselines": {k: v * 1e3 for k, v in baselines.items()},
            "speedups": {k: v / t_ours for k, v in baselines.items()}}


def log_winners(rows: list[dict], path: Path | None = None) -> None:
    """Keep each correct row's faster exact operator, bitserial or our int8, in this host's tuning log
    (``lowbit_choice.log_key`` of the layer's int8 key): what a model's 1-3-bit layer of that shape
    and precision then runs on (kernels/lowbit_choice.py)."""
    for r in rows:
        if r["correct"] and r["isa"] == "host":
            key = lowbit_choice.log_key(Layer(r["layer"]).tuning_key(), *map(int, r["config"][1::2]), r["encoding"])
            tuning.record(key, {"bitserial": r["ours_ms"], "int8": r["baselines"]["int8_ours"]},
                          path or tuning.host_log())


def tile_name(kernel, config: Config, layer: Layer) -> str:
    """The tile the layer's operator runs on (bitserial_gemm.tile_for), or why plain TIR."""
    tile = tile_for(kernel, config, layer.k ** 2 * -(-layer.ic // 64))
    if tile is None:
        return "plain TIR (K below half a block)"
    return tile.spec.name + (" (hybrid as 2S - (2^w-1) T)" if tile.spec.encoding != config.encoding else "")


def layer_operands(layer: Layer, config: Config) -> tuple[np.ndarray, np.ndarray]:
    """(weights, input) of ``config`` on the layer's shapes (seed 14, as bench_bitserial_layer)."""
    rng = np.random.default_rng(14)
    codes = rng.integers(0, 2 ** config.wbits, layer.w.shape)
    w = codes if config.encoding == "unipolar" else 2 * codes - (2 ** config.wbits - 1)
    return w, rng.integers(0, 2 ** config.abits, layer.x.shape).astype(np.uint8)


def mca_bitserial_layer(name: str, config: Config, cores: tuple[str, ...] = ("cortex-a53", "cortex-a72")) -> dict:
    """One layer on the NEON tile and on the plain-TIR schedule, each built for every core of
    ``cores`` (LLVM tuned for it, AArch64 v8.0 + NEON), run under qemu on one input (``correct``:
    both equal numpy) and costed by llvm-mca (mca.estimate): per core the cycles of the popcounting
    blocks (the GEMM's K loop and its remainder), of the whole operator and of the hottest loop, and
    ``ratio`` = ours / plain of the first two."""
    layer = Layer(name)
    w, x = layer_operands(layer, config)
    want = conv_reference(x, w, layer.s, layer.pad)
    kernel = bitserial_kernel("neon", config.abits, config.wbits, config.encoding)
    row = {"layer": name, "config": f"A{config.abits}W{config.wbits}", "encoding": config.encoding,
           "shape": LAYERS[name], "macs": layer.macs, "bit_macs": layer.macs * config.abits * config.wbits,
           "kernel": tile_name(kernel, config, layer),
           "correct": True, "cores": {}}
    for core in cores:
        estimates = {}
        for label, use_kernel in (("ours", True), ("plain_tir", False)):
            built = build_bitserial_conv2d(w, x.shape, config, layer.s, layer.pad, isa="neon", use_kernel=use_kernel)
            op = dataclasses.replace(built, target=aarch64_target(core)).compile()
            row["correct"] &= bool(np.array_equal(op(x), want))
            estimates[label] = mca.estimate(op, x, (core,))[core]
        ours, plain = estimates["ours"], estimates["plain_tir"]
        row["cores"][core] = estimates | {"ratio": {part: ours[part] / plain[part] for part in ("popcount_blocks", "operator")}}
    return row
