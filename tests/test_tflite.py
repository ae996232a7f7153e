"""TFLite full-integer models (tflite/importer.py, litert_arithmetic.py) bit for bit against LiteRT's
default interpreter (``ai_edge_litert``, op resolver AUTO: the XNNPACK delegate): every network of
tests/data/tflite (written by scripts/make_tflite_models.py) on random inputs, the single-op add and
mean models on every case of their arithmetic; refusals and the command line's one-line errors.
The TensorFlow conversion itself is opt-in: QSYNTH_SLOW=1."""
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tflite
from ai_edge_litert import interpreter as litert

from qsynth import cli
from tvm_integration.bench.models import bench_model
from tvm_integration.kernels import tuning
from tvm_integration.qnn.runtime.model import compile_model
from tvm_integration.qnn.semantics.errors import ModelError

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "tflite"
NETWORKS = ["cnn_int8", "mobilenet_int8", "mlp_int8", "legacy_uint8", "softmax_int8"]


def litert_outputs(path: Path, feeds: dict, resolver=litert.OpResolverType.AUTO) -> dict:
    """The interpreter's outputs by name; the default resolver is what ``Interpreter(model_path)`` runs."""
    interpreter = litert.Interpreter(model_path=str(path), experimental_op_resolver_type=resolver)
    interpreter.allocate_tensors()
    for d in interpreter.get_input_details():
        interpreter.set_tensor(d["index"], feeds[d["name"]])
    interpreter.invoke()
    return {d["name"]: interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()}


def random_feeds(model, rng) -> dict:
    return {name: rng.integers(np.iinfo(dtype).min, np.iinfo(dtype).max + 1, shape).astype(dtype)
            for name, (shape, dtype) in model.inputs.items()}


@pytest.fixture(scope="module")
def compiled():
    """Each model compiled once for the module."""
    models = {}

    def get(name):
        if name not in models:
            models[name] = compile_model(DATA / f"{name}.tflite")
        return models[name]
    return get


def every_pair() -> dict:
    """The add model's two 256x256 inputs: every (x, y) pair of int8 values once."""
    v = np.arange(-128, 128, dtype=np.int8)
    return {"x": np.repeat(v, 256).reshape(1, 256, 256, 1), "y": np.tile(v, 256).reshape(1, 256, 256, 1)}


def every_sum() -> dict:
    """The mean model's input [1, 5, 7, 8926]: channel c's 35 values sum to -128 * 35 + c."""
    sums = np.arange(-128 * 35, 127 * 35 + 1)
    quotient, remainder = np.divmod(sums, 35)
    x = quotient + (np.arange(35)[:, None] < remainder)
    assert (x.sum(0) == sums).all()
    return {"x": x.reshape(1, 5, 7, -1).astype(np.int8)}


@pytest.mark.parametrize("name", NETWORKS)
def test_network_is_bit_exact_with_litert(compiled, name):
    model = compiled(name)
    rng = np.random.default_rng(16)
    for _ in range(5):
        feeds = random_feeds(model, rng)
        ours, expected = model(feeds), litert_outputs(DATA / f"{name}.tflite", feeds)
        assert list(ours) == list(expected)
        for output, y in expected.items():
            assert len(np.unique(y)) > 3, "a saturated output would hide differences"
            assert ours[output].dtype == y.dtype and ours[output].shape == y.shape
            np.testing.assert_array_equal(ours[output], y, err_msg=f"{name} output {output}")


@pytest.mark.parametrize("name, split_input", [("cnn_int8", False), ("mobilenet_int8", False), ("shapes_int8", True)])
def test_no_transpose_undoes_another(name, split_input):
    """The importer holds each 4-D tensor as an NCHW view of the model's NHWC tensor, and bind holds images in
    NHWC: the input's view taken back to NHWC for the first convolution, and an NHWC view of an image held in
    NHWC (before a flatten), are the tensors themselves, for x86 and for Arm; the input is transposed only where
    an op reads it in NCHW (shapes_int8's SPLIT). The outputs stay LiteRT's (test_network_is_bit_exact_with_litert,
    test_litert_aarch64)."""
    from tvm_integration.qnn.lower import pipeline
    from tvm_integration.qnn.runtime.model import read
    module = read(DATA / f"{name}.tflite")[0]
    for target, mcpu in (("host", None), ("neon", "cortex-a76")):
        main = str(pipeline.lower(module, target=target, mcpu=mcpu)["main"])
        transposes = dict(re.findall(r"(\w+) = R\.call_tir\(transpose\d*, \((\w+),\)", main))
        params = re.findall(r"(\w+): R\.Tensor", main.split(") ->")[0])
        assert transposes and params
        for result, operand in transposes.items():
            assert operand not in transposes, f"{target}: {result} transposes the transpose {operand}"
            assert split_input or operand not in params, f"{target}: {result} transposes the input {operand}"


@pytest.mark.parametrize("name, feeds", [("add_int8", every_pair), ("mean_int8", every_sum)])
def test_every_case_of_add_and_mean(compiled, name, feeds):
    """XNNPACK's add (21-bit multipliers) on all 65536 input pairs, its mean (float) on all 8926 sums;
    TFLite's reference kernels (fixed point) are one step off on some of them, so these inputs tell the
    two arithmetics apart."""
    feeds = feeds()
    ours = compiled(name)(feeds)["Identity"]
    path = DATA / f"{name}.tflite"
    np.testing.assert_array_equal(ours, litert_outputs(path, feeds)["Identity"])
    steps = litert_outputs(path, feeds, litert.OpResolverType.BUILTIN_REF)["Identity"].astype(int) - ours
    assert np.count_nonzero(steps) and np.abs(steps).max() == 1


def requantized(name: str, tensors: dict, directory: Path) -> Path:
    """The fixture ``name`` with the scale and zero point of some tensors rewritten in its flatbuffer
    (``tensors``: index -> (scale, zero point)), saved in ``directory``."""
    content = bytearray((DATA / f"{name}.tflite").read_bytes())
    graph = tflite.Model.GetRootAsModel(content, 0).Subgraphs(0)
    for index, (scale, zero_point) in tensors.items():
        quantization = graph.Tensors(index).Quantization()
        quantization.ScaleAsNumpy()[0], quantization.ZeroPointAsNumpy()[0] = scale, zero_point
    path = directory / f"{name}.tflite"
    path.write_bytes(content)
    return path


@pytest.mark.parametrize("x, y", [((0.4335312, 16), (0.010920434, -92)),   # float(sum) * scale + offset: its FMA
                                                                           # rounds one sum differently
                                  ((0.01708984375, 0), (0.00390625, 3))],  # scale 1/8: a tie every 8 sums
                         ids=["unfused", "ties"])
def test_mean_with_requantizations_that_tell_roundings_apart(tmp_path, x, y):
    path = requantized("mean_int8", {0: x, 2: y}, tmp_path)              # tensor 0 the input, 2 the output
    feeds = every_sum()
    np.testing.assert_array_equal(compile_model(path)(feeds)["Identity"], litert_outputs(path, feeds)["Identity"])


def test_fused_relu6_bound_rounds_half_to_even(tmp_path):
    """mobilenet_int8's first convolution (output tensor 12, Relu6 fused) at output scale 2.4: 6 / 2.4 =
    2.5 in float32, XNNPACK's bound -128 + 2 (lrintf), TFLite's builtin kernels' -128 + 3 (half away)."""
    path = requantized("mobilenet_int8", {12: (2.4, -128)}, tmp_path)
    model = compile_model(path)
    rng = np.random.default_rng(5)
    for _ in range(3):
        feeds = random_feeds(model, rng)
        ours, expected = model(feeds), litert_outputs(path, feeds)
        np.testing.assert_array_equal(ours["Identity"], expected["Identity"])


def test_unsupported_operator_named_with_the_supported_ones():
    with pytest.raises(ModelError, match=r"unsupported operators: DEQUANTIZE \(#0\), ELU \(#1\).*; supported: ADD, "
                                         r"AVERAGE_POOL_2D, CONCATENATION, CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED"):
        compile_model(DATA / "refused_int8.tflite")


@pytest.mark.parametrize("command", ["compile", "run"])
@pytest.mark.parametrize("damage", ["garbage", "truncated", "root offset"])
def test_a_corrupt_model_is_one_line_and_writes_nothing(tmp_path, capsys, command, damage):
    original = (DATA / "cnn_int8.tflite").read_bytes()
    content = {"garbage": b"not a flatbuffer at all",
               "truncated": original[:3000],
               "root offset": b"\xff\xff\x00\x00" + original[4:]}[damage]
    model = tmp_path / "bad.tflite"
    model.write_bytes(content)
    np.save(tmp_path / "x.npy", np.zeros((1, 16, 16, 3), np.int8))
    out = tmp_path / ("bad.so" if command == "compile" else "y.npy")
    argv = [command, str(model), *(["-o", str(out)] if command == "compile" else
                                  ["--input", str(tmp_path / "x.npy"), "--output", str(out)])]
    assert cli.main(argv) == 1
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and captured.err.startswith(f"qsynth: model: {model}"), captured.err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.tflite", "x.npy"]


def test_run_command_on_a_two_output_model(tmp_path):
    model = tmp_path / "legacy_uint8.tflite"
    model.write_bytes((DATA / "legacy_uint8.tflite").read_bytes())
    x = np.random.default_rng(3).integers(0, 256, (1, 12, 12, 3)).astype(np.uint8)
    np.save(tmp_path / "x.npy", x)
    assert cli.main(["run", str(model), "--input", str(tmp_path / "x.npy"), "--output", str(tmp_path / "y.npz")]) == 0
    ours, expected = np.load(tmp_path / "y.npz"), litert_outputs(model, {"x": x})
    assert sorted(ours.files) == sorted(expected) == ["m", "y"]
    for name in expected:
        np.testing.assert_array_equal(ours[name], expected[name])


def test_bench_model_baseline_is_litert():
    row = bench_model(DATA / "mean_int8.tflite", trials=2)
    assert row["reference"] == "litert" and row["max_abs_diff_vs_litert"] == 0
    assert set(row["baselines"]) == {"litert_int8"} and row["ours_ms"] > 0
    assert row["tuning"] == {"log": tuning.host_log().name, "shapes": 0, "tuned": 0}     # a mean: no int8 tile


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("QSYNTH_SLOW") != "1", reason="opt-in: QSYNTH_SLOW=1 (runs TensorFlow's converter)")
def test_tensorflow_conversion_reproduces_the_fixtures(tmp_path):
    """scripts/make_tflite_models.py with TensorFlow (tensorflow-cpu 2.21) writes the committed
    fixtures byte for byte."""
    pytest.importorskip("tensorflow", reason="TensorFlow is not installed (pip install tensorflow-cpu==2.21.0)",
                        exc_type=ModuleNotFoundError)
    subprocess.run([sys.executable, str(ROOT / "scripts" / "make_tflite_models.py"), "-o", str(tmp_path)],
                   check=True, capture_output=True)
    written = sorted(p.name for p in tmp_path.glob("*.tflite"))
    assert written == sorted(p.name for p in DATA.glob("*.tflite"))
    for name in written:
        assert (tmp_path / name).read_bytes() == (DATA / name).read_bytes(), f"{name} differs from the fixture"
