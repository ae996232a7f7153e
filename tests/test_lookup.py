"""The QNN pipeline's 8-bit lookup (arithmetic.lookup, ``table[x + offset]``) as schedules.py builds
it: with vpermi2b on a target with AVX-512 VBMI (table_lookup.py), the portable schedule on one
without. Both must equal numpy on every 8-bit value, on shapes whose size 64 does not divide."""
from __future__ import annotations

import re

import numpy as np
import pytest
import tvm
from tvm import te, tirx

from conftest import HOST_RUNS, skip_if
from isa_specs import host
from tvm_integration.bench import int8_models
from tvm_integration.kernels.selection import aarch64_target
from tvm_integration.qemu import cross
from tvm_integration.qnn.onnx.importer import load
from tvm_integration.qnn.prim import schedules, table_lookup
from tvm_integration.qnn.runtime.model import lower
from tvm_integration.qnn.semantics import arithmetic

HOST = host.tvm_target()
WITHOUT_VBMI = {**HOST, "mattr": [*HOST.get("mattr", []), "-avx512vbmi"]}     # a target this host also runs
needs_vbmi = skip_if(HOST_RUNS.lacks("avx512vbmi"))
TARGETS = [pytest.param(HOST, marks=needs_vbmi, id="vbmi"), pytest.param(WITHOUT_VBMI, id="fallback")]
OFFSET = {"uint8": 0, "int8": 128}
SHAPES = [(256,), (40,), (1, 7, 9, 5), (3 * 64 + 17,), (1, 112, 112, 16)]
VPERM = re.compile(r"\bvperm[it]2b\b")


def lookup_func(shape, x_dtype: str, y_dtype: str) -> tirx.PrimFunc:
    """The lookup PrimFunc as the pipeline emits it (integer_op.emit_reference's attributes)."""
    x, table = te.placeholder(shape, x_dtype, "x"), te.placeholder((256,), y_dtype, "table")
    y = arithmetic.lookup(x, table, offset=OFFSET[x_dtype])
    return te.create_prim_func([x, table, y]).with_attrs({"qnn.op": "lookup", "qnn.offset": OFFSET[x_dtype]})


def build(shape, x_dtype: str, y_dtype: str, target: dict):
    target = tvm.target.Target(target)
    func = schedules.schedule(lookup_func(shape, x_dtype, y_dtype), target)
    return tvm.compile(tvm.IRModule({"main": func}), target=target)


def every_value(shape, dtype: str, rng) -> np.ndarray:
    """Each of the 256 values at least once when the shape holds 256 elements, in random order."""
    info = np.iinfo(dtype)
    values = np.arange(info.min, info.max + 1).astype(dtype)
    return rng.permutation(np.resize(values, int(np.prod(shape)))).reshape(shape)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("x_dtype", ["uint8", "int8"])
@pytest.mark.parametrize("y_dtype", ["uint8", "int8"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_lookup_equals_numpy(target, x_dtype, y_dtype, shape):
    rng = np.random.default_rng(sum(shape))
    x = every_value(shape, x_dtype, rng)
    info = np.iinfo(y_dtype)
    table = rng.integers(info.min, info.max + 1, 256).astype(y_dtype)
    y = tvm.runtime.empty(shape, y_dtype)
    build(shape, x_dtype, y_dtype, target)["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(table), y)
    np.testing.assert_array_equal(y.numpy(), table[x.astype(np.int32) + OFFSET[x_dtype]])


@pytest.mark.qemu
@skip_if(HOST_RUNS.qemu)
@pytest.mark.parametrize("x_dtype, y_dtype", [("uint8", "uint8"), ("uint8", "int8"), ("int8", "uint8"), ("int8", "int8")])
def test_lookup_on_aarch64_equals_numpy(x_dtype, y_dtype):
    """tbl over the table's first 64 bytes and tbx over each next 64 (table_lookup._tbl), under qemu:
    every index value, both signs of x and of the table, a tail of 5 elements past the 16-byte
    vectors."""
    shape = (1, 7, 9, 5)
    rng = np.random.default_rng(7)
    x = every_value(shape, x_dtype, rng)
    info = np.iinfo(y_dtype)
    table = rng.integers(info.min, info.max + 1, 256).astype(y_dtype)
    target = tvm.target.Target(aarch64_target("cortex-a72"))
    executable = tvm.compile(tvm.IRModule({"main": schedules.schedule(lookup_func(shape, x_dtype, y_dtype), target)}),
                             target=target)
    op = cross.QemuOperator(executable, [table], shape, y_dtype, shape, x_dtype, shape)
    assert re.search(r"\btbl\b", op.assembly) and re.search(r"\btbx\b", op.assembly)
    np.testing.assert_array_equal(op(x), table[x.astype(np.int32) + OFFSET[x_dtype]])


@pytest.mark.parametrize("x_dtype", ["uint8", "int8"])
@pytest.mark.parametrize("target, vector", [pytest.param(HOST, True, marks=needs_vbmi, id="vbmi"),
                                            pytest.param(WITHOUT_VBMI, False, id="fallback")])
def test_the_vbmi_build_is_vpermi2b(target, vector, x_dtype):
    asm = build((1, 7, 9, 5), x_dtype, "uint8", target).mod.inspect_source("asm")
    assert bool(VPERM.search(asm)) == vector


@pytest.mark.parametrize("target, vbmi", [
    ({"kind": "llvm", "mcpu": "x86-64-v4"}, False),
    ({"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mattr": ["+avx512vbmi"]}, True),
    ({"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mattr": ["+neon"]}, True),      # tbl and tbx
    (WITHOUT_VBMI, False),
    (HOST, HOST_RUNS.lacks("avx512vbmi") is None)])
def test_the_target_features_decide(target, vbmi):
    """LLVM's knowledge of the target's ``mcpu`` and ``mattr``, never a CPU name, picks the form (every
    AArch64 core has NEON's table lookups)."""
    assert table_lookup.applies(lookup_func((64,), "uint8", "uint8"), tvm.target.Target(target)) == vbmi


@needs_vbmi
def test_a_model_on_this_host_looks_up_with_vpermi2b(tmp_path):
    """The host target reaches the lookups of a model (bind): every one of silu_fpn's SiLUs."""
    path = int8_models.quantize(int8_models.silu_fpn(32, 16, 10), tmp_path / "s.onnx")
    lookups = [f for f in lower(load(path)).functions.values()
               if isinstance(f, tirx.PrimFunc) and f.attrs and f.attrs.get("qnn.op") == "lookup"]
    assert len(lookups) == 4 and all(table_lookup.VPERMI2B in f.script() for f in lookups)
