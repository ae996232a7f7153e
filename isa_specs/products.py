"""Sums of products of lanes, ``C[i][j] + sum_t ext(A[i][t]) * ext(Bm[j][t])`` with wrap-around: an AMX
tile instruction (isa_specs/amx.py) and the int8 tile specification (synth/int8_spec.py) are such sums.

Written once over the lane algebra, which gives Z3 and the linear forms the element-wise terms the
proofs use; on a numpy batch the same sums are one product of matrices (a 16x16x64 tdpbusd on 64
inputs took 0.40 s as 16 384 products of lanes, 0.015 s so). The two agree on the same inputs
(tests/test_amx_emulation.py, tests/test_synth.py).
"""
from __future__ import annotations

import numpy as np

from isa_specs.lanes import Bits, NumpyBackend, mask, total


def sums_of_products(B, A, Bm, C, signed: tuple[bool, bool]):
    """``A``: rows of element lanes, ``Bm``: columns of element lanes (both ``A[i][t]``, ``Bm[j][t]``),
    ``C``: rows of ``w``-bit accumulator lanes; each element zero- or sign-extended to ``w`` bits as
    ``signed`` says for A and B, products and sums modulo 2**w. Rows of ``w``-bit lanes, C's shape."""
    if isinstance(B, NumpyBackend):
        return _matrix_product(A, Bm, C, signed)
    w = B.width(C[0][0])
    ea, eb = (B.sext if s else B.zext for s in signed)
    A = [[ea(x, w) for x in row] for row in A]          # each element widened once, not once per product
    Bm = [[eb(y, w) for y in column] for column in Bm]
    return [[total(B, [c, *map(B.mul, a, b)]) for b, c in zip(Bm, row_c)] for a, row_c in zip(A, C)]


def _matrix_product(A, Bm, C, signed):
    """Elements extended to 64 bits and every sum taken in uint64: its wrap-around modulo 2**64 keeps
    the sums modulo 2**w."""
    w = C[0][0].w
    n = max(x.v.shape[0] for rows in (A, Bm, C) for row in rows for x in row)   # a constant's is 1
    a, b = (_extended(_array(rows, n), rows[0][0].w, s) for rows, s in ((A, signed[0]), (Bm, signed[1])))
    sums = np.einsum("itn,jtn->ijn", a, b) + _array(C, n)
    return [[Bits(lane & np.uint64(mask(w)), w) for lane in row] for row in sums]


def _array(rows, n: int) -> np.ndarray:
    """Rows of lanes → uint64 array (rows, lanes, n)."""
    out = np.empty((len(rows), len(rows[0]), n), np.uint64)
    for i, row in enumerate(rows):
        for t, x in enumerate(row):
            out[i, t] = x.v
    return out


def _extended(values: np.ndarray, e: int, signed: bool) -> np.ndarray:
    """``e``-bit lanes sign-extended to 64 bits (modulo 2**64) where ``signed``; as they are else."""
    if not signed:
        return values
    sign = np.uint64(1 << (e - 1))
    return (values ^ sign) - sign
