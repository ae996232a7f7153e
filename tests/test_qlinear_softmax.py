"""DQ -> Softmax -> Q, which onnxruntime fuses into its QLinearSoftmax kernel (qnn/semantics/qlinear_softmax.py),
bit-exact against onnxruntime at the row lengths of transformers (128; 196 and 197, ViT's patches with
and without the class token; 384; 1000), u8 and s8, on rows built to sit at rounding ties.

A long row's float sum carries a rounding error of about a millionth, so only rows whose exact
quotient lies within about that of a half step tell two implementations apart: the tie rows below are
the ones whose exact value (numpy, in double) is nearest a half among all rows of three levels."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from tvm import tirx

from tvm_integration import compile_model
from tvm_integration.bench.models import reference_session
from tvm_integration.qnn.onnx.importer import load
from tvm_integration.qnn.runtime.model import lower

TYPES = {"uint8": TensorProto.UINT8, "int8": TensorProto.INT8}
# (row length, x scale, y scale, y zero point as an offset from the type's lowest value): quantize_static's
# output scale 1/255 written in decimal (0.00392157, whose floor(1 / s) is 254), 1/256, and others; x
# scale 1 makes the bottom's exps 0 in float, so a row of two tops has the exact quotient 201 / 2
CASES = [(128, 0.046, 1 / 256, 0), (196, 0.0476, 0.00392157, 0), (197, 0.031, 1 / 255, 0),
         (384, 0.04625079, 0.00392157, 0), (384, 0.0925, 1 / 256, 0), (1000, 0.05, 1 / 256, 0),
         (1000, 0.0213, 1 / 200, 3), (128, 1.0, 1 / 201, 0)]
TIE_ROWS, RANDOM_ROWS = 48, 16


def softmax_model(path, dtype: str, cases, opset: int = 17, axis: int = -1, shape_of=None) -> list[str]:
    """One DQ -> Softmax(``axis``) -> Q chain per case, input ``x<i>`` to output ``y<i>`` of
    ``shape_of(rows, D)`` (default [rows, D])."""
    low = np.iinfo(dtype).min
    nodes, inits, inputs, outputs = [], [], [], []
    for i, (d, sx, sy, zy) in enumerate(cases):
        nodes += [helper.make_node("DequantizeLinear", [f"x{i}", f"sx{i}", f"zx{i}"], [f"d{i}"]),
                  helper.make_node("Softmax", [f"d{i}"], [f"s{i}"], axis=axis),
                  helper.make_node("QuantizeLinear", [f"s{i}", f"sy{i}", f"zy{i}"], [f"y{i}"])]
        inits += [numpy_helper.from_array(np.array(v, t), n) for v, t, n in (
            (sx, np.float32, f"sx{i}"), (low + 7, dtype, f"zx{i}"),
            (sy, np.float32, f"sy{i}"), (low + zy, dtype, f"zy{i}"))]
        shape = (shape_of or (lambda rows, d: [rows, d]))(TIE_ROWS + RANDOM_ROWS + 1, d)
        inputs.append(helper.make_tensor_value_info(f"x{i}", TYPES[dtype], shape))
        outputs.append(helper.make_tensor_value_info(f"y{i}", TYPES[dtype], shape))
    model = helper.make_model(helper.make_graph(nodes, "softmax", inputs, outputs, inits),
                              opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return [o.name for o in outputs]


def tie_rows(dtype: str, d: int, sx: float, sy: float, rng) -> np.ndarray:
    """[TIE_ROWS, d]: rows of ``a`` values at the top, ``b`` at top - k and the rest at the bottom of
    the type, shuffled, chosen among all a <= 8, k <= 40, b so that the top's or the (top - k)'s exact
    quotient, floor(1 / sy) * e / sum, is nearest a half."""
    info = np.iinfo(dtype)
    multiplier = float(np.floor(np.float32(1) / np.float32(sy)))
    a, k, b = np.meshgrid(np.arange(1, 9), np.arange(1, 41), np.arange(0, d), indexing="ij")
    a, k, b = a.ravel(), k.ravel(), b.ravel()
    keep = a + b <= d
    a, k, b = a[keep], k[keep], b[keep]
    below = np.exp(-k * np.float64(np.float32(sx)))
    bottom = np.exp(-(info.max - info.min) * np.float64(np.float32(sx)))
    total = a + b * below + (d - a - b) * bottom
    quotients = np.stack([multiplier / total, multiplier * below / total])
    distance = np.abs(quotients - np.floor(quotients) - 0.5).min(axis=0)
    rows = []
    for j in np.argsort(distance)[:TIE_ROWS]:
        row = np.full(d, info.min, np.int64)
        row[:a[j] + b[j]] = info.max - k[j]
        row[:a[j]] = info.max
        rows.append(rng.permutation(row))
    return np.array(rows, dtype)


def inputs(dtype: str, d: int, sx: float, sy: float, rng) -> np.ndarray:
    """Tie rows; attention-like rows (a few values near the top, most far below); and a row whose top
    takes the whole sum, so its quotient is floor(1 / sy) and saturates the output type."""
    info = np.iinfo(dtype)
    near_top = np.clip(info.max - rng.geometric(0.05, (RANDOM_ROWS, d)), info.min, info.max)
    one_hot = np.full((1, d), info.min)
    one_hot[0, rng.integers(d)] = info.max
    return np.concatenate([tie_rows(dtype, d, sx, sy, rng), near_top, one_hot]).astype(dtype)


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_qlinear_softmax_exact_at_ties(tmp_path, dtype):
    """Every case one integer QLinearSoftmax (no float softmax left), its outputs onnxruntime's."""
    path = tmp_path / "softmax.onnx"
    names = softmax_model(path, dtype, CASES)
    functions = {g.name_hint.rstrip("0123456789") for g, f in lower(load(path)).functions.items()
                 if isinstance(f, tirx.PrimFunc)}
    assert {f for f in functions if "softmax" in f} == {"qnn_qlinear_softmax"}
    rng = np.random.default_rng(0)
    feeds = {f"x{i}": inputs(dtype, d, sx, sy, rng) for i, (d, sx, sy, _) in enumerate(CASES)}
    expected = dict(zip(names, reference_session(path).run(names, feeds)))
    ours = compile_model(path, threads=1)(feeds)
    for i, name in enumerate(names):
        np.testing.assert_array_equal(ours[name], expected[name], err_msg=f"{dtype}, case {CASES[i]}")


# (opset, axis, the input's shape from (rows, D), the tie rows laid out in it)
LAYOUTS = {"opset11_flattened": (11, 1, lambda rows, d: [rows, 3, d // 3], lambda x: x.reshape(x.shape[0], 3, -1)),
           "opset13_first_axis": (13, 0, lambda rows, d: [d, rows], lambda x: np.ascontiguousarray(x.T))}


@pytest.mark.parametrize("layout", LAYOUTS)
def test_qlinear_softmax_at_other_opsets_and_axes(tmp_path, layout):
    """onnxruntime fuses DQ -> Softmax -> Q into QLinearSoftmax at every opset and axis: at opset 11-12
    its rows are the input flattened to 2-D from ``axis`` (rows of 384 as [rows, 3, 128]); at 13, over
    an axis not the last, it swaps that axis with the last around its kernel (rows of 384 down the
    first axis of [384, rows]); also rows of 198. qsynth moves the reshape or the transposes to the
    integers; at ties only QLinearSoftmax's arithmetic gives onnxruntime's outputs."""
    opset, axis, shape_of, laid_out = LAYOUTS[layout]
    cases = [(384, 0.04625079, 0.00392157, 0), (198, 0.0476, 0.00392157, 0)]
    path = tmp_path / "softmax.onnx"
    names = softmax_model(path, "uint8", cases, opset=opset, axis=axis, shape_of=shape_of)
    functions = {g.name_hint.rstrip("0123456789") for g, f in lower(load(path)).functions.items()
                 if isinstance(f, tirx.PrimFunc)}
    assert {f for f in functions if "softmax" in f} == {"qnn_qlinear_softmax"}
    rng = np.random.default_rng(2)
    feeds = {f"x{i}": laid_out(inputs("uint8", d, sx, sy, rng)) for i, (d, sx, sy, _) in enumerate(cases)}
    expected = dict(zip(names, reference_session(path).run(names, feeds)))
    ours = compile_model(path, threads=1)(feeds)
    for name in names:
        np.testing.assert_array_equal(ours[name], expected[name], err_msg=f"{layout}, {name}")


def test_output_scale_whose_reciprocal_overflows_float(tmp_path):
    """y_scale 1e-39: 1 / y_scale overflows float, and onnxruntime takes floor(1 / y_scale) in double;
    quotients e / sum near 1e-38 (x - max of about -175 at x_scale 0.5) land inside the output range."""
    cases = [(128, 0.5, 1e-39, 0)]
    path = tmp_path / "tiny.onnx"
    (name,) = softmax_model(path, "uint8", cases)
    rng = np.random.default_rng(1)
    x = np.full((TIE_ROWS + RANDOM_ROWS + 1, 128), 255, np.uint8)
    x[:, 1:] = rng.integers(70, 90, (x.shape[0], 127))
    expected = reference_session(path).run([name], {"x0": x})[0]
    assert 0 < np.count_nonzero((expected > 0) & (expected < 255))
    np.testing.assert_array_equal(compile_model(path, threads=1)({"x0": x})[name], expected)


def test_rows_summed_together_exact_at_ties(tmp_path):
    """softmax_rows.py sums 8 rows at a time, each row a vector lane adding its entries in order: the
    sums' innermost loop runs across the rows, vectorized. Every case's rows (the tie rows, drawn again
    8 times) as [8, 65, D], 520 rows, 8 to a group: onnxruntime's outputs."""
    path = tmp_path / "softmax.onnx"
    names = softmax_model(path, "uint8", CASES, shape_of=lambda rows, d: [8, rows, d])
    scripts = [f.script().splitlines() for g, f in lower(load(path)).functions.items()
               if g.name_hint.startswith("qnn_qlinear_softmax")]
    assert len(scripts) == len(CASES)
    assert all(any("T.vectorized(T.int64(8))" in line and 'T.sblock("total")' in "".join(lines[j + 1:j + 3])
                   for j, line in enumerate(lines)) for lines in scripts)
    rng = np.random.default_rng(3)
    feeds = {f"x{i}": np.stack([inputs("uint8", d, sx, sy, rng) for _ in range(8)])
             for i, (d, sx, sy, _) in enumerate(CASES)}
    expected = dict(zip(names, reference_session(path).run(names, feeds)))
    ours = compile_model(path, threads=1)(feeds)
    for i, name in enumerate(names):
        np.testing.assert_array_equal(ours[name], expected[name], err_msg=f"case {CASES[i]}")
