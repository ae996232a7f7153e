"""Which code a benchmark measured: the commit of the working tree, so that every published figure can be
traced to (and rerun from) its source."""
from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def commit(root: Path = ROOT) -> str:
    """``git rev-parse HEAD`` of ``root``, with ``+dirty`` when tracked files differ from it (the figures
    then come from uncommitted code); ``unknown`` outside a git checkout."""
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True)
    if head.returncode:
        return "unknown"
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root, capture_output=True,
                           text=True).stdout.strip()
    return head.stdout.strip() + ("+dirty" if dirty else "")
