"""Whole Relax models compiled for AArch64 (tvm_integration/qemu/cross_model.py): exported as one shared
library with the cross gcc and run under qemu-aarch64 by TVM's own AArch64 runtime (the registry's
aarch64 wheels) through model_driver.c, no Python on the Arm side; marked ``qemu``. Models built with
onnx.helper and imported by TVM's ONNX frontend: constants inside the library, several inputs,
a tuple of outputs (one 0-d), integer arithmetic checked bit for bit against numpy and float
against TVM's host build."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tvm_integration.qemu import cross_model

MISSING = cross_model.missing_tools()
pytestmark = [pytest.mark.qemu, pytest.mark.skipif(MISSING is not None, reason=f"AArch64 models run under qemu: {MISSING}")]


def relax_module(nodes, inputs, outputs, initializers):
    from tvm.relax.frontend.onnx import from_onnx
    graph = helper.make_graph(nodes, "m", inputs, outputs, [numpy_helper.from_array(v, k) for k, v in initializers.items()])
    return from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)]), keep_params_in_input=False)


def test_integer_model_bit_exact(tmp_path, lib_dir):
    """u8 input cast to int32, a matmul with an int32 constant, a second input added, ReLU; two outputs."""
    rng = np.random.default_rng(0)
    w = rng.integers(-128, 128, (24, 10)).astype(np.int32)
    info = helper.make_tensor_value_info
    mod = relax_module([
        helper.make_node("Cast", ["x"], ["xi"], to=TensorProto.INT32),
        helper.make_node("MatMul", ["xi", "W"], ["mm"]),
        helper.make_node("Add", ["mm", "y"], ["s"]),
        helper.make_node("Relu", ["s"], ["out"]),
        helper.make_node("Sub", ["mm", "y"], ["out2"]),
    ], [info("x", TensorProto.UINT8, [5, 24]), info("y", TensorProto.INT32, [5, 10])],
        [info("out", TensorProto.INT32, [5, 10]), info("out2", TensorProto.INT32, [5, 10])], {"W": w})
    model = cross_model.CrossModel(cross_model.export(mod, tmp_path / "m.so", mcpu="cortex-a53"))
    x = rng.integers(0, 256, (5, 24)).astype(np.uint8)
    y = rng.integers(-20000, 20000, (5, 10)).astype(np.int32)
    out, out2 = model(x, y)
    mm = x.astype(np.int32) @ w
    assert out.dtype == np.int32 and out.shape == (5, 10)
    np.testing.assert_array_equal(out, np.maximum(mm + y, 0))
    np.testing.assert_array_equal(out2, mm - y)


def test_float_cnn_matches_host_build(tmp_path, lib_dir):
    """Conv (stride 2, padding), ReLU, an add of a second input, Flatten, Gemm, and a 0-d ReduceMax."""
    import tvm
    from tvm import relax
    rng = np.random.default_rng(1)
    info = helper.make_tensor_value_info
    mod = relax_module([
        helper.make_node("Conv", ["x", "W"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Add", ["r", "y"], ["s"]),
        helper.make_node("Flatten", ["s"], ["f"]),
        helper.make_node("Gemm", ["f", "B"], ["out"], transB=1),
        helper.make_node("ReduceMax", ["s"], ["top"], keepdims=0),
    ], [info("x", TensorProto.FLOAT, [1, 3, 8, 8]), info("y", TensorProto.FLOAT, [1, 4, 4, 4])],
        [info("out", TensorProto.FLOAT, [1, 6]), info("top", TensorProto.FLOAT, [])],
        {"W": rng.standard_normal((4, 3, 3, 3)).astype(np.float32),
         "B": rng.standard_normal((6, 64)).astype(np.float32)})
    x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    y = rng.standard_normal((1, 4, 4, 4)).astype(np.float32)
    arm = cross_model.CrossModel(cross_model.export(mod, tmp_path / "m.so"))(x, y)
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    host = [t.numpy() for t in vm["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(y))]
    assert [a.shape for a in arm] == [(1, 6), ()]
    for a, h in zip(arm, host):          # FMA contraction differs between the two targets
        np.testing.assert_allclose(a, h, rtol=1e-5, atol=1e-4)


def test_wrong_input_is_one_clear_error(tmp_path, lib_dir):
    info = helper.make_tensor_value_info
    mod = relax_module([helper.make_node("Add", ["x", "x"], ["out"])], [info("x", TensorProto.INT32, [3])],
                       [info("out", TensorProto.INT32, [3])], {})
    model = cross_model.CrossModel(cross_model.export(mod, tmp_path / "m.so"))
    np.testing.assert_array_equal(model(np.arange(3, dtype=np.int32))[0], [0, 2, 4])
    with pytest.raises(RuntimeError, match="the model failed under qemu.*main"):
        model(np.arange(4, dtype=np.int32))


def test_neon_int8_operator_inside_a_relax_model(tmp_path, lib_dir):
    """The NEON int8 conv (ops/neon_gemm.py, the v8 umull/uadalp tile, its residual add fused) called from
    a Relax function as the QNN pipeline calls its operators (call_tir, packed weights and output-stage
    parameters as constants), the shortcut a second model input: the whole library under qemu gives
    what the operator gives alone."""
    import subprocess
    from tvm import relax
    from tvm_integration.ops import neon_gemm
    from tvm_integration.ops.output_stage import OutputStage, ResidualAdd, ScaleRequantize
    from tvm_integration.qemu import cross
    rng = np.random.default_rng(2)
    x = rng.integers(0, 256, (1, 9, 9, 16)).astype(np.uint8)
    shortcut = rng.integers(0, 256, (1, 9, 9, 12)).astype(np.uint8)
    w = rng.integers(-128, 128, (12, 16, 3, 3)).astype(np.int8)
    stage = OutputStage(bias=rng.integers(-5000, 5000, 12).astype(np.int32),
                        requantize=ScaleRequantize(np.float32(1 / 512), 128, "uint8"),
                        residual=ResidualAdd(0.5, 0.75, np.float32(1.5), "uint8", (0, 255), 0, "uint8"))
    built = neon_gemm.build_conv2d(w, x.shape, 1, 1, stage=stage, family="v8")
    bb = relax.BlockBuilder()
    xv = relax.Var("x", relax.TensorType(x.shape, "uint8"))
    rv = relax.Var("shortcut", relax.TensorType(built.out_shape, "uint8"))
    with bb.function("main", [xv, rv]):
        conv = bb.add_func(built.mod["main"].with_attr("global_symbol", "neon_conv"), "neon_conv")
        out = bb.emit(relax.call_tir(conv, [xv, *[relax.const(c) for c in built.constants], rv],
                                     relax.TensorType(built.out_shape, built.out_dtype)))
        bb.emit_func_output(bb.emit(relax.op.reshape(out, built.result_shape)))
    library = cross_model.export(bb.get(), tmp_path / "m.so", target=built.target)
    code = subprocess.run([cross.CC.replace("gcc", "objdump"), "-d", str(library)], capture_output=True, text=True).stdout
    assert "umull" in code and "uadalp" in code
    (arm,) = cross_model.CrossModel(library)(x, shortcut.reshape(built.out_shape))
    np.testing.assert_array_equal(arm, built.compile()(x, shortcut))
