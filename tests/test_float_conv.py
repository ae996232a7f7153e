"""The float Conv onnxruntime's x86 build leaves between a DequantizeLinear and a QuantizeLinear
(tvm_integration/qnn/float/float_conv.py) against onnxruntime's own Conv, bit for bit: the filters as
a graph input, as a DequantizeLinear's output reaches it (a constant initializer would be rewritten to
MLAS's NCHWc kernel, which sums in another order), one thread."""
from __future__ import annotations

import numpy as np
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper

from tvm_integration.bench.models import onnxruntime_session
from tvm_integration.qnn.float import float_conv
from tvm_integration.qnn.float.float_matmul import stride_k
from tvm_integration.qnn.lower.bind import model_target


def onnxruntime_conv(x: np.ndarray, w: np.ndarray, strides, pads, dequantize=None) -> np.ndarray:
    """onnxruntime's Conv of ``x`` (``dequantize``: (scale, zero point) of a DequantizeLinear before it)."""
    nodes = [helper.make_node("Conv", ["xd" if dequantize else "x", "w"], ["y"], strides=list(strides), pads=list(pads))]
    inits = []
    if dequantize:
        nodes.insert(0, helper.make_node("DequantizeLinear", ["x", "s", "z"], ["xd"]))
        inits = [numpy_helper.from_array(np.array(dequantize[0], np.float32), "s"),
                 numpy_helper.from_array(np.array(dequantize[1], x.dtype), "z")]
    kind = helper.np_dtype_to_tensor_dtype(x.dtype)
    graph = helper.make_graph(nodes, "conv", [helper.make_tensor_value_info("x", kind, x.shape),
                                              helper.make_tensor_value_info("w", TensorProto.FLOAT, w.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return onnxruntime_session(model.SerializeToString(), 1).run(None, {"x": x, "w": w})[0]


def ours(x: np.ndarray, w: np.ndarray, strides, pads, dequantize=None) -> np.ndarray:
    func = float_conv.conv2d_func(x.shape, w.shape, strides, pads, dequantize and (*dequantize, str(x.dtype)))
    lib = tvm.compile(tvm.IRModule({"main": func}), target=tvm.target.Target(model_target()))
    (pt, pl, pb, pr), (sh, sw) = pads, strides
    out = np.zeros((x.shape[0], w.shape[0], (x.shape[2] + pt + pb - w.shape[2]) // sh + 1,
                    (x.shape[3] + pl + pr - w.shape[3]) // sw + 1), np.float32)
    args = [tvm.runtime.tensor(a) for a in (x, w, out)]
    lib["main"](*args)
    return args[2].numpy()


# (image [N, C, H, W], filters [M, C, kh, kw], strides, pads (top, left, bottom, right)): what each shows
CASES = {
    "k_blocks_tail": ((1, 32, 12, 12), (16, 32, 3, 3), (1, 1), (1, 1, 1, 1)),     # K 288: 128, 128 and a tail of 32
    "k_whole_blocks": ((1, 64, 10, 10), (8, 64, 2, 2), (1, 1), (0, 0, 0, 0)),     # K 256 in two blocks (N 81)
    "k_block_halved": ((1, 3, 20, 20), (8, 3, 3, 3), (1, 1), (1, 1, 1, 1)),       # K 27: MLAS's block of 32
    "k_block_doubled": ((1, 128, 4, 4), (12, 128, 3, 3), (1, 1), (1, 1, 1, 1)),   # N 16 < K 1152: one block of 1024, a tail
    "ragged_tiles": ((1, 24, 7, 7), (9, 24, 3, 3), (1, 1), (1, 1, 1, 1)),         # 9 rows (1.5 tiles), 49 columns (3 panels + 8)
    "narrow_panel_tail": ((1, 64, 7, 7), (8, 64, 3, 3), (1, 1), (1, 1, 1, 1)),    # 49 columns (3 panels + 8), K 576: 256 + 256 + 64
    "stride_2": ((1, 40, 15, 15), (20, 40, 3, 3), (2, 2), (1, 1, 1, 1)),          # K 360, 8 x 8 columns
    "pointwise_stride_2": ((1, 64, 14, 14), (32, 64, 1, 1), (2, 2), (0, 0, 0, 0)),
    "padding_uneven": ((1, 16, 9, 11), (10, 16, 3, 5), (1, 2), (0, 2, 1, 1)),
    "rows_skipped": ((1, 8, 13, 10), (6, 8, 1, 3), (3, 1), (0, 1, 1, 1)),        # kh 1 < sh 3: one row phase of 3
    "stem_like": ((1, 3, 23, 21), (8, 3, 7, 7), (2, 2), (3, 3, 3, 3)),           # 7x7 stride 2: two phases each way
    "batch": ((3, 20, 8, 8), (8, 20, 3, 3), (1, 1), (1, 1, 1, 1)),
}


@pytest.mark.parametrize("name", CASES)
def test_float_conv_equals_onnxruntime(name):
    """Every output equal to onnxruntime's float Conv (MLAS: im2col and sgemm, each output one FMA
    chain over its K block, the blocks added in turn)."""
    x_shape, w_shape, strides, pads = CASES[name]
    rng = np.random.default_rng(len(name))
    x = rng.uniform(-4, 4, x_shape).astype(np.float32)
    w = (rng.standard_normal(w_shape) * 0.1).astype(np.float32)
    expected = onnxruntime_conv(x, w, strides, pads)
    np.testing.assert_array_equal(ours(x, w, strides, pads), expected)


@pytest.mark.parametrize("dtype, zero_point", [(np.int8, -3), (np.uint8, 131)])
def test_dequantized_input(dtype, zero_point):
    """The integers of a DequantizeLinear read by the conv, dequantized as it pads them (the rewrite's
    float conv of DQ(x)): equal to onnxruntime's DequantizeLinear then Conv."""
    x_shape, w_shape, strides, pads = CASES["k_blocks_tail"]
    rng = np.random.default_rng(1)
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max + 1, x_shape).astype(dtype)
    w = (rng.standard_normal(w_shape) * 0.1).astype(np.float32)
    dequantize = (0.0371, zero_point)
    expected = onnxruntime_conv(x, w, strides, pads, dequantize)
    np.testing.assert_array_equal(ours(x, w, strides, pads, dequantize), expected)


def test_the_order_shows():
    """The comparison above tells orders of sums apart: on a case across K blocks onnxruntime's
    outputs differ from the exactly rounded sums (float64, then float32) in most places."""
    x_shape, w_shape, strides, pads = CASES["k_blocks_tail"]
    rng = np.random.default_rng(len("k_blocks_tail"))
    x = rng.uniform(-4, 4, x_shape).astype(np.float32)
    w = (rng.standard_normal(w_shape) * 0.1).astype(np.float32)
    expected = onnxruntime_conv(x, w, strides, pads)
    exact = _float64_conv(x, w, pads)
    assert np.count_nonzero(exact.astype(np.float32) != expected) > 100
    k = w_shape[1] * w_shape[2] * w_shape[3]
    assert stride_k(k, x_shape[2] * x_shape[3]) < k


def _float64_conv(x, w, pads):
    pt, pl, pb, pr = pads
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    kh, kw = w.shape[2:]
    oh, ow = xp.shape[2] - kh + 1, xp.shape[3] - kw + 1
    windows = np.stack([xp[:, :, i:i + oh, j:j + ow] for i in range(kh) for j in range(kw)], axis=2)
    return np.einsum("bckyx,mck->bmyx", windows, w.astype(np.float64).reshape(*w.shape[:2], -1))
