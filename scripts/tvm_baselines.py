#!/usr/bin/env python3
"""TVM's own lowering of the tiles qsynth synthesizes, so that ``scripts/bench_kernels.py`` can put
them next to the synthesized kernels: the computation written the way a TVM user writes it (te.compute
or TVMScript), given a simple, standard schedule, compiled by TVM 0.27's LLVM 22.

* ``bitserial_x86``: te.compute over uint64 words, ``popcount(w & a) << (j + k)`` summed in int64 over
  planes and words; the word axis is split by 8 and rfactor-ed so that the partial sums are one zmm
  (8 x uint64) per row, vectorized, with rows and planes unrolled.
* ``int8_vnni_x86``: ``C += A·Bᵀ`` in place, tensorized with a 16 x 4 VNNI intrinsic (one vpdpbusd);
  ``int8_plain_x86``: the same TIR with only ``reorder(t, i, j)`` and the rows unrolled.
* ``bitserial_neon_asm`` / ``int8_neon_asm``: the same schedules over uint8 bytes / the plain int8
  one, for ``{"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mattr": ["+neon"]}``; the assembly of the
  compute function, for llvm-mca.

Found in TVM 0.27.0.post1 (apache-tvm-ffi 0.1.14.post1, LLVM 22), measured on a Sapphire Rapids host:
* The built-in ``dot_16x4_vnni`` intrinsic fails LLVM-22 module verification (vpdpbusd.512 now takes
  ``<64 x i8>`` operands); ``dot_16x4_vnni_llvm22`` below is the same intrinsic with 8-bit operands.
  Its description (``dot_product_16x4_u8i8i32_desc``, TVM's) is copied, not imported: importing
  ``tvm.s_tir.tensor_intrin`` registers every target's intrinsics and takes ~20 s (CUDA's: 15 s).
* ``vectorize`` refuses a reduction loop, and any loop over a block without ``T.init`` such as the
  in-place ``C += ...`` update. Bitserial therefore vectorizes its word axis through ``rfactor``; the
  int8 update is left to LLVM's loop vectorizer, which turns the reordered loop into vpdpwssd on
  sapphirerapids (~40 G MAC/s for 12x16x1024) and umlal/addv on NEON. Through a zero-initialised
  reduction plus ``C + acc`` (so that ``vectorize`` is allowed) the plain x86 kernel was 2.5x slower.
* Left to itself, LLVM vectorizes the popcount loop with 256-bit vectors (ymm vpopcntq, the
  sapphirerapids prefer-vector-width); explicit 8 x uint64 TIR vectors from rfactor become zmm and ran
  1.4x faster (A2W2, 8 rows x 8192 bits: ~1.9 vs ~1.3 binary T op/s).
* TVM emits the body of a function as its own symbol ``<name>_compute_``, separate from the packed-API
  wrapper ``__tvm_ffi_<name>`` that checks the arguments: that symbol is the tile's code.

Run ``python scripts/tvm_baselines.py`` for timings and instruction counts of a few configurations.
"""
import math

import numpy as np
import tvm
from tvm import s_tir, te, tirx
from tvm.script import tirx as T

from isa_specs import host

X86 = host.tvm_target()                                 # this host's micro-architecture: the kernels run here
X86_AVX2 = {"kind": "llvm", "mcpu": "haswell"}         # AVX2 without AVX-512 (no vector popcount)
NEON = {"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mattr": ["+neon"]}
ZMM_WORDS = 8                  # uint64 words per zmm register
VNNI_INTRIN = "dot_16x4_vnni_llvm22"
FUNC = "main"                  # symbol of every built function; its body is FUNC + "_compute_"


@T.prim_func(s_tir=True)
def _dot_16x4_desc(A: T.Buffer((4,), "uint8", offset_factor=1), B: T.Buffer((16, 4), "int8", offset_factor=1),
                   C: T.Buffer((16,), "int32", offset_factor=1)) -> None:
    with T.sblock("root"):
        T.reads(C[0:16], A[0:4], B[0:16, 0:4])
        T.writes(C[0:16])
        for i, k in T.grid(16, 4):
            with T.sblock("update"):
                vi, vk = T.axis.remap("SR", [i, k])
                C[vi] = C[vi] + T.Cast("int32", A[vk]) * T.Cast("int32", B[vi, vk])


@T.prim_func(s_tir=True)
def _vnni_16x4_llvm22(A: T.Buffer((4,), "uint8", offset_factor=1),
                      B: T.Buffer((16, 4), "int8", offset_factor=1),
                      C: T.Buffer((16,), "int32", offset_factor=1)) -> None:
    with T.sblock("root"):
        T.reads(C[0:16], A[0:4], B[0:16, 0:4])
        T.writes(C[0:16])
        a4 = T.reinterpret(A.vload([0], "uint8x4"), dtype="int32")
        C[T.ramp(T.int32(0), 1, 16)] = T.call_llvm_pure_intrin(
            T.llvm_lookup_intrinsic_id("llvm.x86.avx512.vpdpbusd.512"), C.vload([0], dtype="int32x16"),
            T.reinterpret(T.broadcast(a4, 16), dtype="uint8x64"), B.vload([0, 0], dtype="int8x64"),
            dtype="int32x16")


s_tir.TensorIntrin.register(VNNI_INTRIN, _dot_16x4_desc, _vnni_16x4_llvm22, override=True)


class _Built:
    """A compiled function and how numpy inputs become its arguments (the last one is the result)."""

    def __init__(self, sch: s_tir.Schedule, target, prepare):
        self.module = tvm.compile(sch.mod, target=tvm.target.Target(target)).jit()
        self.prepare = prepare

    def _tensors(self, *arrays) -> list:
        return [tvm.runtime.tensor(np.ascontiguousarray(x)) for x in self.prepare(*arrays)]

    def _run(self, *arrays) -> np.ndarray:
        args = self._tensors(*arrays)
        self.module[FUNC](*args)
        return args[-1].numpy()

    def _median_seconds(self, arrays, number: int, repeat: int) -> float:
        """Median over ``repeat`` of the mean of ``number`` calls, each a whole packed-function call
        (argument checks included) as when TVM runs the operator."""
        timer = self.module.time_evaluator(FUNC, tvm.cpu(), number=number, repeat=repeat)
        return float(np.median(timer(*self._tensors(*arrays)).results))


class BitserialKernel(_Built):
    def run(self, w: np.ndarray, a: np.ndarray) -> np.ndarray:
        """out[i] = sum_{j,k} 2**(j+k) d(w[j, i], a[k]) as int64, for w (wbits, rows, bytes) and
        a (abits, bytes) uint8 bit-planes."""
        return self._run(w, a)

    def median_seconds(self, w: np.ndarray, a: np.ndarray, number: int, repeat: int) -> float:
        """Seconds of one call on the whole workload, to set against a C loop over its tiles."""
        return self._median_seconds((w, a), number, repeat)


class Int8Kernel(_Built):
    def run(self, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
        """C + A·Bᵀ (int32, wrap-around); ``c`` itself is left unchanged."""
        return self._run(a, b, c)

    def median_seconds(self, a: np.ndarray, b: np.ndarray, c: np.ndarray, number: int, repeat: int) -> float:
        """Seconds of one call on the whole workload, to set against a C loop over its tiles."""
        return self._median_seconds((a, b, c), number, repeat)


# ---------------------------------------------------------------- bitserial

def _bitserial_func(abits: int, wbits: int, rows: int, words: int, word: str, acc: str, encoding: str):
    """out[i] = base[i] + sum_{j,k,x} 2**(j+k) d(w[j,i,x], a[k,x]) over ``words`` words of type ``word``,
    in ``acc``. Like a qsynth tile, it adds to its output lanes (``base``). Hybrid is written as
    2·Σ popcount(w & a) − (2**wbits − 1)·Σ_k 2**k popcount(a_k): popcount(a) computed once for all
    rows, as a TVM user factoring out a zero point would write it."""
    if encoding not in ("unipolar", "hybrid"):
        raise ValueError(f"encoding must be 'unipolar' or 'hybrid', got {encoding!r}")
    w = te.placeholder((wbits, rows, words), word, name="w")
    a = te.placeholder((abits, words), word, name="a")
    base = te.placeholder((rows,), acc, name="base")
    j, k, x = te.reduce_axis((0, wbits), "j"), te.reduce_axis((0, abits), "k"), te.reduce_axis((0, words), "x")

    def pc(v):
        return tirx.popcount(v).astype(acc)

    dot = te.compute((rows,), lambda i: te.sum(pc(w[j, i, x] & a[k, x]) << (j + k).astype(acc), axis=[j, k, x]),
                     name="dot")
    if encoding == "unipolar":
        out = te.compute((rows,), lambda i: base[i] + dot[i], name="out")
    else:
        k2, x2 = te.reduce_axis((0, abits), "k2"), te.reduce_axis((0, words), "x2")
        apop = te.compute((1,), lambda _: te.sum(pc(a[k2, x2]) << k2.astype(acc), axis=[k2, x2]), name="apop")
        out = te.compute((rows,), lambda i: base[i] + dot[i] * tirx.const(2, acc)
                         - apop[0] * tirx.const(2 ** wbits - 1, acc), name="out")
    return te.create_prim_func([w, a, base, out]).with_attrs({"global_symbol": FUNC, "tirx.noalias": True})


def _bitserial_schedule(func, lanes: int, unroll_words: bool = False, row_tile: int | None = None) -> s_tir.Schedule:
    """Vectorize the word axis: split off ``lanes`` words and rfactor them into per-row partial sums
    (one register per row), summed once at the end; rows and planes unrolled so the partial sums stay
    in registers across the outer word loop (unrolled too with ``unroll_words``: straight-line code
    for llvm-mca). ``row_tile``: a whole dense, as an outer loop over tiles of that many rows."""
    sch = s_tir.Schedule(func)
    dot = sch.get_sblock("dot")
    *_, x = sch.get_loops(dot)
    _, xi = sch.split(x, [None, lanes])
    rf = sch.rfactor(xi, factor_axis=1)
    i, j, k, xo, xi = sch.get_loops(rf)
    if row_tile:
        io, i = sch.split(i, [None, row_tile])
        sch.reorder(io, xo, i, j, k, xi)
    else:
        sch.reorder(xo, i, j, k, xi)
    sch.vectorize(xi)
    sch.decompose_reduction(rf, xo)
    for loop in (i, j, k, xo) if unroll_words else (i, j, k):
        sch.unroll(loop)
    return sch


def bitserial_x86(abits: int, wbits: int, rows: int, reg_bits: int, kblocks: int, encoding: str = "unipolar",
                  avx2: bool = False, scheduled: bool = True, row_tile: int | None = None) -> BitserialKernel:
    """TVM's lowering of the whole bitserial GEMV workload (``kblocks`` qsynth tiles of ``reg_bits``
    bits along K) over uint64 words: one call covers what a C loop of ``kblocks`` tile calls does.
    ``scheduled=False``: the te.compute as written (topi.nn.bitserial_dense's expression), no
    schedule at all, left to TVM's default lowering and LLVM's loop vectorizer. ``avx2``: for a
    Haswell-class target (ymm partial sums, no vector popcount) instead of the host's. ``row_tile``:
    the scheduled version loops over tiles of that many rows (a whole dense, not one tile)."""
    words = kblocks * reg_bits // 64
    if words * 64 != kblocks * reg_bits:
        raise ValueError(f"kblocks * reg_bits must be a multiple of 64, got {kblocks} * {reg_bits}")
    func = _bitserial_func(abits, wbits, rows, words, "uint64", "int64", encoding)
    base = np.zeros(rows, np.int64)

    def prepare(w, a):
        words_of = lambda p: np.ascontiguousarray(p, dtype=np.uint8).view(np.uint64)
        return [words_of(w), words_of(a), base, np.empty_like(base)]
    lanes = ZMM_WORDS // 2 if avx2 else ZMM_WORDS
    sch = _bitserial_schedule(func, math.gcd(words, lanes), row_tile=row_tile) if scheduled else s_tir.Schedule(func)
    return BitserialKernel(sch, X86_AVX2 if avx2 else X86, prepare)


# ---------------------------------------------------------------- int8

def _int8_func(mr: int, nr: int, k: int, a_dtype: str, b_dtype: str, acc: str, k4: bool):
    """C[i, j] += sum_t A[i, t] * B[j, t] in place, with B packed k4 (B[t//4, j, t%4]) or as rows (B[j, t])."""
    b_shape = (k // 4, nr, 4) if k4 else (nr, k)

    @T.prim_func(s_tir=True)
    def int8_tile(A: T.Buffer((mr, k), a_dtype), B: T.Buffer(b_shape, b_dtype), C: T.Buffer((mr, nr), acc)):
        T.func_attr({"global_symbol": FUNC, "tirx.noalias": True})
        for i, j, t in T.grid(mr, nr, k):
            with T.sblock("C"):
                vi, vj, vt = T.axis.remap("SSR", [i, j, t])
                if k4:
                    C[vi, vj] = C[vi, vj] + T.Cast(acc, A[vi, vt]) * T.Cast(acc, B[vt // 4, vj, vt % 4])
                else:
                    C[vi, vj] = C[vi, vj] + T.Cast(acc, A[vi, vt]) * T.Cast(acc, B[vj, vt])
    return int8_tile


def _int8_plain_schedule(func) -> s_tir.Schedule:
    """Reduction outermost, the C tile inside with its rows unrolled: LLVM vectorizes the columns."""
    sch = s_tir.Schedule(func)
    i, j, t = sch.get_loops(sch.get_sblock("C"))
    sch.reorder(t, i, j)
    sch.unroll(i)
    return sch


def _check_k4(k: int):
    if k % 4:
        raise ValueError(f"the k4 packing needs k a multiple of 4, got {k}")


def int8_vnni_x86(mr: int, nr: int, k: int, target=None) -> Int8Kernel:
    """TVM's built-in-style VNNI schedule: 16 columns x 4 bytes tensorized into one vpdpbusd, loops
    t/4 > i > j/16 with i and j/16 unrolled, so the mr x nr/16 accumulators stay in zmm registers."""
    _check_k4(k)
    if nr % 16:
        raise ValueError(f"the VNNI intrinsic covers 16 columns: nr must be a multiple of 16, got {nr}")
    sch = s_tir.Schedule(_int8_func(mr, nr, k, "uint8", "int8", "int32", k4=True))
    i, j, t = sch.get_loops(sch.get_sblock("C"))
    j0, j1 = sch.split(j, [None, 16])
    t0, t1 = sch.split(t, [None, 4])
    sch.reorder(t0, i, j0, j1, t1)
    sch.tensorize(j1, VNNI_INTRIN)
    sch.unroll(j0)
    sch.unroll(i)
    return Int8Kernel(sch, target or X86, lambda a, b, c: [a, b, np.array(c, np.int32)])


def int8_plain_x86(mr: int, nr: int, k: int, target=None) -> Int8Kernel:
    """The same TIR as ``int8_vnni_x86`` without tensorize: TVM's default lowering plus LLVM."""
    _check_k4(k)
    sch = _int8_plain_schedule(_int8_func(mr, nr, k, "uint8", "int8", "int32", k4=True))
    return Int8Kernel(sch, target or X86, lambda a, b, c: [a, b, np.array(c, np.int32)])


# ---------------------------------------------------------------- NEON assembly

def _compute_asm(sch: s_tir.Schedule) -> str:
    """The assembly of the compute function, from its label to its (last) ``ret``."""
    asm = tvm.compile(sch.mod, target=tvm.target.Target(NEON)).mod.inspect_source("s")
    start = asm.index(f"\n{FUNC}_compute_:") + 1
    body = asm[start:asm.index("\n.Lfunc_end", start)]
    return body[:body.rindex("\tret") + len("\tret")]


def bitserial_neon_asm(abits: int, wbits: int, rows: int, reg_bits: int, encoding: str = "unipolar",
                       kblocks: int = 1) -> str:
    """``kblocks`` qsynth NEON bitserial tiles along K as TVM lowers them: ``rows`` weight rows x
    ``kblocks`` x ``reg_bits`` bits (64: D registers, 128: Q registers) over uint8 bytes (NEON ``cnt``
    counts bytes), rfactor-ed into one register of partial sums per row, everything unrolled; ``rows``
    output lanes of 16 bits (uint16 unipolar, int16 hybrid) added to memory, as the qsynth kernel does."""
    return _compute_asm(neon_bitserial_schedule(abits, wbits, rows, reg_bits, encoding, kblocks))


def neon_bitserial_schedule(abits: int, wbits: int, rows: int, reg_bits: int, encoding: str,
                            kblocks: int = 1) -> s_tir.Schedule:
    """The schedule ``bitserial_neon_asm`` compiles, target-independent (the tests build it for x86)."""
    nbytes = reg_bits // 8
    acc = "uint16" if encoding == "unipolar" else "int16"
    func = _bitserial_func(abits, wbits, rows, kblocks * nbytes, "uint8", acc, encoding)
    return _bitserial_schedule(func, nbytes, unroll_words=True)


def int8_neon_asm(mr: int = 4, nr: int = 4, k: int = 8) -> str:
    """The u8 x u8 -> uint32 tile ``C[i][j] += sum_t A[i][t] B[j][t]`` (A, B row-major) with the plain
    int8 schedule of ``int8_plain_x86``, as TVM lowers it for NEON."""
    return _compute_asm(neon_int8_schedule(mr, nr, k))


def neon_int8_schedule(mr: int, nr: int, k: int) -> s_tir.Schedule:
    """The schedule ``int8_neon_asm`` compiles, target-independent (the tests build it for x86)."""
    return _int8_plain_schedule(_int8_func(mr, nr, k, "uint8", "uint8", "uint32", k4=False))


def asm_body_instructions(asm: str) -> list[str]:
    """The instruction lines of AArch64 assembler text: no directives, labels, comments or blank lines."""
    out = []
    for line in asm.splitlines():
        text = line.split("//")[0].strip()
        if text and not text.startswith(".") and not text.endswith(":"):
            out.append(text)
    return out


# ---------------------------------------------------------------- by hand

def main():
    rng = np.random.default_rng(0)
    print("x86 (one thread; median of 15 x 200 calls):")
    for abits, wbits, rows, reg_bits, kblocks, enc in [(1, 1, 8, 512, 16, "unipolar"), (2, 2, 8, 512, 16, "unipolar"),
                                                       (2, 2, 8, 512, 16, "hybrid"), (1, 1, 4, 256, 16, "unipolar")]:
        nbytes = kblocks * reg_bits // 8
        w = rng.integers(0, 256, (wbits, rows, nbytes), dtype=np.uint8)
        a = rng.integers(0, 256, (abits, nbytes), dtype=np.uint8)
        sec = bitserial_x86(abits, wbits, rows, reg_bits, kblocks, enc).median_seconds(w, a, 200, 15)
        ops = 2 * rows * kblocks * reg_bits * abits * wbits
        print(f"  bitserial A{abits}W{wbits} {enc:8s} {rows} rows x {kblocks} x {reg_bits} bits: "
              f"{sec * 1e9:8.0f} ns  {ops / sec / 1e9:7.1f} binary G op/s")
    for mr, nr, k in [(12, 16, 1024), (4, 32, 1024), (12, 8, 1024)]:
        a = rng.integers(0, 256, (mr, k), dtype=np.uint8)
        b = rng.integers(-128, 128, (k // 4, nr, 4), dtype=np.int8)
        c = np.zeros((mr, nr), np.int32)
        builders = [("vnni", int8_vnni_x86), ("plain", int8_plain_x86)] if nr % 16 == 0 else [("plain", int8_plain_x86)]
        for name, build in builders:
            sec = build(mr, nr, k).median_seconds(a, b, c, 200, 15)
            print(f"  int8 u8s8 {name:5s} {mr}x{nr}x{k}: {sec * 1e9:8.0f} ns  {mr * nr * k / sec / 1e9:7.1f} G MAC/s")
    print("NEON (instructions of the compute function, ret included):")
    for abits, wbits, rows, reg_bits, enc in [(1, 1, 8, 64, "unipolar"), (1, 1, 8, 128, "unipolar"),
                                              (2, 2, 8, 128, "unipolar"), (1, 1, 8, 128, "hybrid")]:
        body = asm_body_instructions(bitserial_neon_asm(abits, wbits, rows, reg_bits, enc))
        print(f"  bitserial A{abits}W{wbits} {enc:8s} {rows} rows x {reg_bits} bits: {len(body):4d}"
              f"  (cnt: {sum(i.startswith('cnt') for i in body)})")
    print(f"  int8 u8u8 4x4x8: {len(asm_body_instructions(int8_neon_asm(4, 4, 8))):4d}")


if __name__ == "__main__":
    main()
