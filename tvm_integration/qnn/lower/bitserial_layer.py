"""Stage 4, bind, of a layer legalize.py marked bitserial (precision.py): its integer conv2d or
dense on the bitserial operators (tvm_integration/ops/bitserial_*.py), exactly.

The layer computes ``sum_k (x_k - zx)(w_k - zw) + bias`` (rewrite.py; the padding holds ``zx``).
The operators take unsigned ``abits``-bit activation codes and unipolar or hybrid weights, so:

* activations: ``u = x - lo`` (``[lo, hi]`` the declared range), ``x - zx = u + a`` with ``a = lo - zx``;
  the padding's code is ``zx - lo``. Where ``lo != 0``, or the padding's code is not 0, one pass
  (``codes``) shifts the NHWC input and pads it; the operator then pads nothing;
* hybrid weights ``v = w - zw`` (all odd, bipolar ±1 among them): ``sum (u + a) v = H + a V``, ``H`` the
  operator's dot product, ``V = sum_k v`` a constant per channel: into the bias;
* unipolar weights, codes ``c = w - wlo``, ``w - zw = c + d`` with ``d = wlo - zw`` (signed b-bit
  weights: ``wlo = -2**(b-1)``, ``+1`` narrow, so ``c = w + 2**(b-1)`` and ``d T`` subtracts the
  offset times the window's activation sum back; codes outside ``[0, 2**b)`` are refused, naming the layer):
  ``sum (u + a)(c + d) = S + d T + a C + K a d`` (``C = sum_k c``, K the window). ``T = sum_k u``
  depends on the input: it is one more output channel of the same operator, whose codes are all 1,
  and a second pass (``requantize``) adds ``d T`` before requantizing; when ``d = 0`` (unsigned weights
  from 0) the output stage is fused into the operator as for the int8 layers.

tests/test_lowbit_onnx.py checks this decomposition in numpy on random layers of every case.
"""
from __future__ import annotations

import numpy as np
from tvm import relax, te, tirx

from tvm_integration.kernels import selection
from tvm_integration.kernels.bitserial import CROSS
from tvm_integration.ops import output_stage
from tvm_integration.ops.bitserial_gemm import Config
from tvm_integration.qnn.prim import prim_calls
from tvm_integration.qnn.prim.schedules import TENSORIZED
from tvm_integration.qnn.semantics import arithmetic
from tvm_integration.qnn.semantics.errors import ModelError
from tvm_integration.qnn.semantics.integer_op import IntegerOp


def lowered(op: IntegerOp):
    """(operator weights [N(+1), ...], bias [N], d, a, needs_codes_pass) of a bitserial layer."""
    weight, folded, _ = op.constants
    p = op.params
    zx, zw, (lo, _) = p["x_zero_point"], p["w_zero_point"], p["x_range"]
    n = weight.shape[0]
    w = weight.reshape(n, -1).astype(np.int64)
    depth = w.shape[1]
    bias = folded.astype(np.int64) + zx * arithmetic.weight_sums(weight, zw)      # the model's own bias
    a = lo - zx
    if p["encoding"] == "hybrid":
        v = w - zw
        return (v.reshape(weight.shape), bias + a * v.sum(1), 0, a)
    c = w - p["w_low"]
    d = p["w_low"] - zw
    wbits = p.get("wbits", 3)                     # legalize.py records it; 3 bits at most in any case
    if c.size and (c.min() < 0 or c.max() >= 1 << wbits):
        raise ModelError(f"layer {p.get('layer') or '(unnamed)'}: weights in [{int(w.min())}, {int(w.max())}] do not "
                         f"fit W{wbits} unipolar codes from {p['w_low']} (codes in [0, {(1 << wbits) - 1}])")
    bias = bias + a * c.sum(1) + depth * a * d
    if d:
        c = np.concatenate([c, np.ones((1, depth), np.int64)])                  # the T channel
    return (c.reshape(-1, *weight.shape[1:]), bias, d, a)


def codes(x, *, low: int, pad_code: int, padding):
    """NHWC activations -> uint8 codes ``x - low``, padded by ``padding`` (top, left, bottom, right)
    with ``pad_code``."""
    b, h, w, c = x.shape
    pt, pl, pb, pr = padding

    def value(n, i, j, ch):
        inside = tirx.all(i >= pt, i < h + pt, j >= pl, j < w + pl)
        shifted = x[n, tirx.min(tirx.max(i - pt, 0), h - 1), tirx.min(tirx.max(j - pl, 0), w - 1), ch].astype("int32")
        return tirx.if_then_else(inside, shifted - low, pad_code).astype("uint8")
    return te.compute((b, h + pt + pb, w + pl + pr, c), value, name="codes")


def requantize(acc, bias, scale, *, d: int, zero_point: int, out_dtype: str, clamp):
    """``acc [P, N + 1]`` (the last column T) -> requantized ``acc[p, n] + d T[p] + bias[n]``."""
    p, n1 = acc.shape
    return te.compute((p, n1 - 1), lambda i, j: output_stage.requantize(
        acc[i, j] + d * acc[i, n1 - 1] + bias[j], scale[j], zero_point, out_dtype, tuple(clamp)), name="qbitserial")


def emit(binder, var, op: IntegerOp) -> None:
    """Bind ``var`` to the bitserial layer ``op`` in ``binder`` (a lower.bind.Binder). Only ONNX
    models have low-bit layers: the requantization is onnxruntime's (a float32 scale per channel).
    The binder's isa chooses the tiles: x86's, or NEON's for an AArch64 model (built with the model's
    core, whose features include the tiles' +neon); another int8 isa (amx) takes the host's."""
    from tvm_integration.ops.bitserial_conv2d import build_bitserial_conv2d
    from tvm_integration.ops.bitserial_dense import build_bitserial_dense
    p = op.params
    weights, bias, d, a = lowered(op)
    _, _, scale = op.constants
    config = Config(p["abits"], p["wbits"], p["encoding"])
    stage = output_stage.OutputStage() if d else output_stage.OutputStage(
        bias=bias.astype(np.int32), clamp=tuple(p["clamp"]),
        requantize=output_stage.ScaleRequantize(scale, p["out_zero_point"], p["out_dtype"]))
    isa = binder.isa if binder.isa in ("host", *selection.BITSERIAL_ISAS, *CROSS) else "host"
    builder = binder.builder
    x = op.inputs[0]
    if op.kind == "dense":
        data = binder.substitute(x)
        low = p["x_range"][0]
        if low:
            data = builder.emit(relax.op.astype(relax.op.subtract(relax.op.astype(data, "int32"),
                                                                  relax.const(low, "int32")), "uint8"))
        elif str(x.ty.dtype) != "uint8":
            data = builder.emit(relax.op.astype(data, "uint8"))
        built = build_bitserial_dense(weights.reshape(weights.shape[0], -1), int(x.ty.shape[0]), config, stage, isa)
    else:
        data = binder.nhwc_of(x)
        padding = tuple(p["padding"])
        low, pad_code = p["x_range"][0], -a
        if low or (pad_code and any(padding)):
            data = builder.emit(builder.call_te(codes, data, low=low, pad_code=pad_code, padding=padding,
                                                primfunc_name_hint="qnn_bitserial_codes"))
            padding = (0, 0, 0, 0)
        elif str(x.ty.dtype) != "uint8":
            data = builder.emit(relax.op.astype(data, "uint8"))
        built = build_bitserial_conv2d(weights, tuple(int(s) for s in data.ty.shape), config, tuple(p["strides"]),
                                       padding, stage, isa)
    func = built.mod["main"].with_attrs({TENSORIZED: True, "qnn.op": op.kind})
    args = [data, *[relax.const(c) for c in built.constants]]
    out = builder.emit(prim_calls.call(builder, func, f"qsynth_bitserial_{op.kind}", args,
                                       relax.TensorType(built.out_shape, built.out_dtype)))
    if d:
        out = builder.emit(builder.call_te(requantize, out, relax.const(bias.astype(np.int32)), relax.const(scale), d=d,
                                           zero_point=p["out_zero_point"], out_dtype=p["out_dtype"], clamp=p["clamp"],
                                           primfunc_name_hint="qnn_bitserial_requantize"))
    channels = weights.shape[0] - (1 if d else 0)
    result = relax.op.reshape(out, (*built.result_shape[:-1], channels))
    if op.kind == "dense":
        binder.value[var] = builder.emit(result)
    else:
        binder.set_nhwc(var, result)
