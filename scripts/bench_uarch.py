#!/usr/bin/env python3
"""Micro-architecture evidence for the kernel library's x86 choices, measured on this host: the
int8 tile load mixes of ``scripts/peak_x86.c`` against the register-only vpdpbusd zmm peak (does
the AVX-512 tile's shape bound it here?), and each AVX-512 bitserial acc kernel against the AVX2
one of the same configuration (is 512-bit still the better choice?). Rounds are interleaved, so
every comparison is side by side; figures are medians over rounds. Probes and kernels the host
cannot run are listed as skipped. Next to the measured mixes, what LLVM's scheduling model of the
host predicts for the same loops (llvm-mca of LLVM 19: LLVM 14 has no znver4 model, and its znver3
model rejects every AVX-512 instruction). Writes ``benchmarks/uarch_<uarch>.{json,md}``.

    python scripts/bench_uarch.py [--rounds N] [--trials N] [--out DIR]
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from scripts import bench_kernels as bk  # noqa: E402

from isa_specs import host  # noqa: E402
from emit.harness import KernelDriver, selected_entries  # noqa: E402
from synth.files import write_atomically  # noqa: E402
from tvm_integration.bench import provenance  # noqa: E402
from synth.kernel import spec_from_key  # noqa: E402

MIX_PROBES = ("vpdpbusd_zmm", "vpdpbusd_zmm_mix_6x32", "vpdpbusd_zmm_mix_8x48")
PROBE_FUNCTIONS = {"vpdpbusd_zmm": "dpbusd_zmm", "vpdpbusd_zmm_mix_6x32": "mix_6x32", "vpdpbusd_zmm_mix_8x48": "mix_8x48"}
MCA = "llvm-mca-19"


def loop_body(asm: list[str], function: str) -> list[str]:
    """The instructions of ``function``'s loop in gcc -S output: from its first label to the jne back to it."""
    start = asm.index(f"{function}:")
    label = next(i for i in range(start, len(asm)) if re.match(r"^\.L\d+:$", asm[i]))
    body = []
    for line in asm[label + 1:]:
        text = line.strip()
        if text and not text.startswith((".", "#")):
            body.append(text)
        if text.startswith("jne"):
            return body
    raise ValueError(f"no loop in {function}")


def mca_predictions(uarch: str) -> dict[str, float]:
    """Per probe, the model's cycles per vpdpbusd of its loop on ``uarch``."""
    asm = bk.run(["gcc", "-O2", "-S", "-o", "-", str(ROOT / "scripts" / "peak_x86.c")]).splitlines()
    out = {}
    for probe, function in PROBE_FUNCTIONS.items():
        body = loop_body(asm, function)
        mca = bk.run([MCA, f"-mcpu={uarch}", "-iterations=100"], "\n".join(body) + "\n")
        out[probe] = int(re.search(r"Total Cycles:\s+(\d+)", mca)[1]) / 100 / sum(i.startswith("vpdpbusd") for i in body)
    return out


def build(source: str, flags: list[str], exe: Path) -> Path:
    src = exe.with_suffix(".c")
    src.write_text(source)
    bk.run(["gcc", *flags, "-o", str(exe), str(src)])
    return exe


def bitserial_pairs() -> tuple[list[tuple[dict, dict]], dict[str, str]]:
    """(AVX2, AVX-512) acc kernels of the same bit widths and encoding, and the kernels skipped."""
    by_isa, skipped = {}, {}
    for isa in ("avx2", "avx512"):
        for e in selected_entries(isa, ["_acc_"])[0]:
            spec = spec_from_key(e["spec"])
            if spec.kind != "bitserial":
                continue
            if reason := KernelDriver(e).missing():
                skipped[e["name"]] = reason
                continue
            by_isa[(isa, spec.abits, spec.wbits, spec.encoding)] = e
    pairs = [(e, by_isa[("avx512", *key[1:])]) for key, e in sorted(by_isa.items(), key=lambda kv: kv[0])
             if key[0] == "avx2" and ("avx512", *key[1:]) in by_isa]
    return pairs, skipped


def measure(rounds: int, trials: int) -> dict:
    skipped_probes = bk.probe_skips(host.cpu_flags())
    probes = [p for p in MIX_PROBES if p not in skipped_probes]
    pairs, skipped_kernels = bitserial_pairs()
    with tempfile.TemporaryDirectory() as tmp:
        peak = build((ROOT / "scripts" / "peak_x86.c").read_text(), ["-O2"], Path(tmp) / "peak")
        exes = {}
        for entry in (e for pair in pairs for e in pair):
            spec = spec_from_key(entry["spec"])
            exes[entry["name"]] = (build(bk.bench_source(entry, spec, bk.workload(spec), trials, 20000),
                                         bk.x86_flags(spec), Path(tmp) / entry["name"]), bk.workload(spec)["ops"])
        samples = {"probes": [], "kernels": []}
        for r in range(rounds):
            if probes:
                samples["probes"].append(json.loads(bk.run([str(peak), *probes])))
            rates = {}
            for name, (exe, ops) in exes.items():
                res = json.loads(bk.run([str(exe)]))
                if "error" in res:
                    raise RuntimeError(f"{name}: {res['error']}")
                rates[name] = ops / res["kernel_seconds"] / 1e9
            samples["kernels"].append(rates)
            print(f"  round {r + 1}/{rounds}", file=sys.stderr)
    m = host.model()
    out = {"host": {"model_name": m.model_name, "uarch": m.uarch, "uarch_basis": m.uarch_basis},
           "rounds": rounds, "trials": trials, "skipped_probes": skipped_probes, "skipped_kernels": skipped_kernels,
           "samples": samples, "mixes": [], "bitserial": []}
    if "vpdpbusd_zmm" in probes:
        model = mca_predictions(m.uarch)
        out["mca"] = {"tool": next(l.strip() for l in bk.run([MCA, "--version"]).splitlines() if "version" in l), "mcpu": m.uarch,
                      "cycles_per_vpdpbusd": model}
        for mix in probes[1:]:
            ratio = [s[mix] / s["vpdpbusd_zmm"] for s in samples["probes"]]
            out["mixes"].append({"probe": mix, "g_mac_s": 64 * float(np.median([s[mix] for s in samples["probes"]])) / 1e9,
                                 "fraction_of_peak": float(np.median(ratio)), "min": min(ratio), "max": max(ratio),
                                 "mca_fraction_of_peak": model["vpdpbusd_zmm"] / model[mix]})
        out["peak_g_mac_s"] = 64 * float(np.median([s["vpdpbusd_zmm"] for s in samples["probes"]])) / 1e9
    for avx2, avx512 in pairs:
        ratio = [s[avx512["name"]] / s[avx2["name"]] for s in samples["kernels"]]
        med = lambda e: float(np.median([s[e["name"]] for s in samples["kernels"]]))
        out["bitserial"].append({"avx2": avx2["name"], "avx512": avx512["name"], "avx2_rate": med(avx2),
                                 "avx512_rate": med(avx512), "avx512_over_avx2": float(np.median(ratio)),
                                 "min": min(ratio), "max": max(ratio)})
    return out


def markdown(rep: dict) -> str:
    h = rep["host"]
    lines = [f"# Micro-architecture evidence: {h['model_name']} ({h['uarch_basis']}), `{h['uarch']}`", "",
             f"- Run: {provenance.described(rep['run'])}. Every figure from one run, rounds interleaved (side by "
             "side), medians over rounds.", ""]
    if rep["mixes"]:
        lines += ["## int8: the AVX-512 tile load mixes against the register-only vpdpbusd zmm peak", "",
                  f"Register-only peak: {rep['peak_g_mac_s']:.0f} G MAC/s. A mix runs a tile's B loads, A broadcasts "
                  "and vpdpbusd from L1 without loop or C traffic; its fraction is taken within each round. "
                  f"Model: {rep['mca']['tool']} `-mcpu={rep['mca']['mcpu']}` on the same loops, cycles per vpdpbusd "
                  f"(register-only: {rep['mca']['cycles_per_vpdpbusd']['vpdpbusd_zmm']:.2f}) and the fraction of "
                  "the register-only rate that implies.", "",
                  "| probe | G MAC/s | fraction of peak (median) | min – max | model: cycles per vpdpbusd | "
                  "model: fraction of peak |", "|---|---|---|---|---|---|"]
        lines += [f"| {x['probe']} | {x['g_mac_s']:.0f} | {100 * x['fraction_of_peak']:.1f}% | "
                  f"{100 * x['min']:.1f} – {100 * x['max']:.1f}% | "
                  f"{rep['mca']['cycles_per_vpdpbusd'][x['probe']]:.2f} | {100 * x['mca_fraction_of_peak']:.1f}% |"
                  for x in rep["mixes"]]
        lo, hi = (f(rep["mixes"], key=lambda x: x["fraction_of_peak"]) for f in (min, max))
        overlap = max(x["min"] for x in rep["mixes"]) <= min(x["max"] for x in rep["mixes"])
        lines += ["", f"{hi['probe']} {100 * (hi['fraction_of_peak'] - lo['fraction_of_peak']):.1f} points above "
                  f"{lo['probe']}: {'within' if overlap else 'beyond'} the rounds' ranges.", ""]
    lines += [f"Skipped probe {p}: {reason}." for p, reason in rep["skipped_probes"].items() if p in MIX_PROBES]
    if rep["bitserial"]:
        lines += ["## bitserial: AVX-512 acc kernels against the AVX2 ones of the same configuration", "",
                  "Binary G op/s (2 · rows · bits · abits · wbits per second) on each kernel's own L1-resident "
                  "workload (scripts/bench_kernels.py's); the ratio is taken within each round.", "",
                  "| AVX2 kernel | AVX-512 kernel | AVX2 | AVX-512 | AVX-512 / AVX2 (median) | min – max |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {b['avx2']} | {b['avx512']} | {b['avx2_rate']:.0f} | {b['avx512_rate']:.0f} | "
                  f"{b['avx512_over_avx2']:.2f} | {b['min']:.2f} – {b['max']:.2f} |" for b in rep["bitserial"]]
        ratios = [b["avx512_over_avx2"] for b in rep["bitserial"]]
        lines += ["", f"AVX-512 / AVX2 over {len(ratios)} configurations: median {np.median(ratios):.2f}, "
                  f"min {min(ratios):.2f}, max {max(ratios):.2f}.", ""]
    lines += [f"Skipped kernel {name}: {reason}." for name, reason in rep["skipped_kernels"].items()]
    return "\n".join(lines).rstrip() + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--trials", type=int, default=9, help="timing trials per kernel run (median)")
    parser.add_argument("--out", default=str(ROOT / "benchmarks"))
    args = parser.parse_args()
    record = provenance.record(1)
    rep = measure(args.rounds, args.trials) | {"run": provenance.finished(record)}
    out, uarch = Path(args.out), rep["host"]["uarch"]
    write_atomically(out / f"uarch_{uarch}.json", json.dumps(rep, indent=2, sort_keys=True) + "\n")
    text = markdown(rep)
    write_atomically(out / f"uarch_{uarch}.md", text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
