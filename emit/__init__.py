"""C emission of cached kernels: each entry becomes a ``static inline`` C function of intrinsics.

The program is already proved equal to its spec on registers; emission only has to move registers
between memory and the program and spell each instruction. Intrinsic names, operand types and
immediates come from the forms' prototypes in ``isa_specs`` (never formatted by hand); a register
whose C type differs from the operand's (NEON ``uint8x16_t`` fed to a ``uint16x8_t`` operand) gets a
``vreinterpret`` cast. Only instructions the outputs depend on are emitted.

Calling convention (also written into every generated header, and into ``manifest.json``):

* bitserial (``BitserialSpec``)::

      static inline void qs_<name>(const uint8_t *w, int w_stride, const uint8_t *a, int a_stride, T *out)

  Weight plane j of row i (input ``w{j}_{i}``) is the ``reg_bits/8`` bytes at
  ``w + (j*rows + i)*w_stride``, activation plane k (``a{k}``) those at ``a + k*a_stride``; bit b of
  every plane belongs to the same reduction index. With ``row_bits`` set, q = reg_bits/row_bits rows
  share a register: ``w{j}_{p}`` (rows pq..pq+q-1, row pq+h its h-th ``row_bits/8`` bytes) is at
  ``w + (j*rows/q + p)*w_stride`` and the ``row_bits/8`` bytes of plane k at ``a + k*a_stride`` are
  loaded into every row position (``w_stride = reg_bits/8`` is the same image as one row per
  ``row_bits/8`` bytes). The result lanes (``rows`` lanes of ``out_bits``;
  T = uint16_t/uint32_t/uint64_t for unipolar, int16_t/int32_t/int64_t for hybrid) are ADDED to
  ``out[0..rows)`` with wrap-around, so a caller loops over K blocks with the same ``out``.

* bitserial, K-accumulating (``BitserialSpec`` with ``layout="acc"``)::

      static inline void qs_<name>(const uint8_t *w, int w_stride, const uint8_t *a, int a_stride, A *acc)
      static inline void qs_<name>_gemv(const uint8_t *w, int w_stride, const uint8_t *a, int a_stride,
                                        T *out, int kblocks)

  Planes as above. ``acc`` holds the accumulator registers (``spec.accumulator_names``: ``acc{s}_{i}``
  then, for hybrid, ``pop{k}``), ``reg_bits/8`` bytes each, one after the other, updated in place; A =
  uint<out_bits>_t. ``_gemv`` is what a caller (a TVM tensorized loop) uses: it runs the proved body
  over ``kblocks`` consecutive blocks (block ``kb`` at byte offset ``kb*reg_bits/8`` of every plane)
  with the accumulators in registers, then reduces them (``_finish``: plane weights, lane sums, the
  hybrid correction) and adds the rows' dot products to ``out[0..rows)`` (T as above).

* bitserial, GEMM-shaped (``layout="acc"``, ``cols`` > 1)::

      static inline void qs_<name>(const uint8_t *w, int w_stride, const uint8_t *a, int a_stride, A *acc)
      static inline void qs_<name>_gemm(const uint8_t *w, int w_stride, const uint8_t *a, int a_stride,
                                        T *out, int out_stride, int kblocks)

  As the acc kernel, for ``cols`` activation columns: plane k of column n (``a{k}_{n}``) at
  ``a + (n*abits + k)*a_stride``; ``acc`` holds column 0's registers (the one-column order), then
  column 1's, ...; ``_gemm`` adds row i's dot product with column n to ``out[n*out_stride + i]``.

* bitserial, output channels across the lanes (``layout="lanes"``)::

      static inline void qs_<name>(const uint8_t *w, int w_stride, const uint8_t *a, int a_stride, uint<out_bits>_t *acc)
      static inline void qs_<name>_gemm(const uint8_t *w, int w_stride, const uint8_t *a, int a_stride,
                                        int32_t *out, int out_stride, int kwords)

  One 64-bit word of K: register r of weight plane j (``w{j}_{r}``, channels ``Lr..Lr+L-1`` for the
  register's L 64-bit lanes, 8 bytes each: AVX-512 8, NEON 2) at ``w + j*w_stride + 8Lr``; column n's
  activation plane k (``a{k}_{n}``) is the 8 bytes at ``a + (n*abits + k)*a_stride``, broadcast to
  every lane; ``acc`` as for the acc kernels. ``_gemm`` runs the body over ``kwords`` words (word t's
  weights ``t*rows*8`` bytes further, its activations 8 bytes) with the accumulators in registers, then
  adds channel i's dot product with column n to ``out[n*out_stride + i]`` (int32, mod 2**32): no sums
  across channels; accumulator lanes narrower than 64 bits (NEON: 16) are added per channel, and K
  runs in chunks in which none of them can wrap.

* bitserial, a K loop around a tile of one word of K per row (``layout="tile"``, ``row_bits=64``)::

      static inline void qs_<name>_gemm(const uint8_t *w, int w_stride, const uint8_t *a, int a_stride,
                                        T *out, int out_stride, int kwords)

  Word t's weights, the kernel's image of its planes (plane j of row i the 8 bytes at
  ``w + t*w_stride + (j*rows + i)*8``), and word t of column n's activation plane k at
  ``a + (n*abits + k)*a_stride + 8t``, for ``TILE_GEMM_COLUMNS`` columns; adds row i's dot product
  with column n over ``kwords`` words to ``out[n*out_stride + i]``, a lane of the kernel's (T as for
  bitserial), with wrap-around: a caller runs K in chunks that cannot wrap.

* int8 (``Int8Spec``, tile ``mr`` x ``nr`` int32 over ``k``)::

      static inline void qs_<name>(const void *a, int a_stride, const void *b, int b_stride,
                                   int32_t *c, int c_stride)

  ``c[i*c_stride + j] += sum_t A[i][t] * B[j][t]`` in int32 with wrap-around, in place (the
  accumulator inputs are loaded from ``c`` and the outputs stored back). Strides of ``a`` and ``b``
  are in bytes, of ``c`` in int32 elements. ``layout`` says where the input registers come from:

  - ``rows``: ``a{i}`` = the k elements (bytes; int16 for ``s16``) of A's row i at ``a + i*a_stride``,
    ``b{j}`` = B's row j (the k elements of output column j) at ``b + j*b_stride``, ``c{i}`` = nr int32
    at ``c + i*c_stride``;
  - ``k4``: ``a{i}`` as above (k bytes); ``b{g}`` = for each column j the four bytes
    ``B[j][4g..4g+3]``: ``nr*4`` bytes at ``b + g*b_stride`` (the sdot/vpdpbusd packing);
  - ``k4b``: as ``k4``, but input ``a{i}_{g}`` is the four bytes ``A[i][4g..4g+3]`` (at
    ``a + i*a_stride + 4g``) broadcast to every 32-bit lane, and a row of B or C spans
    ``nr*32/register bits`` registers: ``b{g}_{c}`` and ``c{i}_{c}`` are column block ``c`` (byte
    offset ``c * register bytes`` in the row);
  - ``tile`` (AMX): A = ``mr`` rows of ``k`` bytes at ``a + i*a_stride``, B = ``k/4`` rows of
    ``nr*4`` bytes at ``b + q*b_stride`` (the ``k4`` packing), C = ``mr`` rows of ``nr`` int32; every
    16-row tile is loaded straight from memory with its stride (``tileloadd``). The tile registers
    are configured once, not per call: before the first call a thread must hold the tile state
    (``arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)``) and call ``qs_<name>_tile_config()``;
    it calls ``_tile_release()`` when done. Each call loads its C tiles, keeps them in tile
    registers through the whole k chain and stores them.

The K loop of a GEMM: every int8 kernel of byte elements and layout ``k4``, ``k4b`` or ``tile`` also
has ``qs_<name>_kloop(a, a_stride, a_block, b, b_stride, c, c_stride, kblocks)``, the kernel over
``kblocks`` consecutive k blocks (block kb's A at byte offset ``kb*a_block``, its B at row ``kb*k/4``)
loading and storing C once instead of once per block: a loop of calls around the kernel stores the
accumulators every block (a compiler cannot tell C from A and B apart), which cost a third of the
VNNI tiles' speed (6x64, Zen 4: 156 -> 225 G MAC/s side by side).

No alignment is assumed anywhere (unaligned loads and stores); every input must be fully readable.
A kernel is proved only on its spec's domain (``spec.lane_ranges()``, e.g. A < 128 for ``u7s8``): the
header's "Domain" line and the manifest's ``domain`` list those preconditions.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import jinja2

from isa_specs import get_isa
from isa_specs.check import CACHE_DIR, ToolchainError
from isa_specs.instruction import CType
from sketches.program import Program
from synth.files import write_atomically
from synth.kernel import spec_from_key
from isa_specs.features import REGISTER_FILES

COMPILERS = ("gcc", "clang")
# int8 kernels that get a ``_kloop`` (the K loop of a GEMM around the step): byte elements, B in k groups
KLOOP_LAYOUTS, BYTE_TYPES = ("k4", "k4b"), ("u8s8", "u7s8", "s8s8", "u8u8")
_TEMPLATES = jinja2.Environment(
    loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
    trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
_PREFIX = "v_"      # program registers become C variables v_<name>: never clash with parameters

CALLING_CONVENTION = {
    "bitserial": "void qs_<name>(const uint8_t *w, int w_stride, const uint8_t *a, int a_stride, T *out): "
                 "plane j of weight row i at w + (j*rows + i)*w_stride, activation plane k at a + k*a_stride "
                 "(reg_bits/8 bytes each; with row_bits set, q = reg_bits/row_bits rows per register: "
                 "register p of plane j, rows pq..pq+q-1, at w + (j*rows/q + p)*w_stride, and row_bits/8 "
                 "bytes per activation plane, loaded into every row position); the rows result lanes are "
                 "added to out[0..rows) with wrap-around (T: uint<out_bits>_t unipolar, int<out_bits>_t "
                 "hybrid). Unaligned access.",
    "bitserial_acc": "void qs_<name>(const uint8_t *w, int w_stride, const uint8_t *a, int a_stride, A *acc): "
                     "planes as for bitserial; acc = the accumulator registers (acc{s}_{i}, then pop{k}), reg_bits/8 "
                     "bytes each, updated in place (A: uint<out_bits>_t). qs_<name>_gemv(w, w_stride, a, a_stride, "
                     "T *out, int kblocks) runs it over kblocks consecutive blocks with the accumulators in registers "
                     "and adds the rows' dot products to out[0..rows) (T as for bitserial). Unaligned access.",
    "bitserial_lanes": "void qs_<name>(const uint8_t *w, int w_stride, const uint8_t *a, int a_stride, A *acc): "
                       "one 64-bit word of K per 64-bit lane; register r of weight plane j (channels Lr..Lr+L-1, L its "
                       "64-bit lanes) at w + j*w_stride + 8Lr, column n's activation plane k the 8 bytes at "
                       "a + (n*abits + k)*a_stride broadcast to every lane; acc = the accumulator registers (acc{s}_{r}, then pop{k}, column by column), updated in "
                       "place. qs_<name>_gemm(w, w_stride, a, a_stride, int32_t *out, int out_stride, int kwords) runs "
                       "it over kwords words and adds channel i's dot product with column n to out[n*out_stride + i] "
                       "(mod 2^32). Unaligned access.",
    "int8": "void qs_<name>(const void *a, int a_stride, const void *b, int b_stride, int32_t *c, int c_stride): "
            "c[i*c_stride + j] += sum_t A[i][t] * B[j][t] (int32, wrap-around) in place; a/b strides in bytes, "
            "c stride in int32; where A and B rows live per spec.layout (rows | k4 | k4b | tile, see "
            "qsynth_kernels.h). Unaligned access.",
}

# C preprocessor macros that tell a translation unit it may use a CPU feature.
_FEATURE_MACROS = {
    "neon": ("__ARM_NEON",), "dotprod": ("__ARM_FEATURE_DOTPROD",), "i8mm": ("__ARM_FEATURE_MATMUL_INT8",),
    "avx2": ("__AVX2__",), "avxvnni": ("__AVXVNNI__",), "avx512f": ("__AVX512F__",),
    "avx512bw": ("__AVX512BW__",), "avx512vl": ("__AVX512VL__",), "avx512vnni": ("__AVX512VNNI__",),
    "avx512vpopcntdq": ("__AVX512VPOPCNTDQ__",), "avx512bitalg": ("__AVX512BITALG__",),
    "amx-int8": ("__AMX_TILE__", "__AMX_INT8__"),
}


class EmitError(ValueError):
    """A cache entry cannot be turned into C (ill-typed program, unknown layout…)."""


# ---------------------------------------------------------------- memory layout
@dataclass(frozen=True)
class Buffer:
    """A pointer parameter of the kernel; ``unit`` = bytes per step of its stride (0: no stride)."""
    name: str
    pointee: str
    unit: int

    @property
    def writable(self) -> bool:
        return not self.pointee.startswith("const")


@dataclass(frozen=True)
class Piece:
    """``nbytes`` bytes at ``buffer + row * stride * unit + offset``."""
    buffer: int
    row: int
    offset: int
    nbytes: int


@dataclass(frozen=True)
class Slot:
    """Where a register lives in memory: its pieces concatenated, repeated ``repeat`` times."""
    pieces: tuple[Piece, ...]
    repeat: int = 1

    @property
    def nbytes(self) -> int:
        return sum(p.nbytes for p in self.pieces)


@dataclass(frozen=True)
class Layout:
    """The calling convention of one kernel: its buffers, where each spec input and each program
    output lives, and whether the outputs are added to memory (bitserial, lanes of ``accumulate``
    bits) or stored over it (int8: the accumulator inputs' slots)."""
    kind: str
    buffers: tuple[Buffer, ...]
    inputs: dict[str, Slot]
    outputs: tuple[Slot, ...]
    accumulate: int = 0
    lane_type: str = ""          # C type of one output lane (bitserial)


def layout(spec) -> Layout:
    """The documented calling convention (module docstring) of ``spec`` as data."""
    if spec.kind == "bitserial":
        rb, q = spec.reg_bits // 8, spec.rows_per_reg
        lane = f"{'u' if spec.encoding == 'unipolar' else ''}int{spec.out_bits}_t"
        if spec.layout == "lanes":
            inputs = {f"w{j}_{r}": Slot((Piece(0, j, r * rb, rb),))
                      for j in range(spec.wbits) for r in range(spec.weight_registers)}
            inputs |= {name: Slot((Piece(1, row, 0, 8),), repeat=rb // 8) for row, name in enumerate(spec.activation_names)}
            accs = {n: Slot((Piece(2, 0, i * rb, rb),)) for i, n in enumerate(spec.accumulator_names)}
            return Layout("bitserial_lanes", (Buffer("w", "const uint8_t", 1), Buffer("a", "const uint8_t", 1),
                                              Buffer("acc", f"uint{spec.out_bits}_t", 0)),
                          inputs | accs, tuple(accs.values()), lane_type="int32_t")
        inputs = {f"w{j}_{p}": Slot((Piece(0, j * spec.rows // q + p, 0, rb),))
                  for j in range(spec.wbits) for p in range(spec.rows // q)}
        inputs |= {name: Slot((Piece(1, row, 0, rb // q),), repeat=q) for row, name in enumerate(spec.activation_names)}
        planes = (Buffer("w", "const uint8_t", 1), Buffer("a", "const uint8_t", 1))
        if spec.layout == "acc":
            accs = {n: Slot((Piece(2, 0, q * rb, rb),)) for q, n in enumerate(spec.accumulator_names)}
            return Layout("bitserial_acc", (*planes, Buffer("acc", f"uint{spec.out_bits}_t", 0)), inputs | accs,
                          tuple(accs.values()), lane_type=lane)
        out = Slot((Piece(2, 0, 0, spec.rows * spec.out_bits // 8),))
        return Layout("bitserial", (*planes, Buffer("out", lane, 0)), inputs, (out,), spec.out_bits, lane)
    if spec.kind == "int8":
        inputs = {name: _int8_slot(spec, name, bits // 8) for name, bits in zip(spec.input_names, spec.input_bits)}
        outputs = tuple(inputs[n] for n in spec.input_names if n.startswith("c"))
        return Layout("int8", (Buffer("a", "const void", 1), Buffer("b", "const void", 1), Buffer("c", "int32_t", 4)),
                      inputs, outputs)
    raise EmitError(f"no calling convention for {spec.kind!r} kernels")


def _int8_slot(spec, name: str, nbytes: int) -> Slot:
    kind = spec.layout
    if kind == "tile":          # 16 rows of 64 bytes: A (row block, k group), B (k group, column block), C
        m = re.fullmatch(r"([abc])(\d+)_(\d+)", name)
        if not m:
            raise EmitError(f"tile layout: unexpected input {name!r}")
        x, y = int(m[2]), int(m[3])
        first_row, offset = {"a": (16 * x, 64 * y), "b": (16 * y, 64 * x), "c": (16 * x, 64 * y)}[m[1]]
        return Slot(tuple(Piece("abc".index(m[1]), first_row + q, offset, 64) for q in range(16)))
    m = re.fullmatch(r"([abc])(\d+)(?:_(\d+))?", name)
    if not m or (m[3] is not None) != (kind == "k4b"):
        raise EmitError(f"{kind} layout: unexpected input {name!r}")
    buf, row = "abc".index(m[1]), int(m[2])
    if m[3] is None:
        return Slot((Piece(buf, row, 0, nbytes),))
    if m[1] == "a":                                        # k4b: four bytes of row i, broadcast
        return Slot((Piece(buf, row, 4 * int(m[3]), 4),), repeat=nbytes // 4)
    return Slot((Piece(buf, row, nbytes * int(m[3]), nbytes),))     # k4b: column block of a B or C row


# ---------------------------------------------------------------- C types and casts
@dataclass(frozen=True)
class VectorMemory:
    """Unaligned load/store and splat intrinsics of one register width; ``splats``: word bytes →
    (intrinsic broadcasting a word of that size, its result type)."""
    ctype: str
    load: str
    store: str
    pointer: str           # pointee type the load/store intrinsics take
    splats: dict


_MEMORY = {
    ("neon", 64): VectorMemory("uint8x8_t", "vld1_u8", "vst1_u8", "uint8_t", {4: ("vdup_n_u32", "uint32x2_t")}),
    ("neon", 128): VectorMemory("uint8x16_t", "vld1q_u8", "vst1q_u8", "uint8_t",
                                {4: ("vdupq_n_u32", "uint32x4_t"), 8: ("vdupq_n_u64", "uint64x2_t")}),
    ("x86", 128): VectorMemory("__m128i", "_mm_loadu_si128", "_mm_storeu_si128", "__m128i", {4: ("_mm_set1_epi32", "__m128i")}),
    ("x86", 256): VectorMemory("__m256i", "_mm256_loadu_si256", "_mm256_storeu_si256", "__m256i",
                               {4: ("_mm256_set1_epi32", "__m256i")}),
    ("x86", 512): VectorMemory("__m512i", "_mm512_loadu_si512", "_mm512_storeu_si512", "void",
                               {4: ("_mm512_set1_epi32", "__m512i"), 8: ("_mm512_set1_epi64", "__m512i")}),
}
_NEON_VECTOR = re.compile(r"(u?)int(8|16|32|64)x(\d+)_t")


def _family(isa_name: str) -> str:
    return "neon" if isa_name == "neon" else "x86"


def _memory(isa_name: str, bits: int) -> VectorMemory:
    try:
        return _MEMORY[_family(isa_name), bits]
    except KeyError:
        raise EmitError(f"no {bits}-bit vector register on {isa_name}") from None


def _is_vector(ctype: CType) -> bool:
    return ctype.name.startswith("__m") or bool(_NEON_VECTOR.fullmatch(ctype.name))


def convert(expr: str, have: CType, want: CType) -> str:
    """``expr`` (of C type ``have``) as an operand of C type ``want``: equal bits required."""
    if have.bits != want.bits:
        raise EmitError(f"operand width mismatch: {have.name} ({have.bits} bits) passed as {want.name} ({want.bits})")
    if have.name == want.name:
        return expr
    if (h := _NEON_VECTOR.fullmatch(have.name)) and (w := _NEON_VECTOR.fullmatch(want.name)):
        q = "q" if have.bits == 128 else ""
        return f"vreinterpret{q}_{'s' if w[1] == '' else 'u'}{w[2]}_{'s' if h[1] == '' else 'u'}{h[2]}({expr})"
    if not _is_vector(have) and not _is_vector(want):
        return f"({want.name})({expr})"
    raise EmitError(f"no conversion from {have.name} to {want.name}")


# ---------------------------------------------------------------- the kernel model the templates render
@dataclass
class Step:
    """One statement group of the function body; ``kind`` selects the template branch."""
    kind: str
    name: str = ""
    ctype: str = ""
    expr: str = ""
    fields: dict = field(default_factory=dict)


def function_name(entry: dict) -> str:
    """``qs_<name>``; a non-default cost model is part of the name (both may be in one library)."""
    cost = entry.get("key", {}).get("cost", "length")
    return f"qs_{entry['name']}" + ("" if cost == "length" else f"_{cost}")


def _address(lay: Layout, piece: Piece) -> str:
    """C expression of the piece's first byte, as a (const) uint8_t pointer."""
    buf = lay.buffers[piece.buffer]
    byte = "uint8_t" if buf.writable else "const uint8_t"
    terms = [buf.name if buf.pointee == byte else f"({byte} *){buf.name}"]
    if piece.row:
        unit = "" if buf.unit == 1 else f"{buf.unit} * "
        terms.append(f"(ptrdiff_t){piece.row} * {unit}{buf.name}_stride")
    if piece.offset:
        terms.append(str(piece.offset))
    return " + ".join(terms)


def _live(program: Program) -> set[int]:
    """Registers the outputs depend on."""
    n = len(program.inputs)
    live, stack = set(), list(program.outputs)
    while stack:
        r = stack.pop()
        if r in live:
            continue
        live.add(r)
        if r >= n:
            stack.extend(program.body[r - n].args)
    return live


def _issue_order(program: Program, live: set[int], registers: int | None = None) -> list[int]:
    """Indices of the live body instructions by dependence depth, then program order: independent
    chains (one per row of a tile) interleave, so neither an in-order core nor a small scheduling
    window waits on one chain's latency. With ``registers``, a greedy list schedule keeps the values
    in flight below that many: once at the limit it issues the ready instruction that ends the most
    live values (depth order alone issued all 72 and + cnt of a NEON A3W3 tile before its first
    reduction: 50 spill stores). Staged programs are inlined stage by stage, which puts each chain's
    steps together."""
    n = len(program.inputs)
    depth = [0] * n
    for ins in program.body:
        depth.append(1 + max((depth[a] for a in ins.args), default=0))
    body = [k for k in range(len(program.body)) if n + k in live]
    if registers is None:
        return sorted(body, key=lambda k: (depth[n + k], k))
    uses = {}
    for k in body:
        for a in set(program.body[k].args):
            uses[a] = uses.get(a, 0) + 1
    for o in program.outputs:             # stored at the end: live throughout
        uses[o] = uses.get(o, 0) + 1
    ends = lambda k: sum(uses[a] == 1 for a in set(program.body[k].args))      # values k is the last use of
    done, in_flight, order = set(range(n)), set(), []
    pending = sorted(body, key=lambda k: (depth[n + k], k))
    while pending:
        ready = [k for k in pending if all(a in done for a in program.body[k].args)]
        k = max(ready, key=ends) if len(in_flight) >= registers else ready[0]
        pending.remove(k)
        order.append(k)
        done.add(n + k)
        in_flight.add(n + k)
        for a in set(program.body[k].args):
            in_flight.add(a)
            uses[a] -= 1
            if uses[a] == 0:
                in_flight.discard(a)
        if not uses.get(n + k):
            in_flight.discard(n + k)
    return order


def _forms(program: Program, isa) -> list:
    """(instruction, form) of every program instruction, checked against the ISA table."""
    rows = []
    for ins in program.body:
        if ins.op.form_id not in isa.forms:
            raise EmitError(f"{ins.op.form_id} is not a {isa.name} instruction form")
        insn, form = isa.forms[ins.op.form_id]
        if (ins.op.imm is None) != (not form.imm) or (form.imm and ins.op.imm not in form.imm):
            raise EmitError(f"{ins.op}: immediate must be one of {list(form.imm)}")
        if len(ins.args) != len(form.registers):
            raise EmitError(f"{ins.op}: {len(ins.args)} operands for {len(form.registers)} registers")
        rows.append((insn, form))
    return rows


def _input_steps(program: Program, isa, lay: Layout, constants: dict, live: set[int], forms: list,
                 types: dict[int, CType]) -> dict[int, Step]:
    """Loads of the live inputs by register: vector loads, 32-bit splats (k4b), constants from byte
    arrays. Records each input register's C type in ``types``."""
    steps = {}
    for r, (name, bits) in enumerate(zip(program.inputs, program.input_bits)):
        if r not in live:
            continue
        var = _PREFIX + name
        if name in constants:
            mem = _memory(isa.name, bits)
            data = list(constant_bytes(constants[name], bits))
            steps[r] = Step("const", var, mem.ctype, fields={"data": data, "mem": mem})
            types[r] = CType.parse(mem.ctype)
            continue
        slot = lay.inputs[name]
        if slot.repeat > 1:
            word = slot.pieces[0].nbytes
            try:
                splat, ctype = _memory(isa.name, bits).splats[word]
            except KeyError:
                raise EmitError(f"input {name}: no {word}-byte splat into a {bits}-bit {isa.name} register") from None
            steps[r] = Step("splat", var, ctype, _address(lay, slot.pieces[0]), {"splat": splat, "word": f"uint{8 * word}_t"})
            types[r] = CType.parse(ctype)
        elif len(slot.pieces) == 1:
            mem = _memory(isa.name, bits)
            steps[r] = Step("load", var, mem.ctype, _address(lay, slot.pieces[0]), {"mem": mem})
            types[r] = CType.parse(mem.ctype)
        else:
            raise EmitError(f"input {name}: multi-row inputs exist only in the AMX tile layout")
    return steps


def _body_steps(program: Program, live: set[int], forms: list, types: dict[int, CType],
                loads: dict[int, Step], registers: int) -> list[Step]:
    """One step per live instruction: the intrinsic call (operands cast to the prototype's types,
    immediates as literals), each input's load placed right before its first use. gcc does not
    schedule before register allocation on x86, so source order is register pressure: with every
    load hoisted, a 6x32 vpdpbusd tile's 24 broadcasts spilled."""
    n = len(program.inputs)
    loads, steps = dict(loads), []
    for k in _issue_order(program, live, registers):
        ins, (_, form) = program.body[k], forms[k]
        steps += [loads.pop(a) for a in dict.fromkeys(ins.args) if a in loads]
        var = _PREFIX + program.name(n + k)
        args = [convert(_PREFIX + program.name(a), types[a], op.ctype) for a, op in zip(ins.args, form.registers)]
        types[n + k] = form.result
        regs = iter(args)
        call = [str(ins.op.imm) if op.ctype.is_imm else next(regs) for op in form.operands]
        steps.append(Step("op", var, form.result.name, f"{form.intrinsic}({', '.join(call)})", {"op": str(ins.op)}))
    return list(loads.values()) + steps          # inputs no instruction reads (an output as is) first


def _output_steps(program: Program, isa, lay: Layout, types: dict[int, CType]) -> list[Step]:
    """Stores of the outputs: over their slots (int8) or added lane-wise to them (bitserial)."""
    steps = []
    for reg, slot in zip(program.outputs, lay.outputs):
        var, have = _PREFIX + program.name(reg), types[reg]
        if have.bits != slot.nbytes * 8:
            raise EmitError(f"output {program.name(reg)} has {have.bits} bits, its slot {slot.nbytes * 8}")
        mem = _memory(isa.name, have.bits)
        value = convert(var, have, CType.parse(mem.ctype))
        if lay.accumulate:
            out = lay.buffers[slot.pieces[0].buffer].name
            steps.append(Step("accumulate", var, lay.lane_type, value,
                              {"mem": mem, "lanes": have.bits // lay.accumulate, "out": out,
                               "unsigned": f"uint{lay.accumulate}_t"}))
        else:
            steps.append(Step("store", var, expr=value, fields={"mem": mem, "address": _address(lay, slot.pieces[0])}))
    return steps


# ---------------------------------------------------------------- AMX tile programs
ACC_TILES, A_TILES, B_TILES = (0, 1, 2, 3), (4, 5), (6, 7)


def _strided(lay: Layout, slot: Slot) -> tuple[str, str]:
    """(address, stride in bytes) of a tile's rows: one piece per row, consecutive rows, same offset."""
    first = slot.pieces[0]
    if any((p.buffer, p.row, p.offset) != (first.buffer, first.row + i, first.offset) for i, p in enumerate(slot.pieces)):
        raise EmitError("a tile operand must be consecutive rows of one buffer at one offset")
    buf = lay.buffers[first.buffer]
    return _address(lay, first), f"{buf.unit} * {buf.name}_stride" if buf.unit != 1 else f"{buf.name}_stride"


def _tile_steps(program: Program, lay: Layout, forms: list, live: set[int]) -> tuple[dict[str, list[Step]], dict]:
    """A program of tile dot products: each accumulator chain (C tile → dp → dp …) stays in one of
    tmm0-3; A operands rotate through tmm4-5 and B operands through tmm6-7, loaded from memory only
    when not already resident (least recently loaded register reused). Returns the steps in three
    phases (``enter``: C tile loads, ``body``: A/B loads and dot products, ``leave``: C tile stores;
    a K loop repeats the body) and the tile shape the configuration must declare."""
    n = len(program.inputs)
    bits = list(program.input_bits) + [f.result_bits for _, f in forms]
    for k, (ins, (_, form)) in enumerate(zip(program.body, forms)):
        if n + k in live and [bits[a] for a in ins.args] != list(form.operand_bits):
            raise EmitError(f"{ins.op}: operand width mismatch: registers of {[bits[a] for a in ins.args]} bits "
                            f"for operands of {list(form.operand_bits)}")
    shapes = {(f.params["M"], f.params["N"], f.params["K"]) for k, (_, f) in enumerate(forms) if n + k in live}
    if len(shapes) != 1:
        raise EmitError(f"a tile program needs one tile shape, got {sorted(shapes)}")
    uses = {r: [k for k, ins in enumerate(program.body) if n + k in live and r in ins.args] for r in live}
    acc, enter, steps, leave = {}, [], [], []
    for chains, r in enumerate(program.outputs):     # walk each chain back to its C input
        chain, x = [], r
        while x >= n:
            chain.append(x)
            x = program.body[x - n].args[0]
        if chains == len(ACC_TILES) or x in acc:
            raise EmitError(f"a tile program has at most {len(ACC_TILES)} independent accumulator chains")
        for y in [x, *chain[1:]]:
            if len(uses[y]) != 1 or program.body[uses[y][0]].args[0] != y or y in program.body[uses[y][0]].args[1:]:
                raise EmitError(f"{program.name(y)} must feed exactly one tile dot product, as its accumulator")
        tmm = ACC_TILES[chains]
        acc.update({y: tmm for y in [x, *chain]})
        enter.append(Step("tileload", program.name(x), fields={"tmm": tmm, "at": _strided(lay, lay.inputs[program.name(x)])}))
    resident = {A_TILES: [], B_TILES: []}            # (input register, tmm), least recent first
    for k in _issue_order(program, live):
        ins, (_, form) = program.body[k], forms[k]
        regs = []
        for r, pool in zip(ins.args[1:], (A_TILES, B_TILES)):
            have = dict(resident[pool])
            if r not in have:
                free = [t for t in pool if t not in have.values()]
                tmm = free[0] if free else resident[pool].pop(0)[1]
                resident[pool] = [(x, t) for x, t in resident[pool] if t != tmm] + [(r, tmm)]
                steps.append(Step("tileload", program.name(r), fields={"tmm": tmm, "at": _strided(lay, lay.inputs[program.name(r)])}))
                have[r] = tmm
            regs.append(have[r])
        steps.append(Step("tiledp", program.name(n + k), expr=form.intrinsic,
                          fields={"tmm": (acc[n + k], *regs), "op": str(ins.op)}))
    for r, slot in zip(program.outputs, lay.outputs):
        leave.append(Step("tilestore", program.name(r), fields={"tmm": acc[r], "at": _strided(lay, slot)}))
    (M, N, K), = shapes
    rows_bytes = [(M, 4 * N)] * len(ACC_TILES) + [(M, K)] * len(A_TILES) + [(K // 4, 4 * N)] * len(B_TILES)
    return {"enter": enter, "body": steps, "leave": leave}, {"tiles": rows_bytes}


def kernel_model(entry: dict) -> dict:
    """Everything the kernel template needs, computed from the entry, its spec and the ISA table."""
    spec = spec_from_key(entry["spec"])
    program = Program.from_json(entry["program"])
    isa = get_isa(program.isa)
    lay = layout(spec)
    n_spec = len(spec.input_names)
    if list(program.inputs[:n_spec]) != list(spec.input_names):
        raise EmitError(f"program inputs {program.inputs[:n_spec]} are not the spec's {spec.input_names}")
    constants = entry.get("constants", {})
    if set(program.inputs[n_spec:]) != set(constants):
        raise EmitError(f"program constants {program.inputs[n_spec:]} differ from the entry's {sorted(constants)}")
    if len(program.outputs) != len(lay.outputs):
        raise EmitError(f"{len(program.outputs)} program outputs for {len(lay.outputs)} output slots")
    forms = _forms(program, isa)
    live = _live(program)
    types: dict[int, CType] = {}
    tile_config = kloop = None
    if spec.kind == "int8" and spec.layout == "tile":
        kloop, tile_config = _tile_steps(program, lay, forms, live)
        steps = kloop["enter"] + kloop["body"] + kloop["leave"]
    else:
        loads = _input_steps(program, isa, lay, constants, live, forms, types)
        steps = (_body_steps(program, live, forms, types, loads, REGISTER_FILES[isa.name].count)
                 + _output_steps(program, isa, lay, types))
        if spec.kind == "int8" and spec.layout in KLOOP_LAYOUTS and spec.types in BYTE_TYPES:
            kloop = {}
    if kloop is not None:
        kloop["b_block_rows"] = spec.k // 4
    features = {insn.feature for k, (insn, _) in enumerate(forms) if len(program.inputs) + k in live}
    if isa.name == "neon":
        features.add("neon")
    fn = function_name(entry)
    params, call_args = [], []
    for b in lay.buffers:
        params += [f"{b.pointee} *{b.name}"] + ([f"int {b.name}_stride"] if b.unit else [])
        call_args += [b.name] + ([f"{b.name}_stride"] if b.unit else [])
    return {"entry": entry, "spec": spec, "isa": isa, "function": fn, "params": params, "call_args": call_args,
            "steps": steps, "program_lines": program.lines(), "layout": lay, "features": sorted(features),
            "guard": sorted(m for f in features for m in _FEATURE_MACROS[f]),
            "include_guard": f"QSYNTH_{fn.upper()}_H", "amx": "amx-int8" in features, "domain": domain(spec),
            "tile_config": tile_config, "kloop": kloop, "gemv": _gemv_model(spec, lay),
            "tile_gemm": _tile_gemm_model(spec, lay),
            "convention": CALLING_CONVENTION[lay.kind]}


# Horizontal sum of one accumulator register in registers (C expression of ``r``, its address), where
# the compiler's own reduction beats a loop over the lanes in memory.
_LANE_SUMS = {("neon", 128, 16): "vaddvq_u16(vld1q_u16(r))", ("neon", 64, 16): "vaddv_u16(vld1_u16(r))",
              ("x86", 512, 64): "(uint64_t)_mm512_reduce_add_epi64(_mm512_loadu_si512(r))"}


# A NEON lanes tile's accumulator register at ``p`` as uint32x4_t, its lanes added pairwise (uaddlp)
_NEON_WIDEN = {16: "vpaddlq_u16(vld1q_u16({p}))"}


# Blocks per iteration of the _gemv/_gemm K loop. x86: two, half the loop's scalar uops, which
# otherwise take vector port slots (AVX-512 A1W1: +3-4% side by side). NEON: one; two spill the
# A1W1 8x2 tile's accumulators (16 of the 32 registers) to the stack, and the operator's K loop took
# 1.31x the llvm-mca cycles on Cortex-A53, 1.58x on Cortex-A72 (ResNet-18 C6; scripts/mca_bitserial_layers.py).
# The NEON lanes tile (8 accumulators): two, its loads of the second word issue among the first's
# arithmetic on the in-order Cortex-A53 (C6 A1W1 K loop 4.62 -> 4.18 M llvm-mca cycles).
_GEMV_UNROLL = {"x86": 2, "neon": 1}
_LANES_UNROLL = {"x86": 2, "neon": 2}


def _gemv_model(spec, lay: Layout) -> dict | None:
    """What the K loop and the epilogue of an ``acc`` kernel need (None for other kernels)."""
    if lay.kind not in ("bitserial_acc", "bitserial_lanes"):
        return None
    lanes_layout = lay.kind == "bitserial_lanes"
    sub_lanes = 64 // spec.out_bits if lanes_layout else 1
    # lanes tiles with accumulator lanes narrower than a channel's word (NEON: 16 bits) run K in chunks
    # in which no lane can wrap: per word a lane gains at most out_bits per plane pair of its significance
    chunk_words = ((1 << spec.out_bits) - 1) // (spec.out_bits * min(spec.abits, spec.wbits)) if sub_lanes > 1 else None
    widen = _NEON_WIDEN.get(spec.out_bits) if (_family(spec.isa), spec.reg_bits) == ("neon", 128) else None
    if sub_lanes > 1 and widen is None:
        raise EmitError(f"no epilogue for {spec.out_bits}-bit accumulator lanes of a lanes tile on {spec.isa}")
    return {"sub_lanes": sub_lanes, "chunk_words": chunk_words,
            # NEON: a channel's accumulator lanes summed by vector pairwise adds (the compiler's own code
            # for a scalar loop moved every lane out one by one: 2x the plain TIR's cycles on a 1x1 layer)
            "neon_widen": widen,
            "acc_type": lay.buffers[2].pointee, "out_type": lay.lane_type, "rows": spec.rows, "cols": spec.cols,
            "loop": "gemm" if spec.cols > 1 or lanes_layout else "gemv", "strided": spec.cols > 1 or lanes_layout,
            "lanes_layout": lanes_layout, "registers_per_plane": spec.weight_registers,
            "weight_rows": spec.wbits if lanes_layout else spec.wbits * spec.rows,
            "column_registers": len(spec.column_accumulators(0)),
            "lane_sum": _LANE_SUMS.get((_family(spec.isa), spec.reg_bits, spec.out_bits)),
            "registers": len(spec.accumulator_names),
            "lanes": spec.lanes if lanes_layout else spec.reg_bits // spec.out_bits,
            "unroll": (_LANES_UNROLL if lanes_layout else _GEMV_UNROLL)[_family(spec.isa)],
            "block_bytes": spec.reg_bits // 8, "significances": spec.significances, "abits": spec.abits,
            "hybrid": spec.encoding == "hybrid", "act_weight": 2 ** spec.wbits - 1}


# Activation columns of a tile kernel's ``_gemm``: its weights loaded once for all of them, and as many
# independent addp trees for the in-order Cortex-A53 to issue while each waits on the one before
# (ResNet-18 C3 A1W1, llvm-mca cycles of the K loop: 2 columns 0.65 M, 4 0.46 M, 8 0.43 M).
TILE_GEMM_COLUMNS = 8


def _tile_gemm_model(spec, lay: Layout) -> dict | None:
    """What the ``_gemm`` of a ``tile`` kernel of one 64-bit word of K per row needs (None for other
    kernels): a K loop for the layers whose K is a word or two, where a lanes tile's lane sums after
    the loop cost as much as the loop. Each word's dot products come out whole (an addp tree)."""
    if lay.kind != "bitserial" or spec.k_bits != 64:
        return None
    return {"cols": TILE_GEMM_COLUMNS, "rows": spec.rows, "abits": spec.abits, "lane_type": lay.lane_type,
            "unsigned": f"uint{spec.out_bits}_t", "register_bytes": spec.reg_bits // 8}


def constant_bytes(constant: dict, bits: int) -> bytes:
    """A cache entry's constant (``{"value": hex, "bits": n}``) as the little-endian register bytes."""
    if constant["bits"] != bits:
        raise EmitError(f"constant of {constant['bits']} bits feeds a {bits}-bit program input")
    return int(constant["value"], 16).to_bytes(bits // 8, "little")


def domain(spec) -> list[str]:
    """The spec's input preconditions in words (lane ranges narrower than the lane type)."""
    ranges = spec.lane_ranges()
    groups: dict[tuple, list[str]] = {}
    for name, r in zip(spec.input_names, ranges):
        if r is not None and (r.hi - r.lo < (1 << r.lane_bits) - 1 or r.repeat):   # not every value of the lane
            groups.setdefault((r.lane_bits, r.lo, r.hi, r.repeat), []).append(name)
    return [f"{', '.join(names)}: " + (f"one {repeat}-bit group repeated in every position" if repeat else "")
            + (", " if repeat and hi - lo < (1 << bits) - 1 else "")
            + (f"every {bits}-bit lane in [{lo}, {hi}]" if hi - lo < (1 << bits) - 1 else "")
            for (bits, lo, hi, repeat), names in groups.items()]


# ---------------------------------------------------------------- public API
def emit_entry(entry: dict) -> str:
    """The C source (a self-contained header) of one cache entry."""
    return _TEMPLATES.get_template("kernel.h.j2").render(m=kernel_model(entry))


def _driver(template: str, m: dict) -> str:
    """A test program: the kernel's header followed by ``templates/<template>``'s main()."""
    return _TEMPLATES.get_template(template).render(m=m, kernel=_TEMPLATES.get_template("kernel.h.j2").render(m=m))


def driver_source(entry: dict) -> str:
    """A test driver around the kernel: see ``templates/driver.c.j2`` and ``emit/harness.py``."""
    return _driver("driver.c.j2", kernel_model(entry))


def gemv_driver_source(entry: dict) -> str:
    """A test driver around an ``acc`` kernel's ``_gemv`` loop: see ``templates/gemv_driver.c.j2``."""
    m = kernel_model(entry)
    if not m["gemv"]:
        raise EmitError(f"{entry['name']} has no gemv loop (only bitserial kernels of the acc layout do)")
    return _driver("gemv_driver.c.j2", m)


def kloop_driver_source(entry: dict) -> str:
    """A test driver around an int8 kernel's ``_kloop``: see ``templates/kloop_driver.c.j2``."""
    m = kernel_model(entry)
    if not m["kloop"]:
        raise EmitError(f"{entry['name']} has no K loop (only int8 kernels of byte elements in k4, k4b or tile do)")
    return _driver("kloop_driver.c.j2", m)


def file_name(entry: dict) -> str:
    return function_name(entry).removeprefix("qs_") + ".h"


def emit_library(entries: list[dict], out_dir: str | Path) -> dict:
    """Write one header per entry, ``qsynth_kernels.h`` and ``manifest.json`` into ``out_dir``.

    Every file is written to a temporary name and renamed into place, so a reader never sees a
    half-written library. Returns the manifest."""
    out_dir = Path(out_dir)
    models = sorted((kernel_model(e) for e in entries), key=lambda m: (m["isa"].name, m["function"]))
    seen: dict[str, str] = {}
    for m in models:
        key = m["entry"]["cache_key"]
        if m["function"] in seen:
            raise EmitError(f"entries {seen[m['function']]} and {key} both define {m['function']}; "
                            "select one with --configs or remove the stale entry")
        seen[m["function"]] = key
    kernels = []
    for m in models:
        e = m["entry"]
        fname = file_name(e)
        write_atomically(out_dir / fname, _TEMPLATES.get_template("kernel.h.j2").render(m=m))
        kernels.append({"name": e["name"], "cache_key": e["cache_key"], "file": fname, "function": m["function"],
                        "signature": f"void {m['function']}({', '.join(m['params'])})",
                        "extern_function": m["function"] + "_extern", "isa": m["isa"].name, "kind": m["spec"].kind,
                        "spec": e["spec"], "cost": e["key"]["cost"], "proved": e["proof"]["proved"],
                        "length": len(Program.from_json(e["program"])), "guard": m["guard"],
                        "test_flags": list(compile_flags(m["isa"].name, "gcc", m["features"])), "domain": m["domain"],
                        "calling_convention": m["convention"]})
    write_atomically(out_dir / "qsynth_kernels.h", _TEMPLATES.get_template("library.h.j2").render(
        kernels=kernels, doc=__doc__[__doc__.index("Calling convention"):]))
    manifest = {"format": 1, "header": "qsynth_kernels.h", "calling_conventions": CALLING_CONVENTION,
                "kernels": kernels}
    write_atomically(out_dir / "manifest.json", json.dumps(manifest, indent=1) + "\n")
    return manifest


# ---------------------------------------------------------------- compiling
# x86 extensions a kernel is compiled with only when its own instructions need them: a compiler may
# pick them for plain code too (clang fuses a K loop's vpmaddwd + vpaddd into AVX-VNNI's vpdpwssd,
# which Zen 4 lacks), and the host check reads the kernel's instructions, not its flags.
_EXTENSION_FLAGS = {"avxvnni": "-mavxvnni", "avx512vnni": "-mavx512vnni", "avx512vpopcntdq": "-mavx512vpopcntdq",
                    "avx512bitalg": "-mavx512bitalg"}


def compile_flags(isa_name: str, compiler: str, features=None) -> tuple[str, ...]:
    """The ISA toolchain's flags at -O3, without the extensions outside ``features`` (a kernel's
    ``kernel_model`` features; None: all of them); clang targets AArch64 explicitly for NEON."""
    if compiler not in COMPILERS:
        raise EmitError(f"unknown compiler {compiler!r}; accepted: {', '.join(COMPILERS)}")
    unused = set() if features is None else {flag for f, flag in _EXTENSION_FLAGS.items() if f not in features}
    flags = tuple(f for f in get_isa(isa_name).toolchain.cflags if not f.startswith("-O") and f not in unused)
    flags += ("-O3",)
    if compiler == "clang" and isa_name == "neon":
        flags = ("--target=aarch64-linux-gnu",) + flags
    return flags


def compiler_command(isa_name: str, compiler: str, features=None) -> list[str]:
    cc = get_isa(isa_name).toolchain.cc if compiler == "gcc" else "clang"
    return [cc, *compile_flags(isa_name, compiler, features)]


def build(source: str, isa_name: str, compiler: str, features=None) -> Path:
    """Compile ``source`` into an executable (warnings are errors; ``features`` as for
    ``compile_flags``), cached by content under the qsynth build directory."""
    cmd = compiler_command(isa_name, compiler, features) + ["-Wall", "-Werror"]
    return _cached_compile(cmd, source, f"kernel-{isa_name}-{compiler}-{{}}")


def _cached_compile(cmd: list[str], source: str, name: str) -> Path:
    """``cmd`` run on ``source`` once per content: the output is ``name`` (``{}`` the content key)
    under the qsynth build directory, written atomically."""
    output = CACHE_DIR / name.format(hashlib.sha256((source + " ".join(cmd)).encode()).hexdigest()[:20])
    if not output.exists():
        _run_compiler(cmd, source, output)
    return output


def _run_compiler(cmd: list[str], source: str, output: Path) -> None:
    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        src, tmp_out = Path(tmp) / "kernel.c", Path(tmp) / "out"
        src.write_text(source)
        try:
            proc = subprocess.run([*cmd, "-o", str(tmp_out), str(src)], capture_output=True, text=True)
        except FileNotFoundError as e:
            raise ToolchainError(f"compiler {cmd[0]} not found: {e}") from e
        if proc.returncode != 0:
            raise ToolchainError(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
        os.replace(tmp_out, output)


def emit_llvm_ir(entry: dict) -> str:
    """``clang -S -emit-llvm`` of the kernel with its extern wrapper ``qs_<name>_extern`` (a
    ``static inline`` function alone is dropped from the module), for TVM's ``pragma_import_llvm``.
    x86 kernels target the host, NEON kernels ``aarch64-linux-gnu``. Cached by content under the
    qsynth build directory, as ``build`` is: every operator of a model asks for its tiles' IR."""
    m = kernel_model(entry)
    source = "#define QSYNTH_EXTERN_WRAPPERS 1\n" + _TEMPLATES.get_template("kernel.h.j2").render(m=m)
    cmd = [*compiler_command(m["isa"].name, "clang", m["features"]), "-S", "-emit-llvm"]
    return _cached_compile(cmd, source, f"kernel-{m['isa'].name}-{{}}.ll").read_text()
