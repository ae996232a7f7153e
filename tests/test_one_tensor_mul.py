"""A QDQ Mul of two functions of one 8-bit tensor (one_tensor_mul.py): SiLU, ``x * sigmoid(x)`` as exporters write
it, and a square, ``x * x``, become one lookup of x, whose table is the mul of each target's build: on every 8-bit
value equal to onnxruntime's AArch64 build under qemu (a Cortex-A53) and, built for x86, to its x86 exact mode. The
squares' scales (found by a numpy search) are ones where the two builds' muls differ (one FMA on Arm, two roundings
on x86), so a table of the other target's arithmetic fails."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tvm_integration.bench import mca
from tvm_integration.bench.models import reference_session
from tvm_integration.qemu import cross_model

MISSING = cross_model.missing_tools() or mca.missing_tools()
pytestmark = [pytest.mark.qemu,
              pytest.mark.skipif(MISSING is not None, reason=f"onnxruntime's AArch64 build runs under qemu: {MISSING}")]

CORE = "cortex-a53"
F32, BITS = np.float32, lambda bits: np.uint32(bits).view(np.float32)
# output -> (input, x's (scale, zero point), the sigmoid's or None for a square, the output's); v: every u8 value,
# v8 every s8 value; silu_u8: EfficientNet-B0's first SiLU
MULS = {
    "silu_u8": ("v", (F32(0.01984568), 127), (F32(0.00363367), 0), (F32(0.01030474), 27)),
    "silu_s8": ("v8", (F32(0.05), -3), (F32(1 / 256), -128), (F32(0.02), -100)),
    "square_u8": ("v", (BITS(1023988268), 120), None, (BITS(1042671853), 118)),
    "square_s8": ("v8", (BITS(1016277829), -62), None, (BITS(1053421523), 56)),
}
# how many of the 256 values each build's mul rounds otherwise than the other's
DIFFER = {"silu_u8": 0, "silu_s8": 0, "square_u8": 2, "square_s8": 1}


def model(path):
    """Per MULS entry: Q(DQ(x) * DQ(Q(Sigmoid(DQ(x))))), or Q(DQ(x) * DQ(x)), one DQ of x read twice."""
    inits, nodes = [], []
    for out, (v, x_quant, sigmoid_quant, y_quant) in MULS.items():
        dtype = np.int8 if v == "v8" else np.uint8

        def params(name, quant):
            inits.extend(numpy_helper.from_array(np.array(value, t), f"{out}_{name}{k}")
                         for k, value, t in (("s", quant[0], F32), ("z", quant[1], dtype)))
            return [f"{out}_{name}s", f"{out}_{name}z"]
        nodes.append(helper.make_node("DequantizeLinear", [v, *params("x", x_quant)], [f"{out}_x"]))
        other = f"{out}_x"
        if sigmoid_quant is not None:
            sigmoid = params("g", sigmoid_quant)
            nodes += [helper.make_node("Sigmoid", [f"{out}_x"], [f"{out}_g"]),
                      helper.make_node("QuantizeLinear", [f"{out}_g", *sigmoid], [f"{out}_gq"]),
                      helper.make_node("DequantizeLinear", [f"{out}_gq", *sigmoid], [f"{out}_gd"])]
            other = f"{out}_gd"
        nodes += [helper.make_node("Mul", [f"{out}_x", other], [f"{out}_f"]),
                  helper.make_node("QuantizeLinear", [f"{out}_f", *params("y", y_quant)], [out])]
    operand = lambda name: TensorProto.INT8 if name == "v8" else TensorProto.UINT8
    inputs = [helper.make_tensor_value_info(v, operand(v), [1, 4, 8, 8]) for v in ("v", "v8")]
    outputs = [helper.make_tensor_value_info(out, operand(v), [1, 4, 8, 8]) for out, (v, *_) in MULS.items()]
    m = helper.make_model(helper.make_graph(nodes, "one_tensor_muls", inputs, outputs, inits),
                          opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, str(path))


def test_mul_of_one_tensor_is_one_lookup_equal_to_each_onnxruntime_build(tmp_path):
    """Before, each stayed a mul beside the sigmoid's lookup (arithmetic.mul's neon form on Arm, equal all the same)."""
    from tvm_integration.bench import ort_aarch64
    from tvm_integration.qnn.runtime.model import compile_model, lower
    from tvm_integration.qnn.semantics.integer_op import IntegerOp
    path = tmp_path / "muls.onnx"
    model(path)
    inputs = {"v": np.arange(256).astype(np.uint8).reshape(1, 4, 8, 8),
              "v8": np.arange(-128, 128).astype(np.int8).reshape(1, 4, 8, 8)}
    names = list(MULS)
    for target, mcpu in (("neon", CORE), ("host", None)):
        bound = lower(onnx.load(str(path)), target, mcpu=mcpu)
        ops = [IntegerOp.read(b.value, bound) for b in bound["main"].body.blocks[0].bindings]
        assert [op.kind for op in ops if op is not None] == ["lookup"] * len(MULS), target
    arm = dict(zip(names, ort_aarch64.run(path, inputs, names, CORE, counted=False)[0]))
    ours = compile_model(path, target="neon", mcpu=CORE)(inputs)
    x86 = compile_model(path)(inputs)
    reference = dict(zip(names, reference_session(path).run(names, inputs)))
    for out in names:
        np.testing.assert_array_equal(ours[out], arm[out], err_msg=out)
        np.testing.assert_array_equal(x86[out], reference[out], err_msg=out)
    assert {out: int(np.count_nonzero(arm[out] != reference[out])) for out in names} == DIFFER
