"""The lane algebra: numpy and Z3 backends against plain Python integer arithmetic."""
import numpy as np
import z3
from hypothesis import given, settings, strategies as st

from isa_specs.lanes import NUMPY, Z3, lanewise, mask, sat_signed, sat_unsigned, total

WIDTHS = st.sampled_from([8, 16, 32, 64])


def _np(values, w):
    raw = b"".join(v.to_bytes(w // 8, "little") for v in values)
    return NUMPY.from_bytes(np.frombuffer(raw, np.uint8).reshape(len(values), -1), w)


def _ints(bits):
    return [int.from_bytes(row.tobytes(), "little") for row in NUMPY.to_bytes(bits, bits.v.shape[0] if np.ndim(bits.v) else 1)]


def _z3(term):
    return z3.simplify(term).as_long()


def _signed(v, w):
    return v - (1 << w) if v >> (w - 1) else v


BINARY = {
    "add": lambda a, b, w: (a + b) & mask(w),
    "sub": lambda a, b, w: (a - b) & mask(w),
    "mul": lambda a, b, w: (a * b) & mask(w),
    "and_": lambda a, b, w: a & b,
    "or_": lambda a, b, w: a | b,
    "xor": lambda a, b, w: a ^ b,
}


@given(st.sampled_from(sorted(BINARY)), WIDTHS, st.data())
def test_binary_ops_match_python(op, w, data):
    xs = data.draw(st.lists(st.integers(0, mask(w)), min_size=1, max_size=8))
    ys = data.draw(st.lists(st.integers(0, mask(w)), min_size=len(xs), max_size=len(xs)))
    got = _ints(getattr(NUMPY, op)(_np(xs, w), _np(ys, w)))
    want = [BINARY[op](x, y, w) for x, y in zip(xs, ys)]
    assert got == want
    assert [_z3(getattr(Z3, op)(z3.BitVecVal(x, w), z3.BitVecVal(y, w))) for x, y in zip(xs, ys)] == want


@given(WIDTHS, st.integers(0, 2**64 - 1), st.integers(0, 70))
def test_extension_shift_popcount(w, raw, k):
    x = raw & mask(w)
    nx, zx = _np([x], w), z3.BitVecVal(x, w)
    assert _ints(NUMPY.sext(nx, 64)) == [_signed(x, w) & mask(64)] == [_z3(Z3.sext(zx, 64))]
    assert _ints(NUMPY.zext(nx, 64)) == [x] == [_z3(Z3.zext(zx, 64))]
    assert _ints(NUMPY.shl(nx, k)) == [(x << k) & mask(w)] == [_z3(Z3.shl(zx, k))]
    assert _ints(NUMPY.lshr(nx, k)) == [x >> k] == [_z3(Z3.lshr(zx, k))]
    assert _ints(NUMPY.ashr(nx, k)) == [(_signed(x, w) >> k) & mask(w)] == [_z3(Z3.ashr(zx, k))]
    assert _ints(NUMPY.popcount(nx)) == [bin(x).count("1")] == [_z3(Z3.popcount(zx))]
    assert _ints(NUMPY.trunc(nx, 8)) == [x & 0xFF] == [_z3(Z3.trunc(zx, 8))]


@given(st.sampled_from([64, 128, 256, 512]), st.sampled_from([8, 16, 32, 64, 128]), st.data())
def test_lanes_join_roundtrip_little_endian(total_bits, w, data):
    if w > total_bits:
        return
    value = data.draw(st.integers(0, mask(total_bits)))
    want = [(value >> (i * w)) & mask(w) for i in range(total_bits // w)]
    x = _np([value], total_bits)
    lanes = NUMPY.lanes(x, w)
    assert [_ints(l)[0] for l in lanes] == want
    assert _ints(NUMPY.join(lanes)) == [value]
    zl = Z3.lanes(z3.BitVecVal(value, total_bits), w)
    assert [_z3(l) for l in zl] == want
    assert _z3(Z3.join(zl)) == value


@given(st.integers(-(2**20), 2**20), st.sampled_from([8, 16]))
def test_saturation(v, w):
    x32 = v & mask(32)
    want_s = max(-(1 << (w - 1)), min(mask(w - 1), v)) & mask(w)
    want_u = max(0, min(mask(w), v))
    assert _ints(sat_signed(NUMPY, _np([x32], 32), w)) == [want_s] == [_z3(sat_signed(Z3, z3.BitVecVal(x32, 32), w))]
    assert _ints(sat_unsigned(NUMPY, _np([x32], 32), w)) == [want_u] == [_z3(sat_unsigned(Z3, z3.BitVecVal(x32, 32), w))]


@given(st.lists(st.integers(0, 15), min_size=16, max_size=16), st.integers(0, 15))
def test_select_picks_indexed_option(options, index):
    n = NUMPY.select(_np([index], 8), [NUMPY.const(o, 8) for o in options])
    assert _ints(n) == [options[index]]
    assert _z3(Z3.select(z3.BitVecVal(index, 8), [z3.BitVecVal(o, 8) for o in options])) == options[index]


def test_lanewise_and_total_over_a_batch():
    a = _np([0x0102030405060708, 0xFFFFFFFFFFFFFFFF], 64)
    assert _ints(lanewise(NUMPY, 16, NUMPY.add, a, a)) == [0x020406080A0C0E10, 0xFFFEFFFEFFFEFFFE]
    assert _ints(total(NUMPY, NUMPY.lanes(a, 8))) == [36, 0xF8]


@settings(max_examples=30)
@given(st.integers(0, mask(128)))
def test_width_mismatch_is_rejected(value):
    import pytest
    with pytest.raises(AssertionError):
        NUMPY.add(_np([value & 0xFF], 8), _np([value & 0xFFFF], 16))
