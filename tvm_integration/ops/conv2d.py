"""int8 conv2d, NCHW or NHWC, any kernel size, stride, padding and groups: x u8 or s8, weights s8
OIHW (or 9-bit, int16: packing.NINE_BITS), ``out = stage(conv)``.

On hosts whose exact int8 tiles are int16 rows (no VNNI), 3x3 stride-1 NHWC convolutions take
Winograd's F(2x2, 3x3) in integers (winograd.py), exact, with 2.25x fewer multiplies, and the wider
3x3 stride-2 ones its split into even and odd rows and columns, 1.44x fewer. Other ordinary
NHWC convolutions with a window wider than 1x1 read their input in place (direct.py) unless
that computes too many more output pixels than the im2col GEMM (``reads_in_place``). The others,
grouped ones included, are the tensorized GEMM (gemm.py) over an im2col packing done at run time: row
p = output pixel (oh, ow), k = (kh, kw, c) with the channels innermost, and zero where the window
leaves the padded input. Depthwise convolutions (one input and one output channel per group) would
fill one column of a 48-column tile, so they take depthwise.py's direct vectorized TIR.
"""
from __future__ import annotations

import numpy as np
from tvm import te

from isa_specs import host
from isa_specs.features import REGISTER_FILES
from tvm_integration.kernels import int8, selection, tuning
from tvm_integration.ops.operator import Built, Operator
from tvm_integration.ops import depthwise, direct, winograd
from tvm_integration.ops.gemm import Gemm, Tile, build
from tvm_integration.ops.output_stage import OutputStage
from tvm_integration.kernels.packing import conv_weight_matrix, folded_weight_matrix, round_up, weights_error

LAYOUTS = ("NCHW", "NHWC")


def pair(v) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else tuple(v)


def output_size(size, kernel, strides, padding) -> tuple:
    """(OH, OW) of a ``kernel`` (KH, KW) window moved by ``strides`` over an input of ``size`` (H, W)
    padded by ``padding`` (top, left, bottom, right): every convolution's and pool's, integers or TIR
    expressions alike."""
    (h, w), (kh, kw), (sh, sw), (pt, pl, pb, pr) = size, kernel, strides, padding
    return (h + pt + pb - kh) // sh + 1, (w + pl + pr - kw) // sw + 1


def conv_geometry(input_shape, layout, weight_shape, stride, padding):
    """((B, C, H, W), (OH, OW), (pad_top, pad_left, pad_bottom, pad_right)); padding is an int,
    (ph, pw) or (top, left, bottom, right)."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be NCHW or NHWC, got {layout!r}")
    b, c, h, w = input_shape if layout == "NCHW" else (input_shape[0], input_shape[3], *input_shape[1:3])
    pads = (padding,) * 4 if isinstance(padding, int) else tuple(padding) * (2 if len(padding) == 2 else 1)
    kh, kw = weight_shape[2:]
    oh, ow = output_size((h, w), (kh, kw), stride, pads)
    if oh < 1 or ow < 1:
        raise ValueError(f"a {kh}x{kw} kernel does not fit the padded {h}x{w} input")
    return (b, c, h, w), (oh, ow), pads


def conv2d(weight: np.ndarray, input_shape: tuple[int, ...], layout: str = "NCHW", stride=1, padding=0,
           groups: int = 1, data_dtype: str = "uint8", stage: OutputStage = OutputStage(), isa: str = "host",
           use_kernel: bool = True, pad_value: int = 0, kernel=None, in_place: bool | None = None,
           use_winograd: bool | None = None) -> Operator:
    """Compile a conv2d for inputs of ``input_shape`` (in ``layout``); ``use_kernel=False``: the same
    schedule in plain TIR; ``pad_value``: what the padding holds (the input's zero point)."""
    built = build_conv2d(weight, input_shape, layout, stride, padding, groups, data_dtype, stage, isa, use_kernel,
                         pad_value, kernel, in_place, use_winograd)
    return built.compile()


def reads_in_place(kernel, weight_shape, input_shape, layout: str, stride, padding, groups: int) -> bool:
    """Whether the conv2d reads its input in place (direct.py) with ``kernel``'s tile: where the direct
    GEMM applies and computes at most the kernel kind's ``direct.PIXELS_LIMIT`` times im2col's pixels
    (``direct.pays``)."""
    stride, tile = pair(stride), Tile.of(kernel)
    (_, c, _, w), out_hw, pads = conv_geometry(input_shape, layout, weight_shape, stride, padding)
    limit = direct.PIXELS_LIMIT.get((kernel.spec.isa, kernel.spec.types))
    return (direct.applies(tile, weight_shape, c, layout, groups)
            and direct.pays(tile, w, pads, weight_shape[3], stride[1], out_hw, limit))


def space_to_depth(weight_shape, channels: int, stride: tuple[int, int], k_step: int) -> tuple[int, int]:
    """The input folding (fh, fw) that makes a strided convolution's window rows longest: folding
    each fh x fw block of pixels into channels turns a stride-s conv into a stride-1 one on s*s times
    the channels (a 7x7 stride-2 stem on 3 channels: 4x4 taps on 12), whose window rows of kw/s
    pixels run whole K steps instead of 21 useful bytes in 32. (1, 1) unless that packs more of the
    weights' useful bytes per K step."""
    kh, kw = weight_shape[2:]

    def useful(fh, fw):
        return kh * kw * channels / (-(-kh // fh) * round_up(-(-kw // fw) * channels * fh * fw, k_step))
    return max([(1, 1), stride], key=lambda f: (useful(*f), f == (1, 1)))


def chosen_tiles(weight: np.ndarray, input_shape: tuple[int, ...], layout: str = "NCHW", stride=1, padding=0,
                 groups: int = 1, data_dtype: str = "uint8", isa: str = "host", kernel=None,
                 use_winograd: bool | None = None) -> tuple[int8.Kernel, int8.Kernel | None]:
    """The tiles build_conv2d takes for a convolution that is not depthwise (its arguments): the int8
    tile (``kernel``, else the tuning log's or least-padding one) and the s16 tile of winograd.py
    where the convolution runs by Winograd, else None (also what legalize.py tells the low-bit rule)."""
    stride = pair(stride)
    (_, c, _, _), (oh, ow), pads = conv_geometry(input_shape, layout, weight.shape, stride, padding)
    o, cg, kh, kw = weight.shape
    key = tuning.conv2d_key(input_shape, layout, weight.shape, stride, pads, groups, data_dtype)
    depth = cg * kh * kw
    kernel = kernel or tuning.choose(key, selection.candidates_for(weight, isa, groups),
                                     oh * ow, o // groups, depth=depth)
    tiles = -(-oh // 2) * -(-ow // 2)
    by_default = winograd.pays(kernel) and (stride == (1, 1) or winograd.strided_pays(c, tiles))
    if (by_default if use_winograd is None else use_winograd) and winograd.applies(
            weight, c, layout, stride, groups, data_dtype):
        return kernel, winograd.choose_kernel(kernel.spec.isa, tiles, o, c)
    return kernel, None


def build_conv2d(weight: np.ndarray, input_shape: tuple[int, ...], layout: str = "NCHW", stride=1, padding=0,
                 groups: int = 1, data_dtype: str = "uint8", stage: OutputStage = OutputStage(), isa: str = "host",
                 use_kernel: bool = True, pad_value: int = 0, kernel=None, in_place: bool | None = None,
                 use_winograd: bool | None = None) -> Built:
    """The scheduled, not yet compiled conv2d (conv2d's arguments): for a larger module to include.
    ``kernel``: the tile to use (selection.int8_candidates), else the tuning log's or least-padding one.
    ``in_place``: True reads the input in place wherever direct.py applies, False takes im2col, None
    (default) decides by ``reads_in_place``. ``use_winograd``: True takes winograd.py wherever it
    applies and the kernel's ISA has s16 tiles, False never, None (default) where ``winograd.pays``."""
    if why := weights_error(weight, 4, "OIHW"):
        raise ValueError(why)
    if data_dtype not in ("uint8", "int8"):
        raise ValueError(f"data_dtype must be uint8 or int8, got {data_dtype!r}")
    stride = pair(stride)
    (b, c, h, w), (oh, ow), pads = conv_geometry(input_shape, layout, weight.shape, stride, padding)
    o, cg, kh, kw = weight.shape
    if c % groups or o % groups or cg != c // groups:
        raise ValueError(f"weight {list(weight.shape)} does not fit {c} input channels in {groups} groups")
    result_shape = (b, o, oh, ow) if layout == "NCHW" else (b, oh, ow, o)
    x = te.placeholder(tuple(input_shape), data_dtype, name="data")
    if cg == 1 and o == groups:
        registers = REGISTER_FILES["avx512" if "avx512f" in host.x86_features(host.model()) else "avx2"]
        mod, constants, out_shape = depthwise.build(x, layout, weight, stride, pads, (oh, ow), stage, pad_value,
                                                    depthwise.fitting(depthwise.REGISTER_TILES, registers))
        return Built(mod, constants, out_shape, stage.out_dtype, input_shape, data_dtype, result_shape,
                     selection.int8_target())

    kernel, s16 = chosen_tiles(weight, input_shape, layout, stride, padding, groups, data_dtype, isa, kernel,
                               use_winograd)
    if use_kernel and s16:
        mod, constants = winograd.build(x, weight, pads, (oh, ow), stage, s16, pad_value, stride[0])
        return Built(mod, constants, result_shape, stage.out_dtype, input_shape, data_dtype, result_shape,
                     selection.int8_target(s16))
    tile = Tile.of(kernel)
    if (reads_in_place(kernel, weight.shape, input_shape, layout, stride, padding, groups) if in_place is None
            else in_place and direct.applies(tile, weight.shape, c, layout, groups)):
        mod, constants, out_shape = direct.build(x, weight, stride, pads, (oh, ow), stage, tile,
                                                 kernel if use_kernel else None, pad_value)
        return Built(mod, constants, out_shape, stage.out_dtype, input_shape, data_dtype, result_shape,
                     selection.int8_target(kernel))
    hp, wp = h + pads[0] + pads[2], w + pads[1] + pads[3]
    if groups == 1:
        # k runs along one window row at a time: for a fixed kh the KW pixels x C channels are one
        # contiguous run of the padded NHWC input, rounded up to whole K steps, so a 3-channel 7x7
        # stem packs runs of 21 (as 32) bytes instead of dividing every k by 3. The bytes after a
        # run are copied too, whatever the input holds there (the row is padded by that much): their
        # weights are zero, and a copy without a per-byte test stays one vector load (the stem's
        # packing with the test, byte by byte, took 45% of its time).
        fold = space_to_depth(weight.shape, c, stride, tile.k)
        (fh, fw), c2 = fold, c * fold[0] * fold[1]
        kh2, kw2, steps = -(-kh // fh), -(-kw // fw), (stride[0] // fh, stride[1] // fw)
        run = kw2 * c2
        step = round_up(run, tile.k)
        rows_in, cols_in = (oh - 1) * steps[0] + kh2, (ow - 1) * steps[1] + kw2 + -(-(step - run) // c2)
        # Unpadded NHWC, the window never leaving the input: the "padded" input is the input itself,
        # a view inlined into the packing (a copy first took 12-20% of a 1x1 layer's time: C3, C5, C8, C11)
        inside = not any(pads) and rows_in * fh <= h and cols_in * fw <= w and layout == "NHWC"

        def pad_at(bi, i, jc):
            return depthwise.padded_value(x, layout, bi, jc % c, i - pads[0], jc // c - pads[1], pad_value)

        def fold_at(at):
            """pixel (i * fh + di, j * fw + dj) to row i, column j, channel (di, dj, c)"""
            if (fh, fw) == (1, 1):
                return at
            return lambda bi, i, jc: at(bi, i * fh + jc % c2 // (fw * c), jc // c2 * fw * c + jc % (fw * c))
        padded = te.compute((b, rows_in * fh, cols_in * fw * c), pad_at, name="view" if inside else "pad")
        if (fh, fw) != (1, 1):
            padded = te.compute((b, rows_in, cols_in * c2), fold_at(lambda bi, i, jc: padded[bi, i, jc]), name="fold")

        def element(bi, g, p, k, at=lambda bi, i, jc: padded[bi, i, jc]):
            return at(bi, p // ow * steps[0] + k // step, p % ow * steps[1] * c2 + k % step)

        def raw_element(bi, g, p, k):
            return element(bi, g, p, k, fold_at(pad_at))
        matrix = folded_weight_matrix(weight, fold, step)
        depth_loops, fold_run = (kh2, step), fw * c
    else:
        # The input, padded, in NHWC order (a transpose for NCHW): each group's window row is one run
        # of contiguous channels for the packing to copy.
        padded = te.compute((b, hp, wp, c), lambda bi, i, j, ch: depthwise.padded_value(
            x, layout, bi, ch, i - pads[0], j - pads[1], pad_value), name="pad")

        def element(bi, g, p, k, at=lambda bi, i, j, ch: padded[bi, i, j, ch]):
            ih = p // ow * stride[0] + k // (kw * cg)
            iw = p % ow * stride[1] + k // cg % kw
            return at(bi, ih, iw, g * cg + k % cg)

        def raw_element(bi, g, p, k):
            return element(bi, g, p, k, lambda bi, i, j, ch: depthwise.padded_value(
                x, layout, bi, ch, i - pads[0], j - pads[1], pad_value))
        matrix = conv_weight_matrix(weight, groups)
        depth_loops, fold_run = (kh, kw, cg), None

    gemm = Gemm(b, groups, oh * ow, o // groups, matrix.shape[2])
    order = "channels" if layout == "NCHW" else "rows"
    mod, constants = build(gemm, x, element, matrix, stage, order, tile, kernel if use_kernel else None, depth_loops,
                           fold_run, raw_element)
    out_shape = (b, groups, o // groups, oh * ow) if layout == "NCHW" else (b, oh * ow, groups, o // groups)
    return Built(mod, constants, out_shape, stage.out_dtype, input_shape, data_dtype, result_shape,
                 selection.int8_target(kernel))
