"""Emission: each cached, proved kernel as a ``static inline`` C function of intrinsics, the compiles
that build it, and the LLVM IR TVM links. The program is already proved equal to its spec on
registers; emission only moves registers between memory and the program and spells each instruction.

The modules, each building on those before it:

* ``convention``: the calling convention, in words and as data (``layout``), and the kernels' names;
* ``amx_runtime``: the AMX run time in every AMX header (permission, and the plain-C emulation of the
  tile instructions where the build lacks AMX), and the choice of a native or emulated build;
* ``c_vectors``: the C of vector registers the ISA tables do not spell (loads, stores, casts, sums);
* ``schedule``: the live instructions and the order they are written in;
* ``steps``, ``amx_tiles``: a program as C statements, on vector registers or AMX tile registers;
* ``model``: everything the templates render for one entry (``kernel_model``);
* ``toolchain``: each kernel's compiler flags, and compiles cached by content;
* ``library``: headers, test drivers and the library directory (``emit_library``);
* ``llvm_ir``: a kernel as LLVM IR for TVM;
* ``harness``: the check that every compiled kernel computes its spec on the machine.
"""


class EmitError(ValueError):
    """A cache entry cannot be turned into C (ill-typed program, unknown layout…)."""
