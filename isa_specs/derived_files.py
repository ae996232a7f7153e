"""The files qsynth derives and later loads or runs (instruction harnesses, compiled kernels, their LLVM
IR, compiled models): kept in folders only this user can change, each beside a sidecar recording its
digest when it was written, and checked before every use, so that a planted, edited, truncated or linked
file is never used (issue 46). The lowest package holds it: the instruction harnesses (check.py) are the
first such files."""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import stat
import sys
import tempfile
from pathlib import Path
from typing import Callable

from filelock import FileLock

# The name of a temporary file beside its target: readers of a folder written this way skip such names
# (synth/cache.py), since a writer killed between its write and its rename leaves one behind.
TEMP_PREFIX = ".tmp-"


class UnsafeFolder(RuntimeError):
    """The folder is not private to this user: nothing is loaded from it or written to it."""


class BadArtifact(RuntimeError):
    """A derived file that must not be used (damaged, foreign, or not matching its sidecar)."""


def cache_root() -> Path:
    """``$XDG_CACHE_HOME/qsynth`` (default ``~/.cache/qsynth``): where every derived file is kept."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "qsynth"


def cache_folder(name: str) -> Path:
    """The folder ``name`` of ``cache_root()``, private to this user (``private_folder``)."""
    return private_folder(cache_root() / name)


def private_folder(folder: Path) -> Path:
    """``folder``, created mode 0700 if missing; ``UnsafeFolder`` unless it is a directory (not a link)
    owned by this user that nobody else can write, under folders each owned by this user or root and
    writable by others only with the sticky bit."""
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        folder = folder.parent.resolve() / folder.name
        folder.mkdir(mode=0o700, exist_ok=True)
        st = os.lstat(folder)
    except OSError as e:
        raise UnsafeFolder(f"{folder}: {e.strerror}")
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafeFolder(f"{folder} is not a directory")
    if st.st_uid != os.getuid():
        raise UnsafeFolder(f"{folder} is owned by uid {st.st_uid}, not this user")
    if st.st_mode & 0o022:
        raise UnsafeFolder(f"{folder} is writable by other users (mode {stat.S_IMODE(st.st_mode):o})")
    safe_parents(folder)
    return folder


def safe_parents(path: Path) -> None:
    """``UnsafeFolder`` unless every folder above ``path`` is owned by this user or root and writable by
    others only with the sticky bit (so nobody else can rename ``path`` away and put another in its place)."""
    for parent in path.parents:
        st = os.stat(parent)
        if st.st_uid not in (0, os.getuid()) or (st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX):
            raise UnsafeFolder(f"{parent}, above {path.name}, can be changed by other users")


def own_file(path: Path) -> bytes:
    """The bytes of ``path``, read without following a link; BadArtifact unless it is a regular file of
    this user's that nobody else can write."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)      # a FIFO must not block
    except OSError as e:
        raise BadArtifact(f"{path.name}: {e.strerror}")
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
            raise BadArtifact(f"{path.name} is not a regular file of this user's that only it can write")
        return f.read()


def sidecar_hash(sidecar: dict) -> str:
    """The SHA-256 of a sidecar's fields but its own hash: an edit to any of them shows."""
    rest = {k: v for k, v in sidecar.items() if k != "sidecar_sha256"}
    return hashlib.sha256(json.dumps(rest, sort_keys=True).encode()).hexdigest()


def digest_sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".sha256.json")


def sealed(data: bytes, **fields) -> dict:
    """A sidecar of ``data``: ``fields``, its size and SHA-256, and the sidecar's own hash."""
    sidecar = dict(fields, size=len(data), sha256=hashlib.sha256(data).hexdigest())
    sidecar["sidecar_sha256"] = sidecar_hash(sidecar)
    return sidecar


def store_digested(built: Path, path: Path) -> None:
    """Move ``built`` (a file in ``path``'s folder) to ``path``, mode 0600 or 0700 as it was executable,
    with a sidecar of its size and SHA-256 written first (a reader that finds the file also finds it)."""
    sidecar = sealed(built.read_bytes())
    os.chmod(built, 0o700 if os.stat(built).st_mode & 0o100 else 0o600)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=TEMP_PREFIX, suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(sidecar, f)
    os.replace(tmp, digest_sidecar(path))
    os.replace(built, path)


def check_digested(path: Path, sidecar_path: Path | None = None) -> dict:
    """The sidecar (``sidecar_path``, default ``digest_sidecar(path)``) once it and ``path`` are this
    user's own files, it is intact and ``path`` has the size and SHA-256 it recorded (``sealed``);
    BadArtifact otherwise."""
    sidecar_path = sidecar_path or digest_sidecar(path)
    try:
        sidecar = json.loads(own_file(sidecar_path))
    except ValueError as e:
        raise BadArtifact(f"{sidecar_path.name} is not JSON ({e})")
    if not isinstance(sidecar, dict) or sidecar.get("sidecar_sha256") != sidecar_hash(sidecar):
        raise BadArtifact(f"{sidecar_path.name} is damaged or edited (its own hash does not match)")
    data = own_file(path)
    if len(data) != sidecar.get("size") or hashlib.sha256(data).hexdigest() != sidecar.get("sha256"):
        raise BadArtifact(f"{path.name} does not match the digest recorded when it was written (edited, "
                          "truncated or replaced)")
    return sidecar


def delete(path: Path) -> None:
    """``path`` gone, whatever it is (a directory's contents too, a link's target not)."""
    with contextlib.suppress(FileNotFoundError):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()


def remove_digested(path: Path) -> None:
    """``path`` and its sidecar gone, whatever they are."""
    for p in (path, digest_sidecar(path)):
        delete(p)


def cached_build(output: Path, build: Callable[[Path], None], what: str) -> Path:
    """``output`` once it matches the digest it was written with, else (missing, damaged, foreign:
    removed with one warning line naming ``what``) built anew: ``build(path)`` writes a file at ``path``,
    in a temporary folder beside ``output``, which is then stored with its digest. Under a file lock."""
    with FileLock(str(output) + ".lock"):
        if output.is_symlink() or output.exists() or digest_sidecar(output).exists():
            try:
                check_digested(output)
                return output
            except BadArtifact as e:
                print(f"qsynth: warning: {what}: {e}; removed it, building anew", file=sys.stderr)
                remove_digested(output)
        with tempfile.TemporaryDirectory(dir=output.parent, prefix=TEMP_PREFIX) as tmp:
            built = Path(tmp) / "out"
            build(built)
            store_digested(built, output)
    return output
