"""A float MatMul or Gemm by constant weights (a projection NNCF's SmoothQuant leaves in float, or a
MatMul by a float initializer) as onnxruntime's x86 sgemm sums it, on MLAS's loop nest: B packed once,
at compile time (``pack``), into panels of ``COLUMNS`` columns, each panel's K rows contiguous
(MlasSgemmCopyPackB's layout); per block of panels and K block, ``ROWS`` x ``COLUMNS`` register tiles
broadcasting A, each added onto the output as it leaves its registers.

The order of sums is float_matmul.matmul_func's: each output one FMA chain over k from 0 within a K
block of ``stride`` (stride_k's, or PACKED_STRIDE_K where onnxruntime packs B itself), the blocks' sums
added in turn onto C (Gemm's bias, which it copies into its output first) or onto the first block's.
tests/test_float_gemm.py checks it against onnxruntime's MatMul and Gemm, bit for bit."""
from __future__ import annotations

import numpy as np
from tvm import relax, s_tir, te, tirx

from tvm_integration.qnn.float.float_calls import emit, shape_of
from tvm_integration.qnn.float.float_conv import in_registers
from tvm_integration.qnn.float.float_matmul import PACKED_STRIDE_K, stride_k
from tvm_integration.qnn.semantics.quant import constant

ROWS, COLUMNS = 4, 16         # float_conv.py's tile (8 ymm accumulators on AVX2)
PANELS_PER_BLOCK = 8          # MLAS_SGEMM_STRIDEN: 128 columns between two K blocks


def fits(k: int, stride: int) -> bool:
    """Whether K is one block or a whole number of blocks (a K that is no whole number of them, which
    would need a shorter last block as float_conv.py has, stays on float_matmul.py)."""
    return k <= stride or k % stride == 0


def pack(b: np.ndarray) -> np.ndarray:
    """B [K, N] as [panels, K, COLUMNS], its columns padded with zeros to whole panels."""
    k, n = b.shape
    panels = -(-n // COLUMNS)
    wide = np.zeros((k, panels * COLUMNS), np.float32)
    wide[:, :n] = b
    return np.ascontiguousarray(wide.reshape(k, panels, COLUMNS).transpose(1, 0, 2))


def dequantized(dq) -> np.ndarray | None:
    """The value of Relax's dequantize ``dq`` of constant integers, ``float32(w - zp) * scale`` along
    its axis: the float32 operations of TVM's dequantize, computed once instead of at every run (NNCF's
    BERT: 7.8 of 139 CPU ms). None where it reads no constant (a QCDQ clip under it)."""
    w, scale, zero_point = (constant(x) for x in dq.args[:3])
    if w is None or scale is None or zero_point is None or w.dtype.kind not in "iu" or \
            str(dq.attrs.out_dtype) != "float32":
        return None
    along = [-1 if d == int(dq.attrs.axis) % w.ndim else 1 for d in range(w.ndim)]
    steps = w.astype(np.int32) - zero_point.astype(np.int32).reshape(along if zero_point.size > 1 else ())
    return steps.astype(np.float32) * scale.astype(np.float32).reshape(along if scale.size > 1 else ())


def by_weights(bb: relax.BlockBuilder, matmul, dq, c, name: str, out_shape: tuple[int, ...]):
    """``matmul`` (``c``: ``+ c``, Gemm's C) by 2-D constant weights, ``dq`` (the dequantize ``matmul``'s
    B is bound to) or B itself: a constant, which onnxruntime packs (PACKED_STRIDE_K), or DQ of one, an
    activation to onnxruntime (stride_k's blocks; one row of it is MLAS's M = 1 kernel's,
    float_gemv.py). Its rows a reshape of A (no copy, either side), K whole blocks; else None."""
    a_shape = shape_of(matmul.args[0])
    b = constant(matmul.args[1]) if dq is None else dequantized(dq)
    if a_shape is None or len(a_shape) < 2 or b is None or b.ndim != 2 or b.dtype != np.float32 or \
            str(matmul.ty.dtype) != "float32":
        return None
    rows, (k, n) = int(np.prod(a_shape[:-1])), b.shape
    stride = PACKED_STRIDE_K if dq is None else stride_k(k, n)
    if not fits(k, stride) or dq is not None and rows == 1:
        return None
    x = matmul.args[0] if len(a_shape) == 2 else bb.emit(relax.op.reshape(matmul.args[0], (rows, k)))
    y = emit(bb, gemm_func(rows, k, n, stride, None if c is None else shape_of(c)), name,
             [x, relax.const(pack(b)), *([] if c is None else [c])], (rows, n))
    return y if len(a_shape) == 2 else relax.op.reshape(bb.emit(y), out_shape)


def gemm_func(rows: int, k: int, n: int, stride: int, bias: tuple[int, ...] | None = None) -> tirx.PrimFunc:
    """``a [rows, k] @ b [k, n]`` (``bias``: ``+ c``, of shape [n], [1, n], [rows, 1] or [rows, n]) over
    B packed by ``pack``, summed as the module docstring says."""
    blocks, stride = (1, k) if k <= stride else (k // stride, stride)
    panels = -(-n // COLUMNS)
    tall, wide = -(-rows // ROWS) * ROWS, panels * COLUMNS
    a = te.placeholder((rows, k), "float32", "a")
    b = te.placeholder((panels, k, COLUMNS), "float32", "b")
    c = te.placeholder(bias, "float32", "c") if bias else None
    r = te.reduce_axis((0, stride), "r")
    block = te.compute((blocks, tall, wide), lambda kb, i, j: te.sum(
        a[tirx.min(i, rows - 1), kb * stride + r] * b[j // COLUMNS, kb * stride + r, j % COLUMNS], axis=r),
        name="block")

    def c_at(i, j):             # C broadcast to the output; padding reads its last row and column
        index = (tirx.min(i, rows - 1), tirx.min(j, n - 1))[2 - len(bias):]
        return c[tuple(0 if d == 1 else x for d, x in zip(bias, index))]

    def term(kb, i, j):         # C enters with the first block's sum (TE drops a reduction's init)
        return tirx.Select(kb == 0, c_at(i, j) + block[kb, i, j], block[kb, i, j]) if bias else block[kb, i, j]
    kb = te.reduce_axis((0, blocks), "kb")
    # ((0 + (C + s0)) + s1) + ...: as MLAS's ((C + s0) + s1) + ..., but for the sign of a zero sum
    acc = te.compute((tall, wide), lambda i, j: te.sum(term(kb, i, j), axis=kb), name="acc")
    out = acc if (tall, wide) == (rows, n) else te.compute((rows, n), lambda i, j: acc[i, j], name="out")
    sch = s_tir.Schedule(te.create_prim_func([a, b, *([c] if bias else []), out]))
    _schedule(sch, panels, out is not acc)
    return sch.mod["main"]


def _schedule(sch, panels: int, cut: bool) -> None:
    """Parallel over blocks of column panels; in each, per K block, each ROWS x COLUMNS tile's FMA
    chain in registers (k outermost in the tile) added onto acc."""
    per_block = max(d for d in range(1, PANELS_PER_BLOCK + 1) if panels % d == 0)
    acc = sch.get_sblock("acc")
    i, j, kb = sch.get_loops(acc)
    jn, jp, ji = sch.split(j, [None, per_block, COLUMNS])
    io, ii = sch.split(i, [None, ROWS])
    sch.reorder(jn, kb, io, jp, ii, ji)
    sch.parallel(jn)
    in_registers(sch, sch.get_sblock("block"), jp)
    sch.unroll(ii)
    sch.vectorize(ji)
    sch.vectorize(sch.get_loops(sch.decompose_reduction(acc, kb))[-1])
    if cut:
        i, j = sch.get_loops(sch.get_sblock("out"))
        sch.parallel(i)
        sch.vectorize(sch.split(j, [None, next(v for v in (16, 8, 4, 2, 1) if sch.get(j).extent.value % v == 0)])[1])
