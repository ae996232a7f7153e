"""ResNet-18-shaped low-bit networks built in code (issue 16's benchmark), in the QCDQ form Brevitas
exports (QuantizeLinear to an 8-bit container -> Clip to the b-bit range -> DequantizeLinear), with
the numpy integer network they compute.

* the stem (7x7/2 conv, 3 -> 64) and the classifier (global average pool, fully connected) are int8
  (8-bit activations, int8 weights per channel); the stem's output, after the 3x3/2 max pool, is
  already ``abits``-bit;
* every other convolution reads ``abits``-bit unsigned activations (1: binary {0, 1}) and
  ``wbits``-bit weights (1: bipolar ±1, the hybrid encoding; 2: int2 [-2, 1]; 3: int3 [-4, 3]), scaled
  per output channel: the first conv of a basic block (and the 1x1 downsampling conv) writes
  ``abits``-bit (Relu), the second int8; the residual add + Relu writes the ``abits``-bit stream the
  next block reads;
* every scale is a power of two, so the float computation onnxruntime does between DQ and Q is exact
  (and its int8 kernels, onto which its default optimizations fuse the groups, agree with it) but for
  the residual Add, whose float32 sum rounds where its operands' scales lie far apart; the integer
  network below adds in float32 too, so it, onnxruntime and qsynth must agree bit for bit. Output scales are
  chosen on a calibration input so that no layer saturates or vanishes (1-bit: half of the positive
  values quantize to 1).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tvm_integration.bench.int8_models import IR_VERSION

OPSET = 13
U8, S8 = (TensorProto.UINT8, np.uint8), (TensorProto.INT8, np.int8)
WEIGHT_RANGES = {1: (-1, 1), 2: (-2, 1), 3: (-4, 3), 8: (-127, 127)}


def pow2(x: float) -> float:
    """The power of two nearest ``x`` (in log scale)."""
    return float(2.0 ** np.round(np.log2(max(float(x), 2.0 ** -30))))


def conv_int(x: np.ndarray, w: np.ndarray, stride: int, pad: int) -> np.ndarray:
    """Integer NCHW conv2d of ``x`` (zero point removed, zero padding) by OIHW ``w``, exact (float64
    im2col matmul of integers below 2**53)."""
    b, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1
    cols = np.stack([xp[:, :, i:i + stride * oh:stride, j:j + stride * ow:stride]
                     for i in range(kh) for j in range(kw)], axis=2)              # b, c, kh*kw, oh, ow
    out = np.einsum("bckhw,ock->bohw", cols, w.reshape(o, c, kh * kw).astype(np.float64), optimize=True)
    return out.astype(np.int64)


@dataclass
class Tensor:
    """A quantized activation: its ONNX name (the float DQ output), integers, scale, zero point, range."""
    name: str
    q: np.ndarray
    scale: float
    zero_point: int
    lo: int
    hi: int


def added_in_float32(a: Tensor, b: Tensor) -> np.ndarray:
    """The float Add of two dequantized tensors as ONNX computes it, in float32: where their scales
    lie more than 2**24 apart the sum rounds (a tensor whose layer all but vanished, beside another)."""
    def dequantized(t):
        return (t.q - t.zero_point).astype(np.float32) * np.float32(t.scale)
    return (dequantized(a) + dequantized(b)).astype(np.float64)


@dataclass
class _Builder:
    abits: int
    wbits: int
    rng: np.random.Generator
    nodes: list = field(default_factory=list)
    inits: list = field(default_factory=list)
    count: int = 0

    def fresh(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}_{self.count}"

    def init(self, array: np.ndarray, prefix: str = "c") -> str:
        name = self.fresh(prefix)
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def node(self, op: str, inputs: list[str], name: str = "", **attrs) -> str:
        out = self.fresh(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], name=name or out, **attrs))
        return out

    # -- quantization ------------------------------------------------------------------------------
    def quantize(self, y: str, values: np.ndarray, scale: float, zero_point: int, lo: int, hi: int,
                 relu: bool) -> Tensor:
        """``y`` (float, whose exact value is ``values``) -> Q -> Clip (when narrower than the
        container) -> DQ; the integers as onnxruntime computes them (half to even, exact)."""
        dtype, np_dtype = U8 if lo >= 0 else S8
        info = np.iinfo(np_dtype)
        low = max(lo, zero_point) if relu else lo
        q = np.clip(np.round(values / scale) + zero_point, low, hi).astype(np.int64)
        if relu:
            y = self.node("Relu", [y])
        s, z = self.init(np.float32(scale), "scale"), self.init(np.array(zero_point, np_dtype), "zp")
        x = self.node("QuantizeLinear", [y, s, z])
        if (lo, hi) != (info.min, info.max):
            x = self.node("Clip", [x, self.init(np.array(lo, np_dtype)), self.init(np.array(hi, np_dtype))])
        return Tensor(self.node("DequantizeLinear", [x, s, z]), q, scale, zero_point, lo, hi)

    def output_scale(self, values: np.ndarray, lo: int, hi: int, zero_point: int, relu: bool) -> float:
        """A power-of-two scale for ``values``: 1-bit, the median positive value quantizes to 1;
        wider, the 99.9th percentile of the magnitudes fills the range."""
        v = np.maximum(values, 0) if relu else values
        if hi - lo == 1:
            positive = values[values > 0]
            return pow2(2 * np.median(positive)) if positive.size else 1.0
        top = np.percentile(np.abs(v), 99.9)
        return pow2(max(top, 1e-6) / max(hi - zero_point, zero_point - lo))

    # -- layers ------------------------------------------------------------------------------------
    def weights(self, shape: tuple, bits: int) -> tuple[np.ndarray, np.ndarray]:
        """(integer weights in the declared range of ``bits``, a power-of-two scale per output channel)."""
        lo, hi = WEIGHT_RANGES[bits]
        if bits == 1:
            w = self.rng.choice([-1, 1], shape)
        elif bits == 8:
            fan_in = int(np.prod(shape[1:]))
            w = np.clip(np.round(self.rng.standard_normal(shape) * 40), lo, hi).astype(np.int64)
            return w, np.full(shape[0], pow2(np.sqrt(2.0 / fan_in) / 40), np.float32)
        else:
            w = self.rng.integers(lo, hi + 1, shape)
        fan_in = int(np.prod(shape[1:]))
        return w, (2.0 ** -self.rng.integers(2, 5, shape[0]) * pow2(np.sqrt(2.0 / fan_in))).astype(np.float32)

    def dq_weight(self, w: np.ndarray, scale: np.ndarray, bits: int) -> str:
        lo, hi = WEIGHT_RANGES[bits]
        ints = self.init(w.astype(np.int8), "w")
        if bits < 8:
            ints = self.node("Clip", [ints, self.init(np.int8(lo)), self.init(np.int8(hi))])
        return self.node("DequantizeLinear", [ints, self.init(scale, "w_scale"),
                                              self.init(np.zeros(len(scale), np.int8))], axis=0)

    def conv(self, x: Tensor, cout: int, k: int, stride: int, bits: int, out: str, name: str) -> Tensor:
        """conv (+ Relu when ``out`` is "act") -> Q: ``out`` "act" (the abits-bit stream), "u8" or "s8"."""
        cin = x.q.shape[1]
        w, w_scale = self.weights((cout, cin, k, k), bits)
        depth = cin * k * k
        spread = int(np.sqrt(depth))                     # about the accumulator's spread on random codes
        bias = self.rng.integers(-spread, spread + 1, cout)
        acc_scale = (np.float32(x.scale) * w_scale).astype(np.float32)
        b = self.node("DequantizeLinear", [self.init(bias.astype(np.int32), "b"), self.init(acc_scale, "b_scale"),
                                           self.init(np.zeros(cout, np.int32))], axis=0)
        y = self.node("Conv", [x.name, self.dq_weight(w, w_scale, bits), b], name=name, kernel_shape=[k, k],
                      strides=[stride, stride], pads=[k // 2] * 4)
        acc = conv_int(x.q - x.zero_point, w, stride, k // 2) + bias[None, :, None, None]
        values = acc * acc_scale.astype(np.float64)[None, :, None, None]
        return self.requantized(y, values, out)

    def requantized(self, y: str, values: np.ndarray, out: str) -> Tensor:
        relu = out in ("act", "u8")
        lo, hi, zp = {"act": (0, (1 << self.abits) - 1, 0), "u8": (0, 255, 0), "s8": (-128, 127, 0)}[out]
        return self.quantize(y, values, self.output_scale(values, lo, hi, zp, relu), zp, lo, hi, relu)


def resnet_lowbit(abits: int, wbits: int, size: int = 224, widths=(64, 128, 256, 512), classes: int = 1000,
                  seed: int = 18) -> tuple[onnx.ModelProto, np.ndarray, np.ndarray]:
    """(the QCDQ model, its calibration input, the logits the integer network computes on it).
    Input ``[1, 3, size, size]`` float, output ``[1, classes]`` float."""
    rng = np.random.default_rng(seed)
    g = _Builder(abits, wbits, rng)
    x_in = rng.standard_normal((1, 3, size, size)).astype(np.float32)
    x = g.quantize("input", x_in.astype(np.float64), 2.0 ** -5, 128, 0, 255, relu=False)
    x = g.conv(x, widths[0], 7, 2, 8, "act", "stem")
    pooled = g.node("MaxPool", [x.name], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    q = np.pad(x.q, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-1)
    oh = (q.shape[2] - 3) // 2 + 1
    q = np.max([q[:, :, i:i + 2 * oh:2, j:j + 2 * oh:2] for i in range(3) for j in range(3)], axis=0)
    x = g.quantize(pooled, (q - x.zero_point) * x.scale, x.scale, x.zero_point, x.lo, x.hi, relu=False)
    for stage, width in enumerate(widths):
        for block in range(2):
            stride = 2 if stage > 0 and block == 0 else 1
            name = f"layer{stage + 1}.{block}"
            y = g.conv(x, width, 3, stride, wbits, "act", f"{name}.conv1")
            y = g.conv(y, width, 3, 1, wbits, "s8", f"{name}.conv2")
            shortcut = x if stride == 1 and x.q.shape[1] == width else \
                g.conv(x, width, 1, stride, wbits, "s8", f"{name}.downsample")
            total = g.node("Add", [y.name, shortcut.name])
            values = added_in_float32(y, shortcut)
            x = g.requantized(total, values, "act")
    # classifier: global average pool to u8, fully connected int8
    gap = g.node("GlobalAveragePool", [x.name])
    mean = ((x.q - x.zero_point) * x.scale).mean(axis=(2, 3), keepdims=True)
    # scale: the stream's over 2**(8 - abits), so the largest mean fits u8 and no mean is a rounding tie
    # (n steps / 49 * 2**k is never m + 1/2), in float32 (onnxruntime) as in float64 (here)
    pooled = g.quantize(gap, mean, x.scale * 2.0 ** -(8 - abits), 0, 0, 255, relu=False)
    # Flatten between DQ and Q of the same parameters (as onnxruntime's quantizer writes it), so the
    # fully connected layer reads a quantized tensor (DQ -> Flatten -> Gemm onnxruntime runs in float)
    flat_t = g.quantize(g.node("Flatten", [pooled.name]), (pooled.q.reshape(1, -1) - pooled.zero_point) * pooled.scale,
                        pooled.scale, pooled.zero_point, pooled.lo, pooled.hi, relu=False)
    flat = flat_t.name
    w, w_scale = g.weights((classes, widths[-1]), 8)
    acc_scale = (np.float32(flat_t.scale) * w_scale).astype(np.float32)
    bias = rng.integers(-64, 65, classes)
    b = g.node("DequantizeLinear", [g.init(bias.astype(np.int32), "b"), g.init(acc_scale, "b_scale"),
                                    g.init(np.zeros(classes, np.int32))], axis=0)
    y = g.node("Gemm", [flat, g.dq_weight(w, w_scale, 8), b], name="fc", transB=1)
    acc = (flat_t.q - flat_t.zero_point) @ w.T + bias[None]
    logits = g.requantized(y, acc * acc_scale.astype(np.float64)[None], "s8")
    graph = helper.make_graph(g.nodes, f"resnet_a{abits}w{wbits}",
                              [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, size, size])],
                              [helper.make_tensor_value_info(logits.name, TensorProto.FLOAT, [1, classes])],
                              g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model)
    return model, x_in, ((logits.q - logits.zero_point) * logits.scale).astype(np.float32)
