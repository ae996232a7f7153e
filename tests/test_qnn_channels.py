"""The channel gather (qnn/prim/gather.py, channels.py) and BatchNormalization tables (qnn/onnx/batch_norm.py):
runs against the maps they stand for, the scheduled gather against numpy, and small QDQ graphs
(concat -> BN, concat -> channel shuffle -> split) bit for bit against onnxruntime."""
from __future__ import annotations

import logging

import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper
from tvm import te, tirx

from isa_specs import host
from tvm_integration.bench import int8_models
from tvm_integration.bench.models import reference_session, random_inputs
from tvm_integration.qnn.onnx.importer import load
from tvm_integration.qnn.prim import gather
from tvm_integration.qnn.runtime.model import compile_model, lower

logging.getLogger("root").setLevel(logging.ERROR)      # quantize_static's pre-processing advice


def covered(runs: list[gather.Run], n: int) -> list[tuple[int, int, bool]]:
    """Output channel -> (source, channel, tabled) as the runs say; each channel written once."""
    result = [None] * n
    for r in runs:
        assert r.step > 0
        for i in range(r.count):
            c = r.start + r.step * i
            assert result[c] is None
            result[c] = (r.source, r.first + r.stride * i, r.tabled)
    return result


MAPS = {"concat": ([0] * 5 + [1] * 3, [0, 1, 2, 3, 4, 0, 1, 2], 2),
        "shuffle": ([0, 1] * 4, [0, 0, 1, 1, 2, 2, 3, 3], 2),
        "reversed": ([0] * 6, [5, 4, 3, 2, 1, 0], 1),
        "repeated": ([0] * 4, [2, 2, 2, 2], 1)}


@pytest.mark.parametrize("name", list(MAPS))
def test_runs_are_the_map(name):
    source, channel, runs_expected = MAPS[name]
    tabled = [0] * len(source)
    runs = gather.runs(source, channel, tabled)
    assert covered(runs, len(source)) == list(zip(source, channel, [0] * len(source)))
    assert len(runs) == runs_expected


def test_runs_split_where_tables_differ():
    source, channel, tabled = [0] * 6, list(range(6)), [0, 0, 1, 1, 0, 0]
    runs = gather.runs(source, channel, tabled)
    assert covered(runs, 6) == list(zip(source, channel, tabled))
    assert [(r.tabled, r.count) for r in runs] == [(0, 2), (0, 2), (1, 2)]


def scheduled_gather(shapes, dtypes, source, channel, tabled, layout, out_dtype):
    xs = [te.placeholder(s, d, f"x{i}") for i, (s, d) in enumerate(zip(shapes, dtypes))]
    table = [te.placeholder((len(source), 256), out_dtype, "table")] if any(tabled) else []
    y = gather.gather(*xs, *table, source=source, channel=channel, tabled=tabled, layout=layout)
    func = te.create_prim_func([*xs, *table, y]).with_attrs(
        {"qnn.op": "gather", "qnn.source": source, "qnn.channel": channel, "qnn.tabled": tabled, "qnn.layout": layout})
    func = gather.scheduled(func).with_attr("global_symbol", "main")
    return tvm.compile(tvm.IRModule({"main": func}), target=tvm.target.Target(host.tvm_target()))


@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
def test_scheduled_gather_as_numpy(layout):
    """Three inputs (uint8, int8, uint8) in any order, strided and reversed, some channels tabled."""
    rng = np.random.default_rng(1)
    widths, dtypes = [5, 7, 3], ["uint8", "int8", "uint8"]
    shapes = [(1, 6, 9, c) if layout == "NHWC" else (1, c, 6, 9) for c in widths]
    pairs = [(i, k) for i, c in enumerate(widths) for k in range(c)]
    pairs = [pairs[j] for j in rng.permutation(len(pairs))[:12]] + [(0, 4), (0, 2), (0, 0)]
    source, channel = [p[0] for p in pairs], [p[1] for p in pairs]
    tabled = [int(dtypes[s] == "int8" or c % 3 == 0) for c, s in enumerate(source)]
    lib = scheduled_gather(shapes, dtypes, source, channel, tabled, layout, "uint8")
    xs = [rng.integers(np.iinfo(d).min, np.iinfo(d).max + 1, s).astype(d) for s, d in zip(shapes, dtypes)]
    table = rng.integers(0, 256, (len(source), 256)).astype("uint8")
    axis = 3 if layout == "NHWC" else 1
    planes = []
    for c, (s, k, t) in enumerate(zip(source, channel, tabled)):
        plane = np.take(xs[s], k, axis=axis)
        planes.append(table[c][plane.astype(np.int64) + gather.OFFSETS[dtypes[s]]] if t else plane)
    expected = np.stack(planes, axis=axis).astype("uint8")
    out = tvm.runtime.empty(expected.shape, "uint8")
    lib["main"](*[tvm.runtime.tensor(x) for x in xs], tvm.runtime.tensor(table), out)
    np.testing.assert_array_equal(out.numpy(), expected)


def qdq_model(nodes, inits, inputs, output, shape, path):
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info(output, inputs[0].type.tensor_type.elem_type,
                                                                                 shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = int8_models.IR_VERSION
    onnx.save(model, str(path))
    return path


def op_kinds(path) -> list[str]:
    return sorted(str(f.attrs["qnn.op"]) for f in lower(load(path)).functions.values()
                  if isinstance(f, tirx.PrimFunc) and f.attrs and "qnn.op" in f.attrs)


@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_batch_norm_between_dq_and_q_is_exact_for_every_value(tmp_path, dtype, relu):
    """Q([Relu](BatchNormalization(DQ(x)))) of random statistics: one table per channel, every one of
    the 256 values of each of 16 channels as onnxruntime's float kernel computes it."""
    rng = np.random.default_rng(7)
    c = 16
    elem = {np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8}[dtype]
    lo = np.iinfo(dtype).min
    stats = [1 + 0.3 * rng.standard_normal(c), 0.5 * rng.standard_normal(c), 0.4 * rng.standard_normal(c),
             0.5 + rng.random(c)]
    inits = [numpy_helper.from_array(np.asarray(v, np.float32), n) for v, n in zip(stats, ("g", "b", "m", "v"))]
    inits += [numpy_helper.from_array(np.array(v), n) for v, n in
              ((np.float32(0.0213), "xs"), (dtype(lo + 131), "xz"), (np.float32(0.0179), "ys"), (dtype(lo + 100), "yz"))]
    nodes = [helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["d"]),
             helper.make_node("BatchNormalization", ["d", "g", "b", "m", "v"], ["n"], epsilon=1e-3)]
    nodes += [helper.make_node("Relu", ["n"], ["r"])] if relu else []
    nodes += [helper.make_node("QuantizeLinear", ["r" if relu else "n", "ys", "yz"], ["y"])]
    path = qdq_model(nodes, inits, [helper.make_tensor_value_info("x", elem, [1, c, 16, 16])], "y", [1, c, 16, 16],
                     tmp_path / "bn.onnx")
    assert op_kinds(path) == ["gather"]
    x = np.stack([rng.permutation(256) for _ in range(c)]).reshape(1, c, 16, 16) + lo
    x = x.astype(dtype)
    expected = reference_session(path).run(None, {"x": x})[0]
    np.testing.assert_array_equal(compile_model(path, threads=1)({"x": x})["y"], expected)


class Graph(int8_models._Graph):
    def batch_norm_relu(self, x: str, c: int) -> str:
        r = self.rng
        stats = [1 + 0.2 * r.standard_normal(c), 0.2 * r.standard_normal(c), 0.2 * r.standard_normal(c), 1 + r.random(c)]
        return self.node("Relu", [self.node("BatchNormalization", [x, *[self.const(s, "bn") for s in stats]])])

    def shape(self, values) -> str:
        name = self.name("shape")
        self.inits.append(numpy_helper.from_array(np.asarray(values, np.int64), name))
        return name


def dense_block(layers: int = 3) -> onnx.ModelProto:
    """DenseNet's dense layers: BN-ReLU-conv on the concatenation of everything before."""
    g = Graph(11)
    x, c = g.conv("input", 3, 8, 3, stride=2), 8
    for _ in range(layers):
        y = g.conv(g.batch_norm_relu(x, c), c, 4, 3, act=None)
        x, c = g.node("Concat", [x, y], axis=1), c + 4
    return g.model([1, 3, 16, 16], g.conv(g.batch_norm_relu(x, c), c, 6, 1, act=None), [1, 6, 8, 8], "dense_block")


def shuffle_units(units: int = 3) -> onnx.ModelProto:
    """ShuffleNetV2's units: split the channels, convolve one half, concatenate, shuffle."""
    g = Graph(12)
    x, c = g.conv("input", 3, 16, 3, stride=2), 16
    for _ in range(units):
        a, b = g.name("half"), g.name("half")
        g.nodes.append(helper.make_node("Split", [x, g.shape([c // 2, c // 2])], [a, b], axis=1))
        b = g.conv(g.conv(b, c // 2, c // 2, 1), c // 2, c // 2, 3, groups=c // 2, act=None)
        x = g.node("Transpose", [g.node("Reshape", [g.node("Concat", [a, b], axis=1), g.shape([1, 2, c // 2, 8, 8])])],
                   perm=[0, 2, 1, 3, 4])
        x = g.node("Reshape", [x, g.shape([1, c, 8, 8])])
    return g.model([1, 3, 16, 16], g.conv(x, c, 6, 1, act=None), [1, 6, 8, 8], "shuffle_units")


@pytest.mark.parametrize("build,gathers", [(dense_block, 4), (shuffle_units, 4)], ids=["dense_block", "shuffle"])
def test_channel_chains_are_one_gather_each_and_exact(tmp_path, build, gathers):
    """Every concatenation, requantization, BatchNormalization, split and shuffle between the
    convolutions is folded: one gather per tensor a convolution reads (dense block: each layer's and
    the last BN's; shuffle: each unit's convolved half and the output), nothing else but the
    convolutions, a requantization of a branch into the concatenation's scale (a lookup: folding it
    into a copy would make it a table read per byte) and the model's edges; bit-exact with onnxruntime."""
    path = int8_models.quantize(build(), tmp_path / "m.onnx")
    kinds = op_kinds(path)
    assert kinds.count("gather") == gathers
    assert set(kinds) <= {"gather", "conv2d", "lookup", "quantize", "dequantize"}, kinds
    model = compile_model(path, threads=1)
    session = reference_session(path)
    rng = np.random.default_rng(0)
    for _ in range(3):
        feeds = random_inputs(model.inputs, rng)
        np.testing.assert_array_equal(model(feeds)[model.outputs[0]], session.run(None, feeds)[0])
