"""The 8-bit lookup (arithmetic.lookup, ``table[x + offset]``) 64 bytes at a time with AVX-512 VBMI, 16
at a time with AArch64's table lookups.

Scheduled as TE writes it, the lookup is a gather of one byte load per element, vectorized or not
(70 us for a 112x112x16 tensor on Zen 4; 4.3 us this way).
``vpermi2b`` indexes a 128-byte table held in two registers by the low 7 bits of each of 64 index
bytes: one over the table's low half, one over its high half, and a select on bit 7 of
``x + offset``. For int8 (offset 128) adding 128 only flips bit 7, so the select is on the sign of
``x`` and no index is computed. The last ``n % 64`` elements are looked up one at a time.

On AArch64 (every core has NEON) ``tbl`` with four registers indexes a 64-byte quarter of the table by 16
index bytes and gives 0 past it; ``tbx`` leaves its destination there instead. So one ``tbl`` over the
first quarter and a ``tbx`` over each other quarter, each with the index less 64, 128 and 192 (a byte
below the quarter wraps past 63), look up 16 bytes (MobileNetV3's hard-swish on Cortex-A72, 112x112x16:
a byte gather per element before). For int8 the index ``x + 128`` is ``x`` with bit 7 flipped.
"""
from __future__ import annotations

import math

from tvm import tirx
from tvm.script import tirx as T
from tvm.target import Target, codegen

from tvm_integration.kernels.short_stack import short_stack
from tvm_integration.qemu.cross import is_aarch64

LANES = 64
VPERMI2B = "llvm.x86.avx512.vpermi2var.qi.512"
NEON_LANES = 16
TBL4, TBX4 = "llvm.aarch64.neon.tbl4", "llvm.aarch64.neon.tbx4"


def applies(func: tirx.PrimFunc, target: Target) -> bool:
    """``func`` is a QNN lookup and ``target`` has ``vpermi2b`` (decided by LLVM from its ``mcpu``
    and ``mattr``) or is AArch64."""
    return bool(func.attrs and func.attrs.get("qnn.op") == "lookup") and target.kind.name == "llvm" and \
        (is_aarch64(target) or bool(codegen.target_has_features("avx512vbmi", target)))


def vectorized(func: tirx.PrimFunc, target: Target) -> tirx.PrimFunc:
    """The lookup ``func`` (arguments x, table, result; attributes kept) with vpermi2b, or on AArch64
    with tbl and tbx."""
    x, table, y = (p.ty for p in func.params)            # each a BufferType: shape, dtype
    offset = int(func.attrs["qnn.offset"])
    if (x.dtype, offset) not in (("uint8", 0), ("int8", 128)) or int(table.shape[0]) != 256:
        raise ValueError(f"not an 8-bit lookup: {x.dtype} x, {table.shape} table, offset {offset}")
    form = _tbl if is_aarch64(target) else _vbmi
    return form(tuple(int(d) for d in x.shape), x.dtype, y.dtype, offset).with_attrs(func.attrs)


@short_stack
def _vbmi(shape, x_dtype: str, y_dtype: str, offset: int) -> tirx.PrimFunc:
    n = math.prod(shape)
    vectors = n // LANES
    head, vy = vectors * LANES, f"{y_dtype}x{LANES}"
    high_from = 128 if x_dtype == "uint8" else 0      # the x whose x + offset >= 128: the table's high half

    @T.prim_func(private=True)
    def lookup(x: T.Buffer(shape, x_dtype), table: T.Buffer((256,), y_dtype), y: T.Buffer(shape, y_dtype)):
        xs = T.decl_buffer((n,), x_dtype, data=x.data)
        ys = T.decl_buffer((n,), y_dtype, data=y.data)
        for v in T.parallel(vectors):
            # expressions, not bindings: a bound vector is a workspace allocation per iteration
            index = T.meta_var(xs[T.ramp(v * LANES, 1, LANES)])
            low = T.meta_var(T.call_llvm_pure_intrin(vy, VPERMI2B, table[T.ramp(0, 1, LANES)], index,
                                                     table[T.ramp(LANES, 1, LANES)]))
            high = T.meta_var(T.call_llvm_pure_intrin(vy, VPERMI2B, table[T.ramp(2 * LANES, 1, LANES)], index,
                                                      table[T.ramp(3 * LANES, 1, LANES)]))
            ys[T.ramp(v * LANES, 1, LANES)] = T.Select(index >= T.Broadcast(T.Cast(x_dtype, high_from), LANES),
                                                       high, low)
        for i in range(n - head):
            ys[head + i] = table[T.Cast("int32", xs[head + i]) + offset]
    return lookup


@short_stack
def _tbl(shape, x_dtype: str, y_dtype: str, offset: int) -> tirx.PrimFunc:
    n = math.prod(shape)
    vectors = n // NEON_LANES
    head, vu = vectors * NEON_LANES, f"uint8x{NEON_LANES}"

    @T.prim_func(private=True)
    def lookup(x: T.Buffer(shape, x_dtype), table: T.Buffer((256,), y_dtype), y: T.Buffer(shape, y_dtype)):
        xs = T.decl_buffer((n,), x_dtype, data=x.data)
        ys = T.decl_buffer((n,), y_dtype, data=y.data)
        for v in T.parallel(vectors):
            ys[T.ramp(v * NEON_LANES, 1, NEON_LANES)] = _tbl_chain(
                table, T.reinterpret(vu, xs[T.ramp(v * NEON_LANES, 1, NEON_LANES)]) ^ T.Broadcast(T.uint8(offset),
                                                                                               NEON_LANES))
        for i in range(n - head):
            ys[head + i] = table[T.Cast("int32", xs[head + i]) + offset]
    return lookup


def _tbl_chain(table, index):
    """``table[index]`` for 16 u8 indices: tbl over the table's first 64 bytes, tbx over each next 64
    with the index less 64, 128, 192."""
    lanes = f"{table.dtype}x{NEON_LANES}"

    def quarter(q: int) -> list:
        return [table[tirx.Ramp(64 * q + 16 * r, 1, NEON_LANES)] for r in range(4)]
    found = tirx.call_llvm_pure_intrin(lanes, TBL4, *quarter(0), index)
    for q in (1, 2, 3):
        below = index - tirx.Broadcast(tirx.const(64 * q, "uint8"), NEON_LANES)
        found = tirx.call_llvm_pure_intrin(lanes, TBX4, found, *quarter(q), below)
    return found
