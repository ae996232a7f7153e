#!/usr/bin/env python3
"""How fast a 32x32 AMX tile runs depends on where its operands come from: the proved
``int8_u8s8_tile_32x32x64_amx`` kernel's ``_kruns`` (through the operators' contract-keeping wrapper),
timed over k blocks whose A and B come from L1, L2 or beyond, as a fraction of the ``tdpbusd`` peak
(scripts/peak_x86.c). These are the figures behind ops/direct.py's ``run_by_run`` and docs/amx.md.

    python scripts/bench_amx_residency.py [--out benchmarks]

Writes ``<out>/amx_residency.json`` and ``.md``. Needs a host with AMX (elsewhere the driver runs on
the emulation, which tests/test_amx_residency.py checks against numpy so that it cannot rot).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from emit.model import kernel_model  # noqa: E402
from emit.toolchain import build  # noqa: E402
from isa_specs import host  # noqa: E402
from synth.files import write_atomically  # noqa: E402
from tvm_integration.bench import provenance  # noqa: E402
from tvm_integration.kernels import amx_runtime, int8  # noqa: E402

KERNEL = "int8_u8s8_tile_32x32x64_amx"
MACS_PER_BLOCK = 32 * 32 * 64
# name: (k blocks per call, distinct A copies, distinct B copies), cycled through call by call
CASES = {
    "A and B in L1": (8, 1, 1),
    "B in L1, A from L2": (12, 8, 1),
    "A in L1, B from L2": (12, 1, 8),
    "A and B from L2 (C9's whole dot product)": (36, 8, 8),
    "B from L3 or memory (C12's 2.3 MiB of weights)": (72, 1, 16),
}

# A: 32 rows of kblocks*64 bytes, copy after copy; B: kblocks*16 rows of 128 bytes (32 columns x 4 bytes
# of one k group). A byte i holds (7 i) mod 256, B byte i (3 i) mod 256 as int8 (the test rebuilds them).
DRIVER = r"""
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double cpu_seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
  if (argc != 5) { fprintf(stderr, "usage: %s KBLOCKS A_COPIES B_COPIES CALLS (0: print one call's C)\n", argv[0]); return 2; }
  int kblocks = atoi(argv[1]), a_copies = atoi(argv[2]), b_copies = atoi(argv[3]);
  long calls = atol(argv[4]);
  size_t a_size = (size_t)32 * kblocks * 64, b_size = (size_t)kblocks * 16 * 128;
  uint8_t *a = aligned_alloc(64, a_size * a_copies);
  int8_t *b = aligned_alloc(64, b_size * b_copies);
  static int32_t c[32 * 32] __attribute__((aligned(64)));
  for (size_t i = 0; i < a_size * a_copies; i++) a[i] = (uint8_t)(i * 7);
  for (size_t i = 0; i < b_size * b_copies; i++) b[i] = (int8_t)(uint8_t)(i * 3);
  if (calls == 0) {
    KRUNS(a, kblocks * 64, 64, 1, 1, 0, 0, b, 128, c, 32, kblocks, 0, 0, 0);
    for (int i = 0; i < 32 * 32; i++) printf("%d%c", c[i], i == 32 * 32 - 1 ? '\n' : ' ');
    return 0;
  }
  double best = 1e30;
  for (int round = 0; round < 5; round++) {
    double start = cpu_seconds();
    for (long i = 0; i < calls; i++)
      KRUNS(a + (i % a_copies) * a_size, kblocks * 64, 64, 1, 1, 0, 0, b + (i % b_copies) * b_size, 128, c, 32,
            kblocks, 0, 0, 0);
    double seconds = (cpu_seconds() - start) / calls;
    if (seconds < best) best = seconds;
  }
  printf("{\"ns_per_call\": %.1f, \"check\": %d}\n", best * 1e9, c[5]);
  return 0;
}
"""


def entry() -> dict:
    """The proved cache entry of ``KERNEL`` (re-proved on this machine, as the operators load it)."""
    found = [e for e in int8.proved_entries("amx") if e["name"] == KERNEL]
    if not found:
        raise SystemExit(f"no proved {KERNEL} in kernel_cache/: run qsynth synth for AMX first")
    return found[0]


def driver(emulated: bool) -> Path:
    """The driver, compiled with the kernel's header (on the emulation when ``emulated``)."""
    e = entry()
    model = kernel_model(e)
    source = (amx_runtime.source(e) + f"#define KRUNS {model['function']}_kruns_amx\n" + DRIVER)
    return build(source, model["isa"].name, "clang", model["features"], emulated)


def measure(exe: Path, kblocks: int, a_copies: int, b_copies: int) -> float:
    """ns per call, the least over 5 rounds of about 0.2 s."""
    calls = max(1000, int(2e8 // (kblocks * 4 * 16384 / 1000)) // 10)
    out = subprocess.run([str(exe), str(kblocks), str(a_copies), str(b_copies), str(calls)], capture_output=True,
                         text=True, check=True).stdout
    return json.loads(out)["ns_per_call"]


def tdpbusd_per_second() -> float:
    probe = build((ROOT / "scripts" / "peak_x86.c").read_text(), "amx", "gcc")
    return json.loads(subprocess.run([str(probe), "tdpbusd"], capture_output=True, text=True, check=True).stdout)["tdpbusd"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks")
    args = parser.parse_args()
    m = host.model()
    if host.lacks("amx-int8", m.flags):
        print("bench_amx_residency: this host has no AMX-INT8; the figures need the hardware", file=sys.stderr)
        return 1
    record = provenance.record(1)
    exe, peak = driver(emulated=False), tdpbusd_per_second() * 16 * 16 * 64
    rows = []
    for name, (kblocks, a_copies, b_copies) in CASES.items():
        ns = measure(exe, kblocks, a_copies, b_copies)
        gmacs = kblocks * MACS_PER_BLOCK / ns
        rows.append({"case": name, "kblocks": kblocks, "a_kib": 32 * kblocks * 64 // 1024 * a_copies,
                     "b_kib": kblocks * 16 * 128 // 1024 * b_copies, "ns_per_call": ns, "gmacs": gmacs,
                     "of_peak": gmacs * 1e9 / peak})
        print(f"{name}: {ns:.0f} ns per call, {gmacs:.0f} G MAC/s, {100 * rows[-1]['of_peak']:.0f}% of the peak")
    report = {"run": provenance.finished(record), "kernel": KERNEL, "peak_gmacs": peak / 1e9, "cases": rows}
    lines = [f"# {KERNEL}: speed by where its operands live", "", f"- Run: {provenance.described(report['run'])}.", "",
             f"One thread, CPU time, the least of 5 rounds. Peak: tdpbusd alone, {peak / 1e9:.0f} G MAC/s.", "",
             "| case | k blocks per call | A KiB (all copies) | B KiB (all copies) | ns per call | G MAC/s | of peak |",
             "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['case']} | {r['kblocks']} | {r['a_kib']} | {r['b_kib']} | {r['ns_per_call']:.0f} | "
              f"{r['gmacs']:.0f} | {100 * r['of_peak']:.0f}% |" for r in rows]
    args.out.mkdir(parents=True, exist_ok=True)
    write_atomically(args.out / "amx_residency.json", json.dumps(report, indent=1) + "\n")
    write_atomically(args.out / "amx_residency.md", "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
