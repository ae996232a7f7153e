"""The inputs of the emitted kernels' check (emit/harness.py): lane values at the edges of each operand's
domain, patterns of them per slot, and batches of those written into deliberately misaligned buffers with
padded strides and garbage between rows, each writable buffer followed by guard bytes."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from isa_specs.lanes import NUMPY, mask
from emit.convention import Layout, Slot

GUARD_BYTES = 16          # checked-unchanged bytes after the writable buffer's tile
MAX_PAD = 64              # stride padding and misalignment are drawn below this


N_EDGES = 7
MIXED, RANDOM = N_EDGES, N_EDGES + 1          # pattern ids after the uniform edge values
N_PATTERNS = N_EDGES + 2


@dataclass(frozen=True)
class Domain:
    """The values one input's lanes may take: ``lane_bits``-bit lanes in ``[lo, hi]`` (two's
    complement); unrestricted inputs take any bits."""
    lane_bits: int
    lo: int
    hi: int
    restricted: bool

    def edges(self) -> list[int]:
        """N_EDGES lane values at the edges: zero, one, all ones, signed max/min… (or the ends of
        the range), as unsigned lane bits."""
        if not self.restricted:
            b = self.lane_bits
            values = [0, 1, mask(b), mask(b - 1), 1 << (b - 1), (1 << (b - 1)) + 1, mask(b) - 1]
        else:
            mid = (self.lo + self.hi + 1) // 2                 # 128 for bytes: the sign bit
            candidates = [self.lo, self.hi, 0, 1, -1, mid, self.lo + 1, self.hi - 1]
            inside = list(dict.fromkeys(v for v in candidates if self.lo <= v <= self.hi))
            values = [inside[i % len(inside)] for i in range(N_EDGES)]
        return [v & mask(self.lane_bits) for v in values]


def domains(spec) -> dict[str, Domain]:
    """Per spec input: its lanes' domain (``spec.lane_ranges()`` where the spec restricts them; int8
    accumulators have 32-bit edge values, everything else byte ones)."""
    ranges = spec.lane_ranges()
    out = {}
    for name, r in zip(spec.input_names, ranges):
        if r is not None:
            out[name] = Domain(r.lane_bits, r.lo, r.hi, True)
        else:
            bits = spec.out_lane_bits if spec.kind == "int8" and name.startswith("c") else 8
            out[name] = Domain(bits, 0, mask(bits), False)
    return out


def slot_bytes(domain: Domain, nbytes: int, patterns: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """(n, nbytes) memory contents: pattern p < N_EDGES fills every lane with edge value p, MIXED
    draws each lane from the edge values, RANDOM draws lanes uniformly from the domain."""
    n, lanes = len(patterns), nbytes * 8 // domain.lane_bits
    edges = np.array(domain.edges(), dtype=np.uint64)
    uniform = edges[np.minimum(patterns, N_EDGES - 1)][:, None]
    mixed = edges[rng.integers(0, N_EDGES, (n, lanes))]
    random = (rng.integers(domain.lo, domain.hi, (n, lanes), endpoint=True, dtype=np.int64).view(np.uint64)
              & np.uint64(mask(domain.lane_bits)))
    values = np.where((patterns < N_EDGES)[:, None], uniform, np.where((patterns == MIXED)[:, None], mixed, random))
    return np.ascontiguousarray(values.astype(f"<u{domain.lane_bits // 8}")).view(np.uint8).reshape(n, nbytes)


def sample_patterns(n_slots: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """(n, slots) pattern ids: first every slot on the same pattern (all-zero, all-one planes,
    -128 x -128, …), then half per-slot mixtures of patterns, then uniformly random inputs."""
    uniform = np.repeat(np.arange(N_PATTERNS)[:, None], n_slots, axis=1)
    mixed = rng.integers(0, N_PATTERNS, (n, n_slots))
    rand = np.full((n, n_slots), RANDOM)
    rows = np.concatenate([uniform, mixed[: (n - N_PATTERNS) // 2], rand])
    return rows[:n]


@dataclass
class Batch:
    """Memory images for ``n`` calls, the register values they encode and the expected result."""
    strides: list[int]
    misalign: list[int]
    buffers: list[np.ndarray]            # (n, size) uint8 per buffer, in parameter order
    registers: dict[str, np.ndarray]     # spec input name → (n, bytes)
    expected: np.ndarray                 # (n, size) of the writable buffer after the call


def _pieces_in(lay: Layout, b: int) -> list:
    return [p for s in (*lay.inputs.values(), *lay.outputs) for p in s.pieces if p.buffer == b]


def _extent(lay: Layout, b: int, strides: list[int]) -> int:
    """Bytes of buffer ``b`` the kernel may touch."""
    return max(_start(p, strides, lay) + p.nbytes for p in _pieces_in(lay, b))


def _row_bytes(lay: Layout, b: int) -> int:
    """The smallest stride of buffer ``b``, in bytes."""
    return max(p.offset + p.nbytes for p in _pieces_in(lay, b))


def read_slot(buffers, slot: Slot, strides, lay: Layout) -> np.ndarray:
    parts = [buffers[p.buffer][:, _start(p, strides, lay):_start(p, strides, lay) + p.nbytes] for p in slot.pieces]
    return np.tile(np.concatenate(parts, axis=1), (1, slot.repeat))


def _write(buffers, slot: Slot, strides, lay: Layout, data: np.ndarray) -> None:
    pos = 0
    for p in slot.pieces:
        start = _start(p, strides, lay)
        buffers[p.buffer][:, start:start + p.nbytes] = data[:, pos:pos + p.nbytes]
        pos += p.nbytes


def _start(p, strides, lay: Layout) -> int:
    return p.row * strides[p.buffer] * lay.buffers[p.buffer].unit + p.offset


def make_batch(spec, lay: Layout, patterns: np.ndarray, rng: np.random.Generator,
               pad: list[int], misalign: list[int]) -> Batch:
    """Pack inputs drawn from ``patterns`` (n, spec inputs) into buffers whose strides exceed the row
    size by ``pad`` units, and compute the expected writable buffer from the spec's reference."""
    n = len(patterns)
    strides = [(-(-_row_bytes(lay, b) // buf.unit) + pad[b]) if buf.unit else 0 for b, buf in enumerate(lay.buffers)]
    sizes = [_extent(lay, b, strides) + (GUARD_BYTES if buf.writable else 0) for b, buf in enumerate(lay.buffers)]
    buffers = [rng.integers(0, 256, (n, size), dtype=np.uint8) for size in sizes]
    doms = domains(spec)
    for k, name in enumerate(spec.input_names):
        slot = lay.inputs[name]
        _write(buffers, slot, strides, lay, slot_bytes(doms[name], slot.nbytes, patterns[:, k], rng))
    registers = {name: read_slot(buffers, lay.inputs[name], strides, lay) for name in spec.input_names}
    ins = [NUMPY.from_bytes(registers[name], bits) for name, bits in zip(spec.input_names, spec.input_bits)]
    outs = spec.reference(NUMPY, ins)
    [w] = [b for b, buf in enumerate(lay.buffers) if buf.writable]
    expected = [x.copy() for x in buffers]
    for slot, value in zip(lay.outputs, outs):
        result = NUMPY.to_bytes(value, n)
        if lay.accumulate:
            dtype = f"<u{lay.accumulate // 8}"
            old = np.ascontiguousarray(read_slot(expected, slot, strides, lay)).view(dtype)
            result = (old + np.ascontiguousarray(result).view(dtype)).view(np.uint8)
        _write(expected, slot, strides, lay, result)
    return Batch(strides, misalign, buffers, registers, expected[w])


def random_layout_params(lay: Layout, rng: np.random.Generator) -> tuple[list[int], list[int]]:
    """Stride padding per buffer and misalignments (multiples of the element size for typed buffers)."""
    pad = [int(rng.integers(0, MAX_PAD)) for _ in lay.buffers]
    misalign = [aligned_misalignment(b.pointee, int(rng.integers(0, MAX_PAD))) for b in lay.buffers]
    return pad, misalign


def aligned_misalignment(pointee: str, offset: int) -> int:
    """``offset`` rounded down to the alignment C requires of ``pointee`` (bytes: any offset)."""
    size = next((bits // 8 for bits in (16, 32, 64) if f"int{bits}_t" in pointee), 1)
    return offset - offset % size
