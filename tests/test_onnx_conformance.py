"""The onnx package's own backend node tests of every quantized operator the pipeline claims, and
a few com.microsoft QOperator cases, through the path ``qsynth run`` takes (issue 31, item 1).

Cases. onnx 1.23's wheel ships the generators of its node tests (``onnx.backend.test.case.node``),
not their ``data/node`` files; the generators are what ``backend-test-tools generate-data`` writes
those files from, so the cases here are the same models, inputs and expected outputs. The
com.microsoft ops (QLinearAdd, QLinearMul, QLinearConcat, QLinearAveragePool, QLinearSigmoid,
QLinearGlobalAveragePool, QLinearLeakyRelu) have no onnx node tests: ``microsoft_cases`` builds a few
with onnx.helper, and onnxruntime's output is their expected output.

Reference. onnxruntime (CPU provider) runs each case first. onnx 1.23 stamps its Q/DQ cases with
opset 28, which onnxruntime 1.32 does not implement: each case is re-stamped at the newest opset of
its op (at most its own) that onnxruntime runs and the checker accepts; Q/DQ mean the same from 21 to
28 for every type these cases use. Both onnxruntime and qsynth get that model. Low-bit (4-, 2-bit)
tensors, which numpy and onnxruntime's numpy binding lack, go to onnxruntime as packed OrtValues;
qsynth takes and gives them in their 8-bit containers (docs/operators.md).

Comparison. Integer outputs: bit-exact with the expected output. Float outputs (DequantizeLinear,
DynamicQuantizeLinear's scale): exactly equal to onnxruntime's (they are: ``(x - zp) * scale`` and
``(max - min) / 255`` in float32 have one rounding each), and within the case's own tolerance
(rtol 1e-3, atol 1e-7, what onnx's backend runner allows) of the expected output.

Scope. A case the pipeline does not cover must be refused by ``compile_model`` with one-line
ModelError naming the op or attribute and what is accepted, never another error: REFUSED lists
them, each with its reason.
"""
from __future__ import annotations

import ctypes
import functools
import importlib
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from qsynth.commands.qnn import _inputs
from tvm_integration.qnn.runtime.model import compile_model, input_specs
from tvm_integration.qnn.semantics.errors import ModelError

NODE_TESTS = {"QuantizeLinear": "quantizelinear", "DequantizeLinear": "dequantizelinear",
              "QLinearConv": "qlinearconv", "QLinearMatMul": "qlinearmatmul", "ConvInteger": "convinteger",
              "MatMulInteger": "matmulinteger", "DynamicQuantizeLinear": "dynamicquantizelinear"}
LOWBIT = {TensorProto.INT4: 4, TensorProto.UINT4: 4, TensorProto.INT2: 2, TensorProto.UINT2: 2}

# case -> the words its refusal must contain (besides being one line). Kept small; each out of scope:
REFUSED = {
    # 8-bit floats (e4m3fn, e5m2) and 4-bit floats: the pipeline's tensors are integers; numpy has no such type
    "test_quantizelinear_e4m3fn": ("FLOAT8E4M3FN", "integer"),
    "test_quantizelinear_e5m2": ("FLOAT8E5M2", "integer"),
    "test_quantizelinear_float4e2m1": ("FLOAT4E2M1", "integer"),
    "test_dequantizelinear_e4m3fn": ("FLOAT8E4M3FN", "integer"),
    "test_dequantizelinear_e4m3fn_float16": ("FLOAT8E4M3FN", "integer"),
    "test_dequantizelinear_e4m3fn_zero_point": ("FLOAT8E4M3FN", "integer"),
    "test_dequantizelinear_e5m2": ("FLOAT8E5M2", "integer"),
    "test_dequantizelinear_float4e2m1": ("FLOAT4E2M1", "integer"),
}


class Case:
    def __init__(self, name, model, inputs, outputs, rtol=1e-3, atol=1e-7):
        self.name, self.model, self.inputs, self.outputs, self.rtol, self.atol = name, model, inputs, outputs, rtol, atol


def _array(value):
    return numpy_helper.to_array(value) if isinstance(value, TensorProto) else np.asarray(value)


def node_cases() -> list[Case]:
    """onnx's node tests of the claimed ops (generated in memory, as their data files are)."""
    import onnx.backend.test.case.node as node
    for module in NODE_TESTS.values():
        importlib.import_module(f"onnx.backend.test.case.node.{module}")
    cases = {}
    for c in node._NodeTestCases:
        ops = {n.op_type for n in c.model.graph.node}
        if c.name.startswith("test_") and ops & set(NODE_TESTS):
            inputs, outputs = c.data_sets[0]
            cases[c.name] = Case(c.name, c.model, [_array(a) for a in inputs], [_array(a) for a in outputs],
                                 c.rtol, c.atol)
        if ops <= set(NODE_TESTS) - {"DynamicQuantizeLinear"} and len(c.model.graph.input) > 1:
            name = f"{c.name}_constant_params"
            cases[name] = Case(name, _constant_parameters(c.model, inputs), [_array(inputs[0])],
                               [_array(a) for a in outputs], c.rtol, c.atol)
    return [cases[k] for k in sorted(cases)]


def _constant_parameters(model, inputs):
    """The node test with every input but the first (weights, scales, zero points) an initializer: the
    form of a real model, where the rewrite fuses the op into integer arithmetic."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for value, array in list(zip(copy.graph.input, inputs))[1:]:
        tensor = array if isinstance(array, TensorProto) else numpy_helper.from_array(np.asarray(array))
        tensor = TensorProto.FromString(tensor.SerializeToString())
        tensor.name = value.name
        copy.graph.initializer.append(tensor)
        copy.graph.input.remove(value)
    return copy


def _model(nodes, inputs, outputs, initializers=(), opset=13):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid("com.microsoft", 1)],
                             ir_version=8)


def _tensor(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


def microsoft_cases() -> list[Case]:
    """QOperator cases of the com.microsoft domain (no onnx node tests): u8 and s8, scales and zero
    points as initializers and as graph inputs; expected outputs are onnxruntime's (``outputs`` None)."""
    rng = np.random.default_rng(31)
    cases = []
    for dtype, np_dtype in ((TensorProto.UINT8, np.uint8), (TensorProto.INT8, np.int8)):
        info = np.iinfo(np_dtype)
        tag = "u8" if dtype == TensorProto.UINT8 else "s8"
        x = rng.integers(info.min, info.max + 1, (1, 4, 6, 6)).astype(np_dtype)
        y = rng.integers(info.min, info.max + 1, (1, 4, 6, 6)).astype(np_dtype)
        zp = lambda v: np.array(v, np_dtype)  # noqa: E731
        params = [("a_scale", np.float32(0.05)), ("a_zero_point", zp(3)), ("b_scale", np.float32(0.07)),
                  ("b_zero_point", zp(-5 if tag == "s8" else 9)), ("c_scale", np.float32(0.09)), ("c_zero_point", zp(1))]
        for op in ("QLinearAdd", "QLinearMul"):
            for fed in (False, True):      # scales and zero points as initializers, or as (0-d) graph inputs
                names = ["a", params[0][0], params[1][0], "b", *[p[0] for p in params[2:]]]
                node = helper.make_node(op, names, ["c"], domain="com.microsoft")
                values = dict(params)
                ins = [_tensor("a", dtype, x.shape), _tensor("b", dtype, y.shape)]
                feeds = [x, y]
                inits = []
                for name, value in params:
                    if fed:
                        ins.append(_tensor(name, helper.np_dtype_to_tensor_dtype(np.asarray(value).dtype), []))
                        feeds.append(np.asarray(value))
                    else:
                        inits.append(numpy_helper.from_array(np.asarray(value), name))
                model = _model([node], ins, [_tensor("c", dtype, x.shape)], inits)
                cases.append(Case(f"ms_{op.lower()}_{tag}{'_fed_params' if fed else ''}", model, feeds, None))
                del values
        unary = {"QLinearSigmoid": ({}, x.shape), "QLinearLeakyRelu": ({"alpha": 0.1}, x.shape),
                 "QLinearAveragePool": ({"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, (1, 4, 3, 3)),
                 "QLinearGlobalAveragePool": ({}, (1, 4, 1, 1))}
        for op, (attrs, shape) in unary.items():
            node = helper.make_node(op, ["x", "xs", "xz", "ys", "yz"], ["y"], domain="com.microsoft", **attrs)
            inits = [numpy_helper.from_array(np.asarray(v), n) for n, v in
                     (("xs", np.float32(0.05)), ("xz", zp(3)), ("ys", np.float32(0.03)), ("yz", zp(2)))]
            model = _model([node], [_tensor("x", dtype, x.shape)], [_tensor("y", dtype, shape)], inits)
            cases.append(Case(f"ms_{op.lower()}_{tag}", model, [x], None))
        node = helper.make_node("QLinearConcat", ["ys", "yz", "a", "as", "az", "b", "bs", "bz"], ["y"],
                                domain="com.microsoft", axis=1)
        inits = [numpy_helper.from_array(np.asarray(v), n) for n, v in
                 (("ys", np.float32(0.06)), ("yz", zp(1)), ("as", np.float32(0.05)), ("az", zp(3)),
                  ("bs", np.float32(0.06)), ("bz", zp(1)))]
        model = _model([node], [_tensor("a", dtype, x.shape), _tensor("b", dtype, y.shape)],
                       [_tensor("y", dtype, (1, 8, 6, 6))], inits)
        cases.append(Case(f"ms_qlinearconcat_{tag}", model, [x, y], None))
    return cases


# -- onnxruntime --------------------------------------------------------------------------------------

def _pack(array: np.ndarray, bits: int) -> np.ndarray:
    """ONNX's packing of a 4- or 2-bit tensor: the first element in the lowest bits."""
    values = array.astype(np.int8).astype(np.uint8).reshape(-1) & ((1 << bits) - 1)
    per = 8 // bits
    values = np.concatenate([values, np.zeros(-len(values) % per, np.uint8)]).reshape(-1, per)
    return (values << (np.arange(per, dtype=np.uint8) * bits)).sum(1, dtype=np.uint8)


def _unpack(packed: np.ndarray, bits: int, signed: bool, shape) -> np.ndarray:
    per = 8 // bits
    values = (packed[:, None] >> (np.arange(per, dtype=np.uint8) * bits)) & ((1 << bits) - 1)
    values = values.reshape(-1)[:int(np.prod(shape))].astype(np.int16)
    if signed:
        values = np.where(values >= 1 << (bits - 1), values - (1 << bits), values)
    return values.reshape(shape)


def _ort_value(array: np.ndarray, elem_type: int):
    if elem_type not in LOWBIT:
        return ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(array))
    value = ort.OrtValue.ortvalue_from_shape_and_type(list(array.shape), elem_type)
    packed = _pack(array, LOWBIT[elem_type])       # update_inplace copies the packed bytes from an array
    value.update_inplace(np.concatenate([packed, np.zeros(array.size - packed.size, np.uint8)]).reshape(array.shape)
                         if array.size >= packed.size else packed)
    return value


def _from_ort_value(value, elem_type: int) -> np.ndarray:
    if elem_type not in LOWBIT:
        return value.numpy()
    packed = np.frombuffer(ctypes.string_at(value.data_ptr(), value.tensor_size_in_bytes()), np.uint8)
    return _unpack(packed, LOWBIT[elem_type], elem_type in (TensorProto.INT4, TensorProto.INT2), value.shape())


def _elem_types(values) -> list[int]:
    return [v.type.tensor_type.elem_type for v in values]


def run_onnxruntime(model, inputs) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    graph_inputs = [v for v in model.graph.input if v.name not in {t.name for t in model.graph.initializer}]
    feeds = {v.name: _ort_value(a, t) for v, a, t in zip(graph_inputs, inputs, _elem_types(graph_inputs))}
    results = session.run_with_ort_values([o.name for o in model.graph.output], feeds)
    return [_from_ort_value(r, t) for r, t in zip(results, _elem_types(model.graph.output))]


def for_onnxruntime(case: Case):
    """(the case's model at the newest opset onnxruntime runs, onnxruntime's outputs), or
    (the model, the reason) when onnxruntime runs it at none."""
    main = next(o for o in case.model.opset_import if o.domain in ("", "ai.onnx"))
    op = next(n for n in case.model.graph.node if n.op_type in NODE_TESTS or n.domain == "com.microsoft")
    if op.domain == "com.microsoft":
        versions = [main.version]
    else:
        versions = sorted({s.since_version for s in onnx.defs.get_all_schemas_with_history()
                           if s.name == op.op_type and s.domain == "" and s.since_version <= main.version}, reverse=True)
        versions = [main.version] + [v for v in versions if v < main.version]
    error = "no opset"
    for version in versions:
        model = onnx.ModelProto()
        model.CopyFrom(case.model)
        next(o for o in model.opset_import if o.domain in ("", "ai.onnx")).version = version
        try:
            onnx.checker.check_model(model, full_check=True)
        except Exception as e:      # the case's types or attributes do not exist at this opset
            error = f"invalid at opset {version}: {str(e).splitlines()[0][:120]}"
            continue
        try:
            return model, run_onnxruntime(model, case.inputs)
        except Exception as e:  # noqa: BLE001 - onnxruntime's errors have many types
            error = str(e).splitlines()[0][:200]
            if "NOT_IMPLEMENTED" not in error:
                return model, error
    return case.model, error


def onnxruntime_passes(case: Case, results) -> bool:
    if isinstance(results, str):
        return False
    if case.outputs is None:
        return True
    return len(results) == len(case.outputs) and all(_agrees(r, e, case) for r, e in zip(results, case.outputs))


def _agrees(result, expected, case: Case) -> bool:
    result, expected = np.asarray(result), np.asarray(expected)
    if result.shape != expected.shape:
        return False
    if np.issubdtype(expected.dtype, np.floating):
        return bool(np.allclose(result, expected.astype(result.dtype), rtol=case.rtol, atol=case.atol))
    return bool(np.array_equal(result.astype(np.int64), expected.astype(np.int64)))


# -- qsynth, as `qsynth run` ----------------------------------------------------------------------------

def container(array: np.ndarray) -> np.ndarray:
    """A 4- or 2-bit array (ml_dtypes) in its 8-bit container, as `qsynth run` reads it from a .npy file."""
    name = str(array.dtype)
    if name in ("int4", "int2"):
        return array.astype(np.int8)
    if name in ("uint4", "uint2"):
        return array.astype(np.uint8)
    return array


def run_qsynth(model, inputs, tmp_path) -> list[np.ndarray]:
    """What `qsynth run MODEL --input NAME=PATH ... --output out.npz` does (commands/qnn.py): the input
    names from input_specs, the .npy files read by the command's own reader, compile_model, the call."""
    path = tmp_path / "model.onnx"
    onnx.save(model, str(path))
    names = list(input_specs(path))
    specs = []
    for name, array in zip(names, inputs):
        np.save(tmp_path / f"{name}.npy", container(array), allow_pickle=False)
        specs.append(f"{name}={tmp_path / f'{name}.npy'}")
    feeds = _inputs(specs, names)
    compiled = compile_model(path, target="host")
    outputs = compiled(feeds)
    return [outputs[name] for name in compiled.outputs]


CASES = {c.name: c for c in [*node_cases(), *microsoft_cases()]}


@functools.cache
def reference(name: str):
    """(the model both run, onnxruntime's outputs or why it fails, whether onnxruntime passes the case)."""
    case = CASES[name]
    model, results = for_onnxruntime(case)
    return model, results, onnxruntime_passes(case, results)


@functools.cache
def outcome(name: str):
    """qsynth's outputs on the case, through `qsynth run`'s path, or its ModelError: run once per process,
    for test_case and test_summary alike."""
    with tempfile.TemporaryDirectory() as folder:
        try:
            return run_qsynth(reference(name)[0], CASES[name].inputs, Path(folder))
        except ModelError as e:
            return e


def expected_outputs(name: str):
    """The case's expected outputs, onnxruntime's for the com.microsoft cases (a string: why there are none)."""
    case = CASES[name]
    return case.outputs if case.outputs is not None else reference(name)[1]


def qsynth_passes(name: str) -> bool:
    ours, expected = outcome(name), expected_outputs(name)
    if isinstance(ours, ModelError) or isinstance(expected, str) or len(ours) != len(expected):
        return False
    return all(_agrees(r, e, CASES[name]) for r, e in zip(ours, expected))


INTEGER_TYPES = {TensorProto.INT8, TensorProto.UINT8, TensorProto.INT16, TensorProto.UINT16, TensorProto.INT32,
                 TensorProto.UINT32, TensorProto.INT64, TensorProto.UINT64, *LOWBIT}


def integer_outputs(case: Case) -> bool:
    return all(t in INTEGER_TYPES for t in _elem_types(case.model.graph.output))


def refusal(name: str):
    return REFUSED.get(name.removesuffix("_constant_params"))


@pytest.mark.parametrize("name", sorted(CASES))
def test_case(name):
    """One case through `qsynth run`'s path: refused in one line where REFUSED says so, else equal to the
    expected outputs, as many (integers bit-exact; floats within the case's tolerance and equal to onnxruntime's)."""
    case = CASES[name]
    _, ort_results, ort_passes = reference(name)
    ours = outcome(name)
    if isinstance(ours, ModelError):
        message = str(ours)
        assert "\n" not in message, message
        assert refusal(name) is not None, f"{name} refused, not in REFUSED: {message}"
        assert all(w in message for w in refusal(name)), message
        return
    assert refusal(name) is None, f"{name} runs; remove it from REFUSED"
    expected = expected_outputs(name)
    assert not isinstance(expected, str), f"{name}: no expected output ({expected})"
    assert len(ours) == len(expected), f"{name}: {len(ours)} outputs, expected {len(expected)}"
    for index, (result, exp) in enumerate(zip(ours, expected)):
        assert _agrees(result, exp, case), f"{name} output {index}: {result} != {exp}"
        if np.issubdtype(np.asarray(exp).dtype, np.floating) and ort_passes:
            np.testing.assert_array_equal(result, ort_results[index])


def test_summary():
    """The must-show: of the integer-output cases onnxruntime passes, qsynth passes every one, bit for bit,
    and it refuses exactly the cases REFUSED lists; prints the counts. Each case is run (``outcome``)."""
    integer = [n for n in CASES if integer_outputs(CASES[n])]
    ort_passed = [n for n in integer if reference(n)[2]]
    ours = [n for n in integer if qsynth_passes(n)]
    refused = sorted(n for n in CASES if isinstance(outcome(n), ModelError))
    print(f"\n{len(CASES)} cases ({len(integer)} integer-output): onnxruntime passes {len(ort_passed)} integer cases, "
          f"qsynth passes {len(ours)}, refuses {len(refused)}: {', '.join(refused)}")
    assert not set(ort_passed) - set(ours), f"onnxruntime passes, qsynth does not: {sorted(set(ort_passed) - set(ours))}"
    assert refused == sorted(n for n in CASES if refusal(n) is not None)
