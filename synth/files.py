"""Atomic file writes: a reader sees the old file or the whole new one, never a half-written one. (The
private folders and digested files of what qsynth derives: isa_specs/derived_files.py.)"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from isa_specs.derived_files import TEMP_PREFIX


def write_atomically(path: Path, text: str | bytes) -> Path:
    """Write ``text`` (str, or bytes as they are) to a temporary file beside ``path``, flush it to
    disk, then rename it over ``path`` (mode 0644, as a plain ``open`` would leave it); the temporary
    file never outlives a failure of this process (a ``kill -9`` can leave one: see ``TEMP_PREFIX``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=TEMP_PREFIX, suffix=path.suffix)
    try:
        os.fchmod(fd, 0o644)
        with os.fdopen(fd, "wb" if isinstance(text, bytes) else "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return path
