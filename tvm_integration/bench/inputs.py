"""Which values an ONNX model's inputs accept, for the random inputs of benchmarks (``qsynth
bench-model``, ``models.random_inputs``): what the graph does with an integer input decides its valid
values, which its dtype alone does not. Random int64 values fed to BERT's ``input_ids`` failed inside
onnxruntime ("Gather ... indices element out of data bounds", issue 31).

    ranges(model) -> {input name: (low, high)}, values drawn from low to high - 1

* an input used as the indices of a Gather (directly or through Cast, Reshape, Unsqueeze, Squeeze,
  Flatten, Identity, Expand) takes 0 .. the gathered axis's length - 1: embedding ids, positions,
  token types; where it indexes several tables, the shortest;
* an input named like a mask (``mask`` in its name, any case) takes 0 and 1, integer or float.

Inputs neither rule places are left to ``random_inputs``'s defaults.
"""
from __future__ import annotations

import onnx

PASS_THROUGH = {"Cast", "Reshape", "Unsqueeze", "Squeeze", "Flatten", "Identity", "Expand"}


def ranges(model: onnx.ModelProto) -> dict[str, tuple[int, int]]:
    rows = index_rows(model)
    initializers = {t.name for t in model.graph.initializer}
    return {i.name: (0, rows[i.name]) if i.name in rows else (0, 2) for i in model.graph.input
            if i.name not in initializers and (i.name in rows or "mask" in i.name.lower())}


def index_rows(model: onnx.ModelProto) -> dict[str, int]:
    """Input name -> the rows of the shortest table it indexes through a Gather, for the inputs that
    index one: Gather takes -rows .. rows - 1 (``qsynth run`` refuses other ids: TVM's Gather does not
    check its indices and reads out of bounds)."""
    shapes = _shapes(model)
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in model.graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    found = {}
    for graph_input in model.graph.input:
        rows = _gathered_rows(graph_input.name, consumers, shapes)
        if rows:
            found[graph_input.name] = min(rows)
    return found


def _gathered_rows(name: str, consumers: dict, shapes: dict) -> list[int]:
    """The lengths of the axes ``name`` indexes, following it through shape and type changes."""
    rows, seen, todo = [], set(), [name]
    while todo:
        value = todo.pop()
        if value in seen:
            continue
        seen.add(value)
        for node in consumers.get(value, []):
            if node.op_type in PASS_THROUGH and node.input[0] == value:
                todo.extend(node.output)
            elif node.op_type == "Gather" and len(node.input) > 1 and node.input[1] == value:
                axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
                shape = shapes.get(node.input[0])
                if shape and -len(shape) <= axis < len(shape) and shape[axis] > 0:
                    rows.append(shape[axis])
    return rows


def _shapes(model: onnx.ModelProto) -> dict[str, list[int]]:
    """Known static shapes: initializers', and what ONNX shape inference finds (a dequantized embedding
    table), unknown dimensions as 0."""
    shapes = {t.name: list(t.dims) for t in model.graph.initializer}
    try:
        inferred = onnx.shape_inference.infer_shapes(model).graph.value_info
    except (onnx.shape_inference.InferenceError, ValueError, RuntimeError):     # initializers only
        inferred = []
    for info in inferred:
        if info.type.HasField("tensor_type") and info.type.tensor_type.HasField("shape"):
            shapes.setdefault(info.name, [d.dim_value for d in info.type.tensor_type.shape.dim])
    return shapes
