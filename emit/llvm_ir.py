"""A kernel as LLVM IR, the form TVM's ``pragma_import_llvm`` links into an operator."""
from __future__ import annotations

from emit.library import extern_source
from emit.model import kernel_model
from emit.toolchain import cached_compile, compiler_command


def emit_llvm_ir(entry: dict) -> str:
    """``clang -S -emit-llvm`` of the kernel with its extern wrapper ``qs_<name>_extern`` (a
    ``static inline`` function alone is dropped from the module), for TVM's ``pragma_import_llvm``.
    x86 kernels target the host, NEON kernels ``aarch64-linux-gnu``. Cached by content under the
    qsynth build directory, as ``toolchain.build`` is: every operator of a model asks for its tiles' IR."""
    m = kernel_model(entry)
    cmd = [*compiler_command(m["isa"].name, "clang", m["features"]), "-S", "-emit-llvm"]
    return cached_compile(cmd, extern_source(m), f"kernel-{m['isa'].name}-{{}}.ll").read_text()
