"""Stage 3, legalize (the QNN paper's QNN Legalize): each integer conv2d / dense into a form the
target's kernels compute, or marked to stay on its reference computation, saying why.

x86 tiles (AVX-512 VNNI, AVX-VNNI, AVX2, AMX) multiply u8 activations by s8 weights:

* u8 weights become s8 weights ``w - 128`` with zero point ``zw - 128``. The folded bias does not
  change: ``-zx sum w + K zx zw`` moves by ``zx 128 K - K zx 128 = 0``;
* s8 activations are shifted to u8 by the operator itself (``x + 128``, a compensating
  ``-128 sum w`` in its bias: ops/gemm.py);
* a weight zero point zw that is still not 0 (U8U8 models: onnxruntime quantizes u8 weights
  asymmetrically) would need the window-sum term ``-zw sum x``; the weights become ``w - zw`` on zero
  point 0 instead, the folded bias ``-zx sum (w - zw)`` unchanged: int8 where they fit, else 9-bit in
  int16 (arithmetic.nine_bit), which the w16 tiles (AVX2, AVX-512BW) take as they are and the byte tiles (VNNI,
  AMX) clamped, with the few extremes added apart (kernels/selection.admitted, packing.clamped). Where
  too many lie outside a byte tile's range, 9-bit weights stay on the reference computation
  (scheduled, correct, slower), which says so.

Layers of 1-3-bit activations and weights (precision.py) are marked ``bitserial`` instead, with
their AxWy and encoding (bind.py hands them to bitserial_layer.py), where that operator is the faster
of the two exact ones for the target (kernels/lowbit_choice.py: a 1-3-bit code is an int8 value too);
else they take the int8 path above, their ``lowbit`` parameter saying why. Widths of 5-7 bits are
refused.

``neon`` (AArch64, ops/neon_gemm.py) takes the same s8 weights, and 9-bit ones as bytes on a zero point
(``neon_gemm.byte_weights``: the GEMM's row-sum term, as MLAS's QGEMM takes u8 weights on any zero point;
its depthwise TIR as they are): its tiles' own operand offsets (u8 codes for umull/uadalp, -128
activations for sdot) are the operator's business; bind.py builds it for the core named by ``mcpu``.
Only weights whose ``w - zw`` spans more than a byte's 256 values in one output channel (u8 or s8
weights less a zero point never do) stay on the reference computation there.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
from tvm import relax

from tvm_integration.kernels import lowbit_choice, selection, tuning
from tvm_integration.ops import neon_gemm
from tvm_integration.ops.conv2d import chosen_tiles
from tvm_integration.ops.output_stage import QUANT_RANGES
from tvm_integration.qnn.semantics.errors import ModelError
from tvm_integration.qnn.semantics.arithmetic import nine_bit
from tvm_integration.qnn.semantics.integer_op import LINEAR, IntegerOp
from tvm_integration.qnn.semantics.precision import Precision, detect

TARGETS = ("host", *selection.INT8_ISAS, "neon")


@relax.expr_functor.mutator
class Legalize(relax.PyExprMutator):
    def __init__(self, mod, target: str, lowbit: str):
        super().__init__(mod)
        self.mod, self.target, self.lowbit = mod, target, lowbit

    def run(self):
        self.error = None
        for gvar, func in self.mod.functions.items():
            if isinstance(func, relax.Function):
                self.builder_.update_func(gvar, self.visit_expr(func))
        if self.error is not None:
            raise self.error
        return self.builder_.get()

    def visit_call_(self, call):
        call = super().visit_call_(call)
        op = IntegerOp.read(call, self.mod)
        if op is None or op.kind not in LINEAR:
            return call
        weight, bias, *scale = op.constants            # no scale: the int32 accumulator (ConvInteger)
        try:
            chosen = precision(op)
        except ModelError as e:          # raised through TVM's visitor it would arrive as a RuntimeError
            self.error = self.error or e
            return call
        if chosen.bitserial and (low_bit := self.low_bit_operator(op, chosen)).operator == "int8":
            op = op.with_constants(*op.constants, lowbit=f"int8 over bitserial, {low_bit.why}")
        elif chosen.bitserial:
            op = op.with_constants(*op.constants, abits=chosen.abits, wbits=chosen.wbits, encoding=chosen.encoding,
                                   w_low=chosen.w_low)
            return replace(op, implementation="bitserial").emit_reference(self.builder_)
        if weight.dtype == np.uint8:
            op = op.with_constants(signed(weight), bias, *scale, w_zero_point=op.params["w_zero_point"] - 128)
        if op.params["w_zero_point"] != 0:
            op = op.with_constants(nine_bit(op.constants[0], op.params["w_zero_point"]), bias, *scale, w_zero_point=0)
        return replace(op, implementation=self.why_not(op) or "tensorized").emit_reference(self.builder_)

    def why_not(self, op: IntegerOp) -> str | None:
        """None where the target's int8 operator takes the op's weights, else the reference computation
        and why: on NEON 9-bit weights an output channel of which spans more than a byte
        (neon_gemm.byte_weights), on x86 too many weights of an output channel outside every tile's
        range (selection.admitted)."""
        weight = op.constants[0]
        if weight.dtype == np.int8 or op.kind == "conv2d" and op.depthwise:
            return None         # depthwise.py's TIR takes either
        try:
            if self.target == "neon":
                neon_gemm.byte_weights(weight)
            else:
                selection.candidates_for(weight, self.target, op.params.get("groups", 1))
        except ValueError as e:         # selection.SelectionError is one
            return f"reference: {e}"
        return None

    def low_bit_operator(self, op: IntegerOp, chosen: Precision) -> lowbit_choice.Choice:
        """The faster exact operator of a 1-3-bit layer; bitserial where its weights would keep a zero
        point on the int8 path (lowbit_choice's rule was measured on symmetric weights only)."""
        zero_point = op.params["w_zero_point"] - (128 if op.constants[0].dtype == np.uint8 else 0)
        if zero_point != 0:
            return lowbit_choice.Choice("bitserial", f"weight zero point {zero_point} on the int8 tiles")
        winograd = 0 if self.target == "neon" else by_winograd(op, self.target)
        return lowbit_choice.choose(chosen.abits, chosen.wbits, chosen.encoding, self.target,
                                    int(np.prod(op.constants[0].shape[1:])), tuning_key(op), self.lowbit,
                                    op.params.get("groups", 1), winograd)


def by_winograd(op: IntegerOp, target: str) -> int:
    """The stride of the Winograd transform the int8 operator of a conv2d op (bind.py's: NHWC, its
    weights as s8 after legalization) would run by on ``target`` (ops/conv2d.chosen_tiles), 0 where
    it would run directly: the low-bit rule credits each with its own rate."""
    if op.kind != "conv2d" or op.depthwise:
        return 0
    x = op.inputs[0]
    b, c, h, w = (int(d) for d in x.ty.shape)
    strides = tuple(op.params["strides"])
    s16 = chosen_tiles(signed(op.constants[0]), (b, h, w, c), "NHWC", strides, tuple(op.params["padding"]),
                       op.params["groups"], str(x.ty.dtype), target)[1]
    return strides[0] if s16 is not None else 0


def signed(weight: np.ndarray) -> np.ndarray:
    """u8 weights as the s8 ``w - 128`` the x86 tiles take; s8 ones as they are."""
    return (weight.astype(np.int16) - 128).astype(np.int8) if weight.dtype == np.uint8 else weight


def precision(op: IntegerOp) -> Precision:
    """The layer's precision (precision.py) from the ranges the rewrite recorded (else its types')."""
    x_range = op.params.get("x_range") or QUANT_RANGES[str(op.inputs[0].ty.dtype)]
    w_range = op.params.get("w_range") or QUANT_RANGES[str(op.constants[0].dtype)]
    return detect(op.params.get("layer", ""), x_range, w_range, op.constants[0], op.params["w_zero_point"],
                  op.params.get("groups", 1))


def tuning_key(op: IntegerOp) -> str:
    """The tuning log's key of a conv2d or dense op's int8 operator (kernels/tuning.py)."""
    weight, x = op.constants[0], op.inputs[0]
    dtype = str(x.ty.dtype)
    if op.kind == "dense":
        return tuning.dense_key(int(x.ty.shape[0]), *weight.shape, dtype)
    b, c, h, w = (int(d) for d in x.ty.shape)
    return tuning.conv2d_key((b, h, w, c), "NHWC", weight.shape, tuple(op.params["strides"]),
                             tuple(op.params["padding"]), op.params["groups"], dtype)


def legalize(mod, target: str = "host", lowbit: str = "fastest"):
    """``mod`` legalized for ``target``; ``lowbit``: the 1-3-bit layers' operator, one of
    ``lowbit_choice.OPERATORS`` ("fastest": measured or ruled per layer)."""
    if target not in TARGETS:
        raise ModelError(f"unknown target {target!r}; accepted: {', '.join(TARGETS)}")
    if lowbit not in lowbit_choice.OPERATORS:
        raise ModelError(f"unknown low-bit operator {lowbit!r}; accepted: {', '.join(lowbit_choice.OPERATORS)}")
    return Legalize(mod, target, lowbit).run()
