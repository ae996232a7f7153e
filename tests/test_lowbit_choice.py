"""The operator a 1-3-bit layer runs on (kernels/lowbit_choice.py), held to the committed measurements
of the bitserial operator against our int8 one on ResNet-18's layers: wherever one measured at least
1.5x faster, the untuned rule picks it; the tuning log's measurement wins over the rule; and
legalize.py routes a layer as chosen (the int8 path's exactness on low-bit codes:
test_digits_lowbit.py)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tvm_integration.kernels import lowbit_choice, tuning

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
# the int8 tile family of the host each file was measured on (its table's header names the host)
MEASURED = {"layers_bitserial.json": "avx512vnni",          # Zen 4, AVX-512 bitserial tiles
            "layers_bitserial_avx2.json": "avx512vnni",     # Zen 4, the AVX2 bitserial tiles (--isa avx2)
            "layers_bitserial_znver3.json": "avx2"}         # Zen 3: AVX2 only
DECISIVE = 1.5


def rows():
    for name, family in MEASURED.items():
        for r in json.loads((BENCHMARKS / name).read_text()):
            if r["correct"] and r["threads"] == 1:
                features = r.get("run", {}).get("host", {}).get("features", ["avx512vpopcntdq"])   # Zen 4's: no record
                isa = "avx512" if r["isa"] == "host" and "avx512vpopcntdq" in features else "avx2"
                yield name, family, isa, r


def test_the_files_hold_every_configuration():
    seen = {(name, r["config"]) for name, *_, r in rows()}
    assert {c for n, c in seen if n == "layers_bitserial_znver3.json"} == {"A1W1", "A1W2", "A2W2", "A3W3"}
    assert {c for n, c in seen if n == "layers_bitserial.json"} >= {"A1W1", "A2W2", "A1W2", "A2W1"}


def test_the_rule_picks_every_operator_measured_decisively_faster():
    wrong = []
    for name, family, isa, r in rows():
        a, w = map(int, r["config"][1::2])
        speedup = r["speedups"]["int8_ours"]          # int8's time over bitserial's: above 1, bitserial is faster
        measured = "bitserial" if speedup >= DECISIVE else "int8" if speedup <= 1 / DECISIVE else None
        chosen = lowbit_choice.rule(a, w, family, isa).operator
        if measured and chosen != measured:
            wrong.append(f"{name} {r['layer']} {r['config']} {r['encoding']}: {chosen}, measured {speedup:.2f}x")
    assert not wrong, wrong


@pytest.mark.parametrize("family,isa,bitserial", [
    ("amx", "avx512", []),
    ("avx2", "avx2", ["A1W1", "A1W2", "A2W1"]),
    ("avx512vnni", "avx512", ["A1W1", "A1W2", "A2W1", "A1W3", "A3W1", "A2W2"]),
    ("avx512vnni", "avx2", ["A1W1"]),      # VNNI without VPOPCNTDQ (Cascade Lake): the AVX2 bitserial tiles
])
def test_rule_per_recorded_host(family, isa, bitserial):
    """Every host kind's branch, from recorded feature sets rather than this host's."""
    configs = [f"A{a}W{w}" for a in (1, 2, 3) for w in (1, 2, 3)]
    assert [c for c in configs if lowbit_choice.rule(int(c[1]), int(c[3]), family, isa).operator == "bitserial"] \
        == [c for c in configs if c in bitserial]


def test_a_logged_measurement_wins_over_the_rule(tmp_path, monkeypatch):
    log = tmp_path / "log.json"
    key = "conv2d NHWC[1, 8, 8, 64] w[64, 64, 3, 3] s[1, 1] p[1, 1, 1, 1] g1 uint8"
    tuning.record(lowbit_choice.log_key(key, 1, 1, "unipolar"), {"bitserial": 0.9, "int8": 0.3}, log)
    monkeypatch.setattr(tuning, "log_path", lambda name=None: log)
    choice = lowbit_choice.choose(1, 1, "unipolar", "host", 576, key)
    assert (choice.operator, choice.why) == ("int8", "measured on this host: bitserial 0.900 ms, int8 0.300 ms")
    assert lowbit_choice.choose(1, 1, "unipolar", "host", 576, key, operator="bitserial").operator == "bitserial"
    with pytest.raises(ValueError, match="fastest, bitserial, int8"):
        lowbit_choice.choose(1, 1, "unipolar", "host", 576, key, operator="popcount")


def test_arm_keeps_the_bitserial_tiles():
    """On NEON the choice is not yet measured per layer: bitserial, and it says so (its llvm-mca estimates
    on v8.0 cores, benchmarks/layers_bitserial_neon.md and layers_neon_int8.md, favour it up to A2W2)."""
    choice = lowbit_choice.choose(2, 2, "unipolar", "neon", 576, "any key")
    assert choice.operator == "bitserial" and "not yet measured on Arm" in choice.why
