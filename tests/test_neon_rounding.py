"""The AArch64 output stage's rounding (output_stage.round_narrowed: ``x + 1.5 * 2^23`` in float32, its bits less
the constant's with saturation, then narrowed), run under qemu-aarch64 against numpy's round half to even,
clamped: every tie and its neighbours in and past the output range, the edges of the range where the sum's
mantissa step is 1 (2^22), values far out of range and the infinities, u8 and s8 outputs with and without a
narrower clamp (a fused Relu6)."""
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


def compiled(n: int, bounds: tuple[int, int], zero_point: int, dtype: str):
    import tvm
    from tvm import s_tir, te

    from tvm_integration.kernels.neon_int8 import neon_target
    from tvm_integration.ops.output_stage import round_narrowed
    from tvm_integration.qemu import cross
    x = te.placeholder((n,), "float32", name="x")
    y = te.compute((n,), lambda i: round_narrowed(x[i], bounds, zero_point, dtype), name="y")
    sch = s_tir.Schedule(te.create_prim_func([x, y]))
    _, lanes = sch.split(sch.get_loops(sch.get_sblock("y"))[0], [None, LANES])
    sch.vectorize(lanes)
    return cross.QemuOperator(tvm.compile(sch.mod, target=neon_target("cortex-a76")), [], (n,), dtype, (n,),
                              "float32", (n,))


@pytest.mark.parametrize("bounds, zero_point, dtype", [
    ((0, 255), 128, "uint8"), ((0, 255), 3, "uint8"), ((-128, 127), -5, "int8"), ((-128, 127), 0, "int8"),
    ((-128, -31), -128, "int8"),              # a Relu6 clamp: [zero point, zero point + 6 / scale]
])
def test_round_narrowed_rounds_half_to_even_and_saturates(bounds, zero_point, dtype):
    x = values()
    op = compiled(len(x), bounds, zero_point, dtype)
    with np.errstate(invalid="ignore"):
        expected = np.clip(np.rint(x.astype(np.float64)) + zero_point, *bounds).astype(dtype)
    np.testing.assert_array_equal(op(x), expected)


def test_round_narrowed_rounds_by_an_add_not_frintn_and_fcvtzs():
    """frintn and fcvtzs are each two micro-ops on the Neoverse-N1's (Cortex-A76's) one FP pipe that the
    depthwise layers' smull and the conversions need too; fadd and a saturating add run on both pipes."""
    assembly = compiled(4 * LANES, (0, 255), 128, "uint8").assembly
    assert "fadd" in assembly and ("sqadd" in assembly or "sqsub" in assembly), assembly
    assert "frintn" not in assembly and "fcvtzs" not in assembly, assembly
