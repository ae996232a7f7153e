"""Whole quantized models for AArch64 (issue 34 step 2): ``compile_model(..., target="neon", mcpu=...)``
puts every integer conv2d and dense on the NEON int8 operators (ops/neon_gemm.py), exports the library
with the cross gcc and runs it under qemu-aarch64 with TVM's AArch64 runtime (qemu/cross_model.py):
bit-exact with onnxruntime, on a v8.0 core (Cortex-A53, A72: onnxruntime's symmetric weights, all in
[-127, 127], on the smull/smlal2/sadalp acc tile) and a dotprod core (Cortex-A76: sdot), MobileNetV2's
depthwise layers on the core's vectorized TIR. ``qsynth compile/run --target neon --mcpu``, and its bad
input, one line each."""
import subprocess

import numpy as np
import pytest

from tvm_integration.qemu import cross, cross_model

MISSING = cross_model.missing_tools()
pytestmark = [pytest.mark.qemu,
              pytest.mark.skipif(MISSING is not None, reason=f"AArch64 models run under qemu: {MISSING}")]
V8 = ("smull", "smlal2", "sadalp")        # the s8 x s7 acc tile's instructions


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    from tvm_integration.bench import int8_models
    folder = tmp_path_factory.mktemp("neon-models")
    return {"mlp": int8_models.quantize(int8_models.mlp(), folder / "mlp.onnx"),
            # two stages: every op kind of the four (the stem, 3x3 convs of stride 1 and 2, the 1x1 stride-2
            # shortcut, residual adds, pools, the classifier) at half the layers to compile and run under qemu
            "resnet": int8_models.quantize(int8_models.resnet(size=32, widths=(16, 32), classes=10),
                                           folder / "resnet.onnx"),
            "mobilenet_v2": int8_models.quantize(
                int8_models.mobilenet_v2(size=32, blocks=((1, 16, 1, 1), (6, 24, 2, 2)), classes=10),
                folder / "mobilenet_v2.onnx")}


def reference(path, feeds):
    from tvm_integration.bench.models import reference_session
    return reference_session(path).run(None, feeds)


def random_feeds(model, seed=0):
    rng = np.random.default_rng(seed)
    return {name: (rng.standard_normal(shape) * 2).astype(dtype) for name, (shape, dtype) in model.inputs.items()}


def disassembly(library) -> str:
    return subprocess.run([cross.CC.replace("gcc", "objdump"), "-d", str(library)], capture_output=True,
                          text=True).stdout


@pytest.mark.parametrize("name, mcpu, instructions", [("mlp", "cortex-a53", V8),
                                                      ("resnet", "cortex-a53", V8),
                                                      ("resnet", "cortex-a76", ("sdot",)),
                                                      ("mobilenet_v2", "cortex-a72", V8)])
def test_model_bit_exact_with_onnxruntime(models, lib_dir, tmp_path, name, mcpu, instructions):
    from tvm_integration.qnn.runtime.arm_model import ArmModel
    from tvm_integration.qnn.runtime.model import compile_model
    from tvm_integration.qnn.semantics.errors import ModelError
    model = compile_model(models[name], target="neon", mcpu=mcpu)
    assert isinstance(model, ArmModel) and model.target["mtriple"] == "aarch64-linux-gnu"
    feeds = random_feeds(model)
    out = model(feeds)
    for ours, theirs in zip(out.values(), reference(models[name], feeds), strict=True):
        assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
        np.testing.assert_array_equal(ours, theirs)
    model.save(tmp_path / "m.so")
    assert (tmp_path / "m.so.json").is_file()
    assert (tmp_path / "m.so").read_bytes()[18] == 183          # ELF e_machine: EM_AARCH64
    code = disassembly(tmp_path / "m.so")
    assert all(f"\t{i}" in code for i in instructions), instructions
    with pytest.raises(ModelError, match="qemu"):
        model.time(feeds)


def test_cli_compile_and_run(models, lib_dir, tmp_path, capsys):
    from qsynth.cli import main
    path = models["mlp"]
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 64)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    assert main(["run", str(path), "--target", "neon", "--mcpu", "cortex-a53", "--input", str(tmp_path / "x.npy"),
                 "--output", str(tmp_path / "y.npy")]) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), reference(path, {"input": x})[0])
    assert main(["compile", str(path), "--target", "neon", "--mcpu", "cortex-a72", "-o", str(tmp_path / "m.so")]) == 0
    assert (tmp_path / "m.so").read_bytes()[18] == 183 and (tmp_path / "m.so.json").is_file()
    capsys.readouterr()


def test_cli_bad_input_one_line(models, tmp_path, capsys, monkeypatch):
    from qsynth.cli import main
    path = models["mlp"]
    np.save(tmp_path / "x.npy", np.zeros((4, 64), np.float32))
    run = ["run", str(path), "--input", str(tmp_path / "x.npy"), "--output", str(tmp_path / "y.npy")]
    cases = [(run + ["--target", "neon", "--mcpu", "cortex-z99"], 2, "not an AArch64 core LLVM knows"),
             (run + ["--mcpu", "cortex-a53"], 2, "--target neon only"),
             (run + ["--target", "neon", "--profile"], 2, "qemu"),
             (["compile", str(path), "--target", "neon", "--mcpu", "cortex-z99", "-o", str(tmp_path / "m.so")], 2,
              "not an AArch64 core LLVM knows")]
    for argv, status, message in cases:
        assert main(argv) == status, argv
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1, err
    real_which = cross.shutil.which
    monkeypatch.setattr(cross.shutil, "which", lambda tool: None if "qemu" in tool else real_which(tool))
    assert main(run + ["--target", "neon"]) == 1
    err = capsys.readouterr().err.strip()
    assert "qemu-aarch64 not installed" in err and len(err.splitlines()) == 1, err
    assert not list(tmp_path.glob("y.*")) and not list(tmp_path.glob("m.*"))
