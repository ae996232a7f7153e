#!/usr/bin/env python3
"""Re-key the kernel cache after an edit of an ISA module that does not change its semantics.

``ISA.version`` hashes the source of the ISA's module (and of ``isa_specs/lanes.py`` and
``instruction.py``) and is part of every cache key (``synth/kernel.py`` ``cache_key_fields``), so
even a refactoring of ``isa_specs/<isa>.py`` leaves every cached kernel of that ISA under a key no
lookup makes. This re-proves each such entry under the current version as ``qsynth cache verify``
does (``synth/trust.py`` ``verdict``: re-derived from its spec and stage programs, every stage and
the composition proved, the random test run) and stores it under its new key, its content otherwise
unchanged; the old file is removed.

All or nothing: the re-keyed entries are proved in a staging folder first, and if one does not
re-prove (the edit did change a semantic, or a proof timed out), the cache is left as it was, every
refusal is printed and the exit status is 1. Only entries whose key differs from the current one in
``isa_version`` alone are re-keyed: an entry of an older engine must be synthesized again.

Afterwards ``qsynth sweep --isa <isa>`` rewrites ``benchmarks/synthesis.{json,md}`` with the new
keys (it loads every entry from the cache).

Usage: python scripts/rekey_cache.py --isa avx512 [--isa ...] [-j JOBS]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from filelock import FileLock

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from isa_specs import ISA_NAMES                              # noqa: E402
from synth import cache, trust                               # noqa: E402
from synth.kernel import cache_key_fields, spec_from_key     # noqa: E402

_DERIVED = ("format", "cache_key", "content_hash")     # recomputed by cache.store


def stale(isas: list[str], root: Path) -> tuple[list[tuple[Path, dict]], list[str]]:
    """(old path, entry under its current key) for every entry of ``isas`` whose key is current
    but for ``isa_version``; and one note per entry left as it is."""
    found, notes = [], []
    for path in cache.entries(root):
        try:
            entry = cache.read(path)
            spec = spec_from_key(entry["spec"])
        except (cache.CacheError, KeyError, TypeError, ValueError) as e:
            notes.append(f"{path.name}: unreadable, left as it is ({e})")
            continue
        if spec.isa not in isas:
            continue
        current = cache_key_fields(spec, entry["key"]["cost"])
        if entry["key"] == current:
            continue
        if dict(entry["key"], isa_version=current["isa_version"]) != current:
            notes.append(f"{path.name} {entry['name']}: its key differs in more than isa_version (another "
                         "engine?); left as it is, synthesize it anew")
        elif cache.path_for(cache.cache_key(current), root).exists():
            notes.append(f"{path.name} {entry['name']}: an entry under the current key exists already; "
                         "left as it is")
        else:
            found.append((path, {k: v for k, v in entry.items() if k not in _DERIVED} | {"key": current}))
    return found, notes


def prove(entries: list[dict], jobs: int | None) -> list[dict]:
    """``trust.verdict`` of each entry, stored in a staging folder (the cache is not touched);
    the entries that re-prove are stamped trusted."""
    with tempfile.TemporaryDirectory(prefix="qsynth-rekey-") as staging:
        staged = [cache.store(entry, Path(staging)) for entry in entries]
        verdicts = []
        for v in trust.verify_paths(staged, jobs):
            print(f"{'ok  ' if v['ok'] else 'FAIL'} {v['name']}: "
                  + ("; ".join(v["failures"]) or f"{v['obligations']} obligations re-proved"), flush=True)
            verdicts.append(v)
        return verdicts


def move(old: list[Path], proved: list[dict], root: Path) -> list[Path]:
    """Store every proved entry under its new key, then remove the old files. A failed write
    removes the new files written before it, so the cache is left as it was."""
    written = []
    try:
        for entry in proved:
            written.append(cache.store(entry, root))
    except BaseException:
        for path in written:
            path.unlink(missing_ok=True)
        raise
    with FileLock(str(root / ".lock")):
        for path in old:
            path.unlink()
    return written


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--isa", action="append", required=True, choices=ISA_NAMES,
                    help="the ISA whose module was edited (repeat for several)")
    ap.add_argument("-j", "--jobs", type=int, default=None, help="prover processes (default: one per core)")
    args = ap.parse_args()
    root = cache.ROOT
    found, notes = stale(args.isa, root)
    for note in notes:
        print(f"note: {note}")
    if not found:
        print(f"{root}: no entry of {', '.join(args.isa)} under an older ISA version")
        return 0
    print(f"re-proving {len(found)} entries of {', '.join(args.isa)} under the current ISA version", flush=True)
    verdicts = prove([entry for _, entry in found], args.jobs)
    refused = [(path, v) for (path, _), v in zip(found, verdicts) if not v["ok"]]
    if refused:
        for path, v in refused:
            print(f"error: {path.name} {v['name']} does not re-prove under the current ISA version: "
                  + "; ".join(v["failures"]), file=sys.stderr)
        print(f"error: {len(refused)} of {len(found)} entries do not re-prove; the cache is unchanged",
              file=sys.stderr)
        return 1
    written = move([path for path, _ in found], [v["entry"] for v in verdicts], root)
    print(f"re-keyed {len(written)} entries in {root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
