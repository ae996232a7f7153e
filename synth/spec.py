"""Kernel specifications: the mathematics a synthesized kernel must compute, for both backends.

These dataclasses are the interface later stages share (cache keys, C calling convention, TVM
tensorization): a spec names its tile, its register layout and its input/output registers.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from isa_specs.lanes import total

ENCODINGS = ("unipolar", "hybrid")
INT8_TYPES = ("u8s8", "s8s8", "u8u8", "s16")

# Default tile per ISA: weight rows, register bits (K packed bits per plane), output lane bits.
BITSERIAL_TILES = {
    "neon": {"rows": 8, "reg_bits": 128, "out_bits": 16},    # the paper's 8x16-byte Q tile
    "avx2": {"rows": 4, "reg_bits": 256, "out_bits": 64},
    "avx512": {"rows": 8, "reg_bits": 512, "out_bits": 64},
}


class SpecError(ValueError):
    """An invalid kernel specification (the message says what is accepted)."""


def _check(cond: bool, message: str):
    if not cond:
        raise SpecError(message)


@dataclass(frozen=True)
class BitserialSpec:
    """A bitserial GEMV tile: ``rows`` weight rows · one activation column over ``reg_bits`` packed bits.

    Inputs: weight bit-planes ``w{j}_{i}`` (plane j of row i) and activation planes ``a{k}``, one
    register each, bit ``b`` of every plane belonging to the same reduction index. Output: one
    register of ``rows`` lanes of ``out_bits``; lane ``i`` is

        sum_{j,k} 2**(j+k) * d(w_j_i, a_k)   (mod 2**out_bits)

    with ``d(w, a) = popcount(w & a)`` (unipolar: weights and activations in {0,1}) or
    ``d(w, a) = popcount(w & a) - popcount(~w & a) = 2 popcount(w & a) - popcount(a)`` (hybrid:
    bipolar weights in {-1,+1}, unipolar activations). A wide popcount is *defined* as the sum of the
    per-byte popcounts, so the compute/reduction split needs no lemma.
    """
    isa: str
    abits: int
    wbits: int
    encoding: str
    rows: int
    reg_bits: int
    out_bits: int

    def __post_init__(self):
        _check(self.abits in (1, 2, 3), f"--abits must be 1, 2 or 3, got {self.abits}")
        _check(self.wbits in (1, 2, 3), f"--wbits must be 1, 2 or 3, got {self.wbits}")
        _check(self.encoding in ENCODINGS, f"--encoding must be one of {', '.join(ENCODINGS)}, got {self.encoding!r}")
        _check(self.reg_bits in (64, 128, 256, 512), f"register bits must be 64, 128, 256 or 512, got {self.reg_bits}")
        _check(self.out_bits in (16, 32, 64), f"output lane bits must be 16, 32 or 64, got {self.out_bits}")
        _check(self.rows * self.out_bits in (64, 128, 256, 512),
               f"{self.rows} rows of {self.out_bits}-bit lanes do not fill one register")
        biggest = self.reg_bits * (2 ** self.abits - 1) * (2 ** self.wbits - 1)
        _check(2 * biggest < 2 ** self.out_bits,
               f"{self.out_bits}-bit output lanes can overflow for A{self.abits}W{self.wbits} over {self.reg_bits} bits")

    @staticmethod
    def for_isa(isa: str, abits: int, wbits: int, encoding: str, rows: int | None = None, **over) -> "BitserialSpec":
        _check(isa in BITSERIAL_TILES, f"bitserial kernels exist for {', '.join(BITSERIAL_TILES)}, not {isa!r}")
        tile = dict(BITSERIAL_TILES[isa], **over)
        if rows is not None:
            _check(rows >= 1, f"--rows must be positive, got {rows}")
            tile["rows"] = rows
        return BitserialSpec(isa, abits, wbits, encoding, **tile)

    @property
    def kind(self) -> str:
        return "bitserial"

    @property
    def out_lane_bits(self) -> int:
        return self.out_bits

    @property
    def name(self) -> str:
        return f"bitserial_a{self.abits}w{self.wbits}_{self.encoding}_{self.rows}x{self.reg_bits}_{self.isa}"

    def key(self) -> dict:
        return {"kind": self.kind, **asdict(self)}

    @property
    def input_names(self) -> list[str]:
        return [f"w{j}_{i}" for j in range(self.wbits) for i in range(self.rows)] + [f"a{k}" for k in range(self.abits)]

    @property
    def input_bits(self) -> list[int]:
        return [self.reg_bits] * len(self.input_names)

    @property
    def output_bits(self) -> list[int]:
        return [self.rows * self.out_bits]

    def byte_dot(self, B, w, a):
        """Per-byte contribution of one plane pair, as a signed value in a byte lane."""
        wa = B.lanes(B.and_(w, a), 8)
        if self.encoding == "unipolar":
            return [B.popcount(x) for x in wa]
        return [B.sub(B.add(B.popcount(x), B.popcount(x)), B.popcount(y)) for x, y in zip(wa, B.lanes(a, 8))]

    def reference(self, B, inputs):
        """The specification, on any backend: inputs in ``input_names`` order → [output register]."""
        w = [inputs[j * self.rows:(j + 1) * self.rows] for j in range(self.wbits)]
        a = inputs[self.wbits * self.rows:]
        extend = B.zext if self.encoding == "unipolar" else B.sext
        lanes = []
        for i in range(self.rows):
            terms = [B.shl(extend(d, self.out_bits), j + k)
                     for j in range(self.wbits) for k in range(self.abits)
                     for d in self.byte_dot(B, w[j][i], a[k])]
            lanes.append(total(B, terms))
        return [B.join(lanes)]


@dataclass(frozen=True)
class Int8Spec:
    """An int8 dot-product tile: ``mr`` × ``nr`` int32 accumulators over a ``k``-element step.

    Inputs: ``a`` (mr rows × k bytes, row-major, one register per row), ``b`` (nr columns × k bytes,
    one register per column) and the accumulator registers ``c{i}`` (nr int32 lanes for row i).
    Output ``c{i}`` lane ``j`` += sum_t a[i][t] * b[j][t] in int32 with wrap-around; ``types`` gives
    the operand signedness (``u8s8``: a unsigned, b signed; ``s16``: s8×s8 through int16 products).
    """
    isa: str
    types: str
    mr: int
    nr: int
    k: int
    reg_bits: int

    def __post_init__(self):
        _check(self.types in INT8_TYPES, f"--types must be one of {', '.join(INT8_TYPES)}, got {self.types!r}")
        _check(self.mr >= 1 and self.nr >= 1, f"--mr and --nr must be positive, got {self.mr}, {self.nr}")
        _check(self.nr * 32 <= self.reg_bits, f"{self.nr} int32 lanes do not fit a {self.reg_bits}-bit register")
        _check(self.k * 8 <= self.reg_bits, f"a {self.k}-byte row does not fit a {self.reg_bits}-bit register")

    @property
    def kind(self) -> str:
        return "int8"

    @property
    def out_lane_bits(self) -> int:
        return 32

    @property
    def name(self) -> str:
        return f"int8_{self.types}_{self.mr}x{self.nr}x{self.k}_{self.isa}"

    def key(self) -> dict:
        return {"kind": self.kind, **asdict(self)}

    @property
    def signed(self) -> tuple[bool, bool]:
        return {"u8s8": (False, True), "s8s8": (True, True), "u8u8": (False, False), "s16": (True, True)}[self.types]

    @property
    def input_names(self) -> list[str]:
        return [f"a{i}" for i in range(self.mr)] + [f"b{j}" for j in range(self.nr)] + [f"c{i}" for i in range(self.mr)]

    @property
    def input_bits(self) -> list[int]:
        return [self.k * 8] * (self.mr + self.nr) + [self.nr * 32] * self.mr

    @property
    def output_bits(self) -> list[int]:
        return [self.nr * 32] * self.mr

    def reference(self, B, inputs):
        a, b, c = inputs[:self.mr], inputs[self.mr:self.mr + self.nr], inputs[self.mr + self.nr:]
        sa, sb = self.signed
        ext = lambda x, s: B.sext(x, 32) if s else B.zext(x, 32)
        outs = []
        for i in range(self.mr):
            lanes = []
            for j, acc in enumerate(B.lanes(c[i], 32)):
                prods = [B.mul(ext(x, sa), ext(y, sb)) for x, y in zip(B.lanes(a[i], 8), B.lanes(b[j], 8))]
                lanes.append(total(B, [acc, *prods]))
            outs.append(B.join(lanes))
        return outs
