"""The files the Arm path derives and runs are checked before each use (issue 46): TVM's AArch64 runtime
and the driver linked against it (qemu/wheels.py, qemu/cross_model.py), the AArch64 models ``run --target
neon`` keeps (qnn/runtime/artifacts.py), the qemu plugin and guest root (bench/qemu_blocks.py). Each case runs in
a scratch cache (``XDG_CACHE_HOME``, ``QSYNTH_MODEL_CACHE``), the wheels from pip's own cache, and checks
the outputs against onnxruntime's exact mode."""
import functools
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tvm_integration.qemu import cross, cross_model

MISSING = cross_model.missing_tools()
pytestmark = [pytest.mark.qemu,
              pytest.mark.skipif(MISSING is not None, reason=f"AArch64 programs run under qemu: {MISSING}")]

PLANTED = r"""
#include <stdio.h>
int main(int argc, char **argv) {       /* what a planted driver would do: its own work, then fake outputs */
  FILE *f = fopen(getenv("MARKER"), "w");
  if (f) fclose(f);
  printf("1 outputs\n");
  return 0;
}
"""


@functools.cache
def pip_cache_dir() -> str:
    """pip's cache folder, asked once (each ``pip`` started takes a second of CPU)."""
    return subprocess.run(["pip", "cache", "dir"], capture_output=True, text=True).stdout.strip()


def use_cache(monkeypatch, folder: Path) -> None:
    """Everything derived under ``folder / "cache"``; pip keeps using the user's cache, so no download repeats."""
    pip_cache = pip_cache_dir()
    if pip_cache:
        monkeypatch.setenv("PIP_CACHE_DIR", pip_cache)
    monkeypatch.setenv("XDG_CACHE_HOME", str(folder / "cache"))
    monkeypatch.setenv("QSYNTH_MODEL_CACHE", str(folder / "cache" / "qsynth" / "models"))
    monkeypatch.setenv("MARKER", str(folder / "marker"))


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    from tvm_integration.bench import int8_models
    return int8_models.quantize(int8_models.mlp(), tmp_path_factory.mktemp("arm-files") / "mlp.onnx")


@pytest.fixture(scope="module")
def prepared(tmp_path_factory, mlp) -> Path:
    """A cache as a first ``run --target neon`` of the MLP leaves it: the runtime fetched, the driver
    linked, the model compiled. Fetching and compiling took most of this file's four minutes when every
    case began from nothing; each case now begins from its own copy (``scratch``)."""
    folder = tmp_path_factory.mktemp("prepared")
    with pytest.MonkeyPatch.context() as monkeypatch:
        use_cache(monkeypatch, folder)
        from qsynth.cli import main
        np.save(folder / "x.npy", np.zeros((4, 64), np.float32))
        assert main(["run", str(mlp), "--target", "neon", "--input", str(folder / "x.npy"),
                     "--output", str(folder / "y.npy")]) == 0
    return folder / "cache"


@pytest.fixture
def scratch(tmp_path, monkeypatch, prepared):
    """A private copy of the prepared cache (modes kept: the checks refuse a folder others can write)."""
    shutil.copytree(prepared, tmp_path / "cache", symlinks=True)
    use_cache(monkeypatch, tmp_path)
    return tmp_path


def run_neon(mlp, folder: Path, capsys) -> tuple[int, np.ndarray | None, str]:
    """``qsynth run --target neon`` on a fixed input: its status, its output and its stderr."""
    from qsynth.cli import main
    x = np.random.default_rng(3).standard_normal((4, 64)).astype(np.float32)
    np.save(folder / "x.npy", x)
    out = folder / "y.npy"
    out.unlink(missing_ok=True)
    status = main(["run", str(mlp), "--target", "neon", "--input", str(folder / "x.npy"), "--output", str(out)])
    return status, np.load(out) if out.exists() else None, capsys.readouterr().err


def expected(mlp) -> np.ndarray:
    from tvm_integration.bench.models import reference_session
    x = np.random.default_rng(3).standard_normal((4, 64)).astype(np.float32)
    return reference_session(mlp).run(None, {"input": x})[0]


def planted_program(folder: Path) -> bytes:
    (folder / "planted.c").write_text(PLANTED)
    subprocess.run([cross.CC, "-static", "-O1", "-include", "stdlib.h", str(folder / "planted.c"), "-o",
                    str(folder / "planted")], check=True)
    return (folder / "planted").read_bytes()


def test_planted_driver_never_runs(scratch, mlp, capsys):
    status, y, _ = run_neon(mlp, scratch, capsys)
    assert status == 0
    np.testing.assert_array_equal(y, expected(mlp))
    driver = cross_model.driver()
    driver.write_bytes(planted_program(scratch))
    status, y, err = run_neon(mlp, scratch, capsys)
    assert status == 0 and not (scratch / "marker").exists()
    np.testing.assert_array_equal(y, expected(mlp))
    assert "AArch64 program model_driver" in err and "building anew" in err


@pytest.mark.parametrize("damage", ["planted", "truncated"])
def test_damaged_runtime_library_is_fetched_anew(scratch, mlp, capsys, damage):
    library = cross_model.runtime() / "libtvm_runtime.so"
    data = library.read_bytes()
    library.write_bytes(planted_program(scratch) if damage == "planted" else data[: len(data) // 2])
    status, y, err = run_neon(mlp, scratch, capsys)
    assert status == 0, err
    np.testing.assert_array_equal(y, expected(mlp))
    assert "AArch64 library libtvm_runtime.so" in err and "building anew" in err
    assert library.read_bytes() == data


def test_world_writable_runtime_folder_is_refused(scratch, mlp, capsys):
    folder = cross_model.runtime()
    folder.chmod(0o777)
    status, y, err = run_neon(mlp, scratch, capsys)
    assert status == 1 and y is None
    assert "writable by other users" in err and str(folder) in err and len(err.strip().splitlines()) == 1, err


def test_neon_model_is_kept_checked_and_reused(scratch, mlp, capsys, monkeypatch):
    from tvm_integration.qnn.runtime import model
    status, _, _ = run_neon(mlp, scratch, capsys)
    libraries = list((scratch / "cache" / "qsynth" / "models").glob("*.so"))
    assert status == 0 and len(libraries) == 1
    real_compile = model.compile_model
    monkeypatch.setattr(model, "compile_model", lambda *a, **k: pytest.fail("compiled again"))
    status, y, err = run_neon(mlp, scratch, capsys)          # from the cache
    assert status == 0, err
    np.testing.assert_array_equal(y, expected(mlp))
    data = bytearray(libraries[0].read_bytes())
    data[len(data) // 2] ^= 0xFF                               # an edited library is never run
    libraries[0].write_bytes(data)
    monkeypatch.setattr(model, "compile_model", real_compile)
    status, y, err = run_neon(mlp, scratch, capsys)
    assert status == 0 and "compiling anew" in err, err
    np.testing.assert_array_equal(y, expected(mlp))


def test_compile_refuses_what_the_aarch64_runtime_lacks(scratch, capsys):
    """ONNX Unique becomes ``relax.run.unique``, which TVM's host build defines and its AArch64 runtime
    does not: the library would fail when run, so compile refuses it."""
    import onnx
    from onnx import TensorProto, helper
    from qsynth.cli import main
    graph = helper.make_graph([helper.make_node("Unique", ["x"], ["y"], sorted=1)], "unique",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), scratch / "unique.onnx")
    out = scratch / "unique.so"
    with pytest.warns(UserWarning, match="no quantized op"):
        status = main(["compile", str(scratch / "unique.onnx"), "--target", "neon", "--allow-float", "-o", str(out)])
    err = capsys.readouterr().err
    assert status == 1 and "relax.run.unique" in err and "AArch64 runtime" in err, err
    assert not out.exists() and not Path(str(out) + ".json").exists()


def test_qemu_plugin_and_guest_root_are_checked(scratch, capsys):
    from tvm_integration.bench import qemu_blocks
    plugin = qemu_blocks.plugin()
    good = plugin.read_bytes()
    plugin.write_bytes(good[:100])
    assert qemu_blocks.plugin().read_bytes() == good
    assert "qemu plugin" in capsys.readouterr().err
    root = qemu_blocks.root("cortex-a53")
    cpuinfo = root / "proc" / "cpuinfo"
    text = cpuinfo.read_text()
    cpuinfo.write_text(text.replace("0xd03", "0xd0c"))          # another core's part number
    (root / "lib").unlink()
    (root / "lib").symlink_to(scratch)
    qemu_blocks.root("cortex-a53")
    assert cpuinfo.read_text() == text and os.readlink(root / "lib") == str(cross_model.SYSROOT / "lib")
