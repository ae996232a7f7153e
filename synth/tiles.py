"""The default tile of each ISA and kernel kind: what ``BitserialSpec.for_isa`` and ``Int8Spec.for_isa``
build when a caller (``qsynth synth``, the sweep) names no shape, and the measurements behind each
choice. The specs themselves (``synth/spec.py``) accept any valid shape."""
from __future__ import annotations

# Default tile per ISA: weight rows, register bits (K packed bits per plane), output lane bits.
BITSERIAL_TILES = {
    "neon": {"rows": 8, "reg_bits": 128, "out_bits": 16},    # the paper's 8x16-byte Q tile
    "avx2": {"rows": 4, "reg_bits": 256, "out_bits": 64},
    "avx512": {"rows": 8, "reg_bits": 512, "out_bits": 64},
}

# lanes tiles per ISA by default: output channels (rows, a multiple of the 64-bit lanes of a register),
# activation columns and accumulator lane bits; AVX-512: 4 registers x 6 columns = 24 accumulators of
# the 32 zmm (A1W1), see for_isa; NEON: 16-bit accumulator lanes (cnt, then uadalp), four per channel,
# summed once per output tile and per chunk of K short enough that none wraps
LANES_TILE = {"avx512": {"rows": 32, "cols": 6, "out_bits": 64}, "neon": {"rows": 8, "cols": 2, "out_bits": 16}}
# registers a lanes tile's accumulators may take: AVX-512 3/4 of the 32 zmm; NEON half of the 32 Q (the
# A2W2 tile of 8 channels, 24 accumulators beside 8 weight and 4 activation registers, spilled in its K
# loop: 41 stack accesses, ResNet-18 C9 Cortex-A53 K loop 0.14x the plain TIR against the acc tile's 0.09x)
LANES_ACCUMULATORS = {"avx512": 24, "neon": 16}
DEFAULT_LAYOUT = {"neon": "tile", "avx2": "acc", "avx512": "tile"}

# The int8 tiles per (ISA, types, layout): mr, nr, k (see Int8Spec). The first layout listed for an
# (ISA, types) pair is its default.
INT8_TILES = {
    ("neon", "u8u8", "rows"): (4, 4, 8),     # the RFC's 4x4 pseudo-dot: umull/uadalp/addp on D registers
    ("neon", "u8u8", "acc"): (4, 4, 8),      # umull/uadalp into lanes kept over K, summed once per K loop
    # smull + smlal2 of two products into int16 lanes, sadalp into lanes kept over K (MLAS's v8.0 s8 x s8
    # kernel): 48 NEON instructions per 256 MACs where umull + uadalp take 64; weights in [-127, 127]
    ("neon", "s8s7", "acc"): (4, 4, 16),
    ("neon", "u8u8", "k4"): (4, 4, 16),      # udot by element (ARMv8.2 dot product)
    ("neon", "s16", "rows"): (4, 4, 4),      # QNN's int16 legalization: smlal on D registers
    ("neon", "s8s8", "k4"): (4, 4, 16),      # sdot by element
    ("neon", "u8s8", "k4"): (4, 4, 16),      # sudot by element (i8mm)
    # x86: at least 12 accumulator chains cover vpdpbusd's latency 5 at 2 per cycle; k4b = A broadcast
    # per 4-byte group. AVX-512 8x48 (24 accumulators, three B registers: 11 loads per 24 vpdpbusd):
    # its load mix reaches 92% of the register-only peak from L1, 6x32's (8 per 12) 86%, 12x16's
    # (13 per 12) 78% (scripts/peak_x86.c)
    ("avx512", "u8s8", "k4b"): (8, 48, 16),   # vpdpbusd zmm
    # AVX-512BW without VNNI (Skylake-SP/X): the w16 row (vpmaddwd + vpaddd) on zmm, exact for any int8;
    # 12 rows x 2 registers of C, 2 of B, a broadcast and a product: 28 of the 32 zmm
    ("avx512", "w16", "k4b"): (12, 32, 8),
    # exact on every AVX2 host: vpsignb (|a| and sign(b, a)) + vpmaddubsw + vpmaddwd, A signed (u8 activations
    # shifted by -128 when packed), weights in [-127, 127]; 5 rows x 2 registers of C and 2 of B beside
    # the ones, a broadcast, its absolute value and a temporary fill the 16 ymm (tuning.ROW_EXTRAS)
    ("avx2", "s8s7", "k4b"): (5, 16, 8),
    # exact on every AVX2 host for any int8 weights: int16 operands (8-bit data widened when packed),
    # vpmaddwd + vpaddd; 6 rows x 2 registers of C, 2 of B, a broadcast and a product fill the 16 ymm
    ("avx2", "w16", "k4b"): (6, 16, 8),
    ("avx2", "s16", "k4b"): (5, 16, 2),       # the w16 row on any int16 operands: Winograd's (ops/winograd.py)
    ("avx512", "s16", "k4b"): (12, 32, 8),
    ("avx2", "u7s8", "k4b"): (6, 8, 4),       # vpmaddubsw + vpmaddwd, activations < 128 (no saturation)
    # the same row on any u8 activation for weights in [-64, 64] (reduce_range); 5 rows x 2 registers of C,
    # 2 of B, a broadcast, the pair sums and the ones fill 15 of the 16 ymm (tuning.ROW_EXTRAS)
    ("avx2", "u8r7", "k4b"): (5, 16, 4),
    ("avx2", "u8s8", "k4b"): (12, 8, 4),      # AVX-VNNI vpdpbusd ymm (16 ymm registers)
    # AMX: 2x2 accumulator tiles (a tdpbusd's latency covers ~4 issues), A and B tiles loaded once per
    # k step and used twice; k = 4 steps per call keeps A and B (16 KiB) in L1
    ("amx", "u8s8", "tile"): (32, 32, 256),   # tdpbusd
    ("amx", "s8s8", "tile"): (32, 32, 256),   # tdpbssd
}
