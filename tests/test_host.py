"""The host model read from recorded /proc/cpuinfo texts (tests/data/cpuinfo_*.txt: this project's
Zen 4 CI host, a Sapphire Rapids Xeon 8480+, an AVX2-only Skylake i7-6700K), so that every branch is
tested whichever CPU runs the suite; LLVM (TVM's) is the reference for CPU names."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import tvm
from tvm.target import codegen

from isa_specs import ISA_NAMES, get_isa, host
from isa_specs.features import AARCH64, FEATURES, X86

DATA = Path(__file__).parent / "data"
TRIPLE = "x86_64-pc-linux-gnu"


def cpuinfo(name: str) -> str:
    return (DATA / f"cpuinfo_{name}.txt").read_text()


def with_model(text: str, family: int, model: int) -> str:
    """The same flags under another family/model (a CPU the table does not know, or another stepping of it)."""
    out = []
    for line in text.splitlines():
        key = line.split(":")[0].strip()
        out.append(f"cpu family\t: {family}" if key == "cpu family" else f"model\t\t: {model}" if key == "model" else line)
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("name,vendor,family,model,uarch", [
    ("zen4", "AuthenticAMD", 25, 17, "znver4"),
    ("sapphirerapids", "GenuineIntel", 6, 143, "sapphirerapids"),
    ("skylake", "GenuineIntel", 6, 94, "skylake")])
def test_recorded_hosts(name, vendor, family, model, uarch):
    m = host.parse_cpuinfo(cpuinfo(name))
    assert (m.vendor, m.family, m.model, m.uarch, m.uarch_known) == (vendor, family, model, uarch, True)
    assert m.model_name and "avx2" in m.flags and "processor" not in m.flags
    assert host.target_of(m) == {"kind": "llvm", "mcpu": uarch}


@pytest.mark.parametrize("name,has,lacks", [
    ("zen4", set(X86) - {"avxvnni", "amx-tile", "amx-int8"}, {"avxvnni", "amx-tile", "amx-int8"}),
    ("sapphirerapids", set(X86), set()),
    ("skylake", {"avx2"}, set(X86) - {"avx2"})])
def test_features_of_recorded_hosts(name, has, lacks):
    m = host.parse_cpuinfo(cpuinfo(name))
    assert {f for f in X86 if host.lacks(f, m.flags) is None} == has == set(host.x86_features(m))
    for feature in lacks:
        assert host.lacks(feature, m.flags) == f"host CPU lacks {X86[feature].cpuinfo}"


def test_feature_table_covers_the_instruction_rows_and_matches_the_compilers():
    """Every instruction row's feature has a row; a compiler given an x86 row's flags predefines its
    macros, and the NEON toolchain predefines the AArch64 rows' macros (qemu -cpu max runs them all)."""
    assert {i.feature for name in ISA_NAMES for i in get_isa(name).instructions} <= set(FEATURES)
    checks = [("gcc", list(f.compiler_flags), f.macros) for f in X86.values()]
    neon = get_isa("neon").toolchain
    checks.append((neon.cc, list(neon.cflags), [m for f in AARCH64.values() for m in f.macros]))
    for cc, flags, macros in checks:
        if not shutil.which(cc):
            continue
        defined = subprocess.run([cc, *flags, "-dM", "-E", "-x", "c", "/dev/null"], capture_output=True, text=True,
                                 check=True).stdout.split()
        assert set(macros) <= set(defined), (cc, flags)


def test_only_the_first_processor_is_read():
    text = cpuinfo("skylake") + "\n" + cpuinfo("sapphirerapids")
    assert host.parse_cpuinfo(text).uarch == "skylake"


@pytest.mark.parametrize("name,level,extra,absent", [
    ("zen4", "x86-64-v4", {"+avx512vnni", "+avx512vpopcntdq", "+avx512bitalg"}, {"+amx-int8", "+avxvnni"}),
    ("sapphirerapids", "x86-64-v4", {"+amx-int8", "+avxvnni", "+avx512vnni"}, set()),
    ("skylake", "x86-64-v3", {"+avx2"}, {"+avx512f", "+avx512vnni"})])
def test_unknown_model_falls_back_to_its_feature_level(name, level, extra, absent):
    m = host.parse_cpuinfo(with_model(cpuinfo(name), 99, 1))
    assert (m.family, m.uarch, m.uarch_known) == (99, level, False)
    assert "not in the table" in m.uarch_basis
    target = host.target_of(m)
    assert target["mcpu"] == level and extra <= set(target["mattr"]) and not absent & set(target["mattr"])
    assert tvm.target.Target(target).mcpu == level


def test_skylake_server_steppings_are_told_apart_by_features():
    spr = cpuinfo("sapphirerapids")
    drop = lambda text, *flags: "\n".join(
        " ".join(w for w in line.split(" ") if w not in flags) if line.startswith("flags") else line
        for line in text.splitlines())
    assert host.parse_cpuinfo(with_model(spr, 6, 85)).uarch == "cooperlake"
    assert host.parse_cpuinfo(drop(with_model(spr, 6, 85), "avx512_bf16")).uarch == "cascadelake"
    assert host.parse_cpuinfo(drop(with_model(spr, 6, 85), "avx512_bf16", "avx512_vnni")).uarch == "skylake-avx512"


def test_no_cpuinfo_is_baseline_x86_64():
    m = host.parse_cpuinfo("")
    assert (m.vendor, m.uarch, m.uarch_known, m.flags) == ("", "x86-64", False, frozenset())


def test_every_table_name_is_an_llvm_cpu():
    names = set(host._INTEL_6.values()) | {n for ranges in host._AMD_RANGES.values() for *_, n in ranges}
    names |= {"cascadelake", "cooperlake"} | {level for level, _ in host._LEVELS}
    assert not codegen.llvm_is_valid_cpu("not-a-cpu", TRIPLE)
    assert [n for n in sorted(names) if not codegen.llvm_is_valid_cpu(n, TRIPLE)] == []


def test_live_host_agrees_with_llvm():
    """This machine's model, read once, names the CPU LLVM's own host detection names."""
    m = host.model()
    assert host.model() is m and host.cpu_flags() == m.flags
    if m.uarch_known:
        assert m.uarch == codegen.llvm_get_system_cpu()
    assert host.tvm_target() == host.target_of(m)
    for feature, f in X86.items():
        assert (host.missing(feature, ()) is None) == (f.cpuinfo in m.flags)


# ---------------------------------------------------------------- qsynth host
@pytest.fixture(scope="module")
def library():
    from qsynth import host_report
    return host_report.library_kernels()


def runnable_on(name: str, library) -> tuple[set, dict]:
    from qsynth import host_report
    rep = host_report.report(host.parse_cpuinfo(cpuinfo(name)), library)
    x86 = [k for k in rep["kernels"] if k["isa"] != "neon"]
    return {k["name"] for k in x86 if k["runnable"]}, {k["name"]: k["reason"] for k in x86 if not k["runnable"]}


def test_library_on_recorded_hosts(library):
    """Which x86 kernels each recorded CPU runs, by what their names say they use: AMX kernels end in
    _amx, AVX2 u8s8 int8 is vpdpbusd ymm (AVX-VNNI; u7s8 is vpmaddubsw, AVX2), AVX-512 needs F + VPOPCNTDQ or VNNI."""
    names = {k["name"] for k in library if k["isa"] != "neon"}
    amx = {n for n in names if n.endswith("_amx")}
    avxvnni = {n for n in names if n.startswith("int8_u8s8") and n.endswith("_avx2")}
    avx512 = {n for n in names if n.endswith("_avx512")}
    assert amx and avxvnni and avx512 and not library[0].get("error")

    ok, why = runnable_on("zen4", library)
    assert ok == names - amx - avxvnni
    assert why == {**dict.fromkeys(amx, "host CPU lacks amx_int8"), **dict.fromkeys(avxvnni, "host CPU lacks avx_vnni")}
    assert runnable_on("sapphirerapids", library) == (names, {})
    ok, why = runnable_on("skylake", library)
    assert ok == names - amx - avxvnni - avx512 and set(why) == amx | avxvnni | avx512
    assert {why[n] for n in avx512} == {"host CPU lacks avx512f", "host CPU lacks avx512_vnni"}


def test_isas_on_recorded_hosts(library):
    from qsynth import host_report
    isas = lambda name: {i["isa"]: i for i in host_report.report(host.parse_cpuinfo(cpuinfo(name)), library)["isas"]}
    zen4, spr = isas("zen4"), isas("sapphirerapids")
    assert zen4["amx"]["runnable"] == [] and zen4["amx"]["not_runnable"] == {"amx-int8": "host CPU lacks amx_int8"}
    assert zen4["avx2"]["runnable"] == ["avx2"] and set(zen4["avx2"]["not_runnable"]) == {"avxvnni"}
    assert zen4["avx512"]["not_runnable"] == {}
    assert all(not i["not_runnable"] for n, i in spr.items() if n != "neon")
    assert (zen4["neon"]["not_runnable"] == {}) == (shutil.which("qemu-aarch64") is not None)
    text = host_report.render(host_report.report(host.parse_cpuinfo(cpuinfo("zen4")), library))
    assert "micro-architecture: znver4\n" in text and "amx     cannot run" in text
    assert "cannot run int8_u8s8_tile_32x32x256_amx: host CPU lacks amx_int8" in text


def test_cli_host_json(capsys, library):
    from qsynth.cli import main
    assert main(["host", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    m = host.model()
    assert rep["host"]["uarch"] == m.uarch and rep["host"]["tvm_target"] == host.tvm_target()
    assert set(rep["host"]["flags"]) == m.flags
    assert [k["name"] for k in rep["kernels"]] == [k["name"] for k in library]


@pytest.mark.parametrize("name", ["zen4", "sapphirerapids"])
def test_recorded_hosts_targets_build_the_vnni_baseline(name):
    """A target the host may not execute is built, not run: TVM's VNNI tile for each recorded CPU."""
    from scripts import tvm_baselines as tb
    target = host.target_of(host.parse_cpuinfo(cpuinfo(name)))
    assert tb.int8_vnni_x86(12, 16, 64, target=target).module is not None
