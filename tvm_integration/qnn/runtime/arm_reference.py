"""What a model built for Arm (``--target neon``) is exact against, op kind by op kind (issue 50).

Two runtimes disagree on Arm, so each op kind names the one it follows:

- ``onnx``: the ONNX definition (float32 division, round half to even, saturation), which onnxruntime's
  x86 exact mode computes but for QLinearAdd. Integer ops and QuantizeLinear follow it: their result is
  defined. Where onnxruntime departs from it (a QDQ Add, fused into QLinearAdd: MLAS's NEON kernel rounds
  ties away from zero, its x86 kernel rounds by float ratios; docs/measurements.md), the build follows
  the definition, not the runtime.
- ``onnxruntime_aarch64``: onnxruntime's AArch64 build (MLAS's NEON code and the C++ kernels as GCC built
  them). Float ops whose order of operations ONNX leaves open follow it: it is what an Arm user runs. So do
  onnxruntime's own (com.microsoft) ops, which no ONNX definition fixes: a QOperator model's QLinearAdd,
  QLinearMul and QLinearSigmoid (and the QDQ Mul and Sigmoid onnxruntime fuses into them), and
  MatMulIntegerToFloat, what onnxruntime fuses a quantized MatMul with a float output into.
- ``litert``: LiteRT's AArch64 build (XNNPACK's kernels), every op kind of a TFLite model (``LITERT_KINDS``:
  measured under qemu, bench/litert_aarch64.py).

``KINDS`` records, per op kind, that reference and how the build compares with it, as measured by the
tests named there (under qemu). ``kinds(mod)`` reads the op kinds of a rewritten model, ``follows``
maps them to their references, ``inexact`` picks those not known to be exact, ``departures`` and
``x86_departures`` those the ONNX definition fixes but onnxruntime's AArch64 build or its x86 exact mode
computes otherwise (and how), and ``describe`` says one kind's state in a line.
"""
from __future__ import annotations

from dataclasses import dataclass

ONNX = "onnx"
AARCH64 = "onnxruntime_aarch64"
LITERT = "litert"
REFERENCES = {ONNX: "the ONNX definition (onnxruntime's x86 exact mode but for QLinearAdd)",
              AARCH64: "onnxruntime's AArch64 build", LITERT: "LiteRT's AArch64 build"}
TFLITE = "tflite:"          # the prefix kinds() gives a TFLite model's op kinds


@dataclass(frozen=True)
class Kind:
    name: str
    reference: str             # ONNX or AARCH64
    exact: bool | None         # None: not measured against the reference
    note: str = ""             # how it was measured, or by how much it differs
    runtime_departs: str = ""    # ONNX kinds: how onnxruntime's AArch64 build computes them otherwise, if it does
    x86_departs: str = ""        # ONNX kinds: how onnxruntime's x86 exact mode computes them otherwise, if it does


_DEFINED = "integer arithmetic the ONNX definition fixes"
# How onnxruntime computes a QDQ Add, which it fuses into QLinearAdd (docs/measurements.md, "Why onnxruntime's
# AArch64 build differs"; each formula reproduced bit for bit by numpy in tests/test_ort_aarch64_quantize.py)
_NEON_ADD = ("MLAS's NEON QLinearAdd (qladd.cpp, MlasCalcQLinearAddParameters): the ratios sa/sc and sb/sc as "
             "integer multipliers of 22 bits, the sum in int32, a rounding right shift (ties away from zero); "
             "one output step apart from the definition where the sum lies near a half step")
_AVX2_ADD = ("MLAS's AVX2 QLinearAdd: two FMAs over the float32 ratios sa/sc and sb/sc, rounded half to even; "
             "one output step apart from the definition where the sum lies within float32 rounding of a half step")
_EQUAL = "equal on the shapes of tests/test_arm_float_ops.py"
INTEGER_TO_FLOAT = "matmul_integer_to_float"        # an integer dense or batch_matmul to float32 (activation_matmul.py)
KINDS = {k.name: k for k in [
    *(Kind(name, ONNX, True, _DEFINED) for name in
      ("conv2d", "dense", "batch_matmul", "lookup", "max_pool2d", "gather", "quantize", "dequantize")),
    Kind("mul", AARCH64, True, "QLinearMul (com.microsoft; a QDQ Mul, which onnxruntime fuses into it) as MLAS's "
         "NEON kernel computes it in that build: the integer product times float32 sa * sb / sc plus the zero point in "
         "one FMA, as GCC contracted the kernel's multiply and add (arithmetic.mul's neon; its x86 SSE2 kernel rounds "
         "twice): equal to that build on every input pair of tests/test_arm_qoperator.py's muls"),
    Kind("add", ONNX, True, "a QDQ Add as ONNX defines it (dequantize, add, divide by the output's scale, each in "
         "float32; output_stage.qlinear_add's defined form): onnxruntime fuses it into QLinearAdd, which rounds "
         "otherwise near a half step (1 step of the output's scale) in both builds: its x86 exact mode by MLAS's "
         "float ratios, its AArch64 build by integer multipliers, ties away from zero (docs/measurements.md); "
         "equal to the definition on every input pair of bert_l4_s128_static's l1.q scales, and where MLAS refuses "
         "the scale ratios to its float path (tests/test_arm_float_ops.py)", runtime_departs=_NEON_ADD,
         x86_departs=_AVX2_ADD),
    Kind("qlinear_add", AARCH64, True, "onnxruntime's QLinearAdd (com.microsoft, a QOperator model's), which no "
         "ONNX definition fixes, as MLAS's NEON kernel computes it (output_stage.neon_qlinear_add: 22-bit integer "
         "multipliers, the sum in int32, a rounding right shift, ties away from zero; its float formula where MLAS "
         "refuses the ratios): equal to that build on every input pair of the adds of tests/test_arm_qoperator.py"),
    Kind("qlinear_add_runtime", AARCH64, True, "QLinearAdd (com.microsoft) whose scales and zero points are graph "
         "inputs: MLAS's NEON kernel computes its multipliers on each call, as output_stage.neon_qlinear_add_runtime "
         "does in the kernel: equal to that build on every input pair of tests/test_arm_qoperator.py's run-time adds"),
    Kind("qlinear_mul_runtime", AARCH64, True, "QLinearMul (com.microsoft) whose scales and zero points are graph "
         "inputs: mul's arithmetic, the ratio computed in the kernel as MLAS computes it on each call: equal to that "
         "build on every input pair of tests/test_arm_qoperator.py's run-time muls"),
    Kind("sigmoid", AARCH64, True, "MLAS's logistic (its generic kernel: Eigen's rational function, FMA chains; "
         "mlas_math.logistic) in a float Sigmoid and in the 256-entry table of QLinearSigmoid (com.microsoft) or of "
         "a QDQ Sigmoid, which onnxruntime fuses into one (rewrite.TABLE_OPS): equal to that build on every input "
         "of tests/test_arm_qoperator.py's sigmoids"),
    Kind(INTEGER_TO_FLOAT, AARCH64, True, "MatMulIntegerToFloat (com.microsoft; and QGemm to float32 with an "
         "int32 C), which no ONNX definition fixes: onnxruntime fuses a MatMul or Gemm of dequantized 8-bit tensors "
         "that no QuantizeLinear reads into it, its AArch64 build int8 pairs too (QDQIsInt8Allowed), "
         "float32(acc (+ c)) * float32(sa * sb): equal to that build on attention's int8 Q.K^T "
         "(tests/test_arm_int8_attention.py) and an int8 MatMul and Gemm by weights (tests/test_arm_matmul_to_float.py)"),
    Kind("global_avg_pool", AARCH64, True, "QLinearGlobalAveragePool: equal on ResNet-18 (docs/measurements.md)"),
    Kind("avg_pool2d", AARCH64, True, f"QLinearAveragePool 3x3, padded, count_include_pad 0: {_EQUAL}"),
    Kind("qlinear_softmax", AARCH64, True, f"QLinearSoftmax: {_EQUAL}"),
    Kind("softmax", AARCH64, True, f"MLAS's generic kernel, 4 lanes (neon_float.py): {_EQUAL}"),
    Kind("layer_norm", AARCH64, True, f"Welford's loop with FMAs, SkipLayerNormalization too: {_EQUAL}"),
    Kind("gelu", AARCH64, True, f"MLAS's erf, as on x86: {_EQUAL}"),
    Kind("tanh", AARCH64, True, f"MLAS's tanh, as on x86: {_EQUAL}"),
    Kind("reduce_mean", AARCH64, True, f"ReduceMean over the last axis and GlobalAveragePool in float: {_EQUAL}"),
    Kind("float_matmul", AARCH64, True, f"a MatMul of two activations, Q.K^T / sqrt(d): {_EQUAL}"),
    Kind("float_dense", AARCH64, True, f"a float MatMul by constant weights, K in MLAS's packed blocks: {_EQUAL}"),
    Kind("float_conv", AARCH64, True, "a Conv of one group left in float (a QDQ one that build does not fuse: "
         f"NNCF's, whose input and output types differ), MLAS's im2col and sgemm: {_EQUAL}"),
    Kind("float_grouped_conv", AARCH64, True, "a grouped Conv left in float, MLAS's im2col and sgemm group by "
         f"group; a depthwise one on TVM's conv2d: {_EQUAL}"),
    Kind("dynamic_quantize", AARCH64, True, "MatMulIntegerToFloat's output stage with one FMA, its scale per tensor "
         f"or per column: {_EQUAL}"),
]}

# Relax ops (float32) -> the op kind they are part of
_RELAX = {"relax.nn.softmax": "softmax", "relax.nn.layer_norm": "layer_norm", "relax.erf": "gelu",
          "relax.nn.gelu": "gelu", "relax.tanh": "tanh", "relax.mean": "reduce_mean",
          "relax.nn.adaptive_avg_pool2d": "reduce_mean", "relax.matmul": "float_matmul",
          "relax.max": "dynamic_quantize", "relax.min": "dynamic_quantize", "relax.nn.conv2d": "float_conv",
          "relax.sigmoid": "sigmoid"}


def kinds(mod, tflite: bool = False) -> list[str]:
    """The op kinds of a rewritten Relax module (model.lower(..., stage="rewrite")), in order of first use;
    ``tflite``: the module of a TFLite model, each kind prefixed with TFLITE (its reference is LiteRT's)."""
    from tvm import relax

    from tvm_integration.qnn.onnx.float_convs import LAYER
    from tvm_integration.qnn.semantics.integer_op import IntegerOp
    from tvm_integration.qnn.semantics.quant import constant
    seen: dict[str, None] = {}
    for block in mod["main"].body.blocks:
        for binding in block.bindings:
            op = IntegerOp.read(binding.value, mod)
            if op is not None:
                seen[INTEGER_TO_FLOAT if op.kind in ("dense", "batch_matmul") and op.out_dtype == "float32"
                     else op.kind] = None
                seen.update(dict.fromkeys(_RELAX[name] for name in op.params.get("runtime_ops", ())))
            elif isinstance(binding.value, relax.Call) and getattr(binding.value.op, "name", "") == "relax.call_tir" \
                    and LAYER in (mod[binding.value.args[0]].attrs or {}):
                seen["float_conv"] = None          # a QDQ Conv onnxruntime leaves in float (onnx/float_convs.py)
            elif isinstance(binding.value, relax.Call) and str(getattr(binding.value.ty, "dtype", "")) == "float32":
                kind = _RELAX.get(getattr(binding.value.op, "name", ""))
                if kind == "float_matmul" and constant(binding.value.args[1]) is not None:
                    kind = "float_dense"
                if kind == "float_conv" and int(binding.value.attrs.groups) != 1:
                    kind = "float_grouped_conv"
                if kind is not None:
                    seen[kind] = None
    return [TFLITE + k if tflite else k for k in seen]


# A TFLite model's op kinds against LiteRT's AArch64 build (bench/litert_aarch64.py under qemu), measured on the 17
# models of tests/data/tflite as Cortex-A53, A72 and A76 (docs/measurements.md; tests/test_litert_aarch64.py)
_LITERT_EQUAL = ("equal to LiteRT's AArch64 build as Cortex-A53, A72 and A76 on the models of tests/data/tflite "
                 "holding it")
LITERT_KINDS = {k.name: k for k in [
    *(Kind(TFLITE + name, LITERT, True, _LITERT_EQUAL) for name in
      ("dense", "tflite_add", "tflite_softmax", "max_pool2d", "tflite_avg_pool2d", "tflite_mean",
       "lookup", "tflite_resize_bilinear", "tflite_resize_nearest")),
    Kind(TFLITE + "tflite_mul", LITERT, True, "XNNPACK's NEON vmul, which requantizes by rndnu (sqdmulh by the "
         "scale's mantissa, a shift rounding half up; its x86 build by fp32, ties to even): equal to LiteRT's "
         "AArch64 build on every int8 pair (tests/test_litert_aarch64.py) and on the models of tests/data/tflite, "
         "and so is a swish folded into one table (lower/one_tensor_mul.py) at ties"),
    Kind(TFLITE + "conv2d", LITERT, False, "LiteRT's AArch64 build as Cortex-A53 computes legacy_uint8's first "
         "Conv2D (uint8, 3x3, 3 -> 8 channels, weight zero point 143) otherwise than as A72 and A76 and on x86, "
         "which this build equals: 88 of its 1152 outputs 1 step apart, 7 of the model's 10 outputs up to 3 steps; "
         "equal as A72 and A76 on every model, and as A53 on the 8 other models holding a conv2d"),
]}


def kind(name: str) -> Kind:
    """An op kind's record: a TFLite model's follows LiteRT's AArch64 build (LITERT_KINDS where measured);
    one not in KINDS follows the ONNX definition, unmeasured."""
    if name.startswith(TFLITE):
        return LITERT_KINDS.get(name, Kind(name, LITERT, None, "no model of tests/data/tflite holds it"))
    return KINDS.get(name, Kind(name, ONNX, None))


def follows(names: list[str]) -> dict[str, str]:
    """op kind -> the reference it follows."""
    return {n: kind(n).reference for n in names}


def inexact(names: list[str]) -> list[Kind]:
    """The kinds among ``names`` not known to be exact against their reference."""
    return [kind(n) for n in names if kind(n).exact is not True]


def departures(names: list[str]) -> list[Kind]:
    """The kinds among ``names`` that follow the ONNX definition where onnxruntime's AArch64 build does
    not: a model holding one differs from that build even when every kind is exact against its reference."""
    return [kind(n) for n in names if kind(n).runtime_departs]


def x86_departures(names: list[str]) -> list[Kind]:
    """The kinds among ``names`` that follow the ONNX definition where onnxruntime's x86 exact mode does not."""
    return [kind(n) for n in names if kind(n).x86_departs]


def describe(k: Kind) -> str:
    """One line: the kind, its reference and how the build compares with it."""
    state = {True: "exact", False: "NOT exact", None: "not measured"}[k.exact]
    return f"{k.name}: {state} against {REFERENCES[k.reference]}" + (f" ({k.note})" if k.note else "")


def describe_departure(k: Kind) -> str:
    """One line: a kind the ONNX definition fixes and onnxruntime's AArch64 build computes otherwise, how,
    and by how much (what compile --target neon notes, so that a difference from that build is not silent)."""
    return (f"{k.name}: follows {REFERENCES[k.reference]}, which onnxruntime's AArch64 build does not compute: "
            f"{k.runtime_departs}")
