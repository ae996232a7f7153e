"""scripts/bench_kernels.py runs a peak probe (scripts/peak_x86.c) or a kernel row only where the host
has its CPU feature: which ones are skipped on the recorded Zen 4, Sapphire Rapids and Skylake
hosts, and the probe program built without -march running exactly the probes it is asked for."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from isa_specs import host
from scripts import bench_kernels as bk

ROOT = Path(__file__).resolve().parents[1]


def flags(name: str) -> frozenset[str]:
    return host.parse_cpuinfo((Path(__file__).parent / "data" / f"cpuinfo_{name}.txt").read_text()).flags


AVX2_PROBES = {"vpmaddwd_ymm", "vpmaddubsw_ymm", "vpmaddwd_ymm_w16_5x16", "vpmaddwd_ymm_w16_5x16_reg",
               "vpmaddubsw_ymm_u8s8_5x16"}


def test_probes_skipped_on_recorded_hosts():
    assert bk.probe_skips(flags("zen4")) == {"vpdpbusd_ymm_vex": "host CPU lacks avx_vnni",
                                             "tdpbusd": "host CPU lacks amx_int8"}
    assert bk.probe_skips(flags("sapphirerapids")) == {}
    assert set(bk.probe_skips(flags("skylake"))) == set(bk.PROBES) - AVX2_PROBES   # AVX2 only
    assert set(bk.probe_skips(flags("zen3"))) == set(bk.PROBES) - AVX2_PROBES


def test_peak_of_a_skipped_probe_gives_the_reason():
    from synth.int8_spec import Int8Spec
    spec = Int8Spec("amx", "u8s8", "tile", 32, 32, 256)
    skipped = bk.probe_skips(flags("zen4"))
    assert bk.peak_fields(spec, 100.0, {}, skipped) == {"peak_instruction": "tdpbusd",
                                                        "peak_skipped": "host CPU lacks amx_int8"}
    got = bk.peak_fields(spec, 100.0, {"tdpbusd": 1e9}, {})
    assert got["peak_rate"] == 16 * 16 * 64 and got["fraction_of_peak"] == pytest.approx(100 / (16 * 16 * 64))


@pytest.mark.parametrize("types", ["s8s7", "w16"])
def test_the_exact_avx2_tiles_are_measured_against_the_multiply_pipes(types):
    """Without VNNI a tile's bound is the multiply pipes: vpmaddwd (or vpmaddubsw) a second, 16 MACs each."""
    from synth.int8_spec import Int8Spec
    got = bk.peak_fields(Int8Spec.for_isa("avx2", types), 50.0, {"vpmaddwd_ymm": 6.4e9}, {})
    assert got["peak_instruction"].startswith("vpmaddwd") and got["peak_rate"] == pytest.approx(102.4)


def test_peak_program_runs_only_the_named_probes(tmp_path, host_runs):
    exe = tmp_path / "peak"
    subprocess.run(["gcc", "-O2", "-o", str(exe), str(ROOT / "scripts" / "peak_x86.c")], check=True)
    assert "tdpbusd" in subprocess.run(["objdump", "-d", str(exe)], capture_output=True, text=True).stdout
    bad = subprocess.run([str(exe), "vpopcntq_zmm", "nope"], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stdout == "" and "unknown probe nope" in bad.stderr
    runnable = [p for p, feature in bk.PROBES.items() if host_runs.lacks(feature) is None][:2]
    if not runnable:
        pytest.skip("this host runs none of the probes")
    rates = json.loads(subprocess.run([str(exe), *runnable], capture_output=True, text=True, check=True).stdout)
    assert list(rates) == runnable and all(r > 1e6 for r in rates.values())


def test_loop_bodies_given_to_llvm_mca():
    """scripts/bench_uarch.py models each probe's loop: per iteration 4 k groups of the tile's B loads,
    one A broadcast per row and rows x column registers vpdpbusd, then the loop branch."""
    from scripts import bench_uarch as bu
    asm = bk.run(["gcc", "-O2", "-S", "-o", "-", str(ROOT / "scripts" / "peak_x86.c")]).splitlines()
    for function, rows, cols in (("mix_6x32", 6, 2), ("mix_8x48", 8, 3)):
        body = bu.loop_body(asm, function)
        count = lambda op: sum(i.split()[0] == op for i in body)
        assert (count("vmovdqu32"), count("vpbroadcastd"), count("vpdpbusd")) == (4 * cols, 4 * rows, 4 * rows * cols)
        assert body[-1].startswith("jne")
    assert sum(i.startswith("vpdpbusd") for i in bu.loop_body(asm, "dpbusd_zmm")) == 12


def test_the_exact_and_saturating_rows_issue_what_their_rates_are_quoted_for():
    """bench_kernels quotes the w16 row, its register-held twin and onnxruntime's saturating u8 x s8 row as MACs
    a second (docs/measurements.md), so each loop must be the mix its rate is divided by: per k group two B loads,
    then per row of 5 one vpbroadcastd (none in `_reg`) and per B register vpmaddwd + vpaddd (w16: 16 MACs a
    multiply) or vpmaddubsw + vpmaddwd by ones + vpaddd (u8 x s8: 32 MACs a vpmaddubsw). Which row is faster is a
    property of the core, measured by the benchmark and never asserted here: Zen 3's broadcasts take a vector
    pipe's slot, the AMX Xeon's do not (a CI run there had the broadcast row at 4.14 G/s against 3.85)."""
    from scripts import bench_uarch as bu
    asm = bk.run(["gcc", "-O2", "-S", "-o", "-", str(ROOT / "scripts" / "peak_x86.c")]).splitlines()
    ops = ["vmovdqu", "vpbroadcastd", "vpmaddubsw", "vpmaddwd", "vpaddd"]
    mix = lambda function: [sum(i.split()[0] == op for i in bu.loop_body(asm, function)) for op in ops]
    groups, rows, columns = 4, 5, 2
    per_register = groups * rows * columns
    assert mix("w16_5x16") == [groups * columns, groups * rows, 0, per_register, per_register]
    assert mix("w16_5x16_reg") == [groups * columns, 0, 0, per_register, per_register]
    assert mix("u8s8_5x16") == [groups * columns, groups * rows, per_register, per_register, per_register]
