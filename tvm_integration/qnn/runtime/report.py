"""``qsynth inspect MODEL``: each conv2d / dense layer of a model as the pipeline sees it after
legalize: its precision (AxWy and encoding, precision.py), the operator it runs on and the kernel
that operator takes on this host (the bitserial tile; the int8 tile kernels/tuning.py picks for its shape;
the depthwise TIR; or the reference computation and why). ``--target neon [--mcpu CORE]``: the same
for an AArch64 core, as bind.py builds it (the NEON bitserial tiles; the core's int8 tile family,
kernels/neon_int8.py).

Every MatMul is listed (a transformer's): one with a constant weight is the int8 ``dense``; one of two
quantized activations (Q.K^T, attention.V) the int8 ``batch_matmul`` (ops/batch_matmul.py) and its
tile; one left in float (quantize_dynamic's Q.K^T and attention.V, a MatMul outside Q/DQ) a ``matmul``
of precision float32, as float_ops.py schedules it. A Conv onnxruntime keeps in float (its x86 build;
its AArch64 build for ``--target neon``) is listed with why it does (ort_fusion.float_layers: the pattern, and the quantizers that write it)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from tvm_integration.qnn.semantics.integer_op import LINEAR, IntegerOp
from tvm_integration.qnn.semantics.precision import Precision


@dataclass(frozen=True)
class Layer:
    layer: str
    kind: str                  # conv2d | dense | batch_matmul (two int8 activations) | matmul (float)
    shape: str                 # weights; a matmul of two activations: both operands
    precision: Precision | None    # None: float32
    operator: str              # bitserial | int8 | depthwise | reference | float
    kernel: str


def layers(model: onnx.ModelProto | Path, target: str = "host", mcpu: str | None = None,
           lowbit: str = "fastest") -> list[Layer]:
    """The layers of an ONNX model, or of the .tflite model at a path (tflite/importer.py in place of
    import and rewrite); ``mcpu``: the AArch64 core of target ``neon``; ``lowbit``: legalize.py's."""
    from tvm_integration.qnn.lower import legalize, pipeline
    from tvm_integration.qnn.runtime.model import lower
    if isinstance(model, (str, Path)):
        from tvm_integration.qnn.tflite import importer as tflite_importer
        mod = pipeline.lower(tflite_importer.load(model).run(), target, stage="legalize", lowbit=lowbit)
    else:
        mod = lower(model, target, stage="legalize", lowbit=lowbit)
    rows = []
    for binding in mod["main"].body.blocks[0].bindings:
        op = IntegerOp.read(binding.value, mod)
        if op is not None and op.kind == "batch_matmul":
            rows.append(_batch_matmul(op, target, mcpu))
        elif op is None and _float_matmul(binding.value):
            rows.append(_float_layer(binding, target))
        elif op is None and (conv := _float_conv(binding.value, mod)) is not None:
            rows.append(conv)
        if op is None or op.kind not in LINEAR:
            continue
        precision = legalize.precision(op)
        operator, kernel = _operator(op, target, mcpu)
        rows.append(Layer(op.params.get("layer", "") or "(unnamed)", op.kind, "x".join(map(str, op.constants[0].shape)),
                          precision, operator, kernel))
    return rows


def _batch_matmul(op: IntegerOp, target: str, mcpu: str | None = None) -> Layer:
    """A matmul of two quantized activations: the int8 tile ops/batch_matmul.py takes on x86; on Arm
    the core's NEON tile (ops/neon_batch_matmul.py)."""
    from tvm_integration.ops.batch_matmul import Operand, kernel_for
    a, b = (Operand(tuple(int(d) for d in x.ty.shape), str(x.ty.dtype), tuple(op.params[f"{n}_axes"]) or None)
            for x, n in zip(op.inputs, "ab"))
    short = {"uint8": "u8", "int8": "s8"}
    precision = Precision(8, 8, "int8", f"{short[a.dtype]} x {short[b.dtype]} activations")
    shape = " @ ".join("x".join(map(str, x.logical)) for x in (a, b))
    if target == "neon":
        from tvm_integration.ops import neon_batch_matmul
        return Layer(op.params.get("layer") or "(unnamed)", "batch_matmul", shape, precision, "int8",
                     neon_batch_matmul.kernel_for(mcpu).intrin.removeprefix("qsynth_"))
    kernel = kernel_for(a, b, "host" if target == "host" else target).spec.name
    return Layer(op.params.get("layer") or "(unnamed)", "batch_matmul", shape, precision, "int8", kernel)


def _float_matmul(value) -> bool:
    from tvm import relax
    return isinstance(value, relax.Call) and getattr(value.op, "name", "") == "relax.matmul" \
        and str(value.ty.dtype) == "float32"


def _float_layer(binding, target: str) -> Layer:
    """A MatMul the rewrite left in float: on x86 summed as MLAS's sgemm (float_ops.py), TVM's
    legalized matmul on Arm."""
    from tvm_integration.qnn.onnx.importer import LAYER_NAMES
    shape = " @ ".join("x".join(str(int(d)) for d in x.ty.shape) for x in binding.value.args)
    kernel = "TVM's legalized matmul" if target == "neon" else "qsynth_float_matmul (MLAS sgemm's sums, float_ops.py)"
    return Layer(LAYER_NAMES.get(binding.var.name, binding.var.name), "matmul", shape, None, "float", kernel)


def _float_conv(value, mod) -> Layer | None:
    """A Conv onnxruntime computes in float (onnx/float_convs.py), and why it does, else None."""
    from tvm import relax, tirx

    from tvm_integration.qnn.onnx.float_convs import LAYER, WHY
    if not (isinstance(value, relax.Call) and getattr(value.op, "name", "") == "relax.call_tir"):
        return None
    func = mod[value.args[0]]
    if not isinstance(func, tirx.PrimFunc) or func.attrs is None or LAYER not in func.attrs:
        return None
    weights = "x".join(str(int(d)) for d in value.args[1].fields[1].ty.shape)
    return Layer(str(func.attrs[LAYER]) or "(unnamed)", "conv2d", weights, None, "float",
                 f"qsynth_float_conv2d (MLAS's sums, float_conv.py): {func.attrs[WHY]}")


def _operator(op: IntegerOp, target: str, mcpu: str | None = None) -> tuple[str, str]:
    from tvm_integration.kernels import selection
    from tvm_integration.kernels.bitserial import CROSS
    from tvm_integration.ops.bitserial_gemm import Config, tile_for
    if op.bitserial:
        isa = target if target in (*selection.BITSERIAL_ISAS, *CROSS) else "host"
        kernel = selection.bitserial_kernel(isa, op.params["abits"], op.params["wbits"], op.params["encoding"])
        weight = op.constants[0]
        words = -(-weight.shape[1] // 64) * (weight.shape[2] * weight.shape[3] if weight.ndim == 4 else 1)
        tile = tile_for(kernel, Config(op.params["abits"], op.params["wbits"], op.params["encoding"]), words)
        if tile is None:
            return "bitserial", f"plain TIR (K of {words} words is under half of {kernel.spec.name}'s block)"
        if tile.spec.encoding != op.params["encoding"]:
            return "bitserial", f"{tile.spec.name} (hybrid: 2S - (2^w-1) T on the weight codes)"
        return "bitserial", tile.spec.name
    if not op.tensorized:
        return "reference", op.implementation.removeprefix("reference: ")
    if target == "neon":
        return _neon_int8(op, mcpu)
    if op.depthwise:
        return "depthwise", "direct vectorized TIR (ops/depthwise.py)"
    return "int8", _int8_kernel(op, "host" if target == "host" else target)


def _neon_int8(op: IntegerOp, mcpu: str | None) -> tuple[str, str]:
    """The NEON int8 operator of a tensorized layer (ops/neon_gemm.py): the core's tile, one per core,
    and the zero point its bytes are on (neon_gemm.byte_weights: u8 weights less theirs)."""
    from tvm_integration.kernels import neon_int8
    from tvm_integration.ops.neon_gemm import byte_weights
    core = mcpu or "a generic v8.0 core"
    if op.depthwise:
        return "depthwise", f"direct vectorized TIR for {core} (ops/depthwise.py)"
    weights, zero_points = byte_weights(op.constants[0])
    notes = [] if op.kind == "dense" else \
        ["one GEMM per group" if op.params["groups"] > 1 else "im2col along window rows"]
    if np.any(zero_points):
        notes.append(f"s8 weights on zero point {zero_points[0]}" if np.all(zero_points == zero_points[0])
                     else "s8 weights on a zero point per output channel")
    name = neon_int8.tile_for(mcpu, weights=weights).intrin.removeprefix("qsynth_")
    return "int8", f"{name} ({'; '.join(notes)})" if notes else name


def _int8_kernel(op: IntegerOp, isa: str) -> str:
    """The int8 tile of the layer's shape, how it reads its input, and why a 1-3-bit layer is on it."""
    from tvm_integration.kernels import selection, tuning
    from tvm_integration.ops import winograd
    from tvm_integration.ops.conv2d import chosen_tiles, reads_in_place
    from tvm_integration.qnn.lower.legalize import signed, tuning_key
    weight = op.constants[0]
    notes = [op.params["lowbit"]] if "lowbit" in op.params else []       # a 1-3-bit layer: why on int8
    if op.kind == "dense":
        m, (n, k) = int(op.inputs[0].ty.shape[0]), weight.shape
        name = tuning.choose(tuning_key(op), selection.candidates_for(weight, isa), m, n,
                             depth=k).spec.name
        return f"{name} ({'; '.join(notes)})" if notes else name
    b, c, h, w = (int(d) for d in op.inputs[0].ty.shape)
    nhwc, strides, padding, groups = (b, h, w, c), op.params["strides"], tuple(op.params["padding"]), op.params["groups"]
    kernel, s16 = chosen_tiles(signed(weight), nhwc, "NHWC", strides, padding, groups, str(op.inputs[0].ty.dtype), isa)
    if s16 is not None:
        return f"{s16.spec.name} ({'; '.join([winograd.TRANSFORMS[strides[0]].name, *notes])})"
    reads = "in place" if reads_in_place(kernel, weight.shape, nhwc, "NHWC", strides, padding, groups) else "im2col"
    return f"{kernel.spec.name} ({'; '.join([reads, *notes])})"


def table(rows: list[Layer]) -> str:
    cells = [("layer", "op", "weights", "precision", "operator", "kernel")] + [
        (r.layer, r.kind, r.shape, "float32" if r.precision is None else str(r.precision), r.operator, r.kernel)
        for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(5)]
    return "\n".join(" ".join(f"{c:{w}}" for c, w in zip(row, widths)) + " " + row[5] for row in cells)
