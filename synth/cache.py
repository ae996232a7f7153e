"""The kernel library: content-addressed, proof-carrying JSON entries in ``kernel_cache/``.

An entry's file name is its cache key, the hash of (ISA-spec version, kernel spec, cost model,
engine version). The entry also stores ``content_hash``, a hash of everything else in it, so a
corrupt or edited entry is detected and never used. Writes go to a temporary file renamed into
place under a cross-process file lock: concurrent writers never leave a half-written entry.

Anyone may drop a file into the folder, so a reader takes only regular files of entry size: ``entries``
skips anything else (a FIFO, a device node, a symbolic link, a huge file, a writer's temporary file)
with one warning naming it, and ``read`` opens without following links or blocking and reads at most
``MAX_BYTES``; a stray file can neither hang a reader nor exhaust its memory.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
import time
from pathlib import Path

from filelock import FileLock

from synth.files import TEMP_PREFIX, write_atomically

ROOT = Path(os.environ.get("QSYNTH_CACHE", Path(__file__).resolve().parent.parent / "kernel_cache"))
FORMAT = 1
MAX_BYTES = 8 << 20         # entries are tens of KiB (the largest about 50): a bigger file is not one
STALE_SECONDS = 3600.0      # a writer renames its temporary file within seconds; older ones were abandoned

log = logging.getLogger("qsynth.cache")
_WARNED: set[str] = set()


class CacheError(RuntimeError):
    """A cache entry is corrupt, tampered with, or unreadable."""


def _canonical(obj) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def cache_key(key: dict) -> str:
    return hashlib.sha256(_canonical(key)).hexdigest()[:24]


def content_hash(entry: dict) -> str:
    return hashlib.sha256(_canonical({k: v for k, v in entry.items() if k != "content_hash"})).hexdigest()


def path_for(key: str, root: Path = ROOT) -> Path:
    return root / f"{key}.json"


def _warn_once(message: str) -> None:
    """Log ``message`` unless this process already did: the cache is scanned once per ISA, per layer
    kind and per command, and each odd file is worth one line."""
    if message not in _WARNED:
        _WARNED.add(message)
        log.warning("kernel cache: %s", message)


def _odd(mode: int, path: Path) -> str | None:
    """Why a file of ``mode`` is no entry, or None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISLNK(mode):
        try:
            return f"a symbolic link (to {os.readlink(path)}), not a regular file"
        except OSError:                 # removed since
            return "a symbolic link, not a regular file"
    kinds = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a device node"), (stat.S_ISBLK, "a device node"),
             (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory"))
    return next((kind for test, kind in kinds if test(mode)), "a special file") + ", not a regular file"


def _contents(path: Path) -> bytes:
    """The bytes of a regular file of at most ``MAX_BYTES``, else ``CacheError``: checked before opening
    (no device is opened) and again on the open file (opened without following a link or blocking on a
    FIFO), so a file swapped in between is refused too."""
    odd = _odd(os.lstat(path).st_mode, path)
    if odd:
        raise CacheError(f"{path.name}: {odd}")
    with os.fdopen(os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC), "rb") as f:
        odd = _odd(os.fstat(f.fileno()).st_mode, path)
        if odd:
            raise CacheError(f"{path.name}: {odd}")
        data = f.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise CacheError(f"{path.name}: larger than {MAX_BYTES} bytes, not an entry")
    return data


def read(path: Path) -> dict:
    """Load and check one entry; ``CacheError`` names the entry when anything is wrong."""
    try:
        entry = json.loads(_contents(Path(path)))
    except (OSError, ValueError) as e:
        raise CacheError(f"{path.name}: unreadable ({e})") from None
    if not isinstance(entry, dict) or entry.get("format") != FORMAT:
        raise CacheError(f"{path.name}: not a format-{FORMAT} qsynth cache entry")
    if entry.get("content_hash") != content_hash(entry):
        raise CacheError(f"{path.name}: content hash mismatch (entry corrupt or edited)")
    if path.stem != entry.get("cache_key") or cache_key(entry["key"]) != entry["cache_key"]:
        raise CacheError(f"{path.name}: file name, cache key and key fields disagree")
    return entry


def store(entry: dict, root: Path = ROOT) -> Path:
    """Write ``entry`` atomically; returns its path."""
    entry = dict(entry, format=FORMAT, cache_key=cache_key(entry["key"]))
    entry["content_hash"] = content_hash(entry)
    root.mkdir(parents=True, exist_ok=True)
    path = path_for(entry["cache_key"], root)
    with FileLock(str(root / ".lock")):
        write_atomically(path, json.dumps(entry, indent=1, sort_keys=True) + "\n")
    return path


def entries(root: Path = ROOT) -> list[Path]:
    """The entry files under ``root``, sorted: its regular ``*.json`` files of at most ``MAX_BYTES``,
    examined with ``lstat`` (never opened). Any other file of that name is skipped with one warning
    naming it. A writer's temporary file is skipped quietly while its rename may be under way, and
    removed once older than ``STALE_SECONDS`` (left by an interrupted writer; a warning says so)."""
    out = []
    for path in sorted(root.glob("*.json")):
        try:
            st = path.lstat()
        except FileNotFoundError:       # renamed or removed since the listing
            continue
        if path.name.startswith(TEMP_PREFIX):
            if time.time() - st.st_mtime > STALE_SECONDS:
                _remove_stale(path)
        elif _odd(st.st_mode, path):
            _warn_once(f"skipping {path}: {_odd(st.st_mode, path)}")
        elif st.st_size > MAX_BYTES:
            _warn_once(f"skipping {path}: {st.st_size} bytes, larger than an entry ({MAX_BYTES} at most)")
        else:
            out.append(path)
    return out


def state(root: Path = ROOT) -> tuple:
    """The entries under ``root`` by name, inode, size and modification time: another value whenever
    an entry is written (``store`` renames a new file into place) or removed, so what is computed from
    the entries can be kept while it is the same."""
    out = []
    for path in entries(root):
        try:
            st = path.lstat()
        except FileNotFoundError:
            continue
        out.append((path.name, st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(out)


def readable(root: Path = ROOT):
    """(path, entry) of each entry under ``root`` that reads and checks (``read``); the others are
    skipped with one warning per process naming them."""
    for path in entries(root):
        try:
            yield path, read(path)
        except CacheError as e:
            _warn_once(f"skipping {e}")


def _remove_stale(path: Path) -> None:
    try:
        path.unlink()
        _warn_once(f"removed {path}, a temporary file left by an interrupted writer")
    except FileNotFoundError:
        pass
    except OSError as e:
        _warn_once(f"skipping {path}, a temporary file left by an interrupted writer (not removed: {e.strerror})")
