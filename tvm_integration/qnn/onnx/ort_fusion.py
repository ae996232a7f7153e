"""How onnxruntime types and fuses a QDQ model, read from the ONNX graph: which int8 pairs its x86 build
turns uint8 (``converted``) and which quantized layers it computes in float (``float_layers``, on x86 or
AArch64).

MLAS has no x86 kernel for int8 (signed) activations, so there onnxruntime's optimizer (1.32) first turns
int8 QuantizeLinear/DequantizeLinear pairs into uint8 ones (``QDQS8ToU8Transformer``, zero point + 128),
and fuses only what then has uint8 activations:

* a pair is turned only when the QuantizeLinear's output is read by exactly one node, a
  DequantizeLinear with the same zero point, itself read by at most one node or graph output
  (``EnsureUniqueDQForNodeUnit`` first gives each reader of a shared DequantizeLinear its own copy, so a
  tensor read by two nodes keeps two edges), and the QuantizeLinear's output is not a graph output;
* a Conv, MatMul or Gemm group is fused (QLinearConv, QLinearMatMul, QGemm) only when its input and
  output types are equal and not int8 (``ConvNodeGroupSelector``/``MatMulNodeGroupSelector``:
  ``int8_allowed_`` is false on x86); an Add or Mul (QLinearAdd, QLinearMul) and a GlobalAveragePool or
  AveragePool only when all its inputs' types equal its output's (``BinaryNodeGroupSelector``,
  ``UnaryNodeGroupSelector``); any group also needs its node's output read by that one
  QuantizeLinear alone (through a Relu or Clip only when the QuantizeLinear's range makes it a no-op:
  ``IsClipMadeRedundantByQ``). Otherwise the node runs in float on the dequantized tensors, and only
  its output is quantized.

So in a ResNet quantized with int8 activations (quantize_static's default), every convolution whose input
is also the residual branch's runs in float (11 of ResNet-18's 20), and so does every residual Add (its
output, read twice, stays int8). ``float_layers`` names them; the rewrite leaves them in float: a conv2d
as MLAS sums it (float_conv.py), an Add as dequantize, float add, quantize (QLinearAdd's
arithmetic rounds differently). ``converted`` turns the same pairs in the model qsynth compiles: a fused
QLinearAdd computes in float from the integers and zero points, so on turned tensors it rounds as
onnxruntime's only in their uint8 values (NNCF's ResNet-18: 18 of a residual Add's 100352 values).
On AArch64 onnxruntime fuses int8 activations (``QDQIsInt8Allowed``): nothing is turned there, but the
selectors' other conditions hold, so a group whose input and output types differ runs in float there too.
NNCF writes such groups throughout (int8 activations with zero point 0 into a Conv -> Relu -> uint8, uint8
into a residual branch's int8 Conv, an Add of the two): ``float_layers(model, int8_allowed=True)``.
"""
from __future__ import annotations

from collections import defaultdict

import numpy as np
import onnx
from tvm import relax

from tvm_integration.qnn.onnx.importer import LAYER_NAMES

LINEAR = ("Conv", "MatMul", "Gemm")             # ConvNodeGroupSelector, MatMulNodeGroupSelector, GemmSelector
FUSED = {"Add": 2, "Mul": 2, "GlobalAveragePool": 1, "AveragePool": 1}   # Binary/UnaryNodeGroupSelector: inputs
TYPE_RANGES = {"int8": (-128, 127), "uint8": (0, 255)}


class Graph:
    """A graph's readers, producers, outputs and constants."""

    def __init__(self, model: onnx.ModelProto):
        self.nodes, self.readers = list(model.graph.node), defaultdict(list)
        for node in self.nodes:
            for name in node.input:
                self.readers[name].append(node)
        self.producer = {out: node for node in model.graph.node for out in node.output}
        self.outputs = {o.name for o in model.graph.output}
        self.inits = {t.name: t for t in model.graph.initializer}

    def constant(self, name):
        return onnx.numpy_helper.to_array(self.inits[name]) if name in self.inits else None

    def zero_point(self, node):
        return self.constant(node.input[2]) if len(node.input) >= 3 else None


def converted(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with the int8 QuantizeLinear/DequantizeLinear pairs onnxruntime's x86 build turns into
    uint8 (zero point + 128: the same values) turned so, the QLinearAdd of such a tensor then computes
    in its uint8 values as onnxruntime's does (a copy; ``model`` itself when no pair turns). Identical
    QuantizeLinear and DequantizeLinear nodes are merged first, as CommonSubexpressionElimination does
    before (DedicatedQDQPair writes a pair per reader: merged, the tensor has two readers again)."""
    model = merged(model)
    g = Graph(model)
    pairs = []
    for q in model.graph.node:
        users = g.readers[q.output[0]] if q.op_type == "QuantizeLinear" else []
        if q.output[0] in g.outputs or len(users) != 1 or users[0].op_type != "DequantizeLinear":
            continue
        dq = users[0]
        zq, zd = g.zero_point(q), g.zero_point(dq)
        if zq is not None and zd is not None and zq.dtype.name == zd.dtype.name == "int8" and zq.size == zd.size == 1 \
                and zq.reshape(()) == zd.reshape(()) and len(g.readers[dq.output[0]]) + (dq.output[0] in g.outputs) <= 1:
            pairs.append((q.output[0], int(zq.reshape(())) + 128))
    if not pairs:
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    turned = dict(pairs)
    for value in sorted(set(turned.values())):
        out.graph.initializer.append(onnx.numpy_helper.from_array(np.array(value, np.uint8), f"qdq_s8_to_u8_zp{value}"))
    for node in out.graph.node:
        tensor = node.output[0] if node.op_type == "QuantizeLinear" else node.input[0]
        if node.op_type in ("QuantizeLinear", "DequantizeLinear") and tensor in turned:
            node.input[2] = f"qdq_s8_to_u8_zp{turned[tensor]}"
    kept = [v for v in out.graph.value_info if v.name not in turned]        # their element type changed
    del out.graph.value_info[:]
    out.graph.value_info.extend(kept)
    return out


def merged(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with each QuantizeLinear or DequantizeLinear that repeats an earlier one (its inputs and
    attributes) removed and its readers reading the earlier one's output (a copy; ``model`` itself
    when none repeats)."""
    outputs, first, renamed, kept = {o.name for o in model.graph.output}, {}, {}, []
    for node in model.graph.node:
        inputs = [renamed.get(name, name) for name in node.input]
        key = (node.op_type, node.domain, tuple(inputs), tuple(a.SerializeToString() for a in node.attribute))
        if node.op_type in ("QuantizeLinear", "DequantizeLinear") and node.output[0] not in outputs:
            if key in first:
                renamed[node.output[0]] = first[key]
                continue
            first[key] = node.output[0]
        kept.append((node, inputs))
    if not renamed:
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    for node, inputs in kept:
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        del copy.input[:]
        copy.input.extend(inputs)
        out.graph.node.append(copy)
    return out


def float_layers(model: onnx.ModelProto, int8_allowed: bool = False) -> dict[str, str]:
    """The QDQ nodes onnxruntime leaves in float, name -> why (the pattern and the quantizers that write
    it: ``qsynth inspect`` prints it): Conv/MatMul/Gemm, Add/Mul and GlobalAveragePool/AveragePool (their
    QLinear ops) whose group it does not fuse; ``int8_allowed``: as its AArch64 build, which fuses int8
    activations as they are (the x86 build first turns what it can uint8, ``converted``); both merge
    repeated QuantizeLinear and DequantizeLinear nodes first (``merged``)."""
    g = Graph(merged(model) if int8_allowed else converted(model))

    def dq_type(name) -> str | None:
        """The element type the DequantizeLinear producing ``name`` reads (None: not a DequantizeLinear
        of a QuantizeLinear's output or of a constant)."""
        dq = g.producer.get(name)
        if dq is None or dq.op_type != "DequantizeLinear":
            return None
        if (value := g.constant(dq.input[0])) is not None:
            return value.dtype.name
        q = g.producer.get(dq.input[0])
        zp = g.zero_point(q) if q is not None and q.op_type == "QuantizeLinear" else None
        return None if zp is None else zp.dtype.name

    def producer_type(name) -> str | None:
        """The op type of the node whose output ``name`` is (None: a graph input or initializer)."""
        return getattr(g.producer.get(name), "op_type", None)

    def redundant(clip, q) -> bool:
        """IsClipMadeRedundantByQ: a Relu or Clip that the QuantizeLinear's own range makes a no-op."""
        zp, scale = g.zero_point(q), g.constant(q.input[1])
        if zp is None or scale is None or zp.size != 1 or scale.size != 1 or zp.dtype.name not in TYPE_RANGES:
            return False
        lo, hi = TYPE_RANGES[zp.dtype.name]
        zp, scale = int(zp.reshape(())), np.float32(scale.reshape(()))
        if clip.op_type == "Relu":
            return zp == lo
        bounds = [g.constant(name) if name else None for name in list(clip.input[1:3]) + [""] * (3 - len(clip.input))]
        if any(b is None for b in bounds):
            return False
        q_lo, q_hi = (int(np.rint(np.float32(b.reshape(())) / scale)) + zp for b in bounds)
        return q_lo <= lo and q_hi >= hi

    names = {}
    for node in g.nodes:
        if node.op_type not in (*LINEAR, *FUSED) or not node.name:
            continue
        if node.op_type == "Conv" and producer_type(node.input[1]) == "DequantizeLinear" \
                and producer_type(node.input[0]) != "DequantizeLinear":
            # dequantized weights keep it MLAS's Conv (float constants' would take the NCHWc kernels)
            names[node.name] = ("its input is no DequantizeLinear's output (a float tensor: a float op between "
                                "them that onnxruntime carries no DequantizeLinear past, as Brevitas' MaxPool read "
                                "by a Conv and a residual QuantizeLinear)")
            continue
        ins = [node.input[0]] if node.op_type in LINEAR else list(node.input)
        kinds = [dq_type(name) for name in ins]
        users, clip = g.readers[node.output[0]], None
        if len(users) == 1 and users[0].op_type in ("Relu", "Clip"):
            clip, users = users[0], g.readers[users[0].output[0]]
        if any(k is None for k in kinds) or len(ins) != FUSED.get(node.op_type, 1):
            continue                 # not a QDQ group: whatever the rewrite makes of it
        if not any(u.op_type == "QuantizeLinear" for u in users):
            if node.op_type == "Conv":
                names[node.name] = "its output reaches no QuantizeLinear (PyTorch PT2E's residual Conv -> Add)"
            continue
        q = users[0]
        last = (clip or node).output[0]
        zp = g.zero_point(q) if len(users) == 1 and last not in g.outputs and node.output[0] not in g.outputs else None
        out = None if zp is None else zp.dtype.name
        if out is None:
            names[node.name] = "its output is read by more than its QuantizeLinear, or is a model output"
        elif clip is not None and not redundant(clip, q):
            names[node.name] = f"a {clip.op_type} before its QuantizeLinear that the output's range keeps"
        elif node.op_type in LINEAR and "int8" in (*kinds, out) and not int8_allowed:
            names[node.name] = (f"int8 activations (in {'/'.join(sorted(set(kinds)))}, out {out}), which MLAS has no "
                                "x86 kernel for: a tensor another node reads too stays int8 (QDQS8ToU8Transformer; "
                                "quantize_static's default int8 activations, NNCF, PT2E)")
        elif set(kinds) != {out}:
            names[node.name] = f"its input types ({', '.join(sorted(set(kinds)))}) are not its output's ({out})"
    return names


def qgemms_to_float(model: onnx.ModelProto) -> set[str]:
    """The com.microsoft QGemm nodes with a float output (no y_scale): onnxruntime's kernel itself in both
    builds, int8 A and B too (its x86 build turns nothing uint8 there), not a QDQ group its selectors may
    leave in float."""
    return {node.name for node in model.graph.node if node.op_type == "QGemm" and node.domain == "com.microsoft"
            and node.name and (len(node.input) < 8 or not node.input[7])}


def float_calls(mod, layers) -> set:
    """The Relax calls of the nodes ``layers`` names (importer.py binds each to a variable named after
    it): a Conv/MatMul/Gemm's conv2d or matmul (under its bias's add), an Add/Mul/pool's own call."""
    calls = set()
    for func in mod.functions.values():
        var2val = relax.analysis.get_var2val(func) if isinstance(func, relax.Function) else {}
        for var, value in var2val.items():
            if LAYER_NAMES.get(var.name) not in layers or not isinstance(value, relax.Call):
                continue
            first = var2val.get(value.args[0], value.args[0]) if value.args else None
            linear = isinstance(first, relax.Call) and getattr(first.op, "name", "") in ("relax.nn.conv2d", "relax.matmul")
            calls.add(first if getattr(value.op, "name", "") == "relax.add" and linear else value)
    return calls


def quantized_biases(model: onnx.ModelProto, layers) -> onnx.ModelProto:
    """``model`` with the float bias of each Conv or Gemm of ``layers`` (computed in float) that
    onnxruntime's WeightBiasQuantization quantizes replaced by what it computes from then on (a copy;
    ``model`` itself when there is none): ``DQ(int32(Round(bias / (sx * sw))), sx * sw)``, each step in
    float32. It applies where the node's input is a DequantizeLinear of one scale, its weights one of a
    constant, and its output reaches a QuantizeLinear through Relu or Clip alone, no branch (PT2E's
    convolutions whose input another node also reads: one of every such block's values differed)."""
    g = Graph(model)

    def to_quantize(node) -> bool:                  # IsNoBranchPathToQuantizeLinear (a graph output is no reader)
        while len(users := g.readers[node.output[0]]) == 1:
            if users[0].op_type == "QuantizeLinear":
                return True
            if users[0].op_type not in ("Relu", "Clip"):
                return False
            node = users[0]
        return False

    biases = {}
    for node in g.nodes:
        if node.name not in layers or node.op_type not in ("Conv", "Gemm") or len(node.input) < 3:
            continue
        x, w = g.producer.get(node.input[0]), g.producer.get(node.input[1])
        bias = g.constant(node.input[2])
        if x is None or w is None or {x.op_type, w.op_type} != {"DequantizeLinear"} or bias is None \
                or bias.dtype != np.float32 or bias.ndim != 1 or not to_quantize(node):
            continue
        sx, sw = g.constant(x.input[1]), g.constant(w.input[1])
        if sx is None or sx.size != 1 or sw is None or sw.size not in (1, bias.size) or g.constant(w.input[0]) is None:
            continue
        scale = np.float32(sx.reshape(())) * sw.astype(np.float32).reshape(-1)
        biases[node.name] = np.round(bias / scale).astype(np.int32).astype(np.float32) * scale
    if not biases:
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for node in out.graph.node:
        if node.name in biases:
            node.input[2] = f"{node.name}_bias_dq"
            out.graph.initializer.append(onnx.numpy_helper.from_array(biases[node.name], node.input[2]))
    return out
