"""The kernel library: content-addressed, proof-carrying JSON entries in ``kernel_cache/``.

An entry's file name is its cache key, the hash of (ISA-spec version, kernel spec, cost model,
engine version). The entry also stores ``content_hash``, a hash of everything else in it, so a
corrupt or edited entry is detected and never used. Writes go to a temporary file renamed into
place under a cross-process file lock: concurrent writers never leave a half-written entry.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from filelock import FileLock

from synth.files import write_atomically

ROOT = Path(os.environ.get("QSYNTH_CACHE", Path(__file__).resolve().parent.parent / "kernel_cache"))
FORMAT = 1


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


def read(path: Path) -> dict:
    """Load and check one entry; ``CacheError`` names the entry when anything is wrong."""
    try:
        entry = json.loads(path.read_text())
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
    return sorted(root.glob("*.json"))
