"""QuantizeLinear by a constant scale on AArch64 (qnn/prim/neon_quantize.py: the division by the scale as a product
by its reciprocal in double, proved equal; the image's each 16 pixels' channels one interleaved store, any other
in its input's layout, 16 values a vector), run under
qemu-aarch64 against numpy's float32 division, rounded half to even: the values next to every rounding
tie of the output range (where a float32 reciprocal is wrong), random pixels, infinities and values far
out of range, with 2, 3 and 4 channels, a row's tail of pixels, u8 and s8 outputs, a power-of-two
scale; in the input's layout, a tail of values past the last vector."""
import numpy as np
import pytest

from conftest import HOST_RUNS, skip_if
from tvm_integration.qemu import cross

pytestmark = [pytest.mark.qemu, skip_if(HOST_RUNS.qemu)]


def near_ties(scale: np.float32, lo: int, hi: int) -> np.ndarray:
    """The float32 x nearest ``(k + 1/2) * scale`` for every tie k + 1/2 of the range, and 3 neighbours
    either side."""
    centre = ((np.arange(lo - 1, hi + 1) + 0.5) * np.float64(scale)).astype(np.float32)
    values, up, down = [centre], centre, centre
    for _ in range(3):
        up, down = np.nextafter(up, np.float32(np.inf)), np.nextafter(down, np.float32(-np.inf))
        values += [up, down]
    return np.concatenate(values)


def quantize(x: np.ndarray, scale: np.float32, zero_point: int, dtype: str) -> np.ndarray:
    """QuantizeLinear as onnxruntime computes it: x / scale in float32, half to even, saturated."""
    info = np.iinfo(dtype)
    with np.errstate(over="ignore"):                     # 3e38 / scale: inf, saturated
        return np.clip(np.rint(x / scale) + zero_point, info.min, info.max).astype(dtype)


def compiled(shape, scale: float, zero_point: int, dtype: str, layout: str):
    import tvm
    from tvm import te

    from tvm_integration.kernels.selection import aarch64_target
    from tvm_integration.qnn.prim import neon_quantize, schedules
    from tvm_integration.qnn.semantics import arithmetic
    x = te.placeholder(shape, "float32", name="x")
    y = arithmetic.quantize(x, scale=scale, zero_point=zero_point, out_dtype=dtype, layout=layout)
    func = te.create_prim_func([x, y]).with_attrs({"qnn.op": "quantize", "qnn.layout": layout, "qnn.scale": scale,
                                                   "qnn.zero_point": zero_point, "qnn.out_dtype": dtype})
    target = tvm.target.Target(aarch64_target("cortex-a72"))
    assert neon_quantize.applies(func, target)
    mod = tvm.IRModule({"main": schedules.schedule(func, target)})
    b, c, h, w = shape
    out = (b, h, w, c) if layout == "NHWC" else shape
    return cross.QemuOperator(tvm.compile(mod, target=target), [], out, dtype, shape, "float32", out)


@pytest.mark.parametrize("shape, scale, zero_point, dtype, layout", [
    ((1, 3, 37, 35), 0.0187, 114, "uint8", "NHWC"),          # MobileNet's image: st3, 2 vectors and 3 pixels a row
    ((2, 2, 19, 48), 0.0423, 0, "uint8", "NHWC"),
    ((1, 4, 23, 40), 2.0 ** -5, -3, "int8", "NHWC"),          # a power-of-two scale: the float32 product
    ((1, 2, 37, 35), 0.0211, 131, "uint8", "same"),           # 2590 values: 161 vectors and 14 more
    ((1, 1, 12, 768), 0.00733, -7, "int8", "same"),           # an encoder's row
])
def test_quantize_equals_the_division(shape, scale, zero_point, dtype, layout):
    info = np.iinfo(dtype)
    s = np.float32(scale)
    rng = np.random.default_rng(0)
    special = np.array([np.inf, -np.inf, 3e38, -3e38, 0.0, -0.0, 1e-40, -1e-40], np.float32)
    values = np.concatenate([near_ties(s, info.min - zero_point, info.max - zero_point), special])
    x = (rng.standard_normal(int(np.prod(shape))) * float(s) * 100).astype(np.float32)
    x[rng.permutation(x.size)[:values.size]] = values
    x = x.reshape(shape)
    y = compiled(shape, scale, zero_point, dtype, layout)(x)
    expected = quantize(x, s, zero_point, dtype)
    np.testing.assert_array_equal(y, expected.transpose(0, 2, 3, 1) if layout == "NHWC" else expected)


def test_which_quantizes_on_aarch64():
    """On AArch64 every quantize by a constant scale: the image's of 2-4 channels written NHWC, any in its
    input's layout; none on x86."""
    import tvm
    from tvm import te

    from tvm_integration.kernels.selection import aarch64_target
    from tvm_integration.qnn.prim import neon_quantize
    from tvm_integration.qnn.semantics import arithmetic

    def func(shape, layout):
        x = te.placeholder(shape, "float32", name="x")
        y = arithmetic.quantize(x, scale=0.5, zero_point=0, out_dtype="uint8", layout=layout)
        return te.create_prim_func([x, y]).with_attrs({"qnn.op": "quantize", "qnn.layout": layout})
    arm, x86 = tvm.target.Target(aarch64_target("cortex-a53")), tvm.target.Target({"kind": "llvm", "mcpu": "skylake"})
    assert neon_quantize.applies(func((1, 3, 8, 8), "NHWC"), arm)
    assert not neon_quantize.applies(func((1, 3, 8, 8), "NHWC"), x86)
    assert not neon_quantize.applies(func((1, 8, 8, 8), "NHWC"), arm)       # 8 channels: no interleaved store
    assert neon_quantize.applies(func((1, 3, 8, 8), "same"), arm)
    assert not neon_quantize.applies(func((1, 3, 8, 8), "same"), x86)
