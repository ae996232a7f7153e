"""Which exact operator a layer of 1-3-bit activations and weights runs on: the bitserial operator or
the int8 one. Both are exact on the layer's integer codes (a 1-3-bit code is an int8 value), so the
choice is speed alone: the tuning log's measurement for the layer's shape where it holds one
(``scripts/bench_bitserial_layers.py --log``), else a rule from the operators' measured rates.

The rule: a bitserial layer does one pass of AND/popcount per pair of bit-planes, so its time grows
with ``abits * wbits`` (Zen 3, ResNet-18's C2, AVX2 tiles: A1W1 209, A1W2 101, A2W2 53, A3W3 25 G
MAC/s), while the int8 operator's does not. It runs bitserial when its A1W1 rate over
``abits * wbits`` beats the host's int8 rate, on the ResNet-18 3x3 layers, one thread (CPU time):

* int8 rates: AMX 1780 G MAC/s (Sapphire Rapids class, benchmarks/amx_layers.md, C6 0.065 ms); AVX-512
  VNNI 200 (Zen 4, benchmarks/layers_bitserial.json's int8_ours: 199-223 on the 3x3 layers, 130-184 on
  the 1x1 ones; the AMX host's VNNI
  ran 430, where the rule's A2W2 on bitserial is then 1.17x slower than int8, 0.409 ms against 0.35,
  and Zen 4's A2W2 on int8 would be 1.2-1.6x slower: the rule takes the figure that costs least when
  wrong); AVX2's exact w16 tiles 72 (Zen 3, direct: tuning_logs/znver3, C6 1.6 ms; 63-75 on the layers
  benchmarks/layers_bitserial_znver3.json runs directly). Not measured: AVX-VNNI on
  ymm (taken as half of VNNI's zmm) and AVX-512BW's w16 on zmm (twice AVX2's);
* int8 by Winograd (``WINOGRAD_GMACS``, by stride: a 3x3 stride-1 layer where the host's tiles are
  int16 rows, ops/winograd.py; legalize.py says which layers): AVX2 150 G MAC/s (Zen 3, ResNet-18's
  four such layers in benchmarks/layers_bitserial_znver3.json's int8_ours: C2 137-139, C6 144-149, C9
  151-153, C12 117-118). The rule takes the fastest layer's, the figure that costs least when wrong: bitserial
  where int8 is faster breaks issue 49's target (a low-bit layer at least as fast as our int8 layer of
  its shape), int8 where bitserial is faster only forgoes a gain (A1W2 on C12: bitserial 1.18x
  faster there, int8 1.37x faster on C2, 1.10x over the four). AVX-512BW's taken as twice AVX2's (not
  measured). A 3x3 stride-2 layer by Winograd (``winograd.STRIDE_2``, 25 products a tile for 36): AVX2
  88 G MAC/s (Zen 3, CPU time, one thread, ResNet-18's C4 0.647-0.673 ms and C7 0.655 in the host's
  quietest minutes, 60-82 loaded; its strided layer at 7x7 output, C10, stays direct), AVX-512BW 176;
* bitserial A1W1 rates: AVX-512 (VPOPCNTDQ) 1100 G MAC/s (Zen 4, C6 0.105 ms), AVX2 209 (Zen 3, C2).

So on an AVX2 host A1W1, A1W2 and A2W1 run bitserial where the int8 operator is direct (1x1 and
strided layers: 2.9-3.9x and 1.2-1.9x our int8 there) or by Winograd at stride 2, only A1W1 on the
3x3 stride-1 ones (1.51-2.55x Winograd's int8; A1W2's ~104 against its 150), A2W2 and wider int8
(bitserial 0.05-1.01x: ``python scripts/bench_bitserial_layers.py --configs A1W1 A1W2 A2W2 A3W3``,
benchmarks/layers_bitserial_znver3.md); with AVX-512 VNNI and VPOPCNTDQ up to A2W2 and A1W3, with VNNI
and the AVX2 bitserial tiles (no VPOPCNTDQ: Cascade Lake) A1W1; with AMX none.
tests/test_lowbit_choice.py holds the rule to every committed measurement. A layer whose weights
keep a zero point after legalization stays bitserial: the rule's measurements are of int8 layers on
symmetric weights, not of the 9-bit ``w - zw`` that legalize.py gives such weights.
"""
from __future__ import annotations

from dataclasses import dataclass

from tvm_integration.kernels import selection, tuning

OPERATORS = ("fastest", "bitserial", "int8")
INT8_GMACS = {"amx": 1780, "avx512vnni": 200, "avxvnni": 100, "avx512bw": 144, "avx2": 72}
WINOGRAD_GMACS = {1: {"avx512bw": 300, "avx2": 150},     # the int8 operator by Winograd, by stride
                  2: {"avx512bw": 176, "avx2": 88}}
BITSERIAL_A1W1_GMACS = {"avx512": 1100, "avx2": 209}
INT8_FAMILIES = ("avx512vnni", "avxvnni", "avx512bw", "avx2")     # checked in this order


@dataclass(frozen=True)
class Choice:
    operator: str          # "bitserial" | "int8"
    why: str


def int8_family(isa: str, depth: int, groups: int = 1) -> str:
    """The kind of int8 tile the layer's operator takes (``selection.int8_candidates``' first)."""
    kernel = selection.int8_candidates(isa, depth, groups)[0]
    if kernel.spec.isa == "amx":
        return "amx"
    return next(f for f in INT8_FAMILIES if f in kernel.features)


def log_key(int8_key: str, abits: int, wbits: int, encoding: str) -> str:
    """The tuning log's key of a low-bit layer: its int8 operator's key and its precision."""
    return f"lowbit {int8_key} A{abits}W{wbits} {encoding}"


def choose(abits: int, wbits: int, encoding: str, target: str, depth: int, int8_key: str,
           operator: str = "fastest", groups: int = 1, winograd: int = 0) -> Choice:
    """The operator of a 1-3-bit layer of reduction ``depth`` for ``target`` (legalize.py's);
    ``operator`` other than "fastest" forces one; ``winograd``: the stride of the Winograd transform
    the layer's int8 operator would run by, 0 where it runs directly (ops/conv2d.chosen_tiles, which
    legalize.py asks: kernels/ does not import ops/)."""
    if operator not in OPERATORS:
        raise ValueError(f"low-bit operator must be one of {', '.join(OPERATORS)}, got {operator!r}")
    if operator != "fastest":
        return Choice(operator, "as asked")
    if target == "neon":
        return Choice("bitserial", "NEON: the bitserial tiles (int8 against bitserial not yet measured on Arm)")
    measured = tuning.read_log(tuning.host_log()).get(log_key(int8_key, abits, wbits, encoding))
    if measured:
        ms = measured["ms"]
        return Choice(measured["kernel"], f"measured on this host: bitserial {ms['bitserial']:.3f} ms, "
                                            f"int8 {ms['int8']:.3f} ms")
    family = int8_family(target if target in selection.INT8_ISAS else "host", depth, groups)
    bitserial_isa = selection.bitserial_kernel(target if target in selection.BITSERIAL_ISAS else "host",
                                               abits, wbits, encoding).spec.isa
    return rule(abits, wbits, family, bitserial_isa, winograd)


def rule(abits: int, wbits: int, family: str, bitserial_isa: str, winograd: int = 0) -> Choice:
    """The untuned choice: bitserial when its A1W1 rate over ``abits * wbits`` bit-plane pairs beats the
    int8 ``family``'s rate, its Winograd rate at stride ``winograd`` where the int8 operator would run
    by Winograd (``choose``)."""
    bitserial = BITSERIAL_A1W1_GMACS[bitserial_isa] / (abits * wbits)
    int8_rate = WINOGRAD_GMACS[winograd][family] if winograd else INT8_GMACS[family]
    winner = "bitserial" if bitserial > int8_rate else "int8"
    by = {0: "", 1: " Winograd", 2: " Winograd stride 2"}[winograd]
    return Choice(winner, f"rule: {bitserial_isa} bitserial A{abits}W{wbits} ~{bitserial:.0f} G MAC/s against "
                          f"{family} int8{by} ~{int8_rate}")
