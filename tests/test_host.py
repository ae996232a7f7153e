"""The host model read from recorded /proc/cpuinfo texts (tests/data/cpuinfo_*.txt: this project's
Zen 4 CI host, a Sapphire Rapids Xeon 8480+, an AVX2-only Skylake i7-6700K), so that every branch is
tested whichever CPU runs the suite; LLVM (TVM's) is the reference for CPU names."""
from __future__ import annotations

from pathlib import Path

import pytest
import tvm
from tvm.target import codegen

from isa_specs import host

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
    ("zen4", set(host.X86_FLAGS) - {"avxvnni", "amx-int8"}, {"avxvnni", "amx-int8"}),
    ("sapphirerapids", set(host.X86_FLAGS), set()),
    ("skylake", {"avx2"}, set(host.X86_FLAGS) - {"avx2"})])
def test_features_of_recorded_hosts(name, has, lacks):
    flags = host.parse_cpuinfo(cpuinfo(name)).flags
    assert {f for f in host.X86_FLAGS if host.lacks(f, flags) is None} == has
    for feature in lacks:
        assert host.lacks(feature, flags) == f"host CPU lacks {host.X86_FLAGS[feature]}"


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
    for feature, flag in host.X86_FLAGS.items():
        assert (host.missing(feature, ()) is None) == (flag in m.flags)
