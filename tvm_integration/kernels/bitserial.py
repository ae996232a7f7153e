"""The GEMM-shaped bitserial tiles of the kernel cache as TensorIntrins (which one an operator takes:
selection.py).

A tile (``BitserialSpec`` of the acc layout with ``cols`` > 1) is ``rows`` weight rows × ``cols``
activation columns; its ``_gemm`` runs the proved body over a whole K of packed words and adds the
dot products to ``C[column, row]``. A ``tile`` kernel of one word of K per row (a GEMV whose
dot products come out whole in one register) runs K words short enough that a lanes tile's lane sums
would cost as much as its loop (``word_kernels``). The description is the bitserial dot product written over the
same packed words (``T.popcount``), read off the spec; the implementation calls the emitted
``_gemm`` (its LLVM IR imported and inlined, as for the int8 tiles). Memory image (bitpack.py, and
the calling convention of emit/): W = ``wbits × rows × words`` and A = ``cols × abits ×
words`` uint64, both contiguous; C = ``cols × rows`` lanes with a row stride.
"""
from __future__ import annotations

import functools
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path

from tvm import s_tir, tirx
from tvm.script import tirx as T

from synth import cache, trust
from emit.convention import function_name
from emit.llvm_ir import emit_llvm_ir
from emit.model import TILE_GEMM_COLUMNS, kernel_features
from synth.kernel import spec_from_key
from synth.spec import BitserialSpec
from tvm_integration.kernels.short_stack import short_stack

log = logging.getLogger(__name__)
WORD = "uint64"
CROSS = ("neon",)              # built for AArch64 and run under qemu (qemu/cross.py), never "host"
# TensorIntrin name -> the kernel function it calls, as registered in this process: each layer of a
# model asks again, and parsing a tile's TVMScript took 0.1-1 s (T.prim_func inspects the whole stack)
_REGISTERED: dict[str, str] = {}


@dataclass(frozen=True)
class BitserialKernel:
    spec: BitserialSpec
    function: str            # the extern wrapper of _gemm
    entry: dict = field(repr=False, compare=False)      # its re-proved cache entry
    cache_key: str
    features: tuple[str, ...]

    @functools.cached_property
    def llvm_ir(self) -> str:
        """The emitted kernel's LLVM IR, on first use: a configuration's lookup lists all its tiles and an
        operator calls one (emitting every one took 42 of the 66 s of test_every_config_has_a_gemm_tile)."""
        return _llvm_ir(self.entry)

    @property
    def lanes(self) -> bool:
        """Output channels across the lanes, K one word per step (``BitserialSpec`` layout ``lanes``)."""
        return self.spec.layout == "lanes"

    @property
    def word_tile(self) -> bool:
        """A ``tile`` kernel of one word of K per row, run by its ``_gemm`` over ``TILE_GEMM_COLUMNS``
        columns and the words of K (emit/), W one word after the other."""
        return self.spec.layout == "tile"

    @property
    def cols(self) -> int:
        """Activation columns of one call of the ``_gemm``."""
        return TILE_GEMM_COLUMNS if self.word_tile else self.spec.cols

    @property
    def acc_dtype(self) -> str:
        """The dot products' lane type (unipolar unsigned, hybrid signed), wrapping; a lanes tile adds
        its dot products to int32 (mod 2**32)."""
        if self.lanes:
            return "int32"
        return f"{'u' if self.spec.encoding == 'unipolar' else ''}int{self.spec.out_bits}"

    @property
    def block_words(self) -> int:
        """K is whole register blocks: this many words (a lanes or word tile: any number of words)."""
        return 1 if self.lanes or self.word_tile else self.spec.reg_bits // 64


def _per_cache_state(f):
    """``f`` computed once per state of the kernel cache (``cache.state``): every layer of a model asks
    again, and reading, checking and re-stamping the cache's entries took 0.5 s a time."""
    memo = functools.lru_cache(maxsize=256)(lambda state, *args, **kwargs: f(*args, **kwargs))
    return functools.wraps(f)(lambda *args, **kwargs: memo(cache.state(), *args, **kwargs))


@_per_cache_state
def gemm_kernels(isa: str, abits: int, wbits: int, encoding: str, lanes_first: bool = True) -> tuple[BitserialKernel, ...]:
    """The proved GEMM-shaped tiles of a configuration, re-proved on this machine unless stamped
    (``synth.trust``): the lanes tiles (``lanes_first``; K along the loop, no lane sums, no padding of
    K to register blocks; in ``_lanes_order``) before the acc tiles, these the tile doing the most
    plane-pair popcounts per loaded register first (``reuse``), then the one with more rows; acc tiles
    of one row only when there is no other. Refused entries are skipped
    with a warning."""
    chosen = []
    for path, entry in _configuration_entries(isa, abits, wbits, encoding):
        key = entry["spec"]
        if (key.get("layout") == "acc" and key.get("cols", 1) > 1) or (key.get("layout") == "lanes" and lanes_first):
            chosen.append(path)
    kernels = _proved(chosen)
    # one-row acc tiles only for a configuration without a larger acc tile (NEON A3W3: the synthesizer
    # found no two-row tile within its budget), whatever lanes tiles there are (kernel_layout="acc")
    larger = any(k.spec.rows > 1 for k in kernels if not k.lanes)
    kernels = [k for k in kernels if k.lanes or k.spec.rows > 1 or not larger]
    return tuple(sorted(kernels, key=lambda k: (False, *_lanes_order(k.spec)) if k.lanes
                        else (True, -reuse(k.spec), -k.spec.rows)))


# The lanes tile's activation columns the operators prefer, where measured: AVX-512 2 (32 channels x 2
# columns, A1W1) ran ResNet-18 C2/C9/C12 A1W1 in 0.108-0.129 ms against 0.111-0.166 for 4 columns,
# 0.12-0.26 for 3, 6 or 8 (requantized uint8 output, 1 thread, min of 25x10 interleaved calls; C3/C8:
# all within 5%).
LANES_COLUMNS = {"avx512": 2}
# Registers a lanes tile's inputs (weights, broadcast activations, accumulators) may take, leaving the
# rest for the and/cnt results the in-order Cortex-A53 schedule keeps live: NEON 24 of the 32 Q. Above
# it LLVM spilled in the K loop (A3W3 3 columns, 27 registers: ResNet-18 C6 K loop 54 M llvm-mca cycles
# against 34 M for 2 columns; A2W3 and A3W2 2 columns, 26: 28 M against 23 M for 3 columns).
LANES_REGISTERS = {"neon": 24}


def _lanes_order(spec: BitserialSpec) -> tuple:
    """Sort key of a configuration's lanes tiles: the preferred columns, then the tiles within the
    register budget (else the least over it), the most output channels (NEON A1W1 8x3 before 8x2:
    ResNet-18 C6 Cortex-A53 K loop 3.8 M llvm-mca cycles against 4.2 M; A1W3 4x2 before 2x3), then
    the most reuse."""
    over = max(0, len(spec.input_names) - LANES_REGISTERS.get(spec.isa, len(spec.input_names)))
    return spec.cols != LANES_COLUMNS.get(spec.isa, spec.cols), over, -spec.rows, -reuse(spec)


def _configuration_entries(isa: str, abits: int, wbits: int, encoding: str):
    """(path, entry) of the cache's bitserial entries of a configuration."""
    for path, entry in _bitserial_entries():
        key = entry["spec"]
        if (key.get("isa"), key.get("abits"), key.get("wbits"), key.get("encoding")) == (isa, abits, wbits, encoding):
            yield path, entry


@_per_cache_state
def _bitserial_entries() -> tuple[tuple[Path, dict], ...]:
    """(path, entry) of the cache's bitserial entries, read and checked once per state of the cache (an
    unreadable entry is skipped with one warning per process, ``cache.readable``): each configuration's
    first lookup read and hashed every entry of the cache again (test_every_config_has_a_gemm_tile's
    three cases: 24 103 reads)."""
    return tuple((path, entry) for path, entry in cache.readable() if entry["spec"].get("kind") == "bitserial")


def _proved(paths) -> list[BitserialKernel]:
    """The proved entries of ``paths`` as kernels, re-proved on this machine unless stamped
    (``synth.trust``); refused entries are skipped with a warning."""
    entries, refused = trust.load_all(paths)
    for line in trust.unreported(refused):
        log.warning("not used: %s", line)
    return [BitserialKernel(spec_from_key(e["spec"]), function_name(e) + "_gemm_extern", e, e["cache_key"],
                            tuple(kernel_features(e)))
            for e in entries if e["proof"]["proved"]]


# Words of K up to which a layer runs on a word tile instead of the ISA's lanes tile (NEON: the lanes
# tile's four 16-bit lanes per channel summed after the loop cost as much as a one-word loop).
WORD_TILE_WORDS = {"neon": 2}


@_per_cache_state
def word_kernels(isa: str, abits: int, wbits: int, encoding: str) -> tuple[BitserialKernel, ...]:
    """The proved ``tile`` kernels of a configuration with one 64-bit word of K per row (the ones
    ``emit`` gives a ``_gemm``), the shortest program first, then the one with more rows."""
    chosen, cost = [], {}
    for path, entry in _configuration_entries(isa, abits, wbits, encoding):
        if entry["spec"].get("layout", "tile") == "tile" and spec_from_key(entry["spec"]).k_bits == 64:
            chosen.append(path)
            cost[entry["cache_key"]] = len(entry["program"]["body"])
    return tuple(sorted(_proved(chosen), key=lambda k: (cost[k.cache_key], -k.spec.rows)))


def unipolar_twin(kernel: BitserialKernel) -> BitserialKernel | None:
    """The unipolar lanes tile a hybrid lanes tile's layer runs on (bitserial_gemm.build's fold): the
    first of its ISA's and planes' unipolar lanes tiles, or None."""
    spec = kernel.spec
    return next((k for k in gemm_kernels(spec.isa, spec.abits, spec.wbits, "unipolar") if k.lanes), None)


def _llvm_ir(entry: dict) -> str:
    """The emitted kernel's LLVM IR; a NEON kernel's for exactly its features (``kernel_ir``)."""
    ir = emit_llvm_ir(entry)
    return kernel_ir(ir, tuple(kernel_features(entry))) if entry["spec"]["isa"] in CROSS else ir


def kernel_ir(llvm_ir: str, features: tuple[str, ...]) -> str:
    """A NEON kernel's LLVM IR declared for exactly the features its instructions need (clang wrote
    the ISA toolchain's armv8.2-a+dotprod+i8mm on every function, and LLVM inlines a function only
    into one with at least its features); an instruction outside them fails at instruction
    selection, it is not dropped."""
    wanted = ",".join(f"+{f}" for f in features)
    return re.sub(r'"target-features"="[^"]*"', f'"target-features"="{wanted}"', llvm_ir)


def reuse(spec: BitserialSpec) -> float:
    """Popcounts of plane pairs per register loaded, in one K block of the tile."""
    rows = spec.weight_registers
    return spec.wbits * spec.abits * rows * spec.cols / (spec.wbits * rows + spec.abits * spec.cols)


def planes_and_word(r, abits: int, words: int):
    """(j, k, t) of the single reduction index r over weight planes × activation planes × words: one
    axis, so that A1W1 has no unit loops (which TVM folds in a tensorize description, not in the
    operator)."""
    return r // (abits * words), r // words % abits, r % words


def plane_shift(r, wbits: int, abits: int, words: int):
    """j + k, the significance of reduction index r (planes_and_word), written so that a lanes tile's
    description and the operator simplify it alike: over one word with one plane of weights or of
    activations it is r itself (r // 2 + r % 2 became (r + 1) // 2 in the operator, r in the
    description, and A2W1 over one word did not tensorize)."""
    if words == 1 and 1 in (wbits, abits):
        return r
    j, k, _ = planes_and_word(r, abits, words)
    return j + k


def dot_term(w, a, j, k, encoding: str, acc: str, shift: bool = True):
    """One plane pair's contribution, 2**(j+k) d(w, a), of a word of weights and of activations
    (``shift=False``: one plane of each, j = k = 0, written without the shift)."""
    pc = lambda v: tirx.popcount(v).astype(acc)
    d = pc(w & a) if encoding == "unipolar" else pc(w & a) * tirx.const(2, acc) - pc(a)
    return d << (j + k).astype(acc) if shift else d


@short_stack
def register(kernel: BitserialKernel, words: int, stride: int | None = None, unit_loop: bool = True) -> str:
    """Register the tile over ``words`` words of K (a whole number of blocks) of rows ``stride``
    words apart (default ``words``: K in one piece; more: a chunk of a longer K); returns its name."""
    spec, acc = kernel.spec, kernel.acc_dtype
    rows, cols, wb, ab = spec.rows, spec.cols, spec.wbits, spec.abits
    if kernel.lanes or kernel.word_tile:
        return _register_lanes(kernel, words, unit_loop, stride)
    if words % kernel.block_words:
        raise ValueError(f"{words} words are not whole {spec.reg_bits}-bit blocks")
    stride = stride or words
    name = f"qsynth_{spec.name}_k{words}" + (f"_s{stride}" if stride != words else "")
    if _REGISTERED.get(name) == kernel.function:
        return name
    w_strides, a_strides = ([rows * stride, stride, 1], [ab * stride, stride, 1]) if stride != words else (None, None)

    # only the description registered is parsed: each T.prim_func took 0.1-0.2 s in the test suite
    if rows > 1:
        @T.prim_func(s_tir=True)
        def desc(W: T.Buffer((wb, rows, words), WORD, offset_factor=1, strides=w_strides),
                 A: T.Buffer((cols, ab, words), WORD, offset_factor=1, strides=a_strides),
                 C: T.Buffer((cols, rows), acc, offset_factor=1, strides=[T.int32(), 1])) -> None:
            with T.sblock("root"):
                T.reads(C[0:cols, 0:rows], W[0:wb, 0:rows, 0:words], A[0:cols, 0:ab, 0:words])
                T.writes(C[0:cols, 0:rows])
                for n, i, r in T.grid(cols, rows, wb * ab * words):
                    with T.sblock("update"):
                        vn, vi, vr = T.axis.remap("SSR", [n, i, r])
                        C[vn, vi] = C[vn, vi] + dot_term(W[vr // (ab * words), vi, vr % words],
                                                         A[vn, vr // words % ab, vr % words],
                                                         vr // (ab * words), vr // words % ab, spec.encoding, acc)
    else:
        @T.prim_func(s_tir=True)
        def desc(W: T.Buffer((wb, rows, words), WORD, offset_factor=1, strides=w_strides),
                 A: T.Buffer((cols, ab, words), WORD, offset_factor=1, strides=a_strides),
                 C: T.Buffer((cols, rows), acc, offset_factor=1, strides=[T.int32(), 1])) -> None:
            # a one-row tile: TVM folds the operator's unit row loop, so the description has none
            with T.sblock("root"):
                T.reads(C[0:cols, 0:rows], W[0:wb, 0:rows, 0:words], A[0:cols, 0:ab, 0:words])
                T.writes(C[0:cols, 0:rows])
                for n, r in T.grid(cols, wb * ab * words):
                    with T.sblock("update"):
                        vn, vr = T.axis.remap("SR", [n, r])
                        C[vn, 0] = C[vn, 0] + dot_term(W[vr // (ab * words), 0, vr % words],
                                                       A[vn, vr // words % ab, vr % words],
                                                       vr // (ab * words), vr // words % ab, spec.encoding, acc)

    @T.prim_func(s_tir=True)
    def impl(W: T.Buffer((wb, rows, words), WORD, offset_factor=1, strides=w_strides),
             A: T.Buffer((cols, ab, words), WORD, offset_factor=1, strides=a_strides),
             C: T.Buffer((cols, rows), acc, offset_factor=1, strides=[T.int32(), 1])) -> None:
        with T.sblock("root"):
            T.reads(C[0:cols, 0:rows], W[0:wb, 0:rows, 0:words], A[0:cols, 0:ab, 0:words])
            T.writes(C[0:cols, 0:rows])
            T.evaluate(T.call_extern("int32", kernel.function, W.access_ptr("r"), stride * 8, A.access_ptr("r"),
                                     stride * 8, C.access_ptr("rw"), C.strides[0], words // kernel.block_words))

    s_tir.TensorIntrin.register(name, desc, impl, override=True)
    _REGISTERED[name] = kernel.function
    return name


def _register_lanes(kernel: BitserialKernel, words: int, unit_loop: bool = True, stride: int | None = None) -> str:
    """A lanes tile over ``words`` words of K: W = ``wbits × words × rows`` (word t of every channel
    together, the ``_gemm``'s weight image), A and C as for the acc tiles, C in int32; a word tile
    likewise with W = ``words × wbits × rows`` (word t's planes together) and C in its lanes, over a
    chunk of a K of ``stride`` words (default ``words``). ``unit_loop``:
    whether the operator keeps a one-term reduction's unit loop (the GEMM's own loops split) or not
    (the GEMM computed at the output's loops)."""
    spec, acc = kernel.spec, kernel.acc_dtype
    rows, cols, wb, ab = spec.rows, kernel.cols, spec.wbits, spec.abits
    stride = stride or words
    name = f"qsynth_{spec.name}_k{words}" + (f"_s{stride}" if stride != words else "") + ("" if unit_loop else "_nounit")
    if _REGISTERED.get(name) == kernel.function:
        return name
    shift = wb * ab > 1
    a_strides = [ab * stride, stride, 1] if stride != words else None
    if kernel.word_tile:
        shape, at, w_stride = (words, wb, rows), lambda W, j, t, i: W[t, j, i], wb * rows * 8
    else:
        shape, at, w_stride = (wb, words, rows), lambda W, j, t, i: W[j, t, i], words * rows * 8

    if wb * ab * words > 1:
        @T.prim_func(s_tir=True)
        def desc(W: T.Buffer(shape, WORD, offset_factor=1),
                 A: T.Buffer((cols, ab, words), WORD, offset_factor=1, strides=a_strides),
                 C: T.Buffer((cols, rows), acc, offset_factor=1, strides=[T.int32(), 1])) -> None:
            with T.sblock("root"):
                T.reads(C[0:cols, 0:rows], W[0:shape[0], 0:shape[1], 0:rows], A[0:cols, 0:ab, 0:words])
                T.writes(C[0:cols, 0:rows])
                for n, i, r in T.grid(cols, rows, wb * ab * words):
                    with T.sblock("update"):
                        vn, vi, vr = T.axis.remap("SSR", [n, i, r])
                        C[vn, vi] = C[vn, vi] + dot_term(at(W, vr // (ab * words), vr % words, vi),
                                                         A[vn, vr // words % ab, vr % words],
                                                         plane_shift(vr, wb, ab, words), 0, spec.encoding, acc, shift)
    elif unit_loop:
        @T.prim_func(s_tir=True)
        def desc(W: T.Buffer(shape, WORD, offset_factor=1),
                 A: T.Buffer((cols, ab, words), WORD, offset_factor=1, strides=a_strides),
                 C: T.Buffer((cols, rows), acc, offset_factor=1, strides=[T.int32(), 1])) -> None:
            # a one-term reduction (A1W1, K one word): TVM binds the operator's unit reduction loop
            # outside the block, so the description has no reduction variable
            with T.sblock("root"):
                T.reads(C[0:cols, 0:rows], W[0:shape[0], 0:shape[1], 0:rows], A[0:cols, 0:ab, 0:words])
                T.writes(C[0:cols, 0:rows])
                for n, i, r in T.grid(cols, rows, 1):
                    with T.sblock("update"):
                        vn, vi = T.axis.remap("SS", [n, i])
                        C[vn, vi] = C[vn, vi] + dot_term(at(W, 0, 0, vi), A[vn, 0, 0], 0, 0, spec.encoding, acc, False)
    else:
        @T.prim_func(s_tir=True)
        def desc(W: T.Buffer(shape, WORD, offset_factor=1),
                 A: T.Buffer((cols, ab, words), WORD, offset_factor=1, strides=a_strides),
                 C: T.Buffer((cols, rows), acc, offset_factor=1, strides=[T.int32(), 1])) -> None:
            with T.sblock("root"):
                T.reads(C[0:cols, 0:rows], W[0:shape[0], 0:shape[1], 0:rows], A[0:cols, 0:ab, 0:words])
                T.writes(C[0:cols, 0:rows])
                for n, i in T.grid(cols, rows):
                    with T.sblock("update"):
                        vn, vi = T.axis.remap("SS", [n, i])
                        C[vn, vi] = C[vn, vi] + dot_term(at(W, 0, 0, vi), A[vn, 0, 0], 0, 0, spec.encoding, acc, False)

    @T.prim_func(s_tir=True)
    def impl(W: T.Buffer(shape, WORD, offset_factor=1),
             A: T.Buffer((cols, ab, words), WORD, offset_factor=1, strides=a_strides),
             C: T.Buffer((cols, rows), acc, offset_factor=1, strides=[T.int32(), 1])) -> None:
        with T.sblock("root"):
            T.reads(C[0:cols, 0:rows], W[0:shape[0], 0:shape[1], 0:rows], A[0:cols, 0:ab, 0:words])
            T.writes(C[0:cols, 0:rows])
            T.evaluate(T.call_extern("int32", kernel.function, W.access_ptr("r"), w_stride, A.access_ptr("r"),
                                     stride * 8, C.access_ptr("rw"), C.strides[0], words))

    s_tir.TensorIntrin.register(name, desc, impl, override=True)
    _REGISTERED[name] = kernel.function
    return name
