"""TVM's lowering of qsynth's tiles (scripts/tvm_baselines.py) against numpy references written from the
definitions (bit by bit, ±1 weights), on random inputs and on the extremes (all-ones planes, u8 255,
s8 -128, accumulators about to wrap). The NEON schedules are checked by building them for the host."""
from __future__ import annotations

import numpy as np
import pytest
import tvm

from conftest import HOST_RUNS, skip_if
from scripts import tvm_baselines as tb

HOST = {"kind": "llvm"}


def bits(x: np.ndarray) -> np.ndarray:
    """Reduction index 8t+b = bit b of byte t."""
    return np.unpackbits(x, axis=-1, bitorder="little").astype(np.int64)


def bitserial_ref(w: np.ndarray, a: np.ndarray, encoding: str) -> np.ndarray:
    wv = bits(w) if encoding == "unipolar" else 2 * bits(w) - 1      # bipolar weights: bit 1 = +1, 0 = -1
    av = bits(a)
    return sum((wv[j] @ av[k]) << (j + k) for j in range(w.shape[0]) for k in range(a.shape[0]))


def planes(rng, shape, fill: str) -> np.ndarray:
    return np.full(shape, 255, np.uint8) if fill == "ones" else rng.integers(0, 256, shape, dtype=np.uint8)


def run(sch, *arrays) -> np.ndarray:
    f = tvm.compile(sch.mod, target=tvm.target.Target(HOST))
    args = [tvm.runtime.tensor(np.ascontiguousarray(x)) for x in arrays]
    f[tb.FUNC](*args)
    return args[-1].numpy()


@skip_if(HOST_RUNS.lacks("avx512vpopcntdq"))
@pytest.mark.parametrize("abits,wbits,rows,reg_bits,kblocks,encoding,row_tile", [
    (1, 1, 8, 512, 2, "unipolar", None), (2, 2, 8, 512, 1, "hybrid", None), (3, 2, 4, 256, 1, "unipolar", None),
    (2, 3, 3, 64, 3, "hybrid", None), (1, 1, 32, 512, 2, "unipolar", 8), (1, 1, 24, 512, 3, "hybrid", 8)])
def test_bitserial_x86(abits, wbits, rows, reg_bits, kblocks, encoding, row_tile):
    """One tile, or a whole dense looping over tiles of ``row_tile`` rows (the dense benchmark's)."""
    f = tb.bitserial_x86(abits, wbits, rows, reg_bits, kblocks, encoding, row_tile=row_tile)
    rng = np.random.default_rng(abits * 10 + wbits)
    nbytes = kblocks * reg_bits // 8
    for fill in ("random", "ones"):
        w, a = planes(rng, (wbits, rows, nbytes), fill), planes(rng, (abits, nbytes), fill)
        got = f.run(w, a)
        assert got.dtype == np.int64 and got.shape == (rows,)
        np.testing.assert_array_equal(got, bitserial_ref(w, a, encoding))
    w[:, 0] = 0
    np.testing.assert_array_equal(f.run(w, a), bitserial_ref(w, a, encoding))


@pytest.mark.parametrize("abits,wbits,reg_bits,encoding", [(1, 1, 64, "unipolar"), (2, 2, 128, "unipolar"),
                                                           (3, 3, 128, "hybrid"), (1, 2, 64, "hybrid")])
def test_bitserial_neon_schedule_on_host(abits, wbits, reg_bits, encoding):
    """The TIR whose NEON assembly is reported adds the tile to 16-bit output lanes (wrap-around)."""
    rows, nbytes = 8, reg_bits // 8
    lane = np.uint16 if encoding == "unipolar" else np.int16
    sch = tb.neon_bitserial_schedule(abits, wbits, rows, reg_bits, encoding)
    rng = np.random.default_rng(reg_bits + abits)
    for fill in ("random", "ones"):
        w, a = planes(rng, (wbits, rows, nbytes), fill), planes(rng, (abits, nbytes), fill)
        base = rng.integers(np.iinfo(lane).min, np.iinfo(lane).max, rows, dtype=lane, endpoint=True)
        got = run(sch, w, a, base, np.zeros(rows, lane))
        np.testing.assert_array_equal(got, (base + bitserial_ref(w, a, encoding)).astype(lane))


def int8_cases(rng, mr, nr, k, b_lo, b_hi, c_top):
    """(A, B as rows, C) in int64: random; then the extremes, C within a few steps of the accumulator's
    largest value ``c_top`` (or of its smallest) so that the sum wraps."""
    a_max = np.full((mr, k), 255, np.uint8)
    yield (rng.integers(0, 256, (mr, k), dtype=np.uint8), rng.integers(b_lo, b_hi + 1, (nr, k)),
           rng.integers(c_top - 2**32 + 1, c_top + 1, (mr, nr)))
    yield a_max, np.full((nr, k), b_hi), np.full((mr, nr), c_top - 4)
    yield a_max, np.full((nr, k), b_lo), np.full((mr, nr), c_top - 2**32 + 5)


@skip_if(HOST_RUNS.lacks("avx512vnni"))
@pytest.mark.parametrize("build", [tb.int8_vnni_x86, tb.int8_plain_x86])
@pytest.mark.parametrize("mr,nr,k", [(12, 16, 64), (3, 32, 8)])
def test_int8_x86(build, mr, nr, k):
    f = build(mr, nr, k)
    for a, b, c in int8_cases(np.random.default_rng(mr), mr, nr, k, -128, 127, 2**31 - 1):
        bp = b.astype(np.int8).reshape(nr, k // 4, 4).transpose(1, 0, 2)
        got = f.run(a, bp, c.astype(np.int32))
        assert got.dtype == np.int32
        np.testing.assert_array_equal(got, (c + a.astype(np.int64) @ b.T).astype(np.int32))


def test_int8_neon_schedule_on_host():
    """u8 x u8 into uint32 lanes, in place, with wrap-around."""
    mr, nr, k = 4, 4, 8
    sch = tb.neon_int8_schedule(mr, nr, k)
    for a, b, c in int8_cases(np.random.default_rng(1), mr, nr, k, 0, 255, 2**32 - 1):
        got = run(sch, a, b.astype(np.uint8), c.astype(np.uint32))
        np.testing.assert_array_equal(got, (c + a.astype(np.int64) @ b.T).astype(np.uint32))


@pytest.mark.parametrize("reg_bits,encoding", [(64, "unipolar"), (128, "hybrid")])
def test_bitserial_neon_asm(reg_bits, encoding):
    asm = tb.bitserial_neon_asm(1, 1, 8, reg_bits, encoding)
    assert asm.startswith(f"{tb.FUNC}_compute_:") and asm.rstrip().endswith("ret")
    body = tb.asm_body_instructions(asm)
    assert body and body[-1] == "ret"
    assert sum(i.split()[0] == "cnt" for i in body) >= 8          # at least one byte popcount per row
    assert not any(i.startswith(".") or i.endswith(":") or "//" in i for i in body)


def test_int8_neon_asm():
    body = tb.asm_body_instructions(tb.int8_neon_asm(4, 4, 8))
    assert body[-1] == "ret" and any(i.split()[0] in ("umlal", "umull", "mla", "udot") for i in body)


def test_asm_body_instructions_strips_everything_but_instructions():
    asm = "f:\n.Lfunc_begin0:\n\t.cfi_startproc\n\tcnt\tv0.16b, v0.16b // popcount\n\n.Ltmp1:\n\tadd\tx0, x0, #1\n\tret\n"
    assert tb.asm_body_instructions(asm) == ["cnt\tv0.16b, v0.16b", "add\tx0, x0, #1", "ret"]
