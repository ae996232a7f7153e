"""The calling convention of emitted kernels, in words (below: every library header quotes it) and as
data (``layout``: where each register of a spec lives in memory), with the kernels' names.

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
  - ``acc``: ``a{i}``, ``b{j}`` as in ``rows``; ``c{i}_{j}`` = the four int32 lanes of C[i][j]'s
    partial sums at ``c + i*c_stride + 4j`` (a K loop keeps them and sums each across once);
  - ``tile`` (AMX): A = ``mr`` rows of ``k`` bytes at ``a + i*a_stride``, B = ``k/4`` rows of
    ``nr*4`` bytes at ``b + q*b_stride`` (the ``k4`` packing), C = ``mr`` rows of ``nr`` int32; every
    16-row tile is loaded straight from memory with its stride (``tileloadd``). Each call loads its
    C tiles, keeps them in tile registers through the whole k chain and stores them. The run-time
    contract (``qsynth_amx.h``, inside every AMX header): ``int qsynth_amx_init(void)`` once per
    process before the first tile instruction, from any thread: it requests the XTILEDATA
    permission (``arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)``) and returns 0, or the
    errno of the refused request, and the caller falls back to another kernel; then in every thread
    that runs tile code ``qs_<name>_tile_config()`` before its first call (the configuration is per
    thread, not inherited) and ``_tile_release()`` after its last. Compiled without ``-mamx-tile
    -mamx-int8`` the same header runs the tile instructions in a plain-C emulation
    (``QSYNTH_AMX_EMULATED`` is 1): correct on any x86-64 host, under the same contract, not fast.

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

import re
from dataclasses import dataclass

from emit import EmitError

# What every library header says about the convention (qsynth_kernels.h)
DOCUMENTATION = __doc__[__doc__.index("Calling convention"):]

# One line per layout kind: each header's "Calling convention" line and the manifest's.
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
            "c stride in int32; where A and B rows live per spec.layout (rows | acc | k4 | k4b | tile, see "
            "qsynth_kernels.h). Unaligned access.",
}


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
    if not m or (m[3] is not None) != (kind == "k4b" or (kind == "acc" and m[1] == "c")):
        raise EmitError(f"{kind} layout: unexpected input {name!r}")
    buf, row = "abc".index(m[1]), int(m[2])
    if m[3] is None:
        return Slot((Piece(buf, row, 0, nbytes),))
    if m[1] == "a":                                        # k4b: four bytes of row i, broadcast
        return Slot((Piece(buf, row, 4 * int(m[3]), 4),), repeat=nbytes // 4)
    return Slot((Piece(buf, row, nbytes * int(m[3]), nbytes),))     # k4b: column block of a B or C row


def function_name(entry: dict) -> str:
    """``qs_<name>``; a non-default cost model is part of the name (both may be in one library)."""
    cost = entry.get("key", {}).get("cost", "length")
    return f"qs_{entry['name']}" + ("" if cost == "length" else f"_{cost}")


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
