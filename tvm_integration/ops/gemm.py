"""The tensorized GEMM that dense and conv2d both are: per image b and group g,
``acc[b, g, p, n] = sum_k A[b, g, p, k] * W[g, n, k]``, then the output stage.

* A (``pack``) is built at run time inside the operator from the input tensor by the operator's own
  index map (dense: the rows; conv2d: im2col with the padding), shifted to the kernel's A type
  (packing.activation_shift), zero-padded to whole tiles; it is computed per row tile, right before the tile's K loops.
* W arrives packed into the kernel's layout (kernels/packing.py), zero-padded to whole tiles.
* The output stage (output_stage.py) runs per (row tile, column tile) right after its K loop, while
  the int32 tile is in cache, and writes only the real rows and columns: ``rows`` order
  ``out[b, p, g, n]`` (dense, NHWC) or ``channels`` order ``out[b, g, n, p]`` (NCHW).

Schedule: rows tile ``mr``, columns tile ``nr``, K step ``k`` of the tile kernel; loops
``(b, g, p0) | n0 | k0 | p1 n1 k1``, the fused outer loop parallel, the inner three tensorized with the
kernel's TensorIntrin (its LLVM IR imported and inlined). With ``kernel=None`` the same tiling runs
plain TIR (``p1`` unrolled, LLVM vectorizing), to show what the kernel buys.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from tvm import s_tir, te, tirx
from tvm.ir import Range
from tvm.s_tir import analysis

from tvm_integration.kernels.int8 import Kernel, Prefetch
from tvm_integration.ops.output_stage import OutputStage, placeholders
from tvm_integration.kernels.packing import (activation_shift, correction, kernel_activation, pack_weights, clamped,
                                             round_up, shift_compensation)

ORDERS = ("rows", "channels")
VECTOR_BYTES = 64                # one AVX-512 register: the packing's widest copy
RESIDUAL_ROWS_WEIGHTS = 1 << 20  # weights_outer: a residual add keeps the rows outer up to 1 MB of weights


@dataclass(frozen=True)
class Tile:
    """The register tile a schedule is built around: the kernel's, or a plain TIR one of the same shape."""
    mr: int
    nr: int
    k: int
    group: int = 4           # B's k group (packing.pack_weights): four bytes, or two int16
    b_dtype: str = "int8"

    @staticmethod
    def of(kernel: Kernel) -> "Tile":
        return Tile(kernel.spec.mr, kernel.spec.nr, kernel.spec.k, kernel.group, kernel.b_dtype)

    def b_range(self, kernel: Kernel | None) -> tuple[int, int]:
        """The weights the tile takes as they are: ``kernel``'s proved range, or for plain TIR its B
        type's (9-bit weights on a byte tile's shape are clamped and corrected all the same)."""
        return kernel.b_range if kernel else (int(np.iinfo(self.b_dtype).min), int(np.iinfo(self.b_dtype).max))

    def packed_weights(self, weights: np.ndarray) -> np.ndarray:
        """``weights[g, n, k]`` in the tile's layout (packing.pack_weights)."""
        return pack_weights(weights, self.nr, self.k, self.group, self.b_dtype)


@dataclass(frozen=True)
class Gemm:
    """Sizes: ``batch`` images, ``groups``, ``rows`` (output pixels per image; dense: M),
    ``cols`` and ``depth`` per group."""
    batch: int
    groups: int
    rows: int
    cols: int
    depth: int

    def padded(self, tile: Tile) -> tuple[int, int, int]:
        return round_up(self.rows, tile.mr), round_up(self.cols, tile.nr), round_up(self.depth, tile.k)


def build(gemm: Gemm, data: te.Tensor, element, weights: np.ndarray, stage: OutputStage, order: str,
          tile: Tile, kernel: Kernel | None, depth_loops: tuple[int, ...] = (), fold_run: int | None = None,
          raw_element=None):
    """The scheduled module and its constant arguments: ``(mod, params)``; the compiled function is
    called as ``main(data, *params, out)``, or ``main(data, *params, residual, out)`` when the stage
    adds a residual (``residual`` in the output's shape). ``element(b, g, p, k)`` is A's element (input dtype; called
    only for p < rows, k < depth), read from ``data`` or a tensor computed from it. ``weights``: int8
    ``[groups, cols, depth]``. ``depth_loops``: the extents k is made of, outermost first (conv2d:
    kh, kw, c), so that the packing's address arithmetic folds into loops when c is whole k steps.
    ``fold_run``: the bytes of the input each run of the ``fold`` stage (conv2d.py) copies.
    ``raw_element``: ``element`` read from ``data`` itself (default: ``element``), for the output stage's
    correction of weights the tile does not admit (packing.clamped), which no packing stage may feed."""
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    pp, npad, kp = gemm.padded(tile)
    a_dtype = kernel.a_dtype if kernel else "uint8"

    def a_value(b, g, p, k):
        inside = tirx.all(p < gemm.rows, k < gemm.depth)
        return tirx.if_then_else(inside, kernel_activation(element(b, g, p, k), str(data.dtype), a_dtype), tirx.const(0, a_dtype))

    # A row-major, each row tile's mr rows of the whole depth: the packing copies whole input runs
    # (a conv's window row of channels) at once.
    packed = te.compute((gemm.batch, gemm.groups, pp // tile.mr, tile.mr, kp),
                        lambda b, g, p0, p1, kk: a_value(b, g, p0 * tile.mr + p1, kk), name="pack")
    q = tile.group
    w = te.placeholder((gemm.groups, npad // tile.nr, kp // q, tile.nr, q), tile.b_dtype, name="weights")
    k = te.reduce_axis((0, kp), name="k")
    acc = te.compute((gemm.batch, gemm.groups, pp, npad), lambda b, g, p, n: te.sum(
        packed[b, g, p // tile.mr, p % tile.mr, k].astype("int32") * w[g, n // tile.nr, k // q, n % tile.nr, k % q].astype("int32"), axis=k),
        name="gemm")

    weights, fix = clamped(weights, *tile.b_range(kernel), npad)
    values, params = stage_params(stage, weights, npad, activation_shift(str(data.dtype), a_dtype), fix)

    def total(b, g, p, n):
        return acc[b, g, p, n] + correction(params, g, n, lambda k: (raw_element or element)(b, g, p, k).astype("int32"))
    if order == "rows":
        out, residual = output_tensor((gemm.batch, gemm.rows, gemm.groups, gemm.cols), stage, params,
                                      lambda b, p, g, n: (total(b, g, p, n), g, n))
    elif stage.residual:
        raise ValueError("a residual add is fused in the rows (NHWC, dense) order only")
    else:
        out, residual = output_tensor((gemm.batch, gemm.groups, gemm.cols, gemm.rows), stage, params,
                                      lambda b, g, n, p: (total(b, g, p, n), g, n))
    func = te.create_prim_func([data, w, *params.values(), *([residual] if residual is not None else []), out])
    constants = [tile.packed_weights(weights), *values.values()]
    exact = kp == gemm.depth and depth_loops and depth_loops[-1] % tile.k == 0
    return schedule(func, tile, kernel, order, depth_loops if exact else (), fold_run,
                    weights_outer(pp, npad, constants[0].nbytes if stage.residual else 0)), constants


def stage_params(stage: OutputStage, weights: np.ndarray, npad: int, shift: int, fix: dict | None = None):
    """The output stage's per-channel constants ``[groups, npad]`` and their placeholders; with
    activations shifted by ``shift`` (packing.activation_shift) the bias carries its compensation;
    ``fix``: the sparse correction's constants (packing.clamped), after them."""
    groups, cols, _ = weights.shape
    values = stage.channel_params(groups, cols, npad) | (fix or {})
    if shift:
        values["bias"] = values["bias"] + np.pad(shift_compensation(weights, shift), ((0, 0), (0, npad - cols)))
    return values, placeholders(values)


def output_tensor(shape, stage: OutputStage, params: dict, accumulator):
    """The ``output`` stage over ``shape``, and the residual tensor it reads (``None`` without a
    residual add); ``accumulator(*index)`` gives (int32 value, group, column) at an output index."""
    residual = te.placeholder(shape, stage.residual.residual_dtype, name="residual") if stage.residual else None

    def value(*index):
        acc, g, n = accumulator(*index)
        return stage.expression(acc, params, g, n, residual[index] if residual is not None else None)
    return te.compute(shape, value, name="output"), residual


def tensorize_tile(sch, outer, loop, intrin: str, kernel: Kernel):
    """Tensorize ``loop`` (the tile's rows) with ``intrin`` and have LLVM inline the kernel's IR.
    An intrinsic that does not read C (``product_functions``, ``direct_functions``: the kernel starts
    from zeroed tiles) leaves the tensorized block without its init: tensorize replaces only the body
    of the block that blockize makes, and the init it keeps zeroed C in memory before every call (a
    4 KB memset per 32x32 AMX tile). AMX host, CPU time, one thread, least of 100, with -> without:
    C2 77.6 -> 73.6 us, C3 31.1 -> 28.7, C4 41.9 -> 39.1, C6 67.4 -> 64.7, C12 134.6 -> 125.4; the VNNI
    tiles within 1%."""
    block = sch.blockize(loop)
    sch.tensorize(block, intrin)
    desc = s_tir.TensorIntrin.get(intrin).desc.body.block
    if not any(read.source.same_as(desc.writes[0].source) for read in desc.reads):
        _drop_init(sch, block)
    sch.annotate(outer, "pragma_import_llvm", kernel.llvm_ir)


def _drop_init(sch, block) -> None:
    """``block`` without its init."""
    if sch.get(block).init is not None:
        replace_block(sch, block, init=None)


def replace_block(sch, block, **fields) -> None:
    """``block`` with some of its fields (s_tir.SBlock's arguments) replaced: the schedule has no primitive
    for such edits, so the block is replaced in its state."""
    old = sch.get(block)
    kept = ("iter_vars", "reads", "writes", "name_hint", "body", "init", "alloc_buffers", "match_buffers",
            "annotations")
    new = s_tir.SBlock(**{**{name: getattr(old, name) for name in kept}, **fields})
    sch.state.replace(sch.get_sref(block), new, {old: new})


def starting_from(func, reduction: str, start: str):
    """``func`` whose block ``reduction`` starts from block ``start``'s values rather than 0: te.sum's
    ``init`` says so, but te.create_prim_func keeps a constant init only (TVM 0.27)."""
    sch = s_tir.Schedule(func)
    block = sch.get_sblock(reduction)
    old, values = sch.get(block), sch.get(sch.get_sblock(start)).writes[0].source
    index = old.init.indices
    read = tirx.BufferRegion(values, [Range.from_min_extent(i, 1) for i in index])
    replace_block(sch, block, reads=[*old.reads, read],
                  init=tirx.BufferStore(old.init.buffer, tirx.BufferLoad(values, index), index))
    return sch.mod["main"]


def reads_of_body(sch, block) -> None:
    """``block``'s reads as its body (and init) has them: after decompose_reduction of a reduction
    ``starting_from`` values, its init's reads stayed with the update (whose tile description reads C,
    A and B only) and the init block has none."""
    func = sch.mod["main"]
    buffers = {b: b for b in [*func.params, *func.body.block.alloc_buffers]}     # a buffer is its var (TVM 0.27)
    reads, _ = analysis.get_sblock_read_write_region(sch.get(block), buffers)
    replace_block(sch, block, reads=reads)


def run_pieces(run: int, vectors: tuple[int, ...]) -> list[int]:
    """A packing run's copy loop split into register-sized pieces, the widest of ``vectors`` that
    divides it (``[pieces, piece]``), or whole: LLVM built a longer vector byte by byte (x86: vpinsrb,
    a 1x1 layer of 192 channels at 28x28 on the AMX tile 98 us; AArch64: a 576-byte run through the
    stack, MobileNetV2 on Cortex-A72 56.0 -> 55.4 Mcycles in llvm-mca)."""
    piece = next((v for v in vectors if run % v == 0), run)
    return [run // piece, piece] if run > piece else [run]


def weights_outer(rows: int, cols: int, residual_weights: int = 0) -> bool:
    """Whether a GEMM of ``rows`` (padded) activation rows and ``cols`` weight columns runs its column
    tiles outermost (4x more columns than rows: the deep layers, dense), so that each tile's weights
    are read from memory once for every row tile (ResNet-18's last 3x3 layer streamed its 2.4 MB of
    weights once per 32-row tile) and the threads split the columns (a dense layer has one row tile).
    Measured on the AMX host (CPU time, one thread): C12 (64 rows, 512 columns) 176 -> 141 us; C9
    (224 rows, 256 columns; both operands in L2) 107 -> 122 us, hence the 4x.

    ``residual_weights``: with a residual add fused, the weights' bytes. That order reads the residual
    and writes the output a column tile's width at a time, strided by the output's row; up to
    ``RESIDUAL_ROWS_WEIGHTS`` of weights the rows' order, which re-reads them per row tile, costs less.
    Zen 3, the w16 tiles, CPU time, one thread, 1x1 layers with the add, columns outer -> rows outer:
    ResNet-50's 1024 x 256 at 14x14 (512 KB of int16 weights) 1.15 -> 0.76 ms and its stride-2 1024 x 512
    from 28x28 (1 MB) 2.08 -> 1.44 (without the add 0.69 -> 0.71 and 1.34 -> 1.37). Where the rows' order
    loses, it loses less: 1024 x 384 and 1024 x 512 at 14x14 1.17 -> 1.23 and 1.47 -> 1.52. Larger weights
    keep the columns outer (2048 x 512 at 7x7, 2 MB: 0.71 against 0.74)."""
    return cols >= 4 * rows and not 0 < residual_weights <= RESIDUAL_ROWS_WEIGHTS


def schedule(func, tile: Tile, kernel: Kernel | None, order: str, depth_loops: tuple[int, ...],
             fold_run: int | None = None, weights_outer: bool = False):
    """``weights_outer`` (the function of that name): the column tiles outermost, A then packed whole
    beforehand."""
    sch = s_tir.Schedule(func)
    stages = {sch.get(b).name_hint for b in sch.get_child_blocks(sch.get_sblock("root"))}
    if "view" in stages:
        sch.compute_inline(sch.get_sblock("view"))
    for name in ("pad", "fold"):  # tensors the operator computes from its input before packing
        if name in stages:
            parallel_rows(sch, sch.get_sblock(name), fold_run if name == "fold" else None)
    block = sch.get_sblock("gemm")
    b, g, p, n, k = sch.get_loops(block)
    p0, p1 = sch.split(p, [None, tile.mr])
    n0, n1 = sch.split(n, [None, tile.nr])
    if kernel is None:
        k0, k1 = sch.split(k, [None, tile.k])
        sch.reorder(b, g, p0, n0, k0, p1, n1, k1)
    else:                            # the whole K in one kernel call: p1 n1 k
        sch.reorder(b, g, p0, n0, p1, n1, k)
    if weights_outer:
        sch.reorder(n0, p0)
        outer, inner = sch.fuse(b, g, n0), p0
    else:
        outer, inner = sch.fuse(b, g, p0), n0
    sch.parallel(outer)
    pack = sch.get_sblock("pack")
    if weights_outer:
        sch.parallel(sch.fuse(*sch.get_loops(pack)[:3]))
    else:
        sch.compute_at(pack, outer)
    depth = sch.get_loops(pack)[-1]   # ..., mr rows, the depth
    if int(sch.get(depth).extent) % 2048 == 0:      # rows a multiple of 2 KiB apart would share L1 sets
        sch.storage_align(pack, 0, axis=3, factor=2048, offset=64)
    # k as (kh, kw, c): the input's runs of c channels, one vector copy each; else k steps of the tile
    runs = depth_loops if depth_loops and len(depth_loops) > 1 else (None, tile.k)
    sch.vectorize(sch.split(depth, list(runs[:-1]) + run_pieces(runs[-1], (VECTOR_BYTES,)))[-1])
    output = sch.get_sblock("output")
    sch.reverse_compute_at(output, inner)
    if order == "rows":
        sch.vectorize(sch.get_loops(output)[-1])
    if kernel is None:
        init = sch.decompose_reduction(block, k0)
        sch.vectorize(sch.get_loops(init)[-1])
        sch.reorder(p1, k1, n1)
        sch.unroll(p1)
    else:
        # the row tiles sharing a column tile's weights fetch the next ones (A packed whole: its offset numbers them)
        prefetch = Prefetch(int(sch.get(p0).extent), "A") if weights_outer else None
        tensorize_tile(sch, outer, p1, kernel.product_intrin(int(sch.get(k).extent) // tile.k, prefetch), kernel)
    return sch.mod


def parallel_rows(sch, block, vector: int | None = None):
    """An elementwise stage: parallel over its two outer axes, its last axis vectorized, in pieces of
    ``vector`` lanes when given: the fold's contiguous runs (a gather over a whole row takes LLVM
    minutes to compile)."""
    loops = sch.get_loops(block)
    sch.parallel(sch.fuse(*loops[:2]))
    if vector:
        loops = sch.split(loops[-1], [None, vector])
    sch.vectorize(loops[-1])
