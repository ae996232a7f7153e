"""Arm A64 Advanced SIMD (NEON), with the dot-product (FEAT_DotProd) and int8 matrix-multiply
(FEAT_I8MM) extensions.

Each row follows the A64 instruction's pseudocode in the Arm Architecture Reference Manual for
A-profile architecture (DDI 0487 M.a.a, section C7.2; section numbers shift between issues, the
page titles do not). Forms use the assembler arrangement: ``8b``/``4h``/``2s``/``1d`` are 64-bit
D registers, ``16b``/``8h``/``4s``/``2d`` 128-bit Q registers; a widening form is named after its
destination (``uaddlp.8h`` reads ``16b``), an across-lanes reduction after its source. By-element
forms add the ACLE suffix of their indexed operand: ``_lane`` for a 64-bit, ``_laneq`` for a
128-bit register (``sdot.4s_lane`` is ``vdotq_lane_s32``).

Sign-agnostic instructions use the unsigned intrinsic (``vadd_u8`` rather than ``vadd_s8``): both
compile to the same instruction. ``esize`` is the element size the instruction's pseudocode calls
``esize``: the source element for widening instructions (``umull.8h`` has ``esize`` 8).
"""
from __future__ import annotations

import sys

from isa_specs.instruction import Form, Instruction
from isa_specs.isa import ISA as _ISA, Toolchain
from isa_specs.lanes import lanewise, total, width

# ---------------------------------------------------------------- shared pieces


def _half(B, v, esize, part):
    """Vpart[v, part, 64]: the elements of the lower (part 0) or upper (part 1) 64 bits of ``v``."""
    per = 64 // esize
    return B.lanes(v, esize)[part * per:(part + 1) * per]


def _accumulate(B, d, values):
    """Elem[d, e] + values[e], at the width of ``values``."""
    return B.join([B.add(acc, v) for acc, v in zip(B.lanes(d, width(B, values[0])), values)])


def _pairwise_long(B, n, esize, extend):
    """Extend(Elem[n, 2e]) + Extend(Elem[n, 2e+1]) at 2*esize bits, for each pair e."""
    src = [extend(x, 2 * esize) for x in B.lanes(n, esize)]
    return [B.add(src[2 * e], src[2 * e + 1]) for e in range(len(src) // 2)]


def _mull(B, n, m, esize, part, extend):
    """(Extend(Elem[n, e]) * Extend(Elem[m, e]))<2*esize-1:0> over the chosen halves of Vn, Vm."""
    return [B.mul(extend(a, 2 * esize), extend(b, 2 * esize))
            for a, b in zip(_half(B, n, esize, part), _half(B, m, esize, part))]


def _dot(B, d, n, m, extend_n, extend_m, imm):
    """Dot products of four 8-bit elements accumulated into each 32-bit lane of ``d``.

    for e: Elem[d, e, 32] += sum_{i<4} Extend_n(Elem[n, 4e+i, 8]) * Extend_m(Elem[m, 4k+i, 8]),
    with k = e for the vector form and k = index (the immediate) for the by-element form.
    """
    if imm is not None:
        m = B.join([B.lanes(m, 32)[imm]] * (width(B, n) // 32))

    def lane(acc, a, b):
        prods = [B.mul(extend_n(x, 32), extend_m(y, 32)) for x, y in zip(B.lanes(a, 8), B.lanes(b, 8))]
        return B.add(acc, total(B, prods))
    return lanewise(B, 32, lane, d, n, m)


# ---------------------------------------------------------------- semantics: bitwise


def and_(B, n, m): return B.and_(n, m)                        # AND: Vd = Vn AND Vm
def orr(B, n, m): return B.or_(n, m)                          # ORR: Vd = Vn OR Vm
def eor(B, n, m): return B.xor(n, m)                          # EOR: Vd = Vn EOR Vm
def bic(B, n, m): return B.and_(n, B.not_(m))                 # BIC: Vd = Vn AND NOT(Vm)
def orn(B, n, m): return B.or_(n, B.not_(m))                  # ORN: Vd = Vn OR NOT(Vm)
def mvn(B, n): return B.not_(n)                               # MVN (alias of NOT): Vd = NOT(Vn)
def cnt(B, n): return lanewise(B, 8, B.popcount, n)           # CNT: per-byte BitCount


# ---------------------------------------------------------------- semantics: add and subtract


def add(B, n, m, esize): return lanewise(B, esize, B.add, n, m)   # ADD: Elem[n, e] + Elem[m, e]
def sub(B, n, m, esize): return lanewise(B, esize, B.sub, n, m)   # SUB: Elem[n, e] - Elem[m, e]


def addp(B, n, m, esize):
    """ADDP (vector): concat = Vm:Vn; Elem[d, e] = Elem[concat, 2e] + Elem[concat, 2e+1]."""
    concat = B.lanes(n, esize) + B.lanes(m, esize)
    return B.join([B.add(concat[2 * e], concat[2 * e + 1]) for e in range(len(concat) // 2)])


def uaddlp(B, n, esize): return B.join(_pairwise_long(B, n, esize, B.zext))    # UADDLP
def saddlp(B, n, esize): return B.join(_pairwise_long(B, n, esize, B.sext))    # SADDLP


def uadalp(B, d, n, esize):
    """UADALP: Elem[d, e, 2*esize] += ZeroExtend(Elem[n, 2e]) + ZeroExtend(Elem[n, 2e+1])."""
    return _accumulate(B, d, _pairwise_long(B, n, esize, B.zext))


def sadalp(B, d, n, esize):
    """SADALP: Elem[d, e, 2*esize] += SignExtend(Elem[n, 2e]) + SignExtend(Elem[n, 2e+1])."""
    return _accumulate(B, d, _pairwise_long(B, n, esize, B.sext))


def addv(B, n, esize): return total(B, B.lanes(n, esize))   # ADDV: sum of all lanes, wrapping


def uaddlv(B, n, esize):
    """UADDLV: sum of all UInt(Elem[n, e]), truncated to 2*esize bits."""
    return total(B, [B.zext(x, 2 * esize) for x in B.lanes(n, esize)])


# ---------------------------------------------------------------- semantics: multiply


def mul(B, n, m, esize): return lanewise(B, esize, B.mul, n, m)   # MUL: (Elem[n, e] * Elem[m, e])<esize-1:0>


def mla(B, d, n, m, esize):
    """MLA (vector): Elem[d, e] += Elem[n, e] * Elem[m, e], wrapping."""
    return lanewise(B, esize, lambda acc, a, b: B.add(acc, B.mul(a, b)), d, n, m)


def umull(B, n, m, esize, part):
    """UMULL/UMULL2: UInt(Elem[n, e]) * UInt(Elem[m, e]) at 2*esize, lower (part 0) or upper half."""
    return B.join(_mull(B, n, m, esize, part, B.zext))


def smull(B, n, m, esize, part):
    """SMULL/SMULL2: SInt(Elem[n, e]) * SInt(Elem[m, e]) at 2*esize, lower (part 0) or upper half."""
    return B.join(_mull(B, n, m, esize, part, B.sext))


def umlal(B, d, n, m, esize, part):
    """UMLAL/UMLAL2: Elem[d, e, 2*esize] += UInt(Elem[n, e]) * UInt(Elem[m, e])."""
    return _accumulate(B, d, _mull(B, n, m, esize, part, B.zext))


def smlal(B, d, n, m, esize, part):
    """SMLAL/SMLAL2: Elem[d, e, 2*esize] += SInt(Elem[n, e]) * SInt(Elem[m, e])."""
    return _accumulate(B, d, _mull(B, n, m, esize, part, B.sext))


def sdot(B, d, n, m, imm=None): return _dot(B, d, n, m, B.sext, B.sext, imm)    # SDOT: SInt x SInt
def udot(B, d, n, m, imm=None): return _dot(B, d, n, m, B.zext, B.zext, imm)    # UDOT: UInt x UInt
def usdot(B, d, n, m, imm=None): return _dot(B, d, n, m, B.zext, B.sext, imm)   # USDOT: UInt(n) x SInt(m)
def sudot(B, d, n, m, imm): return _dot(B, d, n, m, B.sext, B.zext, imm)        # SUDOT: SInt(n) x UInt(m)


# ---------------------------------------------------------------- semantics: widen, move, permute


def uxtl(B, n, esize, part):
    """UXTL/UXTL2 (USHLL #0): Elem[d, e, 2*esize] = ZeroExtend(Elem[Vpart[n, part], e])."""
    return B.join([B.zext(x, 2 * esize) for x in _half(B, n, esize, part)])


def sxtl(B, n, esize, part):
    """SXTL/SXTL2 (SSHLL #0): Elem[d, e, 2*esize] = SignExtend(Elem[Vpart[n, part], e])."""
    return B.join([B.sext(x, 2 * esize) for x in _half(B, n, esize, part)])


def dup(B, n, esize, datasize, imm=None):
    """DUP (general): element = X[n]<esize-1:0>; DUP (element): element = Elem[Vn, index].
    Every esize lane of the datasize-bit result is element."""
    element = n if imm is None else B.lanes(n, esize)[imm]
    return B.join([element] * (datasize // esize))


def ext(B, n, m, imm):
    """EXT: concat = Vm:Vn; Vd = concat<position+datasize-1:position>, position = imm * 8."""
    concat = B.lanes(n, 8) + B.lanes(m, 8)
    return B.join(concat[imm:imm + width(B, n) // 8])


def zip_(B, n, m, esize, part):
    """ZIP1/ZIP2: base = part * pairs; Elem[d, 2p] = Elem[n, base+p]; Elem[d, 2p+1] = Elem[m, base+p]."""
    a, b = B.lanes(n, esize), B.lanes(m, esize)
    base = part * len(a) // 2
    return B.join([x for p in range(len(a) // 2) for x in (a[base + p], b[base + p])])


def uzp(B, n, m, esize, part):
    """UZP1/UZP2: zipped = Vm:Vn; Elem[d, e] = Elem[zipped, 2e+part]."""
    return B.join((B.lanes(n, esize) + B.lanes(m, esize))[part::2])


# ---------------------------------------------------------------- semantics: shifts by immediate


def shl(B, n, esize, imm): return lanewise(B, esize, lambda x: B.shl(x, imm), n)    # SHL: LSL(Elem[n, e], shift)
def ushr(B, n, esize, imm): return lanewise(B, esize, lambda x: B.lshr(x, imm), n)  # USHR: UInt(Elem[n, e]) >> shift
def sshr(B, n, esize, imm): return lanewise(B, esize, lambda x: B.ashr(x, imm), n)  # SSHR: SInt(Elem[n, e]) >> shift


# ---------------------------------------------------------------- table

INSTRUCTIONS = (
    # -- bitwise
    Instruction("and", and_, (
        Form("8b", "uint8x8_t vand_u8(uint8x8_t a, uint8x8_t b)"),
        Form("16b", "uint8x16_t vandq_u8(uint8x16_t a, uint8x16_t b)"),
    ), feature="neon", ref="C7.2.11 AND (vector)", commutative=True),
    Instruction("orr", orr, (
        Form("8b", "uint8x8_t vorr_u8(uint8x8_t a, uint8x8_t b)"),
        Form("16b", "uint8x16_t vorrq_u8(uint8x16_t a, uint8x16_t b)"),
    ), feature="neon", ref="C7.2.256 ORR (vector, register)", commutative=True),
    Instruction("eor", eor, (
        Form("8b", "uint8x8_t veor_u8(uint8x8_t a, uint8x8_t b)"),
        Form("16b", "uint8x16_t veorq_u8(uint8x16_t a, uint8x16_t b)"),
    ), feature="neon", ref="C7.2.43 EOR (vector)", commutative=True),
    Instruction("bic", bic, (
        Form("8b", "uint8x8_t vbic_u8(uint8x8_t a, uint8x8_t b)"),
        Form("16b", "uint8x16_t vbicq_u8(uint8x16_t a, uint8x16_t b)"),
    ), feature="neon", ref="C7.2.22 BIC (vector, register)"),
    Instruction("orn", orn, (
        Form("8b", "uint8x8_t vorn_u8(uint8x8_t a, uint8x8_t b)"),
        Form("16b", "uint8x16_t vornq_u8(uint8x16_t a, uint8x16_t b)"),
    ), feature="neon", ref="C7.2.254 ORN (vector)"),
    Instruction("mvn", mvn, (
        Form("8b", "uint8x8_t vmvn_u8(uint8x8_t a)"),
        Form("16b", "uint8x16_t vmvnq_u8(uint8x16_t a)"),
    ), feature="neon", ref="C7.2.250 MVN (alias of C7.2.253 NOT)"),
    Instruction("cnt", cnt, (
        Form("8b", "uint8x8_t vcnt_u8(uint8x8_t a)"),
        Form("16b", "uint8x16_t vcntq_u8(uint8x16_t a)"),
    ), feature="neon", ref="C7.2.39 CNT"),

    # -- add and subtract
    Instruction("add", add, (
        Form("8b", "uint8x8_t vadd_u8(uint8x8_t a, uint8x8_t b)", {"esize": 8}),
        Form("16b", "uint8x16_t vaddq_u8(uint8x16_t a, uint8x16_t b)", {"esize": 8}),
        Form("4h", "uint16x4_t vadd_u16(uint16x4_t a, uint16x4_t b)", {"esize": 16}),
        Form("8h", "uint16x8_t vaddq_u16(uint16x8_t a, uint16x8_t b)", {"esize": 16}),
        Form("2s", "uint32x2_t vadd_u32(uint32x2_t a, uint32x2_t b)", {"esize": 32}),
        Form("4s", "uint32x4_t vaddq_u32(uint32x4_t a, uint32x4_t b)", {"esize": 32}),
        Form("1d", "uint64x1_t vadd_u64(uint64x1_t a, uint64x1_t b)", {"esize": 64}),
        Form("2d", "uint64x2_t vaddq_u64(uint64x2_t a, uint64x2_t b)", {"esize": 64}),
    ), feature="neon", ref="C7.2.2 ADD (vector)", commutative=True),
    Instruction("sub", sub, (
        Form("8b", "uint8x8_t vsub_u8(uint8x8_t a, uint8x8_t b)", {"esize": 8}),
        Form("16b", "uint8x16_t vsubq_u8(uint8x16_t a, uint8x16_t b)", {"esize": 8}),
        Form("4h", "uint16x4_t vsub_u16(uint16x4_t a, uint16x4_t b)", {"esize": 16}),
        Form("8h", "uint16x8_t vsubq_u16(uint16x8_t a, uint16x8_t b)", {"esize": 16}),
        Form("2s", "uint32x2_t vsub_u32(uint32x2_t a, uint32x2_t b)", {"esize": 32}),
        Form("4s", "uint32x4_t vsubq_u32(uint32x4_t a, uint32x4_t b)", {"esize": 32}),
        Form("1d", "uint64x1_t vsub_u64(uint64x1_t a, uint64x1_t b)", {"esize": 64}),
        Form("2d", "uint64x2_t vsubq_u64(uint64x2_t a, uint64x2_t b)", {"esize": 64}),
    ), feature="neon", ref="C7.2.392 SUB (vector)"),
    Instruction("addp", addp, (
        Form("8b", "uint8x8_t vpadd_u8(uint8x8_t a, uint8x8_t b)", {"esize": 8}),
        Form("16b", "uint8x16_t vpaddq_u8(uint8x16_t a, uint8x16_t b)", {"esize": 8}),
        Form("4h", "uint16x4_t vpadd_u16(uint16x4_t a, uint16x4_t b)", {"esize": 16}),
        Form("8h", "uint16x8_t vpaddq_u16(uint16x8_t a, uint16x8_t b)", {"esize": 16}),
        Form("2s", "uint32x2_t vpadd_u32(uint32x2_t a, uint32x2_t b)", {"esize": 32}),
        Form("4s", "uint32x4_t vpaddq_u32(uint32x4_t a, uint32x4_t b)", {"esize": 32}),
        Form("2d", "uint64x2_t vpaddq_u64(uint64x2_t a, uint64x2_t b)", {"esize": 64}),
    ), feature="neon", ref="C7.2.5 ADDP (vector)"),
    Instruction("uaddlp", uaddlp, (
        Form("4h", "uint16x4_t vpaddl_u8(uint8x8_t a)", {"esize": 8}),
        Form("8h", "uint16x8_t vpaddlq_u8(uint8x16_t a)", {"esize": 8}),
        Form("2s", "uint32x2_t vpaddl_u16(uint16x4_t a)", {"esize": 16}),
        Form("4s", "uint32x4_t vpaddlq_u16(uint16x8_t a)", {"esize": 16}),
        Form("1d", "uint64x1_t vpaddl_u32(uint32x2_t a)", {"esize": 32}),
        Form("2d", "uint64x2_t vpaddlq_u32(uint32x4_t a)", {"esize": 32}),
    ), feature="neon", ref="C7.2.407 UADDLP"),
    Instruction("saddlp", saddlp, (
        Form("4h", "int16x4_t vpaddl_s8(int8x8_t a)", {"esize": 8}),
        Form("8h", "int16x8_t vpaddlq_s8(int8x16_t a)", {"esize": 8}),
        Form("2s", "int32x2_t vpaddl_s16(int16x4_t a)", {"esize": 16}),
        Form("4s", "int32x4_t vpaddlq_s16(int16x8_t a)", {"esize": 16}),
        Form("1d", "int64x1_t vpaddl_s32(int32x2_t a)", {"esize": 32}),
        Form("2d", "int64x2_t vpaddlq_s32(int32x4_t a)", {"esize": 32}),
    ), feature="neon", ref="C7.2.273 SADDLP"),
    Instruction("uadalp", uadalp, (
        Form("4h", "uint16x4_t vpadal_u8(uint16x4_t a, uint8x8_t b)", {"esize": 8}),
        Form("8h", "uint16x8_t vpadalq_u8(uint16x8_t a, uint8x16_t b)", {"esize": 8}),
        Form("2s", "uint32x2_t vpadal_u16(uint32x2_t a, uint16x4_t b)", {"esize": 16}),
        Form("4s", "uint32x4_t vpadalq_u16(uint32x4_t a, uint16x8_t b)", {"esize": 16}),
        Form("1d", "uint64x1_t vpadal_u32(uint64x1_t a, uint32x2_t b)", {"esize": 32}),
        Form("2d", "uint64x2_t vpadalq_u32(uint64x2_t a, uint32x4_t b)", {"esize": 32}),
    ), feature="neon", ref="C7.2.405 UADALP"),
    Instruction("sadalp", sadalp, (
        Form("4h", "int16x4_t vpadal_s8(int16x4_t a, int8x8_t b)", {"esize": 8}),
        Form("8h", "int16x8_t vpadalq_s8(int16x8_t a, int8x16_t b)", {"esize": 8}),
        Form("2s", "int32x2_t vpadal_s16(int32x2_t a, int16x4_t b)", {"esize": 16}),
        Form("4s", "int32x4_t vpadalq_s16(int32x4_t a, int16x8_t b)", {"esize": 16}),
        Form("1d", "int64x1_t vpadal_s32(int64x1_t a, int32x2_t b)", {"esize": 32}),
        Form("2d", "int64x2_t vpadalq_s32(int64x2_t a, int32x4_t b)", {"esize": 32}),
    ), feature="neon", ref="C7.2.271 SADALP"),
    Instruction("addv", addv, (
        Form("8b", "uint8_t vaddv_u8(uint8x8_t a)", {"esize": 8}),
        Form("16b", "uint8_t vaddvq_u8(uint8x16_t a)", {"esize": 8}),
        Form("4h", "uint16_t vaddv_u16(uint16x4_t a)", {"esize": 16}),
        Form("8h", "uint16_t vaddvq_u16(uint16x8_t a)", {"esize": 16}),
        Form("4s", "uint32_t vaddvq_u32(uint32x4_t a)", {"esize": 32}),
    ), feature="neon", ref="C7.2.6 ADDV"),
    Instruction("uaddlv", uaddlv, (
        Form("8b", "uint16_t vaddlv_u8(uint8x8_t a)", {"esize": 8}),
        Form("16b", "uint16_t vaddlvq_u8(uint8x16_t a)", {"esize": 8}),
        Form("4h", "uint32_t vaddlv_u16(uint16x4_t a)", {"esize": 16}),
        Form("8h", "uint32_t vaddlvq_u16(uint16x8_t a)", {"esize": 16}),
        Form("4s", "uint64_t vaddlvq_u32(uint32x4_t a)", {"esize": 32}),
    ), feature="neon", ref="C7.2.408 UADDLV"),

    # -- multiply
    Instruction("mul", mul, (
        Form("8b", "uint8x8_t vmul_u8(uint8x8_t a, uint8x8_t b)", {"esize": 8}),
        Form("16b", "uint8x16_t vmulq_u8(uint8x16_t a, uint8x16_t b)", {"esize": 8}),
        Form("4h", "uint16x4_t vmul_u16(uint16x4_t a, uint16x4_t b)", {"esize": 16}),
        Form("8h", "uint16x8_t vmulq_u16(uint16x8_t a, uint16x8_t b)", {"esize": 16}),
        Form("2s", "uint32x2_t vmul_u32(uint32x2_t a, uint32x2_t b)", {"esize": 32}),
        Form("4s", "uint32x4_t vmulq_u32(uint32x4_t a, uint32x4_t b)", {"esize": 32}),
    ), feature="neon", ref="C7.2.249 MUL (vector)", commutative=True),
    Instruction("mla", mla, (
        Form("8b", "uint8x8_t vmla_u8(uint8x8_t a, uint8x8_t b, uint8x8_t c)", {"esize": 8}),
        Form("16b", "uint8x16_t vmlaq_u8(uint8x16_t a, uint8x16_t b, uint8x16_t c)", {"esize": 8}),
        Form("4h", "uint16x4_t vmla_u16(uint16x4_t a, uint16x4_t b, uint16x4_t c)", {"esize": 16}),
        Form("8h", "uint16x8_t vmlaq_u16(uint16x8_t a, uint16x8_t b, uint16x8_t c)", {"esize": 16}),
        Form("2s", "uint32x2_t vmla_u32(uint32x2_t a, uint32x2_t b, uint32x2_t c)", {"esize": 32}),
        Form("4s", "uint32x4_t vmlaq_u32(uint32x4_t a, uint32x4_t b, uint32x4_t c)", {"esize": 32}),
    ), feature="neon", ref="C7.2.239 MLA (vector)"),
    Instruction("umull", umull, (
        Form("8h", "uint16x8_t vmull_u8(uint8x8_t a, uint8x8_t b)", {"esize": 8, "part": 0}),
        Form("4s", "uint32x4_t vmull_u16(uint16x4_t a, uint16x4_t b)", {"esize": 16, "part": 0}),
        Form("2d", "uint64x2_t vmull_u32(uint32x2_t a, uint32x2_t b)", {"esize": 32, "part": 0}),
    ), feature="neon", ref="C7.2.432 UMULL, UMULL2 (vector)", commutative=True),
    Instruction("umull2", umull, (
        Form("8h", "uint16x8_t vmull_high_u8(uint8x16_t a, uint8x16_t b)", {"esize": 8, "part": 1}),
        Form("4s", "uint32x4_t vmull_high_u16(uint16x8_t a, uint16x8_t b)", {"esize": 16, "part": 1}),
        Form("2d", "uint64x2_t vmull_high_u32(uint32x4_t a, uint32x4_t b)", {"esize": 32, "part": 1}),
    ), feature="neon", ref="C7.2.432 UMULL, UMULL2 (vector)", commutative=True),
    Instruction("smull", smull, (
        Form("8h", "int16x8_t vmull_s8(int8x8_t a, int8x8_t b)", {"esize": 8, "part": 0}),
        Form("4s", "int32x4_t vmull_s16(int16x4_t a, int16x4_t b)", {"esize": 16, "part": 0}),
        Form("2d", "int64x2_t vmull_s32(int32x2_t a, int32x2_t b)", {"esize": 32, "part": 0}),
    ), feature="neon", ref="C7.2.325 SMULL, SMULL2 (vector)", commutative=True),
    Instruction("smull2", smull, (
        Form("8h", "int16x8_t vmull_high_s8(int8x16_t a, int8x16_t b)", {"esize": 8, "part": 1}),
        Form("4s", "int32x4_t vmull_high_s16(int16x8_t a, int16x8_t b)", {"esize": 16, "part": 1}),
        Form("2d", "int64x2_t vmull_high_s32(int32x4_t a, int32x4_t b)", {"esize": 32, "part": 1}),
    ), feature="neon", ref="C7.2.325 SMULL, SMULL2 (vector)", commutative=True),
    Instruction("umlal", umlal, (
        Form("8h", "uint16x8_t vmlal_u8(uint16x8_t a, uint8x8_t b, uint8x8_t c)", {"esize": 8, "part": 0}),
        Form("4s", "uint32x4_t vmlal_u16(uint32x4_t a, uint16x4_t b, uint16x4_t c)", {"esize": 16, "part": 0}),
        Form("2d", "uint64x2_t vmlal_u32(uint64x2_t a, uint32x2_t b, uint32x2_t c)", {"esize": 32, "part": 0}),
    ), feature="neon", ref="C7.2.426 UMLAL, UMLAL2 (vector)"),
    Instruction("umlal2", umlal, (
        Form("8h", "uint16x8_t vmlal_high_u8(uint16x8_t a, uint8x16_t b, uint8x16_t c)", {"esize": 8, "part": 1}),
        Form("4s", "uint32x4_t vmlal_high_u16(uint32x4_t a, uint16x8_t b, uint16x8_t c)", {"esize": 16, "part": 1}),
        Form("2d", "uint64x2_t vmlal_high_u32(uint64x2_t a, uint32x4_t b, uint32x4_t c)", {"esize": 32, "part": 1}),
    ), feature="neon", ref="C7.2.426 UMLAL, UMLAL2 (vector)"),
    Instruction("smlal", smlal, (
        Form("8h", "int16x8_t vmlal_s8(int16x8_t a, int8x8_t b, int8x8_t c)", {"esize": 8, "part": 0}),
        Form("4s", "int32x4_t vmlal_s16(int32x4_t a, int16x4_t b, int16x4_t c)", {"esize": 16, "part": 0}),
        Form("2d", "int64x2_t vmlal_s32(int64x2_t a, int32x2_t b, int32x2_t c)", {"esize": 32, "part": 0}),
    ), feature="neon", ref="C7.2.319 SMLAL, SMLAL2 (vector)"),
    Instruction("smlal2", smlal, (
        Form("8h", "int16x8_t vmlal_high_s8(int16x8_t a, int8x16_t b, int8x16_t c)", {"esize": 8, "part": 1}),
        Form("4s", "int32x4_t vmlal_high_s16(int32x4_t a, int16x8_t b, int16x8_t c)", {"esize": 16, "part": 1}),
        Form("2d", "int64x2_t vmlal_high_s32(int64x2_t a, int32x4_t b, int32x4_t c)", {"esize": 32, "part": 1}),
    ), feature="neon", ref="C7.2.319 SMLAL, SMLAL2 (vector)"),
    Instruction("sdot", sdot, (
        Form("2s", "int32x2_t vdot_s32(int32x2_t r, int8x8_t a, int8x8_t b)"),
        Form("4s", "int32x4_t vdotq_s32(int32x4_t r, int8x16_t a, int8x16_t b)"),
        Form("2s_lane", "int32x2_t vdot_lane_s32(int32x2_t r, int8x8_t a, int8x8_t b, const int lane)", imm=(0, 1)),
        Form("2s_laneq", "int32x2_t vdot_laneq_s32(int32x2_t r, int8x8_t a, int8x16_t b, const int lane)",
             imm=(0, 1, 2, 3)),
        Form("4s_lane", "int32x4_t vdotq_lane_s32(int32x4_t r, int8x16_t a, int8x8_t b, const int lane)", imm=(0, 1)),
        Form("4s_laneq", "int32x4_t vdotq_laneq_s32(int32x4_t r, int8x16_t a, int8x16_t b, const int lane)",
             imm=(0, 1, 2, 3)),
    ), feature="dotprod", ref="C7.2.282 SDOT (vector), C7.2.281 SDOT (by element)"),
    Instruction("udot", udot, (
        Form("2s", "uint32x2_t vdot_u32(uint32x2_t r, uint8x8_t a, uint8x8_t b)"),
        Form("4s", "uint32x4_t vdotq_u32(uint32x4_t r, uint8x16_t a, uint8x16_t b)"),
        Form("2s_lane", "uint32x2_t vdot_lane_u32(uint32x2_t r, uint8x8_t a, uint8x8_t b, const int lane)",
             imm=(0, 1)),
        Form("2s_laneq", "uint32x2_t vdot_laneq_u32(uint32x2_t r, uint8x8_t a, uint8x16_t b, const int lane)",
             imm=(0, 1, 2, 3)),
        Form("4s_lane", "uint32x4_t vdotq_lane_u32(uint32x4_t r, uint8x16_t a, uint8x8_t b, const int lane)",
             imm=(0, 1)),
        Form("4s_laneq", "uint32x4_t vdotq_laneq_u32(uint32x4_t r, uint8x16_t a, uint8x16_t b, const int lane)",
             imm=(0, 1, 2, 3)),
    ), feature="dotprod", ref="C7.2.416 UDOT (vector), C7.2.415 UDOT (by element)"),
    Instruction("usdot", usdot, (
        Form("2s", "int32x2_t vusdot_s32(int32x2_t r, uint8x8_t a, int8x8_t b)"),
        Form("4s", "int32x4_t vusdotq_s32(int32x4_t r, uint8x16_t a, int8x16_t b)"),
        Form("2s_lane", "int32x2_t vusdot_lane_s32(int32x2_t r, uint8x8_t a, int8x8_t b, const int lane)",
             imm=(0, 1)),
        Form("2s_laneq", "int32x2_t vusdot_laneq_s32(int32x2_t r, uint8x8_t a, int8x16_t b, const int lane)",
             imm=(0, 1, 2, 3)),
        Form("4s_lane", "int32x4_t vusdotq_lane_s32(int32x4_t r, uint8x16_t a, int8x8_t b, const int lane)",
             imm=(0, 1)),
        Form("4s_laneq", "int32x4_t vusdotq_laneq_s32(int32x4_t r, uint8x16_t a, int8x16_t b, const int lane)",
             imm=(0, 1, 2, 3)),
    ), feature="i8mm", ref="C7.2.448 USDOT (vector), C7.2.447 USDOT (by element)"),
    Instruction("sudot", sudot, (
        Form("2s_lane", "int32x2_t vsudot_lane_s32(int32x2_t r, int8x8_t a, uint8x8_t b, const int lane)",
             imm=(0, 1)),
        Form("2s_laneq", "int32x2_t vsudot_laneq_s32(int32x2_t r, int8x8_t a, uint8x16_t b, const int lane)",
             imm=(0, 1, 2, 3)),
        Form("4s_lane", "int32x4_t vsudotq_lane_s32(int32x4_t r, int8x16_t a, uint8x8_t b, const int lane)",
             imm=(0, 1)),
        Form("4s_laneq", "int32x4_t vsudotq_laneq_s32(int32x4_t r, int8x16_t a, uint8x16_t b, const int lane)",
             imm=(0, 1, 2, 3)),
    ), feature="i8mm", ref="C7.2.394 SUDOT (by element)"),

    # -- widen, move, permute
    Instruction("uxtl", uxtl, (
        Form("8h", "uint16x8_t vmovl_u8(uint8x8_t a)", {"esize": 8, "part": 0}),
        Form("4s", "uint32x4_t vmovl_u16(uint16x4_t a)", {"esize": 16, "part": 0}),
        Form("2d", "uint64x2_t vmovl_u32(uint32x2_t a)", {"esize": 32, "part": 0}),
    ), feature="neon", ref="C7.2.457 UXTL, UXTL2 (alias of C7.2.450 USHLL, USHLL2)"),
    Instruction("uxtl2", uxtl, (
        Form("8h", "uint16x8_t vmovl_high_u8(uint8x16_t a)", {"esize": 8, "part": 1}),
        Form("4s", "uint32x4_t vmovl_high_u16(uint16x8_t a)", {"esize": 16, "part": 1}),
        Form("2d", "uint64x2_t vmovl_high_u32(uint32x4_t a)", {"esize": 32, "part": 1}),
    ), feature="neon", ref="C7.2.457 UXTL, UXTL2 (alias of C7.2.450 USHLL, USHLL2)"),
    Instruction("sxtl", sxtl, (
        Form("8h", "int16x8_t vmovl_s8(int8x8_t a)", {"esize": 8, "part": 0}),
        Form("4s", "int32x4_t vmovl_s16(int16x4_t a)", {"esize": 16, "part": 0}),
        Form("2d", "int64x2_t vmovl_s32(int32x2_t a)", {"esize": 32, "part": 0}),
    ), feature="neon", ref="C7.2.396 SXTL, SXTL2 (alias of C7.2.360 SSHLL, SSHLL2)"),
    Instruction("sxtl2", sxtl, (
        Form("8h", "int16x8_t vmovl_high_s8(int8x16_t a)", {"esize": 8, "part": 1}),
        Form("4s", "int32x4_t vmovl_high_s16(int16x8_t a)", {"esize": 16, "part": 1}),
        Form("2d", "int64x2_t vmovl_high_s32(int32x4_t a)", {"esize": 32, "part": 1}),
    ), feature="neon", ref="C7.2.396 SXTL, SXTL2 (alias of C7.2.360 SSHLL, SSHLL2)"),
    Instruction("dup", dup, (
        Form("8b", "uint8x8_t vdup_n_u8(uint8_t value)", {"esize": 8, "datasize": 64}),
        Form("16b", "uint8x16_t vdupq_n_u8(uint8_t value)", {"esize": 8, "datasize": 128}),
        Form("4h", "uint16x4_t vdup_n_u16(uint16_t value)", {"esize": 16, "datasize": 64}),
        Form("8h", "uint16x8_t vdupq_n_u16(uint16_t value)", {"esize": 16, "datasize": 128}),
        Form("2s", "uint32x2_t vdup_n_u32(uint32_t value)", {"esize": 32, "datasize": 64}),
        Form("4s", "uint32x4_t vdupq_n_u32(uint32_t value)", {"esize": 32, "datasize": 128}),
        Form("2d", "uint64x2_t vdupq_n_u64(uint64_t value)", {"esize": 64, "datasize": 128}),
        # ACLE maps vget_low_* to DUP Vd.1D, Vn.D[0]; compilers emit nothing (the D view of the Q register)
        Form("1d_low_u8", "uint8x8_t vget_low_u8(uint8x16_t a)", {"esize": 64, "datasize": 64, "imm": 0}),
        Form("1d_low_s8", "int8x8_t vget_low_s8(int8x16_t a)", {"esize": 64, "datasize": 64, "imm": 0}),
        Form("1d_low_s16", "int16x4_t vget_low_s16(int16x8_t a)", {"esize": 64, "datasize": 64, "imm": 0}),
        Form("8b_lane", "uint8x8_t vdup_lane_u8(uint8x8_t vec, const int lane)",
             {"esize": 8, "datasize": 64}, imm=tuple(range(8))),
        Form("8b_laneq", "uint8x8_t vdup_laneq_u8(uint8x16_t vec, const int lane)",
             {"esize": 8, "datasize": 64}, imm=tuple(range(16))),
        Form("16b_lane", "uint8x16_t vdupq_lane_u8(uint8x8_t vec, const int lane)",
             {"esize": 8, "datasize": 128}, imm=tuple(range(8))),
        Form("16b_laneq", "uint8x16_t vdupq_laneq_u8(uint8x16_t vec, const int lane)",
             {"esize": 8, "datasize": 128}, imm=tuple(range(16))),
        Form("4h_lane", "uint16x4_t vdup_lane_u16(uint16x4_t vec, const int lane)",
             {"esize": 16, "datasize": 64}, imm=(0, 1, 2, 3)),
        Form("4h_laneq", "uint16x4_t vdup_laneq_u16(uint16x8_t vec, const int lane)",
             {"esize": 16, "datasize": 64}, imm=tuple(range(8))),
        Form("8h_lane", "uint16x8_t vdupq_lane_u16(uint16x4_t vec, const int lane)",
             {"esize": 16, "datasize": 128}, imm=(0, 1, 2, 3)),
        Form("8h_laneq", "uint16x8_t vdupq_laneq_u16(uint16x8_t vec, const int lane)",
             {"esize": 16, "datasize": 128}, imm=tuple(range(8))),
        Form("2s_lane", "uint32x2_t vdup_lane_u32(uint32x2_t vec, const int lane)",
             {"esize": 32, "datasize": 64}, imm=(0, 1)),
        Form("2s_laneq", "uint32x2_t vdup_laneq_u32(uint32x4_t vec, const int lane)",
             {"esize": 32, "datasize": 64}, imm=(0, 1, 2, 3)),
        Form("4s_lane", "uint32x4_t vdupq_lane_u32(uint32x2_t vec, const int lane)",
             {"esize": 32, "datasize": 128}, imm=(0, 1)),
        Form("4s_laneq", "uint32x4_t vdupq_laneq_u32(uint32x4_t vec, const int lane)",
             {"esize": 32, "datasize": 128}, imm=(0, 1, 2, 3)),
        Form("2d_lane", "uint64x2_t vdupq_lane_u64(uint64x1_t vec, const int lane)",
             {"esize": 64, "datasize": 128}, imm=(0,)),
        Form("2d_laneq", "uint64x2_t vdupq_laneq_u64(uint64x2_t vec, const int lane)",
             {"esize": 64, "datasize": 128}, imm=(0, 1)),
    ), feature="neon", ref="C7.2.41 DUP (general), C7.2.40 DUP (element)"),
    Instruction("ext", ext, (
        Form("8b", "uint8x8_t vext_u8(uint8x8_t a, uint8x8_t b, const int n)", imm=tuple(range(8))),
        Form("16b", "uint8x16_t vextq_u8(uint8x16_t a, uint8x16_t b, const int n)", imm=tuple(range(16))),
    ), feature="neon", ref="C7.2.44 EXT"),
    Instruction("zip1", zip_, (
        Form("8b", "uint8x8_t vzip1_u8(uint8x8_t a, uint8x8_t b)", {"esize": 8, "part": 0}),
        Form("16b", "uint8x16_t vzip1q_u8(uint8x16_t a, uint8x16_t b)", {"esize": 8, "part": 0}),
        Form("4h", "uint16x4_t vzip1_u16(uint16x4_t a, uint16x4_t b)", {"esize": 16, "part": 0}),
        Form("8h", "uint16x8_t vzip1q_u16(uint16x8_t a, uint16x8_t b)", {"esize": 16, "part": 0}),
        Form("2s", "uint32x2_t vzip1_u32(uint32x2_t a, uint32x2_t b)", {"esize": 32, "part": 0}),
        Form("4s", "uint32x4_t vzip1q_u32(uint32x4_t a, uint32x4_t b)", {"esize": 32, "part": 0}),
        Form("2d", "uint64x2_t vzip1q_u64(uint64x2_t a, uint64x2_t b)", {"esize": 64, "part": 0}),
    ), feature="neon", ref="C7.2.462 ZIP1"),
    Instruction("zip2", zip_, (
        Form("8b", "uint8x8_t vzip2_u8(uint8x8_t a, uint8x8_t b)", {"esize": 8, "part": 1}),
        Form("16b", "uint8x16_t vzip2q_u8(uint8x16_t a, uint8x16_t b)", {"esize": 8, "part": 1}),
        Form("4h", "uint16x4_t vzip2_u16(uint16x4_t a, uint16x4_t b)", {"esize": 16, "part": 1}),
        Form("8h", "uint16x8_t vzip2q_u16(uint16x8_t a, uint16x8_t b)", {"esize": 16, "part": 1}),
        Form("2s", "uint32x2_t vzip2_u32(uint32x2_t a, uint32x2_t b)", {"esize": 32, "part": 1}),
        Form("4s", "uint32x4_t vzip2q_u32(uint32x4_t a, uint32x4_t b)", {"esize": 32, "part": 1}),
        Form("2d", "uint64x2_t vzip2q_u64(uint64x2_t a, uint64x2_t b)", {"esize": 64, "part": 1}),
    ), feature="neon", ref="C7.2.463 ZIP2"),
    Instruction("uzp1", uzp, (
        Form("8b", "uint8x8_t vuzp1_u8(uint8x8_t a, uint8x8_t b)", {"esize": 8, "part": 0}),
        Form("16b", "uint8x16_t vuzp1q_u8(uint8x16_t a, uint8x16_t b)", {"esize": 8, "part": 0}),
        Form("4h", "uint16x4_t vuzp1_u16(uint16x4_t a, uint16x4_t b)", {"esize": 16, "part": 0}),
        Form("8h", "uint16x8_t vuzp1q_u16(uint16x8_t a, uint16x8_t b)", {"esize": 16, "part": 0}),
        Form("2s", "uint32x2_t vuzp1_u32(uint32x2_t a, uint32x2_t b)", {"esize": 32, "part": 0}),
        Form("4s", "uint32x4_t vuzp1q_u32(uint32x4_t a, uint32x4_t b)", {"esize": 32, "part": 0}),
        Form("2d", "uint64x2_t vuzp1q_u64(uint64x2_t a, uint64x2_t b)", {"esize": 64, "part": 0}),
    ), feature="neon", ref="C7.2.458 UZP1"),
    Instruction("uzp2", uzp, (
        Form("8b", "uint8x8_t vuzp2_u8(uint8x8_t a, uint8x8_t b)", {"esize": 8, "part": 1}),
        Form("16b", "uint8x16_t vuzp2q_u8(uint8x16_t a, uint8x16_t b)", {"esize": 8, "part": 1}),
        Form("4h", "uint16x4_t vuzp2_u16(uint16x4_t a, uint16x4_t b)", {"esize": 16, "part": 1}),
        Form("8h", "uint16x8_t vuzp2q_u16(uint16x8_t a, uint16x8_t b)", {"esize": 16, "part": 1}),
        Form("2s", "uint32x2_t vuzp2_u32(uint32x2_t a, uint32x2_t b)", {"esize": 32, "part": 1}),
        Form("4s", "uint32x4_t vuzp2q_u32(uint32x4_t a, uint32x4_t b)", {"esize": 32, "part": 1}),
        Form("2d", "uint64x2_t vuzp2q_u64(uint64x2_t a, uint64x2_t b)", {"esize": 64, "part": 1}),
    ), feature="neon", ref="C7.2.459 UZP2"),

    # -- shifts by immediate (SHL: 0..esize-1; USHR/SSHR: 1..esize)
    Instruction("shl", shl, (
        Form("8b", "uint8x8_t vshl_n_u8(uint8x8_t a, const int n)", {"esize": 8}, imm=tuple(range(8))),
        Form("16b", "uint8x16_t vshlq_n_u8(uint8x16_t a, const int n)", {"esize": 8}, imm=tuple(range(8))),
        Form("4h", "uint16x4_t vshl_n_u16(uint16x4_t a, const int n)", {"esize": 16}, imm=tuple(range(16))),
        Form("8h", "uint16x8_t vshlq_n_u16(uint16x8_t a, const int n)", {"esize": 16}, imm=tuple(range(16))),
        Form("2s", "uint32x2_t vshl_n_u32(uint32x2_t a, const int n)", {"esize": 32}, imm=tuple(range(32))),
        Form("4s", "uint32x4_t vshlq_n_u32(uint32x4_t a, const int n)", {"esize": 32}, imm=tuple(range(32))),
        Form("1d", "uint64x1_t vshl_n_u64(uint64x1_t a, const int n)", {"esize": 64}, imm=tuple(range(64))),
        Form("2d", "uint64x2_t vshlq_n_u64(uint64x2_t a, const int n)", {"esize": 64}, imm=tuple(range(64))),
    ), feature="neon", ref="C7.2.298 SHL"),
    Instruction("ushr", ushr, (
        Form("8b", "uint8x8_t vshr_n_u8(uint8x8_t a, const int n)", {"esize": 8}, imm=tuple(range(1, 9))),
        Form("16b", "uint8x16_t vshrq_n_u8(uint8x16_t a, const int n)", {"esize": 8}, imm=tuple(range(1, 9))),
        Form("4h", "uint16x4_t vshr_n_u16(uint16x4_t a, const int n)", {"esize": 16}, imm=tuple(range(1, 17))),
        Form("8h", "uint16x8_t vshrq_n_u16(uint16x8_t a, const int n)", {"esize": 16}, imm=tuple(range(1, 17))),
        Form("2s", "uint32x2_t vshr_n_u32(uint32x2_t a, const int n)", {"esize": 32}, imm=tuple(range(1, 33))),
        Form("4s", "uint32x4_t vshrq_n_u32(uint32x4_t a, const int n)", {"esize": 32}, imm=tuple(range(1, 33))),
        Form("1d", "uint64x1_t vshr_n_u64(uint64x1_t a, const int n)", {"esize": 64}, imm=tuple(range(1, 65))),
        Form("2d", "uint64x2_t vshrq_n_u64(uint64x2_t a, const int n)", {"esize": 64}, imm=tuple(range(1, 65))),
    ), feature="neon", ref="C7.2.451 USHR"),
    Instruction("sshr", sshr, (
        Form("8b", "int8x8_t vshr_n_s8(int8x8_t a, const int n)", {"esize": 8}, imm=tuple(range(1, 9))),
        Form("16b", "int8x16_t vshrq_n_s8(int8x16_t a, const int n)", {"esize": 8}, imm=tuple(range(1, 9))),
        Form("4h", "int16x4_t vshr_n_s16(int16x4_t a, const int n)", {"esize": 16}, imm=tuple(range(1, 17))),
        Form("8h", "int16x8_t vshrq_n_s16(int16x8_t a, const int n)", {"esize": 16}, imm=tuple(range(1, 17))),
        Form("2s", "int32x2_t vshr_n_s32(int32x2_t a, const int n)", {"esize": 32}, imm=tuple(range(1, 33))),
        Form("4s", "int32x4_t vshrq_n_s32(int32x4_t a, const int n)", {"esize": 32}, imm=tuple(range(1, 33))),
        Form("1d", "int64x1_t vshr_n_s64(int64x1_t a, const int n)", {"esize": 64}, imm=tuple(range(1, 65))),
        Form("2d", "int64x2_t vshrq_n_s64(int64x2_t a, const int n)", {"esize": 64}, imm=tuple(range(1, 65))),
    ), feature="neon", ref="C7.2.361 SSHR"),
)

ISA = _ISA(
    name="neon",
    description="Arm A64 Advanced SIMD (+dotprod, +i8mm), run under qemu-aarch64",
    header="<arm_neon.h>",
    instructions=INSTRUCTIONS,
    toolchain=Toolchain("aarch64-linux-gnu-gcc", ("-O1", "-static", "-march=armv8.2-a+dotprod+i8mm"),
                        runner=("qemu-aarch64", "-cpu", "max"),
                        apt_packages=("gcc-aarch64-linux-gnu", "qemu-user")),
    module=sys.modules[__name__],
)
