"""onnxruntime's QDQPropagationTransformer (1.32, every build), done on the ONNX graph before the import.

A DequantizeLinear whose output is read by one node only, a MaxPool, Reshape, Transpose, Squeeze,
Unsqueeze or Slice, is carried past it: onnxruntime inserts a QuantizeLinear with the DequantizeLinear's
scale and zero point after that node and a DequantizeLinear of it before each of its readers that is
no QuantizeLinear itself, and goes on through readers that are such nodes too. NNCF writes
``DQ -> MaxPool -> Conv`` (and the residual Add) this way; onnxruntime then fuses the Conv and the Add
(the MaxPool runs on the integers), where the rewrite would have seen a float Conv of a float tensor.
The pairs change no value (these ops commute with dequantization by a positive scale), only which
groups the rewrite and ort_fusion.py see. Quantizers that write the pairs themselves
(onnxruntime's quantize_static) leave nothing to propagate.
"""
from __future__ import annotations

from collections import defaultdict

import onnx
from onnx import helper

PROPAGATED = {"MaxPool": 12, "Reshape": 5, "Transpose": 1, "Squeeze": 1, "Unsqueeze": 1, "Slice": 1}  # op: since


def propagated(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with every DequantizeLinear carried forward as onnxruntime does (a copy; ``model``
    itself when there is nothing to carry)."""
    graph = model.graph
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    inits = {t.name: t for t in graph.initializer}
    outputs = {o.name for o in graph.output}

    def readers_of(nodes):
        readers = defaultdict(list)
        for node in nodes:
            for name in node.input:
                readers[name].append(node)
        return readers

    def scalar_constant(name):
        return name in inits and onnx.numpy_helper.to_array(inits[name]).size == 1

    def carries(node) -> bool:
        return node.domain in ("", "ai.onnx") and node.op_type in PROPAGATED and opset >= PROPAGATED[node.op_type] \
            and len([o for o in node.output if o]) == 1

    nodes = list(graph.node)
    readers = readers_of(nodes)
    after: dict[str, list[onnx.NodeProto]] = defaultdict(list)      # node output -> the nodes inserted after it
    renamed: dict[tuple[int, int], str] = {}                          # (reader id, input slot) -> new input
    count = 0
    for dq in nodes:
        if dq.op_type != "DequantizeLinear" or dq.output[0] in outputs or len(readers[dq.output[0]]) != 1 \
                or not scalar_constant(dq.input[1]) or len(dq.input) > 2 and dq.input[2] and not scalar_constant(dq.input[2]):
            continue
        pending = [readers[dq.output[0]][0]]
        while pending:
            node = pending.pop()
            if not carries(node) or node.output[0] in outputs:
                continue
            edges = [r for r in readers[node.output[0]] if r.op_type != "QuantizeLinear"]
            if not edges:
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
    if not after:
        return model
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[:]
    for node in nodes:
        copy = onnx.NodeProto()
        copy.CopyFrom(node)
        for slot in range(len(copy.input)):
            copy.input[slot] = renamed.get((id(node), slot), copy.input[slot])
        out.graph.node.append(copy)
        for output in node.output:
            out.graph.node.extend(after.get(output, []))
    return out
