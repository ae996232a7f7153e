"""Whole-model cycle estimates on Arm cores (tvm_integration/bench/arm_models.py, qemu_blocks.py,
ort_aarch64.py): the qemu plugin counts exactly the blocks run between the driver's marks, each
attributed to its library; onnxruntime's AArch64 build under qemu gives what onnxruntime gives here;
``qsynth bench-model --target neon`` on a small ONNX model and a small TFLite model (next to LiteRT's AArch64
build), and its bad input in one line. Marked ``qemu``; onnxruntime's, LiteRT's and TVM's AArch64 libraries
come from the registry once (skipped when they cannot)."""
import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tvm_integration.bench import mca, qemu_blocks
from tvm_integration.bench.neon_int8_layers import is_multiply
from tvm_integration.qemu import cross, cross_model
from tvm_integration.qnn.runtime import arm_reference

TFLITE = Path(__file__).parent / "data" / "tflite" / "mlp_int8.tflite"
MISSING = cross_model.missing_tools() or mca.missing_tools()
pytestmark = [pytest.mark.qemu,
              pytest.mark.skipif(MISSING is not None, reason=f"Arm estimates run under qemu: {MISSING}")]

LOOP = r"""
#include "measure.h"
#include <stdio.h>
int main(int argc, char **argv) {
  volatile long s = 0;
  for (int i = 0; i < 1000; ++i) s += i;        /* before the marks: not counted */
  mark();
  for (int i = 0; i < 12345; ++i) s += i;
  mark();
  write_code_maps(argv[1]);
  printf("%ld\n", (long)s);
  return argc;
}
"""


@pytest.fixture(scope="module")
def ort_dir():
    """onnxruntime's AArch64 library, fetched once: a host without qemu or the cross gcc skips, a failed
    fetch fails."""
    from tvm_integration.bench import ort_aarch64
    from tvm_integration.qemu import cross_model
    if (why := cross_model.missing_tools()) is not None:
        pytest.skip(f"cannot run AArch64 programs here: {why}")
    return ort_aarch64.runtime()


@pytest.fixture(scope="module")
def mlp(tmp_path_factory):
    from tvm_integration.bench import int8_models
    return int8_models.quantize(int8_models.mlp(), tmp_path_factory.mktemp("arm-models") / "mlp.onnx")


def test_plugin_counts_the_blocks_between_the_marks(tmp_path):
    (tmp_path / "loop.c").write_text(LOOP)
    include = cross_model.DRIVER.parent
    subprocess.run([cross.CC, "-O1", f"-I{include}", str(tmp_path / "loop.c"), "-o", str(tmp_path / "loop")],
                   check=True)
    proc = subprocess.run([*cross.QEMU, *qemu_blocks.qemu_options("cortex-a53", tmp_path / "counts.txt"),
                           str(tmp_path / "loop"), str(tmp_path / "maps.txt")], capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stdout.strip() == str(sum(range(1000)) + sum(range(12345)))
    blocks = qemu_blocks.read(tmp_path / "counts.txt", tmp_path / "maps.txt")
    loop = max(blocks, key=lambda b: b.runs)
    assert loop.runs in (12344, 12345) and loop.is_loop and loop.where == "loop"
    assert all(b.runs <= 2 for b in blocks if b is not loop)          # the marks, the loop's entry and exit
    assert {b.where for b in blocks} == {"loop"}
    (cycles,) = mca.block_cycles([loop], "cortex-a53")
    assert 1 <= cycles < 20


def test_plugin_refuses_a_driver_without_two_marks(tmp_path):
    (tmp_path / "counts.txt").write_text("marks 1\n")
    (tmp_path / "maps.txt").write_text("")
    with pytest.raises(RuntimeError, match="marked its inference 1 times"):
        qemu_blocks.read(tmp_path / "counts.txt", tmp_path / "maps.txt")


def test_unknown_core_is_refused():
    with pytest.raises(ValueError, match="qemu-aarch64 models"):
        qemu_blocks.root("cortex-a55")


def test_onnxruntime_aarch64_equals_onnxruntime_here(mlp, ort_dir):
    from tvm_integration.bench import ort_aarch64
    from tvm_integration.bench.models import reference_session
    x = (np.random.default_rng(0).standard_normal((4, 64)) * 2).astype(np.float32)
    session = reference_session(mlp)
    names = [o.name for o in session.get_outputs()]
    (ours,), blocks = ort_aarch64.run(mlp, {"input": x}, names, "cortex-a53")
    np.testing.assert_array_equal(ours, session.run(None, {"input": x})[0])
    where = {b.where for b in blocks}
    assert "libonnxruntime.so.1" in where and "ort_driver" in where
    assert any(i.split()[0] in ("umull", "smull", "sdot") for b in blocks for i in b.instructions
               if b.where == "libonnxruntime.so.1")
    assert not any(i.split()[0] == "sdot" for b in blocks for i in b.instructions)    # Cortex-A53: no dotprod
    functions = ort_aarch64.by_function(blocks, "cortex-a53")          # every block of the library, one function each
    library = sum(b.runs * c for b, c in zip(blocks, mca.block_cycles(blocks, "cortex-a53"))
                  if b.where == "libonnxruntime.so.1")
    assert sum(functions.values()) == pytest.approx(library) and len(functions) > 10
    multiplying = {name for b in blocks if b.where == "libonnxruntime.so.1" and any(map(is_multiply, b.instructions))
                   for name in ort_aarch64.by_function([b], "cortex-a53")}
    assert any(name.startswith("page ") for name in multiplying)       # MLAS's assembly GEMM kernel: no FDE
    assert sum(not name.startswith("page ") for name in functions) > 10           # C++ functions: their FDEs


def test_bench_model_neon_cli(mlp, ort_dir, lib_dir, capsys):
    from qsynth.cli import main
    assert main(["bench-model", str(mlp), "--target", "neon", "--mcpu", "cortex-a53", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["core"] == "cortex-a53" and set(row["columns"]) == {"qsynth", "onnxruntime_int8"}
    assert row["max_abs_diff_vs_onnxruntime"] == 0 and row["max_abs_diff_vs_onnxruntime_aarch64"] == 0
    assert row["max_abs_diff"] == {"onnx": 0, "onnxruntime_aarch64": 0}
    assert row["max_abs_diff_vs_stated"] == 0
    assert row["follows"]["dense"] == "onnx" and row["not_exact"] == []     # integer ops only: the ONNX definition
    assert row["runtime_departs"] == [k for k in row["follows"] if arm_reference.kind(k).runtime_departs]
    assert row["differing"] == {"onnx": 0, "onnxruntime_aarch64": 0, "stated": 0, "outputs": 4 * 10}
    assert row["explanation"] == []                  # nothing differs, nothing to explain
    ours, theirs = row["columns"]["qsynth"], row["columns"]["onnxruntime_int8"]
    assert "model.so" in ours["by_library"] and "libtvm_runtime.so" in ours["by_library"]
    assert "libonnxruntime.so.1" in theirs["by_library"]
    # every cycle of the model's library attributed to one of its functions; the K loops a part of them
    assert sum(ours["by_function"].values()) == pytest.approx(ours["by_library"]["model.so"])
    assert 0 < ours["k_loop"] <= ours["by_library"]["model.so"]
    assert row["ratios"]["onnxruntime_int8"] == pytest.approx(ours["cycles"] / theirs["cycles"])


def test_bench_model_neon_on_a_tflite_model_against_litert_aarch64(lib_dir, capsys):
    """A .tflite model: LiteRT's AArch64 build under qemu is both the baseline column and the one reference."""
    from qsynth.cli import main
    assert main(["bench-model", str(TFLITE), "--target", "neon", "--mcpu", "cortex-a53", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)
    assert row["core"] == "cortex-a53" and set(row["columns"]) == {"qsynth", "litert_int8"}
    assert row["max_abs_diff"] == {"litert": 0} and row["max_abs_diff_vs_stated"] == 0
    assert set(row["follows"].values()) == {"litert"} and row["explanation"] == []
    assert row["differing"]["stated"] == 0 and row["differing"]["outputs"] > 0
    ours, theirs = row["columns"]["qsynth"], row["columns"]["litert_int8"]
    assert "model.so" in ours["by_library"] and "libLiteRt.so" in theirs["by_library"]
    assert row["ratios"]["litert_int8"] == pytest.approx(ours["cycles"] / theirs["cycles"])


def test_bench_model_neon_bad_input_one_line(mlp, capsys):
    from qsynth.cli import main
    cases = [(["--target", "neon"], "give --mcpu CORE"),
             (["--target", "neon", "--mcpu", "cortex-a55"], "qemu-aarch64 models"),
             (["--target", "neon", "--mcpu", "cortex-z99"], "not an AArch64 core LLVM knows"),
             (["--tvm-default"], "for --target neon")]
    for options, message in cases:
        assert main(["bench-model", str(mlp), *options]) == 2, options
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1, err
    assert main(["bench-model", str(TFLITE), "--target", "neon", "--mcpu", "cortex-a53", "--fp32", str(mlp)]) == 2
    err = capsys.readouterr().err.strip()
    assert "alone against LiteRT's AArch64 build" in err and len(err.splitlines()) == 1, err
