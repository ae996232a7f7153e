"""The int8 matmul of two activations on the NEON tiles (ops/neon_batch_matmul.py, issue 50), under
qemu-aarch64: each of its three functions cross-compiled and run, the result against numpy's integer
matmul requantized (the reference's arithmetic) on each tile family (v8.0 u8 x u8, sdot, sudot), both
operand types, operands read through their transposes, the transformer's 12 x 128 x 64 shapes; and a
statically quantized encoder built for --target neon equal to its build with the reference
computation of the matmuls (bind.py's path before this operator). Marked ``qemu``."""
from pathlib import Path

import numpy as np
import onnx
import pytest

from tvm_integration.qemu import cross

MISSING = cross.missing_tools()
pytestmark = [pytest.mark.qemu,
              pytest.mark.skipif(MISSING is not None, reason=f"AArch64 operators run under qemu: {MISSING}")]

CORES = {"v8": "cortex-a53", "dotprod": "cortex-a76", "i8mm": "neoverse-n2"}


def run_cases(built: list, folder: Path):
    """Each module of ``built`` (its functions renamed c<i>_<name>) compiled into one object for their core,
    linked once in ``folder``: the function ``call(i, name, inputs, out_shape, out_dtype)`` runs one of them
    under qemu."""
    import tvm
    functions = {f"c{i}_{name}": b.mod[name].with_attr("global_symbol", f"c{i}_{name}")
                 for i, b in enumerate(built) for name in ("row_terms", "col_terms", "main")}
    tvm.compile(tvm.IRModule(functions), target=built[0].target).mod.write_to_file(str(folder / "cases.o"))
    cross.link(folder / "cases.o", folder / "cases", tuple(functions))
    return lambda i, name, inputs, out_shape, out_dtype: cross.run(
        folder / "cases", inputs, [(out_shape, out_dtype)], folder, function=f"c{i}_{name}")[0]


def integer_reference(a, b, a_axes, b_axes, za, zb, scale, zy, out_dtype, clamp):
    """``permute(a) @ permute(b)`` less the zero points, wrapped to int32, times ``scale`` in float32,
    rounded half to even, plus ``zy``, saturated (ops/output_stage.py's requantize)."""
    a = a.transpose(a_axes) if a_axes else a
    b = b.transpose(b_axes) if b_axes else b
    acc = np.matmul(a.astype(np.int64) - za, b.astype(np.int64) - zb)
    acc = ((acc + 2 ** 31) % 2 ** 32 - 2 ** 31).astype(np.int32)
    y = acc.astype(np.float32) * np.float32(scale)
    return y if out_dtype == "float32" else np.clip(np.rint(y) + zy, *clamp).astype(out_dtype)


# (a shape, a type, a axes, b shape, b type, b axes): Q.K^T as the encoder reads it (Q [1, S, h, d] through
# (0, 2, 1, 3), K through (0, 2, 3, 1)), attention.V (V through (0, 2, 1, 3)), plain operands with shapes
# off the tile (13 rows, 9 columns, a depth of 20), a broadcast batch
SHAPES = [((1, 16, 2, 8), "uint8", (0, 2, 1, 3), (1, 16, 2, 8), "int8", (0, 2, 3, 1)),
          ((1, 2, 16, 16), "int8", None, (1, 16, 2, 8), "uint8", (0, 2, 1, 3)),
          ((1, 3, 13, 20), "int8", None, (1, 3, 20, 9), "int8", None),
          ((2, 1, 6, 24), "uint8", None, (3, 24, 8), "uint8", None)]
TRANSFORMER = [((1, 128, 12, 64), "uint8", (0, 2, 1, 3), (1, 128, 12, 64), "int8", (0, 2, 3, 1)),
               ((1, 12, 128, 128), "uint8", None, (1, 128, 12, 64), "uint8", (0, 2, 1, 3))]


def check(family, folder: Path, *cases):
    """The operator's output on each case (a SHAPES row and its output type) against integer_reference's:
    requantized to u8 (about 200 codes), or with ``out_dtype`` float32 and a scale of 1 the int32 sum itself
    (exact in float32 below 2^24), where an error of one shows. The cases' functions are linked once."""
    from tvm_integration.ops.batch_matmul import Operand
    from tvm_integration.ops.neon_batch_matmul import build_batch_matmul
    rng = np.random.default_rng(0)
    draw = lambda dtype, shape=(): rng.integers(np.iinfo(dtype).min, np.iinfo(dtype).max + 1, shape)
    built, expected, operands = [], [], []
    for a_shape, a_dtype, a_axes, b_shape, b_dtype, b_axes, out_dtype in cases:
        a, b = draw(a_dtype, a_shape).astype(a_dtype), draw(b_dtype, b_shape).astype(b_dtype)
        za, zb = int(draw(a_dtype)), int(draw(b_dtype))
        spread = np.matmul((a.transpose(a_axes) if a_axes else a).astype(np.int64) - za,
                           (b.transpose(b_axes) if b_axes else b).astype(np.int64) - zb).std()
        scale, zy, clamp = ((float(np.float32(60 / spread)), 120, (0, 255)) if out_dtype == "uint8"
                            else (1.0, 0, (0, 0)))
        built.append(build_batch_matmul(Operand(a_shape, a_dtype, a_axes), Operand(b_shape, b_dtype, b_axes), za, zb,
                                        scale, zy, out_dtype, clamp, family=family))
        assert built[-1].kernel.endswith({"v8": "u8u8_acc_4x4x8_neon", "dotprod": "s8s8_k4_4x4x16_neon",
                                          "i8mm": "u8s8_k4_4x4x16_neon"}[family])
        expected.append(integer_reference(a, b, a_axes, b_axes, za, zb, scale, zy, out_dtype, clamp))
        operands.append((a, b))
    call = run_cases(built, folder)
    for i, (one, (a, b), want) in enumerate(zip(built, operands, expected)):
        groups, m, n = one.out_shape
        rows = call(i, "row_terms", [a], (groups, m), "int32")
        cols = call(i, "col_terms", [b], (groups, n), "int32")
        out = call(i, "main", [a, b, rows, cols], one.out_shape, one.out_dtype)
        assert np.unique(want).size > 40
        np.testing.assert_array_equal(out.reshape(one.result_shape), want)


@pytest.mark.parametrize("family", list(CORES))
def test_operator_equals_the_integer_reference(family, tmp_path):
    check(family, tmp_path, (*SHAPES[0], "float32"),
          *((*shape, "float32" if i % 2 else "uint8") for i, shape in enumerate(SHAPES)))


@pytest.mark.parametrize("family, shape", [("v8", TRANSFORMER[0]), ("dotprod", TRANSFORMER[1])])
def test_operator_on_the_transformer_shapes(family, shape, tmp_path):
    check(family, tmp_path, (*shape, "float32"))


def test_core_tile_never_s8s7():
    """A run-time B may hold -128: a v8.0 core takes the u8 x u8 tile, not the s8 x s7 one."""
    from tvm_integration.ops.neon_batch_matmul import kernel_for
    assert kernel_for("cortex-a53").intrin.endswith("u8u8_acc_4x4x8_neon")
    assert kernel_for("cortex-a76").intrin.endswith("s8s8_k4_4x4x16_neon")


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    import logging

    from transformer_models import encoder

    from tvm_integration.bench import int8_models
    folder = tmp_path_factory.mktemp("neon-batch-matmul")
    rng = np.random.default_rng(1)
    logging.getLogger().setLevel(logging.ERROR)
    return int8_models.quantize(encoder(hidden=64, heads=2, seq=16, layers=1), folder / "static.onnx",
                                data=[{"input": rng.standard_normal((1, 16, 64)).astype(np.float32)} for _ in range(4)])


@pytest.mark.parametrize("mcpu", ["cortex-a53", "cortex-a76"])
def test_encoder_equals_its_reference_build(encoder, mcpu, monkeypatch):
    """The encoder's outputs with the NEON operator equal those of its build with the matmuls' reference
    computation (bind.py's rule for them replaced by ``as_is``), and the operator is in the library."""
    from tvm_integration.qnn.lower import bind
    from tvm_integration.qnn.runtime.model import compile_model
    feeds = {"input": np.random.default_rng(2).standard_normal((1, 16, 64)).astype(np.float32)}
    from tvm_integration.ops import neon_batch_matmul
    built = []
    build = neon_batch_matmul.build_batch_matmul
    monkeypatch.setattr(neon_batch_matmul, "build_batch_matmul", lambda *a, **k: built.append(build(*a, **k)) or built[-1])
    out = compile_model(encoder, target="neon", mcpu=mcpu)(feeds)
    assert len(built) == 2                       # Q.K^T and attention.V on the operator
    monkeypatch.setitem(bind.BY_KIND, "batch_matmul", bind.Binder.as_is)
    reference = compile_model(encoder, target="neon", mcpu=mcpu)(feeds)
    for name, value in reference.items():
        assert np.unique(value).size > 100
        np.testing.assert_array_equal(out[name], value)
