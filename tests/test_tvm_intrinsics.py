"""TensorIntrins from the kernel cache: only intact, proved entries become intrinsics, read once per
process and cache root."""
import json

import pytest
import tvm

from synth import cache
from tvm_integration.kernels import int8
from tvm_integration.kernels.int8 import proved_entries, proved_kernels

VNNI = "int8_u8s8_k4b_8x48x16_avx512"


def _vnni_entry() -> dict:
    [entry] = [e for e in proved_entries("avx512") if e["name"] == VNNI]
    return entry


def test_every_proved_k4_tile_of_an_isa_is_registered():
    kernels = {k.intrin: k for k in proved_kernels("avx512") if k.spec.types == "u8s8"}
    shapes = {(8, 48, 16), (6, 64, 16), (7, 64, 16), (7, 48, 16), (14, 16, 16), (14, 32, 16), (8, 32, 16), (14, 16, 4)}
    assert sorted(kernels) == sorted(f"qsynth_int8_u8s8_k4b_{mr}x{nr}x{kb}_avx512" for mr, nr, kb in shapes)
    for (mr, nr, kb) in shapes:
        k = kernels[f"qsynth_int8_u8s8_k4b_{mr}x{nr}x{kb}_avx512"]
        assert (k.spec.mr, k.spec.nr, k.spec.k, k.a_dtype, k.b_dtype) == (mr, nr, kb, "uint8", "int8")
        assert f"@{k.function}(" in k.llvm_ir and k.features == ("avx512vnni",)
        desc = tvm.s_tir.TensorIntrin.get(k.loop_intrin(3)).desc.script()      # 3 k blocks
        for buffer in (f'T.Buffer(({mr}, {3 * kb}), "uint8"', f'T.Buffer(({3 * kb // 4}, {nr}, 4), "int8"',
                       f'T.Buffer(({mr}, {nr}), "int32"'):
            assert buffer in desc


@pytest.mark.parametrize("isa", ["avx2", "avx512"])
def test_the_w16_tiles_describe_int16_operands_in_k_groups_of_two(isa):
    """A w16 tile's TensorIntrin reads A and B as int16, B's k groups two elements wide (packing.pack_weights
    with group 2), whatever the host runs: the description is built on every host."""
    tiles = [k for k in proved_kernels(isa) if k.spec.types == "w16"]
    assert tiles
    for k in tiles:
        assert (k.a_dtype, k.b_dtype, k.group, k.b_range) == ("int16", "int16", 2, (-256, 255)) and k.admits(None)
        desc = tvm.s_tir.TensorIntrin.get(k.loop_intrin(3)).desc.script()      # 3 k blocks
        for buffer in (f'T.Buffer(({k.spec.mr}, {3 * k.spec.k}), "int16"', f'T.Buffer(({3 * k.spec.k // 2}, {k.spec.nr}, 2), "int16"'):
            assert buffer in desc


def test_the_cache_is_read_once_per_process(monkeypatch):
    first = proved_kernels("avx512")
    monkeypatch.setattr(int8, "proved_entries", lambda *args: pytest.fail("the cache was read again"))
    assert proved_kernels("avx512") is first


def test_neon_tiles_and_every_amx_tile():
    assert {k.spec.types for k in proved_kernels("neon")} == {"u8s8", "s8s8", "u8u8"}
    amx = proved_kernels("amx")
    # tdpbusd (u8s8) and tdpbssd (s8s8), each a 32x32 tile over k blocks of 64 and of 256
    assert sorted((k.spec.types, k.spec.k) for k in amx) == [("s8s8", 64), ("s8s8", 256), ("u8s8", 64), ("u8s8", 256)]
    for k in amx:       # the operator calls the run-time wrapper (kernels/amx_runtime.py)
        a_dtype = {"u8s8": "uint8", "s8s8": "int8"}[k.spec.types]
        assert (k.spec.mr, k.spec.nr, k.a_dtype, k.b_dtype) == (32, 32, a_dtype, "int8")
        assert k.function.endswith("_kloop_amx") and f"@{k.function}(" in k.llvm_ir
        desc = tvm.s_tir.TensorIntrin.get(k.loop_intrin(3)).desc.script()      # 3 k blocks
        kb = k.spec.k
        for buffer in (f'T.Buffer((32, {3 * kb}), "{a_dtype}"', f'T.Buffer(({3 * kb // 4}, 32, 4), "int8"',
                       'T.Buffer((32, 32), "int32"'):
            assert buffer in desc, (k.intrin, buffer)


def test_a_tampered_or_unproved_entry_is_never_registered(tmp_path):
    entry = _vnni_entry()
    unproved = dict(entry, proof=dict(entry["proof"], proved=False))
    cache.store(unproved, tmp_path / "unproved")      # a well-formed entry whose proof failed
    assert proved_kernels("avx512", tmp_path / "unproved") == ()
    path = cache.store(entry, tmp_path / "proved")
    assert len(proved_kernels("avx512", tmp_path / "proved")) == 1
    edited = json.loads(path.read_text())
    edited["program"]["body"] = edited["program"]["body"][:-1]     # an instruction dropped, hash kept
    (tmp_path / "tampered").mkdir()
    (tmp_path / "tampered" / path.name).write_text(json.dumps(edited))
    assert proved_kernels("avx512", tmp_path / "tampered") == ()


def test_an_entry_of_another_engine_version_is_not_registered(tmp_path):
    entry = _vnni_entry()
    cache.store(dict(entry, key=dict(entry["key"], engine="0")), tmp_path)
    assert proved_kernels("avx512", tmp_path) == ()


def test_tensorintrin_functions_are_parsed_on_a_short_stack():
    """short_stack runs a TVMScript builder on a thread of its own (T.prim_func's inspect.stack() then
    walks a few frames, not pytest's): the builder sees few frames, its TVMScript resolves a local of
    the enclosing builder used only in an annotation, and an exception reaches the caller."""
    import inspect
    from tvm_integration.kernels.short_stack import short_stack
    from tvm_integration.kernels.int8 import loop_functions
    depth = short_stack(lambda: len(inspect.stack()))()
    assert depth < 8 < len(inspect.stack())
    kernel = proved_kernels("avx512")[0]
    desc, impl = loop_functions(kernel.spec, kernel.function, 2)    # its buffers' shapes are locals
    assert isinstance(desc, tvm.tirx.PrimFunc) and isinstance(impl, tvm.tirx.PrimFunc)
    with pytest.raises(ZeroDivisionError):
        short_stack(lambda: 1 // 0)()
