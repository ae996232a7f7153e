"""The matmul of two quantized activations (attention's Q.K^T and probabilities.V), rules of the rewrite
(rewrite.QDQToInteger is ``reader``) as onnxruntime's MatMulNodeGroupSelector fuses it:

* ``Q(matmul(DQ(a), DQ(b)))`` -> QLinearMatMul: ``batch_matmul`` (ops/batch_matmul.py), requantized;
* ``matmul(DQ(a), DQ(b))`` read by no QuantizeLinear, ``a`` uint8 -> MatMulIntegerToFloat: the same
  integer product in float32, ``float32(acc) * float32(sa * sb)`` (NNCF's transformer Q.K^T, whose int8
  pairs onnxruntime's x86 build turns uint8 first: ort_fusion.converted; int8 activations it leaves in
  float there; its AArch64 build fuses an int8 ``a`` and ``b`` as they are, ``b`` a constant too:
  ``_fused_types``). ``b`` a constant (a weight: an NNCF model's last projection or classifier, whose
  output it leaves float): the integer ``dense`` to float32, ``sb`` per tensor or per output column,
  unless onnxruntime's MatMulAddFusion (graph level 1, before the QDQ fusions) first takes the matmul
  into a float Gemm with the Add that alone reads it (float_ops._gemm): an Add of a [N] operand, or on
  2-D rows of a [1, N], [M, 1] or [M, N] one. Another Add after it (a residual of a [..., M, K]
  activation, a [1, 1, N] bias) stays a float Add of MatMulIntegerToFloat's output. That Gemm is QGemm
  to float32 instead where its C is DQ of int32 too (``gemm_to_float``), as is an ONNX Gemm of DQ(x) and
  DQ(W) without C (W transposed).

An operand that is a transpose of the integers is read through it by the operator (ops/batch_matmul.py),
not copied first.
"""
from __future__ import annotations

import numpy as np
from tvm import relax
from tvm.ir import Op

from tvm_integration.qnn.float.float_calls import shape_of
from tvm_integration.qnn.float.float_ops import gemm_c_shapes
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


# MatMulIntegerToFloat's output as the integer dense computes it: ``x_scale * w_scale / 1`` in float32 is
# onnxruntime's multiplier ``a_scale * b_scale`` (arithmetic.linear_constants), the product neither rounded
# nor clamped (output_stage.OutputStage.to_float)
FLOAT_OUTPUT = QParams(np.array(1, np.float32), np.array(0, np.int64), "float32")


def to_float(reader, call):
    """``matmul(DQ(a), DQ(b))`` of a uint8 ``a`` (on Arm also int8 pairs), read by no QuantizeLinear ->
    MatMulIntegerToFloat."""
    var = reader.bound.get(call)
    readers = [] if var is None else reader.readers(var)
    if var is None or any(_op(r) == "relax.quantize" for r in readers):
        return None
    if (weight := _weight(reader, call)) is not None:
        if not _activation(reader, call, weight) or _gemm_fused(reader, call, readers):
            return None
        return reader.linear(call, None, FLOAT_OUTPUT, [0, 0], reader.layer_name(call), reshaped=False)
    found = _operands(reader, call)
    if found is None or not _fused_types(reader, call, found[1][0].dtype, found[1][1].dtype):
        return None
    (sa, _), (sb, _) = found[2]
    return _batch_matmul(reader, found, np.float32(sa * sb), "float32", 0, [0, 0], call)


def _fused_types(reader, call, a: str, b: str) -> bool:
    """MatMulNodeGroupSelector's types: ``a`` uint8, or (its AArch64 build, ``reader.int8_allowed``) ``a``
    and ``b`` both int8; onnxruntime's x86 build turns the int8 pairs it can uint8 first (ort_fusion.converted).
    A QOperator QGemm's matmul (``reader.qgemm_cores``) is that kernel on every build, int8 pairs too."""
    return a == "uint8" or (reader.int8_allowed or call in reader.qgemm_cores) and a == b == "int8"


def _op(call) -> str:
    return call.op.name if isinstance(call, relax.Call) and isinstance(call.op, Op) else ""


def gemm_to_float(reader, add):
    """``matmul(DQ(x), DQ(W)) + DQ(c)``, x 2-D, c an int32 constant [N], read by no QuantizeLinear: the
    Gemm MatMulAddFusion makes of it (or an ONNX Gemm), whose three inputs are DequantizeLinear outputs,
    GemmNodeGroupSelector makes QGemm to float32: c added to the int32 sum, ``float32(acc + c) *
    float32(sx * sw)`` (its scale output processor), c's own scale unread. The integer dense with c."""
    var = reader.bound.get(add)
    if var is None or any(_op(r) == "relax.quantize" for r in reader.readers(var)):
        return None
    for index in (0, 1):
        matmul, bias = reader.call(add.args[index], "relax.matmul"), reader.dequantized_constant(add.args[1 - index])
        weight = None if matmul is None else _weight(reader, matmul)
        if weight is None or bias is None or bias[0].dtype != np.int32 or \
                len(shape_of(matmul.args[0]) or ()) != 2 or bias[0].shape != (shape_of(matmul)[-1],) or \
                not _activation(reader, matmul, weight) or reader.readers(reader.bound[matmul]) != [add]:
            continue
        return reader.linear(matmul, bias[0], FLOAT_OUTPUT, [0, 0], reader.layer_name(add), reshaped=False)
    return None


def _activation(reader, call, weight) -> bool:
    """``call``'s first operand is DQ of a tensor per tensor whose type the selectors fuse with ``weight``'s
    (``_weight``; ``_fused_types``: uint8, on Arm also int8 by int8 weights)."""
    data = reader.dequantized(call.args[0])
    return data is not None and _fused_types(reader, call, data[1].dtype, weight[1].dtype) and \
        data[1].per_tensor_8bit and data[1].range is None


def _weight(reader, call):
    """The (array, QParams) of ``call``'s second operand, DQ(W) or its transpose, W an 8-bit 2-D constant
    (a QCDQ Clip of it too, Brevitas' weights: onnxruntime folds a Clip of a constant), its scale per
    tensor or per output column, one zero point: MatMulIntegerToFloat's and QGemm's B (the integer dense
    takes one zero point); else None."""
    operand, column = call.args[1], 1
    if (transposed := reader.call(operand, "relax.permute_dims")) is not None:
        operand, column = transposed.args[0], 0
    weight = reader.dequantized_constant(operand)
    if weight is None or weight[0].ndim != 2 or transposed is not None and transposed.attrs.axes is not None and \
            [int(a) for a in transposed.attrs.axes] != [1, 0]:
        return None
    (w, params), axis = weight, reader.call(operand, "relax.dequantize").attrs.axis
    scale, zero_point = params.scale.reshape(-1), params.zero_point.reshape(-1)
    by_column = scale.size == 1 or scale.size == w.shape[column] and int(axis) % 2 == column
    ok = params.dtype in ("uint8", "int8") and np.all(zero_point == zero_point[0])
    return weight if ok and by_column else None


def _gemm_fused(reader, call, readers) -> bool:
    """Whether onnxruntime's MatMulAddFusion makes ``call`` (a matmul by a 2-D constant) and the Add
    that alone reads it one Gemm (float, or QGemm where C is DQ(int32): gemm_to_float): that Add's other
    operand of a shape Gemm takes for C (float_ops.gemm_c_shapes, the float Gemm's rule)."""
    add = readers[0] if len(readers) == 1 else None
    if _op(add) != "relax.add":
        return False
    other = next(arg for arg in add.args if not arg.same_as(reader.bound[call]))
    rows, weight = (shape_of(arg) for arg in call.args)
    return rows is not None and weight is not None and shape_of(other) in gemm_c_shapes(rows, weight)


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
