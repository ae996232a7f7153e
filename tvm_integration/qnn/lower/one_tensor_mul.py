"""Stage 4, bind, of a quantized mul whose two operands are functions of one 8-bit tensor x, each x itself
or a lookup table of x: SiLU, ``x * sigmoid(x)``, as ONNX exporters write it (``Mul(DQ(x), DQ(Q(Sigmoid(DQ(x)))))``,
which rewrite.py reads as a mul of x and a lookup of x), and Keras' swish as the TFLite converter writes it
(``MUL(x, LOGISTIC(x))``). Its output is then a function of x alone: one 256-entry table of x (``folded``),
whose entries are the mul's own arithmetic for the target the model is built for (``neon``: arithmetic.mul
as onnxruntime's AArch64 build computes it, litert_arithmetic.mul as LiteRT's; else their x86 builds') on
the operands' 256 values, computed as a compiled model computes them (quant.evaluate). So the lookup equals
the mul it replaces on every input, and the sigmoid's table is left to dead code elimination where nothing
else reads it.
"""
from __future__ import annotations

import numpy as np
from tvm import relax

from tvm_integration.ops.output_stage import QUANT_RANGES
from tvm_integration.qnn.semantics.integer_op import COMPUTATIONS, DESCRIPTIVE, IntegerOp
from tvm_integration.qnn.semantics.quant import evaluate


def folded(op: IntegerOp, ops: dict, neon: bool) -> IntegerOp | None:
    """``op``, a mul of two activations, as a lookup of the one 8-bit tensor both operands are functions of
    (``ops``: each variable's integer op, None for another value); None where they are not."""
    if op.kind not in ("mul", "tflite_mul") or op.constants or len(op.inputs) != 2:
        return None
    first, second = (dict(_functions_of(operand, ops)) for operand in op.inputs)
    x = next((x for x in first if x in second), None)
    if x is None:
        return None
    params = {k: v for k, v in op.params.items() if k not in DESCRIPTIVE} | {"neon": neon}
    table = evaluate(lambda bb: bb.call_te(COMPUTATIONS[op.kind], relax.const(first[x]), relax.const(second[x]),
                                           **params))
    lo = QUANT_RANGES[str(x.ty.dtype)][0]
    return IntegerOp("lookup", {"offset": -lo}, (x,), (table,), op.out_shape, op.out_dtype)


def _functions_of(operand, ops: dict) -> list:
    """(x, the operand's value at each 8-bit value of x, from the lowest) for each tensor x the operand is
    an elementwise function of: the operand itself, if 8-bit; the tensor it looks up, if a lookup."""
    dtype = str(operand.ty.dtype)
    found = []
    if dtype in ("uint8", "int8"):
        lo, hi = QUANT_RANGES[dtype]
        found.append((operand, np.arange(lo, hi + 1).astype(dtype)))
    lookup = ops.get(operand)
    if lookup is not None and lookup.kind == "lookup":
        found.append((lookup.inputs[0], lookup.constants[0]))
    return found
