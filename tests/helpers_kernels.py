"""Hand-written kernel programs, one per emission path and layout (vector loads and casts, 32-bit
broadcasts, AMX tile gathers/scatters), so the emitter is tested on every layout even when the cache
holds no synthesized kernel of that kind (constants from byte arrays come with the cached AVX2
bitserial kernels). They are not proved: the tests check them against the spec on the machine, like
cached kernels."""
from __future__ import annotations

from synth import cache
from synth.int8_spec import Int8Spec


def _entry(spec, body: list, outputs: list, constants: dict | None = None) -> dict:
    """A cache-entry-shaped dict for a program over ``spec.input_names`` + ``constants`` (name → (bits, value))."""
    constants = constants or {}
    program = {"isa": spec.isa, "inputs": spec.input_names + list(constants),
               "input_bits": spec.input_bits + [bits for bits, _ in constants.values()],
               "body": body, "outputs": outputs}
    key = {"spec": spec.key(), "cost": "handwritten"}
    return {"name": spec.name, "spec": spec.key(), "key": key, "cache_key": cache.cache_key(key), "program": program,
            "constants": {k: {"value": hex(v), "bits": bits} for k, (bits, v) in constants.items()},
            "proof": {"proved": False, "obligations": [], "solver": "none"}}


class _Body:
    """SSA body under construction: ``op`` appends an instruction and returns its register."""

    def __init__(self, names: list[str]):
        self.reg = {n: i for i, n in enumerate(names)}
        self.n, self.body = len(names), []

    def op(self, form: str, *args: int) -> int:
        self.body.append([form, list(args)])
        return self.n + len(self.body) - 1


def _dot_rows(spec: Int8Spec, form, operands) -> dict:
    """c_i += one dot-product instruction per 4-byte group g, chained."""
    b, outs = _Body(spec.input_names), []
    for i in range(spec.mr):
        acc = b.reg[f"c{i}"]
        for g in range(spec.k // 4):
            acc = b.op(form(g), acc, *operands(b.reg, i, g))
        outs.append(acc)
    return _entry(spec, b.body, outs)


def neon_sdot_k4() -> dict:
    """k4 layout: sdot by element, B's packed group as the vector, A's row as the indexed register."""
    return _dot_rows(Int8Spec("neon", "s8s8", "k4", 4, 4, 16), lambda g: f"sdot.4s_laneq#{g}",
                     lambda r, i, g: (r[f"b{g}"], r[f"a{i}"]))


def neon_udot_rows() -> dict:
    """rows layout with a constant: udot of row i and column j into a zero register, then an addp
    tree of the four partial-sum registers added to c_i."""
    spec = Int8Spec("neon", "u8u8", "rows", 4, 4, 16)
    b = _Body(spec.input_names + ["zero"])
    r, outs = b.reg, []
    for i in range(spec.mr):
        acc = [b.op("udot.4s", r["zero"], r[f"a{i}"], r[f"b{j}"]) for j in range(spec.nr)]
        sums = b.op("addp.4s", b.op("addp.4s", acc[0], acc[1]), b.op("addp.4s", acc[2], acc[3]))
        outs.append(b.op("add.4s", r[f"c{i}"], sums))
    return _entry(spec, b.body, outs, {"zero": (128, 0)})


def avx512_vpdpbusd_k4b() -> dict:
    """k4b layout, two column blocks: vpdpbusd with A's four bytes broadcast, B's packed group of
    columns 16c..16c+15 as the vector."""
    spec = Int8Spec("avx512", "u8s8", "k4b", 4, 32, 8)
    b, outs = _Body(spec.input_names), []
    for i in range(spec.mr):
        for c in range(spec.column_blocks):
            acc = b.reg[f"c{i}_{c}"]
            for g in range(spec.k // 4):
                acc = b.op("vpdpbusd.zmm", acc, b.reg[f"a{i}_{g}"], b.reg[f"b{g}_{c}"])
            outs.append(acc)
    return _entry(spec, b.body, outs)


def amx_tdpbusd_tile() -> dict:
    """tile layout, 16x32x128: two accumulator chains of two tdpbusd sharing the A tiles."""
    spec = Int8Spec("amx", "u8s8", "tile", 16, 32, 128)
    b = _Body(spec.input_names)
    r = b.reg
    outs = []
    for c in range(2):
        acc = r[f"c0_{c}"]
        for g in range(2):
            acc = b.op("tdpbusd.m16n16k64", acc, r[f"a0_{g}"], r[f"b{c}_{g}"])
        outs.append(acc)
    return _entry(spec, b.body, outs)


HANDWRITTEN = [neon_sdot_k4(), neon_udot_rows(), avx512_vpdpbusd_k4b(), amx_tdpbusd_tile()]
