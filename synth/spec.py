"""Kernel specifications: the mathematics a synthesized kernel must compute, for both backends.

These dataclasses (the int8 one in synth/int8_spec.py) are the interface later stages share (cache
keys, C calling convention, TVM tensorization): a spec names its tile, its register layout and its
input/output registers.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from isa_specs.features import REGISTER_FILES
from isa_specs.lanes import total
from synth.tiles import BITSERIAL_TILES, DEFAULT_LAYOUT, LANES_ACCUMULATORS, LANES_TILE

ENCODINGS = ("unipolar", "hybrid")
# The largest tile synthesis takes, in products per call: the AMX 32x32x256 tile's. --timeout bounds time,
# but a proof's memory grows with the products (2 M, A1W1 acc 4000 rows: 5 GB), so bigger specs are refused.
MAX_PRODUCTS = 1 << 18


class SpecError(ValueError):
    """An invalid kernel specification (the message says what is accepted)."""


def _check(cond: bool, message: str):
    if not cond:
        raise SpecError(message)


def _bounded(name: str, products: int, what: str):
    _check(products <= MAX_PRODUCTS, f"{name}: {products} {what} per call; synthesis takes at most {MAX_PRODUCTS}")


BITSERIAL_LAYOUTS = ("tile", "acc", "lanes")
# AVX2 has no vector popcount: its byte-lane nibble-table counts are only worth widening once per K
# block and summing across lanes once per K loop, i.e. in the acc layout. The lanes layout needs a
# popcount of whole output lanes (AVX-512 vpopcntq) or of bytes widened pairwise into accumulator
# lanes within each channel's 64-bit lane (NEON cnt + uadalp).
ISA_LAYOUTS = {"neon": ("tile", "acc", "lanes"), "avx2": ("acc",), "avx512": ("tile", "acc", "lanes")}


def register_rows(lanes: list, q: int) -> list[list]:
    """A register's lanes as the ``q`` rows packed into it (``BitserialSpec.row_bits``), in order."""
    n = len(lanes) // q
    return [lanes[h * n:(h + 1) * n] for h in range(q)]


def lane_popcounts(B, x, lane_bits):
    """Per ``lane_bits`` lane of ``x``: the sum of its bytes' popcounts (the definition of a wide
    popcount), as a ``lane_bits``-bit value."""
    counts = [B.zext(B.popcount(b), lane_bits) for b in B.lanes(x, 8)]
    per = lane_bits // 8
    return [total(B, counts[i:i + per]) for i in range(0, len(counts), per)]


@dataclass(frozen=True)
class BitserialSpec:
    """A bitserial GEMV tile: ``rows`` weight rows · one activation column over ``reg_bits`` packed bits.

    Inputs: weight bit-planes ``w{j}_{i}`` (plane j of row i) and activation planes ``a{k}``, one
    register each, bit ``b`` of every plane belonging to the same reduction index. With
    ``d(w, a) = popcount(w & a)`` (unipolar: weights and activations in {0,1}) or
    ``d(w, a) = popcount(w & a) - popcount(~w & a) = 2 popcount(w & a) - popcount(a)`` (hybrid:
    bipolar weights in {-1,+1}, unipolar activations), the ``layout`` decides what the kernel returns:

    * ``tile``: one register of ``rows`` lanes of ``out_bits``; lane ``i`` is
      ``sum_{j,k} 2**(j+k) * d(w_j_i, a_k)  (mod 2**out_bits)``: the whole dot product of the block.
    * ``acc`` (K-accumulating, for a loop over K blocks): accumulator registers of ``out_bits`` lanes,
      updated in place and reduced across lanes once after the loop. ``acc{s}_{i}`` (s = j + k, the
      bit significance) gains, per lane, the popcounts of ``w_j_i & a_k`` over that lane's bytes for
      every plane pair with j + k = s; for hybrid, ``pop{k}`` gains the popcounts of ``a_k`` (shared
      by all rows). The dot product is then ``sum_s 2**s sum_lanes acc{s}_{i}`` (unipolar) or
      ``2 * that - (2**wbits - 1) * sum_k 2**k sum_lanes pop{k}`` (hybrid), everything mod
      ``2**out_bits``, so lane wrap-around over a long K is harmless.

    ``cols`` (acc layout; default 1) makes the tile GEMM-shaped: ``cols`` activation columns, each with
    its own planes ``a{k}_{n}`` and accumulators ``acc{s}_{i}_{n}`` / ``pop{k}_{n}`` (column n's
    registers are the one-column kernel's, in its order), so a loaded weight plane serves every
    column; with one column the names are those of the GEMV tile.

    ``lanes`` (K along the loop, output channels across the 64-bit lanes, each holding one word of
    K): ``rows`` output channels in ``rows / lanes`` registers per weight plane (``w{j}_{r}``: 64-bit
    lane l is channel ``r * lanes + l``'s word of K), ``cols`` activation columns whose plane registers
    ``a{k}_{n}`` hold one 64-bit word of K broadcast to every lane, and accumulators ``acc{s}_{r}_{n}``
    (and, hybrid, ``pop{k}_{n}``) of ``out_bits`` lanes updated lane-wise exactly as in the acc layout:
    the ``64 / out_bits`` accumulator lanes within 64-bit lane l of ``acc{s}_{r}_{n}`` sum the popcounts
    of channel ``r * lanes + l``'s words against column n's (AVX-512: one 64-bit lane; NEON: four
    16-bit lanes, summed once after the loop). No sums across channels: 64-bit lane l is one output.
    A K of any number of 64-bit words runs without padding to register blocks (ResNet-18's 1x1
    layers: one to four words).

    ``row_bits`` (tile layout; default: one row per register) packs q = reg_bits/row_bits rows into
    each weight register: ``w{j}_{p}`` holds rows pq..pq+q-1, row pq+h in its h-th ``row_bits``
    block, and every activation register holds its ``row_bits`` block in each of the q positions
    (row pq+h reads position h).

    A wide popcount is *defined* as the sum of the per-byte popcounts, so the compute/reduction split
    needs no lemma.
    """
    isa: str
    abits: int
    wbits: int
    encoding: str
    rows: int
    reg_bits: int
    out_bits: int
    layout: str = "tile"
    row_bits: int | None = None
    cols: int = 1

    def __post_init__(self):
        _check(self.abits in (1, 2, 3), f"--abits must be 1, 2 or 3, got {self.abits}")
        _check(self.wbits in (1, 2, 3), f"--wbits must be 1, 2 or 3, got {self.wbits}")
        _check(self.encoding in ENCODINGS, f"--encoding must be one of {', '.join(ENCODINGS)}, got {self.encoding!r}")
        _check(self.layout in BITSERIAL_LAYOUTS, f"--layout must be one of {', '.join(BITSERIAL_LAYOUTS)}, "
               f"got {self.layout!r}")
        _check(self.layout in ISA_LAYOUTS.get(self.isa, BITSERIAL_LAYOUTS),
               f"{self.isa} bitserial kernels use --layout {' or '.join(ISA_LAYOUTS.get(self.isa, ()))}, not {self.layout!r}")
        _check(self.reg_bits in (64, 128, 256, 512), f"register bits must be 64, 128, 256 or 512, got {self.reg_bits}")
        _check(self.out_bits in (16, 32, 64), f"output lane bits must be 16, 32 or 64, got {self.out_bits}")
        if self.row_bits is not None:
            _check(self.layout == "tile", "--row-bits packs several rows into a register of the tile layout only "
                   "(acc kernels keep one accumulator register per row)")
            _check(self.row_bits in (64, 128, 256) and self.row_bits < self.reg_bits,
                   f"--row-bits must be 64, 128 or 256 and below the {self.reg_bits} register bits, got {self.row_bits}")
            _check(self.rows % self.rows_per_reg == 0,
                   f"{self.rows} rows do not fill registers of {self.rows_per_reg} rows of {self.row_bits} bits")
        _check(self.cols >= 1, f"--cols must be positive, got {self.cols}")
        _check(self.cols == 1 or self.layout in ("acc", "lanes"),
               "--cols (activation columns) is for the acc and lanes layouts (a K loop per output tile)")
        _bounded(self.name, self.rows * self.cols * self.k_bits * self.abits * self.wbits,
                 "bit products (rows x columns x K bits x plane pairs)")
        if self.layout == "lanes":
            lanes = self.lanes
            _check(self.out_bits <= 64, f"lanes kernels hold one 64-bit word of K per lane: accumulator lanes "
                   f"of at most 64 bits, got {self.out_bits}")
            _check(self.rows >= lanes and self.rows % lanes == 0,
                   f"--rows of a lanes tile must be a multiple of the {lanes} lanes of a register, got {self.rows}")
            return
        if self.layout == "acc":
            _check(self.rows >= 1, f"--rows must be positive, got {self.rows}")
            return
        _check(self.rows * self.out_bits in (64, 128, 256, 512),
               f"{self.rows} rows of {self.out_bits}-bit lanes do not fill one register")
        biggest = self.k_bits * (2 ** self.abits - 1) * (2 ** self.wbits - 1)
        _check(2 * biggest < 2 ** self.out_bits,
               f"{self.out_bits}-bit output lanes can overflow for A{self.abits}W{self.wbits} over {self.k_bits} bits")

    @staticmethod
    def for_isa(isa: str, abits: int, wbits: int, encoding: str, rows: int | None = None, layout: str | None = None,
                **over) -> "BitserialSpec":
        _check(isa in BITSERIAL_TILES, f"bitserial kernels exist for {', '.join(BITSERIAL_TILES)}, not {isa!r}")
        layout = layout or DEFAULT_LAYOUT[isa]
        tile = dict(BITSERIAL_TILES[isa], **over)
        if layout == "lanes":
            _check(isa in LANES_TILE, f"lanes kernels exist for {', '.join(LANES_TILE)}, not {isa!r}")
            tile = {**BITSERIAL_TILES[isa], **LANES_TILE[isa], **over}
            lanes = tile["reg_bits"] // 64
            if rows is not None:
                tile["rows"] = rows
            else:       # the most registers (of 4, 2, 1) whose accumulators fit in LANES_ACCUMULATORS
                budget = LANES_ACCUMULATORS[isa] - (tile["cols"] * abits if encoding == "hybrid" else 0)
                regs = next((r for r in (4, 2, 1) if r * tile["cols"] * (abits + wbits - 1) <= budget), 1)
                tile["rows"] = regs * lanes
            return BitserialSpec(isa, abits, wbits, encoding, layout=layout, **tile)
        if rows is not None:
            _check(rows >= 1, f"--rows must be positive, got {rows}")
            tile["rows"] = rows
        elif layout == "acc":     # accumulators within half the registers (the rest hold planes and temporaries;
            # at 3/4 the 24-accumulator A3W1 and A1W3 loops measured 0.8x of the 4-row ones on AVX-512): no spills
            cols = tile.get("cols", 1)
            budget = REGISTER_FILES[isa].count // 2 - (cols * abits if encoding == "hybrid" else 0)
            tile["rows"] = next((r for r in (tile["rows"], 4, 2) if r * cols * (abits + wbits - 1) <= budget), 1)
        return BitserialSpec(isa, abits, wbits, encoding, layout=layout, **tile)

    @property
    def kind(self) -> str:
        return "bitserial"

    @property
    def out_lane_bits(self) -> int:
        return self.out_bits

    @property
    def k_bits(self) -> int:
        """Packed bits of one row (the reduction length of one call; lanes: one word per lane)."""
        return 64 if self.layout == "lanes" else self.row_bits or self.reg_bits

    @property
    def lanes(self) -> int:
        """Output channels of a lanes tile's register: its 64-bit lanes."""
        return self.reg_bits // 64

    @property
    def weight_registers(self) -> int:
        """Registers of one weight plane: a row each (acc), ``rows_per_reg`` rows each (tile), or
        ``lanes`` channels each (lanes)."""
        if self.layout == "lanes":
            return self.rows // self.lanes
        return self.rows // self.rows_per_reg

    @property
    def rows_per_reg(self) -> int:
        return self.reg_bits // self.k_bits

    @property
    def name(self) -> str:
        acc = {"acc": "_acc", "lanes": "_lanes"}.get(self.layout, "")
        packed = f"in{self.reg_bits}" if self.row_bits else ""
        cols = f"_n{self.cols}" if self.cols > 1 else ""
        return (f"bitserial_a{self.abits}w{self.wbits}_{self.encoding}{acc}_{self.rows}x{self.k_bits}{packed}{cols}"
                f"_{self.isa}")

    def key(self) -> dict:
        key = {"kind": self.kind, **asdict(self)}
        if self.layout == "tile":        # the layout every entry had before "acc" existed
            del key["layout"]
        if self.row_bits is None:        # one row per register, as before packing existed
            del key["row_bits"]
        if self.cols == 1:               # one activation column, as before GEMM-shaped tiles existed
            del key["cols"]
        return key

    @property
    def significances(self) -> int:
        """Distinct bit significances j + k of the plane pairs."""
        return self.abits + self.wbits - 1

    def col(self, n: int) -> str:
        """Name suffix of activation column ``n`` (none for a one-column tile)."""
        return f"_{n}" if self.cols > 1 else ""

    def column_accumulators(self, n: int) -> list[str]:
        """Column ``n``'s accumulator registers, in the one-column kernel's order."""
        pops = [f"pop{k}{self.col(n)}" for k in range(self.abits)] if self.encoding == "hybrid" else []
        return ([f"acc{s}_{i}{self.col(n)}" for s in range(self.significances) for i in range(self.weight_registers)]
                + pops)

    @property
    def accumulator_names(self) -> list[str]:
        """The ``acc`` layout's in-place registers (inputs and, in this order, outputs): column by column."""
        if self.layout not in ("acc", "lanes"):
            return []
        return [name for n in range(self.cols) for name in self.column_accumulators(n)]

    @property
    def activation_names(self) -> list[str]:
        return [f"a{k}{self.col(n)}" for n in range(self.cols) for k in range(self.abits)]

    @property
    def input_names(self) -> list[str]:
        return ([f"w{j}_{p}" for j in range(self.wbits) for p in range(self.weight_registers)]
                + self.activation_names + self.accumulator_names)

    @property
    def input_bits(self) -> list[int]:
        return [self.reg_bits] * len(self.input_names)

    @property
    def output_bits(self) -> list[int]:
        if self.layout in ("acc", "lanes"):
            return [self.reg_bits] * len(self.accumulator_names)
        return [self.rows * self.out_bits]

    def lane_ranges(self):
        """Bitserial planes and accumulators are arbitrary bits; with rows packed, an activation plane
        is its ``row_bits`` block repeated in every row position of the register; in the lanes layout
        it is one 64-bit word broadcast to every lane."""
        from isa_specs.ranges import LaneRange
        act = LaneRange(8, 0, 255, repeat=self.k_bits) if self.row_bits or self.layout == "lanes" else None
        return [act if n.startswith("a") and not n.startswith("acc") else None for n in self.input_names]

    def byte_dot(self, B, w, a):
        """Per-byte contribution of one plane pair (byte lists), as a signed value in a byte lane."""
        wa = [B.and_(x, y) for x, y in zip(w, a)]
        if self.encoding == "unipolar":
            return [B.popcount(x) for x in wa]
        return [B.sub(B.add(B.popcount(x), B.popcount(x)), B.popcount(y)) for x, y in zip(wa, a)]

    def reference(self, B, inputs):
        """The specification, on any backend: inputs in ``input_names`` order → output registers.
        Row i is row position i % rows_per_reg of register i // rows_per_reg."""
        regs = self.weight_registers
        w = [inputs[j * regs:(j + 1) * regs] for j in range(self.wbits)]
        acts = self.wbits * regs + self.abits * self.cols
        a = inputs[self.wbits * regs:acts]
        if self.layout in ("acc", "lanes"):
            acc = dict(zip(self.accumulator_names, inputs[acts:]))
            return [r for n in range(self.cols)
                    for r in self._accumulated(B, w, a[n * self.abits:(n + 1) * self.abits], acc, self.col(n))]
        extend = B.zext if self.encoding == "unipolar" else B.sext
        q = self.rows_per_reg
        row = lambda x, i: register_rows(B.lanes(x, 8), q)[i % q]
        lanes = []
        for i in range(self.rows):
            terms = [B.shl(extend(d, self.out_bits), j + k)
                     for j in range(self.wbits) for k in range(self.abits)
                     for d in self.byte_dot(B, row(w[j][i // q], i), row(a[k], i))]
            lanes.append(total(B, terms))
        return [B.join(lanes)]

    def _accumulated(self, B, w, a, acc, col):
        """One activation column's updated accumulators (``col``: its name suffix)."""
        ob, out = self.out_bits, []
        for s in range(self.significances):
            for i in range(self.weight_registers):
                pairs = [lane_popcounts(B, B.and_(w[j][i], a[s - j]), ob)
                         for j in range(self.wbits) if 0 <= s - j < self.abits]
                out.append(B.join([total(B, [old, *add]) for old, *add in zip(B.lanes(acc[f"acc{s}_{i}{col}"], ob), *pairs)]))
        if self.encoding == "hybrid":
            for k in range(self.abits):
                out.append(B.join([B.add(old, n) for old, n in zip(B.lanes(acc[f"pop{k}{col}"], ob), lane_popcounts(B, a[k], ob))]))
        return out
