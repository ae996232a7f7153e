"""The tuning log (tvm_integration/kernels/tuning.py) and every candidate tile it may pick, against numpy."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from isa_specs import host
from tvm_integration.kernels import selection, tuning
from tvm_integration.ops.conv2d import conv2d
from tvm_integration.ops.dense import dense
from tvm_integration.ops.output_stage import OutputStage, ScaleRequantize


def test_log_records_fastest_and_choose_reads_it(tmp_path):
    path = tmp_path / "uarch.json"
    candidates = selection.int8_candidates("host")
    names = [k.intrin for k in candidates]
    slow_first = {name: float(len(names) - i) for i, name in enumerate(names)}
    assert tuning.record("dense m5 n7 k9 uint8", slow_first, path) == names[-1]
    assert json.loads(path.read_text())["dense m5 n7 k9 uint8"]["kernel"] == names[-1]
    assert tuning.choose("dense m5 n7 k9 uint8", candidates, 5, 7, path).intrin == names[-1]
    # a shape not in the log: the tile with the least padding
    chosen = tuning.choose("other", candidates, 96, 128, path)
    padded = {k: -(-96 // k.spec.mr) * k.spec.mr * -(-128 // k.spec.nr) * k.spec.nr for k in candidates}
    assert padded[chosen] == min(padded.values())


def _avx512_tile(shape: str):
    return next(k for k in selection.int8_candidates("avx512") if f"_{shape}_" in k.intrin)


def test_untuned_shapes_take_the_largest_tile_whose_registers_fit():
    """A 56x56 64-channel layer, which no AVX-512 tile but 8x48 pads: 14x32 (28 accumulators, 2 B and
    a broadcast A in the 32 zmm registers), not 7x64 (the same accumulators, one register short) nor
    the smaller 8x32 and 14x16; where only 7x64 pads nothing (7x7x512), padding still comes first."""
    candidates = selection.int8_candidates("avx512")
    assert tuning.least_padding(candidates, 56 * 56, 64, 576) is _avx512_tile("14x32x16")
    assert tuning.least_padding(candidates, 7 * 7, 512, 4608) is _avx512_tile("7x64x16")


def test_the_tiles_said_to_spill_are_those_whose_k_loop_spills(tmp_path):
    """tuning.spills against the compiler: each AVX-512 tile tensorized into a small conv2d, built, and
    its K loop (the run of vpdpbusd) read in the disassembly: a tile said to fit has no zmm stack
    access there and reads no operand from memory; one said to spill has either."""
    import subprocess
    rng = np.random.default_rng(3)
    w = rng.integers(-128, 128, (64, 64, 3, 3)).astype(np.int8)
    for kernel in selection.int8_candidates("avx512"):
        library = tmp_path / f"{kernel.intrin}.so"
        conv2d(w, (1, 14, 14, 64), "NHWC", 1, 1, 1, "uint8", kernel=kernel).module.export_library(str(library))
        asm = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(library)], capture_output=True, text=True,
                             check=True).stdout.splitlines()
        dots = [i for i, line in enumerate(asm) if "vpdpbusd" in line]
        loop = asm[dots[0]:dots[-1] + 1]
        overflow = sum("%rsp" in line and "zmm" in line or "vpdpbusd" in line and "(" in line for line in loop)
        assert (overflow > 0) == tuning.spills(kernel), (kernel.intrin, overflow)


def test_choose_takes_the_fastest_logged_candidate_when_the_winner_is_not_one(tmp_path):
    """An operator built for VNNI on the AMX host: the log's winner, an AMX tile, is no candidate, so
    the fastest VNNI tile the log timed is taken, not the least-padding one."""
    path = tmp_path / "uarch.json"
    candidates = selection.int8_candidates("avx512")
    padding_first = tuning.least_padding(candidates, 56, 64)
    slower, faster = [k for k in candidates if k is not padding_first][:2]
    times = {"qsynth_int8_u8s8_tile_32x32x64_amx": 0.1, slower.intrin: 0.5, faster.intrin: 0.3,
             padding_first.intrin: 0.4}
    tuning.record("conv", times, path)
    assert tuning.choose("conv", candidates, 56, 64, path) is faster
    assert tuning.choose("untimed", candidates, 56, 64, path) is padding_first


def test_corrupt_log_is_an_error(tmp_path):
    path = tmp_path / "uarch.json"
    path.write_text("{ not json")
    with pytest.raises(tuning.TuningLogError, match="is not valid JSON"):
        tuning.choose("k", selection.int8_candidates("host"), 8, 8, path)
    path.write_text(json.dumps({"k": {"ms": {}}}))
    with pytest.raises(tuning.TuningLogError, match="must be an object with a 'kernel'"):
        tuning.read_log(path)


@pytest.mark.parametrize("kernel", selection.int8_candidates("host"), ids=lambda k: f"{k.spec.mr}x{k.spec.nr}x{k.spec.k}")
def test_every_candidate_tile_is_correct_on_odd_shapes(kernel):
    rng = np.random.default_rng(kernel.spec.nr)
    w = rng.integers(-128, 128, (70, 13, 3, 3)).astype(np.int8)
    x = rng.integers(0, 256, (1, 11, 9, 13)).astype(np.uint8)
    scale = (rng.random(70) * 0.01).astype(np.float32)
    stage = OutputStage(bias=rng.integers(-500, 500, 70).astype(np.int32),
                        requantize=ScaleRequantize(scale, 5, "uint8"))
    y = conv2d(w, x.shape, "NHWC", 2, 1, stage=stage, kernel=kernel, pad_value=9)(x)
    xp = np.pad(x[0].astype(np.int64), ((1, 1), (1, 1), (0, 0)), constant_values=9)
    acc = sum(xp[i:i + 11:2, j:j + 9:2, :] @ w[:, :, i, j].T.astype(np.int64) for i in range(3) for j in range(3))
    expected = np.clip(np.rint((acc + stage.bias).astype(np.float32) * scale) + 5, 0, 255)
    np.testing.assert_array_equal(y[0], expected)
    wd = rng.integers(-128, 128, (37, 29)).astype(np.int8)
    xd = rng.integers(0, 256, (3, 29)).astype(np.uint8)
    np.testing.assert_array_equal(dense(wd, 3, kernel=kernel)(xd), xd.astype(np.int64) @ wd.T.astype(np.int64))


# ---------------------------------------------------------------- which log a host reads
def recorded(name: str, drop: tuple[str, ...] = (), add: tuple[str, ...] = ()) -> host.HostModel:
    """A recorded /proc/cpuinfo (tests/data), with flags removed or added."""
    text = (Path(__file__).parent / "data" / f"cpuinfo_{name}.txt").read_text()
    lines = [" ".join([w for w in line.split(" ") if w not in drop] + list(add)) if line.startswith("flags") else line
             for line in text.splitlines()]
    return host.parse_cpuinfo("\n".join(lines))


def test_machines_reporting_one_model_number_do_not_share_a_log():
    """This project's AMX Xeon reports model 167, Rocket Lake's: a Rocket Lake (no AVX-VNNI, no AMX)
    gets another log; flags outside the feature table (a kernel update's) do not change it."""
    amx = recorded("amx_model167")
    rocket_lake = recorded("amx_model167", drop=("avx_vnni", "amx_tile", "amx_int8", "amx_bf16"))
    assert amx.uarch == rocket_lake.uarch == "rocketlake"
    assert tuning.log_name(amx) != tuning.log_name(rocket_lake)
    assert tuning.log_name(amx).startswith("rocketlake-") and tuning.log_name(rocket_lake).startswith("rocketlake-")
    assert tuning.log_name(recorded("amx_model167", add=("new_flag",), drop=("hypervisor",))) == tuning.log_name(amx)
    assert tuning.log_path("x") == tuning.LOGS / "x.json"


@pytest.mark.parametrize("machine,isas", [("zen4", ("avx512",)), ("amx_model167", ("amx", "avx512")), ("zen3", ("avx2",))])
def test_committed_logs_are_found_by_their_hosts(machine, isas):
    """Every committed log is the log of a recorded host (Zen 4's: the benchmarks' tiles; the AMX
    Xeon's: AMX or VNNI per shape; Zen 3's: s8s7 or w16 per shape), so such a host reads it; every tile it names is a proved candidate
    of that host's ISAs and ``choose`` returns it."""
    assert {p.stem for p in tuning.LOGS.glob("*.json")} == {tuning.log_name(recorded(m)) for m in ("zen4", "amx_model167", "zen3")}
    path = tuning.log_path(tuning.log_name(recorded(machine)))
    log = tuning.read_log(path)
    candidates = [k for isa in isas for k in selection.int8_candidates(isa)]
    assert log and {entry["kernel"] for entry in log.values()} <= {k.intrin for k in candidates}
    for key, entry in log.items():
        assert tuning.choose(key, candidates, 1, 1, path).intrin == entry["kernel"]


def test_a_host_whose_model_number_llvm_names_otherwise_reads_the_log_of_its_features():
    """The AMX Xeon's VM reported model 167 (rocketlake) when its log was made and 207 (emeraldrapids)
    later, on the same flags: it reads the log of its features. A host with other features does not."""
    from dataclasses import replace
    amx = recorded("amx_model167")
    assert tuning.host_log(replace(amx, uarch="emeraldrapids")) == tuning.host_log(amx) \
        == tuning.LOGS / f"{tuning.log_name(amx)}.json"
    without_amx = replace(recorded("amx_model167", drop=("amx_tile", "amx_int8", "amx_bf16")), uarch="emeraldrapids")
    assert tuning.host_log(without_amx) == tuning.LOGS / f"{tuning.log_name(without_amx)}.json"
    assert not tuning.host_log(without_amx).is_file()


def test_untuned_shapes_take_a_k_step_that_divides_the_depth():
    """RegNet's grouped 3x3 convolutions (8 channels a group: a depth of 72) on AVX2: a tile whose K
    step divides the depth packs whole channel runs; a 16-byte step (the 8-column tiles, which pad no
    output) packed byte by byte: 112x112x48 in 6 groups, stride 2, on Zen 3 (CPU time) 2.06-2.11 ms on
    8x8x16 / 10x8x16 / 5x16x16, 0.49-0.53 on 4x16x8 / 5x16x8, though those pad the 8 columns to 16."""
    candidates = selection.int8_candidates("avx2", 72, 6)
    assert any(k.spec.k == 16 and k.spec.nr == 8 for k in candidates)
    chosen = tuning.least_padding(candidates, 56 * 56, 8, 72)
    assert 72 % chosen.spec.k == 0
    assert tuning.least_padding(candidates, 56 * 56, 64, 576).spec.k in (8, 16)   # both divide: padding decides
