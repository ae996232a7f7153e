"""The float MatMul/Gemm by constant weights on a packed B (tvm_integration/qnn/float/float_gemm.py)
against onnxruntime's own Gemm and MatMul, bit for bit, one thread: B a graph input (an activation to
onnxruntime, as a DequantizeLinear's output reaches it: stride_k's K blocks) or an initializer (packed
by onnxruntime: PACKED_STRIDE_K); and a DQ(int8 weights) MatMul + Add through the whole pipeline,
its weights dequantized and packed at compile time."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper

from tvm_integration import compile_model
from tvm_integration.bench.models import onnxruntime_session, reference_session
from tvm_integration.qnn.float import float_gemm
from tvm_integration.qnn.float.float_matmul import PACKED_STRIDE_K, stride_k
from tvm_integration.qnn.lower.bind import model_target
from tvm_integration.qnn.onnx.importer import load
from tvm_integration.qnn.runtime.model import lower

# name: (rows, K, N, C's shape or None (a MatMul), B an initializer)
CASES = {"blocks_onto_bias": (16, 768, 64, (64,), False),         # stride_k 256: three blocks
         "wide_n_bias_per_output": (8, 256, 384, (8, 384), False),  # 128: two blocks
         "odd_rows_and_columns": (10, 512, 40, (10, 1), False),     # rows and columns padded to whole tiles
         "one_block": (6, 96, 32, (1, 32), False),
         "packed_by_onnxruntime": (12, 768, 48, (48,), True),       # PACKED_STRIDE_K: three blocks
         "matmul": (8, 512, 64, None, False)}


def model(nodes, inputs, inits=(), opset=17, out_shape=None) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)], list(inits))
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def onnxruntime_gemm(a, b, c, initializer: bool) -> np.ndarray:
    """onnxruntime's Gemm of ``a``, ``b`` and ``c`` (None: its MatMul), ``b`` an initializer or an input."""
    names = ["a", "b"] + ([] if c is None else ["c"])
    node = helper.make_node("MatMul" if c is None else "Gemm", names, ["y"])
    values = dict(zip(names, (a, b, c)))
    inits = [numpy_helper.from_array(b, "b")] if initializer else []
    feeds = {n: v for n, v in values.items() if not (initializer and n == "b")}
    m = model([node], [(n, v.shape) for n, v in feeds.items()], inits)
    return onnxruntime_session(m.SerializeToString(), 1).run(None, feeds)[0]


def ours(a, b, c, stride: int) -> np.ndarray:
    func = float_gemm.gemm_func(a.shape[0], a.shape[1], b.shape[1], stride, None if c is None else c.shape)
    lib = tvm.compile(tvm.IRModule({"main": func}), target=tvm.target.Target(model_target()))
    out = tvm.runtime.tensor(np.zeros((a.shape[0], b.shape[1]), np.float32))
    lib["main"](*(tvm.runtime.tensor(x) for x in (a, float_gemm.pack(b), *([] if c is None else [c]))), out)
    return out.numpy()


@pytest.mark.parametrize("case", CASES)
def test_gemm_exact(case):
    """Each output one FMA chain per K block, the blocks' sums added in turn onto C: the result of
    onnxruntime's Gemm (MatMul) bit for bit. Over more than one block, K summed in one, or C added
    last, gives another result on these inputs (so the test sees a change of order)."""
    rows, k, n, c_shape, initializer = CASES[case]
    rng = np.random.default_rng(sum(map(ord, case)))
    a = rng.standard_normal((rows, k)).astype(np.float32)
    b = (rng.standard_normal((k, n)) / 30).astype(np.float32)
    c = None if c_shape is None else rng.standard_normal(c_shape).astype(np.float32)
    stride = PACKED_STRIDE_K if initializer else stride_k(k, n)
    assert float_gemm.fits(k, stride)
    expected = onnxruntime_gemm(a, b, c, initializer)
    np.testing.assert_array_equal(ours(a, b, c, stride), expected)
    if k > stride:
        assert not np.array_equal(ours(a, b, c, k), expected)
        if c is not None:
            assert not np.array_equal(ours(a, b, None, stride) + c, expected)


def test_pack():
    b = np.arange(3 * 20, dtype=np.float32).reshape(3, 20)
    packed = float_gemm.pack(b)
    assert packed.shape == (2, 3, float_gemm.COLUMNS)
    np.testing.assert_array_equal(packed[1, :, :4], b[:, 16:])
    assert not packed[1, :, 4:].any()


def test_dequantized_weights_packed_at_compile_time(tmp_path):
    """NNCF's float projection, ``DQ(x) @ DQ(W) + bias`` (int8 weights per output channel, zero points
    not zero): onnxruntime's MatMulAddFusion Gemm over the dequantized B (an activation to it: stride_k's
    blocks), computed by float_gemm over B dequantized once; no dequantize of the weights runs with the
    model. (Without the activation's Q/DQ pair onnxruntime makes ``x @ DQ(W)`` a MatMulNBits.)"""
    rng = np.random.default_rng(5)
    rows, k, n = 20, 768, 96
    inits = [numpy_helper.from_array(np.array(0.03, np.float32), "xs"), numpy_helper.from_array(np.array(0, np.int8), "xz"),
             numpy_helper.from_array(rng.integers(-127, 128, (k, n)).astype(np.int8), "w"),
             numpy_helper.from_array((rng.uniform(0.5, 1.5, n) / 400).astype(np.float32), "ws"),
             numpy_helper.from_array(rng.integers(-3, 4, n).astype(np.int8), "wz"),
             numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), "bias")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xz"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wd"], axis=1),
             helper.make_node("MatMul", ["xd", "wd"], ["mm"]), helper.make_node("Add", ["mm", "bias"], ["y"])]
    path = tmp_path / "projection.onnx"
    onnx.save(model(nodes, [("x", (1, rows, k))], inits, 13, (1, rows, n)), str(path))
    compiled = compile_model(path, threads=1, allow_float=True)
    for seed in range(2):
        feed = {"x": np.random.default_rng(seed).standard_normal((1, rows, k)).astype(np.float32)}
        np.testing.assert_array_equal(compiled(feed)["y"], reference_session(path).run(None, feed)[0])
    names = {g.name_hint.rstrip("0123456789") for g in lower(load(path, allow_float=True)).functions}
    assert "qsynth_float_gemm" in names and "dequantize" not in names, names
