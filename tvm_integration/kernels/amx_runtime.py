"""The run-time contract of AMX tiles inside TVM operators, kept by the kernel call itself.

A tile instruction needs (1) the process's permission to use tile data, ``arch_prctl(
ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)``, and (2) the tile configuration loaded in the executing
thread. TVM runs a parallel loop's iterations on its own pool threads, and other code in the same
thread (oneDNN, through onnxruntime or OpenVINO) loads its own configuration or releases the tiles
(``tilerelease``) between two of our calls. So the function an operator calls, ``qs_<name>_kloop_amx``
(``qs_<name>_kruns_amx``), wraps the emitted ``_kloop`` (``_kruns``): it requests the permission (the
header's ``qsynth_amx_init``, emit/templates/qsynth_amx.h: one system call per process, then a flag), reads the thread's
configuration back (``sttilecfg``), compares it with the header's ``qs_<name>_tile_cfg`` and loads
that (``qs_<name>_tile_config``) only where it differs. Measured on the AMX host (1M calls each): ``ldtilecfg`` 85-90 ns, which a call per kernel call
would add to a 400 ns 32x32x1152 tile; ``sttilecfg`` and the comparison under 5 ns; the ``arch_prctl``
call 145 ns, hence the flag. The tiles are not released after the operator: nothing runs at the end
of a TVM parallel task, and a release per call would reload the configuration every call.

Python side (``permission``): selection asks for the same permission before it builds AMX code for
this host, so a kernel that refuses it leaves the operator on VNNI with one warning, never a SIGILL.

Emulated (a host without AMX, or ``QSYNTH_AMX_EMULATE=1``: emit/amx_runtime.py): the wrapper's IR is
the header's plain-C tile instructions, so every AMX operator runs, slowly, on any x86 host and is
tested there. Their per-thread tile state cannot live in TVM's JIT-compiled module (its loader has no
thread-local storage: a ``_Thread_local`` definition failed to link, R_X86_64_TPOFF32), so the IR reaches
it through ``qsynth_amx_state()``, defined once by a small shared library the process loads with its
symbols global (``load_emulation_state``).
"""
from __future__ import annotations

import ctypes
import functools
import os

from emit import amx_runtime as emitted_runtime
from emit.convention import function_name
from emit.library import extern_source
from emit.model import kernel_model
from emit.toolchain import cached_compile, compiler_command

SYS_ARCH_PRCTL = 158                     # x86-64 syscall number
ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA = 0x1023, 18

_WRAPPER = """
/* qsynth run-time contract in a TVM operator (tvm_integration/kernels/amx_runtime.py) */
static inline void {f}_keep_contract(void) {{
  uint8_t current[64] __attribute__((aligned(64)));
  if (qsynth_amx_init() != 0) {{
    fputs("qsynth: the kernel refused AMX tile data (arch_prctl ARCH_REQ_XCOMP_PERM)\\n", stderr);
    abort();
  }}
  _tile_storeconfig(current);
  if (memcmp(current, {f}_tile_cfg, sizeof current) != 0) {f}_tile_config();
}}
void {f}_kloop_amx(const void *a, int a_stride, int a_block, const void *b, int b_stride, int32_t *c, int c_stride,
                   int kblocks);
void {f}_kloop_amx(const void *a, int a_stride, int a_block, const void *b, int b_stride, int32_t *c, int c_stride,
                   int kblocks) {{
  {f}_keep_contract();
  {f}_kloop(a, a_stride, a_block, b, b_stride, c, c_stride, kblocks);
}}
void {f}_kruns_amx(const void *a, int a_stride, int a_block, int runs, int planes, ptrdiff_t plane_step,
                   ptrdiff_t run_step, const void *b, int b_stride, int32_t *c, int c_stride, int kblocks, int accumulate,
                   int next_part, int next_parts);
void {f}_kruns_amx(const void *a, int a_stride, int a_block, int runs, int planes, ptrdiff_t plane_step,
                   ptrdiff_t run_step, const void *b, int b_stride, int32_t *c, int c_stride, int kblocks, int accumulate,
                   int next_part, int next_parts) {{
  {f}_keep_contract();
  {f}_kruns(a, a_stride, a_block, runs, planes, plane_step, run_step, b, b_stride, c, c_stride, kblocks, accumulate,
            next_part, next_parts);
}}
"""


def kloop_function(entry: dict) -> str:
    return function_name(entry) + "_kloop_amx"


def kruns_function(entry: dict) -> str:
    return function_name(entry) + "_kruns_amx"


def source(entry: dict) -> str:
    """The kernel's header with its extern wrappers and the contract-keeping ``_kloop_amx``."""
    m = kernel_model(entry)
    return extern_source(m) + "#include <stdlib.h>\n" + _WRAPPER.format(f=m["function"])


def emulated(entry: dict) -> bool:
    """Whether this process builds the entry's operators on the emulation (emit/amx_runtime.py)."""
    return emitted_runtime.emulated(kernel_model(entry)["features"])


def llvm_ir(entry: dict, emulate: bool) -> str:
    """``source`` as LLVM IR for ``pragma_import_llvm`` (clang -O3 with the kernel's features, or
    without AMX's and with the tile state outside the module: ``emulate``), compiled once per content
    as emit.llvm_ir does."""
    m = kernel_model(entry)
    # -fPIC: the header's permission flag is a global, and a model saved as a shared library
    # (CompiledModel.save) cannot link the PC-relative access a non-PIC compile gives it
    cmd = [*compiler_command(m["isa"].name, "clang", m["features"], emulate), "-fPIC", "-S", "-emit-llvm"]
    if emulate:
        load_emulation_state()
        cmd.append("-DQSYNTH_AMX_STATE_EXTERN")
    return cached_compile(cmd, source(entry), "kernel-amx-runtime-{}.ll").read_text()


@functools.cache
def load_emulation_state() -> None:
    """The emulation's per-thread tile state in a shared library, loaded once with its symbols global,
    so that TVM's JIT (and a saved model's library) resolves ``qsynth_amx_state`` to it."""
    code = emitted_runtime.RUNTIME + "struct qsynth_amx_tiles *qsynth_amx_state(void) { return &qsynth_amx_tiles; }\n"
    cmd = ["gcc", "-O2", "-fPIC", "-shared", "-Wall", "-Werror", "-DQSYNTH_AMX_EXPECT_EMULATED=1"]
    ctypes.CDLL(str(cached_compile(cmd, code, "amx-emulation-state-{}.so")), mode=os.RTLD_GLOBAL)


@functools.cache
def permission() -> str | None:
    """None once this process may use tile data (requested here, once), else why not."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.syscall(SYS_ARCH_PRCTL, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0:
            return None
        return f"arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) failed: errno {ctypes.get_errno()}"
    except (OSError, AttributeError) as e:
        return f"arch_prctl unavailable: {e}"
