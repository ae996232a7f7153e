"""The int8 GEMM tile specification (``Int8Spec``): the mathematics an int8 kernel must compute and
the register layouts a schedule can ask for (synth/spec.py holds the bitserial one and what both share)."""
from __future__ import annotations

from dataclasses import asdict, dataclass

from isa_specs.features import REGISTER_FILES
from isa_specs.lanes import total
from isa_specs.products import sums_of_products
from synth.spec import _bounded, _check
from synth.tiles import INT8_TILES

INT8_TYPES = ("u8s8", "u7s8", "u8r7", "s8s8", "s8s7", "u8u8", "s16", "w16")
LAYOUTS = ("rows", "k4", "k4b", "tile", "acc")


@dataclass(frozen=True)
class Int8Spec:
    """An int8 GEMM tile: ``C[i][j] += sum_t A[i][t] * B[j][t]`` for i < mr, j < nr, t < k, in int32
    with wrap-around. ``types``: operand signedness (``u8s8``: A unsigned, B signed; ``u7s8``: A in
    [0, 127], the range in which vpmaddubsw cannot saturate; ``u8r7``: A unsigned, B in [-64, 64], the
    weights onnxruntime's ``reduce_range`` writes (its advice for x86 hosts without VNNI), on which
    vpmaddubsw cannot saturate either, |a b + a' b'| <= 2 * 255 * 64 = 32640; ``s8s7``: A signed, B in
    [-127, 127], a sign and 7 bits of magnitude (onnxruntime's symmetric int8 weights), the range in which two
    products fit one int16 lane, |a b + a' b'| <= 2 * 128 * 127 (MLAS's smull + smlal, then sadalp);
    ``s16``: int16 elements, QNN's ARMv8 legalization; ``w16``: int16 elements holding 8-bit data widened
    (u8 or s8 activations, s8 weights: any 9-bit signed value), exact for every int8 operand on AVX2 and
    AVX-512BW by vpmaddwd, with no precondition on the weights). ``layout``, the register layout chosen by the schedule:

    * ``rows``: ``a{i}`` = row i of A (k elements), ``b{j}`` = column j of B, ``c{i}`` = nr int32;
    * ``k4``:   ``a{i}`` = row i of A (k bytes), ``b{g}`` = for each column j the 4 bytes
      ``B[j][4g..4g+3]`` (the sdot/vpdpbusd packing), ``c{i}``;
    * ``k4b``:  as k4, but ``a{i}_{g}`` holds ``A[i][4g..4g+3]`` broadcast to every 32-bit lane (int16
      elements: ``A[i][2g..2g+1]``, and B in groups of two; ``group``), and
      the nr columns span ``nr / lanes`` vector registers (column block ``c``: columns
      ``c*lanes..``): ``b{g}_{c}`` and ``c{i}_{c}``;
    * ``tile``: AMX tiles of 16 rows × 64 bytes: ``a{r}_{g}`` = A rows 16r..16r+15, bytes 64g..64g+63;
      ``b{c}_{g}`` = rows 16g..16g+15 of the k4-packed B (k/4 rows of nr·4 bytes), bytes 64c..64c+63
      (columns 16c..16c+15); ``c{r}_{c}`` = C rows 16r.., columns 16c.. (16 × 16 int32).
    * ``acc``:  ``a{i}``, ``b{j}`` as in rows; ``c{i}_{j}`` = 4 int32 lanes of partial sums of C[i][j],
      lane l taking the products of t with (t // 2) % 4 == l (umull's pairs, widened by uadalp; with
      k = 16, smull's and smlal2's products t and t + 8 added in one int16 lane first, then pairs
      widened by sadalp): a K loop keeps these lanes over the whole depth and sums them across once
      at its end.
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
        step = {"rows": 1, "acc": 8}.get(self.layout, self.group)
        _check(self.k % step == 0, f"k must be a multiple of {step}, got {self.k}")
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
    def group(self) -> int:
        """k4 / k4b / tile: the elements of one k group, one 32-bit lane per column (4 bytes, 2 int16)."""
        return 32 // self.elem_bits

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
        return 16 if self.types in ("s16", "w16") else 8

    @property
    def name(self) -> str:
        return f"int8_{self.types}_{self.layout}_{self.mr}x{self.nr}x{self.k}_{self.isa}"

    def key(self) -> dict:
        return {"kind": self.kind, **asdict(self)}

    @property
    def signed(self) -> tuple[bool, bool]:
        return {"u8s8": (False, True), "u7s8": (False, True), "u8r7": (False, True), "s8s8": (True, True),
                "s8s7": (True, True), "u8u8": (False, False), "s16": (True, True), "w16": (True, True)}[self.types]

    @property
    def inputs(self) -> list[tuple[str, int]]:
        """(name, bits) of every input register, in order."""
        e, g = self.elem_bits, self.k // self.group
        if self.layout == "tile":
            tile, rs, cs, gs = 16 * 64 * 8, range(self.mr // 16), range(self.nr // 16), range(self.k // 64)
            return ([(f"a{r}_{x}", tile) for r in rs for x in gs] + [(f"b{c}_{x}", tile) for c in cs for x in gs]
                    + [(f"c{r}_{c}", tile) for r in rs for c in cs])
        if self.layout in ("rows", "acc"):
            ab = [(f"a{i}", self.k * e) for i in range(self.mr)] + [(f"b{j}", self.k * e) for j in range(self.nr)]
            if self.layout == "acc":
                return ab + [(f"c{i}_{j}", 128) for i in range(self.mr) for j in range(self.nr)]
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
        if self.layout == "acc":
            return [128] * (self.mr * self.nr)
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
            L, q = self.block_columns, self.group
            packed = {n: B.lanes(v, e) for n, v in x.items() if n[0] == "b"}
            Bm = [[packed[f"b{t // q}_{j // L}"][j % L * q + t % q] for t in range(self.k)] for j in range(self.nr)]
            A = [[B.lanes(x[f"a{i}_{t // q}"], e)[t % q] for t in range(self.k)] for i in range(self.mr)]
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
        if self.layout == "acc":
            sa, sb = self.signed
            ext = lambda v, s: B.sext(v, 32) if s else B.zext(v, 32)
            x = dict(zip(self.input_names, inputs))
            A = [B.lanes(x[f"a{i}"], self.elem_bits) for i in range(self.mr)]
            Bm = [B.lanes(x[f"b{j}"], self.elem_bits) for j in range(self.nr)]
            return [B.join([total(B, [c, *[B.mul(ext(A[i][t], sa), ext(Bm[j][t], sb)) for t in range(self.k)
                                            if t // 2 % 4 == lane]])
                            for lane, c in enumerate(B.lanes(x[f"c{i}_{j}"], 32))])
                    for i in range(self.mr) for j in range(self.nr)]
        rows = sums_of_products(B, *self.matrices(B, inputs), self.signed)
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
        nine_bits = (-256, 255)          # w16: 8-bit data, u8 or s8, widened
        a_lo, a_hi = (0, 127) if self.types == "u7s8" else nine_bits if self.types == "w16" else bounds(self.signed[0])
        b_lo, b_hi = {"s8s7": (-127, 127), "u8r7": (-64, 64), "w16": nine_bits}.get(self.types) or bounds(self.signed[1])
        out = []
        for name, _ in self.inputs:
            if name.startswith("a"):
                out.append(LaneRange(e, a_lo, a_hi, repeat=32 if self.layout == "k4b" else 0))
            elif name.startswith("b"):
                out.append(LaneRange(e, b_lo, b_hi))
            else:
                out.append(None)
        return out

