"""``benchmarks/kernels.{json,md}`` from ``scripts/bench_kernels.py``'s runs: a run of some ISAs or
kernels is merged into the recorded report (its rows replace those of the same kernels, every other
row is kept as it was), and rows measured on another machine than the recorded one keep that
machine and its peaks beside them, in their own section."""
from __future__ import annotations

import json

from tvm_integration.bench import provenance

ROW_SECTIONS = ("x86", "dense", "neon")


def host_label(machine: dict) -> str:
    return f"{machine['cpu']} ({machine['uarch']}; {' '.join(machine['features']) or 'no x86 features'})"


def merge(old: dict | None, new: dict) -> dict:
    """``new`` merged into ``old``: rows by kernel name; ``new``'s rows measured on another machine
    than ``old``'s are tagged with its ``host_label`` and its machine and peaks go under ``other_hosts``."""
    if old is None:
        return new
    label = host_label(new["machine"])
    elsewhere = label != host_label(old["machine"])
    report = dict(old)
    for section in ROW_SECTIONS:
        rows = new.get(section, [])
        if elsewhere and section != "neon":            # llvm-mca estimates depend on no host
            rows = [dict(r, host=label) for r in rows]
        names = {r["name"] for r in rows}
        kept = [r for r in old.get(section, []) if r["name"] not in names]
        if kept or rows:
            report[section] = sorted(kept + rows, key=lambda r: r["name"])
    measured = {r["name"] for section in ROW_SECTIONS for r in report.get(section, [])}
    skipped = {**old.get("x86_skipped", {}), **new.get("x86_skipped", {})}
    report["x86_skipped"] = {k: v for k, v in sorted(skipped.items()) if k not in measured}
    if elsewhere and (new.get("x86") or new.get("dense")):
        report["other_hosts"] = {**old.get("other_hosts", {}),
                                 label: {"machine": new["machine"], "peaks": new.get("peaks", {})}}
    return report


def _peaks(p: dict) -> list[str]:
    out = ["| instruction | G instr/s (median) | peak (median) | peak (min – max) | probes |", "|---|---|---|---|---|"]
    per = {"vpdpbusd_zmm": (64, "G MAC/s"), "vpopcntq_zmm": (1024, "binary G op/s (AND+popcount per bit)"),
           "vpdpbusd_ymm_vex": (32, "G MAC/s"),
           "vpdpbusd_zmm_mix_6x32": (64, "G MAC/s (6x32 tile: 2 loads + 6 broadcasts per 12, from L1)"),
           "vpdpbusd_zmm_mix_8x48": (64, "G MAC/s (8x48 tile: 3 loads + 8 broadcasts per 24, from L1)"),
           "tdpbusd": (16384, "G MAC/s")}                  # in the probes' order (bench_kernels.PROBES)
    measured, skipped = p.get("measured", {}), p.get("skipped", {})
    for k in (k for k in per if k in measured):
        n, unit, v = *per[k], measured[k]
        out.append(f"| {k} | {v['median'] / 1e9:.3f} | {v['median'] * n / 1e9:.0f} {unit} | "
                   f"{v['min'] * n / 1e9:.0f} – {v['max'] * n / 1e9:.0f} | {v['probes']} |")
    out += [f"| {k} | skipped: {skipped[k]} | – | – | – |" for k in per if k in skipped]
    return out + [""]


def _x86_table(rows: list[dict], skipped: dict[str, str]) -> list[str]:
    out = ["| kernel | instr | workload | kernel rate | % of peak | plain C | TVM (schedule) | × plain | × TVM | "
           "TVM unscheduled | × TVM unscheduled |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        pk = (f"{100 * r['fraction_of_peak']:.0f}% of {r['peak_instruction']}" if "fraction_of_peak" in r else
              f"– ({r['peak_instruction']} not probed: {r['peak_skipped']})" if "peak_skipped" in r else "–")
        if "fraction_of_load_mix" in r:
            pk += f" ({100 * r['fraction_of_load_mix']:.0f}% of its load mix)"
        tv = f"{r['tvm_rate']:.1f} ({r['tvm_schedule']})" if "tvm_rate" in r else "–"
        xt = f"{r['speedup_vs_tvm']:.2f}" if "speedup_vs_tvm" in r else "–"
        tu = f"{r['tvm_unscheduled_rate']:.1f}" if "tvm_unscheduled_rate" in r else "–"
        xu = f"{r['speedup_vs_tvm_unscheduled']:.2f}" if "speedup_vs_tvm_unscheduled" in r else "–"
        out.append(f"| {r['name']} | {r['length']} | {r['shape']} | {r['kernel_rate']:.1f} {r['unit']} | {pk} | "
                   f"{r['plain_rate']:.1f} | {tv} | {r['speedup_vs_plain']:.2f} | {xt} | {tu} | {xu} |")
    out += [f"| {name} | – | skipped: {reason} | – | – | – | – | – | – | – | – |" for name, reason in skipped.items()]
    return out + [""]


def _dense_table(rows: list[dict]) -> list[str]:
    out = ["| kernel | rows per tile | kernel rate (binary G op/s) | % of peak | TVM rfactor per tile | × | "
           "TVM unscheduled | × |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        pk = f"{100 * r['fraction_of_peak']:.0f}% of vpopcntq zmm" if "fraction_of_peak" in r else "–"
        out.append(f"| {r['name']} | {r['tile_rows']} | {r['kernel_rate']:.1f} | {pk} | {r['tvm_rate']:.1f} | "
                   f"{r['speedup_vs_tvm']:.2f} | {r['tvm_unscheduled_rate']:.1f} | {r['speedup_vs_tvm_unscheduled']:.2f} |")
    return out + [""]


def _machine_line(m: dict) -> str:
    return (f"Host: {m['cpu']} ({m['uarch_basis']}), micro-architecture `{m['uarch']}`, TVM target "
            f"`{json.dumps(m['tvm_target'])}`; x86 features: {' '.join(m['features']) or 'none'}.")


def markdown(report: dict, neon_acc_blocks: int, dense_rows: int, dense_bits: int) -> str:
    m = report["machine"]
    here = lambda rows: [r for r in rows if "host" not in r]
    rows = [r for section in ROW_SECTIONS for r in report.get(section, [])]
    out = ["# Kernel benchmarks", "", _machine_line(m), "",
           *provenance.lines(rows, run_of=lambda r: r.get("run") or {"command": "python scripts/bench_kernels.py"}), "",
           "Produced by `python scripts/bench_kernels.py`; every figure in a section comes from one run (a run of "
           "some ISAs replaces those kernels' rows and keeps the others; rows measured on another host have a "
           "section of their own, with that host's peaks).",
           "", f"Tools: {m['gcc']}; {m['clang']}; {m['llvm-mca']}; TVM {m['tvm']}.",
           f"x86 builds: gcc `{m['x86_flags']}`; AVX2 bitserial kernels and their plain C: gcc "
           f"`{m['avx2_bitserial_flags']}`, their TVM baselines: `-mcpu=haswell` (no AVX-512 popcount on either side); "
           f"NEON builds: clang `{m['neon_flags']}`.", ""]
    if p := report.get("peaks"):
        out += ["## Peaks measured in this run (12 independent register chains; tdpbusd: 4 tiles)", "",
                "The probe runs right before every x86 kernel, and each kernel's % of peak uses the probe of its "
                "own moment; the table gives the median and the range over the run's probes. The `mix` rows run "
                "a vpdpbusd tile's loads and dot products from L1 without loop or C traffic: the most a kernel "
                "of that tile shape can reach.", ""] + _peaks(p)
    if (rows := here(report.get("x86", []))) or report.get("x86_skipped"):
        out += ["## x86: time per L1-resident workload (median), side by side", "",
                "Rates are operations of the workload over its median time: int8 in G MAC/s, bitserial in binary "
                "G op/s (2 · rows · bits · abits · wbits). Plain C = the same workload as loops, gcc auto-vectorized.", ""]
        out += _x86_table(rows, report.get("x86_skipped", {}))
    if rows := here(report.get("dense", [])):
        out += [f"## x86: a whole 1-bit dense ({dense_rows} rows × {dense_bits} bits, weights in L2), side by side", "",
                "The A1W1 acc kernel's `_gemv` called once per row tile, against TVM's T.popcount dense of the same "
                "shape: rfactor-scheduled with an outer loop over tiles of the kernel's rows, and unscheduled "
                "(topi's expression as written, TVM's default lowering and LLVM's vectorizer). All three agree "
                "with numpy before timing.", ""] + _dense_table(rows)
    for label, other in report.get("other_hosts", {}).items():
        om = other["machine"]
        out += [f"## Measured on another host: {om['cpu']} (`{om['uarch']}`)", "", _machine_line(om),
                f"Tools: {om['gcc']}; x86 builds: gcc `{om['x86_flags']}`. Peaks of its run:", ""]
        out += _peaks(other["peaks"]) + _x86_table([r for r in report.get("x86", []) if r.get("host") == label], {})
        if dense := [r for r in report.get("dense", []) if r.get("host") == label]:
            out += _dense_table(dense)
    if rows := report.get("neon"):
        out += ["## NEON: llvm-mca cycles per call (steady state of 100 iterations), no hardware", "",
                "| kernel | program | kernel instr | A53 | A72 | TVM instr | TVM A53 | TVM A72 | kernel/TVM A53 | "
                "kernel/TVM A72 | plain C instr | plain A53 | plain A72 |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        g = lambda r, k, f="{:.1f}": f.format(r[k]) if k in r else "–"
        for r in rows:
            out.append(f"| {r['name']} | {r['program_length']} | {r['kernel_instructions']} | {g(r, 'kernel_cycles_cortex-a53')} | "
                       f"{g(r, 'kernel_cycles_cortex-a72')} | {g(r, 'tvm_instructions', '{}')} | {g(r, 'tvm_cycles_cortex-a53')} | "
                       f"{g(r, 'tvm_cycles_cortex-a72')} | {g(r, 'kernel_over_tvm_cortex-a53', '{:.2f}')} | "
                       f"{g(r, 'kernel_over_tvm_cortex-a72', '{:.2f}')} | {g(r, 'plain_instructions', '{}')} | "
                       f"{g(r, 'plain_cycles_cortex-a53')} | {g(r, 'plain_cycles_cortex-a72')} |")
        out += ["", "Kernel instructions count the whole compiled function (loads, stores, accumulation into `out`); "
                "`program` is the synthesized straight-line program alone. `acc` kernels are measured over "
                f"{neon_acc_blocks} K blocks (zeroed accumulators, the body per block, `_finish`) against TVM's "
                "rfactor lowering of the same K, both fully unrolled. Plain C that clang left as a loop gets no "
                "estimate (–). `8x64in128` is the paper's 8 rows × 8 bytes tile with two rows per Q register "
                "(`--row-bits 64`), compared with TVM's lowering of that same 8x64 tile. CGO 2020 Fig. 6 (A1W1, "
                "8 rows × 8 bytes): 24 synthesized vs 49 from TVM.", ""]
    return "\n".join(out)
