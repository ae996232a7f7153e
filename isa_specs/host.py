"""What this machine can execute: CPU feature flags natively, AArch64 through qemu-user."""
from __future__ import annotations

import shutil
from functools import cache

# CPU feature names used in instruction rows → /proc/cpuinfo flags (x86).
X86_FLAGS = {
    "avx2": "avx2",
    "avx512f": "avx512f",
    "avx512bw": "avx512bw",
    "avx512vl": "avx512vl",
    "avx512vnni": "avx512_vnni",
    "avx512vpopcntdq": "avx512_vpopcntdq",
    "avx512bitalg": "avx512_bitalg",
    "avxvnni": "avx_vnni",
    "amx-int8": "amx_int8",
}
# AArch64 features: all provided by ``qemu-aarch64 -cpu max``.
ARM_FEATURES = {"neon", "dotprod", "i8mm"}


@cache
def cpu_flags() -> frozenset[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def missing(feature: str, runner: tuple[str, ...]) -> str | None:
    """None when the host can execute ``feature``, else the reason it cannot."""
    if feature in ARM_FEATURES:
        tool = runner[0] if runner else "qemu-aarch64"
        return None if shutil.which(tool) else f"{tool} not installed (apt-get install qemu-user)"
    flag = X86_FLAGS.get(feature)
    if flag is None:
        raise KeyError(f"unknown CPU feature {feature!r}")
    return None if flag in cpu_flags() else f"host CPU lacks {flag}"
