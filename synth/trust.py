"""The kernel library's trust model: an entry is used only after this machine re-proved it.

An entry's content hash catches corruption, not tampering: anyone can recompute it. So the proof
is what is trusted. ``verdict`` re-derives and re-proves an entry from its spec and stage programs
(``synth.kernel.verify``); an entry that passes is *stamped*: its content hash is recorded in a
trust store kept outside the cache (``~/.cache/qsynth/verified.json``, or ``$QSYNTH_TRUST``) with
the fingerprint of the verifier's own source. Every use of an entry (``synth`` on a cache hit,
``emit``, ``test-kernels``, TVM registration) goes through ``load``/``load_all``: stamped entries
load at once, others are re-proved first, in parallel (by fresh interpreters, not forks of the
caller: ``_provers``), and refused with their name when they do not re-prove. A clone, a shared
cache or a cluster worker's result is therefore re-proved on its first use here; a change to the
verifier (any source under ``isa_specs/``, ``sketches/``, ``synth/``) invalidates every stamp.
"""
from __future__ import annotations

import hashlib
import json
import os
import selectors
import subprocess
import sys
import tempfile
from functools import cache as memoize
from pathlib import Path

from filelock import FileLock

from isa_specs import derived_files
from synth import cache
from synth.files import write_atomically

# The packages a verdict depends on, whole: the ISA semantics and lane algebras, the sketches, and
# the verifier (specs, stages, CEGIS, provers, cache, this module). Emission, the operators and the
# application import them and never the reverse (tests/test_architecture.py), so nothing a proof
# rests on lives outside these three.
_SOURCES = ("isa_specs", "sketches", "synth")


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
            h.update(name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


def _stamps() -> dict:
    """The stamps, none when the store is missing or unreadable; ignored (every entry re-proved, one warning)
    unless the store is this user's own file that nobody else can change, since a stamp is what makes an
    entry load unproved."""
    path = store_path()
    if not os.path.lexists(path):
        return {}
    try:
        derived_files.safe_parents(path)
        stamps = json.loads(derived_files.own_file(path))
    except (derived_files.UnsafeFolder, derived_files.BadArtifact) as e:
        _warn_once(f"qsynth: warning: trust store {path} ignored, every kernel entry is re-proved: {e}")
        return {}
    except ValueError:
        return {}
    return stamps if isinstance(stamps, dict) else {}


@memoize
def _warn_once(message: str) -> None:
    print(message, file=sys.stderr)


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
        for v in (map(verdict, paths) if jobs == 1 else _provers(paths, jobs)):
            done.append(v)
            yield v
    finally:
        _record(done)


# A prover process runs the verifier of the caller's own source tree (the one ``fingerprint`` hashed).
_PROVER = "import sys; sys.path.insert(0, {root!r}); from synth.trust import _serve; _serve()"


def _provers(paths: list[Path], jobs: int):
    """``verdict`` of each path, in order, computed by ``jobs`` new interpreters, each given one path
    at a time. Not forks of this process (``multiprocessing``'s default here): a fork inherits the
    caller's state, and a forked prover that garbage-collected an onnxruntime session the caller (a
    test) had dropped hung in onnxruntime's thread pool (pthread_cond_destroy, 15 min). Not
    ``multiprocessing``'s spawn or forkserver either: their workers import the caller's ``__main__``,
    so a script that calls ``compile_model`` at top level without an ``if __name__ == "__main__"``
    guard re-ran itself in every worker, and the Pool replaced the failing workers for ever (a hang).
    A prover that dies (a crash, a kill) gives its path a failed verdict and is replaced."""
    command = [sys.executable, "-c", _PROVER.format(root=str(Path(__file__).resolve().parent.parent))]
    todo, ready, busy, started = list(enumerate(paths))[::-1], {}, {}, []
    events = selectors.DefaultSelector()

    def start() -> subprocess.Popen:
        proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        started.append(proc)
        events.register(proc.stdout, selectors.EVENT_READ, proc)
        return proc

    def give(proc: subprocess.Popen) -> None:
        if todo:
            busy[proc] = todo.pop()
            try:
                proc.stdin.write(json.dumps(str(busy[proc][1])) + "\n")
                proc.stdin.flush()
            except OSError:         # already dead: its end of file is read next
                pass

    try:
        for _ in range(jobs):
            give(start())
        following = 0
        while following < len(paths):
            for key, _ in events.select():
                proc = key.data
                line = proc.stdout.readline()
                i, path = busy.pop(proc)
                if line:
                    ready[i] = json.loads(line)
                else:
                    events.unregister(proc.stdout)
                    proc.stdout.close()
                    ready[i] = _died(path, proc.wait())
                    proc = start() if todo else None
                if proc is not None:
                    give(proc)
            while following in ready:
                yield ready.pop(following)
                following += 1
    finally:
        for proc in started:
            if proc in busy:
                proc.kill()         # abandoned mid-proof (the caller stopped early, Ctrl-C)
            try:
                proc.stdin.close()  # an idle prover exits at the end of its input
            except OSError:
                pass
            proc.wait()
            proc.stdout.close()
        events.close()


def _died(path: Path, status: int) -> dict:
    return {"path": str(path), "file": Path(path).name, "name": None, "content_hash": None, "ok": False,
            "failures": [f"the prover process died (exit status {status})"], "obligations": 0, "entry": None}


def _serve() -> None:
    """A prover process (``_provers``): reads one JSON path a line, writes its verdict as one JSON
    line. Whatever else would go to standard output (a library's print) goes to standard error."""
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    for line in sys.stdin:
        out.write(json.dumps(verdict(Path(json.loads(line)))) + "\n")
        out.flush()


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


# Entries refused in this process (content hash -> the reason) and the reasons already reported: the
# verifier's source does not change while a process runs, so a refused entry would be refused again;
# re-proving it at every lookup (a model looks its kernels up per operator) cost 7 tampered entries
# about 450 warning lines in one `qsynth inspect`, 36 s instead of 15.
_REFUSED: dict[str, str] = {}
_REPORTED: set[str] = set()


def load_all(paths: list[Path], jobs: int | None = None) -> tuple[list[dict], list[str]]:
    """(entries that are stamped or re-prove now, one line per refused entry). An entry refused once is
    refused at once for the rest of the process (not re-proved), never among the entries; its line is
    returned on every call, for callers that count refusals (``unreported`` for those that log them)."""
    entries, refused, unstamped = {}, [], []
    stamps = _stamps()
    for p in paths:
        try:
            entry = cache.read(p)
        except cache.CacheError as e:
            refused.append(str(e))
            continue
        if entry["content_hash"] in _REFUSED:
            refused.append(_REFUSED[entry["content_hash"]])
        elif stamped(entry, stamps):
            entries[p] = entry
        else:
            unstamped.append((p, entry))
    if unstamped:
        # one process re-proves, the others wait and then load its stamps: the suite's two workers each
        # re-proved the whole cache while collecting (45 s each, four provers on two cores)
        store_path().parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(store_path()) + ".prove.lock"):
            stamps = _stamps()
            todo = [(p, entry["content_hash"]) for p, entry in unstamped if not stamped(entry, stamps)]
            entries.update((p, entry) for p, entry in unstamped if stamped(entry, stamps))
            for v, (_, content) in zip(verify_paths([p for p, _ in todo], jobs), todo):
                if v["ok"]:
                    entries[Path(v["path"])] = v["entry"]
                else:
                    refused.append(_REFUSED.setdefault(content, f"{v['file']} {v['name']}: not proved here: "
                                                                f"{'; '.join(v['failures'])}"))
    return [entries[p] for p in paths if p in entries], list(dict.fromkeys(refused))


def unreported(lines: list[str]) -> list[str]:
    """The refusal lines not yet returned here in this process: each warning is logged once, not at
    every lookup (7 tampered entries made one qsynth inspect print ~450 lines)."""
    new = [line for line in lines if line not in _REPORTED]
    _REPORTED.update(new)
    return new


def load(path: Path) -> dict:
    """One entry, re-proved unless stamped; ``CacheError`` naming it when it is unreadable or does not
    re-prove (now or earlier in this process)."""
    entries, _ = load_all([path], jobs=1)
    if entries:
        return entries[0]
    content = cache.read(path)["content_hash"]
    raise cache.CacheError(_REFUSED.get(content, f"{Path(path).name}: not proved here"))
