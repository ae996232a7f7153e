"""The matmul of two quantized activations (attention's Q.K^T and probabilities.V), rules of the rewrite
(rewrite.QDQToInteger is ``reader``) as onnxruntime's MatMulNodeGroupSelector fuses it:

* ``Q(matmul(DQ(a), DQ(b)))`` -> QLinearMatMul: ``batch_matmul`` (ops/batch_matmul.py), requantized;
* ``matmul(DQ(a), DQ(b))`` read by no QuantizeLinear, ``a`` uint8 -> MatMulIntegerToFloat: the same
  integer product in float32, ``float32(acc) * float32(sa * sb)`` (NNCF's transformer Q.K^T, whose int8
  pairs onnxruntime's x86 build turns uint8 first: ort_fusion.converted; int8 activations it leaves in
  float there).

An operand that is a transpose of the integers is read through it by the operator (ops/batch_matmul.py),
not copied first.
"""
from __future__ import annotations

import numpy as np
from tvm import relax
from tvm.ir import Op

from tvm_integration.qnn.onnx.qdq import QParams
from tvm_integration.qnn.semantics.quant import constant


def quantized(reader, expr, out: QParams):
    """``Q(matmul(DQ(a), DQ(b)))`` -> QLinearMatMul, batched (``scale``: ``sa * sb / sy``)."""
    found = _operands(reader, reader.call(expr, "relax.matmul"))
    if found is None:
        return None
    (sa, _), (sb, _) = found[2]
    sy, zy = out.scalar("a matmul output")
    scale = np.float32(np.float32(sa * sb) / np.float32(sy))      # onnxruntime's order
    return _batch_matmul(reader, found, scale, out.dtype, zy, list(out.bounds), expr)


def to_float(reader, call):
    """``matmul(DQ(a), DQ(b))`` of a uint8 ``a``, read by no QuantizeLinear -> MatMulIntegerToFloat."""
    found = _operands(reader, call)
    var = reader.bound.get(call)
    if found is None or found[1][0].dtype != "uint8" or var is None or any(
            isinstance(v, relax.Call) and isinstance(v.op, Op) and v.op.name == "relax.quantize" and
            v.args[0].same_as(var) for v in reader.var2val.values()):
        return None
    (sa, _), (sb, _) = found[2]
    return _batch_matmul(reader, found, np.float32(sa * sb), "float32", 0, [0, 0], call)


def _operands(reader, core):
    """(the two operands' integers, their QParams, their (scale, zero point)) of ``core`` =
    matmul(DQ(a), DQ(b)), a and b per-tensor 8-bit activations; else None."""
    operands = [] if core is None else [reader.dequantized(arg) for arg in core.args]
    if not operands or any(o is None or constant(reader.value(o[0])) is not None or o[1].scale.size != 1
                           or o[1].zero_point.size != 1 or o[1].dtype not in ("uint8", "int8") for o in operands):
        return None
    return [x for x, _ in operands], [q for _, q in operands], [q.scalar("a matmul input") for _, q in operands]


def _batch_matmul(reader, found, scale, out_dtype: str, out_zero_point: int, clamp, expr):
    """The ``batch_matmul`` of ``found`` (``_operands``), each operand read through its transpose."""
    inputs, axes = [], []
    for x in found[0]:
        new = reader.visit_expr(x)
        bound = reader.lookup_binding(new) if isinstance(new, relax.Var) else None
        if isinstance(bound, relax.Call) and isinstance(bound.op, Op) and bound.op.name == "relax.permute_dims":
            rank = len(bound.ty.shape)
            inputs.append(bound.args[0])
            axes.append([int(d) for d in bound.attrs.axes] if bound.attrs.axes is not None
                        else list(range(rank))[::-1])
        else:
            inputs.append(new)
            axes.append([])
    (_, za), (_, zb) = found[2]
    return reader.integer("batch_matmul", inputs, a_axes=axes[0], b_axes=axes[1], a_zero_point=za, b_zero_point=zb,
                          scale=float(scale), out_zero_point=out_zero_point, out_dtype=out_dtype, clamp=clamp,
                          layer=reader.layer_name(expr))
