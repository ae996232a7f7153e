"""The low-bit ResNet-18 layout of issue 16's benchmark (tvm_integration/bench/lowbit_models.py), shrunk
(32x32 input, widths 8-64, every block kind: identity and 1x1/2 downsampling shortcuts, residual adds,
max pool, global average pool, int8 stem and classifier), at W1A1 and W2A2: compiled once per
configuration, bit-exact with onnxruntime (which computes the QCDQ model in float, exactly) on random
inputs and with the numpy integer network on its calibration input; every inner convolution on the
bitserial operators at the configuration's precision."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from tvm_integration.bench.lowbit_models import conv_int, resnet_lowbit

SMALL = dict(size=32, widths=(8, 16, 32, 64), classes=10)
PRECISION = {(1, 1): "A1W1 hybrid (bipolar)", (2, 2): "A2W2 unipolar"}


@pytest.fixture(scope="module", params=[(1, 1), (2, 2)], ids=["w1a1", "w2a2"])
def built(request, tmp_path_factory):
    from tvm_integration.qnn.runtime.model import compile_model
    abits, wbits = request.param
    model, x, logits = resnet_lowbit(abits, wbits, **SMALL)
    path = tmp_path_factory.mktemp("resnet") / f"resnet_a{abits}w{wbits}.onnx"
    onnx.save(model, path)
    ours = compile_model(path, threads=1, lowbit="bitserial")
    return request.param, path, x, logits, ours, ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def test_equal_to_onnxruntime_and_the_integer_network(built):
    _, _, x, logits, ours, session = built
    out = ours.outputs[0]
    got = ours({"input": x})[out]
    np.testing.assert_array_equal(got, logits)
    np.testing.assert_array_equal(session.run(None, {"input": x})[0], logits)
    assert len(np.unique(logits)) > SMALL["classes"] // 2           # not a constant output
    rng = np.random.default_rng(3)
    for _ in range(2):
        xr = rng.standard_normal(x.shape).astype(np.float32)
        np.testing.assert_array_equal(ours({"input": xr})[out], session.run(None, {"input": xr})[0])


def test_inner_layers_are_bitserial_and_the_ends_int8(built):
    from tvm_integration.qnn.onnx.importer import load
    from tvm_integration.qnn.runtime.report import layers
    config, path, *_ = built
    rows = {r.layer: r for r in layers(load(path), lowbit="bitserial")}
    assert str(rows.pop("stem").precision) == "A8W8 int8" and str(rows.pop("fc").precision).startswith("A8W8")
    assert len(rows) == 19                                          # 16 block convs + 3 downsampling convs
    assert {str(r.precision) for r in rows.values()} == {PRECISION[config]}
    assert {r.operator for r in rows.values()} == {"bitserial"}


def test_the_integer_network_adds_as_onnx_does_where_scales_lie_far_apart():
    """Two stages of widths 8 and 16: layer2.0's conv2 all but vanishes (scale 2**-27) beside its
    shortcut (2**-5), so the residual Add's float32 sum rounds, onto a half step. The integer network
    must round it as onnxruntime's float graph does (one code apart on 8 of the 10 logits otherwise)."""
    model, x, logits = resnet_lowbit(2, 2, size=32, widths=(8, 16), classes=10)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(session.run(None, {"input": x})[0], logits)


def test_conv_int_is_a_convolution():
    rng = np.random.default_rng(0)
    x, w = rng.integers(-3, 4, (1, 2, 5, 5)), rng.integers(-2, 2, (3, 2, 3, 3))
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = np.array([[[[np.sum(xp[0, :, 2 * i:2 * i + 3, 2 * j:2 * j + 3] * w[o]) for j in range(3)]
                       for i in range(3)] for o in range(3)]])
    np.testing.assert_array_equal(conv_int(x, w, 2, 1), want)
