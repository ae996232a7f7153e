"""Stage inputs described by per-lane ranges: sampling, the Z3 precondition and the linear-form
proof all derive from one description, so they cannot disagree."""
from __future__ import annotations

from dataclasses import dataclass
from itertools import product

import numpy as np
import z3

from isa_specs.linear_forms import LINEAR, Field, Lin


@dataclass(frozen=True)
class LaneRange:
    """Every ``lane_bits`` lane of the input holds an integer in ``[lo, hi]`` (two's complement).
    With ``repeat`` > 0 the register is one ``repeat``-bit group broadcast to all positions."""
    lane_bits: int
    lo: int
    hi: int
    repeat: int = 0

    def lane_index(self, i: int) -> int:
        """Which independent lane position ``i`` is (positions repeat with the group)."""
        return i % (self.repeat // self.lane_bits) if self.repeat else i


def sample(bits: list[int], ranges: list[LaneRange | None], constants: dict[int, int], rng, n: int):
    """``n`` inputs; row 0 puts every ranged lane at its maximum, row 1 at its minimum."""
    out = []
    for idx, (b, r) in enumerate(zip(bits, ranges)):
        if idx in constants:
            raw = np.frombuffer(constants[idx].to_bytes(b // 8, "little"), np.uint8)
            out.append(np.tile(raw, (n, 1)))
            continue
        if r is None:
            out.append(rng.integers(0, 256, (n, b // 8), dtype=np.uint8))
            continue
        group = (r.repeat or b) // r.lane_bits
        lanes = rng.integers(r.lo, r.hi + 1, (n, group), dtype=np.int64)
        lanes[0], lanes[min(1, n - 1)] = (r.hi, r.lo) if n > 1 else (r.hi, r.hi)
        lanes = np.tile(lanes, (1, b // r.lane_bits // group))
        dtype = {8: "<u1", 16: "<u2", 32: "<u4", 64: "<u8"}[r.lane_bits]
        raw = lanes.astype(np.int64).view(np.uint64).astype(dtype)     # two's complement, truncated
        out.append(np.ascontiguousarray(raw).view(np.uint8).reshape(n, b // 8))
    return out


def precondition(ranges, constants):
    """The Z3 precondition the same description denotes."""
    def pre(B, xs):
        cs = []
        for idx, (x, r) in enumerate(zip(xs, ranges)):
            if idx in constants:
                cs.append(x == constants[idx])
            elif r is not None:
                lanes = B.lanes(x, r.lane_bits)
                for i, lane in enumerate(lanes):
                    if r.lo < 0:
                        cs += [lane >= r.lo, lane <= r.hi]
                    else:
                        cs += [z3.UGE(lane, r.lo), z3.ULE(lane, r.hi)]
                    if r.lane_index(i) != i:
                        cs.append(lane == lanes[r.lane_index(i)])
        return z3.And(cs) if cs else z3.BoolVal(True)
    return pre


def linear_inputs(names, bits, ranges, constants, case: dict | None = None):
    """Inputs for the linear-form backend: one variable per ranged lane; ``case`` narrows lanes,
    ``{(input index, lane index): (lo, hi)}`` (one of ``sign_cases``)."""
    out = []
    case = case or {}
    for idx, (name, b, r) in enumerate(zip(names, bits, ranges)):
        if idx in constants:
            out.append(LINEAR.const(constants[idx], b))
        elif r is None:      # any bits: one variable per byte
            out.append(tuple(Field(8, Lin.variable((name, i), 0, 255)) for i in range(b // 8)))
        else:
            out.append(tuple(Field(r.lane_bits, Lin.variable((name, r.lane_index(i)),
                                                             *case.get((idx, r.lane_index(i)), (r.lo, r.hi))))
                             for i in range(b // r.lane_bits)))
    return out


def sign_cases(bits, ranges, split: list[int]):
    """Every combination of sign (negative, zero, positive) of the independent lanes of the inputs
    ``split`` whose range holds both signs: cases covering the whole domain, in each of which an
    instruction that reads a lane's sign (vpsignb, vpabsb) is linear."""
    lanes = [(idx, i, ranges[idx]) for idx in split for i in range((ranges[idx].repeat or bits[idx]) //
                                                                    ranges[idx].lane_bits)
             if ranges[idx].lo < 0 < ranges[idx].hi]
    parts = [[(r.lo, -1), (0, 0), (1, r.hi)] for _, _, r in lanes]
    return [{(idx, i): part for (idx, i, _), part in zip(lanes, choice)} for choice in product(*parts)]
