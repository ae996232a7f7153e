"""The linear-form prover: what it claims must hold on every input. Its operations are checked
against numpy on values the abstraction keeps split into fields, and hand-written exploits of
earlier holes stay refused (Z3 alone refutes each of them)."""
import time

import numpy as np
import pytest

from isa_specs import get_isa
from sketches.program import Instr, Op, Program
from synth.kernel import family, spec_from_key
from isa_specs.linear_forms import LINEAR, Field, Lin, Unknown, lanes_equal
from synth.proof import prove_equal
from synth.stages import prove_stage

A1W1_ACC_AVX512 = {"abits": 1, "encoding": "unipolar", "isa": "avx512", "kind": "bitserial", "layout": "acc",
                   "out_bits": 64, "reg_bits": 512, "rows": 8, "wbits": 1}


def _stage(key: dict, name: str):
    spec = spec_from_key(key)
    return next(s.problem for s in family(spec).stages(spec, get_isa(spec.isa)) if s.problem.name == name)


def _program(problem, body, outputs) -> Program:
    return Program(problem.isa.name, tuple(problem.input_names), tuple(problem.input_bits),
                   tuple(Instr(Op.parse(op), tuple(args)) for op, args in body), tuple(outputs))


def _split_bytes(name: str) -> tuple:
    """A 64-bit lane the backend keeps as eight byte fields: x_i + y_i - y_i per byte, whose
    interval [-255, 510] does not let the bytes merge into one 64-bit form."""
    x = [Lin.variable((name, i), 0, 255) for i in range(8)]
    y = [Lin.variable(("y", i), 0, 255) for i in range(8)]
    return tuple(Field(8, xi + yi + yi.scale(-1)) for xi, yi in zip(x, y))


# Finding 1 of issue 18 and a variant: programs the prover once accepted. A value the abstraction
# holds as several fields must never be shifted, counted or compared field by field.
EXPLOITS = {
    "finding 1: vpsrlq #63 of byte-split lanes, dropped by a range-decided vpmaxub": (
        [("vpandq.zmm", [0, 1]), ("vpopcntq.zmm", [2]), ("vpaddb.zmm", [0, 1]), ("vpsubb.zmm", [4, 1]),
         ("vpsrlq.zmm#63", [5]), ("vpmaxub.zmm", [6, 3])], [7]),
    "vpsrlw #15 of byte-split words, dropped by a range-decided vpmaxub": (
        [("vpandq.zmm", [0, 1]), ("vpopcntq.zmm", [2]), ("vpaddb.zmm", [0, 1]), ("vpsubb.zmm", [4, 1]),
         ("vpsrlw.zmm#15", [5]), ("vpmaxub.zmm", [6, 3])], [7]),
}


@pytest.mark.parametrize("name", EXPLOITS)
def test_exploit_is_not_proved(name):
    problem = _stage(A1W1_ACC_AVX512, "compute")
    program = _program(problem, *EXPLOITS[name])
    assert prove_equal(problem, program, time.monotonic() + 60)[0].result == "refuted"   # Z3 alone
    assert problem.fast_prove(program) is None
    assert prove_stage(problem, program, time.monotonic() + 60).result == "refuted"


def test_counting_a_byte_split_lane_is_still_proved():
    """popcount((w & a) + a - a) per 64-bit lane is the stage: the count of a lane held as byte
    fields is the sum of the byte counts, which the linear forms prove without Z3."""
    problem = _stage(A1W1_ACC_AVX512, "compute")
    program = _program(problem, [("vpandq.zmm", [0, 1]), ("vpaddb.zmm", [2, 1]), ("vpsubb.zmm", [3, 1]),
                                 ("vpopcntq.zmm", [4])], [5])
    assert problem.fast_prove(program).result == "proved"


@pytest.mark.parametrize("op", ["lshr", "ashr", "trunc", "add", "extract", "ult"])
def test_value_dependent_operations_on_split_lanes_are_unknown(op):
    lane = _split_bytes("x")
    calls = {"lshr": lambda: LINEAR.lshr(lane, 63), "ashr": lambda: LINEAR.ashr(lane, 7),
             "trunc": lambda: LINEAR.trunc(lane, 32), "add": lambda: LINEAR.add(lane, lane),
             "extract": lambda: LINEAR.extract(lane, 8, 8), "ult": lambda: LINEAR.ult(lane, lane)}
    with pytest.raises(Unknown):
        calls[op]()


def _value(coeffs, const, values):
    v = np.full(len(next(iter(values.values()))), const, np.int64)
    for (var, _, _), c in coeffs:
        v = v + c * values[var]
    return v


def test_popcount_of_a_split_lane_is_the_whole_lane_count():
    """One 64-bit form whose atoms, each read as the count of its byte, add up to numpy's count of
    the whole lane on random assignments (not eight byte counts in eight byte fields)."""
    lane = _split_bytes("x")
    [count] = LINEAR.popcount(lane)
    assert count.w == 64 and count.v.hi <= 64
    rng = np.random.default_rng(0)
    values = {var: rng.integers(lo, hi + 1, 500) for f in lane for (var, lo, hi), _ in f.v.coeffs}
    pattern = sum((_value(f.v.coeffs, f.v.const, values).astype(np.uint64) & np.uint64(0xFF)) << np.uint64(8 * i)
                  for i, f in enumerate(lane))
    claimed = np.full(500, count.v.const, np.int64)
    for ((op, (w, coeffs, const)), _, _), c in count.v.coeffs:
        assert op == "popcount" and w == 8
        claimed += c * np.bitwise_count(_value(coeffs, const, values).astype(np.uint64) & np.uint64(0xFF)).astype(np.int64)
    whole = np.bitwise_count(np.asarray(pattern, np.uint64)).astype(np.int64)
    assert whole.max() > 8 and np.array_equal(claimed, whole)


def test_lanes_equal_needs_equal_widths_and_splits():
    lane = _split_bytes("x")
    whole = (Field(64, Lin.variable(("z", 0), 0, 255)),)
    assert lanes_equal(lane, lane, 64)
    assert not lanes_equal(lane, whole, 64)                   # different splits: not proved
    with pytest.raises(ValueError):
        lanes_equal(lane, whole + whole, 64)
