"""The compilers of emitted kernels: each kernel's flags (its ISA toolchain's, at -O3, without the
extensions its instructions do not use) and compiles cached by content under the qsynth build
directory, so a kernel, driver or IR module is built once per content and toolchain.

The build directory holds what later runs (drivers) or is compiled into models (kernel IR): it is used
only while private to this user (``isa_specs.derived_files``), and each output is checked against
the digest recorded when it was written before every use; an edited, truncated, linked or planted one
is removed with one warning line and rebuilt (issue 46: a ``sed`` on a cached ``.ll`` changed a model's
outputs silently)."""
from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

from emit import EmitError
from emit.amx_runtime import EMULATED_FEATURES
from isa_specs import check, get_isa
from isa_specs.check import ToolchainError
from isa_specs.features import FEATURES
from isa_specs.derived_files import cached_build

COMPILERS = ("gcc", "clang")


def compile_flags(isa_name: str, compiler: str, features=None, emulated: bool = False) -> tuple[str, ...]:
    """The ISA toolchain's flags at -O3, without those of the on-demand extensions
    (``isa_specs.features``) outside ``features`` (a kernel's ``kernel_model`` features; None: keep
    them all), and ``emulated``, without those of the features the emitted C emulates (AMX:
    ``amx_runtime``); a kernel using them gets ``-DQSYNTH_AMX_EXPECT_EMULATED``, so that a build of
    the other kind (a compiler that does not define the AMX macros) fails instead of passing for
    the one asked for. clang targets AArch64 explicitly for NEON."""
    if compiler not in COMPILERS:
        raise EmitError(f"unknown compiler {compiler!r}; accepted: {', '.join(COMPILERS)}")
    unused = set() if features is None else {flag for f in FEATURES.values() if f.on_demand and f.name not in features
                                             for flag in f.compiler_flags}
    if emulated:
        unused |= {flag for name in EMULATED_FEATURES for flag in FEATURES[name].compiler_flags}
    flags = tuple(f for f in get_isa(isa_name).toolchain.cflags if not f.startswith("-O") and f not in unused)
    flags += ("-O3",)
    if features is not None and EMULATED_FEATURES & set(features):
        flags += (f"-DQSYNTH_AMX_EXPECT_EMULATED={int(emulated)}",)
    if compiler == "clang" and isa_name == "neon":
        flags = ("--target=aarch64-linux-gnu",) + flags
    return flags


def compiler_command(isa_name: str, compiler: str, features=None, emulated: bool = False) -> list[str]:
    cc = get_isa(isa_name).toolchain.cc if compiler == "gcc" else "clang"
    return [cc, *compile_flags(isa_name, compiler, features, emulated)]


def build(source: str, isa_name: str, compiler: str, features=None, emulated: bool = False) -> Path:
    """Compile ``source`` into an executable (warnings are errors; ``features`` and ``emulated`` as
    for ``compile_flags``), cached by content under the qsynth build directory."""
    cmd = compiler_command(isa_name, compiler, features, emulated) + ["-Wall", "-Werror"]
    return cached_compile(cmd, source, f"kernel-{isa_name}-{compiler}-{{}}")


def cached_compile(cmd: list[str], source: str, name: str) -> Path:
    """``cmd`` run on ``source`` once per content: the output is ``name`` (``{}`` the content key) in the
    build directory, with the digest it was written with checked before it is returned."""
    output = check.build_folder() / name.format(hashlib.sha256((source + " ".join(cmd)).encode()).hexdigest()[:20])
    return cached_build(output, lambda path: _run_compiler(cmd, source, path), "build directory")


def _run_compiler(cmd: list[str], source: str, output: Path) -> None:
    src = output.with_name("kernel.c")
    src.write_text(source)
    try:
        proc = subprocess.run([*cmd, "-o", str(output), str(src)], capture_output=True, text=True)
    except FileNotFoundError as e:
        raise ToolchainError(f"compiler {cmd[0]} not found: {e}") from e
    if proc.returncode != 0:
        raise ToolchainError(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
