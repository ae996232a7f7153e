"""Bitserial conv2d, NHWC: x unsigned ``abits``-bit activations (uint8 storage) ``[B, H, W, C]``,
weights OIHW of ``wbits`` bits (unipolar or hybrid, bitserial_gemm.Config), any kernel size, stride
and padding; ``out[b, oh, ow, o] = stage(conv)``.

The bitserial GEMM (bitserial_gemm.py) over an im2col read at run time: row p = (b, oh, ow), k =
(kh, kw, c) with the channels innermost (contiguous in NHWC), and the activations' zero where the
window leaves the input (padding with the encoding's zero: a zero activation has no bits set, so it
adds nothing for unipolar and bipolar weights alike).
"""
from __future__ import annotations

import numpy as np
import tvm
from tvm import te, tirx

from tvm_integration import dispatch
from tvm_integration.bitserial_kernels import select
from tvm_integration.operator import Operator
from tvm_integration.ops.bitserial_gemm import Config, build
from tvm_integration.ops.conv2d import conv_geometry, pair
from tvm_integration.output_stage import OutputStage
from tvm_integration.packing import conv_weight_matrix


def bitserial_conv2d(weight: np.ndarray, input_shape: tuple[int, int, int, int], config: Config, stride=1,
                     padding=0, stage: OutputStage = OutputStage(), isa: str = "host",
                     use_kernel: bool = True) -> Operator:
    """Compile for NHWC inputs of ``input_shape``; ``use_kernel=False``: the same schedule in plain TIR."""
    if weight.ndim != 4:
        raise ValueError(f"weight must be OIHW, got {list(weight.shape)}")
    stride = pair(stride)
    (b, c, h, w), (oh, ow), pads = conv_geometry(input_shape, "NHWC", weight.shape, stride, padding)
    o, ci, kh, kw = weight.shape
    if ci != c:
        raise ValueError(f"weight {list(weight.shape)} does not fit {c} input channels")
    x = te.placeholder(tuple(input_shape), "uint8", name="data")

    def element(p, k):
        bi, pix = p // (oh * ow), p % (oh * ow)
        ih = pix // ow * stride[0] + k // (kw * c) - pads[0]
        iw = pix % ow * stride[1] + k // c % kw - pads[1]
        inside = tirx.all(ih >= 0, ih < h, iw >= 0, iw < w)
        value = x[bi, tirx.max(tirx.min(ih, h - 1), 0), tirx.max(tirx.min(iw, w - 1), 0), k % c]
        return tirx.if_then_else(inside, value, tirx.const(0, "uint8"))

    kernel = select(isa, config.abits, config.wbits, config.encoding) if use_kernel else None
    mod, constants = build(b * oh * ow, kh * kw * c, x, element, conv_weight_matrix(weight, 1)[0], config, stage, kernel)
    module = tvm.compile(mod, target=dispatch.target()).jit()
    return Operator(module, constants, (b * oh * ow, o), stage.out_dtype, input_shape, "uint8", (b, oh, ow, o))
