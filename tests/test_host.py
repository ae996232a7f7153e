"""The host model read from recorded /proc/cpuinfo texts (tests/data/cpuinfo_*.txt: this project's
Zen 4 CI host, a Sapphire Rapids Xeon 8480+, an AVX2-only Skylake i7-6700K, and a KVM Xeon with AMX
that reports model 167, which LLVM names rocketlake though Rocket Lake has neither AMX nor AVX-VNNI),
so that every branch is tested whichever CPU runs the suite. LLVM (TVM's) is the reference for CPU
names and for what a target lets code use; gcc ``-march=native`` for what the live host has."""
from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import tvm
from tvm.target import codegen

from conftest import HOST_RUNS, skip_if
from isa_specs import ISA_NAMES, get_isa, host
from isa_specs.features import AARCH64, FEATURES, X86

DATA = Path(__file__).parent / "data"
TRIPLE = "x86_64-pc-linux-gnu"


def cpuinfo(name: str) -> str:
    return (DATA / f"cpuinfo_{name}.txt").read_text()


def llvm_features(target: dict) -> set[str]:
    """The x86 features (``features.X86`` keys) LLVM enables for ``target``."""
    return set(codegen.llvm_get_cpu_features(tvm.target.Target({"mtriple": TRIPLE, **target}))) & set(X86)


def without(text: str, *flags: str) -> str:
    """``text`` with ``flags`` removed from its flags line (a VM that masks them)."""
    return "\n".join(" ".join(w for w in line.split(" ") if w not in flags) if line.startswith("flags") else line
                     for line in text.splitlines())


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
    ("skylake", "GenuineIntel", 6, 94, "skylake"),
    ("amx_model167", "GenuineIntel", 6, 167, "rocketlake")])
def test_recorded_hosts(name, vendor, family, model, uarch):
    """The name comes from the model number; the target LLVM builds has exactly the flags' features."""
    m = host.parse_cpuinfo(cpuinfo(name))
    assert (m.vendor, m.family, m.model, m.uarch, m.uarch_known) == (vendor, family, model, uarch, True)
    assert m.model_name and "avx2" in m.flags and "processor" not in m.flags
    target = host.target_of(m)
    assert (target["kind"], target["mcpu"]) == ("llvm", uarch) and tvm.target.Target(target).mcpu == uarch
    assert llvm_features(target) == set(host.x86_features(m))


@pytest.mark.parametrize("name,has,lacks", [
    ("zen4", set(X86) - {"avxvnni", "amx-tile", "amx-int8"}, {"avxvnni", "amx-tile", "amx-int8"}),
    ("sapphirerapids", set(X86), set()),
    ("amx_model167", set(X86), set()),
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


@pytest.mark.parametrize("name,fast", [("zen4", True), ("sapphirerapids", True), ("amx_model167", True),
                                       ("skylake", False)])
def test_vnni_hosts_fold_the_depthwise_taps_into_vpdpwssd(name, fast):
    """With VNNI the target asks LLVM for fast-dpwssd (host.target_of), and a depthwise layer's taps
    compile to vpdpwssd, not vpmaddwd and vpaddd (compiled for the recorded host, not run)."""
    from tvm import te
    from tvm_integration.ops import depthwise
    from tvm_integration.ops.output_stage import OutputStage
    target = host.target_of(host.parse_cpuinfo(cpuinfo(name)))
    assert (host.FAST_DPWSSD in target["mattr"]) == fast
    if fast:
        weight = np.random.default_rng(0).integers(-128, 128, (32, 1, 3, 3)).astype(np.int8)
        mod, _, _ = depthwise.build(te.placeholder((1, 16, 16, 32), "uint8", name="x"), "NHWC", weight, (1, 1),
                                    (1, 1, 1, 1), (16, 16), OutputStage())
        lib = tvm.compile(mod, target=tvm.target.Target({"mtriple": TRIPLE, **target}))
        asm = (lib.mod.imports[0] if lib.mod.imports else lib.mod).inspect_source("asm")
        assert asm.count("vpdpwssd") > asm.count("vpmaddwd"), (asm.count("vpdpwssd"), asm.count("vpmaddwd"))


@pytest.mark.parametrize("name,level,extra,absent", [
    ("zen4", "x86-64-v4", {"+avx512vnni", "+avx512vpopcntdq", "+avx512bitalg"}, {"+amx-int8", "+avxvnni"}),
    ("sapphirerapids", "x86-64-v4", {"+amx-int8", "+avxvnni", "+avx512vnni"}, set()),
    ("skylake", "x86-64-v3", {"+avx2"}, {"+avx512f", "+avx512vnni"}),
    ("amx_model167", "x86-64-v4", {"+amx-tile", "+amx-int8", "+avxvnni"}, set())])
def test_unknown_model_falls_back_to_its_feature_level(name, level, extra, absent):
    m = host.parse_cpuinfo(with_model(cpuinfo(name), 99, 1))
    assert (m.family, m.uarch, m.uarch_known) == (99, level, False)
    assert "not in the table" in m.uarch_basis
    target = host.target_of(m)
    assert target["mcpu"] == level and extra <= set(target["mattr"]) and not absent & set(target["mattr"])
    assert {"-" + a[1:] for a in absent} <= set(target["mattr"])
    assert tvm.target.Target(target).mcpu == level and llvm_features(target) == set(host.x86_features(m))


def avx512_flags(name: str) -> tuple[str, ...]:
    return tuple(f for f in host.parse_cpuinfo(cpuinfo(name)).flags if f.startswith("avx512"))


# A recorded CPU, the model number it reports, the flags a VM masks, LLVM's name for that model, and the
# features that name has or lacks against the flags.
MISNAMED = {
    "this host": ("amx_model167", 167, (), "rocketlake", {"avxvnni", "amx-tile", "amx-int8"}),
    "AVX-512 masked": ("sapphirerapids", 85, avx512_flags("sapphirerapids") + ("avx_vnni", "amx_tile", "amx_int8"),
                       "skylake-avx512", {"avx512f", "avx512bw", "avx512vl"}),
    "AMX masked": ("sapphirerapids", 143, ("amx_tile", "amx_int8", "amx_bf16"), "sapphirerapids",
                   {"amx-tile", "amx-int8"}),
}


def misnamed(case: str) -> host.HostModel:
    name, model, masked, *_ = MISNAMED[case]
    return host.parse_cpuinfo(without(with_model(cpuinfo(name), 6, model), *masked))


@pytest.mark.parametrize("case", MISNAMED)
def test_target_follows_the_flags_not_the_name(case):
    """Whatever LLVM's CPU of that name has or lacks, the target has exactly the flags' features."""
    *_, uarch, name_differs_by = MISNAMED[case]
    m = misnamed(case)
    assert (m.uarch, m.uarch_known) == (uarch, True)
    assert llvm_features(host.target_of(m)) == set(host.x86_features(m))
    assert llvm_features({"kind": "llvm", "mcpu": uarch}) ^ set(host.x86_features(m)) == name_differs_by


def amx_and_vnni(target: dict):
    """TVM code using AMX and AVX-512 VNNI, built for ``target``: C (16x16 s32) = A (16x64 u8) times B
    (16 rows of 16 columns x 4 k, s8) by one tdpbusd, and D = vpdpbusd(0, A's row 0, B's row 0)."""
    from tvm.script import tirx as T
    tile = lambda op, t, buf: T.evaluate(T.call_llvm_intrin("void", op, T.int8(t), T.address_of(buf[0, 0]), T.int64(64)))

    @T.prim_func
    def f(cfg: T.Buffer((64,), "uint8"), a: T.Buffer((16, 64), "uint8"), b: T.Buffer((16, 64), "int8"),
          c: T.Buffer((16, 16), "int32"), d: T.Buffer((16,), "int32")):
        T.evaluate(T.call_llvm_intrin("void", "llvm.x86.ldtilecfg", T.address_of(cfg[0])))
        tile("llvm.x86.tileloadd64", 0, c)
        tile("llvm.x86.tileloadd64", 1, a)
        tile("llvm.x86.tileloadd64", 2, b)
        T.evaluate(T.call_llvm_intrin("void", "llvm.x86.tdpbusd", T.int8(0), T.int8(1), T.int8(2)))
        tile("llvm.x86.tilestored64", 0, c)
        T.evaluate(T.call_llvm_intrin("void", "llvm.x86.tilerelease"))
        d[T.ramp(0, 1, 16)] = T.call_llvm_pure_intrin("int32x16", "llvm.x86.avx512.vpdpbusd.512", T.Broadcast(0, 16),
                                                      a[0, T.ramp(0, 1, 64)], b[0, T.ramp(0, 1, 64)])
    return tvm.compile(tvm.IRModule({"main": f}), target=tvm.target.Target({"mtriple": TRIPLE, **target}))


def test_amx_host_target_lets_tvm_code_use_amx_and_vnni():
    """The recorded AMX host's target lets LLVM select tdpbusd and vpdpbusd zmm. Built, not run, so any
    x86 host checks it (for LLVM's rocketlake alone, LLVM aborts: "Cannot select: intrinsic")."""
    asm = amx_and_vnni(host.target_of(host.parse_cpuinfo(cpuinfo("amx_model167")))).mod.inspect_source("s")
    assert "tdpbusd\t%tmm2, %tmm1, %tmm0" in asm and re.search(r"vpdpbusd\t.*%zmm", asm)


@skip_if(HOST_RUNS.lacks("amx-int8"))
def test_amx_and_vnni_run_on_the_live_hosts_target():
    """Run here for this host's own target, after the process asks Linux for the tile data state
    (arch_prctl ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18), against numpy."""
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.syscall(158, 0x1023, 18) == 0, f"arch_prctl: errno {ctypes.get_errno()}"    # SYS_arch_prctl
    cfg = np.zeros(64, np.uint8)
    cfg[0], cfg[16:22:2], cfg[48:51] = 1, 64, 16        # palette 1; tiles 0-2: 64 bytes per row, 16 rows
    rng = np.random.default_rng(0)
    a = rng.integers(0, 256, (16, 64)).astype(np.uint8)
    b = rng.integers(-128, 128, (16, 64)).astype(np.int8)
    args = [tvm.runtime.tensor(x) for x in (cfg, a, b, np.zeros((16, 16), np.int32), np.zeros(16, np.int32))]
    amx_and_vnni(host.tvm_target())["main"](*args)
    b_kn = b.reshape(16, 16, 4).transpose(0, 2, 1).reshape(64, 16)      # row k//4, column n, byte k%4
    np.testing.assert_array_equal(args[3].numpy(), a.astype(np.int64) @ b_kn)
    np.testing.assert_array_equal(args[4].numpy(), (a[0].astype(np.int64) * b[0]).reshape(16, 4).sum(1))


def test_skylake_server_steppings_are_told_apart_by_features():
    spr = with_model(cpuinfo("sapphirerapids"), 6, 85)
    assert host.parse_cpuinfo(spr).uarch == "cooperlake"
    assert host.parse_cpuinfo(without(spr, "avx512_bf16")).uarch == "cascadelake"
    assert host.parse_cpuinfo(without(spr, "avx512_bf16", "avx512_vnni")).uarch == "skylake-avx512"


def test_no_cpuinfo_is_baseline_x86_64():
    m = host.parse_cpuinfo("")
    assert (m.vendor, m.uarch, m.uarch_known, m.flags) == ("", "x86-64", False, frozenset())


def test_every_table_name_is_an_llvm_cpu():
    names = set(host._INTEL_6.values()) | {n for ranges in host._AMD_RANGES.values() for *_, n in ranges}
    names |= {"cascadelake", "cooperlake"} | {level for level, _ in host._LEVELS}
    assert not codegen.llvm_is_valid_cpu("not-a-cpu", TRIPLE)
    assert [n for n in sorted(names) if not codegen.llvm_is_valid_cpu(n, TRIPLE)] == []


def test_live_host_agrees_with_llvm_and_gcc():
    """This machine's CPU, read once, is the CPU LLVM's own host detection names, with the x86 features gcc's
    own detection (``-march=native``, from CPUID) finds: its macros of each row. The host model is that CPU
    less what ``QSYNTH_HOST_FEATURES`` holds back, and decides what runs."""
    cpu, m = host.cpu_model(), host.model()
    assert host.model() is m and host.cpu_flags() == m.flags
    held = os.environ.get(host.FEATURES_VARIABLE)
    assert m == (cpu if held is None else host.restricted(cpu, held))
    if cpu.uarch_known:
        assert cpu.uarch == codegen.llvm_get_system_cpu()
    assert host.tvm_target() == host.target_of(m)
    for feature, f in X86.items():
        assert (host.missing(feature, ()) is None) == (f.cpuinfo in m.flags)
    if not shutil.which("gcc") or cpu.vendor not in ("GenuineIntel", "AuthenticAMD"):
        pytest.skip("gcc -march=native needs gcc on an x86 host")
    native = set(subprocess.run(["gcc", "-march=native", "-dM", "-E", "-x", "c", "/dev/null"], capture_output=True,
                                text=True, check=True).stdout.split())
    assert [name for name, f in X86.items() if set(f.macros) <= native] == host.x86_features(cpu)


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
    _amx, AVX2 u8s8 int8 is vpdpbusd ymm (AVX-VNNI; u7s8 is vpmaddubsw, AVX2), AVX-512 needs F + VPOPCNTDQ, VNNI or
    BW (the w16 tiles)."""
    names = {k["name"] for k in library if k["isa"] != "neon"}
    amx = {n for n in names if n.endswith("_amx")}
    avxvnni = {n for n in names if n.startswith("int8_u8s8") and n.endswith("_avx2")}
    avx512 = {n for n in names if n.endswith("_avx512")}
    assert amx and avxvnni and avx512 and not library[0].get("error")

    ok, why = runnable_on("zen4", library)
    assert ok == names - amx - avxvnni
    assert why == {**dict.fromkeys(amx, "host CPU lacks amx_int8"), **dict.fromkeys(avxvnni, "host CPU lacks avx_vnni")}
    assert runnable_on("sapphirerapids", library) == runnable_on("amx_model167", library) == (names, {})
    ok, why = runnable_on("skylake", library)
    assert ok == names - amx - avxvnni - avx512 and set(why) == amx | avxvnni | avx512
    assert {why[n] for n in avx512} == {"host CPU lacks avx512f", "host CPU lacks avx512_vnni", "host CPU lacks avx512bw"}


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
    assert "micro-architecture: znver4 by model number\n" in text and "amx     cannot run" in text
    assert "cannot run int8_u8s8_tile_32x32x256_amx: host CPU lacks amx_int8" in text


@pytest.mark.parametrize("case,lacks,assumes", [
    ("this host", ["avxvnni", "amx-tile", "amx-int8"], []),
    ("AVX-512 masked", [], ["avx512f", "avx512bw", "avx512vl"]),
    ("AMX masked", [], ["amx-tile", "amx-int8"])])
def test_report_says_what_the_model_numbers_cpu_has_and_lacks(case, lacks, assumes, library):
    """``qsynth host`` names the features the flags show that the named CPU lacks (Rocket Lake: no
    AVX-VNNI, no AMX; Intel's specifications), and those it has that the flags lack; the TVM target
    states them."""
    from qsynth import host_report
    rep = host_report.report(misnamed(case), library)
    h = rep["host"]
    assert (h["uarch_lacks"], h["uarch_assumes"]) == (lacks, assumes)
    mattr = set(h["tvm_target"]["mattr"])
    assert {f"+{f}" for f in lacks} <= mattr and {f"-{f}" for f in assumes} <= mattr
    line = next(line for line in host_report.render(rep).splitlines() if "micro-architecture" in line)
    assert line == (f"  micro-architecture: {h['uarch']} by model number"
                    + (f"; flags show {', '.join(lacks)} it lacks" if lacks else "")
                    + (f"; flags lack {', '.join(assumes)} it has" if assumes else ""))


def test_report_of_an_unknown_model_says_what_its_level_lacks(library):
    from qsynth import host_report
    text = host_report.render(host_report.report(host.parse_cpuinfo(with_model(cpuinfo("zen4"), 99, 1)), library))
    assert ("micro-architecture: x86-64-v4 (feature level, model unknown); "
            "flags show avx512vnni, avx512vbmi, avx512vpopcntdq, avx512bitalg it lacks\n") in text


def test_cli_host_json(capsys, library):
    from qsynth.cli import main
    assert main(["host", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    m = host.model()
    assert rep["host"]["uarch"] == m.uarch and rep["host"]["tvm_target"] == host.tvm_target()
    assert set(rep["host"]["flags"]) == m.flags
    assert {f"+{name}" for name, f in X86.items() if f.cpuinfo in m.flags} <= set(rep["host"]["tvm_target"]["mattr"])
    assert [k["name"] for k in rep["kernels"]] == [k["name"] for k in library]


@pytest.mark.parametrize("name", ["zen4", "sapphirerapids", "amx_model167"])
def test_recorded_hosts_targets_build_the_vnni_baseline(name):
    """A target the host may not execute is built, not run: TVM's VNNI tile for each recorded CPU."""
    from scripts import tvm_baselines as tb
    target = host.target_of(host.parse_cpuinfo(cpuinfo(name)))
    assert tb.int8_vnni_x86(12, 16, 64, target=target).module is not None


@pytest.mark.parametrize("name,features,has,lacks", [
    ("sapphirerapids", "avx2", {"avx2", "fma"}, {"avx512f", "avx512_vnni", "avx_vnni", "amx_int8", "amx_tile"}),
    ("zen4", "avx2", {"avx2", "fma"}, {"avx512f", "avx512bw", "avx512_vnni"}),
    ("sapphirerapids", "avx2,avx512f,avx512bw,avx512vl", {"avx512f", "avx512bw", "avx512vl"},
     {"avx512_vnni", "avx_vnni", "amx_int8"}),
    ("sapphirerapids", "avx2,amx-int8", {"amx_int8", "amx_tile"}, {"avx512f"}),
    ("zen3", "avx2", {"avx2", "fma"}, {"avx512f"})])
def test_host_features_variable_takes_features_away(name, features, has, lacks):
    """QSYNTH_HOST_FEATURES: an Intel or Zen 4 host becomes an AVX2-only one (or a Skylake-SP without
    VNNI): its flags lose the x86 features not named, keep the rest, and LLVM's target loses them too."""
    m = host.restricted(host.parse_cpuinfo(cpuinfo(name)), features)
    assert has <= m.flags and not lacks & m.flags
    enabled = llvm_features(host.target_of(m))
    assert {"avx2"} <= enabled and not {"avx512f", "avx512vnni", "avxvnni", "amx-int8"} & enabled - set(features.split(","))


@pytest.mark.parametrize("features,says", [
    ("avx512f", "does not show avx512f"), ("avx3", "unknown x86 feature(s) avx3")])
def test_host_features_variable_only_takes_known_features_away(features, says):
    with pytest.raises(host.HostFeaturesError, match=re.escape(says)):
        host.restricted(host.parse_cpuinfo(cpuinfo("zen3")), features)


def test_live_host_model_reads_the_variable(monkeypatch):
    monkeypatch.setenv(host.FEATURES_VARIABLE, "avx2")
    host.model.cache_clear()
    try:
        assert host.lacks("avx512f", host.cpu_flags()) and host.lacks("avx2", host.cpu_flags()) is None
    finally:
        monkeypatch.undo()
        host.model.cache_clear()
