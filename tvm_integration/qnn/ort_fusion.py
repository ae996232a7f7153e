"""Which quantized layers onnxruntime's x86 build computes in float, read from the ONNX graph.

MLAS has no x86 kernel for int8 (signed) activations, so there onnxruntime's optimizer (1.32) first turns
int8 QuantizeLinear/DequantizeLinear pairs into uint8 ones (``QDQS8ToU8Transformer``, zero point + 128),
and fuses only what then has uint8 activations:

* a pair is turned only when the QuantizeLinear's output is read by exactly one node, a
  DequantizeLinear with the same zero point, itself read by at most one node or graph output
  (``EnsureUniqueDQForNodeUnit`` first gives each reader of a shared DequantizeLinear its own copy, so a
  tensor read by two nodes keeps two edges), and the QuantizeLinear's output is not a graph output;
* a Conv, MatMul or Gemm group is fused (QLinearConv, QLinearMatMul, QGemm) only when its input and
  output types are equal and not int8 (``ConvNodeGroupSelector``/``MatMulNodeGroupSelector``:
  ``int8_allowed_`` is false on x86); otherwise it runs in float on the dequantized tensors, and only
  its output is quantized.

So in a ResNet quantized with int8 activations (quantize_static's default), every convolution whose input
is also the residual branch's runs in float (11 of ResNet-18's 20). ``float_layers`` names them; the
rewrite leaves them in float and the float conv2d sums as MLAS does (float_matmul.conv2d_func). On
AArch64 onnxruntime fuses int8 activations (``QDQIsInt8Allowed``): nothing is float there.
"""
from __future__ import annotations

from collections import defaultdict

import onnx
from onnx import TensorProto

LINEAR = ("Conv", "MatMul", "Gemm")


def float_layers(model: onnx.ModelProto) -> frozenset[str]:
    """Names of the QDQ Conv/MatMul/Gemm nodes that onnxruntime's x86 build leaves in float."""
    graph = model.graph
    readers = defaultdict(list)
    for node in graph.node:
        for name in node.input:
            readers[name].append(node)
    producer = {out: node for node in graph.node for out in node.output}
    outputs = {o.name for o in graph.output}
    inits = {t.name: t for t in graph.initializer}

    def zero_point(node):
        if len(node.input) < 3 or node.input[2] not in inits:
            return None
        return onnx.numpy_helper.to_array(inits[node.input[2]])

    def converted(q) -> bool:
        """Whether the int8 Q -> DQ pair starting at ``q`` becomes uint8."""
        users = readers[q.output[0]]
        if q.output[0] in outputs or len(users) != 1 or users[0].op_type != "DequantizeLinear":
            return False
        dq = users[0]
        zq, zd = zero_point(q), zero_point(dq)
        return zq is not None and zd is not None and zq.size == zd.size == 1 and zq.reshape(()) == zd.reshape(()) \
            and len(readers[dq.output[0]]) + (dq.output[0] in outputs) <= 1

    def activation_type(dq) -> int | None:
        """The element type a DequantizeLinear reads after the conversion (None: not a Q's output)."""
        q = producer.get(dq.input[0])
        if q is None or q.op_type != "QuantizeLinear":
            return None
        zp = zero_point(q)
        kind = TensorProto.INT8 if zp is not None and zp.dtype.name == "int8" else TensorProto.UINT8
        return TensorProto.UINT8 if kind == TensorProto.INT8 and converted(q) else kind

    names = set()
    for node in graph.node:
        if node.op_type not in LINEAR or not node.input or not node.name:
            continue
        dq = producer.get(node.input[0])
        users = readers[node.output[0]]
        if len(users) == 1 and users[0].op_type in ("Relu", "Clip"):    # a Relu onnxruntime removes before Q
            users = readers[users[0].output[0]]
        if dq is None or dq.op_type != "DequantizeLinear" or len(users) != 1 or users[0].op_type != "QuantizeLinear":
            continue                 # not a QDQ group: whatever the rewrite makes of it
        kind = activation_type(dq)
        out_zp = zero_point(users[0])
        if kind is None or out_zp is None:
            continue
        out_kind = TensorProto.UINT8 if out_zp.dtype.name == "uint8" or converted(users[0]) else TensorProto.INT8
        if kind == TensorProto.INT8 or kind != out_kind:
            names.add(node.name)
    return frozenset(names)
