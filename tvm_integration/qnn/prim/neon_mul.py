"""A TFLite MUL built for AArch64 (litert_arithmetic.mul's ``neon`` form: XNNPACK's NEON vmul, "rndnu") 16
lanes at a time, in the instructions that kernel runs: smull of the int16 operands less their zero points,
sqdmulh by the scale's mantissa, srshl (a right shift rounding half up), then the zero point and the clamp.

Scheduled as TE writes it, LLVM computes the high half by 64-bit products (two smull, two shrn, an add and a
shift per four lanes: it drops the saturation that would let it select sqdmulh, since it never occurs), and
where an operand less its zero point is never negative it widens that operand apart and multiplies in int32
instead of smull: 49 vector instructions per 16 outputs of a squeeze-and-excitation scaling, 25 here. Those
instructions take four lanes (LLVM splits no wider call of them), so the 16 lanes are cut into four by
shuffles, free in registers, and joined back. Two layouts are taken: operands of the output's shape, and one
operand per channel of an NHWC image (``[1, 1, 1, C]``, C a multiple of 16); the others, and a tensor whose
size 16 does not divide, keep the TE form. Four vectors an iteration (``UNROLL``), four independent chains:
one a loop left the in-order Cortex-A53 waiting on each chain's latencies. EfficientNet-B0's 16 such MULs
(scripts/make_tflite_applications.py), Mcycles, TE form / one vector an iteration / four: Cortex-A76's N1 model
4.27 / 2.63 / 2.44, Cortex-A53 8.97 / 10.15 / 5.32, Cortex-A72's A57 model 4.74 / 3.34 / -.
"""
from __future__ import annotations

import math

from tvm import tirx
from tvm.script import tirx as T
from tvm.target import Target

from tvm_integration.kernels.short_stack import short_stack
from tvm_integration.ops.output_stage import rndnu_parameters
from tvm_integration.qemu.cross import is_aarch64

LANES = 16
UNROLL = 4             # vectors an iteration: four independent chains for an in-order core (Cortex-A53)
SMULL, SQDMULH, SRSHL = "llvm.aarch64.neon.smull", "llvm.aarch64.neon.sqdmulh", "llvm.aarch64.neon.srshl"


def applies(func: tirx.PrimFunc, target: Target) -> bool:
    """``func`` is a TFLite MUL in its AArch64 form whose operands ``vectorized`` takes, built for AArch64."""
    attrs = func.attrs or {}
    if attrs.get("qnn.op") != "tflite_mul" or not bool(attrs.get("qnn.neon", False)) or not is_aarch64(target):
        return False
    if len(func.params) != 3:
        return False
    a, b, y = (tuple(int(d) for d in p.ty.shape) for p in func.params)
    return math.prod(y) % LANES == 0 and all(_reads(s, y) is not None for s in (a, b))


def _reads(shape: tuple, out: tuple) -> str | None:
    """How an operand of ``shape`` is read at the output ``out``: whole (``same``), per channel of an NHWC
    image (``channel``), or None."""
    if shape == out:
        return "same"
    if len(shape) == len(out) == 4 and shape[:3] == (1, 1, 1) and shape[3] == out[3] and out[3] % LANES == 0:
        return "channel"
    return None


def vectorized(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """The MUL ``func`` (arguments a, b, result; attributes kept) 16 lanes at a time."""
    a, b, y = (p.ty for p in func.params)
    attrs = func.attrs
    quant = (int(attrs["qnn.a_zero_point"]), int(attrs["qnn.b_zero_point"]), float(attrs["qnn.scale"]),
             int(attrs["qnn.out_zero_point"]), tuple(int(c) for c in attrs["qnn.clamp"]))
    shapes = tuple(tuple(int(d) for d in t.shape) for t in (a, b, y))
    return _mul(shapes, str(a.dtype), str(b.dtype), str(y.dtype), quant).with_attrs(attrs)


@short_stack
def _mul(shapes, a_dtype: str, b_dtype: str, y_dtype: str, quant) -> tirx.PrimFunc:
    a_shape, b_shape, y_shape = shapes
    n = math.prod(y_shape)
    channels = y_shape[-1]

    def offset(shape, v):
        return v * LANES if _reads(shape, y_shape) == "same" else (v * LANES) % channels

    vectors = n // LANES

    @T.macro
    def store(ys, xa, xb, v):
        ys[T.ramp(v * LANES, 1, LANES)] = _rndnu(xa[T.ramp(offset(a_shape, v), 1, LANES)],
                                                 xb[T.ramp(offset(b_shape, v), 1, LANES)], quant, y_dtype)

    @T.prim_func(private=True)
    def mul(a: T.Buffer(a_shape, a_dtype), b: T.Buffer(b_shape, b_dtype), y: T.Buffer(y_shape, y_dtype)):
        xa = T.decl_buffer((math.prod(a_shape),), a_dtype, data=a.data)
        xb = T.decl_buffer((math.prod(b_shape),), b_dtype, data=b.data)
        ys = T.decl_buffer((n,), y_dtype, data=y.data)
        for w in T.parallel(vectors // UNROLL):
            for u in T.unroll(UNROLL):
                store(ys, xa, xb, w * UNROLL + u)
        for u in T.unroll(vectors % UNROLL):
            store(ys, xa, xb, vectors // UNROLL * UNROLL + u)
    return mul


def _rndnu(xa, xb, quant, y_dtype: str):
    """litert_arithmetic._rndnu of the products of 16 lanes of ``xa`` and ``xb`` (8-bit vectors), four lanes
    an instruction: the same multiplier, shifts and rounding."""
    a_zero, b_zero, scale, zero_point, (lo, hi) = quant
    multiplier, pre, post = rndnu_parameters(scale)          # multiplier in [2^30, 2^31): sqdmulh never saturates

    def wide(x, zero):
        return tirx.Cast(f"int16x{LANES}", x) - tirx.Broadcast(tirx.const(zero, "int16"), LANES)

    def four(x, q: int):
        return tirx.Shuffle([x], [tirx.IntImm("int32", i) for i in range(4 * q, 4 * q + 4)])

    def quarter(q: int):
        product = tirx.call_llvm_pure_intrin("int32x4", SMULL, four(wa, q), four(wb, q))
        if pre:
            product = product * tirx.Broadcast(tirx.const(1 << pre, "int32"), 4)
        high = tirx.call_llvm_pure_intrin("int32x4", SQDMULH, product,
                                          tirx.Broadcast(tirx.const(multiplier, "int32"), 4))
        return tirx.call_llvm_pure_intrin("int32x4", SRSHL, high, tirx.Broadcast(tirx.const(-post, "int32"), 4))

    wa, wb = wide(xa, a_zero), wide(xb, b_zero)
    total = tirx.Shuffle([quarter(q) for q in range(4)], [tirx.IntImm("int32", i) for i in range(LANES)])
    total = total + tirx.Broadcast(tirx.const(zero_point, "int32"), LANES)
    clamped = tirx.max(tirx.min(total, tirx.Broadcast(tirx.const(hi, "int32"), LANES)),
                       tirx.Broadcast(tirx.const(lo, "int32"), LANES))
    return tirx.Cast(f"{y_dtype}x{LANES}", clamped)
