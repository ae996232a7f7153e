"""Low-bit ONNX models (issue 16 part 1) on the bitserial operators: ONNX's INT4/UINT4/INT2/UINT2
QDQ, Brevitas-style QCDQ and QONNX Quant/BipolarQuant, each compiled once (module-scoped) and
compared bit for bit with onnxruntime (QDQ, QCDQ), QONNX's executor (QONNX) and the numpy integer
network of the same spec (tests/helpers_lowbit.py: powers-of-two scales, so every float step the
references take is exact and exact equality is the right assertion).

onnxruntime runs the QDQ models with basic graph optimizations: its extended level moves
DequantizeLinear past MaxPool/Flatten and then has no uint2/uint4 kernel for them (INVALID_GRAPH).
"""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from helpers_lowbit import conv, conv_int, dense, float_dense, make, reference
from tvm_integration.qnn.lower import bitserial_layer
from tvm_integration.qnn.onnx import lowbit
from tvm_integration.qnn.semantics.errors import ModelError
from tvm_integration.qnn.semantics.integer_op import IntegerOp

SHAPE = (1, 3, 8, 8)


SPECS = {
    # int8 stem; A2W2 signed weights scaled per channel (unipolar + the T channel); A2W1 bipolar
    # (hybrid) on int2 activations (the codes pass); an int4 dense on the int8 operators; a float last layer (a float matmul)
    "qdq": ([conv(8, wbits=8, bits=2), conv(8, wbits=2, bits=2, signed=True, relu=False, per_channel=True),
             conv(8, bipolar=True, wbits=1, bits=2, zp=1), dict(op="maxpool"), dict(op="flatten"),
             dense(16, wbits=4, bits=2), float_dense(4)],
            [("conv0", "A8W8 int8", "int8"), ("conv1", "A2W2 unipolar", "bitserial"),
             ("conv2", "A2W1 hybrid (bipolar)", "bitserial"), ("dense5", "A2W4 int8", "int8"),
             ("float_dense6", "None", "float")]),
    # 3-bit: unsigned weights scaled per channel on a zero point of 1 (fused output stage, padding
    # code 1), A3W3 dense
    "qcdq": ([conv(8, wbits=8, bits=3, zp=1),
              conv(8, wbits=3, wsigned=False, bits=3, signed=True, per_channel=True), dict(op="flatten"),
              dense(16, wbits=3, bits=4), float_dense(4)],
             [("conv0", "A8W8 int8", "int8"), ("conv1", "A3W3 unipolar", "bitserial"),
              ("dense3", "A3W3 unipolar", "bitserial"), ("float_dense4", "None", "float")]),
    # Quant and BipolarQuant: A2W1 bipolar and a dense A4W2 scaled per channel (so their 32-bit bias
    # Quants too), a 1x1 A2W4 on the int8 operators
    "qonnx": ([conv(8, wbits=8, bits=2), conv(8, bipolar=True, wbits=1, bits=2, per_channel=True),
               conv(8, k=1, pad=0, wbits=4, bits=4), dict(op="flatten"), dense(16, wbits=2, bits=2, per_channel=True),
               float_dense(4)],
              [("conv0", "A8W8 int8", "int8"), ("conv1", "A2W1 hybrid (bipolar)", "bitserial"),
               ("conv2", "A2W4 int8", "int8"), ("dense4", "A4W2 int8", "int8"), ("float_dense5", "None", "float")]),
}


def executor(form: str, model: onnx.ModelProto, path):
    if form == "qonnx":
        pytest.importorskip("qonnx", reason="qonnx is not installed (pip install -e '.[test]')", exc_type=ModuleNotFoundError)
        from qonnx.core.modelwrapper import ModelWrapper
        from qonnx.core.onnx_exec import execute_onnx
        from qonnx.transformation.infer_shapes import InferShapes
        wrapper = ModelWrapper(model).transform(InferShapes())
        return lambda x: execute_onnx(wrapper, {"x": x})[model.graph.output[0].name]
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    session = ort.InferenceSession(str(path), options)
    return lambda x: session.run(None, {"x": x})[0]


@pytest.fixture(scope="module", params=["qdq", "qcdq", "qonnx"])
def compiled(request, tmp_path_factory):
    from tvm_integration.qnn.runtime.model import compile_model
    form = request.param
    model, layers = make(SPECS[form][0], SHAPE, form)
    path = tmp_path_factory.mktemp(form) / f"{form}.onnx"
    onnx.save(model, path)
    return form, path, model, layers, compile_model(path, threads=1, lowbit="bitserial"), executor(form, model, path)


def test_equal_to_reference_executor_and_numpy(compiled):
    form, _, model, layers, ours, theirs = compiled
    rng = np.random.default_rng(7)
    for _ in range(3):
        x = (rng.standard_normal(SHAPE) * 2).astype(np.float32)
        got = ours({"x": x})[model.graph.output[0].name]
        np.testing.assert_array_equal(got, theirs(x))
        np.testing.assert_array_equal(got, reference(layers, x))


def test_layers_take_the_operators_their_precision_says(compiled):
    from tvm_integration.qnn.onnx.importer import load
    from tvm_integration.qnn.runtime.report import layers
    form, path, *_ = compiled
    rows = layers(load(path), lowbit="bitserial")
    assert [(r.layer, str(r.precision), r.operator) for r in rows] == SPECS[form][1]
    prefix = {"bitserial": "bitserial_", "int8": "int8_", "float": "qsynth_float_matmul"}
    assert all(r.kernel.startswith(prefix[r.operator]) for r in rows), rows


# -- the decomposition bitserial_layer.py lowers a layer with, checked in numpy -----------------------
CASES = [  # (x range, zx, w range, zw, weights odd only, padding)
    ((0, 3), 0, (-2, 1), 0, False, 1),       # unsigned activations, signed weights: the T channel
    ((-2, 1), 0, (-2, 1), 0, False, 1),      # signed activations: codes x + 2, padding code 2
    ((0, 3), 1, (0, 3), 0, False, 1),        # unsigned weights (d = 0), zero point 1: padding code 1
    ((-4, 3), -1, (-1, 1), 0, True, 1),      # bipolar weights: hybrid
    ((0, 7), 2, (-3, 3), 0, True, 0),        # odd weights, no padding
    ((0, 1), 0, (1, 3), 2, False, 2),        # a weight zero point of 2, d = -1
]


@pytest.mark.parametrize("x_range,zx,w_range,zw,odd,pad", CASES)
def test_bitserial_decomposition_is_exact(x_range, zx, w_range, zw, odd, pad):
    """S + d T + bias' (what the operator and the requantize pass compute from codes) equals the
    layer's ``sum (x - zx)(w - zw) + bias`` over a zx-padded window, on random layers."""
    rng = np.random.default_rng(abs(sum(x_range) + 7 * zx) + pad)
    x = rng.integers(x_range[0], x_range[1] + 1, (2, 5, 6, 6))
    if odd:
        w = rng.choice(np.arange(w_range[0], w_range[1] + 1, 2) if w_range[0] % 2 else [-1, 1], (4, 5, 3, 3)) + zw
    else:
        w = rng.integers(w_range[0], w_range[1] + 1, (4, 5, 3, 3))
    bias = rng.integers(-50, 50, 4)
    want = conv_int(x - zx, w - zw, 1, pad) + bias[None, :, None, None]
    depth = 5 * 9
    folded = bias - zx * w.reshape(4, -1).sum(1) + depth * zx * zw           # what rewrite.py leaves
    encoding = "hybrid" if odd else "unipolar"
    op = IntegerOp("conv2d", dict(x_zero_point=zx, w_zero_point=zw, x_range=list(x_range), encoding=encoding,
                                  w_low=w_range[0], padding=[pad] * 4),
                   (), (w.astype(np.int8), folded.astype(np.int32), np.ones(4, np.float32)), (), "uint8")
    weights, bias2, d, a = bitserial_layer.lowered(op)
    u = np.pad(x - x_range[0], ((0, 0), (0, 0), (pad, pad), (pad, pad)), constant_values=-a)
    assert u.min() >= 0 and u.max() < 2 ** max(1, (x_range[1] - x_range[0]).bit_length())
    acc = conv_int(u, weights.astype(np.int64), 1, 0)
    got = acc[:, :4] + (d * acc[:, 4:5] if d else 0) + bias2[None, :, None, None]
    np.testing.assert_array_equal(got, want)


# -- refusals -------------------------------------------------------------------------------------------
def test_five_bit_layer_is_refused_by_name(tmp_path):
    from tvm_integration.qnn.runtime.model import compile_model
    model, _ = make([conv(4, wbits=2, bits=5), conv(4, wbits=2, bits=2)], SHAPE, "qcdq")
    path = tmp_path / "five.onnx"
    onnx.save(model, path)
    with pytest.raises(ModelError, match=r"layer conv1: activations are 5-bit \(range \[0, 31\]\); supported widths: "
                                         r"1-3 bits"):
        compile_model(path)


def test_quant_with_a_zero_point_is_refused():
    model, _ = make([conv(4, wbits=2, bits=2, zp=1)], SHAPE, "qonnx")
    with pytest.raises(ModelError, match="non-zero zero point"):
        lowbit.normalize(model)


def test_wide_quant_of_an_activation_is_refused():
    model, _ = make([conv(4, wbits=2, bits=2)], SHAPE, "qonnx")
    quant = next(n for n in model.graph.node if n.op_type == "Quant" and n.input[0] == "x")
    width = next(t for t in model.graph.initializer if t.name == quant.input[3])
    width.CopyFrom(onnx.numpy_helper.from_array(np.float32(16), width.name))
    with pytest.raises(ModelError, match="16-bit: Quant nodes of 1 to 8 bits are supported"):
        lowbit.normalize(model)
