"""The kernel library's trust model: an entry is used only after this machine re-proved it.

An entry's content hash catches corruption, not tampering: anyone can recompute it. So the proof
is what is trusted. ``verdict`` re-derives and re-proves an entry from its spec and stage programs
(``synth.kernel.verify``); an entry that passes is *stamped*: its content hash is recorded in a
trust store kept outside the cache (``~/.cache/qsynth/verified.json``, or ``$QSYNTH_TRUST``) with
the fingerprint of the verifier's own source. Every use of an entry (``synth`` on a cache hit,
``emit``, ``test-kernels``, TVM registration) goes through ``load``/``load_all``: stamped entries
load at once, others are re-proved first, in parallel, and refused with their name when they do
not re-prove. A clone, a shared cache or a cluster worker's result is therefore re-proved on its
first use here; a change to the verifier (any source under ``synth/``, ``sketches/``,
``isa_specs/`` but the CLI, emission and host detection) invalidates every stamp.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from functools import cache as memoize
from multiprocessing import Pool
from pathlib import Path

from filelock import FileLock

from synth import cache
from synth.files import write_atomically

_SOURCES = ("synth", "sketches", "isa_specs")
# Modules that cannot change a verdict (the CLI, emission, host detection, reports): editing them
# keeps the stamps. Anything else under _SOURCES is the verifier's, and a new module is by default.
_NOT_VERIFIER = {"isa_specs/check.py", "isa_specs/host.py", "synth/cli.py", "synth/emit.py", "synth/emit_cli.py",
                 "synth/host_report.py", "synth/mutants.py", "synth/sweep.py", "synth/progress.py",
                 "synth/cluster.py"}
_NOT_VERIFIER_DIRS = ("synth/commands/",)          # the CLI's command modules


def store_path() -> Path:
    default = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "qsynth" / "verified.json"
    return Path(os.environ.get("QSYNTH_TRUST", default))


@memoize
def fingerprint() -> str:
    """Hash of the verifier's source: the ISA semantics, the specs, the provers."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for package in _SOURCES:
        for path in sorted((root / package).rglob("*.py")):
            name = path.relative_to(root).as_posix()
            if name in _NOT_VERIFIER or name.startswith(_NOT_VERIFIER_DIRS):
                continue
            h.update(name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


def _stamps() -> dict:
    try:
        return json.loads(store_path().read_text())
    except (OSError, ValueError):
        return {}


def stamped(entry: dict, stamps: dict | None = None) -> bool:
    return (_stamps() if stamps is None else stamps).get(entry["content_hash"]) == fingerprint()


def _record(verdicts: list[dict]) -> None:
    """Stamp the entries that re-proved and drop the stamps of those that did not."""
    if not verdicts:
        return
    path = store_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"):
        stamps = {h: f for h, f in _stamps().items() if f == fingerprint()}
        for v in verdicts:
            if v["content_hash"]:
                if v["ok"]:
                    stamps[v["content_hash"]] = fingerprint()
                else:
                    stamps.pop(v["content_hash"], None)
        write_atomically(path, json.dumps(stamps, indent=0, sort_keys=True) + "\n")


def verdict(path: Path) -> dict:
    """Re-prove one entry file. Never raises: a corrupt, malformed or ill-typed entry is a verdict
    with its reason, so a run over the whole cache goes on. ``entry`` is the content proved."""
    from synth.kernel import verify
    out = {"path": str(path), "file": Path(path).name, "name": None, "content_hash": None, "ok": False,
           "failures": [], "obligations": 0, "entry": None}
    try:
        entry = out["entry"] = cache.read(Path(path))
        out["name"], out["content_hash"] = entry.get("name"), entry["content_hash"]
        results = verify(entry)
    except cache.CacheError as e:
        out["failures"] = [str(e)]
        return out
    except Exception as e:          # malformed JSON fields: refuted, with what was wrong
        out["failures"] = [f"malformed entry: {type(e).__name__}: {e}"]
        return out
    out["obligations"] = len(results)
    out["failures"] = [f"{r['name']}: {r['result']}" + (f" ({r['detail']})" if r.get("detail") else "")
                       for r in results if r["result"] not in ("proved", "passed")]
    out["ok"] = not out["failures"]
    return out


def verify_paths(paths: list[Path], jobs: int | None = None):
    """Verdicts for ``paths`` in order, yielded as they come, proved in ``jobs`` worker processes;
    the trust store is updated with every verdict."""
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(paths)))
    done = []
    try:
        if jobs == 1:
            for p in paths:
                done.append(verdict(p))
                yield done[-1]
        else:
            with Pool(jobs) as pool:
                for v in pool.imap(verdict, paths):
                    done.append(v)
                    yield v
    finally:
        _record(done)


def admit(entry: dict, root: Path | None = None) -> dict:
    """A kernel entry made elsewhere (a cluster worker's result): stored in the cache under ``root``
    (default ``cache.ROOT``) and stamped only if it re-proves here, exactly as ``verdict`` proves a
    cached file; otherwise nothing is written. Returns the verdict (``path`` the stored file when ok)."""
    with tempfile.TemporaryDirectory(prefix="qsynth-admit-") as staging:
        try:
            staged = cache.store(entry, Path(staging))
        except Exception as e:      # not even an entry (no key, not JSON-serialisable)
            return {"path": None, "file": None, "name": None, "content_hash": None, "ok": False,
                    "failures": [f"malformed entry: {type(e).__name__}: {e}"], "obligations": 0, "entry": None}
        v = verdict(staged)
    if v["ok"]:
        path = cache.store(v["entry"], cache.ROOT if root is None else root)
        v["path"], v["file"] = str(path), path.name
        _record([v])
    return v


def load_all(paths: list[Path], jobs: int | None = None) -> tuple[list[dict], list[str]]:
    """(entries that are stamped or re-prove now, one line per refused entry)."""
    entries, refused, unstamped = {}, [], []
    stamps = _stamps()
    for p in paths:
        try:
            entry = cache.read(p)
        except cache.CacheError as e:
            refused.append(str(e))
            continue
        if stamped(entry, stamps):
            entries[p] = entry
        else:
            unstamped.append(p)
    for v in verify_paths(unstamped, jobs):
        if v["ok"]:
            entries[Path(v["path"])] = v["entry"]
        else:
            refused.append(f"{v['file']} {v['name']}: not proved here: {'; '.join(v['failures'])}")
    return [entries[p] for p in paths if p in entries], refused


def load(path: Path) -> dict:
    """One entry, re-proved unless stamped; ``CacheError`` naming it when it does not re-prove."""
    entries, refused = load_all([path], jobs=1)
    if refused:
        raise cache.CacheError(refused[0])
    return entries[0]
