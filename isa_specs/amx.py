"""Intel AMX-INT8 tile dot products (TDPBUSD, TDPBSSD, TDPBSUD, TDPBUUD), run natively.

A tile instruction does not map C values to C values, so each form carries a ``c_body`` that
configures three tiles, loads them from the operand byte arrays, runs the instruction and stores the
accumulator tile. The tile shape is the form's parameters: ``M`` rows of the accumulator C and of A,
``N`` int32 columns of C, ``K`` bytes per row of A (a multiple of 4, at most 64). The operands, in
semantic order, are byte arrays laid out row-major with no padding (stride = row size):

* ``a0`` = C: M rows of N int32 (M*N*4 bytes), the accumulator (tile 0, also the result layout);
* ``a1`` = A: M rows of K bytes (tile 1);
* ``a2`` = B: K/4 rows of N*4 bytes, i.e. B[k4][4*n + i] pairs with A[m][4*k4 + i] (tile 2).

Small shapes (``m1n1k4``, ``m2n2k8``, ``m4n4k16``) keep the Z3 terms small enough for symbolic
reasoning; ``m16n16k64`` is the full 1 KiB tile. Ref: Intel SDM Vol. 2C, "TDPBSSD/TDPBSUD/TDPBUSD/
TDPBUUD—Dot Product of Signed/Unsigned Bytes with Dword Accumulation", and Intel AMX in the
Intrinsics Guide (``_tile_dpbusd`` etc.).
"""
from __future__ import annotations

import sys

from isa_specs.instruction import Form, Instruction, Operand
from isa_specs.isa import ISA as _ISA, Toolchain
from isa_specs import products
from isa_specs.products import sums_of_products

# ---------------------------------------------------------------- semantics


def _tdp(B, c, a, b, M, N, K, a_signed, b_signed):
    """FOR m < M: FOR k4 < K/4: FOR n < N: C.row[m].dword[n] := DPBD(C.row[m].dword[n],
    A.row[m].dword[k4], B.row[k4].dword[n]), where DPBD(c, x, y) = c + sum over i < 4 of
    Extend32(x.byte[i]) * Extend32(y.byte[i]) with 32-bit wrap-around (no saturation).
    Rows beyond M / columns beyond N*4 bytes are not part of the operand (the stored result is M*N*4)."""
    cs, xa, xb = B.lanes(c, 32), B.lanes(a, 8), B.lanes(b, 8)
    assert len(cs) == M * N and len(xa) == M * K and len(xb) == K * N, (len(cs), len(xa), len(xb), M, N, K)
    A = [xa[m * K:(m + 1) * K] for m in range(M)]                                   # A.row[m].byte[t]
    Bm = [[xb[t // 4 * 4 * N + 4 * n + t % 4] for t in range(K)] for n in range(N)]  # B.row[t/4].byte[4n + t%4]
    C = [cs[m * N:(m + 1) * N] for m in range(M)]
    return B.join([lane for row in sums_of_products(B, A, Bm, C, (a_signed, b_signed)) for lane in row])


def tdpbusd(B, c, a, b, M, N, K):
    """TDPBUSD: C[m][n] += sum_k A[m][k] (unsigned byte) * B[k // 4][4n + k % 4] (signed byte), int32 wrap."""
    return _tdp(B, c, a, b, M, N, K, a_signed=False, b_signed=True)


def tdpbssd(B, c, a, b, M, N, K):
    """TDPBSSD: C[m][n] += sum_k A[m][k] (signed byte) * B[k // 4][4n + k % 4] (signed byte), int32 wrap."""
    return _tdp(B, c, a, b, M, N, K, a_signed=True, b_signed=True)


def tdpbsud(B, c, a, b, M, N, K):
    """TDPBSUD: C[m][n] += sum_k A[m][k] (signed byte) * B[k // 4][4n + k % 4] (unsigned byte), int32 wrap."""
    return _tdp(B, c, a, b, M, N, K, a_signed=True, b_signed=False)


def tdpbuud(B, c, a, b, M, N, K):
    """TDPBUUD: C[m][n] += sum_k A[m][k] (unsigned byte) * B[k // 4][4n + k % 4] (unsigned byte), int32 wrap."""
    return _tdp(B, c, a, b, M, N, K, a_signed=False, b_signed=False)


# ---------------------------------------------------------------- forms


class TileForm(Form):
    """A form whose operands are tile registers named by constants inside ``c_body``.

    The prototype is Intel's (``void _tile_dpbusd(constexpr int dst, constexpr int a, constexpr int b)``):
    its arguments are tile numbers, not C values, so the form has no C-level operands (and no
    immediates); its data operands are the byte arrays of ``registers`` (from ``operand_bits``).
    """

    @property
    def operands(self) -> tuple[Operand, ...]:
        return ()


_BODY = """\
uint8_t cfg[64] __attribute__((aligned(64))) = {{0}};
  cfg[0] = 1;                                       /* palette 1 */
  cfg[16] = {cb}; cfg[48] = {M};                    /* tmm0 = C: M rows of N*4 bytes */
  cfg[18] = {K};  cfg[49] = {M};                    /* tmm1 = A: M rows of K bytes */
  cfg[20] = {cb}; cfg[50] = {K4};                   /* tmm2 = B: K/4 rows of N*4 bytes */
  _tile_loadconfig(cfg);
  _tile_loadd(0, a0, {cb});
  _tile_loadd(1, a1, {K});
  _tile_loadd(2, a2, {cb});
  {intrinsic}(0, 1, 2);
  _tile_stored(0, r, {cb});
  _tile_release();"""

SHAPES = ((1, 1, 4), (2, 2, 8), (4, 4, 16), (16, 16, 64))


def _forms(intrinsic: str) -> tuple[Form, ...]:
    forms = []
    for M, N, K in SHAPES:
        assert 1 <= M <= 16 and 1 <= N <= 16 and K % 4 == 0 and 4 <= K <= 64
        body = _BODY.format(cb=4 * N, M=M, K=K, K4=K // 4, intrinsic=intrinsic)
        forms.append(TileForm(
            f"m{M}n{N}k{K}", f"void {intrinsic}(constexpr int dst, constexpr int a, constexpr int b)",
            {"M": M, "N": N, "K": K}, c_body=body,
            operand_bits=(M * N * 32, M * K * 8, K * N * 8), result_bits=M * N * 32))
    return tuple(forms)


REF = "Intel SDM Vol. 2C, TDPBSSD/TDPBSUD/TDPBUSD/TDPBUUD—Dot Product of Signed/Unsigned Bytes with Dword Accumulation"

INSTRUCTIONS = (
    Instruction("tdpbusd", tdpbusd, _forms("_tile_dpbusd"), feature="amx-int8", ref=REF),
    Instruction("tdpbssd", tdpbssd, _forms("_tile_dpbssd"), feature="amx-int8", ref=REF),
    Instruction("tdpbsud", tdpbsud, _forms("_tile_dpbsud"), feature="amx-int8", ref=REF),
    Instruction("tdpbuud", tdpbuud, _forms("_tile_dpbuud"), feature="amx-int8", ref=REF),
)

ISA = _ISA(
    name="amx",
    description="Intel AMX-TILE + AMX-INT8 tile dot products on configurable tile shapes, run natively",
    header="<immintrin.h>",
    instructions=INSTRUCTIONS,
    toolchain=Toolchain("gcc", ("-O1", "-mamx-tile", "-mamx-int8"), apt_packages=("gcc",)),
    module=sys.modules[__name__],
    shared=(products,),
)
