"""LiteRT's AArch64 build under qemu (tvm_integration/bench/litert_aarch64.py), the stated reference of a TFLite
model built for Arm (qnn/runtime/arm_reference.py, issue 50): it runs a model as LiteRT here does; our builds
for Arm equal it; and as Cortex-A53 it computes a uint8 convolution otherwise than as A72, A76 and on x86,
which arm_reference records as the one TFLite kind not exact against it. Marked ``qemu``; LiteRT's AArch64
library comes from the registry once (skipped where qemu or the cross gcc are missing, as the other Arm tests)."""
import re
import subprocess

import flatbuffers
import numpy as np
import pytest
from test_tflite import DATA, every_pair, litert_outputs, requantized

from tvm_integration.bench import mca
from tvm_integration.qemu import cross_model
from tvm_integration.qnn.runtime import arm_reference

MISSING = cross_model.missing_tools() or mca.missing_tools()
pytestmark = [pytest.mark.qemu,
              pytest.mark.skipif(MISSING is not None, reason=f"LiteRT's AArch64 build runs under qemu: {MISSING}")]


def feeds_for(path, seed=0) -> dict:
    """Each input of the model over its integer range, by tensor name."""
    from ai_edge_litert.interpreter import Interpreter
    rng = np.random.default_rng(seed)
    return {d["name"]: rng.integers(np.iinfo(d["dtype"]).min, np.iinfo(d["dtype"]).max + 1, d["shape"])
            .astype(d["dtype"]) for d in Interpreter(model_path=str(path)).get_input_details()}


def test_litert_aarch64_runs_a_model_as_litert_here():
    """A model without signatures, one with a signature, two outputs and an open batch dimension."""
    from tvm_integration.bench import litert_aarch64
    for name in ("cnn_int8", "shapes_int8"):
        feeds = feeds_for(DATA / f"{name}.tflite")
        theirs, here = litert_aarch64.run(DATA / f"{name}.tflite", feeds, "cortex-a72"), litert_outputs(
            DATA / f"{name}.tflite", feeds)
        assert theirs.keys() == here.keys()
        for output, expected in here.items():
            assert theirs[output].dtype == expected.dtype
            np.testing.assert_array_equal(theirs[output], expected, err_msg=f"{name} {output}")


@pytest.mark.parametrize("name, core", [("add_int8", "cortex-a53"), ("mnv3_int8", "cortex-a53"),
                                        ("resize_int8", "cortex-a72"), ("legacy_uint8", "cortex-a72")])
def test_a_tflite_model_on_arm_equals_litert_aarch64(name, core):
    """Our build for the core under qemu against LiteRT's AArch64 build as that core (add_int8: every int8
    pair; all 17 models of tests/data/tflite on the three cores: docs/measurements.md)."""
    from tvm_integration.bench import litert_aarch64
    from tvm_integration.qnn.runtime.model import compile_model
    path = DATA / f"{name}.tflite"
    feeds = every_pair() if name == "add_int8" else feeds_for(path)
    ours, theirs = compile_model(path, target="neon", mcpu=core)(feeds), litert_aarch64.run(path, feeds, core)
    for output, expected in theirs.items():
        np.testing.assert_array_equal(ours[output], expected, err_msg=output)


def rewritten(path, out, change):
    """A copy at ``out`` of the TFLite model at ``path``, ``change(model, schema)`` applied to its object tree, no
    signatures."""
    from ai_edge_litert import schema_py_generated as schema
    model = schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(path.read_bytes(), 0))
    change(model, schema)
    model.signatureDefs = []
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    out.write_bytes(builder.Output())
    return out


def with_outputs(path, out, tensors):
    """A copy of the TFLite model at ``path`` whose graph also outputs ``tensors`` (indices), no signatures."""
    def change(model, schema):
        model.subgraphs[0].outputs = [*model.subgraphs[0].outputs, *tensors]
    return rewritten(path, out, change)


def test_litert_cortex_a53_computes_a_uint8_conv_otherwise(tmp_path):
    """legacy_uint8's first Conv2D (tensor 8: uint8, 3x3, 3 -> 8 channels, weight zero point 143): as
    Cortex-A53 LiteRT's AArch64 build puts 88 of its 1152 outputs 1 step from its x86 build, its A72 build
    and ours, which arm_reference records (tflite:conv2d not exact); the model's outputs then differ by up
    to 3 steps."""
    from tvm_integration.bench import litert_aarch64
    from tvm_integration.qnn.runtime.model import compile_model
    path = with_outputs(DATA / "legacy_uint8.tflite", tmp_path / "legacy_exposed.tflite", [8])
    x = {"x": np.random.default_rng(0).integers(0, 256, (1, 12, 12, 3)).astype(np.uint8)}
    conv = "Relu;add;Conv2D;add/y1"
    here = litert_outputs(path, x)
    a53, a72 = (litert_aarch64.run(path, x, core) for core in ("cortex-a53", "cortex-a72"))
    ours = compile_model(path, target="neon", mcpu="cortex-a53")(x)
    steps = a53[conv].astype(np.int64) - here[conv]
    assert np.count_nonzero(steps) == 88 and np.abs(steps).max() == 1
    assert 0 < np.abs(a53["y"].astype(np.int64) - here["y"]).max() <= 3
    for output, expected in here.items():
        np.testing.assert_array_equal(a72[output], expected, err_msg=output)
        np.testing.assert_array_equal(ours[output], expected, err_msg=output)
    kind = arm_reference.kind("tflite:conv2d")
    assert kind.exact is False and kind.reference == arm_reference.LITERT and "88 of its 1152" in kind.note


def as_mul(path, out, factor=128.0, shape=None):
    """A copy of add_int8 (x + y, [1, 256, 256, 1] each) whose ADD is a MUL, the output scale sa * sb * ``factor``
    (float32): at 128 the MUL's scale is 2**-7 exactly, so that every product that is an odd multiple of 64 lies
    at a tie. ``shape``: the three tensors' shape instead."""
    def change(model, schema):
        graph = model.subgraphs[0]
        for tensor in graph.tensors[:3] if shape else ():
            tensor.shape, tensor.shapeSignature = list(shape), None
        model.operatorCodes[0].builtinCode = model.operatorCodes[0].deprecatedBuiltinCode = schema.BuiltinOperator.MUL
        graph.operators[0].builtinOptionsType = schema.BuiltinOptions.MulOptions
        graph.operators[0].builtinOptions = schema.MulOptionsT()
        x, y, result = (graph.tensors[i].quantization for i in (0, 1, 2))
        result.scale = [float(np.float32(np.float32(x.scale[0]) * np.float32(y.scale[0])) * np.float32(factor))]
    return rewritten(path, out, change)


def test_tflite_mul_on_arm_rounds_as_litert_aarch64_in_int16_lanes(tmp_path):
    """LiteRT's AArch64 build runs a MUL on XNNPACK's NEON vmul, which requantizes by "rndnu" (sqdmulh by the
    scale's mantissa, then a shift rounding half up): at a scale of 2^-7 it rounds the 896 int8 pairs whose product
    is an odd multiple of 64 up, where its x86 build ("fp32") rounds them to even, as our build for Arm did before.
    Every int8 pair, built for the A76 equal to LiteRT's AArch64 build as the A76, built for x86 to LiteRT here.
    On Arm the operands less their zero points are int16 lanes (smull into int32), the rest integer arithmetic;
    before, float32 products were clamped by fminnm and fmaxnm and rounded by frintx."""
    from tvm_integration.bench import litert_aarch64
    from tvm_integration.qnn.runtime.model import compile_model
    path, core = as_mul(DATA / "add_int8.tflite", tmp_path / "mul_int8.tflite"), "cortex-a76"
    feeds = every_pair()
    model = compile_model(path, target="neon", mcpu=core)
    ours, theirs = model(feeds)["Identity"], litert_aarch64.run(path, feeds, core)["Identity"]
    np.testing.assert_array_equal(ours, theirs)
    here = litert_outputs(path, feeds)["Identity"]
    np.testing.assert_array_equal(compile_model(path)(feeds)["Identity"], here)
    assert np.count_nonzero(theirs != here) == 896 and len(np.unique(ours)) == 255
    mul = mul_code(model, tmp_path)
    assert re.search(r"\tsmull\tv\d+\.4s", mul), mul
    assert not re.search(r"\t(fminnm|fmaxnm|frintx)\b", mul), mul


def mul_code(model, tmp_path) -> str:
    """The disassembly of the compiled ``model``'s first TFLite MUL."""
    from tvm_integration.qemu import cross
    model.save(tmp_path / "m.so")
    code = subprocess.run([cross.CC.replace("gcc", "objdump"), "-d", "--no-show-raw-insn", str(tmp_path / "m.so")],
                          capture_output=True, text=True, check=True).stdout
    return next(f for f in code.split("\n\n") if re.search(r"<qnn_tflite_mul\d*_compute_>:", f))


def test_tflite_mul_on_arm_runs_on_sqdmulh(tmp_path):
    """A MUL built for Arm computes its "rndnu" requantization with XNNPACK's instructions (qnn/prim/neon_mul.py):
    smull, sqdmulh and a rounding shift on four lanes each, no 64-bit product (LLVM's form of the TE computation:
    smull and shrn to .2d lanes). Every int8 pair at a MUL scale of 1 / 173.3 and of 100 (whose products are
    shifted left before sqdmulh), the first in [1, 2049, 32, 1] (4098 vectors of 16: two after the loop's groups of
    four), and effnet_int8, whose squeeze-and-excitation MUL reads one operand per channel, equal to LiteRT's
    AArch64 build as the A76."""
    from tvm_integration.bench import litert_aarch64
    from tvm_integration.qnn.runtime.model import compile_model
    core, pairs, shape = "cortex-a76", every_pair(), (1, 2049, 32, 1)
    longer = {name: np.concatenate([x.ravel(), x.ravel()[:32]]).reshape(shape) for name, x in pairs.items()}
    cases = [(as_mul(DATA / "add_int8.tflite", tmp_path / "mul_tail.tflite", 173.3, shape), longer),
             (as_mul(DATA / "add_int8.tflite", tmp_path / "mul_shifted.tflite", 0.01), pairs),
             (DATA / "effnet_int8.tflite", None)]
    for path, feeds in cases:
        feeds = feeds or feeds_for(path)
        model = compile_model(path, target="neon", mcpu=core)
        ours, theirs = model(feeds), litert_aarch64.run(path, feeds, core)
        for output, expected in theirs.items():
            assert len(np.unique(expected)) > 2, "a saturated output would hide differences"
            np.testing.assert_array_equal(ours[output], expected, err_msg=f"{path.name} {output}")
        mul = mul_code(model, tmp_path)
        assert re.search(r"\tsqdmulh\tv\d+\.4s", mul) and not re.search(r"\bv\d+\.2d", mul), mul


def test_swish_table_on_arm_is_litert_aarch64s_mul(tmp_path):
    """A MUL of x and a table of x is one table of x (lower/one_tensor_mul.py) whose entries are the MUL of the
    target's LiteRT build: swish_int8 with x and the swish's output at 2**-5 (a_scale * b_scale / y_scale = 2**-8,
    7 entries at ties), its gate's MUL reading LOGISTIC(g) first, t * t instead of t * TANH(t), every int8 value,
    equal to LiteRT's AArch64 build as the A53. Before, the table took the fp32 formula on either target, which
    rounds those ties to even where the AArch64 build rounds them up."""
    from test_tflite_keras import edit, every_value, square, swap_inputs

    from tvm_integration.bench import litert_aarch64
    from tvm_integration.qnn.runtime.model import compile_model
    path = edit(requantized("swish_int8", {2: (0.03125, 0), 4: (0.03125, 0), 8: (0.06, -128)}, tmp_path),
                swap_inputs(3), square(5))
    model = compile_model(path, target="neon", mcpu="cortex-a53")
    feeds = every_value(model)
    ours, theirs, here = model(feeds), litert_aarch64.run(path, feeds, "cortex-a53"), litert_outputs(path, feeds)
    assert sum(int(np.count_nonzero(theirs[o] != here[o])) for o in here) > 0
    for output, expected in theirs.items():
        np.testing.assert_array_equal(ours[output], expected, err_msg=output)
