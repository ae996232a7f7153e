"""The cache's proved NEON int8 tiles as TVM uses them, and which one a core gets (issue 34 step 1).

Three families, chosen by what the target core's LLVM model has (``tile_for``); v8.0 cores have two
tiles, chosen by the layer's weights:

* ``i8mm`` (Neoverse-N2, Cortex-A710, ...): ``int8_u8s8_k4_4x4x16_neon``, sudot by element: u8
  activations times s8 weights, as the x86 VNNI tiles;
* ``dotprod`` without i8mm (Cortex-A55, A76, Neoverse-N1): ``int8_s8s8_k4_4x4x16_neon``, sdot by
  element: u8 activations enter shifted by -128 (``x ^ 0x80``), and ``+128 * sum_k w`` per column is
  added to the bias at compile time;
* v8.0 (Cortex-A53, A72): ``int8_u8u8_acc_4x4x8_neon``, umull + uadalp into four int32 lanes per
  output, kept over the whole K loop and summed across once at its end (as MLAS's v8.0 kernels keep
  their accumulators; the RFC's rows tile summed across with addp at every k block: 56 against 32
  NEON instructions per 128 MACs): both operands unsigned, so the weights enter as their codes
  ``w + 128`` (u8), and the K loop around the tile (``ACC_KLOOP``) computes ``C += A B + R``, R one
  int32 per row: the operator passes ``-128 * sum_k a`` (``-(128 + z) * sum_k a`` for weights on a
  zero point z), each packed row summed once (ops/neon_gemm.py), not once per column tile;
* v8.0 with every weight in [-127, 127] (``v8s7``; onnxruntime's symmetric quantization):
  ``int8_s8s7_acc_4x4x16_neon``, MLAS's s8 x s8 form: smull and smlal2 add two products into each
  int16 lane (|a b + a' b'| <= 2 * 128 * 127 < 2^15, the tile's B precondition), sadalp widens pairs
  into the same four int32 lanes per output: 48 NEON instructions per 256 MACs where the u8 x u8 tile
  takes 64. The activations enter shifted by -128 as on the sdot tile; no R.

The k4 tiles are ``kernels.int8.Kernel`` (their ``_kloop``, the same memory image as x86's: A rows of
the whole depth, B as ``k/4`` rows of ``nr*4`` bytes); their LLVM IR is re-declared for exactly the
features they need (``bitserial.kernel_ir``) so that it inlines into a module for an older core. The
acc tile has no ``_kloop`` in emit/: ``AccTile`` appends one (``ACC_KLOOP``) that keeps the tile's
lanes in a local array across the K blocks (registers, after inlining) and adds their sums (with R
on the u8 x u8 tile) to C once (that wrapper is tested under qemu, not proved; each call of the tile
in it is). Its B image is ``k/8`` (s8s7: ``k/16``) blocks of ``nr`` rows of k bytes: for each block,
column j's k weights.
"""
from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass

import numpy as np
import tvm
from tvm import s_tir
from tvm.script import tirx as T
from tvm.target import codegen

from emit.convention import function_name
from emit.library import extern_source
from emit.model import kernel_model
from emit.toolchain import cached_compile, compiler_command
from synth.kernel import spec_from_key
from synth.int8_spec import Int8Spec
from tvm_integration.kernels import int8
from tvm_integration.kernels.bitserial import kernel_ir
from tvm_integration.kernels.packing import round_up
from tvm_integration.kernels.selection import SelectionError, aarch64_target
from tvm_integration.kernels.short_stack import short_stack

# family -> (cache kernel name, the activation offset into the tile's A type, weights offset to u8)
FAMILIES = {
    "i8mm": ("int8_u8s8_k4_4x4x16_neon", 0, False),
    "dotprod": ("int8_s8s8_k4_4x4x16_neon", -128, False),
    "v8": ("int8_u8u8_acc_4x4x8_neon", 0, True),
    "v8s7": ("int8_s8s7_acc_4x4x16_neon", -128, False),
}
WEIGHT_SHIFT = 128      # s8 weights -> u8 codes for the u8 x u8 tiles

ACC_KLOOP = """
/* qsynth (tvm_integration/kernels/neon_int8.py): C += A B over kblocks k blocks with the acc tile
 * (on the u8 x u8 tile C += A B + R, R one int32 per row: B holds the weights' u8 codes w + 128, R is
 * -128 times A's row sums): the tile's four int32 lanes per output kept in a local array (registers
 * once inlined) over the whole K, summed across by pairwise adds (addp, four outputs a vector) and added
 * to C once at the end. Block kb: A at a + kb*K (rows a_stride apart), B at b + kb*b_block (column j's
 * K bytes at + j*K). */
void {fn}_kloop_acc(const void *a, int a_stride, const void *b, int b_block, int32_t *c, int c_stride,
                    int kblocks{r_param});
void {fn}_kloop_acc(const void *a, int a_stride, const void *b, int b_block, int32_t *c, int c_stride,
                    int kblocks{r_param}) {{
  int32_t acc[{mr} * {nr} * 4] = {{0}};
  const uint8_t *rows = (const uint8_t *)a;
{unroll}  for (int kb = 0; kb < kblocks; ++kb)
    {fn}(rows + (ptrdiff_t)kb * {k}, a_stride, (const uint8_t *)b + (ptrdiff_t)kb * b_block, {k}, acc, {nr} * 4);
  for (int i = 0; i < {mr}; ++i)
    for (int j = 0; j < {nr}; j += 4) {{
      const int32_t *t = acc + (i * {nr} + j) * 4;
      int32x4_t sums = vpaddq_s32(vpaddq_s32(vld1q_s32(t), vld1q_s32(t + 4)), vpaddq_s32(vld1q_s32(t + 8), vld1q_s32(t + 12)));
      vst1q_s32(c + i * c_stride + j, vaddq_s32(vld1q_s32(c + i * c_stride + j), sums{r_sum}));
    }}
}}
"""
ACC_ROW_SUMS = {"r_sum": " + vdupq_n_s32(r[i])", "r_param": ", const int32_t *r"}      # the u8 x u8 tile's R
# The s8 x s7 tile's K loop is kept rolled: unrolled (LLVM took 3 blocks an iteration), its 16 int16
# products of each block stay live across blocks and spill; ResNet-18 C6 on Cortex-A53, llvm-mca cycles
# per MAC of the operator: 0.41 unrolled, 0.29 rolled. The u8 x u8 tile's is left to LLVM (rolled: 0.44
# against 0.38).
ROLLED = "#pragma clang loop unroll(disable)\n"


@dataclass(frozen=True)
class AccTile(int8.Kernel):
    """The acc-layout tile with its K loop (``ACC_KLOOP``: ``C += A B + R`` on the u8 x u8 tile, B the
    weights' u8 codes; ``C += A B`` on the s8 x s7 one), as an ``int8.Kernel`` whose K-loop
    TensorIntrin is ``acc_functions``'."""

    def loop_intrin(self, kblocks: int) -> str:
        name = f"{self.intrin}_x{kblocks}"
        if name not in int8._REGISTERED:
            s_tir.TensorIntrin.register(name, *acc_functions(self.spec, self.function, kblocks,
                                                             adds_row_sums(self.spec)), override=True)
            int8._REGISTERED.add(name)
        return name


def group(kernel) -> int:
    """Bytes of one column per B row of the kernel's image: 4 (k4: sdot's groups) or k (acc)."""
    return kernel.spec.k if kernel.spec.layout == "acc" else 4


def adds_row_sums(spec: Int8Spec) -> bool:
    """Whether an acc tile's K loop adds R: unsigned B, the weights entering as their codes w + 128."""
    return not spec.signed[1]


@short_stack
def acc_functions(spec: Int8Spec, function: str, kblocks: int, row_sums: bool):
    """(description, implementation) of ``kblocks`` k blocks of an acc tile's K loop, ``C += A B + R``
    (``row_sums``) or ``C += A B``: A ``mr`` rows of the depth, B ``kblocks`` blocks of ``nr`` rows of
    ``k`` weights (u8 codes on the u8 x u8 tile), R one int32 per row (added at the first k), C
    ``mr x nr`` int32."""
    mr, nr, k = spec.mr, spec.nr, spec.k
    depth = kblocks * k
    a_dtype, b_dtype = int8.DTYPES[spec.types]
    if not row_sums:
        return _acc_functions_without_rows(mr, nr, k, kblocks, a_dtype, b_dtype, function)

    @T.prim_func(s_tir=True)
    def desc(A: T.Buffer((mr, depth), a_dtype, offset_factor=1, strides=[T.int32(), 1]),
             B: T.Buffer((kblocks, nr, k), b_dtype, offset_factor=1, strides=[T.int32(), k, 1]),
             R: T.Buffer((mr,), "int32", offset_factor=1),
             C: T.Buffer((mr, nr), "int32", offset_factor=1, strides=[T.int32(), 1])) -> None:
        with T.sblock("root"):
            T.reads(C[0:mr, 0:nr], A[0:mr, 0:depth], B[0:kblocks, 0:nr, 0:k], R[0:mr])
            T.writes(C[0:mr, 0:nr])
            for i, j, t in T.grid(mr, nr, depth):
                with T.sblock("update"):
                    vi, vj, vt = T.axis.remap("SSR", [i, j, t])
                    C[vi, vj] = C[vi, vj] + (T.Cast("int32", A[vi, vt]) * T.Cast("int32", B[vt // k, vj, vt % k])
                                             + T.if_then_else(vt == 0, R[vi], 0))

    @T.prim_func(s_tir=True)
    def impl(A: T.Buffer((mr, depth), a_dtype, offset_factor=1, strides=[T.int32(), 1]),
             B: T.Buffer((kblocks, nr, k), b_dtype, offset_factor=1, strides=[T.int32(), k, 1]),
             R: T.Buffer((mr,), "int32", offset_factor=1),
             C: T.Buffer((mr, nr), "int32", offset_factor=1, strides=[T.int32(), 1])) -> None:
        with T.sblock("root"):
            T.reads(C[0:mr, 0:nr], A[0:mr, 0:depth], B[0:kblocks, 0:nr, 0:k], R[0:mr])
            T.writes(C[0:mr, 0:nr])
            T.evaluate(T.call_extern("int32", function, A.access_ptr("r"), A.strides[0], B.access_ptr("r"),
                                     B.strides[0], C.access_ptr("rw"), C.strides[0], kblocks, R.access_ptr("r")))

    return desc, impl


def _acc_functions_without_rows(mr: int, nr: int, k: int, kblocks: int, a_dtype: str, b_dtype: str, function: str):
    """acc_functions' ``C += A B`` (no R: the weights enter as they are)."""
    depth = kblocks * k

    @T.prim_func(s_tir=True)
    def desc(A: T.Buffer((mr, depth), a_dtype, offset_factor=1, strides=[T.int32(), 1]),
             B: T.Buffer((kblocks, nr, k), b_dtype, offset_factor=1, strides=[T.int32(), k, 1]),
             C: T.Buffer((mr, nr), "int32", offset_factor=1, strides=[T.int32(), 1])) -> None:
        with T.sblock("root"):
            T.reads(C[0:mr, 0:nr], A[0:mr, 0:depth], B[0:kblocks, 0:nr, 0:k])
            T.writes(C[0:mr, 0:nr])
            for i, j, t in T.grid(mr, nr, depth):
                with T.sblock("update"):
                    vi, vj, vt = T.axis.remap("SSR", [i, j, t])
                    C[vi, vj] = C[vi, vj] + T.Cast("int32", A[vi, vt]) * T.Cast("int32", B[vt // k, vj, vt % k])

    @T.prim_func(s_tir=True)
    def impl(A: T.Buffer((mr, depth), a_dtype, offset_factor=1, strides=[T.int32(), 1]),
             B: T.Buffer((kblocks, nr, k), b_dtype, offset_factor=1, strides=[T.int32(), k, 1]),
             C: T.Buffer((mr, nr), "int32", offset_factor=1, strides=[T.int32(), 1])) -> None:
        with T.sblock("root"):
            T.reads(C[0:mr, 0:nr], A[0:mr, 0:depth], B[0:kblocks, 0:nr, 0:k])
            T.writes(C[0:mr, 0:nr])
            T.evaluate(T.call_extern("int32", function, A.access_ptr("r"), A.strides[0], B.access_ptr("r"),
                                     B.strides[0], C.access_ptr("rw"), C.strides[0], kblocks))

    return desc, impl


@functools.cache
def neon_tiles() -> dict[str, object]:
    """family -> its proved tile (re-proved on this machine by ``int8.proved_entries``), for the
    families whose kernel the cache holds."""
    tiles = {}
    k4 = {k.intrin[len("qsynth_"):]: k for k in int8.proved_kernels("neon")}
    entries = {e["name"]: e for e in int8.proved_entries("neon")}
    for family, (name, _, _) in FAMILIES.items():
        if name in k4:
            kernel = k4[name]
            tiles[family] = dataclasses.replace(kernel, llvm_ir=kernel_ir(kernel.llvm_ir, kernel.features))
        elif name in entries:
            tiles[family] = _acc_tile(entries[name])
    return tiles


@functools.cache
def rolled(kernel: int8.Kernel) -> int8.Kernel:
    """A k4 tile whose K loop LLVM keeps rolled (``llvm.loop.unroll.disable``), under names of its own
    (a module may hold both). Unrolled, a K loop of few blocks inside a loop over column tiles has its
    A operand's lane broadcasts (dup) hoisted out of that loop by LLVM, one register per 4 bytes of the
    row tile: they spill (SqueezeNet's 3x3 16->64 layer at 55x55 on Cortex-A76's N1 model, llvm-mca
    Mcycles, unrolled / rolled: 3.61 / 1.73; 56x56 64->256 1x1 3.10 / 3.11; a K loop under one column
    tile pair, RegNet's grouped 28x28x104, 0.37 / 0.47, stays unrolled: ops/neon_gemm.py)."""
    ir = re.sub(r"@(qs_\w+)", r"@\1_rolled", kernel.llvm_ir)
    disable = max(int(i) for i in re.findall(r"^!(\d+) = ", ir, re.M)) + 1
    ir = re.sub(r"^(!(\d+) = distinct !\{!\2(?:, !\d+)*)\}$", rf"\1, !{disable}}}", ir, flags=re.M)
    return dataclasses.replace(kernel, intrin=kernel.intrin + "_rolled", function=kernel.function + "_rolled",
                               llvm_ir=ir + f'!{disable} = !{{!"llvm.loop.unroll.disable"}}\n')


def _acc_tile(entry: dict) -> AccTile:
    spec = spec_from_key(entry["spec"])
    if spec.nr % 4:
        raise ValueError(f"{entry['name']}: ACC_KLOOP sums four columns a vector, not {spec.nr}")
    m = kernel_model(entry)
    fn = function_name(entry)
    rows = ACC_ROW_SUMS if adds_row_sums(spec) else dict.fromkeys(ACC_ROW_SUMS, "")
    unroll = ROLLED if spec.types == "s8s7" else ""
    source = extern_source(m) + ACC_KLOOP.format(fn=fn, mr=spec.mr, nr=spec.nr, k=spec.k, unroll=unroll, **rows)
    cmd = [*compiler_command("neon", "clang", m["features"]), "-S", "-emit-llvm"]
    ir = cached_compile(cmd, source, "kernel-neon-acc-{}.ll").read_text()
    features = tuple(m["features"])
    return AccTile("qsynth_" + entry["name"], spec, fn + "_kloop_acc", kernel_ir(ir, features), entry["cache_key"],
                   features)


def core_family(mcpu: str | None) -> str:
    """The tile family of a core as LLVM models it: i8mm, dotprod or v8 (ValueError for a core LLVM
    does not know)."""
    if mcpu and mcpu not in (cores := list(codegen.llvm_get_cpu_archlist(tvm.target.Target(aarch64_target())))):
        raise ValueError(f"--mcpu {mcpu}: not an AArch64 core LLVM knows (e.g. {', '.join(sorted(cores)[:6])}, ...)")
    features = tvm.target.Target(aarch64_target(mcpu)).features
    return "i8mm" if features.has_matmul_i8 else "dotprod" if features.has_dotprod else "v8"


# llvm-mca cycles per K byte of a v8.0 tile's K loop (4x4 outputs) on the cores whose two tiles differ in
# it, from the hottest K-loop block of a 28x28x256->64 1x1 layer built for the core (the u8 x u8 tile's
# block of 4 K steps: 169 cycles per 32 bytes on Cortex-A53, one 8-byte step 16.2 on A72; the s8 x s7
# tile's 16-byte step 65.0 and 32.2).
V8_CYCLES_PER_BYTE = {"cortex-a53": {"v8": 5.28, "v8s7": 4.06}, "cortex-a72": {"v8": 2.03, "v8s7": 2.01}}


# The cores LLVM schedules in order (AArch64: its A53, A55 and A510 models and the cores it maps onto them).
IN_ORDER = frozenset({"cortex-a34", "cortex-a35", "cortex-a53", "cortex-a55", "cortex-a320", "cortex-a510",
                      "cortex-a520", "cortex-a520ae"})


def bias_copies(mcpu: str | None, kernel) -> int:
    """How many copies of the bias an operator passes for the accumulators of ``kernel`` (a tile of
    ``mr`` rows) to start from: one per row on a k4 tile for an out-of-order core, so that each row's
    accumulators load their own (one copy: LLVM loads it once and copies it into the other rows'
    registers, a vector ``mov`` each on a vector pipe; llvm-mca Mcycles, one copy / one per row, 112x112
    1x1 16->96 and 56x56 64->256: Cortex-A76 (N1 model) 1.685 / 1.573 and 2.344 / 2.272, Neoverse-N2
    1.659 / 1.547 and 2.926 / 2.851, Neoverse-V1 0.839 / 0.784 and 2.007 / 1.972); else one (the in-order
    Cortex-A55 takes the loads longer: 4.989 / 5.516; the acc tiles add the bias to their sums whatever
    its copies, Cortex-A72 3.804 / 3.849)."""
    return kernel.spec.mr if out_of_order(mcpu) and kernel.spec.layout != "acc" else 1


def out_of_order(mcpu: str | None) -> bool:
    """Whether LLVM schedules ``mcpu`` out of order (not IN_ORDER; no core named: not known to be)."""
    return mcpu is not None and mcpu not in IN_ORDER


def tile_for(mcpu: str | None = None, family: str | None = None, weights: np.ndarray | None = None):
    """The tile an int8 NEON operator uses on ``mcpu`` (its family by ``core_family``), or the given
    ``family``'s (FAMILIES). On a v8.0 core, constant ``weights`` all in [-127, 127] (onnxruntime's
    symmetric quantization) take the s8 x s7 tile when the cache holds it, others the u8 x u8 one; on
    a core of V8_CYCLES_PER_BYTE the u8 x u8 tile where the GEMM's depth (``weights``' but the first
    axis: cg kh kw of a conv2d, whose packing rounds it once) in its 8-byte steps costs fewer
    estimated cycles than in the s8 x s7 tile's 16-byte ones (a depth of 24: 24 bytes against 32)."""
    if family is None:
        family = core_family(mcpu)
        if family == "v8" and weights is not None and symmetric(weights) and "v8s7" in neon_tiles():
            family = "v8s7"
            costs = V8_CYCLES_PER_BYTE.get(mcpu)
            if costs and "v8" in neon_tiles():
                depth = int(np.prod(weights.shape[1:]))
                family = min(("v8s7", "v8"), key=lambda f: round_up(depth, neon_tiles()[f].spec.k) * costs[f])
    if family not in FAMILIES:
        raise SelectionError(f"unknown NEON int8 tile family {family!r}; accepted: {', '.join(FAMILIES)}")
    tiles = neon_tiles()
    if family not in tiles:
        raise SelectionError(f"no proved {FAMILIES[family][0]} in the kernel cache (qsynth synth --isa neon --kind int8)")
    return tiles[family]


def symmetric(weights: np.ndarray) -> bool:
    """Every weight in [-127, 127]: the s8 x s7 tile's B domain (two products fit an int16 lane)."""
    return -127 <= int(weights.min(initial=0)) and int(weights.max(initial=0)) <= 127


def offsets(family: str) -> tuple[int, bool]:
    """(activation offset for u8 data, weights as u8 codes) of a family."""
    return FAMILIES[family][1], FAMILIES[family][2]


def family_of(kernel) -> str:
    return next(f for f, (name, _, _) in FAMILIES.items() if kernel.intrin == "qsynth_" + name)


def neon_target(mcpu: str | None, kernel=None) -> dict:
    """The AArch64 target for ``mcpu`` with the features ``kernel``'s instructions need."""
    target = aarch64_target(mcpu)
    extra = [f"+{f}" for f in (kernel.features if kernel else ()) if f != "neon"]
    return target | {"mattr": list(dict.fromkeys(target["mattr"] + extra))}
