"""Kernel benchmarks: every cached kernel next to the machine's peak, plain C and TVM's lowering.

x86 (run natively): time per workload of each kernel in a tight L1-resident loop, the same workload
as plain C left to the compiler's auto-vectorizer, and TVM's own lowering (``scripts/tvm_baselines.py``),
next to the instruction peaks (``scripts/peak_x86.c``) measured right before each kernel. NEON (no hardware
here): llvm-mca cycle estimates on Cortex-A53 and A72 of the compiled kernel, of TVM's lowering of
the same tile and of plain C. Writes ``benchmarks/kernels.json`` and ``benchmarks/kernels.md``; a run
of some ISAs or kernels replaces their rows and keeps the others (``scripts/kernels_report.py``).

    python scripts/bench_kernels.py [--isa neon,avx2,avx512,amx] [--configs a1w1,int8] [--trials N]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import jinja2
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from scripts import tvm_baselines  # noqa: E402
from scripts.kernels_report import ROW_SECTIONS, markdown, merge  # noqa: E402

from isa_specs import host  # noqa: E402
from sketches.program import Program  # noqa: E402
from synth.files import write_atomically  # noqa: E402
from tvm_integration.bench import provenance  # noqa: E402
from synth.kernel import spec_from_key  # noqa: E402
from emit.convention import function_name, layout  # noqa: E402
from emit.model import KLOOP_LAYOUTS, KLOOP_TYPES  # noqa: E402
from emit.harness import KernelDriver, gemv_reference, selected_entries  # noqa: E402
from emit.library import emit_entry, extern_source, header  # noqa: E402
from emit.model import kernel_model  # noqa: E402

X86_FLAGS = ["-O3", "-march=native"]
AVX2_FLAGS = ["-O3", "-march=haswell"]      # AVX2 bitserial kernels and their baselines: no AVX-512 popcount
NEON_FLAGS = ["--target=aarch64-linux-gnu", "-O3", "-march=armv8.2-a+dotprod+i8mm"]
MCA_CPUS = ("cortex-a53", "cortex-a72")
ALL_ISAS = ("neon", "avx2", "avx512", "amx")
_TEMPLATES = jinja2.Environment(loader=jinja2.FileSystemLoader(ROOT / "scripts" / "templates"),
                                trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined)


def run(cmd: list[str], stdin: str | None = None) -> str:
    proc = subprocess.run(cmd, input=stdin, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return proc.stdout


def run_bench(entry: dict, spec, work: dict, trials: int, inner: int) -> dict:
    """The benchmark program of one kernel and workload, built and run; a failure names the cache key."""
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = Path(tmp) / "bench.c", Path(tmp) / "bench"
        src.write_text(bench_source(entry, spec, work, trials, inner))
        run(["gcc", *x86_flags(spec), "-o", str(exe), str(src)])
        res = json.loads(run([str(exe)]))
    if "error" in res:
        raise RuntimeError(f"{entry['name']} ({entry['cache_key']}): {res['error']}")
    return res


def machine() -> dict:
    m = host.model()
    first = lambda cmd: run(cmd).splitlines()[0]
    import tvm
    return {"cpu": m.model_name, "uarch": m.uarch, "uarch_basis": m.uarch_basis, "tvm_target": host.tvm_target(),
            "features": host.x86_features(m), "cores": len(os.sched_getaffinity(0)),
            "gcc": first(["gcc", "--version"]), "clang": first(["clang", "--version"]),
            "llvm-mca": next(l.strip() for l in run(["llvm-mca", "--version"]).splitlines() if "version" in l),
            "tvm": tvm.__version__, "x86_flags": " ".join(X86_FLAGS),
            "avx2_bitserial_flags": " ".join(AVX2_FLAGS), "neon_flags": " ".join(NEON_FLAGS)}


# ---------------------------------------------------------------- x86
def x86_flags(spec) -> list[str]:
    """AMX kernels are timed natively: a build that would select the emulation (emit/amx_runtime.py) fails."""
    if spec.isa == "amx":
        return X86_FLAGS + ["-DQSYNTH_AMX_EXPECT_EMULATED=0"]
    return AVX2_FLAGS if spec.kind == "bitserial" and spec.isa == "avx2" else X86_FLAGS


# The probes of peak_x86.c and the CPU feature (isa_specs.features.X86 key) each one executes.
PROBES = {"vpdpbusd_zmm": "avx512vnni", "vpopcntq_zmm": "avx512vpopcntdq", "vpdpbusd_ymm_vex": "avxvnni",
          "vpdpbusd_zmm_mix_6x32": "avx512vnni", "vpdpbusd_zmm_mix_8x48": "avx512vnni", "tdpbusd": "amx-int8",
          "vpmaddwd_ymm": "avx2", "vpmaddubsw_ymm": "avx2", "vpmaddwd_ymm_w16_5x16": "avx2",
          "vpmaddwd_ymm_w16_5x16_reg": "avx2", "vpmaddubsw_ymm_u8s8_5x16": "avx2"}


def probe_skips(flags: frozenset[str]) -> dict[str, str]:
    """The probes a host with ``flags`` cannot run, with the reason."""
    return {p: reason for p, feature in PROBES.items() if (reason := host.lacks(feature, flags))}


class PeakProbe:
    """Instructions per second of vpdpbusd (zmm, ymm), vpopcntq zmm and tdpbusd, compiled once and
    run right before every kernel: on this shared machine a peak measured a minute apart moved by
    up to 20%, so each kernel is compared with the peak of its own moment. Only the probes the host
    has the feature for run; ``skipped`` gives the others' reasons."""

    def __init__(self, directory: str):
        self.exe = Path(directory) / "peak"
        run(["gcc", "-O2", "-o", str(self.exe), str(ROOT / "scripts" / "peak_x86.c")])
        self.skipped = probe_skips(host.cpu_flags())
        self.names = [p for p in PROBES if p not in self.skipped]
        self.samples: list[dict] = []

    def __call__(self) -> dict:
        self.samples.append(json.loads(run([str(self.exe), *self.names])))
        return self.samples[-1]

    def summary(self) -> dict:
        """Per instruction: median, min and max over the run's probes."""
        return {k: {"median": float(np.median(v)), "min": min(v), "max": max(v), "probes": len(v)}
                for k in self.samples[0] for v in [[s[k] for s in self.samples]]}


def workload(spec) -> dict:
    """Sizes of one timed workload (all L1-resident) and its operation count."""
    if spec.kind == "bitserial":
        blocks = 16
        bits = blocks * spec.k_bits
        return {"blocks": blocks, "ops": 2 * spec.rows * bits * spec.abits * spec.wbits,
                "unit": "binary G op/s", "shape": f"{spec.rows} rows x {bits} bits, A{spec.abits}W{spec.wbits}"}
    blocks = max(1, min(1024, 32768 // (spec.mr + spec.nr)) // spec.k)       # A and B within 32 KiB (L1d: 48 KiB)
    return {"blocks": blocks, "ops": spec.mr * spec.nr * blocks * spec.k, "unit": "G MAC/s",
            "shape": f"{spec.mr}x{spec.nr}x{blocks * spec.k}"}


def peak_of(spec) -> tuple[str, str, int] | None:
    """(instruction, probe, operations per instruction) the kernel's throughput is compared with."""
    if spec.kind == "bitserial":       # AND + popcount per bit pair; vpopcntq counts 512 bits
        return ("vpopcntq zmm", "vpopcntq_zmm", 2 * 512) if spec.isa == "avx512" else None
    if spec.isa == "amx":
        return "tdpbusd", "tdpbusd", 16 * 16 * 64
    if spec.isa == "avx512":
        return "vpdpbusd zmm", "vpdpbusd_zmm", 64
    if spec.types != "u8s8":        # the exact AVX2 tiles: the multiply pipes' bound, 16 MACs per multiply
        return "vpmaddwd ymm (16 MACs)", "vpmaddwd_ymm", 16
    return "vpdpbusd ymm (AVX-VNNI)", "vpdpbusd_ymm_vex", 32


def peak_fields(spec, rate: float, peak: dict, skipped: dict[str, str]) -> dict:
    """The kernel's ``rate`` (G op/s) as a fraction of its instruction's peak in ``peak``, or why not."""
    if (p := peak_of(spec)) is None:
        return {}
    instruction, probe, per = p
    if probe in skipped:
        return {"peak_instruction": instruction, "peak_skipped": skipped[probe]}
    return {"peak_instruction": instruction, "peak_rate": per * peak[probe] / 1e9,
            "fraction_of_peak": rate * 1e9 / (per * peak[probe])}


def bench_source(entry: dict, spec, work: dict, trials: int, inner: int, dump: bool = False) -> str:
    """The benchmark program; ``dump`` (int8): it writes A, B (packed) and C after one workload instead of timing."""
    fields = {"kernel": emit_entry(entry), "function": function_name(entry), "name": entry["name"],
              "kind": spec.kind, "blocks": work["blocks"], "trials": trials, "inner": inner, "seed": 12345,
              "amx": spec.isa == "amx", "tiles": work.get("tiles", 1), "dump": dump}
    if spec.kind == "bitserial":
        fields |= {"rows": spec.rows, "block_bytes": spec.k_bits // 8, "abits": spec.abits, "wbits": spec.wbits,
                   "lane": layout(spec).lane_type, "hybrid": spec.encoding == "hybrid", "gemv": spec.layout == "acc"}
    else:
        sa, sb = spec.signed
        byte = {False: "uint8_t", True: "int8_t"}
        wide = spec.types == "w16"             # 8-bit data widened: u8 activations, s8 weights in int16
        fields |= {"mr": spec.mr, "nr": spec.nr, "k": spec.k, "group": spec.group, "kloop": spec.layout in (*KLOOP_LAYOUTS, "tile") and spec.types in KLOOP_TYPES,
                   "a_type": "int16_t" if wide else byte[sa], "b_type": "int16_t" if wide else byte[sb],
                   "a_data": "uint8_t" if wide else byte[sa], "b_data": "int8_t" if wide else byte[sb],
                   "a_mask": "0x7f" if spec.types == "u7s8" else "0xff", "b_low": -127 if spec.types == "s8s7" else None}
    return _TEMPLATES.get_template("bench_x86.c.j2").render(**fields)


def tvm_baselines_of(spec, work: dict, rng) -> list[tuple[str, float]]:
    """(what, median seconds per workload) of TVM's lowerings of the same workload, each checked on
    numpy: bitserial with the rfactor schedule and unscheduled; int8 VNNI-tensorized or plain."""
    if spec.kind == "bitserial":
        nbytes = work["blocks"] * spec.k_bits // 8
        w = rng.integers(0, 256, (spec.wbits, spec.rows, nbytes), dtype=np.uint8)
        a = rng.integers(0, 256, (spec.abits, nbytes), dtype=np.uint8)
        rows = np.zeros((1, spec.rows), np.int64)
        want = gemv_reference(spec, w.reshape(1, -1, nbytes), a[None], rows, nbytes)[0]
        out = []
        for label, scheduled in (("T.popcount dense, rfactor schedule", True), ("T.popcount dense, no schedule", False)):
            f = tvm_baselines.bitserial_x86(spec.abits, spec.wbits, spec.rows, spec.k_bits, work["blocks"],
                                            spec.encoding, avx2=spec.isa == "avx2", scheduled=scheduled)
            if not np.array_equal(f.run(w, a), want):
                raise RuntimeError(f"TVM bitserial baseline ({label}) disagrees with numpy for {spec.name}")
            out.append((label, f.median_seconds(w, a, number=200, repeat=15)))
        return out
    if spec.types not in ("u8s8", "u7s8"):
        return []
    k = work["blocks"] * spec.k
    a = rng.integers(0, 128 if spec.types == "u7s8" else 256, (spec.mr, k), dtype=np.uint8)
    bt = rng.integers(-128, 128, (spec.nr, k), dtype=np.int8)
    bp = np.ascontiguousarray(bt.reshape(spec.nr, k // 4, 4).transpose(1, 0, 2))
    c = np.zeros((spec.mr, spec.nr), np.int32)
    vnni = spec.nr % 16 == 0 and host.missing("avx512vnni", ()) is None
    f = (tvm_baselines.int8_vnni_x86 if vnni else tvm_baselines.int8_plain_x86)(spec.mr, spec.nr, k)
    if not np.array_equal(f.run(a, bp, c), a.astype(np.int32) @ bt.astype(np.int32).T):
        raise RuntimeError(f"TVM int8 baseline disagrees with numpy for {spec.name}")
    return [(("VNNI tensorize (dot_16x4)" if vnni else "plain te lowering"), f.median_seconds(a, bp, c, number=200, repeat=15))]


def probed_rows(row, entries: list[dict], trials: int, seed: int) -> tuple[dict, list[dict]]:
    """(the peaks, ``row`` of every entry given the peak probe run right before it)."""
    with tempfile.TemporaryDirectory() as tmp:
        probe, rng = PeakProbe(tmp), np.random.default_rng(seed)
        rows = [row(entry, trials, probe(), probe.skipped, rng) for entry in entries]
        return {"measured": probe.summary(), "skipped": probe.skipped}, rows


def x86_row(entry: dict, trials: int, peak: dict, skipped: dict[str, str], rng) -> dict:
    """The kernel, plain C and TVM on one workload; % of ``peak``, the probe run just before (or the
    reason the probe was ``skipped``)."""
    spec = spec_from_key(entry["spec"])
    work = workload(spec)
    res = run_bench(entry, spec, work, trials, 2000 if spec.kind == "int8" else 20000)
    row = {"name": entry["name"], "cache_key": entry["cache_key"], "isa": spec.isa, "shape": work["shape"],
           "length": len(Program.from_json(entry["program"])), "unit": work["unit"],
           "kernel_seconds": res["kernel_seconds"], "plain_seconds": res["plain_seconds"],
           "kernel_rate": work["ops"] / res["kernel_seconds"] / 1e9,
           "plain_rate": work["ops"] / res["plain_seconds"] / 1e9}
    row |= peak_fields(spec, row["kernel_rate"], peak, skipped)
    if spec.kind == "int8" and spec.isa == "avx512" and (mix := f"vpdpbusd_zmm_mix_{spec.mr}x{spec.nr}") in peak:
        row["fraction_of_load_mix"] = row["kernel_rate"] * 1e9 / (64 * peak[mix])     # the tile shape's own bound
    for n, (label, seconds) in enumerate(tvm_baselines_of(spec, work, rng)):
        suffix = "" if n == 0 else "_unscheduled"
        row |= {f"tvm{suffix}_schedule": label, f"tvm{suffix}_seconds": seconds,
                f"tvm{suffix}_rate": work["ops"] / seconds / 1e9,
                f"speedup_vs_tvm{suffix}": seconds / res["kernel_seconds"]}
    row["speedup_vs_plain"] = res["plain_seconds"] / res["kernel_seconds"]
    print(f"  {entry['name']}: {row['kernel_rate']:.1f} {work['unit']}", file=sys.stderr)
    return row


# A whole 1-bit dense, the shape #4's AVX-512 target compares: 1024 output rows x 4096 bits (512 KiB
# of weight bits, L2-resident), one activation vector.
DENSE_ROWS, DENSE_BITS = 1024, 4096


def dense_row(entry: dict, trials: int, peak: dict, skipped: dict[str, str], rng) -> dict:
    """An A1W1 acc kernel's ``_gemv`` over every row tile of the dense next to TVM's T.popcount dense of
    the same shape: rfactor-scheduled per tile of the kernel's rows, and unscheduled."""
    spec = spec_from_key(entry["spec"])
    if (spec.abits, spec.wbits, spec.layout) != (1, 1, "acc"):
        raise ValueError(f"the dense benchmark takes A1W1 acc kernels, not {spec.name}")
    blocks, nbytes = DENSE_BITS // spec.k_bits, DENSE_BITS // 8
    work = {"blocks": blocks, "tiles": DENSE_ROWS // spec.rows, "ops": 2 * DENSE_ROWS * DENSE_BITS}
    res = run_bench(entry, spec, work, trials, 200)
    row = {"name": entry["name"], "cache_key": entry["cache_key"], "tile_rows": spec.rows,
           "shape": f"{DENSE_ROWS} rows x {DENSE_BITS} bits", "kernel_rate": work["ops"] / res["kernel_seconds"] / 1e9}
    row |= peak_fields(spec, row["kernel_rate"], peak, skipped)
    w = rng.integers(0, 256, (1, DENSE_ROWS, nbytes), dtype=np.uint8)
    a = rng.integers(0, 256, (1, nbytes), dtype=np.uint8)
    dense = dataclasses.replace(spec, rows=DENSE_ROWS)
    want = gemv_reference(dense, w, a[None], np.zeros((1, DENSE_ROWS), np.int64), nbytes)[0]
    for label, options in (("tvm", {"row_tile": spec.rows}), ("tvm_unscheduled", {"scheduled": False})):
        f = tvm_baselines.bitserial_x86(1, 1, DENSE_ROWS, spec.k_bits, blocks, spec.encoding, **options)
        if not np.array_equal(f.run(w, a), want):
            raise RuntimeError(f"TVM dense baseline ({label}) disagrees with numpy for {spec.name}")
        seconds = f.median_seconds(w, a, number=200, repeat=trials)
        row |= {f"{label}_rate": work["ops"] / seconds / 1e9, f"speedup_vs_{label}": seconds / res["kernel_seconds"]}
    print(f"  dense {entry['name']}: {row['kernel_rate']:.1f} binary G op/s", file=sys.stderr)
    return row


# ---------------------------------------------------------------- NEON (llvm-mca)
def function_instructions(asm: str, symbol: str) -> list[str]:
    """The instruction lines of ``symbol`` in clang/LLVM assembler output."""
    lines = asm.splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith(f"{symbol}:"))
    body = []
    for line in lines[start + 1:]:
        if line.startswith(".Lfunc_end") or re.match(r"^\w+:", line):
            break
        text = line.split("//")[0].strip()
        if text and not text.startswith(".") and not text.endswith(":"):
            body.append(text)
    return body


def mca_cycles(instructions: list[str], cpu: str) -> float:
    """llvm-mca's cycles per iteration of the instruction block (100 iterations, steady state)."""
    out = run(["llvm-mca", "-mtriple=aarch64", f"-mcpu={cpu}", "-mattr=+neon,+dotprod,+i8mm", "-iterations=100"],
              "\n".join(i for i in instructions if i != "ret") + "\n")
    return int(re.search(r"Total Cycles:\s+(\d+)", out)[1]) / 100


def clang_neon(source: str, symbol: str) -> list[str]:
    return function_instructions(run(["clang", *NEON_FLAGS, "-S", "-x", "c", "-", "-o", "-"], source), symbol)


NEON_ACC_BLOCKS = 8      # K blocks of an acc kernel's straight-line NEON workload (1024 bits for Q tiles)


def neon_kblocks(spec) -> int:
    """K blocks of one NEON workload: NEON_ACC_BLOCKS for acc kernels (a K loop), else one tile."""
    return NEON_ACC_BLOCKS if spec.kind == "bitserial" and spec.layout == "acc" else 1


def acc_neon_source(entry: dict) -> str:
    """An acc kernel over NEON_ACC_BLOCKS blocks as straight-line code (llvm-mca needs no loop): zeroed
    accumulators, the proved body once per block, ``_finish``; function ``bench_acc``."""
    m = kernel_model(entry)
    fn, g, rb = m["function"], m["gemv"], m["gemv"]["block_bytes"]
    steps = "\n".join(f"  {fn}(w + {kb * rb}, ws, a + {kb * rb}, as, acc);" for kb in range(NEON_ACC_BLOCKS))
    return f"""{header(m)}
void bench_acc(const uint8_t *w, int ws, const uint8_t *a, int as, {g["out_type"]} *out) {{
  {g["acc_type"]} acc[{g["registers"] * g["lanes"]}] __attribute__((aligned(16))) = {{0}};
{steps}
  {fn}_finish(acc, out);
}}
"""


def plain_neon_source(spec) -> str:
    """The workload written the obvious way in C, for clang's auto-vectorizer."""
    if spec.kind == "bitserial":
        kbytes = spec.k_bits // 8 * neon_kblocks(spec)
        lane = layout(spec).lane_type
        term = "2 * __builtin_popcount(x & y) - __builtin_popcount(y)" if spec.encoding == "hybrid" \
            else "__builtin_popcount(x & y)"
        return f"""#include <stdint.h>
void plain(const uint8_t *w, int ws, const uint8_t *a, int as, {lane} *out) {{
  for (int i = 0; i < {spec.rows}; i++) {{
    int32_t acc = 0;
    for (int j = 0; j < {spec.wbits}; j++)
      for (int k = 0; k < {spec.abits}; k++) {{
        int32_t s = 0;
        for (int t = 0; t < {kbytes}; t++) {{ uint8_t x = w[(j * {spec.rows} + i) * ws + t], y = a[k * as + t]; s += {term}; }}
        acc += s << (j + k);
      }}
    out[i] += ({lane})acc;
  }}
}}
"""
    e, eb = ("int16_t" if spec.types == "s16" else "uint8_t" if s is False else "int8_t" for s in spec.signed)
    return f"""#include <stdint.h>
void plain(const {e} *a, int as, const {eb} *b, int bs, int32_t *c, int cs) {{
  for (int i = 0; i < {spec.mr}; i++)
    for (int j = 0; j < {spec.nr}; j++) {{
      int32_t s = 0;
      for (int t = 0; t < {spec.k}; t++) s += (int32_t)a[i * as + t] * (int32_t)b[j * bs + t];
      c[i * cs + j] += s;
    }}
}}
"""


def tvm_neon(spec) -> list[str] | None:
    if spec.kind == "bitserial":
        asm = tvm_baselines.bitserial_neon_asm(spec.abits, spec.wbits, spec.rows, spec.k_bits, spec.encoding,
                                               neon_kblocks(spec))
    elif spec.types == "u8u8" and spec.layout == "rows":
        asm = tvm_baselines.int8_neon_asm(spec.mr, spec.nr, spec.k)
    else:
        return None
    return tvm_baselines.asm_body_instructions(asm)


BRANCH = re.compile(r"^(b|bl|b\.\w+|cbn?z|tbn?z)\s")


def neon_rows(entries: list[dict]) -> list[dict]:
    rows = []
    for entry in entries:
        spec = spec_from_key(entry["spec"])
        fn = function_name(entry)
        if neon_kblocks(spec) > 1:
            kernel = clang_neon(acc_neon_source(entry), "bench_acc")
        else:
            kernel = clang_neon(extern_source(kernel_model(entry)), fn + "_extern")
        variants = {"kernel": kernel, "plain": clang_neon(plain_neon_source(spec), "plain"), "tvm": tvm_neon(spec)}
        row = {"name": entry["name"], "cache_key": entry["cache_key"], "program_length": len(Program.from_json(entry["program"])),
               "k_bits": spec.k_bits * neon_kblocks(spec) if spec.kind == "bitserial" else None}
        for label, body in variants.items():
            if body is None:
                continue
            if any(BRANCH.match(i) for i in body):     # llvm-mca would time one iteration, or skip the callee
                row[f"{label}_note"] = "a loop or a call: not straight-line, no estimate"
                continue
            row[f"{label}_instructions"] = len([i for i in body if i != "ret"])
            for cpu in MCA_CPUS:
                row[f"{label}_cycles_{cpu}"] = mca_cycles(body, cpu)
        for cpu in MCA_CPUS:
            if "tvm_instructions" in row:
                row[f"kernel_over_tvm_{cpu}"] = row[f"kernel_cycles_{cpu}"] / row[f"tvm_cycles_{cpu}"]
        rows.append(row)
        print(f"  {entry['name']}: {row['kernel_cycles_cortex-a53']:.1f} cycles (A53)", file=sys.stderr)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--isa", default=",".join(ALL_ISAS), help="comma-separated ISAs (a subset: merged into the report)")
    parser.add_argument("--configs", help="comma-separated substrings of kernel names (default: every kernel)")
    parser.add_argument("--trials", type=int, default=15, help="timing trials per measurement (median)")
    parser.add_argument("--out", default=str(ROOT / "benchmarks"), help="directory for kernels.{json,md}")
    args = parser.parse_args()
    isas = args.isa.split(",")
    configs = args.configs.split(",") if args.configs else None
    entries = [e for isa in isas for e in selected_entries(isa, configs)[0] if e["proof"]["proved"]]
    report, record = {"machine": machine()}, provenance.record(1)
    x86 = sorted((e for e in entries if e["program"]["isa"] != "neon"), key=lambda e: e["name"])
    missing = {e["name"]: KernelDriver(e, emulated=False).missing() for e in x86}     # AMX: timed natively only
    report["x86_skipped"] = {name: reason for name, reason in missing.items() if reason}
    x86 = [e for e in x86 if not missing[e["name"]]]
    if x86:
        report["peaks"], report["x86"] = probed_rows(x86_row, x86, args.trials, seed=0)
    dense = [e for e in x86 if e["program"]["isa"] == "avx512" and e["spec"].get("layout") == "acc"
             and (e["spec"]["abits"], e["spec"]["wbits"]) == (1, 1)]
    if dense:
        report["dense"] = probed_rows(dense_row, sorted(dense, key=lambda e: e["name"]), args.trials, seed=1)[1]
    neon = [e for e in entries if e["program"]["isa"] == "neon"]
    if neon:
        report["neon"] = neon_rows(sorted(neon, key=lambda e: e["name"]))
    record = provenance.finished(record)
    for section in ROW_SECTIONS:
        if section in report:
            report[section] = [dict(r, run=record) for r in report[section]]
    out = Path(args.out)
    if (args.configs or set(isas) != set(ALL_ISAS)) and (out / "kernels.json").exists():
        report = merge(json.loads((out / "kernels.json").read_text()), report)
    write_atomically(out / "kernels.json", json.dumps(report, indent=2, sort_keys=True) + "\n")
    text = markdown(report, NEON_ACC_BLOCKS, DENSE_ROWS, DENSE_BITS)
    write_atomically(out / "kernels.md", text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
