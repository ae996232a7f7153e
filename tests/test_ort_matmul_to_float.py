"""A MatMul of a quantized activation by a constant quantized weight that no QuantizeLinear reads (issue 49:
the last projection or classifier of an NNCF model; quantize_static, in the settings tried, quantizes
every MatMul's output), on small graphs built in code, each compiled and compared with onnxruntime's exact
result (bench/models.reference_session) over standard-normal inputs.

onnxruntime's QDQ fusion makes it MatMulIntegerToFloat, ``float32(acc) * float32(sa * sb)`` per tensor or
per output column (activation_matmul.to_float), unless its MatMulAddFusion (graph level 1, first) takes the
MatMul into a float Gemm with the Add that alone reads it; an Add that fusion leaves (a residual of a
[B, M, K] input, a [1, 1, N] bias) is a float Add of MatMulIntegerToFloat's output. Where that Gemm's C is
DQ(int32), or an ONNX Gemm of DQ(x) and DQ(W) has no C, QGemm to float32 (activation_matmul.gemm_to_float).
The float Gemms themselves: C of each shape MatMulAddFusion takes, and one row."""
from __future__ import annotations

import platform

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.test_ort_quantizer_transformer import activation, differing, save_model

pytestmark = pytest.mark.skipif(platform.machine() != "x86_64", reason="onnxruntime's x86 fusions")

K, N = 512, 96


def weight(rng, per_channel: bool, dtype: str, k: int = K) -> tuple[list, list]:
    """(initializers, nodes) of ``DQ(W) -> w.dq``: W [k, N] of ``dtype`` (its zero point 0, or 128 for
    uint8), the scale per tensor or per output column (axis 1)."""
    zero = 128 if dtype == "uint8" else 0
    w = (rng.integers(-127, 128, (k, N)) + zero).astype(dtype)
    scale = (rng.uniform(0.5, 1.5, N if per_channel else ()) / 300).astype(np.float32)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(scale, "w.s"),
             numpy_helper.from_array(np.full(scale.shape, zero, dtype), "w.z")]
    return inits, [helper.make_node("DequantizeLinear", ["w", "w.s", "w.z"], ["w.dq"],
                                    **({"axis": 1} if per_channel else {}))]


def matmul_model(path, rows: tuple, per_channel=True, w_dtype="int8", x_dtype="int8", after=None, k=K) -> dict:
    """``DQ(Q(x)) @ DQ(W)``, x [*rows, k], then ``after``: None, "residual" (+ an input of the output's
    shape) or a bias shape (+ a constant); saved at ``path``; the inputs' shapes."""
    rng = np.random.default_rng(0)
    inits, nodes = activation("x", 0.02)
    if x_dtype == "uint8":
        inits[1] = numpy_helper.from_array(np.array(128, np.uint8), "x.z")
    more, w_nodes = weight(rng, per_channel, w_dtype, k)
    out = (*rows, N)
    nodes += w_nodes + [helper.make_node("MatMul", ["x.dq", "w.dq"], ["y" if after is None else "mm"], name="mm")]
    shapes = {"x": (*rows, k)}
    if after == "residual":
        shapes["r"] = out
        nodes.append(helper.make_node("Add", ["mm", "r"], ["y"], name="add"))
    elif after == "int32":               # DQ(int32 bias), its scale sx * sw
        more += int32_bias(rng, nodes, more)
        nodes.append(helper.make_node("Add", ["mm", "b"], ["y"], name="add"))
    elif after is not None:
        more.append(numpy_helper.from_array(rng.standard_normal(after).astype(np.float32), "b"))
        nodes.append(helper.make_node("Add", ["mm", "b"], ["y"], name="add"))
    save_model(path, nodes, [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in shapes.items()],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)], inits + more)
    return shapes


def int32_bias(rng, nodes: list, inits: list) -> list:
    """The initializers of ``DQ(int32 [N]) -> b`` (appended to ``nodes``), scaled by the x and W scales
    of ``inits`` as quantize_static writes a bias."""
    scales = {t.name: numpy_helper.to_array(t) for t in inits if t.name in ("w.s",)}
    scale = (np.float32(0.02) * np.broadcast_to(scales["w.s"], (N,))).astype(np.float32)
    nodes.append(helper.make_node("DequantizeLinear", ["b.q", "b.s", "b.z"], ["b"], axis=0))
    return [numpy_helper.from_array(rng.integers(-20000, 20000, N).astype(np.int32), "b.q"),
            numpy_helper.from_array(scale, "b.s"), numpy_helper.from_array(np.zeros(N, np.int32), "b.z")]


def gemm_model(path, rows: int, per_channel: bool, bias: bool) -> dict:
    """An ONNX Gemm ``DQ(Q(x)) . DQ(W)^T (+ DQ(int32 c))``, transB, as a quantizer writes a classifier
    (W [N, K], its scale per row: axis 0); saved at ``path``; the inputs' shapes."""
    rng = np.random.default_rng(1)
    inits, nodes = activation("x", 0.02)
    more = weight(rng, per_channel, "int8")[0]
    more[0] = numpy_helper.from_array(numpy_helper.to_array(more[0]).T.copy(), "w")
    nodes.append(helper.make_node("DequantizeLinear", ["w", "w.s", "w.z"], ["w.dq"], **({"axis": 0} if per_channel else {})))
    if bias:
        more += int32_bias(rng, nodes, more)
    nodes.append(helper.make_node("Gemm", ["x.dq", "w.dq", *(["b"] if bias else [])], ["y"], name="gemm", transB=1))
    save_model(path, nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, (rows, K))],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, (rows, N))], inits + more)
    return {"x": (rows, K)}


@pytest.mark.parametrize("rows, per_channel, w_dtype, x_dtype", [
    ((64,), True, "int8", "int8"),        # NNCF's int8 pair, which onnxruntime's x86 build turns uint8
    ((64,), False, "int8", "uint8"),
    ((64,), False, "uint8", "uint8"),     # U8U8
    ((2, 64), True, "int8", "int8"),      # a transformer's [B, M, K] rows
    ((1,), False, "int8", "int8"),        # one row
])
def test_matmul_to_float(tmp_path, rows, per_channel, w_dtype, x_dtype):
    """MatMulIntegerToFloat: the integer dense to float32 (output_stage.OutputStage.to_float). Before,
    qsynth computed the float matmul of the dequantized values: 16051 to 16058 of the 3 x 6144 outputs
    of the 64-row cases differed (by at most 8.1e-6), 32017 of 3 x 12288 of the [2, 64] one (1.0e-5),
    249 of the row's 3 x 96 (4.4e-6)."""
    shapes = matmul_model(tmp_path / "m.onnx", rows, per_channel, w_dtype, x_dtype)
    assert differing(tmp_path / "m.onnx", "y", shapes) == 0


@pytest.mark.parametrize("rows, after", [((2, 64), "residual"), ((2, 64), (1, 1, N))])
def test_add_left_after_matmul_to_float(tmp_path, rows, after):
    """An Add MatMulAddFusion leaves (its operand not [N] on [B, M, K] rows): MatMulIntegerToFloat, then
    the float Add. Before, 31001 (residual) and 30899 ([1, 1, N]) of 3 x 12288 outputs differed."""
    shapes = matmul_model(tmp_path / "m.onnx", rows, after=after)
    assert differing(tmp_path / "m.onnx", "y", shapes) == 0


@pytest.mark.parametrize("rows", [(64,), (2, 64)])
def test_bias_add_fused_into_float_gemm(tmp_path, rows):
    """A [N] bias Add after it: MatMulAddFusion's float Gemm (float_ops._gemm), which the matmul stays
    for (activation_matmul._gemm_fused): exact before this test too; MatMulIntegerToFloat there
    differs (15908 and 31702 outputs, checked with _gemm_fused made false)."""
    shapes = matmul_model(tmp_path / "m.onnx", rows, after=(N,))
    assert differing(tmp_path / "m.onnx", "y", shapes) == 0


@pytest.mark.parametrize("after", ["residual", (1, N), (64, 1)])
def test_float_gemm_broadcasts_c(tmp_path, after):
    """On 2-D rows MatMulAddFusion takes an Add of a [M, N] (here an input), [1, N] or [M, 1] operand
    too: a float Gemm that sums onto C broadcast to its output (float_ops.gemm_c_shapes), where qsynth
    took only a constant [N] and added the others after the float matmul: 8925, 8885 and 8955 of the
    3 x 6144 outputs differed (by at most 7.6e-6)."""
    shapes = matmul_model(tmp_path / "m.onnx", (64,), after=after)
    assert differing(tmp_path / "m.onnx", "y", shapes) == 0


@pytest.mark.parametrize("rows, k", [((1,), K), ((1, 1), 510), ((1,), 7)])
def test_float_gemm_of_one_row(tmp_path, rows, k):
    """One row and a [N] bias: MatMulAddFusion's Gemm over B not packed (a DequantizeLinear's output),
    which MlasGemm gives MlasSgemmKernelM1Avx: each group of four k's sum added onto C in turn, then a
    group of two and one of one (K = 510: a two; 7: a two and a one), float_gemv.row_times_func. qsynth
    added the bias after the float matmul: 248, 263 and 144 of the 3 x 96 outputs differed (by at most
    9.5e-6)."""
    shapes = matmul_model(tmp_path / "m.onnx", rows, after=(N,), k=k)
    assert differing(tmp_path / "m.onnx", "y", shapes) == 0


@pytest.mark.parametrize("rows, per_channel, bias", [(64, True, True), (64, False, False), (1, True, True)])
def test_gemm_to_float(tmp_path, rows, per_channel, bias):
    """An ONNX Gemm (transB) of DQ(x) and DQ(W), with or without a DQ(int32) C, read by no QuantizeLinear:
    GemmNodeGroupSelector's QGemm to float32, ``float32(acc + c) * float32(sx * sw)`` (c's integers,
    its scale unread): activation_matmul.gemm_to_float and, without C, to_float. qsynth computed the
    float Gemm of the dequantized values: 16020 (per column, C) and 16026 (per tensor, no C) of the
    3 x 6144 outputs of 64 rows differed (by at most 9.5e-6), 250 of the row's 3 x 96."""
    shapes = gemm_model(tmp_path / "g.onnx", rows, per_channel, bias)
    assert differing(tmp_path / "g.onnx", "y", shapes) == 0


def test_matmul_add_of_int32_bias_to_float(tmp_path):
    """A MatMul and an Add of DQ(int32 c) (2-D rows): MatMulAddFusion's Gemm of three DequantizeLinear
    outputs, then QGemm to float32 as above. Before: 16081 of 3 x 6144 outputs differed (8.1e-6)."""
    shapes = matmul_model(tmp_path / "m.onnx", (64,), after="int32")
    assert differing(tmp_path / "m.onnx", "y", shapes) == 0
