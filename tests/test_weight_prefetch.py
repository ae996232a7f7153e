"""The deep layers' weights prefetch (kernels/int8.py ``Prefetch``): the row tiles that share one column
tile's weights bring the next column tile's into L2 between them, each a slice. Checked on both sides:
the operators' schedules number the calls that share a B 0..parts-1 (the lowered TIR's ``_kruns``
calls, every iteration of the loops around them evaluated), and the emitted ``_kruns`` prefetches,
over those parts, every line of the B after its own and nothing else (a C driver recording them)."""
import itertools
import shutil
import subprocess

import numpy as np
import pytest
import tvm
from tvm import tirx

from emit.convention import function_name
from emit.library import emit_entry
from emit.toolchain import compiler_command
from tvm_integration.kernels import int8, selection
from tvm_integration.ops import direct, winograd
from tvm_integration.ops.conv2d import build_conv2d
from tvm_integration.ops.gemm import Tile

RNG = np.random.default_rng(5)
LOWERING = ("LowerInitBlock", "PlanAndUpdateBufferAllocationLocation", "ConvertBlocksToOpaque",
            "CompactBufferAllocation", "LowerMatchBuffer", "LowerOpaqueBlock")
ARITHMETIC = {tirx.Add: lambda a, b: a + b, tirx.Sub: lambda a, b: a - b, tirx.Mul: lambda a, b: a * b,
              tirx.FloorDiv: lambda a, b: a // b, tirx.FloorMod: lambda a, b: a % b,
              tirx.Div: lambda a, b: int(a / b), tirx.Mod: lambda a, b: a - b * int(a / b)}


def _value(expr, loop_values: dict) -> int:
    """An integer TIR expression of loop variables, at ``loop_values`` (their names)."""
    if isinstance(expr, (int, tirx.IntImm)):
        return int(expr)
    if isinstance(expr, tirx.Var):
        return loop_values[expr.name]
    if isinstance(expr, tirx.Cast):
        return _value(expr.value, loop_values)
    return ARITHMETIC[type(expr)](_value(expr.a, loop_values), _value(expr.b, loop_values))


def _kruns_call(stmt, loops=()):
    """(the loops around it, the call) of the one ``_kruns`` call in a lowered function body."""
    if isinstance(stmt, tirx.For):
        return _kruns_call(stmt.body, loops + (stmt,))
    if isinstance(stmt, tirx.Evaluate):
        call = stmt.value
        is_kruns = getattr(getattr(call, "op", None), "name", "") == "tirx.call_extern" and "_kruns" in str(call.args[0])
        return (loops, call) if is_kruns else None
    children = list(stmt.seq) if isinstance(stmt, tirx.SeqStmt) else \
        [c for c in (getattr(stmt, a, None) for a in ("body", "then_case", "else_case")) if c is not None]
    return next((found for c in children if (found := _kruns_call(c, loops)) is not None), None)


def kruns_calls(mod) -> list[tuple[int, int, int]]:
    """(B's offset in the packed weights, next_part, next_parts) of every ``_kruns`` call, in loop order."""
    for name in LOWERING:
        mod = getattr(tvm.s_tir.transform, name)()(mod)
    loops, call = _kruns_call(mod["main"].body)
    b_offset = call.args[8].args[2]             # B's tvm_access_ptr: (type, data, offset, extent, mode)
    calls = []
    for values in itertools.product(*(range(int(loop.extent)) for loop in loops)):
        at = {loop.loop_var.name: v for loop, v in zip(loops, values)}
        calls.append(tuple(_value(e, at) for e in (b_offset, call.args[-2], call.args[-1])))
    return calls


def shared_runs(calls):
    """The calls grouped into runs of consecutive calls on the same B."""
    return [list(run) for _, run in itertools.groupby(calls, key=lambda call: call[0])]


def _kernel(isa: str, shape: str):
    """The ``isa`` tile of ``shape`` ("mr x nr x k")."""
    return next(k for k in selection.int8_candidates(isa) if f"_{shape}_" in k.intrin)


CASES = {   # name: (isa, tile, input NHWC, output channels): each a different order of the tile loops
    "7x7x512, output rows of one row tile, column tiles outermost": ("avx512", "7x48x16", (2, 7, 7, 64), 512),
    "flat pixel order, column tiles outermost": ("amx", "32x32x64", (1, 7, 7, 64), 512),
    "flat pixel order, window row by window row": ("amx", "32x32x64", (1, 14, 14, 256), 32),
}


@pytest.mark.parametrize("case", CASES)
def test_calls_sharing_weights_fetch_every_slice_of_the_next(case):
    isa, tile_shape, shape, o = CASES[case]
    kernel = _kernel(isa, tile_shape)
    tile = Tile.of(kernel)
    w = RNG.integers(-128, 128, (o, shape[3], 3, 3)).astype("int8")
    assert direct.flat(tile, shape[2]) == ("flat" in case)
    if "window row" in case:
        assert direct.run_by_run(tile, 3 * shape[3], direct.round_up(shape[1] * (shape[2] + 2), tile.mr))
    runs = shared_runs(kruns_calls(build_conv2d(w, shape, "NHWC", 1, 1, kernel=kernel).mod))
    assert len(runs) > 1
    for run in runs:
        parts = run[0][2]
        assert parts == len(run) > 1 and sorted(part for _, part, _ in run) == list(range(parts)), run


def test_rows_first_orders_prefetch_nothing():
    """Row tiles outermost (ResNet-18's 28-wide layers on VNNI): each call takes another column tile,
    which the others' calls already left in L2; no slices."""
    kernel = _kernel("avx512", "7x64x16")
    shape = (1, 28, 28, 128)
    w = RNG.integers(-128, 128, (128, 128, 3, 3)).astype("int8")
    assert not direct.columns_first(Tile.of(kernel), 9 * 128, 128, 28 * 28)
    assert {call[1:] for call in kruns_calls(build_conv2d(w, shape, "NHWC", 1, 1, kernel=kernel).mod)} == {(0, 0)}


def test_im2col_gemm_with_column_tiles_outermost_shares_its_slices():
    """A 1x1 layer of 4x more columns than pixels (gemm.weights_outer): A packed whole, its row
    tiles' offsets number the slices."""
    kernel = _kernel("avx512", "7x48x16")
    shape = (1, 7, 7, 256)
    w = RNG.integers(-128, 128, (512, 256, 1, 1)).astype("int8")
    for run in shared_runs(kruns_calls(build_conv2d(w, shape, "NHWC", 1, 0, kernel=kernel).mod)):
        assert run[0][2] == len(run) and sorted(part for _, part, _ in run) == list(range(len(run)))


@pytest.mark.parametrize("stride, shape, o", [(1, (1, 7, 7, 512), 512), (2, (1, 14, 14, 256), 512)])
def test_winograd_with_column_tiles_outermost_shares_its_slices(stride, shape, o):
    """Winograd's weights-outer order (ResNet-18's 7x7x512 layers, and the 14x14 -> 7x7 stride-2 one
    forced onto it): a column tile's positions one after another, each over every row tile; those
    row tiles number the slices of the next position's weights (A's offsets, the positions between
    row tiles of the packed input skipped)."""
    kernel = _kernel("avx2", "5x16x2")
    w = RNG.integers(-128, 128, (o, shape[3], 3, 3)).astype("int8")
    runs = shared_runs(kruns_calls(build_conv2d(w, shape, "NHWC", stride, 1, kernel=kernel, use_winograd=True).mod))
    assert len(runs) == o // 16 * winograd.TRANSFORMS[stride].positions
    for run in runs:
        assert run[0][2] == len(run) > 1 and sorted(part for _, part, _ in run) == list(range(len(run))), run


DRIVER = r"""
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
static const char *prefetched[1 << 16];
static int count;
#define __builtin_prefetch(address, rw, locality) (prefetched[count++] = (const char *)(address))
#include "kernel.h"
int main(int argc, char **argv) {
  int kblocks = atoi(argv[1]), parts = atoi(argv[2]);
  static uint8_t a[1 << 16] __attribute__((aligned(64)));
  static int8_t b[1 << 20] __attribute__((aligned(64)));
  static int32_t c[64 * 64] __attribute__((aligned(64)));
  for (int part = 0; part < parts; part++) {
    count = 0;
    KRUNS(a, KBYTES * kblocks, KBYTES, 1, 1, 0, 0, b, NR * 4, c, NR, kblocks, 0, part, parts);
    for (int i = 0; i < count; i++) printf("%d %ld\n", part, (long)(prefetched[i] - (const char *)b));
  }
  return 0;
}
"""


@pytest.mark.parametrize("parts", (1, 2, 7))
def test_kruns_prefetches_every_line_of_the_next_b_once_over_its_parts(tmp_path, parts, host_runs):
    """The emitted ``_kruns`` (the host's VNNI tile): its ``parts`` calls prefetch, between them,
    every 64-byte line of the B that follows theirs, nothing before it or past it, each call about
    its share, a few lines per k block."""
    kernel = _kernel("avx512", "7x48x16")
    if (why := host_runs.cannot_run(kernel)) is not None:
        pytest.skip(f"the host cannot run {kernel.intrin}: {why}")
    cmd = compiler_command(kernel.spec.isa, "gcc")
    if not shutil.which(cmd[0]):
        pytest.skip(f"{cmd[0]} not installed")
    spec = kernel.spec
    entry = next(e for e in int8.proved_entries(spec.isa) if e["cache_key"] == kernel.cache_key)
    (tmp_path / "kernel.h").write_text(emit_entry(entry))
    (tmp_path / "driver.c").write_text(f"#define KRUNS {function_name(entry)}_kruns\n"
                                       f"#define KBYTES {spec.k}\n#define NR {spec.nr}\n" + DRIVER)
    subprocess.run([*cmd, "-O2", "-o", str(tmp_path / "driver"), str(tmp_path / "driver.c")], check=True)
    kblocks = 45
    b_bytes = kblocks * spec.k * spec.nr
    out = subprocess.run([str(tmp_path / "driver"), str(kblocks), str(parts)], capture_output=True, text=True,
                         check=True).stdout.split()
    by_part = np.array(out, dtype=np.int64).reshape(-1, 2)
    lines = by_part[:, 1] // 64
    assert sorted(set(lines)) == list(range(b_bytes // 64, 2 * b_bytes // 64))
    share = -(-b_bytes // parts // 64) + 1
    for part in range(parts):
        assert np.count_nonzero(by_part[:, 0] == part) <= share
    assert len(lines) <= len(set(lines)) + parts
