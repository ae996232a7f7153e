"""The soundness suite of issue 18 in full: every mutant of the kernels in ``synth.mutants.SUITE``
classified by the verifier (and, where accepted, by plain Z3, or Bitwuzla where Z3 answers unknown),
totals written to ``benchmarks/mutation.{json,md}``. Exit status 1 when any mutant is wrongly accepted.

    python scripts/mutation_suite.py [-j N] [--out benchmarks]
"""
from __future__ import annotations

import argparse
import collections
import json
import sys
import tempfile
import time
from multiprocessing import Pool
from pathlib import Path

from synth import cache
from synth.files import write_atomically
from synth.mutants import SUITE, classify, mutants
from tvm_integration.bench import provenance

OUTCOMES = ("refused", "equivalent", "wrongly accepted", "undecided")


def _kernel(name: str) -> dict:
    for path in cache.entries():
        entry = cache.read(path)
        if entry["name"] == name:
            return entry
    raise SystemExit(f"mutation_suite: no cache entry named {name}")


def _classify_all(name: str) -> list[dict]:
    entry = _kernel(name)
    with tempfile.TemporaryDirectory() as scratch:
        return [dict(classify(m, entry, Path(scratch)), kernel=name) for m in mutants(entry)]


def _markdown(rows: list[dict], run: dict) -> str:
    lines = ["# Mutation suite (issue 18)", "",
             "Every mutant of a cached kernel is stored as a valid cache entry (content hash recomputed) and "
             "given to `qsynth cache verify`'s verifier; an accepted one is checked by plain Z3, and by Bitwuzla "
             "where Z3 answers unknown.", "",
             f"- Run: {provenance.described(run)}.", "",
             "| kernel | mutants | " + " | ".join(OUTCOMES) + " |", "|---|---:|" + "---:|" * len(OUTCOMES)]
    by_kernel = collections.defaultdict(list)
    for r in rows:
        by_kernel[r["kernel"]].append(r)
    for name, rs in [*by_kernel.items(), ("**all**", rows)]:
        c = collections.Counter(r["outcome"] for r in rs)
        lines.append(f"| {name} | {len(rs)} | " + " | ".join(str(c[o]) for o in OUTCOMES) + " |")
    lines += ["", "| mutation | mutants | " + " | ".join(OUTCOMES) + " |", "|---|---:|" + "---:|" * len(OUTCOMES)]
    by_kind = collections.defaultdict(list)
    for r in rows:
        by_kind[r["kind"]].append(r)
    for kind, rs in sorted(by_kind.items()):
        c = collections.Counter(r["outcome"] for r in rs)
        lines.append(f"| {kind} | {len(rs)} | " + " | ".join(str(c[o]) for o in OUTCOMES) + " |")
    bad = [r for r in rows if r["outcome"] in ("wrongly accepted", "undecided")]
    lines += ["", "Wrongly accepted or undecided: " + ("none." if not bad else "")]
    lines += [f"- {r['kernel']}: {r['mutant']} ({r['outcome']}: {r['reason']})" for r in bad]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-j", "--jobs", type=int, default=2)
    parser.add_argument("--out", default="benchmarks")
    args = parser.parse_args()
    record = provenance.record(args.jobs)          # threads: the worker processes
    t0 = time.monotonic()
    with Pool(args.jobs) as pool:
        rows = [r for rs in pool.imap_unordered(_classify_all, SUITE) for r in rs]
    seconds = time.monotonic() - t0
    record = provenance.finished(record)
    totals = collections.Counter(r["outcome"] for r in rows)
    out = Path(args.out)
    write_atomically(out / "mutation.json", json.dumps(
        {"run": record, "kernels": SUITE, "seconds": round(seconds, 1), "totals": {o: totals[o] for o in OUTCOMES},
         "mutants": len(rows), "rows": rows}, indent=1) + "\n")
    write_atomically(out / "mutation.md", _markdown(rows, record))
    print(f"{len(rows)} mutants: " + ", ".join(f"{totals[o]} {o}" for o in OUTCOMES), file=sys.stderr)
    return 1 if totals["wrongly accepted"] else 0


if __name__ == "__main__":
    sys.exit(main())
