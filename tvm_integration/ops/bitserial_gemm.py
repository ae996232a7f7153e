"""The bitserial GEMM that bitserial dense and conv2d both are: ``acc[p, n] = sum_k x[p, k] * w[n, k]``
with x unsigned ``abits``-bit activations and w ``wbits``-bit weights, unipolar (unsigned) or
hybrid (odd values in [-(2**wbits - 1), 2**wbits - 1], i.e. ±1 bit-planes), then the output stage.

* The weights are bit-packed once, at compile time (kernels/bitpack.py: K into uint64 words, the
  bit-plane axis after the output channel), and cut into the tile's rows: ``Wp[n0, j, i, t]``.
* The activations are bit-packed at run time inside the operator, once (dense: each row; conv2d:
  each pixel's channels, so a 3x3 window packs each input element once, not nine times), then
  gathered per column tile by the operator's index map into ``Ap[p, k, t]`` (conv2d: the window's
  words; the padding is packed with the input, as zero words).
* K is padded with zero bits (conv2d: each tap's channels to whole words, then K to whole kernel
  blocks); zero activation bits add nothing in either encoding, whatever the padded weights hold.
* A tile whose lanes are narrower than a dot product over the whole K can reach (NEON: 16 bits) runs
  K in chunks of whole blocks, each exact in its lanes, summed in int32 (``chunks``).

Tiles (selection.bitserial_kernel): on AVX-512 the ``lanes`` tiles first (output channels across the
64-bit lanes, one word of K per step, the dot products added to int32: no lane sums and no padding of
K to register blocks, so the 1x1 layers run on them too; weights ``Wp[n0, j, t, i]``), else the
``acc`` tiles (K across the lanes, one horizontal sum per output after the K loop). On NEON a K of
one or two words runs on a word tile instead (``tile_for``: a proved GEMV whose dot products come out
whole from an addp tree, run over several columns and the words by its ``_gemm``; weights
``Wp[n0, t, j, i]``): the lanes tile's four 16-bit lanes per channel, summed after the loop, cost as
much as a one-word loop.

Schedule: p (columns of the tile) by ``cols``, n by ``rows``, loops ``p0 | n0 | p1 n1 j k t``, p0
parallel, the activation packing computed under p0, the output stage under n0 (vectorized along
its last axis: the channels, NCHW the tile's columns). With a kernel the
inner loops are tensorized with its ``_gemm``; without (``kernel=None``) the same tiling and packing
run plain TIR (``T.popcount`` over the words, LLVM vectorizing): what TVM's old topi bitserial
operators were, and the baseline that shows what the synthesized kernel buys.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
from tvm import s_tir, te, tirx

from tvm_integration.kernels.bitserial import (WORD, WORD_TILE_WORDS, BitserialKernel, dot_term, plane_shift,
                                               planes_and_word, register, unipolar_twin, word_kernels)
from tvm_integration.ops.output_stage import OutputStage, placeholders
from tvm_integration.ops.thresholds import REACH, thresholds
from tvm_integration.kernels.packing import round_up

ENCODINGS = ("unipolar", "hybrid")
PLAIN_TILE = (8, 4)          # rows × cols of the plain-TIR schedule without a kernel (an AVX-512 A1W1 tile)


@dataclass(frozen=True)
class Config:
    abits: int
    wbits: int
    encoding: str

    def __post_init__(self):
        if not (1 <= self.abits <= 3 and 1 <= self.wbits <= 3):
            raise ValueError(f"bitserial operators take 1-3 bit activations and weights, got A{self.abits}W{self.wbits}")
        if self.encoding not in ENCODINGS:
            raise ValueError(f"encoding must be one of {', '.join(ENCODINGS)}, got {self.encoding!r}")

    @property
    def most_per_bit(self) -> int:
        """The largest magnitude one bit of K adds to a dot product: (2**abits - 1)(2**wbits - 1)."""
        return (2 ** self.abits - 1) * (2 ** self.wbits - 1)

    def weight_codes(self, w: np.ndarray) -> np.ndarray:
        """Weights as the unsigned bit-plane codes the kernel reads: unipolar as they are; hybrid
        v = sum_j 2**j (2 b_j - 1) = 2u - (2**wbits - 1), so u = (v + 2**wbits - 1) / 2."""
        top = 2 ** self.wbits - 1
        w = np.asarray(w, np.int64)
        if self.encoding == "unipolar":
            ok = (w >= 0) & (w <= top)
            codes = w
        else:
            ok = (w >= -top) & (w <= top) & (w % 2 == 1)
            codes = (w + top) // 2
        if not ok.all():
            what = f"in [0, {top}]" if self.encoding == "unipolar" else f"odd in [-{top}, {top}]"
            raise ValueError(f"{self.encoding} W{self.wbits} weights must be {what}")
        return codes.astype(np.uint8)


def build(rows: int, data: te.Tensor, input_planes: te.Tensor, activation_word, weight_planes: np.ndarray,
          weights_shape: tuple[int, int], config: Config, stage: OutputStage, kernel: BitserialKernel | None,
          batch: int | None = None):
    """(scheduled module, constant arguments): ``main(data, *constants, out)`` with ``out[p, n]`` =
    stage(the bitserial dot product of GEMM row p with weight row n) for p < rows; with ``batch``,
    channels first: ``out[b, n, q]`` for row p = b * rows / batch + q (NCHW's order).
    ``input_planes``: the input bit-packed at run time (kernels/bitpack.py), computed once, in parallel;
    ``activation_word(p, plane, t)``: word t of plane ``plane`` of GEMM row p (p < rows, t below the
    weights' words), read from it (dense: the row; conv2d: the window's words, zero outside).
    ``weight_planes``: ``[N, wbits, words]`` uint64, packed the same way at compile time.
    A K of at most half a kernel block would be mostly zero words: the plain-TIR schedule (one-word
    blocks) runs it instead (AVX-512, ResNet-18's 1x1 layers, 1-4 words of 8: the tile ran at
    0.23-0.84x of the plain schedule, but for C11 A1W1, 1.2x).
    A kernel whose lanes are narrower than the largest dot product of K (NEON: 16 bits) runs on
    chunks of K small enough to be exact, summed in int32 (``chunks``).
    A hybrid configuration on a unipolar kernel (``bitserial_kernel`` gives AVX-512 hybrid layers the unipolar
    lanes tile) runs it on the weight codes u, v = 2u - (2**wbits - 1): the dot product is 2 S -
    (2**wbits - 1) T with S the kernel's and T = sum of the column's activations (``actsum``: the
    popcounts of its planes' words, once per column, not once per channel tile and word as the hybrid
    tile's count registers do)."""
    n = weights_shape[0]
    kernel = tile_for(kernel, config, weight_planes.shape[2], batch is not None)
    tile_rows, tile_cols = (kernel.spec.rows, kernel.cols) if kernel else PLAIN_TILE
    raw_words = weight_planes.shape[2]
    chunk_count, chunk = chunks(kernel, config, raw_words) if kernel else (1, raw_words)
    words = chunk_count * chunk
    pp, npad = round_up(rows, tile_cols), round_up(n, tile_rows)
    acc_dtype = kernel.acc_dtype if kernel else ("uint64" if config.encoding == "unipolar" else "int64")
    encoding = kernel.spec.encoding if kernel else config.encoding         # the GEMM's
    fold = encoding != config.encoding
    if fold and ((config.encoding, encoding) != ("hybrid", "unipolar") or chunk_count > 1 or batch is not None):
        raise ValueError(f"a {encoding} tile cannot run a {config.encoding} layer"
                         + (" in chunks of K or channels first" if encoding == "unipolar" else ""))

    packed = te.compute((pp, config.abits, words), lambda p, k, t: tirx.if_then_else(
        tirx.all(p < rows, t < raw_words), activation_word(tirx.min(p, rows - 1), k, tirx.min(t, raw_words - 1)),
        tirx.const(0, WORD)), name="columns")
    word_tile = kernel is not None and kernel.word_tile
    lanes = kernel is not None and kernel.lanes or word_tile        # K along the loop, a word per step
    w = te.placeholder((npad // tile_rows,) + weight_image(config.wbits, words, tile_rows, kernel), WORD,
                       name="weights")
    r = te.reduce_axis((0, config.wbits * config.abits * chunk), "r")
    j, kk, t = planes_and_word(r, config.abits, chunk)
    weight = ((lambda c, word: w[c // tile_rows, word, j, c % tile_rows]) if word_tile
              else (lambda c, word: w[c // tile_rows, j, word, c % tile_rows]) if lanes
              else (lambda c, word: w[c // tile_rows, j, c % tile_rows, word]))
    sig = (plane_shift(r, config.wbits, config.abits, chunk), 0) if lanes else (j, kk)
    term = lambda q, p, c: dot_term(weight(c, q * chunk + t), packed[p, kk, q * chunk + t],
                                    *sig, encoding, acc_dtype, shift=not lanes or config.wbits * config.abits > 1)
    if fold:               # T of a column, inline in the output stage: hoisted out of its channel loop
        def actsum(p):
            terms = [tirx.popcount(packed[p, k, t]).astype("int32") << k for k in range(config.abits)
                     for t in range(raw_words)]
            return functools.reduce(lambda x, y: x + y, terms)
    if chunk_count == 1:
        acc = te.compute((pp, npad), lambda p, c: te.sum(term(0, p, c), axis=r), name="gemm")
        total = lambda p, c: acc[p, c].astype("int32")
        if fold:
            top = 2 ** config.wbits - 1
            total = lambda p, c: acc[p, c] * 2 - actsum(p) * top
    else:
        part = te.compute((chunk_count, pp, npad), lambda q, p, c: te.sum(term(q, p, c), axis=r), name="gemm")
        q = te.reduce_axis((0, chunk_count), "q")
        acc = te.compute((pp, npad), lambda p, c: te.sum(part[q, p, c].astype("int32"), axis=q), name="chunks")
        total = lambda p, c: acc[p, c]
    levels = thresholds(stage, n) if raw_words * 64 * config.most_per_bit < REACH else None
    values = levels.channel_params(npad) if levels else stage.channel_params(1, n, npad)
    params = placeholders(values)
    result = (lambda acc, c: levels.expression(acc, params, c)) if levels else \
        (lambda acc, c: stage.expression(acc, params, 0, c))
    if batch is None:
        out = te.compute((rows, n), lambda p, c: result(total(p, c), c), name="output")
    else:
        per = rows // batch
        row = (lambda b, q: q) if batch == 1 else (lambda b, q: b * per + q)
        out = te.compute((batch, n, per), lambda b, c, q: result(total(row(b, q), c), c),
                         name="output")
    func = te.create_prim_func([data, w, *params.values(), out])
    constants = [tile_weights(weight_planes, tile_rows, words, kernel), *values.values()]
    if chunk_count > 1:
        return schedule_chunks(func, input_planes.op.name, tile_rows, tile_cols, kernel, chunk, words,
                               batch is not None), constants
    if fold:
        return schedule_folded(func, input_planes.op.name, tile_rows, tile_cols, kernel, words), constants
    return schedule(func, input_planes.op.name, tile_rows, tile_cols, kernel, words, batch is not None), constants


def chunks(kernel: BitserialKernel, config: Config, words: int) -> tuple[int, int]:
    """(count, words of each) of the K chunks the kernel runs on: each a whole number of its blocks,
    as few as keep every dot product of a chunk within the kernel's lanes (unipolar: unsigned,
    hybrid: signed; at most (2**abits - 1)(2**wbits - 1) per bit of K), as equal as they can be."""
    if kernel.lanes:                  # 64-bit lanes, the dot product added to int32: exact for any K of a layer
        return 1, words
    top = 2 ** kernel.spec.out_bits - 1 if config.encoding == "unipolar" else 2 ** (kernel.spec.out_bits - 1) - 1
    most = top // config.most_per_bit // 64 // kernel.block_words          # blocks per chunk
    if most < 1:
        raise ValueError(f"{kernel.spec.name}: one block of K can exceed its {kernel.spec.out_bits}-bit lanes")
    blocks = -(-words // kernel.block_words)
    count = -(-blocks // most)
    return count, -(-blocks // count) * kernel.block_words


def tile_for(kernel: BitserialKernel | None, config: Config, words: int, nchw: bool = False) -> BitserialKernel | None:
    """The tile ``build`` runs a layer of ``words`` words of K on, given ``bitserial_kernel``'s: None (plain TIR)
    where the tile does not pay; a word tile of the configuration for a K of at most
    ``WORD_TILE_WORDS`` words on a lanes tile's ISA (NEON);
    for a hybrid layer on a hybrid lanes tile, channels last, the
    unipolar lanes tile on the weight codes (the fold: per layer 0.9-0.75x the time of the hybrid tile's
    count registers, ResNet-18 C2/C3/C9/C12 A1W1 requantized to u8, 1 thread, interleaved)."""
    if kernel is None or not pays(kernel, words):
        return None
    spec = kernel.spec
    if kernel.lanes and words <= WORD_TILE_WORDS.get(spec.isa, 0):
        short = word_kernels(spec.isa, config.abits, config.wbits, config.encoding)
        if short:
            return short[0]
    if kernel.lanes and not nchw and config.encoding == kernel.spec.encoding == "hybrid":
        return unipolar_twin(kernel) or kernel
    return kernel


def pays(kernel: BitserialKernel, words: int) -> bool:
    """Whether a K of ``words`` words runs on the tile (more than half a block; a lanes or word tile:
    always) or plain TIR."""
    return kernel.lanes or kernel.word_tile or 2 * words > kernel.block_words


def weight_image(wbits: int, words: int, rows: int, kernel: BitserialKernel | None) -> tuple[int, int, int]:
    """The shape of one tile's packed weights (``_axes``)."""
    tiles = np.empty((0, rows, wbits, words)).transpose(_axes(kernel))
    return tiles.shape[1:]


def _axes(kernel: BitserialKernel | None) -> tuple[int, int, int, int]:
    """``[tile, row, plane, word]`` -> one tile's weight image: ``[wbits, rows, words]``; for a lanes
    tile ``[wbits, words, rows]`` (word t of the tile's channels together); for a word tile
    ``[words, wbits, rows]`` (word t's planes together: the kernel's image of one call)."""
    if kernel is not None and kernel.word_tile:
        return 0, 3, 2, 1
    return (0, 2, 3, 1) if kernel is not None and kernel.lanes else (0, 2, 1, 3)


def tile_weights(planes: np.ndarray, tile_rows: int, words: int, kernel: BitserialKernel | None = None) -> np.ndarray:
    """``[N, wbits, w]`` packed weights -> ``Wp[N/rows, *weight_image]`` (zero-padded)."""
    n, wbits, raw = planes.shape
    padded = np.zeros((round_up(n, tile_rows), wbits, words), planes.dtype)
    padded[:n, :, :raw] = planes
    return np.ascontiguousarray(padded.reshape(-1, tile_rows, wbits, words).transpose(_axes(kernel)))


def schedule(func, input_planes: str, tile_rows: int, tile_cols: int, kernel: BitserialKernel | None, words: int,
             nchw: bool = False):
    sch = s_tir.Schedule(func)
    _pack_in_parallel(sch, sch.get_sblock(input_planes), nchw)
    block = sch.get_sblock("gemm")
    p, c, r = sch.get_loops(block)
    p0, p1 = sch.split(p, [None, tile_cols])
    c0, c1 = _split_rows(sch, c, tile_rows)
    sch.reorder(p0, c0, p1, *c1, r)
    sch.parallel(p0)
    _copy_columns(sch, p0)
    _output_stage(sch, c0)
    sch.decompose_reduction(block, p1)
    if kernel is not None:
        sch.tensorize(p1, register(kernel, words))
        sch.annotate(p0, "pragma_import_llvm", kernel.llvm_ir)
    return sch.mod


def schedule_folded(func, input_planes: str, tile_rows: int, tile_cols: int, kernel: BitserialKernel, words: int):
    """As ``schedule`` for a hybrid layer on a unipolar tile (``build``'s fold, NHWC and dense): the
    output stage reads the columns (their activation sums), so the loops are the output's, (p0 | c0 |
    p1 c1), and the GEMM and the columns are computed at them (the GEMM's own loops with the output
    moved under them would need the columns under p0 first, and the columns the output first).
    c1 spans ``output_tiles`` of the tile's channel blocks, the GEMM runs them one after the other
    and the output stage then has that many independent vectors per column."""
    sch = s_tir.Schedule(func)
    _pack_in_parallel(sch, sch.get_sblock(input_planes))
    output = sch.get_sblock("output")
    p, c = sch.get_loops(output)
    tiles = output_tiles(tile_rows, -(-int(sch.get(c).extent) // tile_rows))
    p0, p1 = sch.split(p, [None, tile_cols])
    c0, c1 = sch.split(c, [None, tile_rows * tiles])
    sch.reorder(p0, c0, p1, c1)
    sch.parallel(p0)
    sch.vectorize(c1)
    block = sch.get_sblock("gemm")
    sch.compute_at(block, c0)
    _copy_columns(sch, p0)
    first, channels = sch.get_loops(block)[2:4]              # p0 c0 | ax0 ax1 [r]
    if tiles > 1:
        tile, _ = sch.split(channels, [tiles, tile_rows])
        sch.reorder(tile, first)
    sch.decompose_reduction(block, first)
    sch.tensorize(first, register(kernel, words, unit_loop=False))
    sch.annotate(p0, "pragma_import_llvm", kernel.llvm_ir)
    return sch.mod


# Output channels whose output stage runs as one block: the NEON lanes tiles' 4 or 8 channels (one or
# two vectors) left a column's requantization a chain of dependent instructions the in-order Cortex-A53
# waits on (W1A1 ResNet-18: 25.2 of 89.3 M llvm-mca cycles of its bitserial layers; 32 channels: 9.7 of
# 75.1 M). An AVX-512 lanes tile's 32 channels are one block already.
OUTPUT_CHANNELS = 32


def output_tiles(tile_rows: int, tiles: int) -> int:
    """How many of a layer's ``tiles`` channel tiles of ``tile_rows`` rows one output-stage block
    spans: the most of 4, 2, 1 that divides them within ``OUTPUT_CHANNELS``."""
    return next(k for k in (4, 2, 1) if tiles % k == 0 and k * tile_rows <= max(OUTPUT_CHANNELS, tile_rows))


def schedule_chunks(func, input_planes: str, tile_rows: int, tile_cols: int, kernel: BitserialKernel, chunk: int,
                    words: int, nchw: bool = False):
    """As ``schedule``, the tile's chunks computed under its (p0, c0) into a local [chunks, cols, rows]
    buffer, each chunk one call of the kernel over ``chunk`` words, then summed in int32."""
    sch = s_tir.Schedule(func)
    _pack_in_parallel(sch, sch.get_sblock(input_planes), nchw)
    total = sch.get_sblock("chunks")
    p, c, _ = sch.get_loops(total)
    p0, p1 = sch.split(p, [None, tile_cols])
    c0, c1 = _split_rows(sch, c, tile_rows)
    sch.reorder(p0, c0, p1, *c1)
    sch.parallel(p0)
    block = sch.get_sblock("gemm")
    sch.compute_at(block, c0)
    _copy_columns(sch, p0)
    _output_stage(sch, c0)
    pc = sch.get_loops(block)[3]                 # p0 c0 | q p [c] r
    sch.decompose_reduction(block, pc)
    sch.tensorize(pc, register(kernel, chunk, stride=words))
    sch.annotate(p0, "pragma_import_llvm", kernel.llvm_ir)
    return sch.mod


# The copy of a tile's columns is one vector of a row's words up to this many; longer rows are a loop for
# LLVM's own vectorizer. One vector of 4100 words (K = 262 400 bits) took LLVM 11 s of CPU to generate;
# the layers of the models come nowhere near (ResNet-18's longest row: 72 words).
VECTOR_WORDS = 256


def _copy_columns(sch, p0) -> None:
    """The columns computed under the tile's column loop ``p0``, a row's words one vector when it is short."""
    columns = sch.get_sblock("columns")
    sch.compute_at(columns, p0)
    words = sch.get_loops(columns)[-1]
    if int(sch.get(words).extent) <= VECTOR_WORDS:
        sch.vectorize(words)


def _output_stage(sch, c0) -> None:
    """The output stage under the tile's (p0, c0), on its results while they are in cache, also
    channels first (NCHW, ``build(batch=)``) for one image. For more, after the GEMM as a loop of its
    own, parallel over (image, channel): a [B, N, pixels] output read at row b * pixels + q and moved
    under c0 came back mostly unwritten (205 of 210 values of a 1x70x7x6 3x3 convolution, even with
    B = 1, which is why one image reads row q), and the loop of its own costs a transposed pass over
    the accumulators (C2 A1W1, one image: 1.37 ms against 0.46 ms under c0)."""
    output = sch.get_sblock("output")
    loops = sch.get_loops(output)
    if len(loops) == 2 or sch.get(loops[0]).extent == 1:
        sch.reverse_compute_at(output, c0)
        sch.vectorize(sch.get_loops(output)[-1])
    else:
        sch.parallel(sch.fuse(*loops[:2]))


def _split_rows(sch, c, tile_rows: int):
    """(c0, [c1]): the channel loop by the tile's rows; a one-row tile's loop is not split (a unit
    loop would stay in the block the tile replaces, and its description has none)."""
    if tile_rows == 1:
        return c, []
    c0, c1 = sch.split(c, [None, tile_rows])
    return c0, [c1]


def _pack_in_parallel(sch, block, nchw: bool = False):
    """The run-time bit-packing: parallel over its two outer axes (conv2d: image and row). A vector
    packing (``Packing.te(vector=True)``, NHWC and dense): each word's booleans computed under it,
    vectorized, so a word is one mask move (C3 A1W1, 56x56x64: the packing took ~70% of the layer by
    perf as an unrolled OR of 64 shifted bytes, gathered by vpinsrb); otherwise each word's OR over
    its bits is unrolled, so the words of a row are independent straight-line code LLVM can vectorize. NCHW
    (the input read through an NHWC view, inlined, packed with ``unrolled=True``: a word's bits are
    a channel plane apart): parallel over (B, H), vectorized along W, whose elements are contiguous
    in every channel plane (one word at a time instead: C8 A1W1 took 5x the NHWC operator's time)."""
    if not nchw:
        loops = sch.get_loops(block)
        sch.parallel(sch.fuse(*loops[:2]) if len(loops) > 2 else loops[0])
        flags = f"{sch.get(block).name_hint}_bits"
        if any(sch.get(b).name_hint == flags for b in sch.get_producers(block)):
            # the vector packing (bitpack.Packing.te(vector=True)): each word's booleans under it
            _inline_views(sch, sch.get_sblock(flags))
            sch.compute_at(sch.get_sblock(flags), loops[-1])
            sch.vectorize(sch.get_loops(sch.get_sblock(flags))[-1])
        else:
            sch.unroll(loops[-1])
        return
    _inline_views(sch, block)
    bi, i, j, plane, word = sch.get_loops(block)
    sch.reorder(plane, word, j)
    sch.parallel(sch.fuse(bi, i))
    sch.vectorize(j)


def _inline_views(sch, block) -> None:
    """The elementwise tensors the packing reads the input through (bitserial_conv2d's padding, NCHW's
    NHWC view) inlined into it, so that it reads the input itself."""
    while views := sch.get_producers(block):
        for view in views:
            sch.compute_inline(view)
