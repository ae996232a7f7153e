"""The C of vector registers that the ISA tables do not spell: unaligned loads, stores and splats per
register width, casts between register types, and the horizontal sums of the K loops' epilogues.
Everything else a kernel calls is an instruction row's own intrinsic (``isa_specs``)."""
from __future__ import annotations

import re
from dataclasses import dataclass

from emit import EmitError
from isa_specs.instruction import CType


@dataclass(frozen=True)
class VectorMemory:
    """Unaligned load/store and splat intrinsics of one register width; ``splats``: word bytes →
    (intrinsic broadcasting a word of that size, its result type)."""
    ctype: str
    load: str
    store: str
    pointer: str           # pointee type the load/store intrinsics take
    splats: dict


_MEMORY = {
    ("neon", 64): VectorMemory("uint8x8_t", "vld1_u8", "vst1_u8", "uint8_t", {4: ("vdup_n_u32", "uint32x2_t")}),
    ("neon", 128): VectorMemory("uint8x16_t", "vld1q_u8", "vst1q_u8", "uint8_t",
                                {4: ("vdupq_n_u32", "uint32x4_t"), 8: ("vdupq_n_u64", "uint64x2_t")}),
    ("x86", 128): VectorMemory("__m128i", "_mm_loadu_si128", "_mm_storeu_si128", "__m128i", {4: ("_mm_set1_epi32", "__m128i")}),
    ("x86", 256): VectorMemory("__m256i", "_mm256_loadu_si256", "_mm256_storeu_si256", "__m256i",
                               {4: ("_mm256_set1_epi32", "__m256i")}),
    ("x86", 512): VectorMemory("__m512i", "_mm512_loadu_si512", "_mm512_storeu_si512", "void",
                               {4: ("_mm512_set1_epi32", "__m512i"), 8: ("_mm512_set1_epi64", "__m512i")}),
}
_NEON_VECTOR = re.compile(r"(u?)int(8|16|32|64)x(\d+)_t")

# Horizontal sum of one accumulator register in registers (C expression of ``r``, its address), where
# the compiler's own reduction beats a loop over the lanes in memory: (family, register bits, lane bits).
LANE_SUMS = {("neon", 128, 16): "vaddvq_u16(vld1q_u16(r))", ("neon", 64, 16): "vaddv_u16(vld1_u16(r))",
             ("x86", 512, 64): "(uint64_t)_mm512_reduce_add_epi64(_mm512_loadu_si512(r))"}

# A NEON lanes tile's accumulator register at ``p`` as uint32x4_t, its lanes added pairwise (uaddlp),
# by the accumulator's lane bits
NEON_WIDEN = {16: "vpaddlq_u16(vld1q_u16({p}))"}


def family(isa_name: str) -> str:
    """``neon`` or ``x86``: the intrinsics' naming (AVX2, AVX-512 and AMX share x86's)."""
    return "neon" if isa_name == "neon" else "x86"


def memory(isa_name: str, bits: int) -> VectorMemory:
    try:
        return _MEMORY[family(isa_name), bits]
    except KeyError:
        raise EmitError(f"no {bits}-bit vector register on {isa_name}") from None


def _is_vector(ctype: CType) -> bool:
    return ctype.name.startswith("__m") or bool(_NEON_VECTOR.fullmatch(ctype.name))


def convert(expr: str, have: CType, want: CType) -> str:
    """``expr`` (of C type ``have``) as an operand of C type ``want``: equal bits required."""
    if have.bits != want.bits:
        raise EmitError(f"operand width mismatch: {have.name} ({have.bits} bits) passed as {want.name} ({want.bits})")
    if have.name == want.name:
        return expr
    if (h := _NEON_VECTOR.fullmatch(have.name)) and (w := _NEON_VECTOR.fullmatch(want.name)):
        q = "q" if have.bits == 128 else ""
        return f"vreinterpret{q}_{'s' if w[1] == '' else 'u'}{w[2]}_{'s' if h[1] == '' else 'u'}{h[2]}({expr})"
    if not _is_vector(have) and not _is_vector(want):
        return f"({want.name})({expr})"
    raise EmitError(f"no conversion from {have.name} to {want.name}")
