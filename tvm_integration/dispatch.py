"""Which tile kernel and which LLVM target an operator is built with.

``isa="host"`` takes the best ISA the host executes: AMX > AVX-512 VNNI > AVX-VNNI > AVX2, read from
the host's CPU flags (isa_specs.host), never from a CPU name. An explicit ISA builds for that ISA;
running the operator then needs a host that has it.
"""
from __future__ import annotations

from isa_specs import host
from tvm_integration.intrinsics import Kernel, register_kernels

# Preference order of the u8 x s8 tiles: the cache's ISA name and the kernel's distinguishing feature.
PREFERENCE = (("amx", "amx-int8"), ("avx512", "avx512vnni"), ("avx2", "avxvnni"), ("avx2", "avx2"))
ISAS = ("amx", "avx512", "avx2")


class DispatchError(ValueError):
    """No kernel for the requested ISA, or the host cannot run it."""


def usable(kernel: Kernel) -> str | None:
    """None when the host executes every instruction of ``kernel``, else why not."""
    return next((why for f in kernel.features if (why := host.missing(f, ()))), None)


def _u8s8_kernels(isa: str) -> list[Kernel]:
    """The isa's u8 x s8 tiles valid on every u8 (u7s8 assumes A < 128, so it is not one)."""
    return [k for k in register_kernels(isa) if k.spec.types == "u8s8"]


def select(isa: str = "host") -> Kernel:
    """The kernel an operator uses for ``isa`` ("host" or one of ISAS)."""
    if isa == "host":
        reasons = []
        for name, feature in PREFERENCE:
            if (why := host.missing(feature, ())) is not None:
                reasons.append(f"{name}: {why}")     # not re-proved here (AMX: 62 s CPU)
                continue
            for kernel in _u8s8_kernels(name):
                if feature in kernel.features and (why := usable(kernel)) is None:
                    return kernel
                reasons.append(f"{kernel.intrin}: {why or 'not ' + feature}")
        raise DispatchError("no u8 x s8 kernel this host runs: " + "; ".join(reasons or ["none registered"]))
    if isa not in ISAS:
        raise DispatchError(f"unknown ISA {isa!r}; accepted: host, {', '.join(ISAS)}")
    kernels = _u8s8_kernels(isa)
    if not kernels:
        raise DispatchError(f"no proved u8 x s8 kernel of {isa} in the cache that a schedule here can use")
    return kernels[0]


def candidates(isa: str = "host") -> list[Kernel]:
    """Every tile shape of the kind ``select(isa)`` picks (same ISA and instructions): what tuning
    chooses among per operator shape."""
    chosen = select(isa)
    return [k for k in _u8s8_kernels(chosen.spec.isa) if k.features == chosen.features]


def target(kernel: Kernel | None = None) -> dict:
    """The host model's target (its micro-architecture as LLVM names it); for a kernel the host cannot
    run, a generic x86-64 target with the kernel's features, so the module still builds."""
    if kernel is None or usable(kernel) is None:
        return host.tvm_target()
    return {"kind": "llvm", "mtriple": "x86_64-linux-gnu", "mattr": [f"+{f}" for f in kernel.features]}
