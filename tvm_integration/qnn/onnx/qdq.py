"""The QDQ graph as imported (importer.py), read for the rewrite (rewrite.py): the quantization
parameters of a quantize/dequantize (``QParams``), what a variable is bound to, and the forms the
rewrite matches on, each a method of ``QDQReader`` returning the parts or None: a call of given ops,
a clip by constant bounds (a QCDQ tensor's declared range), DQ(x), DQ(constant), and the
zero-point-subtracted ``astype`` of ConvInteger and MatMulInteger; a max pool's integer parameters.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from tvm import relax
from tvm.ir import Constant, Op

from tvm_integration.ops.output_stage import QUANT_RANGES
from tvm_integration.qnn.onnx.importer import LAYER_NAMES
from tvm_integration.qnn.semantics.quant import constant, per_tensor


@dataclass(frozen=True)
class QParams:
    scale: np.ndarray        # float32, per tensor (shape ()) or per channel
    zero_point: np.ndarray   # int64, same shape
    dtype: str
    range: tuple[int, int] | None = None     # the values' declared range (a QCDQ clip); None: the type's

    @property
    def bounds(self) -> tuple[int, int]:
        return self.range or QUANT_RANGES[self.dtype]

    @property
    def per_tensor_8bit(self) -> bool:
        """One scale and zero point, to a type of the integer ops (8-bit; int32): what the rewrite fuses."""
        return self.scale.size == self.zero_point.size == 1 and self.dtype in QUANT_RANGES

    def narrowed(self, lo: int, hi: int) -> "QParams":
        low, high = self.bounds
        return replace(self, range=(max(low, lo), min(high, hi)))

    def scalar(self, what: str) -> tuple[np.float32, int]:
        return per_tensor(what, self.scale, self.zero_point)

    def same(self, other: "QParams") -> bool:
        return self.dtype == other.dtype and self.bounds == other.bounds and np.array_equal(
            self.scale, other.scale) and np.array_equal(self.zero_point, other.zero_point)


class QDQReader(relax.PyExprMutator):
    """A mutator of the imported module that reads its graph (``var2val`` of the function it is in)."""

    def __init__(self, mod):
        super().__init__(mod)
        self.mod = mod
        self.var2val = {}
        self.bound = {}             # value -> the variable bound to it
        self.outputs = set()        # the function's outputs (variables)

    def run(self):
        for gvar, func in self.mod.functions.items():
            if isinstance(func, relax.Function):
                self.var2val = relax.analysis.get_var2val(func)
                self.bound = {value: var for var, value in self.var2val.items()}
                out = func.body.body
                self.outputs = set(out.fields if isinstance(out, relax.Tuple) else [out])
                self.builder_.update_func(gvar, self.visit_expr(func))
        return self.builder_.get()

    def readers(self, var) -> list:
        """The calls that read variable ``var``, one per argument that is ``var``; a function output
        (``self.outputs``) is read by the function too (None in the list)."""
        calls = [value for value in self.var2val.values() if isinstance(value, relax.Call)
                 for arg in value.args if isinstance(arg, relax.Var) and arg.same_as(var)]
        return calls + [None] * any(var.same_as(out) for out in self.outputs)

    def value(self, expr):
        """What ``expr`` is bound to (following variables), else ``expr``."""
        while isinstance(expr, relax.Var) and expr in self.var2val:
            expr = self.var2val[expr]
        return expr

    def call(self, expr, *names):
        """``expr``'s value when it is a call of one of the ops ``names``, else None."""
        expr = self.value(expr)
        if isinstance(expr, relax.Call) and isinstance(expr.op, Op) and expr.op.name in names:
            return expr
        return None

    def qparams(self, call) -> QParams | None:
        """The constant quantization parameters of a quantize/dequantize call; None when they are
        computed at run time (DynamicQuantizeLinear): such a call stays TVM's own op."""
        scale, zero_point = constant(self.value(call.args[1])), constant(self.value(call.args[2]))
        if scale is None or zero_point is None:
            return None
        dtype = str(call.attrs.out_dtype if call.op.name == "relax.quantize" else call.args[0].ty.dtype.dtype)
        return QParams(scale.astype(np.float32), zero_point.astype(np.int64), dtype)

    def clipped(self, expr):
        """(the clipped expression, (lo, hi)) when ``expr`` is a clip by constant integer bounds."""
        clip = self.call(expr, "relax.clip")
        if clip is None or not all(isinstance(getattr(b, "value", None), int) for b in clip.args[1:3]):
            return None
        return clip.args[0], tuple(int(b.value) for b in clip.args[1:3])

    def dequantized(self, expr):
        """(integer input, its QParams) when ``expr`` is DQ(x), else None; a clip under the DQ is the
        tensor's range."""
        dq = self.call(expr, "relax.dequantize")
        params = None if dq is None else self.qparams(dq)
        if params is None:
            return None
        if (clipped := self.clipped(dq.args[0])) is not None:
            params = params.narrowed(*clipped[1])
        return dq.args[0], params

    def dequantized_constant(self, expr):
        """(the constant array, its QParams) when ``expr`` is DQ(constant), else None."""
        dq = self.dequantized(expr)
        if dq is None:
            return None
        clipped = self.clipped(dq[0])
        array = constant(self.value(dq[0] if clipped is None else clipped[0]))
        return None if array is None else (array, dq[1])

    def dequantized_weights(self, expr) -> Constant | None:
        """DQ(a constant), unclipped, as the float32 constant it computes, ``float32(w - zp) * scale``
        along its axis: the same float32 operations as TVM's dequantize (and onnxruntime's), for a float
        op to read instead of dequantizing at every run (an S8S8 ResNet-18's 11 float convs: 7.8 of its
        66 CPU ms on Zen 3)."""
        dq = self.call(expr, "relax.dequantize")
        found = None if dq is None or self.clipped(dq.args[0]) is not None else self.dequantized_constant(expr)
        if found is None:
            return None
        (w, params), axis = found, int(dq.attrs.axis) % found[0].ndim
        shape = [-1 if d == axis else 1 for d in range(w.ndim)] if params.scale.size > 1 else []
        steps = (w.astype(np.int32) - params.zero_point.astype(np.int32).reshape(shape)).astype(np.float32)
        return relax.const(steps * params.scale.astype(np.float32).reshape(shape))

    def zero_point_subtracted(self, expr):
        """(integer tensor, its zero point expression or None) when ``expr`` is ``astype(t, int32)``
        or ``astype(t, int32) - astype(zp, int32)``: how ConvInteger and MatMulInteger import."""
        zero_point = None
        if (sub := self.call(expr, "relax.subtract")) is not None:
            expr, zero_point = sub.args
            if (zp := self.call(zero_point, "relax.astype", "relax.reshape", "relax.expand_dims")) is not None:
                zero_point = zp.args[0]
                if (zp := self.call(zero_point, "relax.astype")) is not None:
                    zero_point = zp.args[0]
        cast = self.call(expr, "relax.astype")
        if cast is None or str(cast.args[0].ty.dtype) not in ("uint8", "int8"):
            return None
        return cast.args[0], zero_point

    def layer_name(self, *exprs) -> str:
        """The ONNX node a conv/matmul came from (importer.py names its variable: given, or the one
        bound to the expression), else ''."""
        names = (v.name for e in exprs if isinstance(v := self.bound.get(e, e), relax.Var))
        return next((LAYER_NAMES[name] for name in names if name in LAYER_NAMES), "")


def max_pool_params(pool) -> dict | None:
    """The integer ``max_pool2d``'s parameters (arithmetic.py) of a relax ``max_pool2d`` call ``pool``
    (NCHW, no dilation; else None): ceil mode as bottom/right padding, the last windows' overhang,
    which never wins a max."""
    a = pool.attrs
    if str(a.layout) != "NCHW" or any(int(d) != 1 for d in a.dilation):
        return None
    size, strides, padding = ([int(v) for v in vs] for vs in (a.pool_size, a.strides, a.padding))
    if a.ceil_mode:
        (h, w), (oh, ow) = ([int(d) for d in list(e.ty.shape)[2:]] for e in (pool.args[0], pool))
        padding[2] = (oh - 1) * strides[0] + size[0] - h - padding[0]
        padding[3] = (ow - 1) * strides[1] + size[1] - w - padding[1]
    return dict(pool=size, strides=strides, padding=padding)
