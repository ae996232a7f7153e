"""Arm A64 Advanced SIMD (NEON), with the dot-product (FEAT_DotProd) and int8 matrix-multiply
(FEAT_I8MM) extensions.

Each row follows the A64 instruction's pseudocode in the Arm Architecture Reference Manual
(DDI 0487, section C7.2 unless noted). Forms use the assembler arrangement: ``8b``/``4h``/``2s``/
``1d`` are 64-bit D registers, ``16b``/``8h``/``4s``/``2d`` 128-bit Q registers; a widening form
is named after its destination (``uaddlp.8h`` reads ``16b``).
"""
from __future__ import annotations

import sys

from isa_specs.instruction import Form, Instruction
from isa_specs.isa import ISA as _ISA, Toolchain
from isa_specs.lanes import lanewise, total

# ---------------------------------------------------------------- semantics


def and_(B, n, m): return B.and_(n, m)                       # AND: Vd = Vn AND Vm


def add(B, n, m, esize): return lanewise(B, esize, B.add, n, m)   # ADD (vector)


def cnt(B, n):                                               # CNT: per-byte BitCount
    return lanewise(B, 8, B.popcount, n)


def uadalp(B, d, n, esize):
    """UADALP: Elem[d, e, 2*esize] += ZeroExtend(Elem[n, 2e]) + ZeroExtend(Elem[n, 2e+1])."""
    src = B.lanes(n, esize)
    pairs = [B.add(B.zext(src[2 * e], 2 * esize), B.zext(src[2 * e + 1], 2 * esize)) for e in range(len(src) // 2)]
    return B.join([B.add(acc, p) for acc, p in zip(B.lanes(d, 2 * esize), pairs)])


def ushr(B, n, esize, imm): return lanewise(B, esize, lambda x: B.lshr(x, imm), n)   # USHR (immediate)


def addv(B, n, esize): return total(B, B.lanes(n, esize))   # ADDV: sum of all lanes, wrapping


def umull(B, n, m, esize, part):
    """UMULL/UMULL2: widening multiply of the lower (part 0) or upper (part 1) half of Vn, Vm."""
    half = lambda v: B.lanes(v, esize)[part * 64 // esize:(part + 1) * 64 // esize]
    return B.join([B.mul(B.zext(a, 2 * esize), B.zext(b, 2 * esize)) for a, b in zip(half(n), half(m))])


def sdot(B, d, n, m):
    """SDOT (vector): each 32-bit lane += sum of four signed 8-bit products."""
    def lane(acc, a, b):
        prods = [B.mul(B.sext(x, 32), B.sext(y, 32)) for x, y in zip(B.lanes(a, 8), B.lanes(b, 8))]
        return B.add(acc, total(B, prods))
    return lanewise(B, 32, lane, d, n, m)


# ---------------------------------------------------------------- table

INSTRUCTIONS = (
    Instruction("and", and_, (
        Form("8b", "uint8x8_t vand_u8(uint8x8_t a, uint8x8_t b)"),
        Form("16b", "uint8x16_t vandq_u8(uint8x16_t a, uint8x16_t b)"),
    ), feature="neon", ref="C7.2.11 AND (vector)", commutative=True),
    Instruction("add", add, (
        Form("8b", "uint8x8_t vadd_u8(uint8x8_t a, uint8x8_t b)", {"esize": 8}),
        Form("16b", "uint8x16_t vaddq_u8(uint8x16_t a, uint8x16_t b)", {"esize": 8}),
        Form("4h", "uint16x4_t vadd_u16(uint16x4_t a, uint16x4_t b)", {"esize": 16}),
        Form("8h", "uint16x8_t vaddq_u16(uint16x8_t a, uint16x8_t b)", {"esize": 16}),
        Form("2s", "uint32x2_t vadd_u32(uint32x2_t a, uint32x2_t b)", {"esize": 32}),
        Form("4s", "uint32x4_t vaddq_u32(uint32x4_t a, uint32x4_t b)", {"esize": 32}),
        Form("1d", "uint64x1_t vadd_u64(uint64x1_t a, uint64x1_t b)", {"esize": 64}),
        Form("2d", "uint64x2_t vaddq_u64(uint64x2_t a, uint64x2_t b)", {"esize": 64}),
    ), feature="neon", ref="C7.2.4 ADD (vector)", commutative=True),
    Instruction("cnt", cnt, (
        Form("8b", "uint8x8_t vcnt_u8(uint8x8_t a)"),
        Form("16b", "uint8x16_t vcntq_u8(uint8x16_t a)"),
    ), feature="neon", ref="C7.2.54 CNT"),
    Instruction("uadalp", uadalp, (
        Form("4h", "uint16x4_t vpadal_u8(uint16x4_t a, uint8x8_t b)", {"esize": 8}),
        Form("8h", "uint16x8_t vpadalq_u8(uint16x8_t a, uint8x16_t b)", {"esize": 8}),
        Form("2s", "uint32x2_t vpadal_u16(uint32x2_t a, uint16x4_t b)", {"esize": 16}),
        Form("4s", "uint32x4_t vpadalq_u16(uint32x4_t a, uint16x8_t b)", {"esize": 16}),
        Form("1d", "uint64x1_t vpadal_u32(uint64x1_t a, uint32x2_t b)", {"esize": 32}),
        Form("2d", "uint64x2_t vpadalq_u32(uint64x2_t a, uint32x4_t b)", {"esize": 32}),
    ), feature="neon", ref="C7.2.326 UADALP"),
    Instruction("ushr", ushr, (
        Form("16b", "uint8x16_t vshrq_n_u8(uint8x16_t a, const int n)", {"esize": 8}, imm=tuple(range(1, 9))),
        Form("8h", "uint16x8_t vshrq_n_u16(uint16x8_t a, const int n)", {"esize": 16}, imm=tuple(range(1, 17))),
    ), feature="neon", ref="C7.2.386 USHR"),
    Instruction("addv", addv, (
        Form("16b", "uint8_t vaddvq_u8(uint8x16_t a)", {"esize": 8}),
        Form("8h", "uint16_t vaddvq_u16(uint16x8_t a)", {"esize": 16}),
    ), feature="neon", ref="C7.2.6 ADDV"),
    Instruction("umull", umull, (
        Form("8h", "uint16x8_t vmull_u8(uint8x8_t a, uint8x8_t b)", {"esize": 8, "part": 0}),
    ), feature="neon", ref="C7.2.380 UMULL, UMULL2 (vector)", commutative=True),
    Instruction("umull2", umull, (
        Form("8h", "uint16x8_t vmull_high_u8(uint8x16_t a, uint8x16_t b)", {"esize": 8, "part": 1}),
    ), feature="neon", ref="C7.2.380 UMULL, UMULL2 (vector)", commutative=True),
    Instruction("sdot", sdot, (
        Form("4s", "int32x4_t vdotq_s32(int32x4_t r, int8x16_t a, int8x16_t b)"),
    ), feature="dotprod", ref="C7.2.267 SDOT (vector)"),
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
