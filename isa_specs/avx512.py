"""Intel AVX-512 integer instructions (F, BW, VL, VNNI, VPOPCNTDQ, BITALG), run natively.

Each row follows the instruction's Operation pseudocode in the Intel 64 and IA-32 Architectures
Software Developer's Manual, Vol. 2 (SDM), and the matching entry of the Intel Intrinsics Guide.
Forms are named after the register they write: ``zmm`` (512-bit), ``ymm``/``xmm`` (256/128-bit
AVX-512VL encodings). Only unmasked forms are listed. Vector width is never a parameter: it is the
width of the operands, so one semantic serves ``zmm``, ``ymm`` and ``xmm``; element width is the
``esize`` parameter.

Immediates are written ``const int imm8`` in every prototype (the guide spells some of them
``unsigned int`` or ``_MM_PERM_ENUM``; the C call is the same), and ``imm=`` lists the values that
select distinct behaviours (e.g. shift counts ``1 .. esize-1``; larger counts are encodable and
give the all-zero / all-sign result the semantics also handles).
"""
from __future__ import annotations

import sys

from isa_specs.instruction import Form, Instruction
from isa_specs.isa import ISA as _ISA, Toolchain
from isa_specs.lanes import lanewise, mask, sat_signed, sat_unsigned, total, width

# ---------------------------------------------------------------- bitwise logic


def and_(B, a, b):
    """VPANDQ: DEST := SRC1 BITWISE AND SRC2."""
    return B.and_(a, b)


def andn(B, a, b):
    """VPANDNQ: DEST := (NOT SRC1) BITWISE AND SRC2."""
    return B.and_(B.not_(a), b)


def or_(B, a, b):
    """VPORQ: DEST := SRC1 BITWISE OR SRC2."""
    return B.or_(a, b)


def xor(B, a, b):
    """VPXORQ: DEST := SRC1 BITWISE XOR SRC2."""
    return B.xor(a, b)


def ternlog(B, a, b, c, imm):
    """VPTERNLOGQ: for every bit j, DEST[j] := imm8[(SRC1[j] << 2) | (SRC2[j] << 1) | SRC3[j]].

    Written as the OR of the minterms selected by ``imm`` (the truth table), so it is exact on any
    width and stays a purely bitwise Z3 term. SRC1 is the intrinsic's ``a`` (also the destination).
    """
    terms = []
    for i in range(8):
        if imm >> i & 1:
            pick = lambda x, bit: x if i & bit else B.not_(x)
            terms.append(B.and_(B.and_(pick(a, 4), pick(b, 2)), pick(c, 1)))
    if not terms:
        return B.const(0, width(B, a))
    out = terms[0]
    for t in terms[1:]:
        out = B.or_(out, t)
    return out


# ---------------------------------------------------------------- bit counting


def popcnt(B, a, esize):
    """VPOPCNTB/W/D/Q: DEST.elem[j] := POPCNT(SRC.elem[j]) for esize-bit elements."""
    return lanewise(B, esize, B.popcount, a)


# ---------------------------------------------------------------- arithmetic


def add(B, a, b, esize):
    """VPADDB/W/D/Q: DEST.elem[j] := SRC1.elem[j] + SRC2.elem[j], wrapping (no saturation)."""
    return lanewise(B, esize, B.add, a, b)


def sub(B, a, b, esize):
    """VPSUBB/W/D/Q: DEST.elem[j] := SRC1.elem[j] - SRC2.elem[j], wrapping."""
    return lanewise(B, esize, B.sub, a, b)


def mullo(B, a, b, esize):
    """VPMULLW/VPMULLD: DEST.elem[j] := low esize bits of SRC1.elem[j] * SRC2.elem[j]."""
    return lanewise(B, esize, B.mul, a, b)


def _mul_even(B, a, b, signed):
    ext = B.sext if signed else B.zext
    return lanewise(B, 64, lambda x, y: B.mul(ext(B.trunc(x, 32), 64), ext(B.trunc(y, 32), 64)), a, b)


def pmuldq(B, a, b):
    """VPMULDQ: DEST.qword[j] := SignExtend64(SRC1.dword[2j]) * SignExtend64(SRC2.dword[2j])."""
    return _mul_even(B, a, b, True)


def pmuludq(B, a, b):
    """VPMULUDQ: DEST.qword[j] := ZeroExtend64(SRC1.dword[2j]) * ZeroExtend64(SRC2.dword[2j])."""
    return _mul_even(B, a, b, False)


def maxs(B, a, b, esize):
    """VPMAXSW/D: DEST.elem[j] := SRC1.elem[j] > SRC2.elem[j] (signed) ? SRC1.elem[j] : SRC2.elem[j]."""
    return lanewise(B, esize, lambda x, y: B.ite(B.slt(y, x), x, y), a, b)


def mins(B, a, b, esize):
    """VPMINSW/D: DEST.elem[j] := SRC1.elem[j] < SRC2.elem[j] (signed) ? SRC1.elem[j] : SRC2.elem[j]."""
    return lanewise(B, esize, lambda x, y: B.ite(B.slt(x, y), x, y), a, b)


def maxu(B, a, b, esize):
    """VPMAXUB: DEST.elem[j] := SRC1.elem[j] > SRC2.elem[j] (unsigned) ? SRC1.elem[j] : SRC2.elem[j]."""
    return lanewise(B, esize, lambda x, y: B.ite(B.ult(y, x), x, y), a, b)


def minu(B, a, b, esize):
    """VPMINUB: DEST.elem[j] := SRC1.elem[j] < SRC2.elem[j] (unsigned) ? SRC1.elem[j] : SRC2.elem[j]."""
    return lanewise(B, esize, lambda x, y: B.ite(B.ult(x, y), x, y), a, b)


def sadbw(B, a, b):
    """VPSADBW: per qword j, DEST.qword[j] := ZeroExtend64(sum over i < 8 of ABS(SRC1.byte[8j+i] -
    SRC2.byte[8j+i])), the bytes taken as unsigned; the sum fits in 16 bits, bits 63:16 are zero."""
    def qword(x, y):
        diffs = []
        for p, q in zip(B.lanes(x, 8), B.lanes(y, 8)):
            p16, q16 = B.zext(p, 16), B.zext(q, 16)
            diffs.append(B.ite(B.ult(p16, q16), B.sub(q16, p16), B.sub(p16, q16)))
        return B.zext(total(B, diffs), 64)
    return lanewise(B, 64, qword, a, b)


# ---------------------------------------------------------------- multiply-accumulate (dot products)


def maddubsw(B, a, b):
    """VPMADDUBSW: DEST.word[j] := SaturateToSignedWord(SRC2.byte[2j+1] * SRC1.byte[2j+1] +
    SRC2.byte[2j] * SRC1.byte[2j]), SRC1 = ``a`` bytes unsigned, SRC2 = ``b`` bytes signed.
    Saturating: 255*127*2 = 64770 clamps to 32767."""
    def word(x, y):
        prods = [B.mul(B.zext(p, 32), B.sext(q, 32)) for p, q in zip(B.lanes(x, 8), B.lanes(y, 8))]
        return sat_signed(B, total(B, prods), 16)
    return lanewise(B, 16, word, a, b)


def maddwd(B, a, b):
    """VPMADDWD: DEST.dword[j] := SRC1.word[2j+1] * SRC2.word[2j+1] + SRC1.word[2j] * SRC2.word[2j],
    signed words, 32-bit wrap-around (only -32768*-32768*2 = 2**31 wraps, to 0x80000000)."""
    def dword(x, y):
        return total(B, [B.mul(B.sext(p, 32), B.sext(q, 32)) for p, q in zip(B.lanes(x, 16), B.lanes(y, 16))])
    return lanewise(B, 32, dword, a, b)


def _dot(B, src, a, b, esize, a_signed, b_signed, saturate):
    """DEST.dword[j] := SRC.dword[j] + sum of the 32/esize products of SRC1/SRC2 esize-bit elements
    in dword j, each extended per its signedness; wrap-around, or Saturate32 when ``saturate``."""
    acc_w = 64 if saturate else 32      # 64 bits hold the exact sum before saturation
    ea = B.sext if a_signed else B.zext
    eb = B.sext if b_signed else B.zext

    def dword(s, x, y):
        prods = [B.mul(ea(p, acc_w), eb(q, acc_w)) for p, q in zip(B.lanes(x, esize), B.lanes(y, esize))]
        acc = total(B, [B.sext(s, acc_w), *prods])
        return sat_signed(B, acc, 32) if saturate else acc
    return lanewise(B, 32, dword, src, a, b)


def dpbusd(B, src, a, b):
    """VPDPBUSD: tmp_i := ZeroExtend16(a.byte[4j+i]) * SignExtend16(b.byte[4j+i]) for i < 4;
    DEST.dword[j] := src.dword[j] + tmp0 + tmp1 + tmp2 + tmp3, 32-bit wrap-around (no saturation)."""
    return _dot(B, src, a, b, 8, False, True, saturate=False)


def dpbusds(B, src, a, b):
    """VPDPBUSDS: as VPDPBUSD but DEST.dword[j] := Saturate32(src.dword[j] + tmp0 + ... + tmp3),
    signed saturation of the exact sum."""
    return _dot(B, src, a, b, 8, False, True, saturate=True)


def dpwssd(B, src, a, b):
    """VPDPWSSD: tmp_i := SignExtend32(a.word[2j+i]) * SignExtend32(b.word[2j+i]) for i < 2;
    DEST.dword[j] := src.dword[j] + tmp0 + tmp1, 32-bit wrap-around."""
    return _dot(B, src, a, b, 16, True, True, saturate=False)


def dpwssds(B, src, a, b):
    """VPDPWSSDS: as VPDPWSSD but DEST.dword[j] := Saturate32(src.dword[j] + tmp0 + tmp1)."""
    return _dot(B, src, a, b, 16, True, True, saturate=True)


# ---------------------------------------------------------------- shifts by immediate


def shl(B, a, esize, imm):
    """VPSLLW/D/Q (imm8): DEST.elem[j] := imm8 > esize-1 ? 0 : SRC.elem[j] << imm8."""
    return lanewise(B, esize, lambda x: B.shl(x, imm), a)


def lshr(B, a, esize, imm):
    """VPSRLW/D/Q (imm8): DEST.elem[j] := imm8 > esize-1 ? 0 : SRC.elem[j] >> imm8 (zero fill)."""
    return lanewise(B, esize, lambda x: B.lshr(x, imm), a)


def ashr(B, a, esize, imm):
    """VPSRAW/D/Q (imm8): DEST.elem[j] := SignExtend(SRC.elem[j]) >> MIN(imm8, esize) (sign fill)."""
    return lanewise(B, esize, lambda x: B.ashr(x, imm), a)


# ---------------------------------------------------------------- widening and narrowing


def movsx(B, a, esize, dsize):
    """VPMOVSXBW/BD/WD: DEST.elem[j] := SignExtend(SRC.elem[j]) (the source is the narrower register)."""
    return B.join([B.sext(x, dsize) for x in B.lanes(a, esize)])


def movzx(B, a, esize, dsize):
    """VPMOVZXBW/BD/WD: DEST.elem[j] := ZeroExtend(SRC.elem[j]) (the source is the narrower register)."""
    return B.join([B.zext(x, dsize) for x in B.lanes(a, esize)])


def movtrunc(B, a, esize, dsize):
    """VPMOVWB/DB: DEST.elem[j] := TruncateToDsize(SRC.elem[j])."""
    return B.join([B.trunc(x, dsize) for x in B.lanes(a, esize)])


def movsat_s(B, a, esize, dsize):
    """VPMOVSDB: DEST.elem[j] := SaturateSignedToDsize(SRC.elem[j]) (signed source)."""
    return B.join([sat_signed(B, x, dsize) for x in B.lanes(a, esize)])


def movsat_u(B, a, esize, dsize):
    """VPMOVUSDB: DEST.elem[j] := SaturateUnsignedToDsize(SRC.elem[j]) (source taken as unsigned:
    values above 2**dsize - 1 clamp to it)."""
    top = B.const(mask(dsize), esize)
    return B.join([B.trunc(B.ite(B.ult(top, x), top, x), dsize) for x in B.lanes(a, esize)])


def _pack(B, a, b, esize, clamp):
    """Per 128-bit lane: DEST := clamp(SRC1 elements of the lane), then clamp(SRC2 elements)."""
    per = 128 // esize
    xa, xb = B.lanes(a, esize), B.lanes(b, esize)
    out = []
    for lane in range(len(xa) // per):
        for src in (xa, xb):
            out += [clamp(x, esize // 2) for x in src[lane * per:(lane + 1) * per]]
    return B.join(out)


def packss(B, a, b, esize):
    """VPACKSSWB/DW: per 128-bit lane l, DEST.half[l] := SaturateSigned(SRC1 lane l elements) ::
    SaturateSigned(SRC2 lane l elements), each esize-bit signed element clamped to esize/2 bits."""
    return _pack(B, a, b, esize, lambda x, w: sat_signed(B, x, w))


def packus(B, a, b, esize):
    """VPACKUSWB/DW: as VPACKSS but each signed element is clamped to the unsigned esize/2 range."""
    return _pack(B, a, b, esize, lambda x, w: sat_unsigned(B, x, w))


# ---------------------------------------------------------------- data movement


def broadcast(B, a, esize, vl):
    """VPBROADCASTB/W/D/Q, VBROADCASTI32X4/I64X4: every esize-bit element of the vl-bit DEST :=
    SRC.elem[0] (``_mm512_set1_epi32(x)`` is VPBROADCASTD of x in an xmm)."""
    return B.join([B.lanes(a, esize)[0]] * (vl // esize))


def pshufd(B, a, imm):
    """VPSHUFD: in each 128-bit lane, DEST.dword[j] := SRC.dword[imm8[2j+1:2j]] of the same lane."""
    d = B.lanes(a, 32)
    return B.join([d[4 * (i // 4) + (imm >> 2 * (i % 4) & 3)] for i in range(len(d))])


def pshufb(B, a, b):
    """VPSHUFB: in each 128-bit lane, DEST.byte[i] := b.byte[i][7] ? 0 : a.byte[b.byte[i][3:0]] of
    the same lane."""
    xa, out = B.lanes(a, 8), []
    for i, ctl in enumerate(B.lanes(b, 8)):
        base = 16 * (i // 16)
        picked = B.select(B.extract(ctl, 0, 4), xa[base:base + 16])
        out.append(B.ite(B.ult(ctl, B.const(0x80, 8)), picked, B.const(0, 8)))
    return B.join(out)


def unpack(B, a, b, esize, high):
    """VPUNPCKL*/H* (BW, WD, DQ, QDQ): in each 128-bit lane, interleave the low (``high`` = 0) or high
    (``high`` = 1) half of the lane's esize-bit elements: SRC1.e[k], SRC2.e[k], SRC1.e[k+1], ..."""
    per = 128 // esize
    xa, xb = B.lanes(a, esize), B.lanes(b, esize)
    out = []
    for lane in range(len(xa) // per):
        start = lane * per + high * per // 2
        for k in range(start, start + per // 2):
            out += [xa[k], xb[k]]
    return B.join(out)


def permvar(B, idx, a):
    """VPERMD: DEST.dword[j] := SRC.dword[idx.dword[j][log2(n)-1:0]] across the whole vector (n dwords)."""
    xa = B.lanes(a, 32)
    bits = (len(xa) - 1).bit_length()
    return B.join([B.select(B.extract(i, 0, bits), xa) for i in B.lanes(idx, 32)])


def permt2(B, a, idx, b, esize):
    """VPERMT2D/Q (= VPERMI2D/Q): with n elements per vector, off := idx.e[j][log2(n)-1:0] and
    DEST.e[j] := idx.e[j][log2(n)] ? b.e[off] : a.e[off]; i.e. a lookup in the 2n-entry table a::b."""
    table = B.lanes(a, esize) + B.lanes(b, esize)
    bits = (len(table) - 1).bit_length()
    return B.join([B.select(B.extract(i, 0, bits), table) for i in B.lanes(idx, esize)])


def align(B, a, b, esize, imm):
    """VALIGND/Q: temp := a :: b (a in the upper half); DEST := (temp >> (imm8[log2(n)-1:0] * esize))
    truncated to the vector width, n elements per vector."""
    xb, xa = B.lanes(b, esize), B.lanes(a, esize)
    n = len(xa)
    temp = xb + xa
    shift = imm & (n - 1)
    return B.join(temp[shift:shift + n])


def shuffle_chunks(B, a, b, imm):
    """VSHUFI64X2: dst.128[0,1] = a.128[imm[1:0]], a.128[imm[3:2]]; dst.128[2,3] = b.128[imm[5:4]], b.128[imm[7:6]]."""
    ca, cb = B.lanes(a, 128), B.lanes(b, 128)
    return B.join([ca[imm & 3], ca[(imm >> 2) & 3], cb[(imm >> 4) & 3], cb[(imm >> 6) & 3]])


def extract_part(B, a, part, imm):
    """VEXTRACTI32X4/I64X4: DEST := SRC.part-bit chunk[imm8 mod (vl/part)]."""
    chunks = B.lanes(a, part)
    return chunks[imm % len(chunks)]


def insert_part(B, a, b, part, imm):
    """VINSERTI32X4/I64X4: DEST := SRC1 with its part-bit chunk[imm8 mod (vl/part)] replaced by SRC2."""
    chunks = B.lanes(a, part)
    chunks[imm % len(chunks)] = b
    return B.join(chunks)


# ---------------------------------------------------------------- table

_SDM = "Intel SDM Vol. 2"
_IMM8 = tuple(range(256))
# immediates: every imm8 value, or the shift counts 1 .. esize-1 (see the module docstring)
_SHIFT16, _SHIFT32, _SHIFT64 = tuple(range(1, 16)), tuple(range(1, 32)), tuple(range(1, 64))

INSTRUCTIONS = (
    # ---- logic
    Instruction("vpandq", and_, (
        Form("zmm", "__m512i _mm512_and_epi64(__m512i a, __m512i b)"),
    ), feature="avx512f", ref=f"{_SDM}, PAND—Logical AND (VPANDQ)", commutative=True),
    Instruction("vpandnq", andn, (
        Form("zmm", "__m512i _mm512_andnot_epi64(__m512i a, __m512i b)"),
    ), feature="avx512f", ref=f"{_SDM}, PANDN—Logical AND NOT (VPANDNQ)"),
    Instruction("vporq", or_, (
        Form("zmm", "__m512i _mm512_or_epi64(__m512i a, __m512i b)"),
    ), feature="avx512f", ref=f"{_SDM}, POR—Bitwise Logical OR (VPORQ)", commutative=True),
    Instruction("vpxorq", xor, (
        Form("zmm", "__m512i _mm512_xor_epi64(__m512i a, __m512i b)"),
    ), feature="avx512f", ref=f"{_SDM}, PXOR—Logical Exclusive OR (VPXORQ)", commutative=True),
    Instruction("vpternlogq", ternlog, (
        Form("zmm", "__m512i _mm512_ternarylogic_epi64(__m512i a, __m512i b, __m512i c, const int imm8)", imm=_IMM8),
        Form("ymm", "__m256i _mm256_ternarylogic_epi64(__m256i a, __m256i b, __m256i c, const int imm8)", imm=_IMM8),
        Form("xmm", "__m128i _mm_ternarylogic_epi64(__m128i a, __m128i b, __m128i c, const int imm8)", imm=_IMM8),
    ), feature="avx512f", ref=f"{_SDM}, VPTERNLOGD/VPTERNLOGQ—Bitwise Ternary Logic"),
    # ---- popcount
    Instruction("vpopcntb", popcnt, (
        Form("zmm", "__m512i _mm512_popcnt_epi8(__m512i a)", {"esize": 8}),
        Form("ymm", "__m256i _mm256_popcnt_epi8(__m256i a)", {"esize": 8}),
        Form("xmm", "__m128i _mm_popcnt_epi8(__m128i a)", {"esize": 8}),
    ), feature="avx512bitalg", ref=f"{_SDM}, VPOPCNT—Return the Count of Number of Bits Set to 1 in BYTE/WORD/DWORD/QWORD"),
    Instruction("vpopcntw", popcnt, (
        Form("zmm", "__m512i _mm512_popcnt_epi16(__m512i a)", {"esize": 16}),
        Form("ymm", "__m256i _mm256_popcnt_epi16(__m256i a)", {"esize": 16}),
        Form("xmm", "__m128i _mm_popcnt_epi16(__m128i a)", {"esize": 16}),
    ), feature="avx512bitalg", ref=f"{_SDM}, VPOPCNT—Return the Count of Number of Bits Set to 1 in BYTE/WORD/DWORD/QWORD"),
    Instruction("vpopcntd", popcnt, (
        Form("zmm", "__m512i _mm512_popcnt_epi32(__m512i a)", {"esize": 32}),
        Form("ymm", "__m256i _mm256_popcnt_epi32(__m256i a)", {"esize": 32}),
        Form("xmm", "__m128i _mm_popcnt_epi32(__m128i a)", {"esize": 32}),
    ), feature="avx512vpopcntdq",
       ref=f"{_SDM}, VPOPCNT—Return the Count of Number of Bits Set to 1 in BYTE/WORD/DWORD/QWORD"),
    Instruction("vpopcntq", popcnt, (
        Form("zmm", "__m512i _mm512_popcnt_epi64(__m512i a)", {"esize": 64}),
        Form("ymm", "__m256i _mm256_popcnt_epi64(__m256i a)", {"esize": 64}),
        Form("xmm", "__m128i _mm_popcnt_epi64(__m128i a)", {"esize": 64}),
    ), feature="avx512vpopcntdq",
       ref=f"{_SDM}, VPOPCNT—Return the Count of Number of Bits Set to 1 in BYTE/WORD/DWORD/QWORD"),
    # ---- add / sub / mul / min / max
    Instruction("vpaddb", add, (
        Form("zmm", "__m512i _mm512_add_epi8(__m512i a, __m512i b)", {"esize": 8}),
    ), feature="avx512bw", ref=f"{_SDM}, PADDB/PADDW/PADDD/PADDQ—Add Packed Integers", commutative=True),
    Instruction("vpaddw", add, (
        Form("zmm", "__m512i _mm512_add_epi16(__m512i a, __m512i b)", {"esize": 16}),
    ), feature="avx512bw", ref=f"{_SDM}, PADDB/PADDW/PADDD/PADDQ—Add Packed Integers", commutative=True),
    Instruction("vpaddd", add, (
        Form("zmm", "__m512i _mm512_add_epi32(__m512i a, __m512i b)", {"esize": 32}),
    ), feature="avx512f", ref=f"{_SDM}, PADDB/PADDW/PADDD/PADDQ—Add Packed Integers", commutative=True),
    Instruction("vpaddq", add, (
        Form("zmm", "__m512i _mm512_add_epi64(__m512i a, __m512i b)", {"esize": 64}),
    ), feature="avx512f", ref=f"{_SDM}, PADDB/PADDW/PADDD/PADDQ—Add Packed Integers", commutative=True),
    Instruction("vpsubb", sub, (
        Form("zmm", "__m512i _mm512_sub_epi8(__m512i a, __m512i b)", {"esize": 8}),
    ), feature="avx512bw", ref=f"{_SDM}, PSUBB/PSUBW/PSUBD—Subtract Packed Integers"),
    Instruction("vpsubw", sub, (
        Form("zmm", "__m512i _mm512_sub_epi16(__m512i a, __m512i b)", {"esize": 16}),
    ), feature="avx512bw", ref=f"{_SDM}, PSUBB/PSUBW/PSUBD—Subtract Packed Integers"),
    Instruction("vpsubd", sub, (
        Form("zmm", "__m512i _mm512_sub_epi32(__m512i a, __m512i b)", {"esize": 32}),
    ), feature="avx512f", ref=f"{_SDM}, PSUBB/PSUBW/PSUBD—Subtract Packed Integers"),
    Instruction("vpsubq", sub, (
        Form("zmm", "__m512i _mm512_sub_epi64(__m512i a, __m512i b)", {"esize": 64}),
    ), feature="avx512f", ref=f"{_SDM}, PSUBQ—Subtract Packed Quadword Integers"),
    Instruction("vpmullw", mullo, (
        Form("zmm", "__m512i _mm512_mullo_epi16(__m512i a, __m512i b)", {"esize": 16}),
    ), feature="avx512bw", ref=f"{_SDM}, PMULLW—Multiply Packed Signed Integers and Store Low Result", commutative=True),
    Instruction("vpmulld", mullo, (
        Form("zmm", "__m512i _mm512_mullo_epi32(__m512i a, __m512i b)", {"esize": 32}),
    ), feature="avx512f", ref=f"{_SDM}, PMULLD/PMULLQ—Multiply Packed Integers and Store Low Result", commutative=True),
    Instruction("vpmuldq", pmuldq, (
        Form("zmm", "__m512i _mm512_mul_epi32(__m512i a, __m512i b)"),
    ), feature="avx512f", ref=f"{_SDM}, PMULDQ—Multiply Packed Doubleword Integers", commutative=True),
    Instruction("vpmuludq", pmuludq, (
        Form("zmm", "__m512i _mm512_mul_epu32(__m512i a, __m512i b)"),
    ), feature="avx512f", ref=f"{_SDM}, PMULUDQ—Multiply Packed Unsigned Doubleword Integers", commutative=True),
    Instruction("vpmaxsw", maxs, (
        Form("zmm", "__m512i _mm512_max_epi16(__m512i a, __m512i b)", {"esize": 16}),
    ), feature="avx512bw", ref=f"{_SDM}, PMAXSB/PMAXSW/PMAXSD/PMAXSQ—Maximum of Packed Signed Integers", commutative=True),
    Instruction("vpmaxsd", maxs, (
        Form("zmm", "__m512i _mm512_max_epi32(__m512i a, __m512i b)", {"esize": 32}),
    ), feature="avx512f", ref=f"{_SDM}, PMAXSB/PMAXSW/PMAXSD/PMAXSQ—Maximum of Packed Signed Integers", commutative=True),
    Instruction("vpminsw", mins, (
        Form("zmm", "__m512i _mm512_min_epi16(__m512i a, __m512i b)", {"esize": 16}),
    ), feature="avx512bw", ref=f"{_SDM}, PMINSB/PMINSW—Minimum of Packed Signed Integers", commutative=True),
    Instruction("vpminsd", mins, (
        Form("zmm", "__m512i _mm512_min_epi32(__m512i a, __m512i b)", {"esize": 32}),
    ), feature="avx512f", ref=f"{_SDM}, PMINSD/PMINSQ—Minimum of Packed Signed Integers", commutative=True),
    Instruction("vpmaxub", maxu, (
        Form("zmm", "__m512i _mm512_max_epu8(__m512i a, __m512i b)", {"esize": 8}),
    ), feature="avx512bw", ref=f"{_SDM}, PMAXUB/PMAXUW—Maximum of Packed Unsigned Integers", commutative=True),
    Instruction("vpminub", minu, (
        Form("zmm", "__m512i _mm512_min_epu8(__m512i a, __m512i b)", {"esize": 8}),
    ), feature="avx512bw", ref=f"{_SDM}, PMINUB/PMINUW—Minimum of Packed Unsigned Integers", commutative=True),
    Instruction("vpsadbw", sadbw, (
        Form("zmm", "__m512i _mm512_sad_epu8(__m512i a, __m512i b)"),
    ), feature="avx512bw", ref=f"{_SDM}, PSADBW—Compute Sum of Absolute Differences", commutative=True),
    # ---- multiply-accumulate
    Instruction("vpmaddubsw", maddubsw, (
        Form("zmm", "__m512i _mm512_maddubs_epi16(__m512i a, __m512i b)"),
    ), feature="avx512bw", ref=f"{_SDM}, PMADDUBSW—Multiply and Add Packed Signed and Unsigned Bytes (saturating)"),
    Instruction("vpmaddwd", maddwd, (
        Form("zmm", "__m512i _mm512_madd_epi16(__m512i a, __m512i b)"),
    ), feature="avx512bw", ref=f"{_SDM}, PMADDWD—Multiply and Add Packed Integers (wrap-around)", commutative=True),
    Instruction("vpdpbusd", dpbusd, (
        Form("zmm", "__m512i _mm512_dpbusd_epi32(__m512i src, __m512i a, __m512i b)"),
        Form("ymm", "__m256i _mm256_dpbusd_epi32(__m256i src, __m256i a, __m256i b)"),
        Form("xmm", "__m128i _mm_dpbusd_epi32(__m128i src, __m128i a, __m128i b)"),
    ), feature="avx512vnni", ref=f"{_SDM}, VPDPBUSD—Multiply and Add Unsigned and Signed Bytes (wrap-around)"),
    Instruction("vpdpbusds", dpbusds, (
        Form("zmm", "__m512i _mm512_dpbusds_epi32(__m512i src, __m512i a, __m512i b)"),
        Form("ymm", "__m256i _mm256_dpbusds_epi32(__m256i src, __m256i a, __m256i b)"),
        Form("xmm", "__m128i _mm_dpbusds_epi32(__m128i src, __m128i a, __m128i b)"),
    ), feature="avx512vnni", ref=f"{_SDM}, VPDPBUSDS—Multiply and Add Unsigned and Signed Bytes With Saturation"),
    Instruction("vpdpwssd", dpwssd, (
        Form("zmm", "__m512i _mm512_dpwssd_epi32(__m512i src, __m512i a, __m512i b)"),
        Form("ymm", "__m256i _mm256_dpwssd_epi32(__m256i src, __m256i a, __m256i b)"),
        Form("xmm", "__m128i _mm_dpwssd_epi32(__m128i src, __m128i a, __m128i b)"),
    ), feature="avx512vnni", ref=f"{_SDM}, VPDPWSSD—Multiply and Add Signed Word Integers (wrap-around)"),
    Instruction("vpdpwssds", dpwssds, (
        Form("zmm", "__m512i _mm512_dpwssds_epi32(__m512i src, __m512i a, __m512i b)"),
        Form("ymm", "__m256i _mm256_dpwssds_epi32(__m256i src, __m256i a, __m256i b)"),
        Form("xmm", "__m128i _mm_dpwssds_epi32(__m128i src, __m128i a, __m128i b)"),
    ), feature="avx512vnni", ref=f"{_SDM}, VPDPWSSDS—Multiply and Add Signed Word Integers With Saturation"),
    # ---- shifts by immediate
    Instruction("vpsllw", shl, (
        Form("zmm", "__m512i _mm512_slli_epi16(__m512i a, const int imm8)", {"esize": 16}, imm=_SHIFT16),
    ), feature="avx512bw", ref=f"{_SDM}, PSLLW/PSLLD/PSLLQ—Shift Packed Data Left Logical"),
    Instruction("vpslld", shl, (
        Form("zmm", "__m512i _mm512_slli_epi32(__m512i a, const int imm8)", {"esize": 32}, imm=_SHIFT32),
    ), feature="avx512f", ref=f"{_SDM}, PSLLW/PSLLD/PSLLQ—Shift Packed Data Left Logical"),
    Instruction("vpsllq", shl, (
        Form("zmm", "__m512i _mm512_slli_epi64(__m512i a, const int imm8)", {"esize": 64}, imm=_SHIFT64),
    ), feature="avx512f", ref=f"{_SDM}, PSLLW/PSLLD/PSLLQ—Shift Packed Data Left Logical"),
    Instruction("vpsrlw", lshr, (
        Form("zmm", "__m512i _mm512_srli_epi16(__m512i a, const int imm8)", {"esize": 16}, imm=_SHIFT16),
    ), feature="avx512bw", ref=f"{_SDM}, PSRLW/PSRLD/PSRLQ—Shift Packed Data Right Logical"),
    Instruction("vpsrld", lshr, (
        Form("zmm", "__m512i _mm512_srli_epi32(__m512i a, const int imm8)", {"esize": 32}, imm=_SHIFT32),
    ), feature="avx512f", ref=f"{_SDM}, PSRLW/PSRLD/PSRLQ—Shift Packed Data Right Logical"),
    Instruction("vpsrlq", lshr, (
        Form("zmm", "__m512i _mm512_srli_epi64(__m512i a, const int imm8)", {"esize": 64}, imm=_SHIFT64),
    ), feature="avx512f", ref=f"{_SDM}, PSRLW/PSRLD/PSRLQ—Shift Packed Data Right Logical"),
    Instruction("vpsraw", ashr, (
        Form("zmm", "__m512i _mm512_srai_epi16(__m512i a, const int imm8)", {"esize": 16}, imm=_SHIFT16),
    ), feature="avx512bw", ref=f"{_SDM}, PSRAW/PSRAD/PSRAQ—Shift Packed Data Right Arithmetic"),
    Instruction("vpsrad", ashr, (
        Form("zmm", "__m512i _mm512_srai_epi32(__m512i a, const int imm8)", {"esize": 32}, imm=_SHIFT32),
    ), feature="avx512f", ref=f"{_SDM}, PSRAW/PSRAD/PSRAQ—Shift Packed Data Right Arithmetic"),
    Instruction("vpsraq", ashr, (
        Form("zmm", "__m512i _mm512_srai_epi64(__m512i a, const int imm8)", {"esize": 64}, imm=_SHIFT64),
    ), feature="avx512f", ref=f"{_SDM}, PSRAW/PSRAD/PSRAQ—Shift Packed Data Right Arithmetic"),
    # ---- widening / narrowing
    Instruction("vpmovsxbw", movsx, (
        Form("zmm", "__m512i _mm512_cvtepi8_epi16(__m256i a)", {"esize": 8, "dsize": 16}),
    ), feature="avx512bw", ref=f"{_SDM}, PMOVSX—Packed Move With Sign Extend"),
    Instruction("vpmovsxbd", movsx, (
        Form("zmm", "__m512i _mm512_cvtepi8_epi32(__m128i a)", {"esize": 8, "dsize": 32}),
    ), feature="avx512f", ref=f"{_SDM}, PMOVSX—Packed Move With Sign Extend"),
    Instruction("vpmovsxwd", movsx, (
        Form("zmm", "__m512i _mm512_cvtepi16_epi32(__m256i a)", {"esize": 16, "dsize": 32}),
    ), feature="avx512f", ref=f"{_SDM}, PMOVSX—Packed Move With Sign Extend"),
    Instruction("vpmovzxbw", movzx, (
        Form("zmm", "__m512i _mm512_cvtepu8_epi16(__m256i a)", {"esize": 8, "dsize": 16}),
    ), feature="avx512bw", ref=f"{_SDM}, PMOVZX—Packed Move With Zero Extend"),
    Instruction("vpmovzxbd", movzx, (
        Form("zmm", "__m512i _mm512_cvtepu8_epi32(__m128i a)", {"esize": 8, "dsize": 32}),
    ), feature="avx512f", ref=f"{_SDM}, PMOVZX—Packed Move With Zero Extend"),
    Instruction("vpmovzxwd", movzx, (
        Form("zmm", "__m512i _mm512_cvtepu16_epi32(__m256i a)", {"esize": 16, "dsize": 32}),
    ), feature="avx512f", ref=f"{_SDM}, PMOVZX—Packed Move With Zero Extend"),
    Instruction("vpmovwb", movtrunc, (
        Form("zmm", "__m256i _mm512_cvtepi16_epi8(__m512i a)", {"esize": 16, "dsize": 8}),
    ), feature="avx512bw", ref=f"{_SDM}, VPMOVWB/VPMOVSWB/VPMOVUSWB—Down Convert Word to Byte"),
    Instruction("vpmovdb", movtrunc, (
        Form("zmm", "__m128i _mm512_cvtepi32_epi8(__m512i a)", {"esize": 32, "dsize": 8}),
    ), feature="avx512f", ref=f"{_SDM}, VPMOVDB/VPMOVSDB/VPMOVUSDB—Down Convert DWord to Byte"),
    Instruction("vpmovsdb", movsat_s, (
        Form("zmm", "__m128i _mm512_cvtsepi32_epi8(__m512i a)", {"esize": 32, "dsize": 8}),
    ), feature="avx512f", ref=f"{_SDM}, VPMOVDB/VPMOVSDB/VPMOVUSDB—Down Convert DWord to Byte"),
    Instruction("vpmovusdb", movsat_u, (
        Form("zmm", "__m128i _mm512_cvtusepi32_epi8(__m512i a)", {"esize": 32, "dsize": 8}),
    ), feature="avx512f", ref=f"{_SDM}, VPMOVDB/VPMOVSDB/VPMOVUSDB—Down Convert DWord to Byte"),
    Instruction("vpacksswb", packss, (
        Form("zmm", "__m512i _mm512_packs_epi16(__m512i a, __m512i b)", {"esize": 16}),
    ), feature="avx512bw", ref=f"{_SDM}, PACKSSWB/PACKSSDW—Pack With Signed Saturation"),
    Instruction("vpackssdw", packss, (
        Form("zmm", "__m512i _mm512_packs_epi32(__m512i a, __m512i b)", {"esize": 32}),
    ), feature="avx512bw", ref=f"{_SDM}, PACKSSWB/PACKSSDW—Pack With Signed Saturation"),
    Instruction("vpackuswb", packus, (
        Form("zmm", "__m512i _mm512_packus_epi16(__m512i a, __m512i b)", {"esize": 16}),
    ), feature="avx512bw", ref=f"{_SDM}, PACKUSWB—Pack With Unsigned Saturation"),
    Instruction("vpackusdw", packus, (
        Form("zmm", "__m512i _mm512_packus_epi32(__m512i a, __m512i b)", {"esize": 32}),
    ), feature="avx512bw", ref=f"{_SDM}, PACKUSDW—Pack With Unsigned Saturation"),
    # ---- broadcast / shuffle / permute
    Instruction("vpbroadcastb", broadcast, (
        Form("zmm", "__m512i _mm512_broadcastb_epi8(__m128i a)", {"esize": 8, "vl": 512}),
    ), feature="avx512bw", ref=f"{_SDM}, VPBROADCAST—Load Integer and Broadcast"),
    Instruction("vpbroadcastw", broadcast, (
        Form("zmm", "__m512i _mm512_broadcastw_epi16(__m128i a)", {"esize": 16, "vl": 512}),
    ), feature="avx512bw", ref=f"{_SDM}, VPBROADCAST—Load Integer and Broadcast"),
    Instruction("vpbroadcastd", broadcast, (
        Form("zmm", "__m512i _mm512_broadcastd_epi32(__m128i a)", {"esize": 32, "vl": 512}),
    ), feature="avx512f", ref=f"{_SDM}, VPBROADCAST—Load Integer and Broadcast"),
    Instruction("vpbroadcastq", broadcast, (
        Form("zmm", "__m512i _mm512_broadcastq_epi64(__m128i a)", {"esize": 64, "vl": 512}),
    ), feature="avx512f", ref=f"{_SDM}, VPBROADCAST—Load Integer and Broadcast"),
    Instruction("vbroadcasti32x4", broadcast, (
        Form("zmm", "__m512i _mm512_broadcast_i32x4(__m128i a)", {"esize": 128, "vl": 512}),
    ), feature="avx512f", ref=f"{_SDM}, VPBROADCAST—Load Integer and Broadcast (VBROADCASTI32X4)"),
    Instruction("vbroadcasti64x4", broadcast, (
        Form("zmm", "__m512i _mm512_broadcast_i64x4(__m256i a)", {"esize": 256, "vl": 512}),
    ), feature="avx512f", ref=f"{_SDM}, VPBROADCAST—Load Integer and Broadcast (VBROADCASTI64X4)"),
    Instruction("vpshufd", pshufd, (
        Form("zmm", "__m512i _mm512_shuffle_epi32(__m512i a, const int imm8)", imm=_IMM8),
    ), feature="avx512f", ref=f"{_SDM}, PSHUFD—Shuffle Packed Doublewords"),
    Instruction("vpshufb", pshufb, (
        Form("zmm", "__m512i _mm512_shuffle_epi8(__m512i a, __m512i b)"),
    ), feature="avx512bw", ref=f"{_SDM}, PSHUFB—Packed Shuffle Bytes"),
    Instruction("vpunpcklbw", unpack, (
        Form("zmm", "__m512i _mm512_unpacklo_epi8(__m512i a, __m512i b)", {"esize": 8, "high": 0}),
    ), feature="avx512bw", ref=f"{_SDM}, PUNPCKLBW/PUNPCKLWD/PUNPCKLDQ/PUNPCKLQDQ—Unpack Low Data"),
    Instruction("vpunpcklwd", unpack, (
        Form("zmm", "__m512i _mm512_unpacklo_epi16(__m512i a, __m512i b)", {"esize": 16, "high": 0}),
    ), feature="avx512bw", ref=f"{_SDM}, PUNPCKLBW/PUNPCKLWD/PUNPCKLDQ/PUNPCKLQDQ—Unpack Low Data"),
    Instruction("vpunpckldq", unpack, (
        Form("zmm", "__m512i _mm512_unpacklo_epi32(__m512i a, __m512i b)", {"esize": 32, "high": 0}),
    ), feature="avx512f", ref=f"{_SDM}, PUNPCKLBW/PUNPCKLWD/PUNPCKLDQ/PUNPCKLQDQ—Unpack Low Data"),
    Instruction("vpunpcklqdq", unpack, (
        Form("zmm", "__m512i _mm512_unpacklo_epi64(__m512i a, __m512i b)", {"esize": 64, "high": 0}),
    ), feature="avx512f", ref=f"{_SDM}, PUNPCKLBW/PUNPCKLWD/PUNPCKLDQ/PUNPCKLQDQ—Unpack Low Data"),
    Instruction("vpunpckhbw", unpack, (
        Form("zmm", "__m512i _mm512_unpackhi_epi8(__m512i a, __m512i b)", {"esize": 8, "high": 1}),
    ), feature="avx512bw", ref=f"{_SDM}, PUNPCKHBW/PUNPCKHWD/PUNPCKHDQ/PUNPCKHQDQ—Unpack High Data"),
    Instruction("vpunpckhwd", unpack, (
        Form("zmm", "__m512i _mm512_unpackhi_epi16(__m512i a, __m512i b)", {"esize": 16, "high": 1}),
    ), feature="avx512bw", ref=f"{_SDM}, PUNPCKHBW/PUNPCKHWD/PUNPCKHDQ/PUNPCKHQDQ—Unpack High Data"),
    Instruction("vpunpckhdq", unpack, (
        Form("zmm", "__m512i _mm512_unpackhi_epi32(__m512i a, __m512i b)", {"esize": 32, "high": 1}),
    ), feature="avx512f", ref=f"{_SDM}, PUNPCKHBW/PUNPCKHWD/PUNPCKHDQ/PUNPCKHQDQ—Unpack High Data"),
    Instruction("vpunpckhqdq", unpack, (
        Form("zmm", "__m512i _mm512_unpackhi_epi64(__m512i a, __m512i b)", {"esize": 64, "high": 1}),
    ), feature="avx512f", ref=f"{_SDM}, PUNPCKHBW/PUNPCKHWD/PUNPCKHDQ/PUNPCKHQDQ—Unpack High Data"),
    Instruction("vpermd", permvar, (
        Form("zmm", "__m512i _mm512_permutexvar_epi32(__m512i idx, __m512i a)"),
    ), feature="avx512f", ref=f"{_SDM}, VPERMD/VPERMW—Permute Packed Doubleword/Word Elements"),
    Instruction("vpermt2d", permt2, (
        Form("zmm", "__m512i _mm512_permutex2var_epi32(__m512i a, __m512i idx, __m512i b)", {"esize": 32}),
        Form("ymm", "__m256i _mm256_permutex2var_epi32(__m256i a, __m256i idx, __m256i b)", {"esize": 32}),
        Form("xmm", "__m128i _mm_permutex2var_epi32(__m128i a, __m128i idx, __m128i b)", {"esize": 32}),
    ), feature="avx512f", ref=f"{_SDM}, VPERMT2W/D/Q/PS/PD—Full Permute From Two Tables Overwriting one Table"),
    Instruction("vpermt2q", permt2, (
        Form("zmm", "__m512i _mm512_permutex2var_epi64(__m512i a, __m512i idx, __m512i b)", {"esize": 64}),
        Form("ymm", "__m256i _mm256_permutex2var_epi64(__m256i a, __m256i idx, __m256i b)", {"esize": 64}),
        Form("xmm", "__m128i _mm_permutex2var_epi64(__m128i a, __m128i idx, __m128i b)", {"esize": 64}),
    ), feature="avx512f", ref=f"{_SDM}, VPERMT2W/D/Q/PS/PD—Full Permute From Two Tables Overwriting one Table"),
    Instruction("valignd", align, (
        Form("zmm", "__m512i _mm512_alignr_epi32(__m512i a, __m512i b, const int imm8)", {"esize": 32}, imm=tuple(range(16))),
        Form("ymm", "__m256i _mm256_alignr_epi32(__m256i a, __m256i b, const int imm8)", {"esize": 32}, imm=tuple(range(8))),
        Form("xmm", "__m128i _mm_alignr_epi32(__m128i a, __m128i b, const int imm8)", {"esize": 32}, imm=tuple(range(4))),
    ), feature="avx512f", ref=f"{_SDM}, VALIGND/VALIGNQ—Align Doubleword/Quadword Vectors"),
    Instruction("valignq", align, (
        Form("zmm", "__m512i _mm512_alignr_epi64(__m512i a, __m512i b, const int imm8)", {"esize": 64}, imm=tuple(range(8))),
        Form("ymm", "__m256i _mm256_alignr_epi64(__m256i a, __m256i b, const int imm8)", {"esize": 64}, imm=tuple(range(4))),
        Form("xmm", "__m128i _mm_alignr_epi64(__m128i a, __m128i b, const int imm8)", {"esize": 64}, imm=tuple(range(2))),
    ), feature="avx512f", ref=f"{_SDM}, VALIGND/VALIGNQ—Align Doubleword/Quadword Vectors"),
    Instruction("vshufi64x2", shuffle_chunks, (
        Form("zmm", "__m512i _mm512_shuffle_i64x2(__m512i a, __m512i b, const int imm8)", imm=_IMM8),
    ), feature="avx512f",
       ref=f"{_SDM}, VSHUFF32x4/VSHUFF64x2/VSHUFI32x4/VSHUFI64x2—Shuffle Packed Values at 128-Bit Granularity"),
    Instruction("vextracti32x4", extract_part, (
        Form("zmm", "__m128i _mm512_extracti32x4_epi32(__m512i a, const int imm8)", {"part": 128}, imm=tuple(range(4))),
    ), feature="avx512f",
       ref=f"{_SDM}, VEXTRACTI128/VEXTRACTI32x4/VEXTRACTI64x2/VEXTRACTI32x8/VEXTRACTI64x4—Extract Packed Integer Values"),
    Instruction("vextracti64x4", extract_part, (
        Form("zmm", "__m256i _mm512_extracti64x4_epi64(__m512i a, const int imm8)", {"part": 256}, imm=tuple(range(2))),
    ), feature="avx512f",
       ref=f"{_SDM}, VEXTRACTI128/VEXTRACTI32x4/VEXTRACTI64x2/VEXTRACTI32x8/VEXTRACTI64x4—Extract Packed Integer Values"),
    Instruction("vinserti32x4", insert_part, (
        Form("zmm", "__m512i _mm512_inserti32x4(__m512i a, __m128i b, const int imm8)", {"part": 128}, imm=tuple(range(4))),
    ), feature="avx512f",
       ref=f"{_SDM}, VINSERTI128/VINSERTI32x4/VINSERTI64x2/VINSERTI32x8/VINSERTI64x4—Insert Packed Integer Values"),
    Instruction("vinserti64x4", insert_part, (
        Form("zmm", "__m512i _mm512_inserti64x4(__m512i a, __m256i b, const int imm8)", {"part": 256}, imm=tuple(range(2))),
    ), feature="avx512f",
       ref=f"{_SDM}, VINSERTI128/VINSERTI32x4/VINSERTI64x2/VINSERTI32x8/VINSERTI64x4—Insert Packed Integer Values"),
)

ISA = _ISA(
    name="avx512",
    description="Intel AVX-512 F/BW/VL + VNNI, VPOPCNTDQ, BITALG integer instructions, run natively",
    header="<immintrin.h>",
    instructions=INSTRUCTIONS,
    toolchain=Toolchain("gcc", ("-O1", "-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512vnni",
                                "-mavx512vpopcntdq", "-mavx512bitalg"), apt_packages=("gcc",)),
    module=sys.modules[__name__],
)
