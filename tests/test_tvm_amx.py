"""int8 dense and conv2d on the AMX tile (kernels/amx_runtime.py's contract around the proved _kloop)
against numpy, natively: on a host without AMX they skip (emit/ has no AMX emulation yet)."""
import subprocess

import numpy as np
import pytest

pytest.importorskip("tvm")

from test_tvm_ops import conv_reference, dense_reference, requantize_onnxruntime  # noqa: E402

from emit.model import kernel_model  # noqa: E402
from emit.toolchain import compiler_command  # noqa: E402
from tvm_integration.kernels import amx_runtime, int8, selection  # noqa: E402
from tvm_integration.ops.conv2d import conv2d  # noqa: E402
from tvm_integration.ops.dense import dense  # noqa: E402
from tvm_integration.ops.output_stage import OutputStage, ScaleRequantize  # noqa: E402

KERNEL = selection.int8_kernel("amx")
WHY = selection.usable(KERNEL) or amx_runtime.permission()
pytestmark = pytest.mark.skipif(WHY is not None, reason=f"no native AMX here ({WHY}); the TVM operators build AMX "
                                "natively only (the emulation serves the compiled kernels, emit/)")

RNG = np.random.default_rng(30)


def random(shape, dtype):
    lo = 0 if dtype == "uint8" else -128
    return RNG.integers(lo, lo + 256, shape).astype(dtype)


@pytest.mark.parametrize("m,n,k,dtype", [(32, 32, 256, "uint8"),          # one whole tile
                                         (13, 50, 37, "uint8"),           # every remainder
                                         (70, 100, 600, "int8"),          # several row tiles, K blocks
                                         (1, 1000, 512, "uint8"),         # a classifier
                                         (1, 1, 1, "int8")])
def test_dense_on_amx(m, n, k, dtype):
    w, x = random((n, k), "int8"), random((m, k), dtype)
    assert np.array_equal(dense(w, m, dtype, kernel=KERNEL)(x), dense_reference(x, w))


def test_extremes_on_amx():
    """-128 * -128 summed (signed activations shifted to u8 and compensated) and u8 >= 128."""
    x, w = np.full((5, 300), -128, np.int8), np.full((40, 300), -128, np.int8)
    assert np.all(dense(w, 5, "int8", kernel=KERNEL)(x) == 300 * 128 * 128)
    x, w = RNG.integers(128, 256, (5, 300)).astype(np.uint8), random((40, 300), "int8")
    assert np.array_equal(dense(w, 5, "uint8", kernel=KERNEL)(x), dense_reference(x, w))


CONVS = [  # layout, C, O, kernel, stride, padding, groups, dtype, H=W
    ("NHWC", 64, 64, 3, 1, 1, 1, "uint8", 14),
    ("NHWC", 64, 128, 3, 2, 1, 1, "int8", 14),
    ("NHWC", 64, 40, 1, 1, 0, 1, "uint8", 9),
    ("NHWC", 3, 64, 7, 2, 3, 1, "uint8", 32),      # the stem: folded space-to-depth
    ("NCHW", 16, 50, 3, 1, 1, 1, "int8", 9),
    ("NHWC", 32, 48, 3, 1, 1, 2, "uint8", 9),      # grouped
]


@pytest.mark.parametrize("layout,c,o,ksize,stride,pad,groups,dtype,hw", CONVS)
def test_conv2d_on_amx(layout, c, o, ksize, stride, pad, groups, dtype, hw):
    shape = (1, c, hw, hw) if layout == "NCHW" else (1, hw, hw, c)
    x, w = random(shape, dtype), random((o, c // groups, ksize, ksize), "int8")
    out = conv2d(w, shape, layout, stride, pad, groups, dtype, kernel=KERNEL)(x)
    assert np.array_equal(out, conv_reference(x, w, layout, stride, pad, groups))


def test_fused_output_stage_and_residual_on_amx():
    shape, o = (1, 10, 10, 64), 96
    x, w = random(shape, "uint8"), random((o, 64, 3, 3), "int8")
    scale = RNG.uniform(1e-4, 1e-3, o).astype(np.float32)
    stage = OutputStage(bias=RNG.integers(-5000, 5000, o).astype(np.int32),
                        requantize=ScaleRequantize(scale, 128, "uint8"))
    out = conv2d(w, shape, "NHWC", 1, 1, 1, "uint8", stage, kernel=KERNEL)(x)
    acc = conv_reference(x, w, "NHWC", 1, 1, 1) + stage.bias
    assert np.array_equal(out, requantize_onnxruntime(acc, scale, 128, 0, 255))


def test_the_kernel_survives_a_foreign_tile_configuration_and_a_release(tmp_path):
    """Between two calls in one thread, other code (oneDNN) loads its own configuration or releases
    the tiles: the wrapper reloads ours instead of faulting, and the configuration it compares with
    is the one the kernel loads, as the hardware reads it back (else it would reload every call)."""
    [entry] = [e for e in int8.proved_entries("amx") if e["name"] == KERNEL.spec.name]
    m = kernel_model(entry)
    f = m["function"]
    mr, nr, k = KERNEL.spec.mr, KERNEL.spec.nr, KERNEL.spec.k
    driver = amx_runtime.source(entry) + f"""
int main(void) {{
  static uint8_t a[{mr * 2 * k}]; static int8_t b[{2 * k // 4 * nr * 4}]; static int32_t c[3][{mr * nr}];
  uint8_t foreign[64] __attribute__((aligned(64))) = {{1}}, now[64] __attribute__((aligned(64)));
  for (unsigned i = 0; i < sizeof a; i++) a[i] = (uint8_t)(i * 7 + 3);
  for (unsigned i = 0; i < sizeof b; i++) b[i] = (int8_t)(i * 13 + 5);
  {f}_kloop_amx(a, {2 * k}, {k}, b, {nr * 4}, c[0], {nr}, 2);
  _tile_storeconfig(now);
  if (memcmp(now, {f}_tile_cfg, 64) != 0) return 2;
  for (int t = 0; t < 8; t++) {{ foreign[16 + 2 * t] = 32; foreign[48 + t] = 8; }}
  _tile_loadconfig(foreign);
  {f}_kloop_amx(a, {2 * k}, {k}, b, {nr * 4}, c[1], {nr}, 2);
  _tile_release();
  {f}_kloop_amx(a, {2 * k}, {k}, b, {nr * 4}, c[2], {nr}, 2);
  fwrite(a, 1, sizeof a, stdout); fwrite(b, 1, sizeof b, stdout); fwrite(c, 1, sizeof c, stdout);
  return 0;
}}
"""
    (tmp_path / "driver.c").write_text(driver)
    cmd = compiler_command("amx", "clang", m["features"])
    subprocess.run([*cmd, "-o", str(tmp_path / "driver"), str(tmp_path / "driver.c")], check=True)
    run = subprocess.run([str(tmp_path / "driver")], capture_output=True)
    assert run.returncode == 0, "the configuration read back differs from the one the wrapper compares with"
    raw = run.stdout
    a = np.frombuffer(raw[:mr * 2 * k], np.uint8).reshape(mr, 2 * k)
    b = np.frombuffer(raw[mr * 2 * k:mr * 2 * k + 2 * k * nr], np.int8).reshape(2 * k // 4, nr, 4)
    c = np.frombuffer(raw[mr * 2 * k + 2 * k * nr:], np.int32).reshape(3, mr, nr)
    want = (a.astype(np.int64) @ b.transpose(0, 2, 1).reshape(2 * k, nr).astype(np.int64)).astype(np.int32)
    for i in range(3):
        assert np.array_equal(c[i], want)
