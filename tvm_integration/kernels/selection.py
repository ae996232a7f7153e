"""Which tile an operator is built with, and for which LLVM target: the one place an ISA is chosen.

int8: ``isa="host"`` takes the best ISA the host executes, AVX-512 VNNI > AVX-VNNI > AVX-512BW > AVX2,
read from the host's CPU flags (isa_specs.host), never from a CPU name; without VNNI, the exact w16
tiles (int16 operands: AVX-512BW's on zmm, Skylake-SP; AVX2's on ymm) and, on AVX2, the s8s7 tiles,
exact on u8 and s8 activations (shifted to s8 when packed) for weights in [-127, 127], and the u8r7 tiles,
onnxruntime's vpmaddubsw row, for weights in [-64, 64] (reduce_range), which an
operator checks on its constant weights (``Kernel.admits``; a tile whose range leaves a few weights out,
-128 on s8s7 or the extremes of 9-bit weights ``w - zw`` on a byte tile, runs them clamped and adds the
rest apart, ``packing.clamped``); on a host with AMX (and the tile data
permission), an operator of reduction depth 64 bytes or more takes the AMX tile instead
(``amx_pays``). Bitserial: ``isa="host"``
takes AVX-512, else AVX2; NEON tiles are built for AArch64 and run under qemu (qemu/cross.py), never
for "host". An explicit ISA builds for that ISA; running the operator then needs a host that has it.
Which of an ISA's tile shapes an int8 operator takes per shape is tuning.py's choice among
``int8_candidates``.
"""
from __future__ import annotations

import numpy as np

from isa_specs import host
from tvm_integration.kernels import amx_runtime, int8, packing
from tvm_integration.kernels.bitserial import CROSS, BitserialKernel, gemm_kernels, word_kernels

# Preference order of the u8 x s8 tiles: the cache's ISA name and the kernel's distinguishing feature.
INT8_PREFERENCE = (("avx512", "avx512vnni"), ("avx2", "avxvnni"), ("avx512", "avx512bw"), ("avx2", "avx2"))
INT8_ISAS = ("amx", "avx512", "avx2")
BITSERIAL_ISAS = ("avx512", "avx2")       # preference order on x86 hosts
# what every tile of an ISA needs: a host without it skips the ISA before loading (re-proving) its tiles
BASE_FEATURE = {"amx": "amx-int8", "avx512": "avx512f", "avx2": "avx2"}
AMX_MIN_DEPTH = 64                        # one 64-byte K block of the 32x32x64 AMX tile

# AArch64 v8.0 with Advanced SIMD: what every AArch64 core runs (Cortex-A53 included), and all the
# NEON bitserial tiles use (their kernel_model features; bitserial.kernel_ir).
AARCH64_MATTR = ("+neon",)
# isa="avx2": the whole operator built for x86-64-v3 (AVX2, no AVX-512), as an AVX2 host runs it: its
# packing, output stage and plain-TIR baseline included (the host's target would give them AVX-512,
# vpopcntq among it). The AVX2 kernels' LLVM IR needs no more (avx2, popcnt: their target-features).
AVX2_TARGET = {"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mcpu": "x86-64-v3"}


class SelectionError(ValueError):
    """No kernel for the requested ISA, or the host cannot run it."""


def usable(kernel: int8.Kernel | BitserialKernel) -> str | None:
    """None when the host executes every instruction of ``kernel``, else why not (an AMX kernel also
    needs this process's tile data permission, requested here)."""
    why = next((why for f in kernel.features if (why := host.missing(f, ()))), None)
    if why is None and "amx-int8" in kernel.features:
        return amx_runtime.permission()
    return why


# Tile types exact on every activation: u8s8, w16 (8-bit data of either sign widened to int16), s8s7
# (A signed, so u8 activations are shifted by -128 when packed; B in [-127, 127], checked on the
# weights) and u8r7 (B in [-64, 64]). u7s8 assumes A < 128, so it is not one.
EXACT_TYPES = ("u8s8", "s8s7", "u8r7", "w16")
# Tiles that, where they admit a layer's weights, run it faster than every other exact tile, so they
# alone are its candidates: u8r7, onnxruntime's own saturating row (vpmaddubsw, vpmaddwd by ones,
# vpaddd: 98.7 G MAC/s from L1 on Zen 3 against w16's 78.1, docs/measurements.md), exact on the
# reduce_range weights onnxruntime advises for these hosts.
FASTEST_WHERE_ADMITTED = ("u8r7",)
# The most weights per output channel a tile that does not admit them takes with packing.clamped's
# correction, a scalar read of the activation each weight multiplies, per output: u8 weights less an
# asymmetric zero point near 128 leave one on a byte tile (ResNet-18 quantized U8U8: every layer at most
# 1 of 64-4608), at which s8s7 took 1.0-3.9x the w16 tile's time per layer (Zen 3, docs/measurements.md).
FEW_OUTSIDE = 4


def _u8s8_kernels(isa: str) -> list[int8.Kernel]:
    """The isa's tiles exact on every u8 and s8 activation (``EXACT_TYPES``)."""
    return [k for k in int8.proved_kernels(isa) if k.spec.types in EXACT_TYPES]


def admitted(candidates: list[int8.Kernel], weights: np.ndarray | None) -> list[int8.Kernel]:
    """The candidates whose precondition ``weights`` (``[O, ...]``, O output channels) satisfy
    (``Kernel.admits``), only the ``FASTEST_WHERE_ADMITTED`` ones among them where any is; else those
    that leave at most ``FEW_OUTSIDE`` weights of any output channel outside their range: the operator
    then runs the chosen tile on its weights clamped into the tile's range and adds the rest apart (``packing.clamped``); SelectionError if none does. Weights computed at
    run time (None): the candidates that admit every int8 B, else all of them (the operator then runs
    plain TIR: ops/batch_matmul.py)."""
    exact = [k for k in candidates if k.admits(weights)]
    fastest = [k for k in exact if k.spec.types in FASTEST_WHERE_ADMITTED]
    if fastest:
        return fastest
    if exact or weights is None:
        return exact or candidates
    columns = weights.reshape(weights.shape[0], -1)
    corrected = [k for k in candidates if packing.outside(columns, *k.b_range) <= FEW_OUTSIDE]
    if not corrected:
        raise SelectionError(f"no tile of {candidates[0].spec.isa} takes weights in [{int(weights.min())}, "
                             f"{int(weights.max())}] with at most {FEW_OUTSIDE} per output channel outside its range")
    return corrected


def int8_kernel(isa: str = "host") -> int8.Kernel:
    """The kernel an int8 operator uses for ``isa`` ("host" or one of INT8_ISAS)."""
    if isa == "host":
        reasons = []
        for name, feature in INT8_PREFERENCE:
            if (why := host.missing(feature, ())) is not None:
                reasons.append(f"{name}: {why}")     # not re-proved here (AMX: 62 s CPU)
                continue
            for kernel in _u8s8_kernels(name):
                if feature in kernel.features and (why := usable(kernel)) is None:
                    return kernel
                reasons.append(f"{kernel.intrin}: {why or 'not ' + feature}")
        raise SelectionError("no u8 x s8 kernel this host runs: " + "; ".join(reasons or ["none registered"]))
    if isa not in INT8_ISAS:
        raise SelectionError(f"unknown ISA {isa!r}; accepted: host, {', '.join(INT8_ISAS)}")
    kernels = _u8s8_kernels(isa)
    if not kernels:
        raise SelectionError(f"no proved u8 x s8 kernel of {isa} in the cache that a schedule here can use")
    return kernels[0]


def amx_pays(depth: int, groups: int = 1) -> bool:
    """Whether an operator of reduction depth ``depth`` (bytes per output) in ``groups`` groups runs
    faster on the AMX tiles than on VNNI. Measured on the AMX host (CPU time, one thread, the
    32x32x64 tile against the host's VNNI tile): 1x1 convolutions of 16, 32 and 48 channels
    1.08-1.22x VNNI's time (their K blocks padded, their rows copied), of 64 channels 0.61x, the 7x7
    stem (147) 0.72x, ResNet-18's 3x3 layers (576-4608) 0.3-0.45x; grouped 3x3 convolutions (RegNet's,
    8-32 columns per group) 12-24x."""
    return depth >= AMX_MIN_DEPTH and groups == 1


def int8_candidates(isa: str = "host", depth: int | None = None, groups: int = 1) -> list[int8.Kernel]:
    """Every tile shape of the kind ``int8_kernel(isa)`` picks (same ISA and instructions): what
    tuning chooses among per operator shape. On the host, an operator of reduction ``depth`` in
    ``groups`` groups that ``amx_pays`` for takes the AMX tiles where the host runs them: they come
    first (the untuned choice, ``tuning.choose``), the host's VNNI kind after them, so that a tuning
    log can keep a layer on VNNI where that measured faster (MobileNetV2's 1x1 projections). A host
    without AMX never loads its tiles: on a new machine that re-proved them (62 s of CPU) to drop them."""
    chosen = int8_kernel(isa)
    family = [k for k in _u8s8_kernels(chosen.spec.isa) if k.features == chosen.features]
    if isa == "host" and depth is not None and amx_pays(depth, groups) and \
            host.missing(BASE_FEATURE["amx"], ()) is None:
        amx = [k for k in _u8s8_kernels("amx") if usable(k) is None]
        return amx + family
    return family


def candidates_for(weights: np.ndarray, isa: str = "host", groups: int = 1) -> list[int8.Kernel]:
    """The tiles an operator with constant ``weights`` (``[O, ...]``, its reduction the rest of the
    shape) in ``groups`` groups chooses among: ``int8_candidates`` that its weights admit; where they admit
    none (9-bit weights, ``w - zw`` of U8U8 layers, beyond the byte tiles' correction), the ISA's other
    exact tiles the host runs that admit them (AVX-512BW's w16 beside VNNI and AMX)."""
    candidates = int8_candidates(isa, int(np.prod(weights.shape[1:])), groups)
    try:
        return admitted(candidates, weights)
    except SelectionError:
        others = [k for k in _u8s8_kernels(candidates[-1].spec.isa)
                  if k not in candidates and (isa != "host" or usable(k) is None) and k.admits(weights)]
        if not others:
            raise
        return others


def int8_target(kernel: int8.Kernel | None = None) -> dict:
    """The host model's target (its micro-architecture as LLVM names it), also for an AMX tile on the
    emulation; for a kernel the host cannot run, a generic x86-64 target with the kernel's features,
    so the module still builds."""
    if kernel is None or kernel.emulated or usable(kernel) is None:
        return host.tvm_target()
    return {"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mattr": [f"+{f}" for f in kernel.features]}


def bitserial_kernel(isa: str, abits: int, wbits: int, encoding: str, layout: str | None = None) -> BitserialKernel:
    """The tile a bitserial operator uses: for ``isa="host"`` the first ISA of ``BITSERIAL_ISAS``
    whose tile the host runs (isa_specs.host's CPU flags; an ISA whose ``BASE_FEATURE`` the host lacks is not
    loaded), else the given ISA's first tile
    (``gemm_kernels``' order); ``layout``: only tiles of that layout (``acc`` or ``lanes``; ``tile``:
    the first word tile, ``word_kernels``, for any K)."""
    if isa != "host" and isa not in BITSERIAL_ISAS + CROSS:
        raise SelectionError(f"unknown ISA {isa!r} for bitserial operators; accepted: host, "
                             f"{', '.join(BITSERIAL_ISAS + CROSS)}")
    reasons = []
    if layout not in (None, "acc", "lanes", "tile"):
        raise SelectionError(f"bitserial tile layout must be acc, lanes or tile, got {layout!r}")
    for name in BITSERIAL_ISAS if isa == "host" else (isa,):
        if isa == "host" and (why := host.missing(BASE_FEATURE[name], ())) is not None:
            reasons.append(f"{name}: {why}")
            continue
        kernels = (list(word_kernels(name, abits, wbits, encoding)) if layout == "tile" else
                   [k for k in gemm_kernels(name, abits, wbits, encoding) if layout in (None, k.spec.layout)])
        if not kernels:
            reasons.append(f"{name}: no proved GEMM-shaped A{abits}W{wbits} {encoding} {layout or ''} tile in the cache"
                           .replace("  ", " "))
            continue
        why = usable(kernels[0])
        if why is None or isa != "host":
            return kernels[0]
        reasons.append(f"{kernels[0].spec.name}: {why}")
    raise SelectionError("no bitserial tile: " + "; ".join(reasons))


def bitserial_target(isa: str) -> dict:
    """The LLVM target of a bitserial operator for ``isa``: AArch64 for NEON, x86-64-v3 for AVX2,
    else this host's."""
    return aarch64_target() if isa in CROSS else dict(AVX2_TARGET) if isa == "avx2" else host.tvm_target()


def aarch64_target(mcpu: str | None = None) -> dict:
    """The TVM target of AArch64 operators (``mcpu``: tune for that core, e.g. cortex-a53)."""
    target = {"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mattr": list(AARCH64_MATTR)}
    return target | ({"mcpu": mcpu} if mcpu else {})
