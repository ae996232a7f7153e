"""int8 dense and conv2d on the AMX tiles (kernels/amx_runtime.py's contract around the proved _kloop)
against numpy, on every host: on the plain-C emulation of the tile instructions (emit/templates/
qsynth_amx.h) everywhere, and natively where the host has AMX."""
import dataclasses
import subprocess

import numpy as np
import pytest

from conftest import HOST_RUNS
from test_tvm_ops import conv_reference, dense_reference, requantize_onnxruntime

from emit.model import kernel_model
from emit.toolchain import compiler_command
from tvm_integration.kernels import amx_runtime, int8
from tvm_integration.ops.conv2d import conv2d
from tvm_integration.ops.dense import dense
from tvm_integration.ops.output_stage import OutputStage, ScaleRequantize

ENTRIES = {e["name"]: e for e in int8.proved_entries("amx")}
TILES = [k for k in int8.proved_kernels("amx") if k.spec.types == "u8s8"]
MODES = ("native", "emulated")


def build(tile: int8.Kernel, mode: str) -> int8.Kernel:
    """The tile as the operators call it, natively or on the emulation."""
    if mode == "native" and HOST_RUNS.amx:
        pytest.skip(f"no native AMX here ({HOST_RUNS.amx}); the emulated build runs instead")
    emulate = mode == "emulated"
    return dataclasses.replace(tile, llvm_ir=amx_runtime.llvm_ir(ENTRIES[tile.spec.name], emulate), emulated=emulate)


@pytest.fixture(params=MODES)
def kernel(request):
    """The 32x32x64 tile (the one the operators take first), native and emulated."""
    return build(min(TILES, key=lambda k: k.spec.k), request.param)


@pytest.fixture(params=[(t.spec.name, mode) for t in TILES for mode in MODES], ids="-".join)
def any_kernel(request):
    name, mode = request.param
    return build(next(t for t in TILES if t.spec.name == name), mode)


RNG = np.random.default_rng(30)


def random(shape, dtype):
    lo = 0 if dtype == "uint8" else -128
    return RNG.integers(lo, lo + 256, shape).astype(dtype)


@pytest.mark.parametrize("m,n,k,dtype", [(32, 32, 256, "uint8"),          # one whole tile
                                         (13, 50, 37, "uint8"),           # every remainder
                                         (70, 100, 600, "int8"),          # several row tiles, K blocks
                                         (1, 1000, 512, "uint8"),         # a classifier
                                         (1, 1, 1, "int8")])
def test_dense_on_amx(m, n, k, dtype, kernel):
    w, x = random((n, k), "int8"), random((m, k), dtype)
    assert np.array_equal(dense(w, m, dtype, kernel=kernel)(x), dense_reference(x, w))


def test_extremes_on_amx(kernel):
    """-128 * -128 summed (signed activations shifted to u8 and compensated) and u8 >= 128."""
    x, w = np.full((5, 300), -128, np.int8), np.full((40, 300), -128, np.int8)
    assert np.all(dense(w, 5, "int8", kernel=kernel)(x) == 300 * 128 * 128)
    x, w = RNG.integers(128, 256, (5, 300)).astype(np.uint8), random((40, 300), "int8")
    assert np.array_equal(dense(w, 5, "uint8", kernel=kernel)(x), dense_reference(x, w))


CONVS = [  # layout, C, O, kernel, stride, padding, groups, dtype, H=W
    ("NHWC", 64, 64, 3, 1, 1, 1, "uint8", 14),
    ("NHWC", 64, 64, 3, 1, 1, 1, "uint8", 32),     # rows of whole tiles, column tiles first (direct.columns_first)
    ("NHWC", 64, 128, 3, 2, 1, 1, "int8", 14),
    ("NHWC", 192, 40, 3, 1, 1, 1, "uint8", 14),    # window rows of 9 K blocks: direct.run_by_run
    ("NHWC", 64, 40, 1, 1, 0, 1, "uint8", 9),
    ("NHWC", 3, 64, 7, 2, 3, 1, "uint8", 32),      # the stem: folded space-to-depth
    ("NCHW", 16, 50, 3, 1, 1, 1, "int8", 9),
    ("NHWC", 32, 48, 3, 1, 1, 2, "uint8", 9),      # grouped
]


@pytest.mark.parametrize("layout,c,o,ksize,stride,pad,groups,dtype,hw", CONVS)
def test_conv2d_on_amx(layout, c, o, ksize, stride, pad, groups, dtype, hw, any_kernel):
    shape = (1, c, hw, hw) if layout == "NCHW" else (1, hw, hw, c)
    x, w = random(shape, dtype), random((o, c // groups, ksize, ksize), "int8")
    out = conv2d(w, shape, layout, stride, pad, groups, dtype, kernel=any_kernel)(x)
    assert np.array_equal(out, conv_reference(x, w, layout, stride, pad, groups))


def test_nine_bit_weights_on_amx(kernel):
    """U8U8 layers' weights ``w - zw`` (int16, arithmetic.nine_bit) on the byte tile: clamped into
    [-128, 127], the one or two extremes of each output channel added apart (packing.clamped)."""
    w = np.clip(RNG.integers(-121, 135, (96, 64, 3, 3)), -128, 127).astype(np.int16)
    w[:, 0, 0, 0], w[::3, 5, 1, 2] = 134, -130
    x = random((1, 10, 10, 64), "uint8")
    np.testing.assert_array_equal(conv2d(w, x.shape, "NHWC", 1, 1, 1, "uint8", kernel=kernel)(x),
                                  conv_reference(x, w, "NHWC", 1, 1, 1))
    wd, xd = w.reshape(96, -1)[:, :300], random((5, 300), "uint8")
    np.testing.assert_array_equal(dense(wd, 5, "uint8", kernel=kernel)(xd), dense_reference(xd, wd))


def test_fused_output_stage_and_residual_on_amx(kernel):
    shape, o = (1, 10, 10, 64), 96
    x, w = random(shape, "uint8"), random((o, 64, 3, 3), "int8")
    scale = RNG.uniform(1e-4, 1e-3, o).astype(np.float32)
    stage = OutputStage(bias=RNG.integers(-5000, 5000, o).astype(np.int32),
                        requantize=ScaleRequantize(scale, 128, "uint8"))
    out = conv2d(w, shape, "NHWC", 1, 1, 1, "uint8", stage, kernel=kernel)(x)
    acc = conv_reference(x, w, "NHWC", 1, 1, 1) + stage.bias
    assert np.array_equal(out, requantize_onnxruntime(acc, scale, 128, 0, 255))


@pytest.mark.parametrize("mode", MODES)
def test_the_kernel_survives_a_foreign_tile_configuration_and_a_release(tmp_path, mode):
    """Between two calls in one thread, other code (oneDNN) loads its own configuration or releases
    the tiles: the wrapper reloads ours instead of faulting, and the configuration it compares with
    is the one the kernel loads, as the hardware reads it back (else it would reload every call)."""
    tile = max(TILES, key=lambda t: t.spec.k)
    if mode == "native" and HOST_RUNS.amx:
        pytest.skip(f"no native AMX here ({HOST_RUNS.amx})")
    entry = ENTRIES[tile.spec.name]
    m = kernel_model(entry)
    f = m["function"]
    mr, nr, k = tile.spec.mr, tile.spec.nr, tile.spec.k
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
    cmd = compiler_command("amx", "clang", m["features"], emulated=mode == "emulated")
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


@pytest.mark.parametrize("weights", ["s8", "u8"])
def test_a_model_for_amx_is_bit_exact_with_onnxruntime(tmp_path, weights):
    """A residual int8 CNN (stem, 3x3 and 1x1 layers, stride 2, a classifier) compiled for the AMX tiles:
    natively on an AMX host, on the emulation elsewhere (the kernels this process built). ``u8``: U8U8
    per tensor, weight zero points not 128 (9-bit weights on the byte tiles, clamped). The module read for its
    tiles is the one built: compile_model's steps, one lowering. Two stages: the op kinds and the tile of
    four (widths (16, 32, 64, 64): 21 AMX calls, 17 s of the suite each; here 11); depths that are whole
    multiples of the tile's 64 (3x3x64) are test_conv2d_on_amx's."""
    from tvm_integration.bench import int8_models
    from tvm_integration.bench.models import reference_session
    from tvm_integration.qnn.lower import pipeline
    from tvm_integration.qnn.runtime.model import build, read
    path = int8_models.quantize(int8_models.resnet(size=32, widths=(16, 32), classes=10), tmp_path / "m.onnx",
                                weights=weights, per_channel=weights == "s8")
    mod, inputs, outputs = read(path, target="amx")
    mod = pipeline.lower(mod, "amx")
    assert mod.script().count("_kruns_amx") >= 5      # every conv and the dense
    x = np.random.default_rng(5).standard_normal((1, 3, 32, 32)).astype(np.float32)
    model = build(mod, inputs, outputs, "amx", threads=2)
    np.testing.assert_array_equal(model({"input": x})[model.outputs[0]], reference_session(path).run(None, {"input": x})[0])
