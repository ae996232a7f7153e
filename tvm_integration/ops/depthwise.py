"""Depthwise int8 conv2d in plain vectorized TIR: one channel per group leaves nothing for a GEMM
tile (one column of 48), so each output is a KH*KW multiply-add in int32, vectorized along the
contiguous axis (channels in NHWC, output columns in NCHW), parallel over output rows."""
from __future__ import annotations

import numpy as np
from tvm import s_tir, te, tirx

from tvm_integration.ops.output_stage import OutputStage, placeholders

VECTOR_WIDTHS = (16, 8, 4, 2, 1)
COLUMNS = (8, 7, 4, 2, 1)     # output columns per register tile, the first that divides the row
# (vector width, output columns) of the register tile, the first whose both divide: the widest vector,
# then the most columns
REGISTER_TILES = tuple((w, c) for w in VECTOR_WIDTHS for c in COLUMNS)


def build(x: te.Tensor, layout: str, weight: np.ndarray, stride, pads, out_hw, stage: OutputStage, pad_value: int = 0,
          tiles=REGISTER_TILES):
    """``(mod, constants, out_shape)``; ``main(data, weights, *stage params, out)``; ``tiles``: the
    register tiles to choose from (REGISTER_TILES' form), for a target with another register file."""
    if stage.residual:
        raise ValueError("a residual add is not fused into a depthwise convolution")
    c, kh, kw = weight.shape[0], weight.shape[2], weight.shape[3]
    oh, ow = out_hw
    if layout == "NCHW":
        b, _, h, wd = x.shape
        shape = (b, c, h + pads[0] + pads[2], wd + pads[1] + pads[3])
        padded = te.compute(shape, lambda n, ch, i, j: padded_value(x, layout, n, ch, i - pads[0], j - pads[1], pad_value), name="pad")
    else:
        b, h, wd, _ = x.shape
        shape = (b, h + pads[0] + pads[2], wd + pads[1] + pads[3], c)
        padded = te.compute(shape, lambda n, i, j, ch: padded_value(x, layout, n, ch, i - pads[0], j - pads[1], pad_value), name="pad")
    # NHWC vectorizes along channels: the weights [KH, KW, C], one vector load per tap (as [C, KH, KW]
    # each tap's vector was 16 byte inserts, 2/3 of the run time); NCHW broadcasts one weight per tap
    nhwc = layout == "NHWC"
    w = te.placeholder((kh, kw, c) if nhwc else (c, kh, kw), "int8", name="weights")
    ry, rx = te.reduce_axis((0, kh), name="ry"), te.reduce_axis((0, kw), name="rx")

    def product(n, ch, y, xx):
        i, j = y * stride[0] + ry, xx * stride[1] + rx
        value = padded[n, ch, i, j] if layout == "NCHW" else padded[n, i, j, ch]
        tap = w[ry, rx, ch] if nhwc else w[ch, ry, rx]
        return te.sum(value.astype("int32") * tap.astype("int32"), axis=[ry, rx])

    values = stage.channel_params(c, 1, 1)
    params = placeholders(values)
    if layout == "NCHW":
        acc = te.compute((b, c, oh, ow), product, name="acc")
        out = te.compute((b, c, oh, ow), lambda n, ch, y, xx: stage.expression(acc[n, ch, y, xx], params, ch, 0),
                         name="output")
    else:
        acc = te.compute((b, oh, ow, c), lambda n, y, xx, ch: product(n, ch, y, xx), name="acc")
        out = te.compute((b, oh, ow, c), lambda n, y, xx, ch: stage.expression(acc[n, y, xx, ch], params, ch, 0),
                         name="output")
    func = te.create_prim_func([x, w, *params.values(), out])
    constants = [np.ascontiguousarray(weight[:, 0].transpose(1, 2, 0) if nhwc else weight[:, 0]), *values.values()]
    return _schedule(func, layout, tiles), constants, (b, c, oh, ow) if layout == "NCHW" else (b, oh, ow, c)


def padded_value(x, layout, n, ch, i, j, pad_value: int = 0):
    h, w = (x.shape[2], x.shape[3]) if layout == "NCHW" else (x.shape[1], x.shape[2])
    value = x[n, ch, i, j] if layout == "NCHW" else x[n, i, j, ch]
    return tirx.if_then_else(tirx.all(i >= 0, i < h, j >= 0, j < w), value, tirx.const(pad_value, x.dtype))


def _schedule(func, layout: str, tiles):
    """Registers hold a tile of up to 8 output columns x one vector of the innermost axis while the
    KH x KW taps accumulate into it; the padding is computed inside the tap loop (inlined), not as a
    separate pass over the input."""
    sch = s_tir.Schedule(func)
    sch.compute_inline(sch.get_sblock("pad"))
    acc = sch.get_sblock("acc")
    n, d1, d2, d3, ry, rx = sch.get_loops(acc)
    extent = int(sch.get(d3).extent)                # NCHW: output columns; NHWC: channels
    width, columns = next((w, c) for w, c in tiles if extent % w == 0 and int(sch.get(d2).extent) % c == 0)
    i0, i1 = sch.split(d3, [None, width])
    j0, j1 = sch.split(d2, [None, columns])
    sch.reorder(n, d1, j0, i0, ry, rx, j1, i1)
    sch.parallel(sch.fuse(n, d1))
    output = sch.get_sblock("output")
    sch.reverse_compute_at(output, i0)
    sch.unroll(j1)
    if width > 1:
        sch.vectorize(i1)
        sch.vectorize(sch.get_loops(output)[-1])
    init = sch.decompose_reduction(acc, ry)
    if width > 1:
        sch.vectorize(sch.get_loops(init)[-1])
    return sch.mod
