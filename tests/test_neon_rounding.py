"""The AArch64 output stage's rounding (output_stage.round_narrowed: ``x + 1.5 * 2^23`` in float32, its bits less
the constant's with saturation, then narrowed; or, ``short``, its low 16 bits), run under qemu-aarch64 against
numpy's round half to even, clamped: every tie and its neighbours in and past the output range, the edges of the
range where the sum's mantissa step is 1 (2^22), values far out of range and the infinities, u8 and s8 outputs with
and without a narrower clamp (a fused Relu6)."""
import re

import numpy as np
import pytest

from conftest import HOST_RUNS, skip_if

pytestmark = [pytest.mark.qemu, skip_if(HOST_RUNS.qemu)]

LANES = 16


def values() -> np.ndarray:
    """Ties k + 1/2 and their float32 neighbours for k in [-400, 400], the edges of 2^22 and 2^23 and their
    neighbours, large and infinite values, padded to whole vectors."""
    ties = np.arange(-400, 401) + np.float32(0.5)
    edges = np.array([2.0 ** 22, 2.0 ** 22 + 1, 2.0 ** 23, 1.5 * 2.0 ** 23, 2.0 ** 24, 3e38], np.float32)
    edges = np.concatenate([edges, -edges, np.float32([0.0, -0.0, np.inf, -np.inf])])
    centre = np.concatenate([ties, edges]).astype(np.float32)
    x = np.concatenate([centre, np.nextafter(centre, np.float32(np.inf)), np.nextafter(centre, -np.float32(np.inf))])
    return np.concatenate([x, np.zeros(-len(x) % LANES, np.float32)])


def short_values(zero_point: int) -> np.ndarray:
    """``values()`` within ``round_narrowed``'s ``short`` precondition (``|round(x)| + |zero_point| < 2^15``),
    with its edges and their neighbours, padded to whole vectors."""
    edge = np.float32(2 ** 15 - 2 - abs(zero_point))
    x = values()
    edges = np.float32([edge, -edge, edge - 0.5, 0.5 - edge])
    x = np.concatenate([x[np.abs(x) <= edge], edges, np.nextafter(edges, np.float32(0))])
    return np.concatenate([x, np.zeros(-len(x) % LANES, np.float32)])


def compiled(n: int, bounds: tuple[int, int], zero_point: int, dtype: str, short: bool = False):
    import tvm
    from tvm import s_tir, te

    from tvm_integration.kernels.neon_int8 import neon_target
    from tvm_integration.ops.output_stage import round_narrowed
    from tvm_integration.qemu import cross
    x = te.placeholder((n,), "float32", name="x")
    y = te.compute((n,), lambda i: round_narrowed(x[i], bounds, zero_point, dtype, short), name="y")
    sch = s_tir.Schedule(te.create_prim_func([x, y]))
    _, lanes = sch.split(sch.get_loops(sch.get_sblock("y"))[0], [None, LANES])
    sch.vectorize(lanes)
    return cross.QemuOperator(tvm.compile(sch.mod, target=neon_target("cortex-a76")), [], (n,), dtype, (n,),
                              "float32", (n,))


@pytest.mark.parametrize("short", [False, True])
@pytest.mark.parametrize("bounds, zero_point, dtype", [
    ((0, 255), 128, "uint8"), ((0, 255), 3, "uint8"), ((-128, 127), -5, "int8"), ((-128, 127), 0, "int8"),
    ((-128, -31), -128, "int8"),              # a Relu6 clamp: [zero point, zero point + 6 / scale]
])
def test_round_narrowed_rounds_half_to_even_and_saturates(bounds, zero_point, dtype, short):
    """Both forms; ``short`` (narrowed by truncation) on the values its precondition admits, odd and even zero
    points (an even one enters the fadd's constant)."""
    x = short_values(zero_point) if short else values()
    op = compiled(len(x), bounds, zero_point, dtype, short)
    with np.errstate(invalid="ignore"):
        expected = np.clip(np.rint(x.astype(np.float64)) + zero_point, *bounds).astype(dtype)
    np.testing.assert_array_equal(op(x), expected)


def test_round_narrowed_rounds_by_an_add_not_frintn_and_fcvtzs():
    """frintn and fcvtzs are each two micro-ops on the Neoverse-N1's (Cortex-A76's) one FP pipe that the
    depthwise layers' smull and the conversions need too; fadd and a saturating add run on both pipes."""
    assembly = compiled(4 * LANES, (0, 255), 128, "uint8").assembly
    assert "fadd" in assembly and ("sqadd" in assembly or "sqsub" in assembly), assembly
    assert "frintn" not in assembly and "fcvtzs" not in assembly, assembly


@pytest.mark.parametrize("zero_point", [128, 3])
def test_short_narrowing_truncates_instead_of_saturating(zero_point):
    """``short``: no saturating add or subtract and no saturating narrowing to int16 (sqxtn); the zero point
    added to int16 lanes (eight a vector) where it is odd, inside the fadd's constant where it is even."""
    assembly = compiled(4 * LANES, (0, 255), zero_point, "uint8", short=True).assembly
    assert "fadd" in assembly and not re.search(r"\b(sqadd|sqsub|sqxtn)\s", assembly), assembly
    assert bool(re.search(r"\badd\s+v\d+\.8h", assembly)) == bool(zero_point % 2), assembly
