"""Machine facts, each written once: per CPU extension how the host shows it, how a compiler enables
it, how C code tests for it, and what LLVM calls it; per ISA its vector register file.

A row's ``name`` is LLVM's feature name, which is also what instruction rows (``Instruction.feature``)
and TVM targets (``mattr``) say. Everything that detects, compiles for or targets a feature reads
this table: the host model (``host.py``), the emitted C's guards (``emit/model.py``) and compiler
flags (``emit/toolchain.py``), and the TVM target (``host.target_of``). The register files bound the
values a kernel keeps in flight (``emit/schedule.py``).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Feature:
    name: str                       # LLVM's feature name: instruction rows, ``+mattr``
    arch: str                       # "x86" or "aarch64"
    cpuinfo: str | None             # the /proc/cpuinfo flag that shows it (x86; AArch64 runs under qemu -cpu max)
    # gcc/clang flags that let C use it (x86: AArch64 extensions are ``+ext`` suffixes of the one
    # ``-march`` its toolchain gives, isa_specs/neon.py)
    compiler_flags: tuple[str, ...]
    macros: tuple[str, ...]         # predefined when a translation unit may use it
    # Given to a kernel's compiler only when the kernel's own instructions use it: a compiler may pick
    # it for plain code too (clang fuses a K loop's vpmaddwd + vpaddd into AVX-VNNI's vpdpwssd, which
    # Zen 4 lacks), and the host check reads the kernel's instructions, not its flags.
    on_demand: bool = False

    @property
    def mattr(self) -> str:
        return f"+{self.name}"


# In the order host reports and TVM targets list them.
FEATURES = {f.name: f for f in (
    Feature("neon", "aarch64", None, (), ("__ARM_NEON",)),
    Feature("dotprod", "aarch64", None, (), ("__ARM_FEATURE_DOTPROD",)),
    Feature("i8mm", "aarch64", None, (), ("__ARM_FEATURE_MATMUL_INT8",)),
    Feature("avx2", "x86", "avx2", ("-mavx2",), ("__AVX2__",)),
    Feature("avx512f", "x86", "avx512f", ("-mavx512f",), ("__AVX512F__",)),
    Feature("avx512bw", "x86", "avx512bw", ("-mavx512bw",), ("__AVX512BW__",)),
    Feature("avx512vl", "x86", "avx512vl", ("-mavx512vl",), ("__AVX512VL__",)),
    Feature("avx512vnni", "x86", "avx512_vnni", ("-mavx512vnni",), ("__AVX512VNNI__",), on_demand=True),
    Feature("avx512vbmi", "x86", "avx512vbmi", ("-mavx512vbmi",), ("__AVX512VBMI__",), on_demand=True),
    Feature("avx512vpopcntdq", "x86", "avx512_vpopcntdq", ("-mavx512vpopcntdq",), ("__AVX512VPOPCNTDQ__",),
            on_demand=True),
    Feature("avx512bitalg", "x86", "avx512_bitalg", ("-mavx512bitalg",), ("__AVX512BITALG__",), on_demand=True),
    Feature("avxvnni", "x86", "avx_vnni", ("-mavxvnni",), ("__AVXVNNI__",), on_demand=True),
    Feature("amx-tile", "x86", "amx_tile", ("-mamx-tile",), ("__AMX_TILE__",)),
    Feature("amx-int8", "x86", "amx_int8", ("-mamx-tile", "-mamx-int8"), ("__AMX_TILE__", "__AMX_INT8__")),
)}

X86 = {name: f for name, f in FEATURES.items() if f.arch == "x86"}
AARCH64 = {name: f for name, f in FEATURES.items() if f.arch == "aarch64"}


@dataclass(frozen=True)
class RegisterFile:
    """The vector registers a kernel of one ISA allocates from."""
    count: int
    bits: int


REGISTER_FILES = {
    "neon": RegisterFile(32, 128),
    "avx2": RegisterFile(16, 256),
    "avx512": RegisterFile(32, 512),
}
