"""The private, checked cache of compiled models (tvm_integration/qnn/runtime/artifacts.py, issue 31): ``qsynth
run`` keeps its library in a 0700 folder of the user's cache, never beside the model; the library's
digest is checked before it is loaded, so a planted, truncated or mismatching artifact is refused,
removed and rebuilt with one warning line, never loaded; a folder other users can write is never
used; a killed compile leaves nothing beside the model or in the temporary directory, and the next
run sweeps what it left in the cache; loading prints none of TVM's debug lines."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from qsynth.cli import main
from tvm_integration.bench import int8_models
from tvm_integration.bench.models import reference_session
from tvm_integration.qnn.runtime import artifacts, model as qnn_model

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def setup(tmp_path, monkeypatch):
    """A model and its input in a folder of their own, the cache under tmp_path; (model, x, folder of
    the model, run's arguments writing y to ``out``)."""
    monkeypatch.setenv("QSYNTH_MODEL_CACHE", str(tmp_path / "cache" / "qsynth" / "models"))
    # the key hashes the compiler's sources too: pinned to the model and target here, so that an edit
    # of the checkout while the test runs does not make it compile anew (test_key covers the real one)
    monkeypatch.setattr(artifacts, "key", lambda model, target: hashlib.sha256(model.read_bytes() + target.encode())
                        .hexdigest()[:32])
    (tmp_path / "model").mkdir()
    (tmp_path / "out").mkdir()
    path = int8_models.quantize(int8_models.mlp(), tmp_path / "model" / "m.onnx", fmt="qoperator")
    x = np.random.default_rng(4).standard_normal((4, 64)).astype(np.float32)
    np.save(tmp_path / "model" / "x.npy", x)
    argv = ["run", str(path), "--input", str(tmp_path / "model" / "x.npy"), "--output", str(tmp_path / "out" / "y.npy"),
            "--threads", "1"]
    return path, x, tmp_path / "model", argv


def expected(path, x):
    return reference_session(path).run(None, {"input": x})[0]


def artifact(folder: Path) -> tuple[Path, Path]:
    libraries = sorted(folder.glob("*.so"))
    assert len(libraries) == 1, sorted(p.name for p in folder.iterdir())
    return libraries[0], libraries[0].with_suffix(".json")


def planted_library(tmp_path: Path, marker: Path) -> bytes:
    """A shared library whose constructor creates ``marker``: proof that it was loaded."""
    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    source = tmp_path / "planted.c"
    source.write_text('#include <stdio.h>\n__attribute__((constructor)) static void planted(void) '
                      f'{{ FILE *f = fopen("{marker}", "w"); if (f) fclose(f); }}\n')
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(tmp_path / "planted.so"), str(source)], check=True)
    return (tmp_path / "planted.so").read_bytes()


def test_run_keeps_a_private_checked_library_and_loads_it_quietly(setup, tmp_path, capfd, monkeypatch):
    path, x, model_dir, argv = setup
    assert main(argv) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "y.npy"), expected(path, x))
    assert sorted(p.name for p in model_dir.iterdir()) == ["m.onnx", "x.npy"]     # nothing beside the model
    folder = tmp_path / "cache" / "qsynth" / "models"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    library, sidecar = artifact(folder)
    recorded = json.loads(sidecar.read_text())
    assert recorded["sha256"] == hashlib.sha256(library.read_bytes()).hexdigest()
    assert not list(folder.glob(artifacts.WORKSPACE_PREFIX + "*"))
    capfd.readouterr()

    # the next run loads it (a compile would fail now), and TVM's "Scope Loaded:" lines stay off stderr
    monkeypatch.setattr(qnn_model, "compile_model", lambda *a, **k: pytest.fail("compiled instead of loading"))
    (tmp_path / "out" / "y.npy").unlink()
    assert main(argv) == 0
    assert capfd.readouterr().err == ""
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "y.npy"), expected(path, x))


def test_bad_artifacts_are_refused_removed_and_rebuilt_never_loaded(setup, tmp_path, capfd):
    path, x, _, argv = setup
    assert main(argv) == 0
    folder = tmp_path / "cache" / "qsynth" / "models"
    library, sidecar = artifact(folder)
    good = library.read_bytes()
    marker = tmp_path / "planted-ran"
    damages = {"planted": lambda: library.write_bytes(planted_library(tmp_path, marker)),
               "truncated": lambda: library.write_bytes(good[:len(good) // 3]),
               "sidecar edited": lambda: sidecar.write_text(sidecar.read_text().replace('"outputs": ["',
                                                                                        '"outputs": ["x')),
               "sidecar missing": sidecar.unlink}
    for what, damage in damages.items():
        damage()
        capfd.readouterr()
        assert main(argv) == 0, what
        err = capfd.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "compiled-model cache" in err[0] and "compiling anew" in err[0], (what, err)
        assert not marker.exists(), "the planted library was loaded"
        np.testing.assert_array_equal(np.load(tmp_path / "out" / "y.npy"), expected(path, x))
        library, sidecar = artifact(folder)                         # rebuilt, and checks out
        assert artifacts.check(folder, library.stem)["size"] == library.stat().st_size


def test_a_folder_others_can_write_is_never_used(setup, tmp_path, capfd, monkeypatch):
    path, x, _, argv = setup
    assert main(argv) == 0
    folder = tmp_path / "cache" / "qsynth" / "models"
    library, _ = artifact(folder)
    marker = tmp_path / "planted-ran"
    library.write_bytes(planted_library(tmp_path, marker))
    before = sorted(p.name for p in folder.iterdir())
    folder.chmod(0o777)
    capfd.readouterr()
    assert main(argv) == 0
    err = capfd.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "writable by other users" in err[0] and "keeping nothing" in err[0], err
    assert not marker.exists() and sorted(p.name for p in folder.iterdir()) == before
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "y.npy"), expected(path, x))

    folder.chmod(0o700)
    shared = tmp_path / "shared"                    # a parent anyone may change (no sticky bit)
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    with pytest.raises(artifacts.UnsafeFolder, match="can be changed by other users"):
        artifacts.private_folder(shared / "models")
    monkeypatch.setattr(artifacts.os, "getuid", lambda: os.geteuid() + 4242)
    with pytest.raises(artifacts.UnsafeFolder, match="is owned by uid"):
        artifacts.private_folder(folder)


KILLED = """
import functools, os, signal, sys
from tvm_integration.torch_kept_out import keep_torch_out_of_tvm
keep_torch_out_of_tvm()                      # as qsynth's main does, before TVM is imported here
import tvm.support.cc as cc
link = cc.create_shared
@functools.wraps(link)
def link_then_die(*args, **kwargs):          # kill -9 with the linker's output and TVM's objects on disk
    link(*args, **kwargs)
    os.kill(os.getpid(), signal.SIGKILL)
cc.create_shared = link_then_die
from qsynth.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("command", ["run", "compile"])
def test_a_killed_compile_leaves_nothing_behind(setup, tmp_path, command):
    path, x, model_dir, argv = setup
    if command == "compile":
        argv = ["compile", str(path), "-o", str(model_dir / "m.so")]
    (tmp_path / "tmp").mkdir()
    env = dict(os.environ, TMPDIR=str(tmp_path / "tmp"), PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", KILLED, *argv], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    assert sorted(p.name for p in model_dir.iterdir()) == ["m.onnx", "x.npy"]
    assert not list((tmp_path / "tmp").iterdir())
    folder = tmp_path / "cache" / "qsynth" / "models"
    left = list(folder.glob(artifacts.WORKSPACE_PREFIX + "*"))
    assert left and not list(folder.glob("*.so"))          # the killed compile's workspace, no artifact

    old = time.time() - artifacts.STALE_S - 60
    for path in left:
        os.utime(path, (old, old))
    assert main(setup[3]) == 0                              # the next run sweeps it
    assert not list(folder.glob(artifacts.WORKSPACE_PREFIX + "*"))


KEY = """
import sys
from pathlib import Path
from tvm_integration.torch_kept_out import keep_torch_out_of_tvm
keep_torch_out_of_tvm()
from tvm_integration.qnn.runtime import artifacts
print(artifacts.key(Path(sys.argv[1]), "host"))
"""


def test_key(tmp_path, monkeypatch):
    """The key follows the model's bytes, the target, the host and the compiler's sources, and nothing
    that varies between runs: not the model's path, the process, or where the sources sit."""
    import emit
    from isa_specs import host
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    a.write_bytes(b"model a")
    b.write_bytes(b"model b")
    (tmp_path / "elsewhere").mkdir()
    copy = Path(shutil.copy(a, tmp_path / "elsewhere" / "m.onnx"))
    key = artifacts.key(a, "host")
    assert artifacts.key(copy, "host") == key
    another_process = subprocess.run([sys.executable, "-c", KEY, str(copy)], env=dict(os.environ, PYTHONPATH=str(ROOT)),
                                     capture_output=True, text=True, check=True).stdout.strip()
    assert another_process == key
    assert len({key, artifacts.key(b, "host"), artifacts.key(a, "avx2")}) == 3
    with monkeypatch.context() as m:
        m.setattr(host, "tvm_target", lambda: {"kind": "llvm", "mcpu": "another-host"})
        assert artifacts.key(a, "host") != key

    sources = Path(shutil.copytree(Path(emit.__file__).parent, tmp_path / "emit",
                                   ignore=shutil.ignore_patterns("__pycache__")))
    monkeypatch.setattr(emit, "__file__", str(sources / "__init__.py"))
    assert artifacts.key(a, "host") == key
    with (sources / "steps.py").open("a") as f:
        f.write("# an edit of the compiler\n")
    assert artifacts.key(a, "host") != key
