"""TVM's own ONNX import stays TVM's after a qsynth compile in the same process (issue 47): our
converters are given to our importer per call (qnn/onnx/importer.py), never written into TVM's frontend, so
the benchmarks' tvm_default column is TVM's import, and says so where that import refuses the model."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
import tvm
from onnx import TensorProto, helper, numpy_helper
from tvm.relax.frontend import onnx as frontend
from tvm.relax.frontend.onnx import onnx_frontend

from scripts import bench_arm_models, bench_models
from tvm_integration.bench import int8_models, models
from tvm_integration.qnn.runtime.model import compile_model

REFUSAL = "The following operators are not supported for frontend ONNX: QLinearConv"


@pytest.fixture(scope="module")
def qlinear_conv(tmp_path_factory):
    """One QLinearConv (QOperator), 8 -> 8 channels, 3x3 on 6x6, u8 activations and s8 weights."""
    rng = np.random.default_rng(0)
    values = {"xs": np.float32(0.02), "xz": np.uint8(128), "w": rng.integers(-128, 128, (8, 8, 3, 3)).astype(np.int8),
              "ws": np.float32(0.01), "wz": np.int8(0), "ys": np.float32(0.5), "yz": np.uint8(3)}
    inits = [numpy_helper.from_array(np.asarray(value), name) for name, value in values.items()]
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"], pads=[1] * 4)
    graph = helper.make_graph([node], "conv", [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 8, 6, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, [1, 8, 6, 6])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = int8_models.IR_VERSION
    path = tmp_path_factory.mktemp("isolation") / "conv.onnx"
    onnx.save(model, str(path))
    return path


def tvm_import(path):
    """What TVM's own ``from_onnx`` makes of the model: its module's text, or its refusal (type, message)."""
    try:
        return frontend.from_onnx(onnx.load(str(path)), keep_params_in_input=False).script()
    except Exception as e:      # the refusal is the result compared
        return type(e), str(e)


def frontend_state():
    """TVM's frontend as ``from_onnx`` reads it: the map function, the map, and the importer's methods."""
    return (frontend.from_onnx, onnx_frontend.from_onnx, onnx_frontend._get_convert_map,
            onnx_frontend._get_convert_map(), dict(vars(onnx_frontend.ONNXGraphImporter)))


def test_tvm_from_onnx_is_the_same_after_a_qsynth_compile(qlinear_conv):
    state, before = frontend_state(), tvm_import(qlinear_conv)
    compile_model(qlinear_conv, threads=1)
    assert tvm_import(qlinear_conv) == before
    assert frontend_state() == state
    # TVM's, whatever else this process compiled before the test: its map has no QOperator op
    assert onnx_frontend._get_convert_map.__module__ == onnx_frontend.__name__
    assert "QLinearConv" not in onnx_frontend._get_convert_map()
    assert before == (tvm.error.OpNotImplemented, REFUSAL)


def test_benchmark_column_says_tvm_refused(qlinear_conv):
    row = models.bench_model(qlinear_conv, trials=1, tvm_trials=1, with_openvino=False)
    assert row["baselines"]["tvm_default"] is None and row["refused"] == {"tvm_default": REFUSAL}
    assert "tvm_default" not in row["speedups"] and row["max_abs_diff_vs_onnxruntime"] == 0
    assert bench_models.cell(row, "tvm_default") == f"refused: {REFUSAL}"
    arm = {"columns": {"tvm_default": {"cycles": None, "refused": REFUSAL}}, "ratios": {}}
    assert bench_arm_models.cell(arm, "tvm_default") == f"refused: {REFUSAL}"
