"""Bitserial conv2d, NHWC or NCHW: x unsigned ``abits``-bit activations (uint8 storage), weights
OIHW of ``wbits`` bits (unipolar or hybrid, bitserial_gemm.Config), any kernel size, stride and
padding; ``out = stage(conv)`` in the input's layout.

The bitserial GEMM (bitserial_gemm.py) over an im2col of packed words: the input is bit-packed at
run time along its channels into ``[B, H, W, abits, C/64]`` (each element packed once; NCHW read
in place, a word's 64 bits a channel plane apart), the weights at compile time the same way per tap (``[O, wbits,
KH*KW*C/64]``, each tap's channels padded to whole words with zero bits); row p = (b, oh, ow), word
t = (kh, kw, channel word). The padding is packed with the input, as zero words around it (the
encoding's zero: a zero activation has no bits set, so it adds nothing for unipolar and bipolar
weights alike), so a window reads its words without bounds checks (which cost ~30 cycles a word
on Cortex-A53: 3.2 M llvm-mca cycles of a W1A1 ResNet-18). NCHW writes the output channels first,
from the same GEMM.
"""
from __future__ import annotations

import numpy as np
from tvm import te

from tvm_integration.kernels.bitpack import Packing
from tvm_integration.kernels.bitserial import WORD
from tvm_integration.kernels.selection import bitserial_kernel, bitserial_target
from tvm_integration.ops.operator import Built, Operator
from tvm_integration.ops.bitserial_gemm import Config, build
from tvm_integration.ops import depthwise
from tvm_integration.ops.conv2d import LAYOUTS, conv_geometry, pair
from tvm_integration.ops.output_stage import OutputStage


def bitserial_conv2d(weight: np.ndarray, input_shape: tuple[int, int, int, int], config: Config, stride=1,
                     padding=0, stage: OutputStage = OutputStage(), isa: str = "host",
                     use_kernel: bool = True, layout: str = "NHWC", kernel_layout: str | None = None) -> Operator:
    """Compile for inputs of ``input_shape`` in ``layout`` (NHWC or NCHW; the output in the same);
    ``use_kernel=False``: the same schedule in plain TIR; ``kernel_layout``: only tiles of this layout
    (acc, lanes or tile; default: selection.bitserial_kernel's choice). ``isa="neon"``: built for AArch64, an
    operator run under qemu (cross.QemuOperator)."""
    return build_bitserial_conv2d(weight, input_shape, config, stride, padding, stage, isa, use_kernel,
                                  layout, kernel_layout).compile()


def build_bitserial_conv2d(weight: np.ndarray, input_shape: tuple[int, int, int, int], config: Config, stride=1,
                           padding=0, stage: OutputStage = OutputStage(), isa: str = "host",
                           use_kernel: bool = True, layout: str = "NHWC", kernel_layout: str | None = None) -> Built:
    """The scheduled operator of ``bitserial_conv2d``, not compiled."""
    if weight.ndim != 4:
        raise ValueError(f"weight must be OIHW, got {list(weight.shape)}")
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    stride = pair(stride)
    (b, c, h, w), (oh, ow), pads = conv_geometry(input_shape, layout, weight.shape, stride, padding)
    o, ci, kh, kw = weight.shape
    if ci != c:
        raise ValueError(f"weight {list(weight.shape)} does not fit {c} input channels")
    x = te.placeholder(tuple(input_shape), "uint8", name="data")
    channels = Packing(axis=3, bit_axis=3, word=WORD)         # NHWC -> [B, H, W, bits, C words]
    nhwc = x
    if any(pads) or layout == "NCHW":        # the padded NHWC view of the input, inlined into the packing
        top, left, bottom, right = pads
        nhwc = te.compute((b, h + top + bottom, w + left + right, c), lambda bi, i, j, ch: depthwise.padded_value(
            x, layout, bi, ch, i - top, j - left), name="padded")
    planes = channels.te(nhwc, config.abits, vector=layout == "NHWC", unrolled=layout == "NCHW")
    cw = channels.words(c)

    def window_word(p, plane, t):
        bi, pix = p // (oh * ow), p % (oh * ow)
        return planes[bi, pix // ow * stride[0] + t // (kw * cw), pix % ow * stride[1] + t // cw % kw, plane, t % cw]

    taps = config.weight_codes(weight).transpose(0, 2, 3, 1)                   # [O, KH, KW, C]
    weight_planes = channels.numpy(taps, config.wbits).reshape(o, kh * kw, config.wbits, cw)
    weight_planes = weight_planes.transpose(0, 2, 1, 3).reshape(o, config.wbits, kh * kw * cw)
    kernel = bitserial_kernel(isa, config.abits, config.wbits, config.encoding, kernel_layout) if use_kernel else None
    mod, constants = build(b * oh * ow, x, planes, window_word, weight_planes, (o, kh * kw * c), config, stage, kernel,
                           batch=b if layout == "NCHW" else None)
    out_shape, result_shape = ((b * oh * ow, o), (b, oh, ow, o)) if layout == "NHWC" else ((b, o, oh * ow), (b, o, oh, ow))
    return Built(mod, constants, out_shape, stage.out_dtype, tuple(input_shape), "uint8", result_shape,
                 bitserial_target(isa))
