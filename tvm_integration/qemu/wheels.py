"""Libraries taken from the registry's AArch64 wheels (TVM's runtime, onnxruntime, LiteRT), and the programs
linked against them, kept in a private cache folder and checked before every use (issue 46).

A library is extracted from the wheel ``pip download`` fetches for the version this host runs, and
only after its bytes match the SHA-256 the wheel's own RECORD gives for it. It is stored with a
digest sidecar (isa_specs/derived_files.py) and checked against it each time a model runs: a
planted, edited or truncated library is removed with one warning line and fetched anew (pip's own
cache usually serves the wheel again without the network). Offline, point pip at a folder of wheels
as pip documents it (``PIP_FIND_LINKS``, ``PIP_NO_INDEX``).
"""
from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import tempfile
import zipfile
from pathlib import Path
from typing import Callable

from isa_specs import derived_files

PLATFORM = "manylinux_2_28_aarch64"


def library(folder: Path, project: str, version: str, member: Callable[[str], bool], name: str,
            platforms: tuple[str, ...] = (PLATFORM,)) -> Path:
    """``folder/name``: the wheel member of ``project==version`` that ``member`` picks, once it matches
    the digest it was stored with; fetched anew when missing or damaged. RuntimeError when pip fails.
    ``platforms``: the wheel tags pip may take (ai-edge-litert's AArch64 wheel is manylinux_2_27)."""
    return derived_files.cached_build(folder / name, lambda out: extract(project, version, member, out, platforms),
                                      f"AArch64 library {name}")


def extract(project: str, version: str, member: Callable[[str], bool], out: Path,
            platforms: tuple[str, ...] = (PLATFORM,)) -> None:
    """The member of the registry's AArch64 wheel of ``project==version`` that ``member`` picks, written
    to ``out`` once it matches the wheel's RECORD."""
    with tempfile.TemporaryDirectory(prefix="qsynth-wheels-") as tmp:
        cmd = ["pip", "download", "--no-deps", "--only-binary=:all:", *(f"--platform={p}" for p in platforms),
               f"{project}=={version}", "-d", tmp]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        if proc.returncode:
            raise RuntimeError(f"{' '.join(cmd)} failed: {proc.stderr.strip()[-1500:]}")
        wheel = next(Path(tmp).glob("*.whl"))
        with zipfile.ZipFile(wheel) as z:
            names = [n for n in z.namelist() if member(n)]
            if len(names) != 1:
                raise RuntimeError(f"{wheel.name}: expected one library, found {names or 'none'}")
            data = z.read(names[0])
            recorded = _record(z).get(names[0])
    if recorded != _record_hash(data):
        raise RuntimeError(f"{wheel.name}: {names[0]} does not match the wheel's RECORD")
    out.write_bytes(data)


def _record(wheel: zipfile.ZipFile) -> dict[str, str]:
    """The wheel's RECORD: member path -> ``sha256=<urlsafe base64>``."""
    record = next(n for n in wheel.namelist() if n.endswith(".dist-info/RECORD"))
    rows = (line.split(",") for line in wheel.read(record).decode().splitlines() if line)
    return {row[0]: row[1] for row in rows if len(row) >= 2}


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def linked(folder: Path, name: str, sources: list[Path], libraries: list[Path],
           link: Callable[[Path], list[str]]) -> Path:
    """The program ``link(out)`` builds from ``sources`` against ``libraries`` (each already checked
    against its sidecar, whose recorded SHA-256 stands for it here: no second pass over tens of MB on
    every run), kept as ``name`` in a folder of ``folder`` named by the digest of all of them (a new
    source or library gets a new program; the program keeps its name, which block counts attribute code
    to); checked before every use like the libraries."""
    digest = hashlib.sha256(" ".join(link(Path("out"))).encode())
    for path in sources:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    for path in libraries:
        recorded = json.loads(derived_files.own_file(derived_files.digest_sidecar(path)))["sha256"]
        digest.update(path.name.encode() + b"\0" + recorded.encode())

    def build(out: Path) -> None:
        cmd = link(out)
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    where = derived_files.private_folder(folder / f"{name}-{digest.hexdigest()[:16]}")
    return derived_files.cached_build(where / name, build, f"AArch64 program {name}")


def library_folder(program: Path) -> Path:
    """The folder of the libraries a program of ``linked`` runs against (its LD_LIBRARY_PATH)."""
    return program.parents[1]
