"""The lane algebra: the few bit-vector primitives every instruction semantic is written in.

A semantic is a plain Python function of a backend ``B`` and its operands. The same function runs
on two backends:

* ``NUMPY`` evaluates a batch of concrete inputs at once (differential tests, CEGIS examples,
  kernel tests). A value is a ``Bits``: width ``w`` plus a numpy array, ``uint64`` of shape
  ``(n,)`` when ``w <= 64`` and ``uint8`` bytes of shape ``(n, w // 8)`` (little-endian) when wider.
* ``Z3`` builds bit-vector terms (synthesis, proofs). A value is a ``z3.BitVecRef``.

Lane ``i`` of width ``w`` occupies bits ``[i*w, i*w + w)``: the little-endian lane numbering of both
Arm and x86. Wide values (> 64 bits) support only lane splitting, joining and bitwise logic;
arithmetic happens on lanes of at most 64 bits.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import reduce

import numpy as np
import z3


def mask(w: int) -> int:
    return (1 << w) - 1


_UINT = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}


@dataclass(frozen=True, eq=False)
class Bits:
    """A batch of concrete ``w``-bit values (see module docstring for the array layout)."""
    v: np.ndarray
    w: int

    @property
    def wide(self) -> bool:
        return self.w > 64


class NumpyBackend:
    """Concrete semantics on batches. Arithmetic wraps modulo 2**64 and is then masked to ``w``."""
    symbolic = False

    def width(self, x: Bits) -> int:
        return x.w

    # -- construction and conversion
    def const(self, value: int, w: int) -> Bits:
        if w > 64:
            return Bits(np.frombuffer((value & mask(w)).to_bytes(w // 8, "little"), np.uint8)[None, :], w)
        return Bits(np.array([value & mask(w)], np.uint64), w)   # 1-d: array ops wrap silently

    def from_bytes(self, data: np.ndarray, w: int) -> Bits:
        """``data``: uint8 array (n, w // 8) → Bits."""
        data = np.ascontiguousarray(data, dtype=np.uint8)
        assert data.shape[1] * 8 == w, (data.shape, w)
        if w > 64:
            return Bits(data, w)
        padded = np.zeros((data.shape[0], 8), np.uint8)
        padded[:, : w // 8] = data
        return Bits(padded.view("<u8")[:, 0].astype(np.uint64), w)

    def to_bytes(self, x: Bits, n: int) -> np.ndarray:
        """Bits → uint8 array (n, w // 8)."""
        if x.wide:
            return np.broadcast_to(x.v, (n, x.w // 8)).copy()
        v = np.broadcast_to(np.asarray(x.v, np.uint64), (n,))
        return np.ascontiguousarray(v.astype("<u8")).view(np.uint8).reshape(n, 8)[:, : x.w // 8].copy()

    # -- lanes
    def lanes(self, x: Bits, w: int) -> list[Bits]:
        assert x.w % w == 0, f"{x.w}-bit value has no {w}-bit lanes"
        count = x.w // w
        if not x.wide:
            return [self.extract(x, i * w, w) for i in range(count)]
        if w > 64:
            step = w // 8
            return [Bits(x.v[:, i * step:(i + 1) * step], w) for i in range(count)]
        if w in _UINT:
            cols = np.ascontiguousarray(x.v).view(_UINT[w])
            return [Bits(cols[:, i].astype(np.uint64), w) for i in range(count)]
        return [lane for chunk in self.lanes(x, 64) for lane in self.lanes(chunk, w)]

    def join(self, parts: list[Bits]) -> Bits:
        """Lane 0 first → one value of the summed width."""
        w = parts[0].w
        assert all(p.w == w for p in parts), [p.w for p in parts]
        total = w * len(parts)
        if total <= 64:
            acc = np.zeros(1, np.uint64)
            for i, p in enumerate(parts):
                acc = acc | (np.asarray(p.v, np.uint64) << np.uint64(i * w))
            return Bits(acc, total)
        if w > 64:
            n = max(p.v.shape[0] for p in parts)
            return Bits(np.concatenate([np.broadcast_to(p.v, (n, w // 8)) for p in parts], axis=1), total)
        if w not in _UINT:
            return self.join([self.join(parts[i:i + 64 // w]) for i in range(0, len(parts), 64 // w)])
        cols = np.broadcast_arrays(*[np.asarray(p.v, np.uint64) for p in parts])
        stacked = np.ascontiguousarray(np.atleast_2d(np.stack(cols, axis=-1).astype(_UINT[w])))
        return Bits(stacked.view(np.uint8).reshape(stacked.shape[0], total // 8), total)

    def extract(self, x: Bits, lo: int, w: int) -> Bits:
        """Bits ``[lo, lo + w)`` of a value of at most 64 bits."""
        assert not x.wide and lo + w <= x.w
        return Bits((np.asarray(x.v, np.uint64) >> np.uint64(lo)) & np.uint64(mask(w)), w)

    # -- bitwise (any width)
    def and_(self, a: Bits, b: Bits) -> Bits: return Bits(a.v & b.v, _same(a, b))
    def or_(self, a: Bits, b: Bits) -> Bits: return Bits(a.v | b.v, _same(a, b))
    def xor(self, a: Bits, b: Bits) -> Bits: return Bits(a.v ^ b.v, _same(a, b))

    def not_(self, a: Bits) -> Bits:
        return Bits(~a.v, a.w) if a.wide else Bits(~np.asarray(a.v, np.uint64) & np.uint64(mask(a.w)), a.w)

    # -- arithmetic (at most 64 bits)
    def _wrap(self, v, w: int) -> Bits:
        return Bits(np.asarray(v, np.uint64) & np.uint64(mask(w)), w)

    def add(self, a: Bits, b: Bits) -> Bits: return self._wrap(a.v + b.v, _same(a, b))
    def sub(self, a: Bits, b: Bits) -> Bits: return self._wrap(a.v - b.v, _same(a, b))
    def mul(self, a: Bits, b: Bits) -> Bits: return self._wrap(a.v * b.v, _same(a, b))

    def zext(self, a: Bits, w: int) -> Bits:
        assert w >= a.w
        return Bits(a.v, w)

    def sext(self, a: Bits, w: int) -> Bits:
        assert w >= a.w
        sign = np.uint64(1 << (a.w - 1))
        return self._wrap((np.asarray(a.v, np.uint64) ^ sign) - sign, w)

    def trunc(self, a: Bits, w: int) -> Bits:
        return self._wrap(a.v, w)

    def shl(self, a: Bits, k: int) -> Bits:
        return self._wrap(np.asarray(a.v, np.uint64) << np.uint64(k), a.w) if k < a.w else self.const(0, a.w)

    def lshr(self, a: Bits, k: int) -> Bits:
        return Bits(np.asarray(a.v, np.uint64) >> np.uint64(k), a.w) if k < a.w else self.const(0, a.w)

    def ashr(self, a: Bits, k: int) -> Bits:
        wide = self.sext(a, 64)
        return self._wrap(wide.v.astype(np.int64) >> np.int64(min(k, 63)), a.w)

    def popcount(self, a: Bits) -> Bits:
        return Bits(np.bitwise_count(np.asarray(a.v, np.uint64)).astype(np.uint64), a.w)

    # -- comparison and choice
    def ult(self, a: Bits, b: Bits): return np.asarray(a.v) < np.asarray(b.v)
    def slt(self, a: Bits, b: Bits): return self.sext(a, 64).v.astype(np.int64) < self.sext(b, 64).v.astype(np.int64)
    def eq(self, a: Bits, b: Bits): return np.asarray(a.v) == np.asarray(b.v)

    def ite(self, cond, a: Bits, b: Bits) -> Bits:
        return Bits(np.where(cond, a.v, b.v), _same(a, b))

    def select(self, index: Bits, options: list[Bits]) -> Bits:
        """``options[index]`` per batch element; ``index`` must be < len(options)."""
        w = options[0].w
        table = np.stack(np.broadcast_arrays(np.asarray(index.v), *[np.asarray(o.v, np.uint64) for o in options])[1:], -1)
        idx = np.broadcast_to(np.asarray(index.v, np.int64), table.shape[:-1])
        return Bits(np.take_along_axis(table, idx[..., None], -1)[..., 0], w)


class Z3Backend:
    """Symbolic semantics: the same primitives over Z3 bit-vector terms."""
    symbolic = True

    def width(self, x) -> int: return x.size()
    def const(self, value: int, w: int): return z3.BitVecVal(value & mask(w), w)
    def lanes(self, x, w: int): return [z3.Extract(i * w + w - 1, i * w, x) for i in range(x.size() // w)]
    def join(self, parts): return parts[0] if len(parts) == 1 else z3.Concat(*reversed(parts))
    def extract(self, x, lo: int, w: int): return z3.Extract(lo + w - 1, lo, x)
    def and_(self, a, b): return a & b
    def or_(self, a, b): return a | b
    def xor(self, a, b): return a ^ b
    def not_(self, a): return ~a
    def add(self, a, b): return a + b
    def sub(self, a, b): return a - b
    def mul(self, a, b): return a * b
    def zext(self, a, w: int): return z3.ZeroExt(w - a.size(), a) if w > a.size() else a
    def sext(self, a, w: int): return z3.SignExt(w - a.size(), a) if w > a.size() else a
    def trunc(self, a, w: int): return z3.Extract(w - 1, 0, a) if w < a.size() else a
    def shl(self, a, k: int): return a << k if k < a.size() else self.const(0, a.size())
    def lshr(self, a, k: int): return z3.LShR(a, k) if k < a.size() else self.const(0, a.size())
    def ashr(self, a, k: int): return a >> min(k, a.size() - 1)

    def popcount(self, a):
        """Defined as the sum of the bits, so that no lemma about popcount is ever needed."""
        w = a.size()
        return reduce(lambda s, b: s + b, [z3.ZeroExt(w - 1, z3.Extract(i, i, a)) for i in range(w)])

    def ult(self, a, b): return z3.ULT(a, b)
    def slt(self, a, b): return a < b
    def eq(self, a, b): return a == b
    def ite(self, cond, a, b): return z3.If(cond, a, b)

    def select(self, index, options):
        result = options[-1]
        for i in range(len(options) - 2, -1, -1):
            result = z3.If(index == i, options[i], result)
        return result


def _same(a: Bits, b: Bits) -> int:
    assert a.w == b.w, f"width mismatch {a.w} vs {b.w}"
    return a.w


NUMPY = NumpyBackend()
Z3 = Z3Backend()


# ---------------------------------------------------------------- helpers over any backend
def lanewise(B, w: int, f, *regs):
    """Apply ``f`` to corresponding ``w``-bit lanes of ``regs`` and join the results."""
    return B.join([f(*ls) for ls in zip(*(B.lanes(r, w) for r in regs))])


def total(B, values):
    return reduce(B.add, values)


def sat_signed(B, x, w: int):
    """Clamp a signed value held in a wider lane to ``w`` bits (Intel SaturateToSignedWord etc.)."""
    hi, lo = B.const(mask(w - 1), width(B, x)), B.const(-(1 << (w - 1)), width(B, x))
    return B.trunc(B.ite(B.slt(hi, x), hi, B.ite(B.slt(x, lo), lo, x)), w)


def sat_unsigned(B, x, w: int):
    """Clamp a signed value held in a wider lane to the unsigned ``w``-bit range."""
    hi, zero = B.const(mask(w), width(B, x)), B.const(0, width(B, x))
    return B.trunc(B.ite(B.slt(hi, x), hi, B.ite(B.slt(x, zero), zero, x)), w)


def width(B, x) -> int:
    return B.width(x)

