"""The AMX emulation (emit/templates/qsynth_amx.h) against the specification: the numpy semantics of
isa_specs/amx.py (diff-tested on AMX hardware by test_isa_differential.py) on random tile shapes,
strides and operands, built without -mamx-* on every host; where the host has AMX, the native build
too, byte for byte; the configuration read back. The run-time contract faults both ways (a tile instruction without permission or
configuration, in a thread that did not configure, on shapes that do not match). The harness's choice
of build, and the AMX benchmark driver of scripts/bench_kernels.py, built with the emulation and
checked against numpy, so that it cannot rot on hosts without AMX; its rows merged into the report."""
from __future__ import annotations

import json
import signal
import subprocess

import numpy as np
import pytest

from conftest import HOST_RUNS, skip_if
from isa_specs import amx, get_isa
from isa_specs.check import run_binary
from isa_specs.lanes import NUMPY
from synth import cache
from synth.kernel import spec_from_key
from emit import EmitError, amx_runtime
from emit.harness import KernelDriver
from emit.toolchain import build
from scripts import bench_kernels as bk

AMX = get_isa("amx")
FEATURES = sorted(amx_runtime.EMULATED_FEATURES)
# emulated on every host; natively too where the host has AMX
BUILDS = [pytest.param(True, id="emulated"),
          pytest.param(False, id="native", marks=skip_if(HOST_RUNS.amx))]
OPS = (amx.tdpbusd, amx.tdpbssd, amx.tdpbsud, amx.tdpbuud)     # the program's op codes 0-3

# One tile dot product per record, C in tmm5, A in tmm3, B in tmm6 (tmm0 configured 1x4, unused).
# stdin: records of a header (uint32: op, M, N, K, C/A/B strides in bytes, mode) then C, A, B and the
# output buffer (M rows of C's stride); mode 0: C loaded, 1: loaded then zeroed (TILEZERO), 2: not
# loaded (as LDTILECFG left it). The output buffer after TILESTORED goes to stdout.
DP_PROGRAM = r"""#include <stdlib.h>
{runtime}
int main(void) {{
  if (qsynth_amx_init()) return 3;
  static uint8_t c[16 * 128], a[16 * 128], b[16 * 128], o[16 * 128];
  uint32_t h[8];
  while (fread(h, sizeof h, 1, stdin) == 1) {{
    uint32_t m = h[1], n = h[2], k = h[3], sc = h[4], sa = h[5], sb = h[6];
    size_t cn = (size_t)m * sc, an = (size_t)m * sa, bn = (size_t)k / 4 * sb;
    if (fread(c, 1, cn, stdin) != cn || fread(a, 1, an, stdin) != an || fread(b, 1, bn, stdin) != bn
        || fread(o, 1, cn, stdin) != cn) return 2;
    uint8_t cfg[64] __attribute__((aligned(64))) = {{0}};
    cfg[0] = 1;
    cfg[16] = 4; cfg[48] = 1;
    cfg[26] = 4 * n; cfg[53] = m;
    cfg[22] = k; cfg[51] = m;
    cfg[28] = 4 * n; cfg[54] = k / 4;
    __asm__ volatile("" ::: "memory");     /* ldtilecfg reads cfg inside asm: keep the stores */
    _tile_loadconfig(cfg);
    if (h[7] != 2) _tile_loadd(5, c, sc);
    if (h[7] == 1) _tile_zero(5);
    _tile_loadd(3, a, sa);
    _tile_loadd(6, b, sb);
    switch (h[0]) {{
      case 0: _tile_dpbusd(5, 3, 6); break;
      case 1: _tile_dpbssd(5, 3, 6); break;
      case 2: _tile_dpbsud(5, 3, 6); break;
      default: _tile_dpbuud(5, 3, 6); break;
    }}
    _tile_stored(5, o, sc);
    _tile_release();
    fwrite(o, 1, cn, stdout);
  }}
  return 0;
}}
"""


def _build(source: str, emulated: bool, compiler: str = "gcc"):
    return build(source, "amx", compiler, FEATURES, emulated)


def _batch(rng, op: int, m: int, n: int, k: int, mode: int, count: int) -> tuple[bytes, np.ndarray]:
    """``count`` records of one shape (padded strides, garbage between rows and in the output buffer;
    the first three with every A and B byte 0x80, 0xff, 0x7f) and the output buffers isa_specs.amx's
    semantics expects: C's rows replaced by the dot products, every other byte unchanged."""
    sc, sa, sb = (w + int(rng.integers(0, 128 - w + 1)) for w in (4 * n, k, 4 * n))
    c = rng.integers(0, 256, (count, m, sc), dtype=np.uint8)
    a = rng.integers(0, 256, (count, m, sa), dtype=np.uint8)
    b = rng.integers(0, 256, (count, k // 4, sb), dtype=np.uint8)
    o = rng.integers(0, 256, (count, m, sc), dtype=np.uint8)
    for j, byte in enumerate((0x80, 0xFF, 0x7F)[:count]):
        a[j], b[j] = byte, byte
    c_reg = c[:, :, :4 * n].reshape(count, -1) * (mode == 0)
    result = OPS[op](NUMPY, NUMPY.from_bytes(c_reg, 32 * m * n), NUMPY.from_bytes(a[:, :, :k].reshape(count, -1), 8 * m * k),
                     NUMPY.from_bytes(b[:, :, :4 * n].reshape(count, -1), 8 * k * n), m, n, k)
    want = o.copy()
    want[:, :, :4 * n] = NUMPY.to_bytes(result, count).reshape(count, m, 4 * n)
    head = np.array([op, m, n, k, sc, sa, sb, mode], "<u4").tobytes()
    payload = b"".join(head + c[r].tobytes() + a[r].tobytes() + b[r].tobytes() + o[r].tobytes() for r in range(count))
    return payload, want.reshape(count, -1)


def _shapes(rng) -> list[tuple[int, int, int]]:
    """isa_specs.amx's form shapes, then random ones (M, N <= 16 rows and dwords, K a multiple of 4 <= 64)."""
    drawn = [(int(rng.integers(1, 17)), int(rng.integers(1, 17)), 4 * int(rng.integers(1, 17))) for _ in range(4)]
    return list(amx.SHAPES) + drawn


@pytest.mark.parametrize("compiler", ["gcc", "clang"])
def test_emulation_matches_the_specification_and_native(compiler):
    """Every op on the specification's shapes and random ones, C loaded, zeroed or left as configured:
    the emulated build = isa_specs.amx's numpy semantics; on an AMX host the native build = the same bytes."""
    rng = np.random.default_rng(30)
    batches = [_batch(rng, op, *shape, mode=int(rng.choice(3, p=[0.6, 0.2, 0.2])), count=8)
               for op in range(len(OPS)) for shape in _shapes(rng)]
    payload, want = b"".join(p for p, _ in batches), [w for _, w in batches]
    source = DP_PROGRAM.format(runtime=amx_runtime.RUNTIME)
    builds = [True] + ([False] if HOST_RUNS.amx is None else [])
    outputs = {emulated: run_binary(AMX, _build(source, emulated, compiler), payload, "amx dp program") for emulated in builds}
    expected = b"".join(w.tobytes() for w in want)
    for emulated, got in outputs.items():
        assert len(got) == len(expected)
        bad = [i for i, (x, y) in enumerate(zip(got, expected)) if x != y]
        assert not bad, f"{'emulated' if emulated else 'native'}: {len(bad)} bytes differ from isa_specs.amx, first at {bad[0]}"
    if HOST_RUNS.amx is None:
        assert outputs[True] == outputs[False]


def test_emulated_build_has_no_tile_instruction():
    """The emulated build runs plain C (no ldtilecfg/tdpbusd in its code); the native one the instructions."""
    source = DP_PROGRAM.format(runtime=amx_runtime.RUNTIME)
    disassembly = lambda emulated: subprocess.run(["objdump", "-d", str(_build(source, emulated))], capture_output=True,
                                                  text=True, check=True).stdout
    emulated = disassembly(True)
    assert "ldtilecfg" not in emulated and "tdpbusd" not in emulated and "tileloadd" not in emulated
    native = disassembly(False)
    assert "ldtilecfg" in native and "tdpbusd" in native and "tileloadd" in native


CONFIG_PROGRAM = r"""{runtime}
int main(void) {{
  if (qsynth_amx_init()) return 3;
  uint8_t cfg[64] __attribute__((aligned(64))) = {{0}}, back[64] __attribute__((aligned(64)));
  cfg[0] = 1;
  cfg[16] = 64; cfg[48] = 16;
  cfg[20] = 12; cfg[50] = 3;
  cfg[30] = 4; cfg[55] = 1;
  __asm__ volatile("" ::: "memory");
  _tile_loadconfig(cfg);
  _tile_storeconfig(back);
  __asm__ volatile("" ::: "memory");
  fwrite(back, 1, 64, stdout);
  _tile_release();
  _tile_storeconfig(back);
  __asm__ volatile("" ::: "memory");
  fwrite(back, 1, 64, stdout);
  return 0;
}}
"""


@pytest.mark.parametrize("emulated", BUILDS)
def test_configuration_reads_back(emulated):
    """STTILECFG gives the configuration loaded (tmm0 16x64, tmm2 3x12, tmm7 1x4 bytes), then, released,
    64 zero bytes."""
    want = bytearray(64)
    want[0], want[16], want[48], want[20], want[50], want[30], want[55] = 1, 64, 16, 12, 3, 4, 1
    got = run_binary(AMX, _build(CONFIG_PROGRAM.format(runtime=amx_runtime.RUNTIME), emulated), b"", "config program")
    assert got == bytes(want) + bytes(64)


# ---------------------------------------------------------------- the run-time contract
CONTRACT_PROGRAM = r"""#include <pthread.h>
#include <stdlib.h>
{runtime}
static uint8_t buf[16 * 64];
__attribute__((unused)) static void configure(int a_colsb, int reserved) {{
  uint8_t cfg[64] __attribute__((aligned(64))) = {{0}};
  cfg[0] = 1; cfg[2] = reserved;
  cfg[16] = 64; cfg[48] = 16;                  /* tmm0 = C 16x16 int32 */
  cfg[18] = a_colsb; cfg[49] = 16;             /* tmm1 = A */
  cfg[20] = 64; cfg[50] = 16;                  /* tmm2 = B 16 rows */
  __asm__ volatile("" ::: "memory");
  _tile_loadconfig(cfg);
}}
__attribute__((unused)) static void dot(void) {{
  _tile_loadd(1, buf, 64); _tile_loadd(2, buf, 64); _tile_zero(0);
  _tile_dpbusd(0, 1, 2); _tile_stored(0, buf, 64);
}}
__attribute__((unused)) static void *in_thread(void *configured) {{
  if (configured) configure(64, 0);
  dot();
  _tile_release();
  return NULL;
}}
int main(void) {{
{body}
  return 0;
}}
"""
# case: (main's body, which builds must fault). Every emulated fault is a break of the contract; natively
# Linux lets a thread created after the configuration inherit it (TILECFG is copied at clone), which the
# psABI does not promise (tile state is caller-saved): the emulation refuses it, so code relying on it
# fails on every host.
INIT = "if (qsynth_amx_init()) return 3;\n  "
CONTRACT = {
    "complete": ("if (qsynth_amx_init() || qsynth_amx_init()) return 3;\n  configure(64, 0); dot(); _tile_release();",
                 ()),
    "thread_configures": (INIT + "pthread_t t; pthread_create(&t, NULL, in_thread, buf); pthread_join(t, NULL);", ()),
    "no_permission": ("configure(64, 0); dot();", ("native", "emulated")),
    "no_configuration": (INIT + "dot();", ("native", "emulated")),
    "after_release": (INIT + "configure(64, 0); _tile_release(); dot();", ("native", "emulated")),
    "shapes_differ": (INIT + "configure(32, 0); dot();", ("native", "emulated")),
    "bytes_per_row_not_dwords": (INIT + "configure(62, 0); _tile_loadd(1, buf, 64);", ("native", "emulated")),
    "reserved_byte": (INIT + "configure(64, 1);", ("native", "emulated")),
    "rows_without_bytes": (INIT + "configure(0, 0);", ("native", "emulated")),
    "thread_without_configuration": (INIT + "configure(64, 0);\n  pthread_t t; pthread_create(&t, NULL, in_thread, NULL); "
                                     "pthread_join(t, NULL);", ("emulated",)),
}


@pytest.mark.parametrize("emulated", BUILDS)
@pytest.mark.parametrize("case", list(CONTRACT))
def test_run_time_contract(case, emulated):
    """qsynth_amx_init() once per process (idempotent), the configuration per thread, released after:
    a program keeping it runs; one breaking it is killed by a signal, natively (SIGILL or SIGSEGV, as
    the hardware refuses) and emulated (SIGILL, after one line naming the instruction)."""
    body, faulting = CONTRACT[case]
    binary = _build(CONTRACT_PROGRAM.format(runtime=amx_runtime.RUNTIME, body=body), emulated)
    proc = subprocess.run([str(binary)], capture_output=True, text=True, timeout=60)
    if ("emulated" if emulated else "native") not in faulting:
        assert proc.returncode == 0, proc.stderr
    elif emulated:
        assert -proc.returncode == signal.SIGILL and proc.stderr.startswith("qsynth AMX emulation: "), proc.stderr
    else:
        assert -proc.returncode in (signal.SIGILL, signal.SIGSEGV), (proc.returncode, proc.stderr)


# ---------------------------------------------------------------- the harness's choice of build
def _cached_amx_entries() -> list[dict]:
    entries = [cache.read(p) for p in cache.entries()]
    return sorted((e for e in entries if e["program"]["isa"] == "amx"), key=lambda e: e["name"])


AMX_ENTRIES = _cached_amx_entries()


def test_build_choice_follows_the_host_and_the_variable(monkeypatch):
    """Emulated where the host lacks AMX, or with QSYNTH_AMX_EMULATE=1; other kernels never; a bad value
    of the variable or an emulation asked for a kernel without AMX is refused in one line."""
    assert AMX_ENTRIES, "no AMX kernel in the cache"
    monkeypatch.delenv(amx_runtime.FORCE_VARIABLE, raising=False)
    driver = KernelDriver(AMX_ENTRIES[0])
    assert driver.execution == ("emulated" if HOST_RUNS.lacks(*FEATURES) else "native") and driver.missing() is None
    monkeypatch.setenv(amx_runtime.FORCE_VARIABLE, "1")
    assert KernelDriver(AMX_ENTRIES[0]).execution == "emulated"
    assert KernelDriver(AMX_ENTRIES[0], emulated=False).execution == "native"
    assert not amx_runtime.emulated(["avx512vnni"])
    monkeypatch.setenv(amx_runtime.FORCE_VARIABLE, "yes")
    with pytest.raises(EmitError, match="QSYNTH_AMX_EMULATE must be 0 or 1, not 'yes'"):
        KernelDriver(AMX_ENTRIES[0])
    other = next(e for e in map(cache.read, cache.entries()) if e["program"]["isa"] == "avx512")
    with pytest.raises(EmitError, match="uses no emulated feature"):
        KernelDriver(other, emulated=True)


def test_native_build_refuses_a_compiler_without_amx(tmp_path):
    """A build asked to be native but compiled without the AMX flags fails instead of emulating quietly."""
    source = DP_PROGRAM.format(runtime=amx_runtime.RUNTIME)
    proc = subprocess.run(["gcc", "-O1", "-DQSYNTH_AMX_EXPECT_EMULATED=0", "-x", "c", "-", "-o", str(tmp_path / "p")],
                          input=source, capture_output=True, text=True)
    assert proc.returncode != 0 and "QSYNTH_AMX_EXPECT_EMULATED" in proc.stderr


# ---------------------------------------------------------------- the benchmark driver
@pytest.mark.parametrize("entry", AMX_ENTRIES, ids=[e["name"] for e in AMX_ENTRIES])
def test_bench_driver_builds_emulated_and_matches_numpy(entry):
    """scripts/bench_kernels.py's program of an AMX kernel, built with the emulation: its timing run (one
    trial of one workload) finds the kernel equal to plain C, and its check mode's C = A·B in numpy."""
    spec = spec_from_key(entry["spec"])
    work = bk.workload(spec)
    timed = json.loads(run_binary(AMX, _build(bk.bench_source(entry, spec, work, 1, 1), True), b"", "bench").decode())
    assert set(timed) == {"kernel_seconds", "plain_seconds"}, timed
    raw = run_binary(AMX, _build(bk.bench_source(entry, spec, work, 1, 1, dump=True), True), b"", "bench check")
    k = work["blocks"] * spec.k
    sa, sb = spec.signed
    a_size, b_size = spec.mr * k, k * spec.nr
    assert len(raw) == a_size + b_size + 4 * spec.mr * spec.nr
    a = np.frombuffer(raw[:a_size], np.int8 if sa else np.uint8).reshape(spec.mr, k).astype(np.int64)
    bp = np.frombuffer(raw[a_size:a_size + b_size], np.int8 if sb else np.uint8).reshape(k // 4, spec.nr, 4)
    b = bp.transpose(1, 0, 2).reshape(spec.nr, k).astype(np.int64)          # B[j][t] = Bp[t/4][j][t%4]
    c = np.frombuffer(raw[a_size + b_size:], "<i4").reshape(spec.mr, spec.nr)
    assert np.array_equal(c, a @ b.T) and np.any(c != 0)


def test_an_amx_run_is_merged_into_the_recorded_report():
    """``bench_kernels.py --isa amx`` on an AMX host keeps the recorded rows of other kernels as they are,
    replaces the AMX kernels' (no longer skipped there), and keeps its own machine and peaks beside them."""
    from scripts import kernels_report as kr
    machine = lambda cpu, features: {"cpu": cpu, "uarch": "x", "uarch_basis": "b", "tvm_target": {}, "features": features,
                                     "gcc": "gcc", "clang": "clang", "llvm-mca": "mca", "tvm": "0", "x86_flags": "-O3",
                                     "avx2_bitserial_flags": "", "neon_flags": ""}
    row = lambda name, rate: {"name": name, "length": 1, "shape": "s", "kernel_rate": rate, "unit": "G MAC/s",
                              "plain_rate": 1.0, "speedup_vs_plain": 1.0}
    old = {"machine": machine("EPYC", ["avx512vnni"]), "peaks": {"measured": {}, "skipped": {"tdpbusd": "lacks amx"}},
           "x86": [row("int8_avx512", 200.0)], "x86_skipped": {"int8_amx": "host CPU lacks amx_int8"},
           "neon": [{"name": "neon_tile", "program_length": 3, "kernel_instructions": 5}]}
    new = {"machine": machine("Xeon", ["amx-int8"]), "peaks": {"measured": {}, "skipped": {}},
           "x86": [row("int8_amx", 3000.0)], "x86_skipped": {}}
    merged = kr.merge(old, new)
    label = kr.host_label(new["machine"])
    assert merged["x86"] == [row("int8_amx", 3000.0) | {"host": label}, row("int8_avx512", 200.0)]
    assert merged["x86_skipped"] == {} and merged["neon"] == old["neon"] and merged["machine"] == old["machine"]
    assert merged["other_hosts"] == {label: {"machine": new["machine"], "peaks": new["peaks"]}}
    text = kr.markdown(merged, 8, 1024, 4096)
    main, other = text.split("## Measured on another host: Xeon")
    assert "| int8_avx512 |" in main and "int8_amx" not in main and "| int8_amx | 1 | s | 3000.0 G MAC/s" in other
    again = kr.merge(merged, dict(new, x86=[row("int8_amx", 3100.0)]))
    assert [r["kernel_rate"] for r in again["x86"]] == [3100.0, 200.0]
