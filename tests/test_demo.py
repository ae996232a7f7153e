"""``qsynth demo`` (qsynth/commands/demo.py), the README's first command: its --quick form run as a user
runs it (through the CLI's entry point), its table checked against facts read independently
(/proc/cpuinfo, the cache's JSON files, the speedups recomputed from the times), and its exit codes.
Recorded CPUs (tests/data) stand in for hosts this machine is not: one without AVX2 has nothing to run
the model on and says why."""
from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from types import SimpleNamespace

import pytest

from isa_specs import host
from qsynth import cli
from qsynth.commands import demo

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"


def cpuinfo_fields() -> dict:
    fields = {}
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if not line.strip():
            break
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    return fields


def demo_flags() -> set[str]:
    """The flags the demo may use: /proc/cpuinfo's, or, where ``QSYNTH_HOST_FEATURES`` holds the host model to
    fewer x86 features, that model's (a subset of the CPU's; test_host holds it to the variable)."""
    flags = set(cpuinfo_fields()["flags"].split())
    if os.environ.get(host.FEATURES_VARIABLE) is None:
        return flags
    assert host.model().flags <= flags
    return set(host.model().flags)


def cache_entries() -> dict:
    """name -> entry, read straight from the committed JSON files."""
    return {e["name"]: e for e in (json.loads(p.read_text()) for p in (ROOT / "kernel_cache").glob("*.json"))}


@pytest.fixture(scope="module")
def quick_run():
    """``qsynth demo --quick --json`` through the CLI's entry point, in this process (a process of its own
    imports TVM again: 7 s of CPU), its environment change (TVM_NUM_THREADS) undone after the module."""
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as monkeypatch, redirect_stdout(out), redirect_stderr(err):
        monkeypatch.chdir(ROOT)
        monkeypatch.setitem(os.environ, "TVM_NUM_THREADS", "1")          # what the demo sets for --threads 1
        status = cli.main(["demo", "--quick", "--json"])
    return SimpleNamespace(returncode=status, stdout=out.getvalue(), stderr=err.getvalue())


def test_quick_demo_succeeds_on_this_host(quick_run):
    assert quick_run.returncode == 0, quick_run.stderr[-2000:]
    r = json.loads(quick_run.stdout)
    cpu = cpuinfo_fields()
    flags = demo_flags()
    assert r["host"]["cpu"] == cpu["model name"] and r["host"]["vendor"] == cpu["vendor_id"]
    assert r["host"]["model"] == int(cpu["model"]) and r["host"]["family"] == int(cpu["cpu family"])
    # what the host lacks is reported (and skipped), what it has is not
    lacks = r["host"]["lacks"]
    assert ("amx-int8" in lacks.get("amx", {})) == ("amx_int8" not in flags)
    assert ("avxvnni" in lacks.get("avx2", {})) == ("avx_vnni" not in flags)
    assert all(why.startswith("host CPU lacks ") for isa in lacks.values() for why in isa.values())
    assert not r["library"]["refused"]


def test_quick_demo_model_matches_onnxruntime_and_uses_proved_kernels(quick_run):
    r = json.loads(quick_run.stdout)
    flags = demo_flags()
    m = r["model"]
    assert m["bit_exact"] is True and m["compared_inputs"] == 3 and m["input"] == [1, 3, 32, 32]
    openvino = {"openvino_int8", "openvino_int8_vnni"} if "amx_int8" in flags else {"openvino_int8"}
    assert set(m["ms"]) == {"qsynth", "onnxruntime_int8", "onnxruntime_fp32", *openvino}
    assert all(v > 0 for v in m["ms"].values())
    assert set(m["openvino"]) == openvino
    if flags & {"avx512_vnni", "avx_vnni"}:      # without VNNI OpenVINO's vpmaddubsw saturates (12 steps on Zen 3)
        assert all(r["max_diff_steps"] <= 8 for r in m["openvino"].values())
    assert m["onnxruntime_default"]["compared"] == 10 and m["onnxruntime_default"]["differing"] >= 0
    cached = cache_entries()
    assert m["kernels"]
    isa = "avx512" if "avx512bw" in flags else "avx2"      # a Skylake-SP runs the exact zmm tiles
    for k in m["kernels"] + r["layer"]["kernels"]:
        entry = cached[k["name"]]
        assert k["instructions"] == entry["length"] == len(entry["program"]["body"])
        assert entry["proof"]["proved"] and k["proof"] == "proved, re-proved on this machine"
    # the host's kind of tile, and on an AMX host the AMX tile for the deeper layers (selection.amx_pays)
    isas = {isa, "amx"} if "amx_int8" in flags else {isa}
    assert {k["name"].rsplit("_", 1)[1] for k in m["kernels"]} <= isas
    # no VNNI: the exact rows, and the s16 tiles of Winograd's 3x3 stride-1 layers (ops/winograd.py)
    exact_kinds = ("int8_u8s8_",) if flags & {"avx512_vnni", "avx_vnni"} else ("int8_s8s7_", "int8_w16_", "int8_s16_")
    assert all(k["name"].startswith(exact_kinds) for k in m["kernels"])


def test_quick_demo_layer_speedups(quick_run):
    lay = json.loads(quick_run.stdout)["layer"]
    assert lay["layer"] == "C12" and lay["config"] == "A1W1" and lay["correct"] is True
    assert {"plain_tir", "int8_ours", "onnxruntime_int8", "onnxruntime_fp32"} <= set(lay["baselines"])
    for name, ms in lay["baselines"].items():
        assert lay["speedups"][name] == pytest.approx(ms / lay["ours_ms"], rel=1e-6)
    assert [k["name"] for k in lay["kernels"]] == [lay["kernel"]]


def test_table_shows_the_results(quick_run):
    r = json.loads(quick_run.stdout)
    table = demo.render(r)
    assert f"host      {r['host']['cpu']}: {host.model().uarch}" in table
    assert "bit-exact with onnxruntime" in table and "correct against numpy" in table
    for k in r["model"]["kernels"]:
        assert k["name"] in table
    assert f"{r['model']['ms']['onnxruntime_fp32']:9.2f} ms" in table
    assert f"  openvino_int8      {r['model']['ms']['openvino_int8']:9.2f} ms" in table
    assert f"openvino_int8: OpenVINO {r['model']['openvino']['openvino_int8']['version']}, " in table


@pytest.mark.parametrize("argv,needle", [(["demo", "--layer", "C99"], "unknown layer 'C99'"),
                                         (["demo", "--threads", "0"], "must be a positive integer"),
                                         (["demo", "--frobnicate"], "No such option")])
def test_bad_usage_is_one_line_and_exit_2(argv, needle, capsys):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err


def old_cpu() -> host.HostModel:
    """The recorded Skylake without its avx2 flag: none of the x86 kernels runs there."""
    return host.parse_cpuinfo((DATA / "cpuinfo_skylake.txt").read_text().replace(" avx2 ", " "))


def test_a_host_without_avx2_says_so_in_one_line_and_exits_2(monkeypatch, capsys):
    monkeypatch.setattr(host, "model", old_cpu)
    assert cli.main(["demo", "--quick"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "host CPU lacks avx2" in err and "need x86-64 with AVX2" in err


def test_an_avx2_only_host_runs_the_model_exactly(monkeypatch, capsys):
    """The recorded Skylake i7-6700K: AVX2 without VNNI, so the int8 operators take the exact AVX2 tiles
    (s8s7 or w16, per layer), and the model is bit-exact with onnxruntime's exact mode. (The layer step
    left out: the quick run above covers it.)"""
    skylake = host.parse_cpuinfo((DATA / "cpuinfo_skylake.txt").read_text())
    monkeypatch.setattr(host, "model", lambda: skylake)
    monkeypatch.setattr(demo, "_layer", lambda *args: {"skipped": "not in this test"})
    assert cli.main(["demo", "--quick"]) == 0
    out = capsys.readouterr().out
    assert "host      Intel(R) Core(TM) i7-6700K CPU @ 4.00GHz: skylake" in out
    assert "partly    avx2: not avxvnni (host CPU lacks avx_vnni)" in out
    assert "skipped   amx: host CPU lacks amx_int8" in out
    assert "avx512_vnni" in out.split("skipped   avx512: ")[1].splitlines()[0]
    assert "bit-exact with onnxruntime's exact mode" in out and re.search(r"int8_(s8s7|w16)_k4b_", out)
    assert "onnxruntime_int8 (its default): " in out
    n_avx2 = sum(e["spec"]["isa"] == "avx2" and not any("vpdpbusd" in line for line in e["program_text"])
                 for e in cache_entries().values())          # AVX-VNNI's instruction: not on this host
    assert f"library   {n_avx2} kernels this host runs ({n_avx2} avx2)" in out


def test_a_missing_kernel_is_synthesized(tmp_path):
    """A copy of the library without one of the demo's A1W1 tiles ($QSYNTH_CACHE): the demo synthesizes
    it into that copy, under the same file name, proved. (Model and layer left out: the quick run
    above covers them.)"""
    shutil.copytree(ROOT / "kernel_cache", tmp_path / "cache")
    name = next(s.name for s in demo._needed(demo._host()["runs"]) if s.kind == "bitserial")
    victim = next(p for p in (tmp_path / "cache").glob("*.json") if json.loads(p.read_text())["name"] == name)
    victim.unlink()
    code = ("import sys; from qsynth import cli; from qsynth.commands import demo; "
            "demo._model = demo._layer = lambda *args: {'skipped': 'not in this test'}; "
            "sys.exit(cli.main(['demo', '--json']))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=900,
                          env=dict(os.environ, QSYNTH_CACHE=str(tmp_path / "cache")))
    assert proc.returncode == 0, proc.stderr[-2000:]
    library = json.loads(proc.stdout)["library"]
    assert library["synthesized"] == [{"name": name, "proved": True}] and library["reproved_now"] >= 1
    entry = json.loads(victim.read_text())
    assert entry["name"] == name and entry["proof"]["proved"]


def test_a_kernel_that_does_not_re_prove_fails_the_demo(tmp_path, monkeypatch, capsys):
    """The library seen as two entries, one with its AVX2 nibble table edited and its content hash
    recomputed (tampering, not corruption): refused by name, exit 1. The model and layer steps are
    left out here (the quick run above covers them)."""
    from synth import cache
    good = next(p for p in cache.entries() if cache.read(p)["name"] == "int8_s8s7_k4b_5x16x16_avx2")   # any AVX2 host
    entry = cache.read(next(p for p in cache.entries()
                            if cache.read(p)["name"] == "bitserial_a1w1_unipolar_acc_4x256_avx2"))
    entry["constants"]["lut"]["value"] = hex(int(entry["constants"]["lut"]["value"], 16) ^ (1 << 8))
    tampered = cache.store({k: v for k, v in entry.items() if k not in ("cache_key", "content_hash", "format")},
                           tmp_path)
    monkeypatch.setattr(cache, "entries", lambda root=None: [good, tampered])
    monkeypatch.setenv("QSYNTH_TRUST", str(tmp_path / "trust.json"))
    for step in ("_model", "_layer"):
        monkeypatch.setattr(demo, step, lambda *args: {"skipped": "not in this test"})
    assert cli.main(["demo", "--quick"]) == 1
    out = capsys.readouterr().out
    assert f"REFUSED   {tampered.name} bitserial_a1w1_unipolar_acc_4x256_avx2:" in out
    assert "2 kernels this host runs" in out and "1 re-proved now, 1 refused" in out
    assert list(json.loads((tmp_path / "trust.json").read_text())) == [cache.read(good)["content_hash"]]
