"""The private cache of compiled models ``qsynth run`` loads: ``$XDG_CACHE_HOME/qsynth/models``
(default ``~/.cache/qsynth/models``; ``$QSYNTH_MODEL_CACHE`` if set), one library per key (the model's content, the target, the host's
features, TVM's version, the compiler's sources and the kernel library's entries).

Why it is checked as it is: a compiled model is a shared library, and loading one runs its code (its
constructors run inside dlopen, before any check could). The library used to sit beside the model
under a predictable name and was loaded unchecked (issue 31): a library planted there ran its own
code, a truncated one killed every later run with SIGBUS, an edited signature was used silently.
So here:

* the folder is created mode 0700 and used only while it is a directory (not a link) owned by this
  user that nobody else can write, and every folder above it is owned by this user or root and
  writable by others only with the sticky bit; otherwise ``run`` compiles in memory and keeps
  nothing (one warning line): no library is loaded from a folder other users can write;
* an artifact is ``KEY.so`` and its sidecar ``KEY.json`` (format, key, the library's size and
  SHA-256, the model's signature, and a hash of the sidecar itself), each written to a temporary file
  in the folder and renamed into place, all under a per-key file lock (``filelock``, as the kernel
  cache); the library's digest is checked under the same lock before it is loaded, so a damaged,
  foreign or mismatching artifact is removed with one warning line and rebuilt, never loaded;
* every temporary file of a compile (ours, TVM's, the linker's) goes to a workspace inside the folder
  (``workspace``), removed when the compile ends; one a killed compile left is removed by the next
  run once it is ``STALE_S`` old.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from filelock import FileLock

from isa_specs import derived_files
from isa_specs.derived_files import BadArtifact, UnsafeFolder, check_digested, delete, sealed  # noqa: F401 (UnsafeFolder: qsynth.commands.qnn catches it)

FORMAT = 1
STALE_S = 3600
WORKSPACE_PREFIX = ".work-"


def compiled_model(path: str | Path, target: str = "host", threads: int | None = None,
                   allow_float: bool = False, mcpu: str | None = None, lowbit: str = "fastest"):
    """The model at ``path`` compiled for ``target`` (``neon``: for the AArch64 core ``mcpu``; ``lowbit``:
    the 1-3-bit layers' operator, legalize.py): the cached
    library once it checks out, else a new compile, stored for the next run and run from its library
    (the compile's own executable is never run: on the host TVM's JIT would generate its code a second
    time, under qemu it would be exported again). In memory only when the folder is not private."""
    from tvm_integration.qnn.runtime.model import CompiledModel, compile_model
    try:
        folder = private_folder()
    except UnsafeFolder as e:
        warn(f"{e}; compiling in memory, keeping nothing")
        return compile_model(path, target, threads, allow_float, mcpu, lowbit)
    name = key(Path(path), ":".join([target, *([mcpu] if mcpu else []), *([lowbit] if lowbit != "fastest" else [])]))
    with lock(folder, name), workspace(folder) as work:
        if any(os.path.lexists(folder / f"{name}{suffix}") for suffix in (".so", ".json")):
            try:
                return load(folder, name, target, threads)
            except BadArtifact as e:
                warn(f"{e}; removed it, compiling anew")
                remove(folder, name)
        model = compile_model(path, target, threads, allow_float, mcpu, lowbit)
        model.export(work / "model.so")
        if target == "neon":        # run under qemu from the stored library, as a cached one is
            store(folder, name, work / "model.so", model.signature())
            return load(folder, name, target, threads)
        # this process maps a copy, which the workspace's removal unlinks: the stored library may be
        # damaged in place while the process lives (a truncated mapping is SIGBUS)
        shutil.copyfile(work / "model.so", work / "loaded.so")
        store(folder, name, work / "model.so", model.signature())
        return CompiledModel.load(work / "loaded.so", threads, model.signature())


def load(folder: Path, name: str, target: str, threads: int | None):
    """Artifact ``name`` for ``target``, once it checks out (BadArtifact otherwise)."""
    from tvm_integration.qnn.runtime.arm_model import ArmModel
    from tvm_integration.qnn.runtime.model import CompiledModel
    loader = ArmModel.load if target == "neon" else CompiledModel.load
    return loader(folder / f"{name}.so", threads, check(folder, name))


def root() -> Path:
    """``$QSYNTH_MODEL_CACHE`` (the test suite's own), else the user's cache folder."""
    default = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "qsynth" / "models"
    return Path(os.environ.get("QSYNTH_MODEL_CACHE") or default)


def private_folder(folder: Path | None = None) -> Path:
    """``folder`` (default ``root()``), created mode 0700 if missing; ``UnsafeFolder`` unless it is
    private to this user (``isa_specs.derived_files.private_folder``)."""
    return derived_files.private_folder(folder or root())


def key(model: Path, target: str) -> str:
    """What decides the library: the model's bytes, the target and this host's features (``host``
    resolves to them), TVM's version, every source of emit and tvm_integration (tuning logs and C
    templates included), the verifier's fingerprint and the kernel library's entries (their names are
    their content keys). Threads do not: they are set when the library runs."""
    import tvm
    import emit
    from isa_specs import host
    from synth import cache, trust
    digest = hashlib.sha256(model.read_bytes())
    digest.update(json.dumps([target, host.tvm_target(), tvm.__version__, trust.fingerprint(),
                              sorted(p.name for p in cache.ROOT.glob("*.json"))]).encode())
    for base in (Path(emit.__file__).parent, Path(__file__).resolve().parents[1]):    # emit, tvm_integration
        for source in sorted(base.rglob("*")):
            if source.suffix in (".py", ".json", ".j2", ".h", ".c") and "__pycache__" not in source.parts:
                digest.update(str(source.relative_to(base)).encode() + b"\0" + source.read_bytes())
    return digest.hexdigest()[:32]


def warn(message: str) -> None:
    print(f"qsynth: warning: compiled-model cache: {message}", file=sys.stderr)


def check(folder: Path, name: str) -> dict:
    """The sidecar of artifact ``name`` once its library matches it (``derived_files.check_digested``) and
    it names this format and key; BadArtifact otherwise."""
    sidecar = check_digested(folder / f"{name}.so", folder / f"{name}.json")
    if sidecar.get("format") != FORMAT or sidecar.get("key") != name:
        raise BadArtifact(f"{name}.json is not a format-{FORMAT} sidecar of key {name}")
    return sidecar


def remove(folder: Path, name: str) -> None:
    for path in (folder / f"{name}.so", folder / f"{name}.json"):
        delete(path)


def store(folder: Path, name: str, library: Path, signature: dict) -> None:
    """Move ``library`` (built inside ``folder``) into place as artifact ``name`` with its sidecar."""
    sidecar = sealed(library.read_bytes(), **signature, format=FORMAT, key=name)
    os.chmod(library, 0o600)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=WORKSPACE_PREFIX, suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(sidecar, f)
    remove(folder, name)
    os.replace(library, folder / f"{name}.so")
    os.replace(tmp, folder / f"{name}.json")


@contextlib.contextmanager
def lock(folder: Path, name: str):
    """Held while artifact ``name`` is checked and loaded, or built and stored."""
    with FileLock(str(folder / f"{name}.lock")):
        yield


@contextlib.contextmanager
def workspace(folder: Path):
    """A private temporary directory inside ``folder``, where every temporary file of this process goes
    while the block runs (Python's ``tempfile``, hence TVM's; ``TMPDIR`` for the compilers it calls);
    removed afterwards. Workspaces a killed process left behind are removed first once stale."""
    sweep(folder)
    path = Path(tempfile.mkdtemp(dir=folder, prefix=WORKSPACE_PREFIX))
    saved = tempfile.tempdir, os.environ.get("TMPDIR")
    tempfile.tempdir, os.environ["TMPDIR"] = str(path), str(path)
    try:
        yield path
    finally:
        tempfile.tempdir = saved[0]
        if saved[1] is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = saved[1]
        shutil.rmtree(path, ignore_errors=True)


def sweep(folder: Path, age: float = STALE_S) -> None:
    """Remove the workspaces and temporary files older than ``age`` seconds from ``folder``."""
    for path in folder.glob(WORKSPACE_PREFIX + "*"):
        with contextlib.suppress(OSError):
            if time.time() - path.lstat().st_mtime > age:
                delete(path)
