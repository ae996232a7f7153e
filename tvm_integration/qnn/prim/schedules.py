"""Schedules for every PrimFunc of a model that is not a tensorized operator (quantize, dequantize,
add, pools, reshapes, reference convolutions): nothing runs TVM's default serial loops.

Producers that can be inlined into their consumer are; each remaining block runs its spatial loops
fused and parallel, and, without a reduction, its innermost 16 (or 8, 4) iterations vectorized (a
last axis of 17-64 that 16 does not divide: that whole axis);
with a reduction, the reduction stays innermost, serial (but for an NHWC MEAN's channel sums: the channels
innermost, vectorized, under the H and W loops; an NHWC max pool's rows and columns partitioned, its
windows inside the input untested).
An 8-bit lookup on a target with AVX-512 VBMI is rewritten with vpermi2b instead, on AArch64 with tbl and
tbx (table_lookup.py), a channel gather run by run (gather.py), the image's quantize on AArch64 without a
division (neon_quantize.py), a TFLite MUL on AArch64 in XNNPACK's instructions (neon_mul.py), a QLinearSoftmax's
rows summed together (softmax_rows.py).
"""
from __future__ import annotations

from tvm import s_tir, tirx
from tvm.target import Target

from tvm_integration.qnn.prim import gather, neon_mul, neon_quantize, softmax_rows, table_lookup

VECTOR = (16, 8, 4)
# the PrimFuncs bind.py leaves as they are: scheduled already (here, or a float op's own), or a
# tensorized operator (bind.py, bitserial_layer.py)
SCHEDULED = "qnn.scheduled"
TENSORIZED = "qnn.tensorized"


def schedule(func: tirx.PrimFunc, target: Target | None = None) -> tirx.PrimFunc:
    """``func`` scheduled for the LLVM ``target`` the model is built for (its features decide the
    lookup's form); None (quant.evaluate's compile-time tables): the portable schedule."""
    if target is not None and table_lookup.applies(func, target):
        return table_lookup.vectorized(func, target).with_attr(SCHEDULED, True)
    if target is not None and neon_mul.applies(func, target):
        return neon_mul.vectorized(func).with_attr(SCHEDULED, True)
    if target is not None and neon_quantize.applies(func, target):
        return neon_quantize.scheduled(func).with_attr(SCHEDULED, True)
    if gather.applies(func):
        return gather.scheduled(func).with_attr(SCHEDULED, True)
    if softmax_rows.applies(func):
        return softmax_rows.scheduled(func).with_attr(SCHEDULED, True)
    sch = s_tir.Schedule(func)
    blocks = sch.get_child_blocks(sch.get_sblock("root"))
    for block in blocks[:-1]:
        try:
            sch.compute_inline(block)
        except s_tir.ScheduleError:       # a reduction or a multiply-used producer: scheduled on its own
            pass
    for block in sch.get_child_blocks(sch.get_sblock("root")):
        if not _nhwc_channel_sums(func, sch, block) and not _nhwc_max_pool(func, sch, block):
            _parallel_vectorized(sch, block)
    return sch.mod["main"].with_attr(SCHEDULED, True)


def _nhwc_channel_sums(func: tirx.PrimFunc, sch, block) -> bool:
    """An NHWC TFLite MEAN's channel sums (arithmetic.channel_sums, [b, c] over H, W) with the channels
    innermost, 16 at a time under the H and W loops: one contiguous vector per step; False if not that
    block. The reduction innermost read one byte per channel at a stride of C (EfficientNetB0's
    112x112x32 MEAN: 0.140 -> 0.013 ms)."""
    attrs = func.attrs or {}
    if attrs.get("qnn.op") != "tflite_mean" or attrs.get("qnn.layout") != "NHWC" or sch.get(block).name_hint != "sum":
        return False
    n, channels, ry, rx = sch.get_loops(block)
    if sch.get(channels).extent.value % VECTOR[0]:
        return False
    outer, lanes = sch.split(channels, [None, VECTOR[0]])
    sch.reorder(outer, ry, rx, lanes)
    sch.parallel(sch.fuse(n, outer))
    sch.vectorize(lanes)
    return True


def _nhwc_max_pool(func: tirx.PrimFunc, sch, block) -> bool:
    """An NHWC max pool (arithmetic.max_pool2d): rows parallel, the channels in vectors innermost, and the
    row and column loops partitioned (``pragma_loop_partition_hint``) so that the windows inside the input
    test none of their taps; False if not that block. Each output pixel tested each tap's window bounds
    (GoogLeNet's ten pools on Cortex-A76's N1 model, llvm-mca Mcycles: 1.99 -> 1.10; its 3x3 stride-1 pool
    over 28x28x480 0.263 -> 0.052)."""
    attrs = func.attrs or {}
    if attrs.get("qnn.op") != "max_pool2d" or attrs.get("qnn.layout") != "NHWC":
        return False
    n, i, j, channels = sch.get_loops(block)
    width = next((w for w in VECTOR if sch.get(channels).extent.value % w == 0), None)
    if width is None:
        return False
    outer, lanes = sch.split(channels, [None, width])
    rows = sch.fuse(n, i)
    sch.parallel(rows)
    for loop in (rows, j):
        sch.annotate(loop, "pragma_loop_partition_hint", 1)
    sch.vectorize(lanes)
    return True


def _parallel_vectorized(sch, block) -> None:
    loops = sch.get_loops(block)
    kinds = [iv.iter_type for iv in sch.get(block).iter_vars]
    spatial = len(kinds) if all(k == 0 for k in kinds) else kinds.index(next(k for k in kinds if k != 0))
    if len(loops) != len(kinds) or spatial == 0:
        return                              # a block under an opaque structure: left as TE wrote it
    extents = [sch.get(loop).extent for loop in loops]
    if spatial == len(kinds) > 2 and all(isinstance(e, tirx.IntImm) for e in extents[-2:]) and \
            extents[-1].value < VECTOR[-1] and extents[-2].value % VECTOR[0] == 0:
        # A few channels innermost (the image written NHWC): vectors along the axis before them,
        # contiguous in the input, instead of a fused axis cut by div/mod per lane (5x slower); the
        # channels of each 16 pixels together, so that their 48 output bytes are written at once
        # (ResNet-18's input quantize, 224x224x3: channels outside the pixels 0.074 ms, inside 0.046)
        *outer, axis, channels = loops
        axis, lanes = sch.split(axis, [None, VECTOR[0]])
        sch.reorder(axis, channels, lanes)
        sch.parallel(sch.fuse(*outer) if len(outer) > 1 else outer[0])
        sch.vectorize(lanes)
        return
    if spatial == len(kinds) > 1 and isinstance(extents[-1], tirx.IntImm) and \
            VECTOR[0] < extents[-1].value <= 4 * VECTOR[0]:
        # 17-64 channels innermost: the whole axis is one vector, contiguous, under scalar outer
        # loops. 16 lanes of the fused axis are each cut by div/mod: gathered where 16 does not
        # divide the channels (MobileNetV2's 24: 40x slower), and per-lane window tests in a max pool
        # (ResNet-18's 3x3 over 112x112x64: 0.073 -> 0.022 ms)
        sch.parallel(sch.fuse(*loops[:-1]) if spatial > 2 else loops[0])
        sch.vectorize(loops[-1])
        return
    if spatial == len(kinds) > 1 and isinstance(extents[-1], tirx.IntImm) and \
            (extents[-1].value % VECTOR[0] or extents[-1].value > 4 * VECTOR[0]) and \
            (width := next((w for w in VECTOR if extents[-1].value % w == 0), None)):
        # more channels innermost than one vector (RegNet's 104 and 440, GoogLeNet's 192-832): the axis
        # itself split into vectors of 16 (or 8, 4), contiguous; lanes of the fused axis were cut by
        # div/mod, a per-channel operand gathered (RegNet-Y-400MF's squeeze-and-excitation scaling,
        # 28x28x104: 0.172 ms), and each lane tested a max pool's window on its own (GoogLeNet's 3x3
        # stride-1 pools over 14x14x832 and 28x28x480 on Zen 3: 2.70 and 1.96 ms, 8.98 ms of its 25.4)
        *outer, channels = loops
        channels, lanes = sch.split(channels, [None, width])
        sch.parallel(sch.fuse(*outer, channels))
        sch.vectorize(lanes)
        return
    fused = sch.fuse(*loops[:spatial]) if spatial > 1 else loops[0]
    extent = sch.get(fused).extent
    if spatial == len(kinds) and isinstance(extent, tirx.IntImm):
        width = next((w for w in VECTOR if extent.value % w == 0 and extent.value > w), None)
        if width:
            outer, inner = sch.split(fused, [None, width])
            sch.parallel(outer)
            sch.vectorize(inner)
            return
    sch.parallel(fused)
