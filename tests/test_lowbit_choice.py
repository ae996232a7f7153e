"""The operator a 1-3-bit layer runs on (kernels/lowbit_choice.py), held to the committed measurements
of the bitserial operator against our int8 one on ResNet-18's layers: wherever one measured at least
1.5x faster, the untuned rule picks it, against the int8 operator's Winograd rate where that layer's
int8 operator ran by Winograd (``int8_kernel`` an s16 tile); the tuning log's measurement wins over
the rule; and legalize.py routes a layer as chosen and tells the rule which layers' int8 operator
would run by Winograd (the int8 path's exactness on low-bit codes: test_digits_lowbit.py)."""
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
                yield name, family, isa, by_winograd(r), r


def by_winograd(row: dict) -> int:
    """The stride of the Winograd transform the row's int8 operator ran by (an s16 tile; runs before
    ``int8_kernel`` was recorded predate Winograd), 0 where it ran directly."""
    return row["shape"][-1] if "_s16_" in row.get("int8_kernel", "") else 0


def test_the_files_hold_every_configuration():
    seen = {(name, r["config"]) for name, *_, r in rows()}
    assert {c for n, c in seen if n == "layers_bitserial_znver3.json"} == {"A1W1", "A1W2", "A2W2", "A3W3"}
    assert {c for n, c in seen if n == "layers_bitserial.json"} >= {"A1W1", "A2W2", "A1W2", "A2W1"}
    # Zen 3's int8 operator runs ResNet-18's 3x3 stride-1 layers by Winograd, the others directly
    assert {r["layer"] for name, *_, winograd, r in rows() if winograd} == {"C2", "C6", "C9", "C12"}


def test_the_rule_picks_every_operator_measured_decisively_faster():
    wrong = []
    for name, family, isa, winograd, r in rows():
        a, w = map(int, r["config"][1::2])
        speedup = r["speedups"]["int8_ours"]          # int8's time over bitserial's: above 1, bitserial is faster
        measured = "bitserial" if speedup >= DECISIVE else "int8" if speedup <= 1 / DECISIVE else None
        chosen = lowbit_choice.rule(a, w, family, isa, winograd).operator
        if measured and chosen != measured:
            wrong.append(f"{name} {r['layer']} {r['config']} {r['encoding']}: {chosen}, measured {speedup:.2f}x")
    assert not wrong, wrong


def test_on_the_winograd_layers_the_rule_picks_the_operator_faster_over_them():
    """Zen 3's 3x3 stride-1 layers, whose int8 operator runs by Winograd: per configuration, the rule's
    operator takes less time summed over the four layers than the other one (A1W2 among them: no row
    is decisive, bitserial 0.73-1.18x as fast as Winograd's int8, but int8 wins over the four)."""
    totals = {}
    for name, family, isa, winograd, r in rows():
        if winograd:
            a, w = map(int, r["config"][1::2])
            chosen = lowbit_choice.rule(a, w, family, isa, winograd).operator
            times = totals.setdefault((r["config"], chosen), {"bitserial": 0.0, "int8": 0.0})
            times["bitserial"] += r["ours_ms"]
            times["int8"] += r["baselines"]["int8_ours"]
    assert {config for config, _ in totals} == {"A1W1", "A1W2", "A2W2", "A3W3"}
    assert all(times[chosen] == min(times.values()) for (_, chosen), times in totals.items()), totals


@pytest.mark.parametrize("family,isa,winograd,bitserial", [
    ("amx", "avx512", 0, []),
    ("avx2", "avx2", 0, ["A1W1", "A1W2", "A2W1"]),
    ("avx2", "avx2", 1, ["A1W1"]),      # 3x3 stride 1: the int8 operator by Winograd
    ("avx2", "avx2", 2, ["A1W1", "A1W2", "A2W1"]),     # 3x3 stride 2 by Winograd: 88 G MAC/s, not 150
    ("avx512vnni", "avx512", 0, ["A1W1", "A1W2", "A2W1", "A1W3", "A3W1", "A2W2"]),
    ("avx512vnni", "avx2", 0, ["A1W1"]),      # VNNI without VPOPCNTDQ (Cascade Lake): the AVX2 bitserial tiles
])
def test_rule_per_recorded_host(family, isa, winograd, bitserial):
    """Every host kind's branch, from recorded feature sets rather than this host's."""
    configs = [f"A{a}W{w}" for a in (1, 2, 3) for w in (1, 2, 3)]
    assert [c for c in configs if lowbit_choice.rule(int(c[1]), int(c[3]), family, isa, winograd).operator
            == "bitserial"] == [c for c in configs if c in bitserial]


def test_legalize_tells_the_rule_which_int8_operators_run_by_winograd(tmp_path, monkeypatch):
    """On AVX2 the digits model's 3x3 stride-1 conv1 would run by Winograd, its stride-2 conv2 and conv3
    (too few channels) and its dense layer not; and a low-bit layer whose int8 operator would is ruled
    against the Winograd rate of its stride (conv2 and conv3 made so by hand: the committed models have
    no low-bit layer that runs by Winograd)."""
    from tvm_integration.qnn.lower import legalize
    from tvm_integration.qnn.runtime.model import lower
    from tvm_integration.qnn.semantics.integer_op import LINEAR, IntegerOp
    import onnx
    model = onnx.load(str(Path(__file__).parent / "data" / "lowbit" / "digits_w2a2_qcdq.onnx"))
    monkeypatch.setattr(tuning, "host_log", lambda m=None: tmp_path / "log.json")     # untuned: the rule
    def linear_ops():
        mod = lower(model, "avx2", stage="legalize")
        return [op for b in mod["main"].body.blocks[0].bindings
                if (op := IntegerOp.read(b.value, mod)) is not None and op.kind in LINEAR]
    ops = linear_ops()
    assert [(op.kind, legalize.by_winograd(op, "avx2")) for op in ops] == [
        ("conv2d", 1), ("conv2d", 0), ("conv2d", 0), ("dense", 0)]
    assert "int8 ~72" in ops[1].params["lowbit"]
    strides = {"/conv2/Conv": 1, "/conv3/Conv": 2}
    monkeypatch.setattr(legalize, "by_winograd", lambda op, target: strides.get(op.params.get("layer"), 0))
    notes = [op.params.get("lowbit") for op in linear_ops()]
    assert "int8 Winograd ~150" in notes[1] and "int8 Winograd stride 2 ~88" in notes[2]


def test_a_logged_measurement_wins_over_the_rule(tmp_path, monkeypatch):
    log = tmp_path / "log.json"
    key = "conv2d NHWC[1, 8, 8, 64] w[64, 64, 3, 3] s[1, 1] p[1, 1, 1, 1] g1 uint8"
    tuning.record(lowbit_choice.log_key(key, 1, 1, "unipolar"), {"bitserial": 0.9, "int8": 0.3}, log)
    monkeypatch.setattr(tuning, "host_log", lambda m=None: log)
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
