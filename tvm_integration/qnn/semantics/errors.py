"""What the pipeline refuses: ``ModelError``, one line saying why, raised by every stage and both
frontends (``qsynth`` prints it as ``model: ...``, exit 1); and the model-file check both frontends
make first. Its own module, so that no frontend imports another for it and the command line reads it
without importing TVM."""
from __future__ import annotations

from pathlib import Path


class ModelError(ValueError):
    """The model cannot be compiled by this pipeline; the message says why and what is accepted."""


def model_file(path: str | Path) -> Path:
    """``path`` once it is a regular file, or ModelError saying what it is instead."""
    path = Path(path)
    if path.is_dir():
        raise ModelError(f"{path} is a directory; give the model file")
    if not path.exists():
        raise ModelError(f"{path}: no such file")
    if not path.is_file():
        raise ModelError(f"{path} is not a regular file")
    return path
