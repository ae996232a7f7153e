"""TensorIntrins made from the kernel cache: the proved int8 tiles of an ISA, each tensorizing a
GEMM's whole K loop (which one an operator takes: selection.py).

The description is the tile's mathematics read off its ``Int8Spec`` (``C[i][j] += A[i][t] * B[j][t]``
over ``mr x nr`` and ``kblocks`` k blocks, in the spec's element types); the implementation is a
``T.call_extern`` of the emitted ``_kloop`` (emit/), which keeps the C tile in registers
over every k block (a loop of single-block calls would store it after every block: a third of the
speed), and whose LLVM IR (clang -O3 with the ISA's flags) the schedule imports with
``pragma_import_llvm`` so that LLVM inlines it. One intrinsic per (tile, kblocks), registered when a
schedule first asks for it (``Kernel.loop_intrin``).

Memory image shared by the ``k4`` and ``k4b`` layouts (emit/): A is ``kblocks`` blocks of
``mr`` rows of ``k`` bytes (row i of block kb at ``a + kb*a_block + i*a_stride``; a GEMM packs A
row-major, so ``a_block = k`` and ``a_stride`` is the row's length); B is ``kblocks*k/4`` rows of ``nr*4`` bytes (for each column the four bytes of one k group;
int16 elements (w16): k groups of two, each 4 bytes, and every offset and stride in TIR's elements is twice
as many bytes in the kernel's arguments),
row g at ``b + g*b_stride``; C is ``mr`` rows of ``nr`` int32. The AMX ``tile`` layout has the same
image (each 16-row tile loaded with its stride), so its tiles tensorize the same loops; the function
they call is ``amx_runtime``'s wrapper around the ``_kloop``, which keeps the run-time contract. The
``rows`` layout (B row j = column j) and int16 elements are not registered.
"""
from __future__ import annotations

import functools
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tvm import s_tir
from tvm.script import tirx as T

from synth import cache, trust
from emit.convention import function_name
from emit.llvm_ir import emit_llvm_ir
from emit.model import kernel_features
from synth.kernel import spec_from_key
from synth.int8_spec import Int8Spec
from tvm_integration.kernels import amx_runtime
from tvm_integration.kernels.short_stack import short_stack

log = logging.getLogger(__name__)

# Element types of A and B per Int8Spec.types. u7s8 is u8 data with the precondition A < 128, u8r7 s8
# weights in [-64, 64], s8s7 s8 data with B > -128, w16 8-bit data of either sign widened to int16.
DTYPES = {"u8s8": ("uint8", "int8"), "u7s8": ("uint8", "int8"), "u8r7": ("uint8", "int8"), "s8s8": ("int8", "int8"),
          "s8s7": ("int8", "int8"), "u8u8": ("uint8", "uint8"), "w16": ("int16", "int16"), "s16": ("int16", "int16")}
K4_LAYOUTS = ("k4", "k4b", "tile")
_REGISTERED: set[str] = set()     # TensorIntrin names registered in this process


@dataclass(frozen=True)
class Kernel:
    """A proved tile: its name (``intrin``, the prefix of its TensorIntrins' names), its spec, the LLVM
    IR that defines ``function`` (its ``_kloop``), and the CPU features (``isa_specs.host`` names) its
    instructions need."""
    intrin: str
    spec: Int8Spec
    function: str
    llvm_ir: str
    cache_key: str
    features: tuple[str, ...]
    emulated: bool = False           # AMX tiles on the plain-C emulation (amx_runtime): runs on any x86 host

    def loop_intrin(self, kblocks: int) -> str:
        """The TensorIntrin of ``kblocks`` k blocks in one ``_kloop`` call (registered on first use)."""
        name = f"{self.intrin}_x{kblocks}"
        if name not in _REGISTERED:
            s_tir.TensorIntrin.register(name, *loop_functions(self.spec, self.function, kblocks), override=True)
            _REGISTERED.add(name)
        return name

    def product_intrin(self, kblocks: int, prefetch: "Prefetch | None" = None) -> str:
        """The TensorIntrin of a whole dot product, C = A·B over ``kblocks`` k blocks in one ``_kruns``
        call from zeroed tiles (``product_functions``; registered on first use)."""
        name = f"{self.intrin}_x{kblocks}_product{prefetch.suffix() if prefetch else ''}"
        if name not in _REGISTERED:
            s_tir.TensorIntrin.register(name, *product_functions(self.spec, self.runs_function, kblocks, prefetch),
                                        override=True)
            _REGISTERED.add(name)
        return name

    def direct_intrin(self, kblocks: int, row_step: int, runs: "Runs", init: bool = True,
                      prefetch: "Prefetch | None" = None) -> str:
        """The TensorIntrin of ``runs`` window rows of ``kblocks`` k blocks each, whose A rows start
        ``row_step`` bytes apart in the padded input (``direct_functions``; registered on first use)."""
        name = (f"{self.intrin}_x{kblocks}_step{row_step}_{runs.count}x{runs.planes}_{runs.plane_step}_{runs.run_step}"
                + ("" if init else "_update") + (prefetch.suffix() if prefetch else ""))
        if name not in _REGISTERED:
            s_tir.TensorIntrin.register(name, *direct_functions(self.spec, self.runs_function, kblocks, row_step, runs,
                                                                init, prefetch), override=True)
            _REGISTERED.add(name)
        return name

    @property
    def runs_function(self) -> str:
        """The kernel's ``_kruns`` entry point, beside ``function``'s ``_kloop`` (the same suffix)."""
        return self.function.replace("_kloop_", "_kruns_")

    @property
    def a_dtype(self) -> str:
        return DTYPES[self.spec.types][0]

    @property
    def b_range(self) -> tuple[int, int]:
        """The B elements the tile is proved for: [-127, 127] for the s8s7 tiles, whose pairs of products
        cannot saturate there; a byte's range for byte tiles; [-256, 255] for the int16 ones (w16): 8-bit
        data minus a zero point."""
        r = next(r for n, r in zip(self.spec.input_names, self.spec.lane_ranges()) if n.startswith("b"))
        return r.lo, r.hi

    def admits(self, weights: np.ndarray | None) -> bool:
        """Whether the tile's precondition holds for ``weights`` (B known at compile time; None: B is
        computed at run time, so only a tile defined on every int8 B). A layer it does not admit runs
        the tile on its weights clamped to ``b_range`` and adds the rest apart (packing.clamped)."""
        lo, hi = self.b_range
        if weights is None or weights.size == 0:
            return weights is not None or (lo <= -128 and hi >= 127)
        return lo <= int(weights.min()) and int(weights.max()) <= hi

    @property
    def b_dtype(self) -> str:
        return DTYPES[self.spec.types][1]

    @property
    def group(self) -> int:
        """B's k group: the elements of one column in a 32-bit lane (packing.pack_weights)."""
        return self.spec.group


def proved_entries(isa: str, root: Path = cache.ROOT) -> list[dict]:
    """The int8 entries of ``isa`` that this machine has re-proved (``synth.trust``): the one place
    the cache is read. An odd file or an entry failing its hash (``cache.readable``), not re-proving
    (tampered, stale ISA-spec or engine version), or stored as not proved is skipped with a warning,
    each once per process."""
    chosen = [path for path, entry in cache.readable(root)
              if entry["spec"].get("kind") == "int8" and entry["spec"].get("isa") == isa]
    entries, refused = trust.load_all(chosen)
    for line in trust.unreported(refused):
        log.warning("not registered: %s", line)
    for entry in entries:
        if not entry["proof"]["proved"]:
            log.warning("not registered: %s is stored as not proved", entry["name"])
    return [e for e in entries if e["proof"]["proved"]]


@short_stack
def loop_functions(spec: Int8Spec, function: str, kblocks: int):
    """(description, implementation) of ``kblocks`` consecutive k blocks of a k4-image tile, A given as
    ``mr`` rows of the whole depth (row i at ``A.strides[0]`` bytes from row i - 1, as a GEMM packs
    it: one contiguous copy per input run); the implementation calls the kernel's ``_kloop``
    ``function`` with k blocks ``k`` bytes apart."""
    mr, nr, k, q, e = spec.mr, spec.nr, spec.k, spec.group, spec.elem_bits // 8
    depth = kblocks * k
    a_dtype, b_dtype = DTYPES[spec.types]

    @T.prim_func(s_tir=True)
    def desc(A: T.Buffer((mr, depth), a_dtype, offset_factor=1, strides=[T.int32(), 1]),
             B: T.Buffer((depth // q, nr, q), b_dtype, offset_factor=1, strides=[T.int32(), q, 1]),
             C: T.Buffer((mr, nr), "int32", offset_factor=1, strides=[T.int32(), 1])) -> None:
        with T.sblock("root"):
            T.reads(C[0:mr, 0:nr], A[0:mr, 0:depth], B[0:depth // q, 0:nr, 0:q])
            T.writes(C[0:mr, 0:nr])
            for i, j, t in T.grid(mr, nr, depth):
                with T.sblock("update"):
                    vi, vj, vt = T.axis.remap("SSR", [i, j, t])
                    C[vi, vj] = C[vi, vj] + T.Cast("int32", A[vi, vt]) * T.Cast("int32", B[vt // q, vj, vt % q])

    @T.prim_func(s_tir=True)
    def impl(A: T.Buffer((mr, depth), a_dtype, offset_factor=1, strides=[T.int32(), 1]),
             B: T.Buffer((depth // q, nr, q), b_dtype, offset_factor=1, strides=[T.int32(), q, 1]),
             C: T.Buffer((mr, nr), "int32", offset_factor=1, strides=[T.int32(), 1])) -> None:
        with T.sblock("root"):
            T.reads(C[0:mr, 0:nr], A[0:mr, 0:depth], B[0:depth // q, 0:nr, 0:q])
            T.writes(C[0:mr, 0:nr])
            T.evaluate(T.call_extern("int32", function, A.access_ptr("r"), A.strides[0] * e, k * e,
                                     B.access_ptr("r"), B.strides[0] * e, C.access_ptr("rw"), C.strides[0], kblocks))

    return desc, impl


@dataclass(frozen=True)
class Prefetch:
    """What a ``_kruns`` call brings into L2 besides its own work, where ``parts`` consecutive calls of a
    thread share one B (a column tile's weights, or one window row of them, over ``parts`` row tiles:
    the column-tiles-outer orders): a slice of the B that follows it in the packed weights, the one the
    thread takes next, so that the ``parts`` calls fetch it between them at the pace they compute.
    Which slice: the call's row tile, ``operand``'s offset (``"A"`` or ``"C"``, whichever the schedule
    keeps whole) over ``unit`` elements (None: ``mr`` rows of its stride), modulo ``parts``. Without it
    the first row tile of each column tile waited for its weights from L3 or memory, where the deep
    layers' weights come from inside a model (ResNet-18's 7x7 layers, 2.4 MB each), at a single core's
    12 GB/s. AMX host, the VNNI 7x48 tile, CPU time, one thread, median of 30 calls after 64 MB passed
    through the caches, without -> with (two runs): C10 336 / 297 -> 231 / 222 us, C12 548 / 507 -> 466 /
    432. Whole models side by side (scripts/ab_models.py): ResNet-18 built for VNNI 7.12 -> 6.48 ms
    against OpenVINO held to VNNI's 7.20, on AMX 2.50 -> 2.44; MobileNetV2 2.53 -> 2.45 and 1.88 -> 1.83."""
    parts: int
    operand: str
    unit: int | None = None

    def suffix(self) -> str:
        return f"_next{self.parts}{self.operand}{self.unit or ''}"

    def part(self, operand, mr: int):
        unit = self.unit if self.unit is not None else mr * operand.strides[0]
        return T.truncmod(T.truncdiv(operand.elem_offset, unit), self.parts)


def next_arguments(prefetch: Prefetch | None, A, C, mr: int) -> list:
    """``_kruns``'s ``next_part`` and ``next_parts``: (0, 0) without a prefetch."""
    if prefetch is None:
        return [0, 0]
    return [prefetch.part(A if prefetch.operand == "A" else C, mr), prefetch.parts]


@short_stack
def product_functions(spec: Int8Spec, function: str, kblocks: int, prefetch: Prefetch | None = None):
    """(description, implementation) as ``loop_functions``'s over the whole dot product, C = A·B (the
    block's init and its update): the kernel's ``_kruns``, one run, starts from zeroed tiles, so C is
    neither zeroed in memory nor loaded (a 1x1 layer's few k blocks waited for those stores)."""
    mr, nr, k, q, e = spec.mr, spec.nr, spec.k, spec.group, spec.elem_bits // 8
    depth = kblocks * k
    a_dtype, b_dtype = DTYPES[spec.types]

    @T.prim_func(s_tir=True)
    def desc(A: T.Buffer((mr, depth), a_dtype, offset_factor=1, strides=[T.int32(), 1]),
             B: T.Buffer((depth // q, nr, q), b_dtype, offset_factor=1, strides=[T.int32(), q, 1]),
             C: T.Buffer((mr, nr), "int32", offset_factor=1, strides=[T.int32(), 1])) -> None:
        with T.sblock("root"):
            T.reads(A[0:mr, 0:depth], B[0:depth // q, 0:nr, 0:q])
            T.writes(C[0:mr, 0:nr])
            for i, j, t in T.grid(mr, nr, depth):
                with T.sblock("update"):
                    vi, vj, vt = T.axis.remap("SSR", [i, j, t])
                    T.reads(C[vi, vj], A[vi, vt], B[vt // q, vj, vt % q])
                    T.writes(C[vi, vj])
                    with T.init():
                        C[vi, vj] = 0
                    C[vi, vj] = C[vi, vj] + T.Cast("int32", A[vi, vt]) * T.Cast("int32", B[vt // q, vj, vt % q])

    @T.prim_func(s_tir=True)
    def impl(A: T.Buffer((mr, depth), a_dtype, offset_factor=1, strides=[T.int32(), 1]),
             B: T.Buffer((depth // q, nr, q), b_dtype, offset_factor=1, strides=[T.int32(), q, 1]),
             C: T.Buffer((mr, nr), "int32", offset_factor=1, strides=[T.int32(), 1])) -> None:
        with T.sblock("root"):
            T.reads(A[0:mr, 0:depth], B[0:depth // q, 0:nr, 0:q])
            T.writes(C[0:mr, 0:nr])
            T.evaluate(T.call_extern("int32", function, A.access_ptr("r"), A.strides[0] * e, k * e, 1, 1, T.int64(0),
                                     T.int64(0), B.access_ptr("r"), B.strides[0] * e, C.access_ptr("w"), C.strides[0],
                                     kblocks, 0, *next_arguments(prefetch, A, C, mr)))

    return desc, impl


@dataclass(frozen=True)
class Runs:
    """Where a convolution's window rows lie in the padded input: run ``r`` (window row ``kh``) at byte
    ``(r % planes) * plane_step + (r // planes) * run_step`` (ops/direct.py's planes of every
    ``planes``-th input row)."""
    count: int
    planes: int
    plane_step: int
    run_step: int

    def offset(self, r):
        """Run ``r``'s offset, as TIR when ``r`` is a variable (one plane: no division)."""
        if self.planes == 1:
            return r * self.run_step
        return r % self.planes * self.plane_step + r // self.planes * self.run_step


@short_stack
def direct_functions(spec: Int8Spec, function: str, kblocks: int, row_step: int, runs: Runs, init: bool = True,
                     prefetch: Prefetch | None = None):
    """(description, implementation) of a whole dot product, C = A·B (the block's init and its update),
    over ``runs`` window rows of ``kblocks`` k blocks each, A one run of bytes whose row i starts at
    ``i * row_step`` (rows may overlap) from the window row's offset: a convolution's window rows for
    ``mr`` consecutive output pixels read straight from the padded NHWC input (ops/direct.py), the B
    blocks consecutive. The kernel's ``_kruns``, given ``row_step`` as its A row stride, starts from
    zeroed tiles (C is not read: no zeroing in memory, whose stores a tile load right after waits
    for) and keeps them through all the runs. ``init=False``: C += A·B, C loaded first (one window row
    of a dot product that ops/direct.py's ``run_by_run`` splits by window row)."""
    mr, nr, k, q, e = spec.mr, spec.nr, spec.k, spec.group, spec.elem_bits // 8
    depth = kblocks * k
    # TVM bounds the offsets' two terms apart, and the declared region must equal its bound
    last = (min(runs.planes, runs.count) - 1) * runs.plane_step + (runs.count - 1) // runs.planes * runs.run_step
    span = last + (mr - 1) * row_step + depth
    a_dtype, b_dtype = DTYPES[spec.types]
    rows = runs.count * depth // q

    @T.macro(hygienic=False)
    def update(vi, vj, a, g, lane):
        """One product into C[vi, vj]: A's byte ``a`` times B's row ``g``, lane ``lane``."""
        T.reads(C[vi, vj], A[a], B[g, vj, lane])
        T.writes(C[vi, vj])
        if init:
            with T.init():
                C[vi, vj] = 0
        C[vi, vj] = C[vi, vj] + T.Cast("int32", A[a]) * T.Cast("int32", B[g, vj, lane])

    @T.prim_func(s_tir=True)
    def desc(A: T.Buffer((span,), a_dtype, offset_factor=1),
             B: T.Buffer((rows, nr, q), b_dtype, offset_factor=1, strides=[T.int32(), q, 1]),
             C: T.Buffer((mr, nr), "int32", offset_factor=1, strides=[T.int32(), 1])) -> None:
        with T.sblock("root"):
            if init:
                T.reads(A[0:span], B[0:rows, 0:nr, 0:q])
            else:
                T.reads(C[0:mr, 0:nr], A[0:span], B[0:rows, 0:nr, 0:q])
            T.writes(C[0:mr, 0:nr])
            if runs.count == 1:            # one run, as a k chunk of a longer dot product: no run loop to match
                for i, j, t in T.grid(mr, nr, depth):
                    with T.sblock("update"):
                        vi, vj, vt = T.axis.remap("SSR", [i, j, t])
                        update(vi, vj, vi * row_step + vt, vt // q, vt % q)
            else:
                for r, i, j, t in T.grid(runs.count, mr, nr, depth):
                    with T.sblock("update"):
                        vi, vj, vr, vt = T.axis.remap("SSRR", [i, j, r, t])
                        update(vi, vj, runs.offset(vr) + vi * row_step + vt, vr * (depth // q) + vt // q, vt % q)

    @T.prim_func(s_tir=True)
    def impl(A: T.Buffer((span,), a_dtype, offset_factor=1),
             B: T.Buffer((rows, nr, q), b_dtype, offset_factor=1, strides=[T.int32(), q, 1]),
             C: T.Buffer((mr, nr), "int32", offset_factor=1, strides=[T.int32(), 1])) -> None:
        with T.sblock("root"):
            if init:
                T.reads(A[0:span], B[0:rows, 0:nr, 0:q])
            else:
                T.reads(C[0:mr, 0:nr], A[0:span], B[0:rows, 0:nr, 0:q])
            T.writes(C[0:mr, 0:nr])
            T.evaluate(T.call_extern("int32", function, A.access_ptr("r"), row_step * e, k * e, runs.count, runs.planes,
                                     T.int64(runs.plane_step * e), T.int64(runs.run_step * e), B.access_ptr("r"),
                                     B.strides[0] * e, C.access_ptr("w" if init else "rw"), C.strides[0], kblocks,
                                     0 if init else 1, *next_arguments(prefetch, A, C, mr)))

    return desc, impl


@functools.cache
def proved_kernels(isa: str, root: Path = cache.ROOT) -> tuple[Kernel, ...]:
    """The proved int8 k4-image tiles of ``isa``, named ``qsynth_<kernel name>``, ready to tensorize
    (``Kernel.loop_intrin``): the cache at ``root`` read and re-proved once per process. AMX tiles
    (layout ``tile``, the same memory image) call ``amx_runtime``'s wrapper of their ``_kloop``, which
    requests the tile data permission and loads the tile configuration where the thread lacks it."""
    kernels = []
    for entry in proved_entries(isa, root):
        spec = spec_from_key(entry["spec"])
        if spec.layout not in K4_LAYOUTS or spec.types not in DTYPES:
            continue
        name = "qsynth_" + entry["name"]
        if any(k.intrin == name for k in kernels):
            log.warning("not registered: a second entry for %s (%s)", name, entry["cache_key"])
            continue
        emulated = spec.layout == "tile" and amx_runtime.emulated(entry)
        if spec.layout == "tile":
            function, ir = amx_runtime.kloop_function(entry), amx_runtime.llvm_ir(entry, emulated)
        else:
            function, ir = function_name(entry) + "_kloop_extern", emit_llvm_ir(entry)
        kernels.append(Kernel(name, spec, function, ir, entry["cache_key"], tuple(kernel_features(entry)),
                              emulated))
    return tuple(kernels)
