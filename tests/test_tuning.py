"""The tuning log (tvm_integration/kernels/tuning.py) and every candidate tile it may pick, against numpy."""
from __future__ import annotations

import json

import numpy as np
import pytest

from tvm_integration.kernels import selection, tuning
from tvm_integration.ops.conv2d import conv2d
from tvm_integration.ops.dense import dense
from tvm_integration.ops.output_stage import OutputStage, ScaleRequantize


def test_log_records_fastest_and_choose_reads_it(tmp_path):
    path = tmp_path / "uarch.json"
    candidates = selection.int8_candidates("host")
    names = [k.intrin for k in candidates]
    slow_first = {name: float(len(names) - i) for i, name in enumerate(names)}
    assert tuning.record("dense m5 n7 k9 uint8", slow_first, path) == names[-1]
    assert json.loads(path.read_text())["dense m5 n7 k9 uint8"]["kernel"] == names[-1]
    assert tuning.choose("dense m5 n7 k9 uint8", candidates, 5, 7, path).intrin == names[-1]
    # a shape not in the log: the tile with the least padding
    expected = min(candidates, key=lambda k: (-(-96 // k.spec.mr) * k.spec.mr * -(-128 // k.spec.nr) * k.spec.nr,
                                              -k.spec.nr, -k.spec.k))
    assert tuning.choose("other", candidates, 96, 128, path) is expected


def test_corrupt_log_is_an_error(tmp_path):
    path = tmp_path / "uarch.json"
    path.write_text("{ not json")
    with pytest.raises(tuning.TuningLogError, match="is not valid JSON"):
        tuning.choose("k", selection.int8_candidates("host"), 8, 8, path)
    path.write_text(json.dumps({"k": {"ms": {}}}))
    with pytest.raises(tuning.TuningLogError, match="must be an object with a 'kernel'"):
        tuning.read_log(path)


@pytest.mark.parametrize("kernel", selection.int8_candidates("host"), ids=lambda k: f"{k.spec.mr}x{k.spec.nr}x{k.spec.k}")
def test_every_candidate_tile_is_correct_on_odd_shapes(kernel):
    rng = np.random.default_rng(kernel.spec.nr)
    w = rng.integers(-128, 128, (70, 13, 3, 3)).astype(np.int8)
    x = rng.integers(0, 256, (1, 11, 9, 13)).astype(np.uint8)
    scale = (rng.random(70) * 0.01).astype(np.float32)
    stage = OutputStage(bias=rng.integers(-500, 500, 70).astype(np.int32),
                        requantize=ScaleRequantize(scale, 5, "uint8"))
    y = conv2d(w, x.shape, "NHWC", 2, 1, stage=stage, kernel=kernel, pad_value=9)(x)
    xp = np.pad(x[0].astype(np.int64), ((1, 1), (1, 1), (0, 0)), constant_values=9)
    acc = sum(xp[i:i + 11:2, j:j + 9:2, :] @ w[:, :, i, j].T.astype(np.int64) for i in range(3) for j in range(3))
    expected = np.clip(np.rint((acc + stage.bias).astype(np.float32) * scale) + 5, 0, 255)
    np.testing.assert_array_equal(y[0], expected)
    wd = rng.integers(-128, 128, (37, 29)).astype(np.int8)
    xd = rng.integers(0, 256, (3, 29)).astype(np.uint8)
    np.testing.assert_array_equal(dense(wd, 3, kernel=kernel)(xd), xd.astype(np.int64) @ wd.T.astype(np.int64))
