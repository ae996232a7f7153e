"""onnxruntime's QDQPropagationTransformer (1.32, every build), done on the ONNX graph before the import:
first every QuantizeLinear carried backward, then every DequantizeLinear forward, as its ApplyImpl orders
them, through MaxPool, Reshape, Transpose, Squeeze, Unsqueeze and Slice (ops that commute with
quantization by a positive scale). The pairs it inserts change no value, only which groups the rewrite
and ort_fusion.py see.

* Backward: a QuantizeLinear (scalar constant scale and zero point) whose input is such a node's
  output, read by it alone and no graph output, gets a QuantizeLinear -> DequantizeLinear pair of its
  parameters on that node's input edge (when that input, too, is read by the node alone, or is a graph
  input), and on through such nodes until a DequantizeLinear. PyTorch's PT2E (torchao's quantizers) writes
  ``Conv -> Relu -> MaxPool -> Q``; onnxruntime then sees ``Conv -> Relu -> Q`` and fuses it.
* Forward: a DequantizeLinear whose output is read by one node only, such a node, is carried past it:
  a QuantizeLinear with the DequantizeLinear's parameters after that node and a DequantizeLinear of it
  before each of its readers, unless one of them is a QuantizeLinear, and on through readers that are
  such nodes too. NNCF writes ``DQ -> MaxPool -> Conv`` (and the residual Add) this way; onnxruntime
  then fuses the Conv and the Add (the MaxPool runs on the integers), where the rewrite would have seen
  a float Conv of a float tensor.

Quantizers that write the pairs themselves (onnxruntime's quantize_static) leave nothing to propagate.

Then its ConstantFolding, which folds no DequantizeLinear but a whole ``DQ(c) -> X -> Q`` unit: c and
the parameters constant, X of one input and one output, each read by the next alone, none a graph output
(``folded_units``). A weight transposed after its DequantizeLinear (PyTorch's PT2E Linear:
``MatMul(x, Transpose(DQ(W)))``) gets its pair from the forward step, and onnxruntime then sees
``DQ(W^T)``: a MatMul by constant weights, which MatMulAddFusion takes into a Gemm with its bias.
"""
from __future__ import annotations

from collections import defaultdict

import numpy as np
import onnx
from onnx import helper
from onnx.reference import ReferenceEvaluator

PROPAGATED = {"MaxPool": 12, "Reshape": 5, "Transpose": 1, "Squeeze": 1, "Unsqueeze": 1, "Slice": 1}  # op: since


class _Graph:
    """What both directions read: readers and producers of each tensor, constants, outputs, opset."""

    def __init__(self, model: onnx.ModelProto):
        self.nodes = list(model.graph.node)
        self.readers, self.producer = defaultdict(list), {}
        for node in self.nodes:
            for name in node.input:
                self.readers[name].append(node)
            for name in node.output:
                self.producer[name] = node
        self.inits = {t.name: t for t in model.graph.initializer}
        self.outputs = {o.name for o in model.graph.output}
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)

    def scalar_parameters(self, node) -> bool:
        """A Q or DQ node's scale (and zero point, if any) are scalar constants."""
        return all(name in self.inits and onnx.numpy_helper.to_array(self.inits[name]).size == 1
                   for name in node.input[1:3] if name)

    def carries(self, node) -> bool:
        return node.domain in ("", "ai.onnx") and node.op_type in PROPAGATED and self.opset >= PROPAGATED[node.op_type] \
            and len([o for o in node.output if o]) == 1

    def sole_reader(self, name: str) -> bool:
        """Whether the tensor ``name`` has one reader and is no graph output (onnxruntime's GetPreviousEdge)."""
        return len(self.readers[name]) == 1 and name not in self.outputs


def propagated(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with every QuantizeLinear carried backward, then every DequantizeLinear forward, as
    onnxruntime does (a copy; ``model`` itself when there is nothing to carry)."""
    return folded_units(_dq_forward(_q_backward(model)))


def folded_units(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with each ``DQ(c) -> X -> Q`` unit onnxruntime's ConstantFolding folds (the module's
    docstring) replaced by an initializer of Q's output, computed as ONNX defines the three ops; in
    node order, so that a unit whose c an earlier fold made constant folds too."""
    graph = _Graph(model)
    values = {name: onnx.numpy_helper.to_array(t) for name, t in graph.inits.items()}
    folded, removed = [], set()
    for dq in graph.nodes:
        if dq.op_type != "DequantizeLinear" or not all(name in values for name in dq.input if name) \
                or not graph.sole_reader(dq.output[0]):
            continue
        x = graph.readers[dq.output[0]][0]
        if len(x.input) != 1 or len([o for o in x.output if o]) != 1 or x.domain not in ("", "ai.onnx") \
                or not graph.sole_reader(x.output[0]):
            continue
        q = graph.readers[x.output[0]][0]
        if q.op_type != "QuantizeLinear" or q.output[0] in graph.outputs or not graph.scalar_parameters(dq) \
                or not graph.scalar_parameters(q):
            continue
        (dq_scale, dq_zero), (q_scale, q_zero) = _parameters(values, dq), _parameters(values, q)
        dequantized = (values[dq.input[0]].astype(np.int32) - dq_zero).astype(np.float32) * dq_scale
        alone = helper.make_graph([x], "x", [], [helper.make_value_info(x.output[0], onnx.TypeProto())])
        y = ReferenceEvaluator(helper.make_model(alone, opset_imports=list(model.opset_import))).run(
            None, {x.input[0]: dequantized})[0]
        info = np.iinfo(q_zero.dtype)
        values[q.output[0]] = np.clip(np.rint(y / q_scale) + q_zero, info.min, info.max).astype(q_zero.dtype)
        folded.append(onnx.numpy_helper.from_array(values[q.output[0]], q.output[0]))
        removed |= {id(dq), id(x), id(q)}
    if not folded:
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    out.graph.node.extend(node for node in graph.nodes if id(node) not in removed)
    out.graph.initializer.extend(folded)
    return out


def _parameters(values: dict, node) -> tuple[np.float32, np.ndarray]:
    """A Q or DQ node's scalar scale and zero point (uint8 0 when absent: ONNX's default)."""
    zero = values[node.input[2]].reshape(()) if len(node.input) > 2 and node.input[2] else np.uint8(0)
    return np.float32(values[node.input[1]].reshape(())), zero


def _q_backward(model: onnx.ModelProto) -> onnx.ModelProto:
    graph = _Graph(model)
    after: dict[str, list[onnx.NodeProto]] = defaultdict(list)      # tensor -> the nodes inserted after it
    renamed: dict[tuple[int, int], str] = {}                          # (reader id, input slot) -> new input
    for q in graph.nodes:
        if q.op_type != "QuantizeLinear" or not graph.scalar_parameters(q) or not graph.sole_reader(q.input[0]):
            continue
        node = graph.producer.get(q.input[0])
        while node is not None and graph.carries(node):
            tensor = node.input[0]
            source = graph.producer.get(tensor)        # None: a graph input or initializer, which ends the walk
            if source is not None and (source.op_type == "DequantizeLinear" or not graph.sole_reader(tensor)):
                break
            n = len(renamed)
            after[tensor] += [helper.make_node("QuantizeLinear", [tensor, *q.input[1:]], [f"{tensor}_q_to_dq{n}"],
                                               name=f"{tensor}_pre_q{n}"),
                              helper.make_node("DequantizeLinear", [f"{tensor}_q_to_dq{n}", *q.input[1:]],
                                               [f"{tensor}_post_dq{n}"], name=f"{tensor}_post_dq{n}")]
            renamed[(id(node), 0)] = f"{tensor}_post_dq{n}"
            node = source
    return _rebuilt(model, graph.nodes, after, renamed)


def _dq_forward(model: onnx.ModelProto) -> onnx.ModelProto:
    graph = _Graph(model)
    after: dict[str, list[onnx.NodeProto]] = defaultdict(list)
    renamed: dict[tuple[int, int], str] = {}
    count = 0
    for dq in graph.nodes:
        if dq.op_type != "DequantizeLinear" or not graph.sole_reader(dq.output[0]) or not graph.scalar_parameters(dq):
            continue
        pending = [graph.readers[dq.output[0]][0]]
        while pending:
            node = pending.pop()
            if not graph.carries(node) or node.output[0] in graph.outputs:
                continue
            edges = graph.readers[node.output[0]]
            if not edges or any(r.op_type == "QuantizeLinear" for r in edges):
                continue
            count += 1
            quantized = f"{node.output[0]}_q_to_dq{count}"
            after[node.output[0]].append(helper.make_node(
                "QuantizeLinear", [node.output[0], *dq.input[1:]], [quantized], name=f"{node.output[0]}_q{count}"))
            for k, reader in enumerate(edges):
                name = f"{node.output[0]}_post_dq{count}_{k}"
                after[node.output[0]].append(helper.make_node(
                    "DequantizeLinear", [quantized, *dq.input[1:]], [name], name=f"{node.output[0]}_dq{count}_{k}"))
                for slot, used in enumerate(reader.input):
                    if used == node.output[0]:
                        renamed[(id(reader), slot)] = name
                pending.append(reader)
    return _rebuilt(model, graph.nodes, after, renamed)


def _rebuilt(model: onnx.ModelProto, nodes: list, after: dict, renamed: dict) -> onnx.ModelProto:
    """A copy of ``model`` with ``after[t]`` inserted after the node writing tensor ``t`` (or first,
    for a graph input) and each (reader, slot) of ``renamed`` reading its new tensor."""
    if not after:
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    produced = {name for node in nodes for name in node.output}
    for inserted in (after[name] for name in list(after) if name not in produced):
        out.graph.node.extend(inserted)
    for node in nodes:
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        for slot in range(len(copy.input)):
            copy.input[slot] = renamed.get((id(node), slot), copy.input[slot])
        out.graph.node.append(copy)
        for output in node.output:
            out.graph.node.extend(after.get(output, []))
    return out
