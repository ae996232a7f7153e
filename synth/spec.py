"""Kernel specifications: the mathematics a synthesized kernel must compute, for both backends.

These dataclasses are the interface later stages share (cache keys, C calling convention, TVM
tensorization): a spec names its tile, its register layout and its input/output registers.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from isa_specs.features import REGISTER_FILES
from isa_specs.lanes import total
from synth.tiles import BITSERIAL_TILES, DEFAULT_LAYOUT, INT8_TILES, LANES_ACCUMULATORS, LANES_TILE

ENCODINGS = ("unipolar", "hybrid")
INT8_TYPES = ("u8s8", "u7s8", "s8s8", "u8u8", "s16")
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


LAYOUTS = ("rows", "k4", "k4b", "tile")


@dataclass(frozen=True)
class Int8Spec:
    """An int8 GEMM tile: ``C[i][j] += sum_t A[i][t] * B[j][t]`` for i < mr, j < nr, t < k, in int32
    with wrap-around. ``types``: operand signedness (``u8s8``: A unsigned, B signed; ``u7s8``: A in
    [0, 127], the range in which vpmaddubsw cannot saturate; ``s16``: int16 elements, QNN's ARMv8
    legalization). ``layout``, the register layout chosen by the schedule:

    * ``rows``: ``a{i}`` = row i of A (k elements), ``b{j}`` = column j of B, ``c{i}`` = nr int32;
    * ``k4``:   ``a{i}`` = row i of A (k bytes), ``b{g}`` = for each column j the 4 bytes
      ``B[j][4g..4g+3]`` (the sdot/vpdpbusd packing), ``c{i}``;
    * ``k4b``:  as k4, but ``a{i}_{g}`` holds ``A[i][4g..4g+3]`` broadcast to every 32-bit lane, and
      the nr columns span ``nr / lanes`` vector registers (column block ``c``: columns
      ``c*lanes..``): ``b{g}_{c}`` and ``c{i}_{c}``;
    * ``tile``: AMX tiles of 16 rows × 64 bytes: ``a{r}_{g}`` = A rows 16r..16r+15, bytes 64g..64g+63;
      ``b{c}_{g}`` = rows 16g..16g+15 of the k4-packed B (k/4 rows of nr·4 bytes), bytes 64c..64c+63
      (columns 16c..16c+15); ``c{r}_{c}`` = C rows 16r.., columns 16c.. (16 × 16 int32).
    """
    isa: str
    types: str
    layout: str
    mr: int
    nr: int
    k: int

    def __post_init__(self):
        _check(self.types in INT8_TYPES, f"--types must be one of {', '.join(INT8_TYPES)}, got {self.types!r}")
        _check(self.layout in LAYOUTS, f"layout must be one of {', '.join(LAYOUTS)}, got {self.layout!r}")
        _check(self.mr >= 1 and self.nr >= 1, f"--mr and --nr must be positive, got {self.mr}, {self.nr}")
        _check(self.k % (1 if self.layout == "rows" else 4) == 0, f"k must be a multiple of 4, got {self.k}")
        _check(self.layout != "tile" or (self.mr % 16, self.nr % 16, self.k % 64) == (0, 0, 0),
               f"AMX tiles need mr, nr multiples of 16 and k of 64, got {self.mr}x{self.nr}x{self.k}")
        _check(self.layout != "rows" or self.nr * 32 <= 512, "too many columns for one register")
        lanes = (REGISTER_FILES[self.isa].bits if self.isa in REGISTER_FILES else 32) // 32
        _check(self.layout != "k4b" or self.nr % lanes == 0,
               f"--nr for {self.isa} must be a multiple of {lanes} (whole registers), got {self.nr}")
        _bounded(self.name, self.mr * self.nr * self.k, "multiply-adds (mr x nr x k)")

    @property
    def column_blocks(self) -> int:
        """k4b: vector registers per row of C; other layouts: 1."""
        return self.nr // self.block_columns

    @property
    def block_columns(self) -> int:
        """Columns of C per output register: k4b, the int32 lanes of a vector register; else all nr."""
        return REGISTER_FILES[self.isa].bits // 32 if self.layout == "k4b" else self.nr

    @staticmethod
    def for_isa(isa: str, types: str, mr: int | None = None, nr: int | None = None,
                layout: str | None = None, k: int | None = None) -> "Int8Spec":
        isas = sorted({i for i, _, _ in INT8_TILES})
        _check(isa in isas, f"no int8 kernels for {isa!r}; accepted: {', '.join(isas)}")
        tiles = sorted({t for i, t, _ in INT8_TILES if i == isa})
        _check(types in tiles, f"--types for {isa} must be one of {', '.join(tiles)}, got {types!r}")
        layouts = [lay for i, t, lay in INT8_TILES if (i, t) == (isa, types)]
        layout = layout or layouts[0]
        _check(layout in layouts, f"--layout for {isa} {types} int8 kernels must be one of {', '.join(layouts)}, "
               f"got {layout!r}")
        dmr, dnr, dk = INT8_TILES[isa, types, layout]
        _check(k is None or layout != "rows", f"--k is fixed for the {layout} layout ({dk})")
        _check(k is None or layout != "tile" or (k % 64 == 0 and 64 <= k <= dk),
               f"--k for the {isa} tile must be a multiple of 64 (one tile row of bytes) up to {dk}, got {k}")
        if layout == "tile":
            _check((mr or dmr, nr or dnr) == (dmr, dnr), f"the {isa} {types} tile is {dmr}x{dnr} (one full tile "
                   f"register); --mr/--nr must be {dmr}/{dnr}, got {mr}/{nr}")
        elif layout == "k4":
            _check((nr or dnr) == dnr, f"--nr for {isa} {types} must be {dnr} (the int32 lanes of one register), "
                   f"got {nr}")
        return Int8Spec(isa, types, layout, mr or dmr, nr or dnr, k or dk)

    @property
    def kind(self) -> str:
        return "int8"

    @property
    def out_lane_bits(self) -> int:
        return 32

    @property
    def elem_bits(self) -> int:
        return 16 if self.types == "s16" else 8

    @property
    def name(self) -> str:
        return f"int8_{self.types}_{self.layout}_{self.mr}x{self.nr}x{self.k}_{self.isa}"

    def key(self) -> dict:
        return {"kind": self.kind, **asdict(self)}

    @property
    def signed(self) -> tuple[bool, bool]:
        return {"u8s8": (False, True), "u7s8": (False, True), "s8s8": (True, True), "u8u8": (False, False),
                "s16": (True, True)}[self.types]

    @property
    def inputs(self) -> list[tuple[str, int]]:
        """(name, bits) of every input register, in order."""
        e, g = self.elem_bits, self.k // 4
        if self.layout == "tile":
            tile, rs, cs, gs = 16 * 64 * 8, range(self.mr // 16), range(self.nr // 16), range(self.k // 64)
            return ([(f"a{r}_{x}", tile) for r in rs for x in gs] + [(f"b{c}_{x}", tile) for c in cs for x in gs]
                    + [(f"c{r}_{c}", tile) for r in rs for c in cs])
        if self.layout == "rows":
            ab = [(f"a{i}", self.k * e) for i in range(self.mr)] + [(f"b{j}", self.k * e) for j in range(self.nr)]
        elif self.layout == "k4":
            ab = [(f"a{i}", self.k * 8) for i in range(self.mr)] + [(f"b{x}", self.nr * 32) for x in range(g)]
        else:
            v, cb = REGISTER_FILES[self.isa].bits, range(self.column_blocks)
            return ([(f"a{i}_{x}", v) for i in range(self.mr) for x in range(g)]
                    + [(f"b{x}_{c}", v) for x in range(g) for c in cb]
                    + [(f"c{i}_{c}", v) for i in range(self.mr) for c in cb])
        return ab + [(f"c{i}", self.nr * 32) for i in range(self.mr)]

    @property
    def input_names(self) -> list[str]:
        return [n for n, _ in self.inputs]

    @property
    def input_bits(self) -> list[int]:
        return [b for _, b in self.inputs]

    @property
    def output_bits(self) -> list[int]:
        if self.layout == "tile":
            return [16 * 16 * 32] * (self.mr // 16 * self.nr // 16)
        return [self.block_columns * 32] * (self.mr * self.column_blocks)

    def matrices(self, B, inputs):
        """A[i][t], B[j][t] element lanes and C[i][j] accumulator lanes, read through the layout."""
        x = dict(zip(self.input_names, inputs))
        e, g = self.elem_bits, self.k // 4
        if self.layout == "tile":
            lanes = {n: B.lanes(v, 32 if n.startswith("c") else 8) for n, v in x.items()}
            A = [[lanes[f"a{i // 16}_{t // 64}"][i % 16 * 64 + t % 64] for t in range(self.k)] for i in range(self.mr)]
            Bm = [[lanes[f"b{j // 16}_{t // 64}"][t % 64 // 4 * 64 + j % 16 * 4 + t % 4] for t in range(self.k)]
                  for j in range(self.nr)]
            C = [[lanes[f"c{i // 16}_{j // 16}"][i % 16 * 16 + j % 16] for j in range(self.nr)] for i in range(self.mr)]
            return A, Bm, C
        if self.layout == "k4b":
            L = self.block_columns
            packed = {n: B.lanes(v, 8) for n, v in x.items() if n[0] == "b"}
            Bm = [[packed[f"b{t // 4}_{j // L}"][j % L * 4 + t % 4] for t in range(self.k)] for j in range(self.nr)]
            A = [[B.lanes(x[f"a{i}_{t // 4}"], 8)[t % 4] for t in range(self.k)] for i in range(self.mr)]
            C = [[B.lanes(x[f"c{i}_{j // L}"], 32)[j % L] for j in range(self.nr)] for i in range(self.mr)]
            return A, Bm, C
        C = [B.lanes(x[f"c{i}"], 32) for i in range(self.mr)]
        if self.layout == "rows":
            return ([B.lanes(x[f"a{i}"], e) for i in range(self.mr)],
                    [B.lanes(x[f"b{j}"], e) for j in range(self.nr)], C)
        packed = [B.lanes(x[f"b{q}"], 8) for q in range(g)]
        Bm = [[packed[t // 4][j * 4 + t % 4] for t in range(self.k)] for j in range(self.nr)]
        return [B.lanes(x[f"a{i}"], 8) for i in range(self.mr)], Bm, C

    def reference(self, B, inputs):
        A, Bm, C = self.matrices(B, inputs)
        sa, sb = self.signed
        ext = lambda v, s: B.sext(v, 32) if s else B.zext(v, 32)
        rows = [[total(B, [C[i][j], *[B.mul(ext(x, sa), ext(y, sb)) for x, y in zip(A[i], Bm[j])]])
                 for j in range(self.nr)] for i in range(self.mr)]
        if self.layout == "tile":       # one register per 16 x 16 tile, row-major inside
            return [B.join([rows[i][j] for i in range(16 * r, 16 * r + 16) for j in range(16 * c, 16 * c + 16)])
                    for r in range(self.mr // 16) for c in range(self.nr // 16)]
        L = self.block_columns
        return [B.join(r[c * L:(c + 1) * L]) for r in rows for c in range(self.column_blocks)]

    def lane_ranges(self):
        """Per input, the domain the kernel is specified on: A and B elements as (un)signed lanes
        (A broadcast per 32-bit group in the k4b layout), accumulators any bits."""
        from isa_specs.ranges import LaneRange
        e = self.elem_bits
        bounds = lambda signed: (-(1 << (e - 1)), (1 << (e - 1)) - 1) if signed else (0, (1 << e) - 1)
        a_lo, a_hi = (0, 127) if self.types == "u7s8" else bounds(self.signed[0])
        b_lo, b_hi = bounds(self.signed[1])
        out = []
        for name, _ in self.inputs:
            if name.startswith("a"):
                out.append(LaneRange(e, a_lo, a_hi, repeat=32 if self.layout == "k4b" else 0))
            elif name.startswith("b"):
                out.append(LaneRange(e, b_lo, b_hi))
            else:
                out.append(None)
        return out
