"""The bitserial GEMM that bitserial dense and conv2d both are: ``acc[p, n] = sum_k x[p, k] * w[n, k]``
with x unsigned ``abits``-bit activations and w ``wbits``-bit weights, unipolar (unsigned) or
hybrid (odd values in [-(2**wbits - 1), 2**wbits - 1], i.e. ±1 bit-planes), then the output stage.

* The weights are bit-packed once, at compile time (bitpack.py: K into uint64 words, the bit-plane
  axis after the output channel), and cut into the tile's rows: ``Wp[n0, j, i, t]``.
* The activations are bit-packed at run time inside the operator, per column tile, from the
  operator's own index map (dense: the rows; conv2d: im2col with the padding's zero): ``Ap[p, k, t]``.
* K is padded with zero bits to whole kernel blocks; zero activation bits add nothing in either
  encoding, whatever the padded weights hold.

Schedule: p (columns of the tile) by ``cols``, n by ``rows``, loops ``p0 | n0 | p1 n1 j k t``, p0
parallel, the activation packing computed under p0, the output stage under n0. With a kernel the
inner loops are tensorized with its ``_gemm``; without (``kernel=None``) the same tiling and packing
run plain TIR (``T.popcount`` over the words, LLVM vectorizing): what TVM's old topi bitserial
operators were, and the baseline that shows what the synthesized kernel buys.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from tvm import s_tir, te, tirx

from tvm_integration.bitpack import Packing
from tvm_integration.bitserial_kernels import WORD, BitserialKernel, dot_term, planes_and_word, register
from tvm_integration.output_stage import OutputStage, placeholders
from tvm_integration.packing import round_up

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


WEIGHTS = Packing(axis=1, bit_axis=1, word=WORD)       # [N, K] -> [N, wbits, words]
ACTIVATIONS = Packing(axis=1, bit_axis=1, word=WORD)   # [P, K] -> [P, abits, words]


def build(rows: int, depth: int, data: te.Tensor, element, weights: np.ndarray, config: Config,
          stage: OutputStage, kernel: BitserialKernel | None):
    """(scheduled module, constant arguments): ``main(data, *constants, out)`` with ``out[p, n]``
    = stage(sum_k element(p, k) * weights[n, k]) for p < rows. ``element(p, k)``: the activation
    (an unsigned value below 2**abits) of GEMM row p and reduction index k, from ``data``."""
    n, k = weights.shape
    tile_rows, tile_cols = (kernel.spec.rows, kernel.spec.cols) if kernel else PLAIN_TILE
    block = kernel.block_words if kernel else 1
    words = round_up(ACTIVATIONS.words(depth), block)
    pp, npad = round_up(rows, tile_cols), round_up(n, tile_rows)
    acc_dtype = kernel.acc_dtype if kernel else ("uint64" if config.encoding == "unipolar" else "int64")

    columns = te.compute((pp, depth), lambda p, t: tirx.if_then_else(
        p < rows, element(tirx.min(p, rows - 1), t).astype("uint8"), tirx.const(0, "uint8")), name="im2col")
    packed = ACTIVATIONS.te(columns, config.abits, words, name="bitpack")
    w = te.placeholder((npad // tile_rows, config.wbits, tile_rows, words), WORD, name="weights")
    r = te.reduce_axis((0, config.wbits * config.abits * words), "r")
    j, kk, t = planes_and_word(r, config.abits, words)
    acc = te.compute((pp, npad), lambda p, c: te.sum(dot_term(
        w[c // tile_rows, j, c % tile_rows, t], packed[p, kk, t], j, kk, config.encoding, acc_dtype), axis=r),
        name="gemm")
    values = stage.channel_params(1, n, npad)
    params = placeholders(values)
    out = te.compute((rows, n), lambda p, c: stage.expression(acc[p, c].astype("int32"), params, 0, c), name="output")
    func = te.create_prim_func([data, w, *params.values(), out])
    constants = [pack_weights(weights, config, tile_rows, words), *values.values()]
    return schedule(func, tile_rows, tile_cols, kernel, words), constants


def pack_weights(weights: np.ndarray, config: Config, tile_rows: int, words: int) -> np.ndarray:
    """[N, K] weights -> ``Wp[N/rows, wbits, rows, words]`` (N zero-padded to whole tiles)."""
    n, _ = weights.shape
    planes = WEIGHTS.numpy(config.weight_codes(weights), config.wbits, words)       # [N, wbits, words]
    padded = np.zeros((round_up(n, tile_rows), *planes.shape[1:]), planes.dtype)
    padded[:n] = planes
    return np.ascontiguousarray(padded.reshape(-1, tile_rows, config.wbits, words).transpose(0, 2, 1, 3))


def schedule(func, tile_rows: int, tile_cols: int, kernel: BitserialKernel | None, words: int):
    sch = s_tir.Schedule(func)
    sch.compute_inline(sch.get_sblock("im2col"))
    block = sch.get_sblock("gemm")
    p, c, r = sch.get_loops(block)
    p0, p1 = sch.split(p, [None, tile_cols])
    c0, c1 = sch.split(c, [None, tile_rows])
    sch.reorder(p0, c0, p1, c1, r)
    sch.parallel(p0)
    pack = sch.get_sblock("bitpack")
    sch.compute_at(pack, p0)
    output = sch.get_sblock("output")
    sch.reverse_compute_at(output, c0)
    sch.decompose_reduction(block, p1)
    if kernel is not None:
        sch.tensorize(p1, register(kernel, words))
        sch.annotate(p0, "pragma_import_llvm", kernel.llvm_ir)
    return sch.mod
