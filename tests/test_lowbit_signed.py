"""Signed low-bit weights (issue 31 item 4): Brevitas quantizes weights signed by default (3 bits:
narrow [-3, 3], full [-4, 3]), as QuantizeLinear of the float weights -> Clip -> DequantizeLinear,
and a scale that does not cover every weight saturates some of them at the Clip. The bitserial
operators take unsigned codes: precision.py offsets signed weights (code ``w - lo``) and
bitserial_layer.py subtracts the offset back exactly (``d T``, T the window's activation sum).

Each model (conv -> Relu -> Flatten -> dense, both layers AxWy signed, some weights saturating) is
built here with onnx.helper in one of the low-bit forms (QCDQ, QDQ with ONNX's int2 type, QONNX
Quant), compiled, its layers checked to run on the bitserial operators, and compared bit for bit
with onnxruntime (QDQ, QCDQ) or qonnx's executor (QONNX). Scales are powers of two and the weights
whole steps, so every float step the references take is exact.

Before lowbit.py read a Clip of an integer constant clipped, the rewrite took the weights under the
Clip unclipped: the QCDQ and QDQ models failed with ``ValueError: unipolar W3 weights must be in
[0, 7]`` (the error issue 31 reports). qonnx's Quant of a constant was already folded clipped; its
models are here so every form is covered.
"""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from tvm_integration.qnn.lower import bitserial_layer
from tvm_integration.qnn.semantics import precision
from tvm_integration.qnn.semantics.errors import ModelError
from tvm_integration.qnn.semantics.integer_op import IntegerOp

QONNX = "qonnx.custom_op.general"
SHAPE = (1, 4, 6, 6)
DENSE = 8


def signed_range(bits: int, narrow: bool) -> tuple[int, int]:
    return -(1 << (bits - 1)) + int(narrow), (1 << (bits - 1)) - 1


class Model:
    """x -> quantize (A bits, unsigned) -> conv 3x3 (signed W bits) + bias -> Relu -> quantize (A bits)
    -> Flatten -> Gemm (signed W bits) + bias -> quantize (int8) -> float output, in ``form``."""

    def __init__(self, form: str, abits: int, wbits: int, narrow: bool, per_channel: bool, seed: int = 0):
        self.form, self.abits, self.wbits, self.narrow = form, abits, wbits, narrow
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.count = [], [], 0
        x = self.activation("x", 2.0 ** -3)
        x = self.layer("conv", x, (8, SHAPE[1], 3, 3), 2.0 ** -3, 2.0 ** -1, per_channel, 4)
        x = self.node("Flatten", [x])
        x = self.layer("dense", x, (8 * SHAPE[2] * SHAPE[3], DENSE), 2.0 ** -1, 2.0 ** -1, per_channel, 2)
        graph = helper.make_graph(self.nodes, "signed", [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                                  [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, DENSE])], self.inits)
        opsets = [helper.make_opsetid("", 25 if form == "qdq" else 13)]
        if form == "qonnx":
            opsets.append(helper.make_opsetid(QONNX, 1))
        self.model = helper.make_model(graph, opset_imports=opsets)
        self.model.ir_version = 11 if form == "qdq" else 8
        self.output = x

    def fresh(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}_{self.count}"

    def init(self, array, dtype=None) -> str:
        name, array = self.fresh("c"), np.asarray(array)
        self.inits.append(numpy_helper.from_array(array, name) if dtype is None else
                          helper.make_tensor(name, dtype, list(array.shape), array.flatten().tolist()))
        return name

    def node(self, op: str, inputs, name: str = "", domain: str = "", **attrs) -> str:
        out = self.fresh(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], name=name or out, domain=domain, **attrs))
        return out

    def quant(self, x: str, scale: float | np.ndarray, lo: int, hi: int, signed: bool, axis=None, ty=None) -> str:
        """Quantize-clip-dequantize of ``x`` to [lo, hi] in the model's form (``ty``: QDQ's low-bit type)."""
        attrs = {} if axis is None else dict(axis=axis)
        if self.form == "qonnx":
            bits = max(hi - lo, 1).bit_length()
            s = np.float32(scale) if axis is None else np.float32(scale).reshape([-1, 1, 1, 1] if axis == 0 else [1, -1])
            return self.node("Quant", [x, self.init(s), self.init(np.float32(0)), self.init(np.float32(bits))],
                             domain=QONNX, signed=int(signed), narrow=int(signed and lo == -hi), rounding_mode="ROUND")
        s = self.init(np.float32(scale))
        zeros = np.zeros(np.shape(scale), np.int8 if signed else np.uint8)
        if ty is not None:               # QDQ: the zero point's type declares the width
            z = self.init(zeros, ty)
            return self.node("DequantizeLinear", [self.node("QuantizeLinear", [x, s, z], **attrs), s, z], **attrs)
        z = self.init(zeros)
        q = self.node("QuantizeLinear", [x, s, z], **attrs)
        c = self.node("Clip", [q, self.init(np.array(lo, zeros.dtype)), self.init(np.array(hi, zeros.dtype))])
        return self.node("DequantizeLinear", [c, s, z], **attrs)

    def activation(self, x: str, scale: float) -> str:
        ty = TensorProto.UINT2 if self.form == "qdq" and self.abits == 2 else None
        return self.quant(x, scale, 0, (1 << self.abits) - 1, False, ty=ty)

    def layer(self, kind: str, x: str, shape, x_scale: float, out_scale: float, per_channel: bool, mean: int) -> str:
        """A conv or dense of signed weights, some saturating; its bias roughly cancels ``mean`` (the
        input's typical code) times the weights' sum, so outputs fall on both sides of the Relu."""
        lo, hi = signed_range(self.wbits, self.narrow)
        channels = shape[0] if kind == "conv" else shape[1]
        axis = (0 if kind == "conv" else 1) if per_channel else None
        w_scale = 2.0 ** -self.rng.integers(1, 3, channels) if per_channel else 2.0 ** -int(self.rng.integers(1, 3))
        ints = self.rng.integers(lo - 2, hi + 3, shape)        # some beyond [lo, hi]: they saturate
        broadcast = np.reshape(w_scale, [-1 if i == (axis or 0) else 1 for i in range(len(shape))]) if per_channel \
            else w_scale
        w = self.init((ints * broadcast).astype(np.float32))
        ty = TensorProto.INT2 if self.form == "qdq" and self.wbits == 2 and not self.narrow else None
        wq = self.quant(w, w_scale, lo, hi, True, axis, ty)
        bias_scale = np.asarray(x_scale * w_scale, np.float32)
        sums = np.clip(ints, lo, hi).reshape(shape[0], -1).sum(1) if kind == "conv" else np.clip(ints, lo, hi).sum(0)
        bias = self.rng.integers(-6, 7, channels) - mean * sums
        if self.form == "qonnx":
            b = self.init((bias * bias_scale).astype(np.float32))
        else:
            b = self.node("DequantizeLinear", [self.init(bias.astype(np.int32)), self.init(bias_scale),
                                               self.init(np.zeros(np.shape(bias_scale), np.int32))],
                          **(dict(axis=0) if per_channel else {}))
        if kind == "conv":
            y = self.node("Conv", [x, wq, b], name=f"{kind}_signed", kernel_shape=[3, 3], pads=[1, 1, 1, 1])
            return self.activation(self.node("Relu", [y]), out_scale)
        ty = TensorProto.INT8 if self.form == "qdq" else None
        return self.quant(self.node("Gemm", [x, wq, b], name=f"{kind}_signed"), out_scale, -128, 127, True, ty=ty)

    def reference(self, path):
        if self.form == "qonnx":
            pytest.importorskip("qonnx", reason="qonnx is not installed (pip install -e '.[test]')", exc_type=ModuleNotFoundError)
            from qonnx.core.modelwrapper import ModelWrapper
            from qonnx.core.onnx_exec import execute_onnx
            from qonnx.transformation.infer_shapes import InferShapes
            wrapper = ModelWrapper(self.model).transform(InferShapes())
            return lambda x: execute_onnx(wrapper, {"x": x})[self.output]
        options = ort.SessionOptions()       # QDQ: onnxruntime 1.32's constant folding fails on a QuantizeLinear
        options.graph_optimization_level = (     # of a constant to int2 (element type mismatch): run it unoptimized
            ort.GraphOptimizationLevel.ORT_DISABLE_ALL if self.form == "qdq" else ort.GraphOptimizationLevel.ORT_ENABLE_BASIC)
        session = ort.InferenceSession(str(path), options)
        return lambda x: session.run(None, {"x": x})[0]


CASES = [  # (form, abits, wbits, narrow, per_channel)
    ("qcdq", 3, 3, True, False), ("qcdq", 3, 3, False, True), ("qcdq", 3, 2, True, True),
    ("qcdq", 3, 2, False, False), ("qcdq", 2, 2, True, False), ("qcdq", 2, 2, False, True),
    ("qdq", 2, 2, False, False), ("qdq", 3, 2, False, True),
    ("qonnx", 3, 3, True, False), ("qonnx", 3, 2, False, True), ("qonnx", 2, 2, True, True),
    ("qonnx", 2, 2, False, False),
]


@pytest.mark.parametrize("form,abits,wbits,narrow,per_channel", CASES,
                         ids=[f"{f}-A{a}W{w}-{'narrow' if n else 'full'}{'-pc' if p else ''}" for f, a, w, n, p in CASES])
def test_signed_weights_bitexact(tmp_path, form, abits, wbits, narrow, per_channel):
    from tvm_integration.qnn.onnx.importer import load
    from tvm_integration.qnn.runtime.model import compile_model
    from tvm_integration.qnn.runtime.report import layers
    built = Model(form, abits, wbits, narrow, per_channel, seed=abits * 10 + wbits + 2 * narrow)
    path = tmp_path / f"{form}.onnx"
    onnx.save(built.model, path)
    rows = layers(load(path), lowbit="bitserial")
    assert [(r.layer, r.operator) for r in rows] == [("conv_signed", "bitserial"), ("dense_signed", "bitserial")]
    assert all(r.precision.abits == abits and r.precision.wbits <= wbits for r in rows)
    ours, theirs = compile_model(path, threads=1, lowbit="bitserial"), built.reference(path)
    rng = np.random.default_rng(3)
    for _ in range(3):
        x = (rng.random(SHAPE) * 1.2).astype(np.float32)
        want = theirs(x)
        assert np.unique(want).size > 4                       # the outputs are not all clamped
        np.testing.assert_array_equal(ours({"x": x})[built.output], want)


def test_weights_that_fit_no_width_are_refused_naming_the_layer():
    """Weights that fit their layer's width neither signed nor unsigned: one ModelError naming the
    layer, from precision.py (the declared range) and from bitserial_layer.py (the codes), not the
    operator's anonymous ``unipolar W3 weights must be in [0, 7]``."""
    w = np.arange(-6, 6).reshape(3, 4, 1, 1).astype(np.int8)           # 12 values: 4 bits
    with pytest.raises(ModelError, match=r"layer conv7: weights in \[-6, 5\] do not fit 3 bits, signed \[-4, 3\] or "
                                         r"unsigned \[0, 7\]"):
        precision.detect("conv7", (0, 7), (-4, 3), w, 0)
    op = IntegerOp("conv2d", dict(x_zero_point=0, w_zero_point=0, x_range=[0, 7], encoding="unipolar", w_low=-4,
                                  wbits=3, layer="conv7", padding=[0] * 4),
                   (), (w, np.zeros(3, np.int32), np.ones(3, np.float32)), (), "uint8")
    with pytest.raises(ModelError, match=r"layer conv7: weights in \[-6, 5\] do not fit W3 unipolar codes"):
        bitserial_layer.lowered(op)

