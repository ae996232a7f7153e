"""What this machine is and can execute: one host model (vendor, family/model, the LLVM name of its
micro-architecture, CPU feature flags) read once from /proc/cpuinfo, and AArch64 through qemu-user.

Everything that compiles for or runs on the host asks this module instead of naming a CPU: the
instruction checks, the peak probes, the kernel benchmarks and the TVM targets. The CPU features it
tells apart are the rows of ``features.py``."""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, replace
from functools import cache

from isa_specs.features import AARCH64, X86

# LLVM CPU names by (vendor, family) → {model: name}, as LLVM's sys::getHostCPUName() maps them
# (llvm/lib/TargetParser/Host.cpp). Models not listed are not guessed: see ``_level``.
_INTEL_6 = {
    **dict.fromkeys((0x3C, 0x3F, 0x45, 0x46), "haswell"),
    **dict.fromkeys((0x3D, 0x47, 0x4F, 0x56), "broadwell"),
    **dict.fromkeys((0x4E, 0x5E, 0x8E, 0x9E, 0xA5, 0xA6), "skylake"),
    0x55: "skylake-avx512",             # also Cascade Lake and Cooper Lake: told apart by features
    0x66: "cannonlake",
    0x6A: "icelake-server", 0x6C: "icelake-server",
    0x7D: "icelake-client", 0x7E: "icelake-client",
    0x8C: "tigerlake", 0x8D: "tigerlake",
    0x8F: "sapphirerapids",
    0xCF: "emeraldrapids",
    0xAD: "graniterapids", 0xAE: "graniterapids-d",
    0x97: "alderlake", 0x9A: "alderlake", 0xBE: "alderlake",
    0xB7: "raptorlake", 0xBA: "raptorlake", 0xBF: "raptorlake",
    0xAA: "meteorlake", 0xAC: "meteorlake",
    0xA7: "rocketlake",
}
_AMD_RANGES = {             # family → [(first model, last model, name)]
    0x17: [(0x00, 0x2F, "znver1"), (0x30, 0x3F, "znver2"), (0x47, 0x47, "znver2"), (0x60, 0x7F, "znver2"),
           (0x84, 0x87, "znver2"), (0x90, 0xAF, "znver2")],
    0x19: [(0x00, 0x0F, "znver3"), (0x10, 0x1F, "znver4"), (0x20, 0x5F, "znver3"), (0x60, 0x7F, "znver4"),
           (0xA0, 0xAF, "znver4")],
    0x1A: [(0x00, 0xFF, "znver5")],
}
# x86-64 micro-architecture levels (psABI), highest first, by the /proc/cpuinfo flags each requires.
_LEVELS = [
    ("x86-64-v4", {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}),
    ("x86-64-v3", {"avx2", "bmi1", "bmi2", "fma", "f16c", "movbe", "abm", "xsave"}),
    ("x86-64-v2", {"sse4_2", "popcnt", "ssse3", "cx16", "lahf_lm"}),
]
VNNI = ("avx512vnni", "avxvnni")        # the features.X86 names with vpdpwssd
FAST_DPWSSD = "+fast-dpwssd"            # an LLVM tuning, not a CPU feature (target_of)


@dataclass(frozen=True)
class HostModel:
    """``uarch`` is LLVM's CPU name for the model number; ``uarch_known`` is False when the
    vendor/family/model is not in the table and ``uarch`` is only the feature level (x86-64-v4, ...)
    its flags reach. The name is a scheduling model, not a feature list: ``flags`` say what the host
    executes, and ``target_of`` gives LLVM both."""
    vendor: str
    family: int
    model: int
    model_name: str
    uarch: str
    uarch_known: bool
    flags: frozenset[str]

    @property
    def uarch_basis(self) -> str:
        where = f"{self.vendor} family {self.family} model {self.model}"
        return where if self.uarch_known else f"{where} not in the table: feature level of its flags"


def _level(flags: frozenset[str]) -> str:
    return next((name for name, need in _LEVELS if need <= flags), "x86-64")


def _uarch(vendor: str, family: int, model: int, flags: frozenset[str]) -> str | None:
    if vendor == "GenuineIntel" and family == 6:
        name = _INTEL_6.get(model)
        if name == "skylake-avx512":
            return ("cooperlake" if "avx512_bf16" in flags else
                    "cascadelake" if "avx512_vnni" in flags else name)
        return name
    if vendor == "AuthenticAMD":
        return next((name for lo, hi, name in _AMD_RANGES.get(family, ()) if lo <= model <= hi), None)
    return None


def parse_cpuinfo(text: str) -> HostModel:
    """The host model of the first processor in a /proc/cpuinfo text."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    flags = frozenset(fields.get("flags", "").split())
    vendor = fields.get("vendor_id", "")
    family, model = int(fields.get("cpu family", -1)), int(fields.get("model", -1))
    uarch = _uarch(vendor, family, model, flags)
    return HostModel(vendor, family, model, fields.get("model name", ""), uarch or _level(flags),
                     uarch is not None, flags)


# The x86 features (``features.X86`` names, comma-separated) the host model may use, a subset of what
# the CPU shows: ``avx2`` makes any x86-64 host an AVX2-only one (Zen 2/3, Haswell to Comet Lake),
# ``avx2,avx512f,avx512bw,avx512vl`` a Skylake-SP without VNNI. The code then runs natively: no emulation.
FEATURES_VARIABLE = "QSYNTH_HOST_FEATURES"


class HostFeaturesError(ValueError):
    """``QSYNTH_HOST_FEATURES`` names a feature that is unknown or that the CPU does not show."""


def restricted(m: HostModel, features: str) -> HostModel:
    """``m`` showing only the x86 features named in ``features`` (its other flags, e.g. fma, kept)."""
    names = [n.strip() for n in features.split(",") if n.strip()]
    unknown = [n for n in names if n not in X86]
    if unknown:
        raise HostFeaturesError(f"{FEATURES_VARIABLE}: unknown x86 feature(s) {', '.join(unknown)}; "
                                f"accepted: {', '.join(X86)}")
    absent = [n for n in names if X86[n].cpuinfo not in m.flags]
    if absent:
        raise HostFeaturesError(f"{FEATURES_VARIABLE}: this CPU does not show {', '.join(absent)} "
                                f"(the variable can only take features away)")
    shown = {X86[n].cpuinfo for n in names}
    if "amx-int8" in names:
        shown.add(X86["amx-tile"].cpuinfo)
    feature_flags = {f.cpuinfo for f in X86.values()}
    return replace(m, flags=frozenset(f for f in m.flags if f not in feature_flags or f in shown))


@cache
def cpu_model() -> HostModel:
    """The host as /proc/cpuinfo shows it: what other libraries on it (onnxruntime's MLAS) dispatch on."""
    try:
        with open("/proc/cpuinfo") as f:
            return parse_cpuinfo(f.read())
    except OSError:
        return parse_cpuinfo("")


@cache
def model() -> HostModel:
    """The host as /proc/cpuinfo shows it, less what ``QSYNTH_HOST_FEATURES`` takes away."""
    features = os.environ.get(FEATURES_VARIABLE)
    return restricted(cpu_model(), features) if features is not None else cpu_model()


def cpu_flags() -> frozenset[str]:
    return model().flags


def x86_features(m: HostModel) -> list[str]:
    """The x86 features (LLVM names, ``features.X86`` keys) whose flags ``m`` shows."""
    return [name for name, f in X86.items() if f.cpuinfo in m.flags]


def target_of(m: HostModel) -> dict:
    """The TVM 0.27 target of ``m``. ``mcpu`` only picks LLVM's scheduling model: a CPU name is read
    from the model number, and a virtual machine may report one whose CPU lacks features the host has
    (this project's AMX Xeon reports model 167, Rocket Lake: no AMX, no AVX-VNNI) or has features the
    host masks (AVX-512 hidden on a model LLVM calls skylake-avx512). So ``mattr`` states every x86
    feature of ``features.X86`` from the flags, ``+`` when shown and ``-`` when not, whatever the name
    implies (LLVM turns a ``-`` feature's dependants off with it: ``-avx512f`` drops all AVX-512).
    With VNNI it also asks for LLVM's ``fast-dpwssd`` tuning (set by LLVM for Zen 4 and 5 only): a
    ``vpmaddwd`` and the ``vpaddd`` of its product become one ``vpdpwssd``. The depthwise layers'
    taps are such products (ops/depthwise.py); on the AMX Xeon, CPU time, one thread: MobileNetV2's
    56x56x144 layer 95 -> 76 us, the whole model 1.95 -> 1.80 ms (1.01x -> 0.94x OpenVINO built for VNNI
    only, 2.42 -> 2.28 ms), ResNet-18 level."""
    mattr = [f.mattr if f.cpuinfo in m.flags else f"-{name}" for name, f in X86.items()]
    if any(X86[name].cpuinfo in m.flags for name in VNNI):
        mattr.append(FAST_DPWSSD)
    return {"kind": "llvm", "mcpu": m.uarch, "mattr": mattr}


def tvm_target() -> dict:
    """TVM target for code that runs on this host."""
    return target_of(model())


def lacks(feature: str, flags: frozenset[str]) -> str | None:
    """None when ``flags`` include x86 ``feature`` (a ``features.X86`` key), else the reason."""
    if feature not in X86:
        raise KeyError(f"unknown CPU feature {feature!r}")
    flag = X86[feature].cpuinfo
    return None if flag in flags else f"host CPU lacks {flag}"


def missing(feature: str, runner: tuple[str, ...]) -> str | None:
    """None when the host can execute ``feature``, else the reason it cannot."""
    if feature in AARCH64:        # all provided by ``qemu-aarch64 -cpu max``
        tool = runner[0] if runner else "qemu-aarch64"
        return None if shutil.which(tool) else f"{tool} not installed (apt-get install qemu-user)"
    return lacks(feature, cpu_flags())
