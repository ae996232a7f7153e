"""The padded NHWC input of an AArch64 convolution, as rows of bytes: per padded row, in parallel, its left
padding, the input row copied 16 bytes a vector (the last ``row % 16`` one at a time) and its right padding,
or the pad value throughout. A te.extern, since TE's one expression per byte tested every byte against the
borders and TVM's vectorizer gave up on a row whose test is not the same for a vector's lanes: a row of 3
channels (an image) was copied byte by byte where its padding is not the same on both sides (TFLite's stride-2
SAME). llvm-mca Mcycles, TE's pass -> this one, on Cortex-A76's N1 model and the A53: MobileNetV2's 224x224x3
3x3 stride-2 stem padded after the row and column only 1.044 -> 0.835 and 5.990 -> 5.617; ResNet's 7x7
stride-2 stem (padding 3) 5.174 -> 4.951 and 38.63 -> 37.22; a 56x56x64 3x3 4.040 -> 4.028 and 30.27 -> 30.14;
RegNet-Y-400MF's 112x112x48 stride 2 in 6 groups 0.630 -> 0.584 and 4.513 -> 4.406."""
from __future__ import annotations

from tvm import te, tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as IB

VECTOR = 16                 # bytes a copy: one NEON register


def padded_rows(x: te.Tensor, pads, pad_value: int, rows: int, cols: int) -> te.Tensor:
    """``[b, rows, cols * c]``: pixel (i, j) of the padded input at row i, bytes ``j c ..``: ``x``'s pixel (i -
    top, j - left) where inside it, else ``pad_value``; ``pads`` (top, left, ...); ``rows`` and ``cols`` may
    stop short of the bottom and right padding, or of the input."""
    b, h, w, c = (int(d) for d in x.shape)
    top, left = int(pads[0]), int(pads[1])
    width = cols * c
    before = min(left, cols) * c                     # a row's bytes of left padding
    inside = max(0, min(w, cols - left)) * c         # then of the input's row
    pad = tirx.const(pad_value, x.dtype)

    def fcompute(ins, outs):
        with IRBuilder() as ib:
            with IB.parallel(0, b * rows) as row:
                xs = IB.decl_buffer((b * h * w * c,), x.dtype, data=ins[0].data)
                ys = IB.decl_buffer((b * rows * width,), x.dtype, data=outs[0].data)
                n, i = row // rows, row % rows - top

                def run(start: int, stop: int, value):
                    """Bytes ``start`` to ``stop`` of the row: ``value(offset, lanes)``, VECTOR at a time, then
                    the rest one at a time."""
                    whole = start + (stop - start) // VECTOR * VECTOR
                    with IB.serial(0, (whole - start) // VECTOR) as v:
                        at = start + v * VECTOR
                        IB.buffer_store(ys, value(at, VECTOR), [tirx.Ramp(row * width + at, 1, VECTOR)])
                    with IB.serial(whole, stop) as j:
                        IB.buffer_store(ys, value(j, 1), [row * width + j])

                padding = lambda at, lanes: tirx.Broadcast(pad, lanes) if lanes > 1 else pad
                source = (n * h + i) * w * c - before          # byte ``at`` of the row is the input's ``source + at``
                copied = lambda at, lanes: xs[tirx.Ramp(source + at, 1, lanes) if lanes > 1 else source + at]
                with IB.If(tirx.all(i >= 0, i < h)):
                    with IB.Then():
                        run(0, before, padding)
                        run(before, before + inside, copied)
                        run(before + inside, width, padding)
                    with IB.Else():
                        run(0, width, padding)
        return ib.get()
    return te.extern((b, rows, width), [x], fcompute, name="pad", dtype=str(x.dtype))


def input_bytes(x: te.Tensor, pads, pad_value: int, rows: int, cols: int):
    """``byte(bi, i, j)``: byte j of row i of the padded input (``padded_rows``' arguments): ``x`` itself
    where no padding is read and no row read runs past the input's (a 1x1, a convolution without padding),
    else ``padded_rows``' copy."""
    b, h, w, c = (int(d) for d in x.shape)
    if any(int(p) for p in pads) or rows > h or cols > w:
        padded = padded_rows(x, pads, pad_value, rows, cols)
        return lambda bi, i, j: padded[bi, i, j]
    return lambda bi, i, j: x[bi, i, j // c, j % c]
