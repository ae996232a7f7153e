"""Tanh, ReduceMean and GlobalAveragePool as onnxruntime's CPU kernels compute them (issues 31/32: BERT's
pooler ends in Tanh, SqueezeNet's head in ReduceMean, both after the last DequantizeLinear), bit for
bit against onnxruntime: MLAS's rational tanh (mlas_math.tanh), Eigen's vectorized sum of each plane
(reduce_mean.mean_func) and MLAS's global pooling kernel (reduce_mean.global_pool_func)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

pytestmark = pytest.mark.filterwarnings("ignore:.*has no quantized op")

import tvm  # noqa: E402
from tvm import relax  # noqa: E402

from test_float_ops import assert_exact, float_model, functions  # noqa: E402
from tvm_integration.qnn.onnx.importer import load  # noqa: E402
from tvm_integration.qnn.runtime.model import lower  # noqa: E402


def test_tanh_exact_everywhere(tmp_path):
    """A dense sweep of [-10, 10] (past the clamp at 9), 2^(-k/4) toward 0 down to subnormals, the
    clamp edges and their neighbours, infinities, NaN and random values."""
    edges = np.array([9.0, -9.0, np.inf, -np.inf, np.nan, 0.0, -0.0, 1e-38, -1e-45, 3.4e38], np.float32)
    edges = np.concatenate([edges, np.nextafter(edges[:2], np.float32(0)), np.nextafter(edges[:2], edges[2:4])])
    tiny = np.float32(2.0) ** -np.arange(0, 149, 0.25, dtype=np.float32)
    x = np.concatenate([np.linspace(-10, 10, 60001, dtype=np.float32), tiny, -tiny, edges,
                        np.random.default_rng(6).standard_normal(4000).astype(np.float32) * 3])
    x = x.reshape(1, -1)
    path = float_model(tmp_path / "tanh.onnx", [helper.make_node("Tanh", ["x"], ["y"])], [("x", x.shape)])
    assert_exact(path, {"x": x})
    assert "qsynth_tanh" in functions(path)


def dequantized_mean_model(path, shape, axes, keepdims, op="ReduceMean", quantized_out=False, quantized_in=False):
    """SqueezeNet's head: a uint8 tensor dequantized, then a float ReduceMean (onnxruntime allocates the
    dequantized tensor, so its planes sit where Eigen's alignment says), or ``op`` GlobalAveragePool;
    ``quantized_out``: the mean quantized again (QDQ), as the tensor after it; ``quantized_in``: a float
    input quantized first (an image the pipeline then holds NHWC: a squeeze-and-excitation's pooling)."""
    out_shape = [1 if a in axes else d for a, d in enumerate(shape)] if keepdims else \
        [d for a, d in enumerate(shape) if a not in axes]
    attrs = dict(axes=list(axes), keepdims=keepdims) if op == "ReduceMean" else {}
    nodes = [helper.make_node("QuantizeLinear", ["x", "scale", "zero"], ["xq"])] if quantized_in else []
    nodes += [helper.make_node("DequantizeLinear", ["xq" if quantized_in else "x", "scale", "zero"], ["f"]),
              helper.make_node(op, ["f"], ["m" if quantized_out else "y"], **attrs)]
    if quantized_out:
        nodes += [helper.make_node("QuantizeLinear", ["m", "out_scale", "zero"], ["q"]),
                  helper.make_node("DequantizeLinear", ["q", "out_scale", "zero"], ["y"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT if quantized_in else TensorProto.UINT8, shape)
    graph = helper.make_graph(nodes, "m", [x],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
                              [numpy_helper.from_array(np.array(0.0371, np.float32), "scale"),
                               numpy_helper.from_array(np.array(117, np.uint8), "zero"),
                               numpy_helper.from_array(np.array(0.0097, np.float32), "out_scale")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


@pytest.mark.parametrize("shape,axes,keepdims", [((1, 10, 13, 13), (2, 3), 1), ((1, 7, 7, 7), (2, 3), 1),
                                                 ((1, 5, 6, 6), (2, 3), 1), ((1, 9, 1, 5), (2, 3), 1),
                                                 ((2, 6, 5, 3), (2, 3), 0), ((1, 4, 32, 32), (2, 3), 1),
                                                 ((3, 11), (1,), 1), ((3, 11), (0, 1), 0)],
                         ids=["13x13", "7x7", "6x6", "1x5", "batch_2", "32x32", "rows", "scalar"])
def test_reduce_mean_exact(tmp_path, shape, axes, keepdims):
    """Eigen's sum of each plane from its first 16-byte-aligned element (a plane of N elements at
    offset c * N: its head and tail vary with c), two 4-lane accumulators, then / N. Planes of 169, 49, 36,
    5, 15 and 1024 elements, rows of 11, and the whole tensor to a scalar."""
    x = np.random.default_rng(7).integers(0, 256, shape, dtype=np.uint8)
    path = dequantized_mean_model(tmp_path / "mean.onnx", shape, axes, keepdims)
    assert_exact(path, {"x": x})
    assert "qsynth_mean" in functions(path)


@pytest.mark.parametrize("shape", [(1, 10, 13, 13), (1, 7, 7, 7), (2, 6, 5, 3), (1, 4, 32, 32), (1, 3, 1, 1),
                                   (1, 5, 1, 3)], ids=["13x13", "7x7", "batch_2", "32x32", "1x1", "1x3"])
def test_global_average_pool_exact(tmp_path, shape):
    """A float GlobalAveragePool after the last DequantizeLinear: MLAS's global pooling kernel, one
    4-lane sum from each plane's first element, the tail after; planes of 169, 49, 15, 1024, 1 and 3
    elements (none, or only the tail, in the vector loop)."""
    x = np.random.default_rng(8).integers(0, 256, shape, dtype=np.uint8)
    path = dequantized_mean_model(tmp_path / "gap.onnx", shape, (2, 3), 1, op="GlobalAveragePool")
    assert_exact(path, {"x": x})
    assert "qsynth_global_pool" in functions(path)


def test_a_quantized_reduce_mean_stays_a_float_mean_between_dq_and_q(tmp_path):
    """onnxruntime fuses DQ -> GlobalAveragePool -> Q into QLinearGlobalAveragePool, but not DQ ->
    ReduceMean over H and W -> Q, which the frontend makes the same mean: the ReduceMean stays a float
    mean (Eigen's sum) then quantized, the pool an integer op."""
    x = np.random.default_rng(9).integers(0, 256, (1, 16, 7, 7), dtype=np.uint8)
    mean = dequantized_mean_model(tmp_path / "mean.onnx", x.shape, (2, 3), 1, quantized_out=True)
    assert_exact(mean, {"x": x})
    assert "qsynth_mean" in functions(mean)
    pool = dequantized_mean_model(tmp_path / "pool.onnx", x.shape, (2, 3), 1, op="GlobalAveragePool",
                                  quantized_out=True)
    assert_exact(pool, {"x": x})
    assert "qsynth_global_pool" not in functions(pool)


@pytest.mark.parametrize("shape", [(1, 32, 13, 13), (1, 104, 7, 7), (2, 20, 6, 6), (1, 3, 9, 9)],
                         ids=["16_lanes", "8_lanes_odd_planes", "4_lanes_batch_2", "scalar"])
def test_a_mean_over_an_image_held_nhwc_reads_it_in_place(tmp_path, shape):
    """The image is NHWC in the pipeline: dequantized and averaged there (reduce_mean.mean_func's NHWC
    form, channels across the vector lanes), never transposed, in Eigen's order per plane as before:
    planes of 169, 49 (heads and tails that vary with the channel), 36 and 81 elements, 32, 104, 20
    and 3 channels."""
    x = (np.random.default_rng(10).random(shape, dtype=np.float32) * 9).astype(np.float32)
    path = dequantized_mean_model(tmp_path / "se.onnx", shape, (2, 3), 1, quantized_out=True, quantized_in=True)
    assert_exact(path, {"x": x})
    main = lower(load(path, allow_float=True))["main"]
    called = {b.value.args[0].name_hint: [int(d) for d in b.var.ty.shape] for b in main.body.blocks[0].bindings
              if isinstance(b.value, relax.Call) and isinstance(b.value.args[0], tvm.ir.GlobalVar)}
    assert any(name.startswith("qsynth_mean") for name in called), called
    # what is transposed is the [b, c] means alone, not the image
    assert all(np.prod(out) == shape[0] * shape[1] for name, out in called.items() if name.startswith("transpose")), called
