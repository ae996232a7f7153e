"""The float ops of a quantized transformer (issue 32 item 4, tvm_integration/qnn/float/float_ops.py) against
onnxruntime's CPU kernels, each op a one-node model compiled through the whole pipeline
(``allow_float``): the float matmul of two activations, Softmax, Erf and GELU bit-exact."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

pytestmark = pytest.mark.filterwarnings("ignore:.*has no quantized op")

from tvm_integration import compile_model
from tvm_integration.bench.models import reference_session
from tvm_integration.qnn.float import float_matmul
from tvm_integration.qnn.onnx.importer import load
from tvm_integration.qnn.runtime.model import lower


def float_model(path, nodes, inputs, constants=(), out_shape=None):
    """One float graph; ``out_shape`` default: the first input's."""
    out_shape = inputs[0][1] if out_shape is None else out_shape
    graph = helper.make_graph(nodes, "f", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
                              [numpy_helper.from_array(np.asarray(v, np.float32), n) for n, v in constants])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def assert_exact(path, feeds):
    model = compile_model(path, threads=1, allow_float=True)
    expected = reference_session(path).run(None, feeds)[0]
    ours = model(feeds)["y"]
    assert ours.shape == expected.shape
    np.testing.assert_array_equal(ours, expected)


def functions(path) -> set[str]:
    return {g.name_hint.rstrip("0123456789") for g in lower(load(path, allow_float=True)).functions}


@pytest.mark.parametrize("a_shape,b_shape", [((1, 2, 16, 32), (1, 2, 32, 16)), ((1, 2, 16, 16), (1, 2, 16, 32)),
                                             ((2, 8, 300), (300, 24)), ((3, 5, 200), (1, 200, 128)),
                                             ((7, 40), (2, 40, 33)), ((1, 2, 24, 300), (1, 2, 300, 40))],
                         ids=["qk", "av", "k_blocks", "k_blocks_wide", "broadcast_odd", "six_rows_padded_k_blocks"])
def test_float_matmul_exact(tmp_path, a_shape, b_shape):
    """MLAS's sgemm sums each output as one FMA chain per K block (its block depends on N:
    float_matmul.stride_k); K of 300 and 200 cross blocks, 33 columns take no vector width, 24 rows of 40
    columns take AVX2's 6x16 tiles over B padded to 48."""
    rng = np.random.default_rng(0)
    path = float_model(tmp_path / "mm.onnx", [helper.make_node("MatMul", ["a", "b"], ["y"])],
                       [("a", a_shape), ("b", b_shape)],
                       out_shape=[*np.broadcast_shapes(a_shape[:-2], b_shape[:-2]), a_shape[-2], b_shape[-1]])
    assert_exact(path, {"a": rng.standard_normal(a_shape).astype(np.float32),
                        "b": rng.standard_normal(b_shape).astype(np.float32)})
    assert "qsynth_float_matmul" in functions(path) and "matmul" not in functions(path)


@pytest.mark.parametrize("m", [1, 4])
def test_float_matmul_by_constant_weights_exact(tmp_path, m):
    """A MatMul by a constant 2-D B: onnxruntime packs B once (MlasGemmPackB) and its packed sgemm sums K
    in blocks of 256 (float_matmul.PACKED_STRIDE_K), not stride_k's 128 for this N (1351 of the 1536
    outputs of one row differed with it)."""
    rng = np.random.default_rng(1)
    w = (rng.standard_normal((768, 1536)) / 30).astype(np.float32)
    path = float_model(tmp_path / "dense.onnx", [helper.make_node("MatMul", ["a", "w"], ["y"])], [("a", (m, 768))],
                       [("w", w)], out_shape=[m, 1536])
    assert float_matmul.stride_k(768, 1536) != float_matmul.PACKED_STRIDE_K
    assert_exact(path, {"a": rng.standard_normal((m, 768)).astype(np.float32)})


def host_model_of(monkeypatch, name: str) -> None:
    """qsynth's host model made that of the CPU whose /proc/cpuinfo tests/data records as ``name``."""
    from pathlib import Path
    from isa_specs import host
    recorded = host.parse_cpuinfo((Path(__file__).parent / "data" / f"cpuinfo_{name}.txt").read_text())
    monkeypatch.setattr(host, "model", lambda: recorded)


@pytest.mark.parametrize("name,m,tile", [("zen3", 384, (6, 16)), ("zen3", 128, (4, 16)), ("zen4", 384, (4, 64))])
def test_float_matmul_register_tiles_follow_the_host(monkeypatch, name, m, tile):
    """AVX2: 6x16 where 6 divides the rows, as MLAS's FMA3 kernel (BERT's attention at 384 tokens: Q.K^T 4.66
    against 4.11 ms on 4x16), else 4x16; AVX-512: 4x64."""
    host_model_of(monkeypatch, name)
    assert float_matmul._register_tile_shape(m, 384) == tile


def test_float_matmul_adds_k_blocks_tile_by_tile():
    """More than one K block: each tile of C computes every block's sum of its tile and adds them in turn,
    under one parallel loop (each block in a parallel nest of its own and each add a pass over C took BERT's
    A.V at 384 tokens, [12, 384, 384] x [12, 384, 64], 6.09 ms where it now takes 4.15; onnxruntime 4.02)."""
    func = float_matmul.matmul_func((1, 2, 12, 40), (1, 2, 40, 16), stride=16)
    assert _parallel_loops(func.body) == 1


def test_stride_k_follows_n():
    assert [float_matmul.stride_k(k, n) for k, n in ((64, 128), (128, 64), (300, 32), (700, 16), (1100, 200))] == \
        [64, 256, 512, 1024, 128]
    assert [float_matmul.stride_k(k, n, trans_a=True) for k, n in ((64, 128), (300, 32), (700, 16))] == [64, 128, 128]


TRANSPOSE = [0, 2, 1]
# (A's shape, B's shape as the graph holds them, which are transposed, the scale op and constant)
FUSED = {"trans_b_mul": ((2, 16, 32), (2, 16, 32), (False, True), "Mul", 0.125),
         "trans_a_div": ((2, 300, 16), (2, 300, 24), (True, False), "Div", 3.0),
         "trans_ab_scale_first": ((2, 300, 16), (2, 40, 300), (True, True), "Mul", 0.3),
         "trans_a_alone": ((2, 300, 16), (2, 300, 24), (True, False), None, None)}


@pytest.mark.parametrize("case", FUSED)
def test_fused_matmul_exact(tmp_path, case):
    """onnxruntime folds a Transpose of an operand's last two axes into the matmul (transA, transB)
    and a scalar Mul or Div after it (alpha) into FusedMatMul. A transposed A keeps MLAS's K block at
    128 where N is small (stride_k: K of 300 is one block of 512 untransposed, three of 128
    transposed); alpha scales each block's sum (matmul_func)."""
    a_shape, b_shape, (trans_a, trans_b), scale_op, c = FUSED[case]
    rng = np.random.default_rng(7)
    operands = ["at" if trans_a else "a", "bt" if trans_b else "b"]
    nodes = [helper.make_node("Transpose", [x], [t], perm=TRANSPOSE) for x, t in zip("ab", operands) if x != t]
    nodes.append(helper.make_node("MatMul", operands, ["m" if scale_op else "y"]))
    if scale_op:
        nodes.append(helper.make_node(scale_op, ["c", "m"] if case.endswith("first") else ["m", "c"], ["y"]))
    m, n = (a_shape[2] if trans_a else a_shape[1]), (b_shape[1] if trans_b else b_shape[2])
    path = float_model(tmp_path / "fmm.onnx", nodes, [("a", a_shape), ("b", b_shape)], [("c", c)] if c else [],
                       out_shape=[2, m, n])
    assert_exact(path, {"a": rng.standard_normal(a_shape).astype(np.float32),
                        "b": rng.standard_normal(b_shape).astype(np.float32)})
    assert "qsynth_float_matmul" in functions(path)


@pytest.mark.parametrize("shape,axis,spread", [((1, 2, 16, 16), -1, 12), ((2, 3, 50), -1, 12), ((4, 128), -1, 12),
                                               ((2, 40, 6), 1, 12), ((4, 64, 128), -1, 3)],
                         ids=["heads", "odd_row", "long_row", "middle_axis", "attention"])
def test_softmax_exact(tmp_path, shape, axis, spread):
    """MLAS's softmax: exp by its polynomial, the sum-exp kernel's lane sums in this CPU's vector width
    (AVX-512F 16, FMA3 8: mlas_math.float_lanes), times 1 / sum; rows of 16, of 50 (a partial vector)
    and 128; values spread wide enough that some exps underflow, or (attention's 256 rows of 128) close
    enough that every lane adds to the sum and the lanes' order decides its rounding (the AVX-512 order
    on the Zen 3 host, FMA3's: 63 994 of 196 608 outputs off by an ulp). Over an axis not the last
    (opset 13), onnxruntime swaps it with the last around the kernel."""
    x = (np.random.default_rng(1).standard_normal(shape) * spread).astype(np.float32)
    path = float_model(tmp_path / "sm.onnx", [helper.make_node("Softmax", ["x"], ["y"], axis=axis)], [("x", shape)])
    assert_exact(path, {"x": x})
    assert "qsynth_softmax" in functions(path)


def test_softmax_exps_near_the_clamp_exact(tmp_path):
    """x - max in about [-88.38, -87.68] rounds m to -127: FMA3's sum-exp kernel (the Zen 3 host's) builds 2^m
    from its exponent bits, (m + 127) << 23, which is 0 there, so those exps and outputs are 0; AVX-512F's
    vscalefps gives a subnormal (on this host 39 of 84 outputs differed while every CPU took vscalefps'). And
    FMA3's clamps x at -88.376, AVX-512F's at -103.97: row 3 reaches -100 (on the AMX Xeon 12 of its outputs
    differed while every CPU took FMA3's clamp)."""
    x = np.zeros((4, 21), np.float32)
    x[0, 1:], x[1, 1:], x[2, 1:], x[3, 1:] = -87.9, -87.5, -88.0, np.linspace(-80, -100, 20)
    path = float_model(tmp_path / "sm.onnx", [helper.make_node("Softmax", ["x"], ["y"], axis=-1)], [("x", x.shape)])
    assert_exact(path, {"x": x})


@pytest.mark.parametrize("lanes", [8, 16])
def test_softmax_sums_its_exps_as_it_stores_them(lanes):
    """One sweep over a row computes its exps, stores them in the output and adds each to its lane's sum,
    one vector of MLAS's ``lanes`` a step, as MLAS's sum-exp kernel does: as three passes (the exps, their
    sum, the products) a [1, 12, 384, 384] softmax took 1.65x the time (2.19 against 1.33 ms)."""
    from tvm_integration.qnn.float import softmax
    func = softmax.softmax_func((2, 3 * lanes + 5), lanes)
    stores = _vectorized_stores(func.body)
    assert (lanes, {(lanes,), (2 * (3 * lanes + 5),)}) in stores      # an exp to the output and to its lane's sum
    assert set().union(*(shapes for _, shapes in stores)) == {(lanes,), (2 * (3 * lanes + 5),)}   # no other buffer


def _vectorized_stores(stmt) -> list[tuple[int, set]]:
    """(extent, the shapes of the buffers it stores to) of each vectorized loop under ``stmt`` (a store: extent 0)."""
    from tvm import tirx
    if isinstance(stmt, tirx.BufferStore):
        return [(0, {tuple(int(d) for d in stmt.buffer.shape)})]
    found = [found for c in _children(stmt) for found in _vectorized_stores(c)]
    if isinstance(stmt, tirx.For) and stmt.kind == tirx.ForKind.VECTORIZED:
        return [(int(stmt.extent), set().union(*(stored for _, stored in found)))]
    return found


def _children(stmt) -> list:
    from tvm import tirx
    return list(stmt.seq) if isinstance(stmt, tirx.SeqStmt) else \
        [c for c in (getattr(stmt, a, None) for a in ("block", "body", "then_case", "else_case"))
         if isinstance(c, tirx.Stmt)]


def _parallel_loops(stmt) -> int:
    from tvm import tirx
    own = isinstance(stmt, tirx.For) and stmt.kind == tirx.ForKind.PARALLEL
    return own + sum(_parallel_loops(c) for c in _children(stmt))


@pytest.mark.parametrize("name,lanes", [("zen3", 8), ("skylake", 8), ("zen4", 16), ("sapphirerapids", 16)])
def test_mlas_float_lanes_follow_the_cpu_flags_not_the_host_features_switch(monkeypatch, name, lanes):
    """MLAS dispatches on the CPU's own flags: AVX-512F's kernels where it has them, FMA3's else, also
    when QSYNTH_HOST_FEATURES=avx2 makes qsynth's host model AVX2-only."""
    from pathlib import Path
    from isa_specs import host
    from tvm_integration.qnn.float import mlas_math
    recorded = host.parse_cpuinfo((Path(__file__).parent / "data" / f"cpuinfo_{name}.txt").read_text())
    monkeypatch.setattr(host, "cpu_model", lambda: recorded)
    monkeypatch.setattr(host, "model", lambda: host.restricted(recorded, "avx2"))
    assert mlas_math.float_lanes() == lanes


def test_erf_exact_everywhere(tmp_path):
    """MLAS's erf on a dense sweep of [-5, 5] (both polynomials, the split at 0.921875, the clamp) and
    random values."""
    x = np.concatenate([np.linspace(-5, 5, 40000, dtype=np.float32),
                        np.random.default_rng(2).standard_normal(24000).astype(np.float32)]).reshape(1, 64, 1000)
    path = float_model(tmp_path / "erf.onnx", [helper.make_node("Erf", ["x"], ["y"])], [("x", x.shape)])
    assert_exact(path, {"x": x})
    assert "qsynth_erf" in functions(path)


def test_gelu_as_onnxruntime_fuses_it(tmp_path):
    """torch's exact GELU, x * (erf(x / sqrt 2) + 1) * 0.5: onnxruntime fuses it into Gelu (erf of
    x * float32(1 / sqrt 2)); qsynth rewrites it the same way, so the two agree bit for bit where
    the graph as written would differ (x / sqrt 2 rounds differently from x * (1 / sqrt 2))."""
    shape = (1, 16, 256)
    nodes = [helper.make_node("Div", ["x", "sqrt2"], ["g0"]), helper.make_node("Erf", ["g0"], ["g1"]),
             helper.make_node("Add", ["g1", "one"], ["g2"]), helper.make_node("Mul", ["x", "g2"], ["g3"]),
             helper.make_node("Mul", ["g3", "half"], ["y"])]
    path = float_model(tmp_path / "gelu.onnx", nodes, [("x", shape)],
                       [("sqrt2", np.sqrt(2)), ("one", 1.0), ("half", 0.5)])
    x = (np.random.default_rng(3).standard_normal(shape) * 3).astype(np.float32)
    assert_exact(path, {"x": x})
    assert "qsynth_gelu" in functions(path)
    divided = (x / np.float32(np.sqrt(2))).astype(np.float32)
    assert (divided != (x * np.float32(0.70710678118654752440)).astype(np.float32)).any()


@pytest.mark.parametrize("kind", ["ReduceMax", "ReduceMin"])
def test_whole_tensor_reduction(tmp_path, kind):
    """DynamicQuantizeLinear's range: the max / min of every element, vectorized (exact in any order)."""
    shape = (1, 37, 70)
    x = np.random.default_rng(4).standard_normal(shape).astype(np.float32)
    path = float_model(tmp_path / "r.onnx", [helper.make_node(kind, ["x"], ["y"], keepdims=0)], [("x", shape)],
                       out_shape=[])
    assert_exact(path, {"x": x})
    assert f"qsynth_{kind[6:].lower()}" in functions(path)


@pytest.mark.parametrize("kind, fill", [("ReduceMax", -np.inf), ("ReduceMin", np.inf)])
def test_whole_tensor_reduction_of_infinities(tmp_path, kind, fill):
    """A max of nothing but -inf is -inf (a min of +inf, +inf), as onnxruntime gives: TVM's te.max starts from
    the type's lowest finite value, -3.4e38, which it returned."""
    shape = (1, 37, 70)
    x = np.full(shape, fill, np.float32)
    path = float_model(tmp_path / "r.onnx", [helper.make_node(kind, ["x"], ["y"], keepdims=0)], [("x", shape)],
                       out_shape=[])
    assert_exact(path, {"x": x})


def test_range_in_one_pass(tmp_path):
    """DynamicQuantizeLinear's range, the max and the min of one tensor, taken in one pass
    (tensor_range.range_func); each equal to onnxruntime's."""
    shape = (1, 37, 70)
    x = np.random.default_rng(4).standard_normal(shape).astype(np.float32)
    nodes = [helper.make_node("ReduceMax", ["x"], ["high"], keepdims=0),
             helper.make_node("ReduceMin", ["x"], ["low"], keepdims=0), helper.make_node("Sub", ["high", "low"], ["y"])]
    path = float_model(tmp_path / "r.onnx", nodes, [("x", shape)], out_shape=[])
    assert_exact(path, {"x": x})
    assert "qsynth_range" in functions(path) and not {"qsynth_max", "qsynth_min"} & functions(path)


@pytest.mark.parametrize("shape,spread", [((1, 16, 64), (3.0, 0.5)), ((2, 3, 40), (0.01, 100.0)),
                                         ((37, 768), (50.0, -3.0)), ((3, 37, 36), (0.3, 40.0)),
                                         ((3, 37, 13), (0.3, 40.0)), ((3, 37, 5), (0.3, 40.0))],
                         ids=["bert_small", "offset", "wide", "tail_4", "tail_4_1", "short_row"])
def test_layer_norm_exact(tmp_path, shape, spread):
    """onnxruntime 1.32's LayerNormalization kernel: the mean summed in double lanes, the variance a
    second float pass of FMA lane sums over x - mean (layer_norm.py); a large offset against a small
    spread is where a one-pass variance would cancel. Rows not a multiple of 8: the kernel's tails
    (36: four squares rounded and added in order; 13: then an FMA), and under 8 its Welford loop."""
    rng = np.random.default_rng(5)
    n = shape[-1]
    path = float_model(tmp_path / "ln.onnx", [helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], axis=-1,
                                                               epsilon=1e-12)], [("x", shape)],
                       [("g", 1 + 0.1 * rng.standard_normal(n)), ("b", 0.1 * rng.standard_normal(n))])
    assert_exact(path, {"x": (rng.standard_normal(shape) * spread[0] + spread[1]).astype(np.float32)})
    assert "qsynth_layer_norm" in functions(path)


# the nodes before the LayerNormalization of "s": a plain Add, a bias Add before it on either side, and a
# bias Add after a MatMul (onnxruntime's MatMulAddFusion makes it a Gemm first: SkipLayerNorm without bias)
SKIP_FORMS = {"no_bias": [("Add", ["a", "b"], "s")],
              "bias_first": [("Add", ["a", "bias"], "ab"), ("Add", ["ab", "b"], "s")],
              "bias_second": [("Add", ["a", "bias"], "ab"), ("Add", ["b", "ab"], "s")],
              "bias_after_matmul": [("MatMul", ["a", "w"], "aw"), ("Add", ["aw", "bias"], "ab"),
                                    ("Add", ["ab", "b"], "s")]}


@pytest.mark.parametrize("form", SKIP_FORMS)
def test_add_layer_norm_as_skip_layer_norm(tmp_path, form):
    """Add of two [1, S, H] tensors into a LayerNormalization: onnxruntime fuses the pair into
    SkipLayerNormalization (Welford's running mean and variance in float, no FMA), a bias Add of a
    constant [H] before it too, as its last input, added after the two: (a + b) + bias, not the
    graph's (a + bias) + b. So does qsynth."""
    shape, rng = (1, 20, 64), np.random.default_rng(6)         # 20 rows: a vector of 16 and 4 alone
    nodes = [helper.make_node(op, inputs, [out]) for op, inputs, out in SKIP_FORMS[form]] + \
        [helper.make_node("LayerNormalization", ["s", "g", "beta"], ["y"], axis=-1, epsilon=1e-12)]
    path = float_model(tmp_path / "skip.onnx", nodes, [("a", shape), ("b", shape)],
                       [("g", 1 + 0.1 * rng.standard_normal(64)), ("beta", 0.1 * rng.standard_normal(64)),
                        ("bias", rng.standard_normal(64)), ("w", rng.standard_normal((64, 64)) * 0.2)])
    assert_exact(path, {"a": (rng.standard_normal(shape) * 3 + 0.5).astype(np.float32),
                        "b": rng.standard_normal(shape).astype(np.float32)})
    assert "qsynth_skip_layer_norm" in functions(path) and "qsynth_layer_norm" not in functions(path)
