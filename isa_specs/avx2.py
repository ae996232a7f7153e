"""x86 AVX2 integer SIMD, with AVX-VNNI (VEX-encoded ``vpdpbusd``).

Each row follows the "Operation" pseudocode of the Intel Intrinsics Guide for its intrinsics and
the instruction's page in the Intel 64 and IA-32 Architectures Software Developer's Manual (SDM),
Volume 2. Forms are named after the vector length of the encoding: ``ymm`` is VEX.256 (the main
form), ``xmm`` is VEX.128 (the SSE-named intrinsics, VEX-encoded under ``-mavx2``); a form keeps
that name when one operand has the other size (``vpmovzxbw.ymm`` reads an xmm, ``vextracti128.ymm``
writes one).

Many 256-bit instructions work on each 128-bit half independently ("in-lane": vpshufb, vpunpck*,
vphaddd); their semantics apply a 128-bit function to every 128-bit lane with ``lanewise``.
"""
from __future__ import annotations

import sys

from isa_specs.instruction import Form, Instruction
from isa_specs.isa import ISA as _ISA, Toolchain
from isa_specs.lanes import lanewise, sat_signed, total

# ---------------------------------------------------------------- semantics


def and_(B, a, b): return B.and_(a, b)                 # VPAND: dst := a AND b


def or_(B, a, b): return B.or_(a, b)                   # VPOR: dst := a OR b


def xor(B, a, b): return B.xor(a, b)                   # VPXOR: dst := a XOR b


def andn(B, a, b): return B.and_(B.not_(a), b)         # VPANDN: dst := (NOT a) AND b


def add(B, a, b, esize): return lanewise(B, esize, B.add, a, b)   # VPADD{B,W,D,Q}: wrapping


def sub(B, a, b, esize): return lanewise(B, esize, B.sub, a, b)   # VPSUB{B,W,D}: a - b, wrapping


def mullo(B, a, b, esize):
    """VPMULLW: tmp := SignExtend(a[i]) * SignExtend(b[i]); dst[i] := tmp[esize-1:0]."""
    return lanewise(B, esize, B.mul, a, b)


def shuffle_bytes(B, a, b):
    """VPSHUFB, per 128-bit lane: dst.byte[j] := 0 IF b.byte[j][7] ELSE a.byte[b.byte[j][3:0]]."""
    def lane(a128, b128):
        table, zero = B.lanes(a128, 8), B.const(0, 8)
        return B.join([B.ite(B.eq(B.extract(i, 7, 1), B.const(1, 1)), zero, B.select(B.trunc(i, 4), table))
                       for i in B.lanes(b128, 8)])
    return lanewise(B, 128, lane, a, b)


def sad(B, a, b):
    """VPSADBW, per 64-bit lane: dst[15:0] := SUM_{j<8} ABS(a.byte[j] - b.byte[j]); dst[63:16] := 0."""
    def absdiff(x, y):
        x, y = B.zext(x, 16), B.zext(y, 16)
        return B.ite(B.ult(x, y), B.sub(y, x), B.sub(x, y))

    def lane(x, y):
        return B.zext(total(B, [absdiff(p, q) for p, q in zip(B.lanes(x, 8), B.lanes(y, 8))]), 64)
    return lanewise(B, 64, lane, a, b)


def maddubs(B, a, b):
    """VPMADDUBSW, per 16-bit lane: dst := SaturateToSignedWord(a.byte[1]*b.byte[1] + a.byte[0]*b.byte[0]),
    with a's bytes unsigned and b's bytes signed."""
    def lane(x, y):
        prods = [B.mul(B.zext(p, 32), B.sext(q, 32)) for p, q in zip(B.lanes(x, 8), B.lanes(y, 8))]
        return sat_signed(B, total(B, prods), 16)
    return lanewise(B, 16, lane, a, b)


def madd(B, a, b):
    """VPMADDWD, per 32-bit lane: dst := SignExtend(a.word[1])*SignExtend(b.word[1])
    + SignExtend(a.word[0])*SignExtend(b.word[0]), wrapping (only -2^15 * -2^15 * 2 overflows)."""
    def lane(x, y):
        return total(B, [B.mul(B.sext(p, 32), B.sext(q, 32)) for p, q in zip(B.lanes(x, 16), B.lanes(y, 16))])
    return lanewise(B, 32, lane, a, b)


def abs_(B, a, esize):
    """VPABS{B,W,D}: dst[i] := ABS(a[i]) as an unsigned element (ABS(-2^(esize-1)) = 2^(esize-1))."""
    return lanewise(B, esize, lambda x: B.ite(B.slt(x, B.const(0, esize)), B.sub(B.const(0, esize), x), x), a)


def sign(B, a, b, esize):
    """VPSIGN{B,W,D}: dst[i] := -a[i] IF b[i] < 0, 0 IF b[i] = 0, ELSE a[i] (negation wrapping:
    -(-2^(esize-1)) = -2^(esize-1))."""
    def lane(x, y):
        zero = B.const(0, esize)
        return B.ite(B.slt(y, zero), B.sub(zero, x), B.ite(B.eq(y, zero), zero, x))
    return lanewise(B, esize, lane, a, b)


def dpbusd(B, src, a, b):
    """VPDPBUSD, per 32-bit lane: dst := src + SUM_{j<4} ZeroExtend(a.byte[j]) * SignExtend(b.byte[j]),
    wrapping (no saturation)."""
    def lane(acc, x, y):
        return B.add(acc, total(B, [B.mul(B.zext(p, 32), B.sext(q, 32)) for p, q in zip(B.lanes(x, 8), B.lanes(y, 8))]))
    return lanewise(B, 32, lane, src, a, b)


def unpack(B, a, b, esize, half):
    """VPUNPCK{L,H}{BW,WD,DQ,QDQ}, per 128-bit lane: interleave the low (half 0) or high (half 1)
    esize-bit elements of a and b: dst := a[k], b[k], a[k+1], b[k+1], ..."""
    def lane(a128, b128):
        n = 64 // esize
        pairs = zip(B.lanes(a128, esize)[half * n:(half + 1) * n], B.lanes(b128, esize)[half * n:(half + 1) * n])
        return B.join([e for pair in pairs for e in pair])
    return lanewise(B, 128, lane, a, b)


def hadd(B, a, b, esize):
    """VPHADDD, per 128-bit lane: dst := a[0]+a[1], a[2]+a[3], ..., b[0]+b[1], b[2]+b[3], ... (wrapping)."""
    def lane(a128, b128):
        src = B.lanes(a128, esize) + B.lanes(b128, esize)
        return B.join([B.add(src[2 * k], src[2 * k + 1]) for k in range(len(src) // 2)])
    return lanewise(B, 128, lane, a, b)


def permq(B, a, imm):
    """VPERMQ: dst.qword[i] := a.qword[imm8[2i+1:2i]] (crosses 128-bit lanes)."""
    q = B.lanes(a, 64)
    return B.join([q[(imm >> 2 * i) & 3] for i in range(4)])


def perm2x128(B, a, b, imm):
    """VPERM2I128: dst.half[i] := 0 IF imm8[4i+3] ELSE (a.lo, a.hi, b.lo, b.hi)[imm8[4i+1:4i]]."""
    options = B.lanes(a, 128) + B.lanes(b, 128)
    return B.join([B.const(0, 128) if (imm >> 4 * i) & 8 else options[(imm >> 4 * i) & 3] for i in range(2)])


def extract128(B, a, imm):
    """VEXTRACTI128: dst := a[127:0] IF imm8[0] == 0 ELSE a[255:128]."""
    return B.lanes(a, 128)[imm & 1]


def srl(B, a, esize, imm):
    """VPSRL{W,Q} (immediate): dst[i] := 0 IF imm8 > esize-1 ELSE ZeroExtend(a[i] >> imm8)."""
    return lanewise(B, esize, lambda x: B.lshr(x, imm), a)


def sll(B, a, esize, imm):
    """VPSLLW (immediate): dst[i] := 0 IF imm8 > esize-1 ELSE ZeroExtend(a[i] << imm8)."""
    return lanewise(B, esize, lambda x: B.shl(x, imm), a)


def movzx(B, a, esize, vl):
    """VPMOVZXBW: dst.word[j] := ZeroExtend(a.byte[j]) for the vl/16 low bytes of a."""
    return B.join([B.zext(x, 2 * esize) for x in B.lanes(a, esize)[:vl // (2 * esize)]])


def movsx(B, a, esize, vl):
    """VPMOVSXBW: dst.word[j] := SignExtend(a.byte[j]) for the vl/16 low bytes of a."""
    return B.join([B.sext(x, 2 * esize) for x in B.lanes(a, esize)[:vl // (2 * esize)]])


def broadcast(B, a, esize, vl):
    """VPBROADCASTD: every esize-bit element of dst := a[esize-1:0]."""
    return B.join([B.lanes(a, esize)[0]] * (vl // esize))


# ---------------------------------------------------------------- table

_SDM = "Intel SDM Vol. 2"
_SHIFT16, _SHIFT64 = tuple(range(17)), tuple(range(65))   # counts above esize-1 all give 0

INSTRUCTIONS = (
    Instruction("vpand", and_, (
        Form("ymm", "__m256i _mm256_and_si256(__m256i a, __m256i b)"),
        Form("xmm", "__m128i _mm_and_si128(__m128i a, __m128i b)"),
    ), feature="avx2", ref=f"{_SDM} PAND; Intrinsics Guide _mm256_and_si256", commutative=True),
    Instruction("vpor", or_, (
        Form("ymm", "__m256i _mm256_or_si256(__m256i a, __m256i b)"),
        Form("xmm", "__m128i _mm_or_si128(__m128i a, __m128i b)"),
    ), feature="avx2", ref=f"{_SDM} POR; Intrinsics Guide _mm256_or_si256", commutative=True),
    Instruction("vpxor", xor, (
        Form("ymm", "__m256i _mm256_xor_si256(__m256i a, __m256i b)"),
        Form("xmm", "__m128i _mm_xor_si128(__m128i a, __m128i b)"),
    ), feature="avx2", ref=f"{_SDM} PXOR; Intrinsics Guide _mm256_xor_si256", commutative=True),
    Instruction("vpandn", andn, (
        Form("ymm", "__m256i _mm256_andnot_si256(__m256i a, __m256i b)"),
        Form("xmm", "__m128i _mm_andnot_si128(__m128i a, __m128i b)"),
    ), feature="avx2", ref=f"{_SDM} PANDN; Intrinsics Guide _mm256_andnot_si256"),
    Instruction("vpshufb", shuffle_bytes, (
        Form("ymm", "__m256i _mm256_shuffle_epi8(__m256i a, __m256i b)"),
        Form("xmm", "__m128i _mm_shuffle_epi8(__m128i a, __m128i b)"),
    ), feature="avx2", ref=f"{_SDM} PSHUFB; Intrinsics Guide _mm256_shuffle_epi8"),
    Instruction("vpaddb", add, (
        Form("ymm", "__m256i _mm256_add_epi8(__m256i a, __m256i b)", {"esize": 8}),
        Form("xmm", "__m128i _mm_add_epi8(__m128i a, __m128i b)", {"esize": 8}),
    ), feature="avx2", ref=f"{_SDM} PADDB/PADDW/PADDD/PADDQ; Intrinsics Guide _mm256_add_epi8", commutative=True),
    Instruction("vpaddw", add, (
        Form("ymm", "__m256i _mm256_add_epi16(__m256i a, __m256i b)", {"esize": 16}),
        Form("xmm", "__m128i _mm_add_epi16(__m128i a, __m128i b)", {"esize": 16}),
    ), feature="avx2", ref=f"{_SDM} PADDB/PADDW/PADDD/PADDQ; Intrinsics Guide _mm256_add_epi16", commutative=True),
    Instruction("vpaddd", add, (
        Form("ymm", "__m256i _mm256_add_epi32(__m256i a, __m256i b)", {"esize": 32}),
        Form("xmm", "__m128i _mm_add_epi32(__m128i a, __m128i b)", {"esize": 32}),
    ), feature="avx2", ref=f"{_SDM} PADDB/PADDW/PADDD/PADDQ; Intrinsics Guide _mm256_add_epi32", commutative=True),
    Instruction("vpaddq", add, (
        Form("ymm", "__m256i _mm256_add_epi64(__m256i a, __m256i b)", {"esize": 64}),
        Form("xmm", "__m128i _mm_add_epi64(__m128i a, __m128i b)", {"esize": 64}),
    ), feature="avx2", ref=f"{_SDM} PADDB/PADDW/PADDD/PADDQ; Intrinsics Guide _mm256_add_epi64", commutative=True),
    Instruction("vpsubb", sub, (
        Form("ymm", "__m256i _mm256_sub_epi8(__m256i a, __m256i b)", {"esize": 8}),
        Form("xmm", "__m128i _mm_sub_epi8(__m128i a, __m128i b)", {"esize": 8}),
    ), feature="avx2", ref=f"{_SDM} PSUBB/PSUBW/PSUBD; Intrinsics Guide _mm256_sub_epi8"),
    Instruction("vpsubw", sub, (
        Form("ymm", "__m256i _mm256_sub_epi16(__m256i a, __m256i b)", {"esize": 16}),
        Form("xmm", "__m128i _mm_sub_epi16(__m128i a, __m128i b)", {"esize": 16}),
    ), feature="avx2", ref=f"{_SDM} PSUBB/PSUBW/PSUBD; Intrinsics Guide _mm256_sub_epi16"),
    Instruction("vpsubd", sub, (
        Form("ymm", "__m256i _mm256_sub_epi32(__m256i a, __m256i b)", {"esize": 32}),
        Form("xmm", "__m128i _mm_sub_epi32(__m128i a, __m128i b)", {"esize": 32}),
    ), feature="avx2", ref=f"{_SDM} PSUBB/PSUBW/PSUBD; Intrinsics Guide _mm256_sub_epi32"),
    Instruction("vpmullw", mullo, (
        Form("ymm", "__m256i _mm256_mullo_epi16(__m256i a, __m256i b)", {"esize": 16}),
        Form("xmm", "__m128i _mm_mullo_epi16(__m128i a, __m128i b)", {"esize": 16}),
    ), feature="avx2", ref=f"{_SDM} PMULLW; Intrinsics Guide _mm256_mullo_epi16", commutative=True),
    Instruction("vpsadbw", sad, (
        Form("ymm", "__m256i _mm256_sad_epu8(__m256i a, __m256i b)"),
        Form("xmm", "__m128i _mm_sad_epu8(__m128i a, __m128i b)"),
    ), feature="avx2", ref=f"{_SDM} PSADBW; Intrinsics Guide _mm256_sad_epu8", commutative=True),
    Instruction("vpabsb", abs_, (
        Form("ymm", "__m256i _mm256_abs_epi8(__m256i a)", {"esize": 8}),
        Form("xmm", "__m128i _mm_abs_epi8(__m128i a)", {"esize": 8}),
    ), feature="avx2", ref=f"{_SDM} PABSB/PABSW/PABSD/PABSQ; Intrinsics Guide _mm256_abs_epi8"),
    Instruction("vpsignb", sign, (
        Form("ymm", "__m256i _mm256_sign_epi8(__m256i a, __m256i b)", {"esize": 8}),
        Form("xmm", "__m128i _mm_sign_epi8(__m128i a, __m128i b)", {"esize": 8}),
    ), feature="avx2", ref=f"{_SDM} PSIGNB/PSIGNW/PSIGND; Intrinsics Guide _mm256_sign_epi8"),
    Instruction("vpmaddubsw", maddubs, (
        Form("ymm", "__m256i _mm256_maddubs_epi16(__m256i a, __m256i b)"),
        Form("xmm", "__m128i _mm_maddubs_epi16(__m128i a, __m128i b)"),
    ), feature="avx2", ref=f"{_SDM} PMADDUBSW; Intrinsics Guide _mm256_maddubs_epi16"),
    Instruction("vpmaddwd", madd, (
        Form("ymm", "__m256i _mm256_madd_epi16(__m256i a, __m256i b)"),
        Form("xmm", "__m128i _mm_madd_epi16(__m128i a, __m128i b)"),
    ), feature="avx2", ref=f"{_SDM} PMADDWD; Intrinsics Guide _mm256_madd_epi16", commutative=True),
    Instruction("vpdpbusd", dpbusd, (
        Form("ymm", "__m256i _mm256_dpbusd_avx_epi32(__m256i src, __m256i a, __m256i b)"),
        Form("xmm", "__m128i _mm_dpbusd_avx_epi32(__m128i src, __m128i a, __m128i b)"),
    ), feature="avxvnni", ref=f"{_SDM} VPDPBUSD; Intrinsics Guide _mm256_dpbusd_avx_epi32"),
    Instruction("vpunpcklbw", unpack, (
        Form("ymm", "__m256i _mm256_unpacklo_epi8(__m256i a, __m256i b)", {"esize": 8, "half": 0}),
        Form("xmm", "__m128i _mm_unpacklo_epi8(__m128i a, __m128i b)", {"esize": 8, "half": 0}),
    ), feature="avx2", ref=f"{_SDM} PUNPCKLBW/PUNPCKLWD/PUNPCKLDQ/PUNPCKLQDQ; Intrinsics Guide _mm256_unpacklo_epi8"),
    Instruction("vpunpckhbw", unpack, (
        Form("ymm", "__m256i _mm256_unpackhi_epi8(__m256i a, __m256i b)", {"esize": 8, "half": 1}),
        Form("xmm", "__m128i _mm_unpackhi_epi8(__m128i a, __m128i b)", {"esize": 8, "half": 1}),
    ), feature="avx2", ref=f"{_SDM} PUNPCKHBW/PUNPCKHWD/PUNPCKHDQ/PUNPCKHQDQ; Intrinsics Guide _mm256_unpackhi_epi8"),
    Instruction("vpunpcklwd", unpack, (
        Form("ymm", "__m256i _mm256_unpacklo_epi16(__m256i a, __m256i b)", {"esize": 16, "half": 0}),
        Form("xmm", "__m128i _mm_unpacklo_epi16(__m128i a, __m128i b)", {"esize": 16, "half": 0}),
    ), feature="avx2", ref=f"{_SDM} PUNPCKLBW/PUNPCKLWD/PUNPCKLDQ/PUNPCKLQDQ; Intrinsics Guide _mm256_unpacklo_epi16"),
    Instruction("vpunpckhwd", unpack, (
        Form("ymm", "__m256i _mm256_unpackhi_epi16(__m256i a, __m256i b)", {"esize": 16, "half": 1}),
        Form("xmm", "__m128i _mm_unpackhi_epi16(__m128i a, __m128i b)", {"esize": 16, "half": 1}),
    ), feature="avx2", ref=f"{_SDM} PUNPCKHBW/PUNPCKHWD/PUNPCKHDQ/PUNPCKHQDQ; Intrinsics Guide _mm256_unpackhi_epi16"),
    Instruction("vpunpckldq", unpack, (
        Form("ymm", "__m256i _mm256_unpacklo_epi32(__m256i a, __m256i b)", {"esize": 32, "half": 0}),
        Form("xmm", "__m128i _mm_unpacklo_epi32(__m128i a, __m128i b)", {"esize": 32, "half": 0}),
    ), feature="avx2", ref=f"{_SDM} PUNPCKLBW/PUNPCKLWD/PUNPCKLDQ/PUNPCKLQDQ; Intrinsics Guide _mm256_unpacklo_epi32"),
    Instruction("vpunpckhdq", unpack, (
        Form("ymm", "__m256i _mm256_unpackhi_epi32(__m256i a, __m256i b)", {"esize": 32, "half": 1}),
        Form("xmm", "__m128i _mm_unpackhi_epi32(__m128i a, __m128i b)", {"esize": 32, "half": 1}),
    ), feature="avx2", ref=f"{_SDM} PUNPCKHBW/PUNPCKHWD/PUNPCKHDQ/PUNPCKHQDQ; Intrinsics Guide _mm256_unpackhi_epi32"),
    Instruction("vpunpcklqdq", unpack, (
        Form("ymm", "__m256i _mm256_unpacklo_epi64(__m256i a, __m256i b)", {"esize": 64, "half": 0}),
        Form("xmm", "__m128i _mm_unpacklo_epi64(__m128i a, __m128i b)", {"esize": 64, "half": 0}),
    ), feature="avx2", ref=f"{_SDM} PUNPCKLBW/PUNPCKLWD/PUNPCKLDQ/PUNPCKLQDQ; Intrinsics Guide _mm256_unpacklo_epi64"),
    Instruction("vpunpckhqdq", unpack, (
        Form("ymm", "__m256i _mm256_unpackhi_epi64(__m256i a, __m256i b)", {"esize": 64, "half": 1}),
        Form("xmm", "__m128i _mm_unpackhi_epi64(__m128i a, __m128i b)", {"esize": 64, "half": 1}),
    ), feature="avx2", ref=f"{_SDM} PUNPCKHBW/PUNPCKHWD/PUNPCKHDQ/PUNPCKHQDQ; Intrinsics Guide _mm256_unpackhi_epi64"),
    Instruction("vphaddd", hadd, (
        Form("ymm", "__m256i _mm256_hadd_epi32(__m256i a, __m256i b)", {"esize": 32}),
        Form("xmm", "__m128i _mm_hadd_epi32(__m128i a, __m128i b)", {"esize": 32}),
    ), feature="avx2", ref=f"{_SDM} PHADDW/PHADDD; Intrinsics Guide _mm256_hadd_epi32"),
    Instruction("vpermq", permq, (
        Form("ymm", "__m256i _mm256_permute4x64_epi64(__m256i a, const int imm8)", imm=tuple(range(256))),
    ), feature="avx2", ref=f"{_SDM} VPERMQ; Intrinsics Guide _mm256_permute4x64_epi64"),
    Instruction("vperm2i128", perm2x128, (
        Form("ymm", "__m256i _mm256_permute2x128_si256(__m256i a, __m256i b, const int imm8)", imm=tuple(range(256))),
    ), feature="avx2", ref=f"{_SDM} VPERM2I128; Intrinsics Guide _mm256_permute2x128_si256"),
    Instruction("vextracti128", extract128, (
        Form("ymm", "__m128i _mm256_extracti128_si256(__m256i a, const int imm8)", imm=(0, 1)),
    ), feature="avx2", ref=f"{_SDM} VEXTRACTI128; Intrinsics Guide _mm256_extracti128_si256"),
    Instruction("vpsrlw", srl, (
        Form("ymm", "__m256i _mm256_srli_epi16(__m256i a, int imm8)", {"esize": 16}, imm=_SHIFT16),
        Form("xmm", "__m128i _mm_srli_epi16(__m128i a, int imm8)", {"esize": 16}, imm=_SHIFT16),
    ), feature="avx2", ref=f"{_SDM} PSRLW/PSRLD/PSRLQ; Intrinsics Guide _mm256_srli_epi16"),
    Instruction("vpsrlq", srl, (
        Form("ymm", "__m256i _mm256_srli_epi64(__m256i a, int imm8)", {"esize": 64}, imm=_SHIFT64),
        Form("xmm", "__m128i _mm_srli_epi64(__m128i a, int imm8)", {"esize": 64}, imm=_SHIFT64),
    ), feature="avx2", ref=f"{_SDM} PSRLW/PSRLD/PSRLQ; Intrinsics Guide _mm256_srli_epi64"),
    Instruction("vpsllw", sll, (
        Form("ymm", "__m256i _mm256_slli_epi16(__m256i a, int imm8)", {"esize": 16}, imm=_SHIFT16),
        Form("xmm", "__m128i _mm_slli_epi16(__m128i a, int imm8)", {"esize": 16}, imm=_SHIFT16),
    ), feature="avx2", ref=f"{_SDM} PSLLW/PSLLD/PSLLQ; Intrinsics Guide _mm256_slli_epi16"),
    Instruction("vpmovzxbw", movzx, (
        Form("ymm", "__m256i _mm256_cvtepu8_epi16(__m128i a)", {"esize": 8, "vl": 256}),
        Form("xmm", "__m128i _mm_cvtepu8_epi16(__m128i a)", {"esize": 8, "vl": 128}),
    ), feature="avx2", ref=f"{_SDM} PMOVZX; Intrinsics Guide _mm256_cvtepu8_epi16"),
    Instruction("vpmovsxbw", movsx, (
        Form("ymm", "__m256i _mm256_cvtepi8_epi16(__m128i a)", {"esize": 8, "vl": 256}),
        Form("xmm", "__m128i _mm_cvtepi8_epi16(__m128i a)", {"esize": 8, "vl": 128}),
    ), feature="avx2", ref=f"{_SDM} PMOVSX; Intrinsics Guide _mm256_cvtepi8_epi16"),
    Instruction("vpbroadcastd", broadcast, (
        Form("ymm", "__m256i _mm256_broadcastd_epi32(__m128i a)", {"esize": 32, "vl": 256}),
        Form("xmm", "__m128i _mm_broadcastd_epi32(__m128i a)", {"esize": 32, "vl": 128}),
    ), feature="avx2", ref=f"{_SDM} VPBROADCAST; Intrinsics Guide _mm256_broadcastd_epi32"),
)

ISA = _ISA(
    name="avx2",
    description="x86 AVX2 integer SIMD (+AVX-VNNI), run natively",
    header="<immintrin.h>",
    instructions=INSTRUCTIONS,
    toolchain=Toolchain("gcc", ("-O1", "-mavx2", "-mavxvnni"), apt_packages=("gcc",)),
    module=sys.modules[__name__],
)
