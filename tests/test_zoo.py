"""The zoo benchmark's helpers (tvm_integration/bench/zoo.py, scripts/bench_zoo.py, and the quantizer
table of scripts/check_quantizers.py, which uses them) on small inputs: the models themselves need torch
and take minutes (scripts/make_zoo.py, scripts/bench_zoo.py)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from scripts import bench_zoo
from tvm_integration.bench import zoo


def _float_tail_model(path):
    """input -> Q -> DQ -> ReduceMean -> Reshape -> output: SqueezeNet's tail, a float mean after the
    last quantized tensor."""
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"]),
             helper.make_node("ReduceMean", ["d", "axes"], ["m"], keepdims=1),
             helper.make_node("Reshape", ["m", "shape"], ["y"])]
    inits = [numpy_helper.from_array(np.array(0.25, np.float32), "s"),
             numpy_helper.from_array(np.array(128, np.uint8), "z"),
             numpy_helper.from_array(np.array([2, 3], np.int64), "axes"),
             numpy_helper.from_array(np.array([1, 4], np.int64), "shape")]
    graph = helper.make_graph(nodes, "tail", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 3, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    return path


def test_output_scale_through_a_float_tail(tmp_path):
    assert zoo.output_scales(_float_tail_model(tmp_path / "tail.onnx")) == {"y": 0.25}


def test_kind_drops_the_numbers_tvm_appends():
    assert zoo.kind("qsynth_conv2d17") == "qsynth_conv2d"
    assert zoo.kind("transpose") == "transpose"
    assert zoo.kind("vm.builtin.alloc_tensor") == "alloc_tensor"


def _row(name, threads, ours, theirs, diff=0.0, steps=0.0):
    return {"name": name, "threads": threads, "ours_ms": ours, "baselines": {"onnxruntime_int8": theirs},
            "speedups": {"onnxruntime_int8": theirs / ours}, "max_abs_diff": diff, "max_diff_steps": steps,
            "openvino": {"openvino_int8": {"unavailable": "the OpenVINO worker ended (exit code -11)"}}}


def test_markdown_has_every_model_failures_and_the_findings():
    data = {"host": "a host", "runs": [{"command": "python scripts/bench_zoo.py", "load_before": "1", "load_after": "2",
                                        "models": ["resnet50"]}],
            "models": ["resnet50", "densenet121", "convnext_tiny", "googlenet"],
            "compile": {"resnet50": {"compile_s": 20.0}, "densenet121": {"error": "InternalError: Var lv581"},
                        "convnext_tiny": {"compile_s": 60.0}},
            "rows": [{**_row("resnet50", 1, 8.0, 16.0), "onnxruntime_int8_default": {"differing": 214, "values": 3000}},
                     _row("convnext_tiny", 1, 30.0, 45.0, 0.01, 1.000003)],
            "profiles": {}}
    md = bench_zoo.markdown(data, "grouped convolutions pad 8 columns to 32")
    lines = md.splitlines()
    assert any(line.startswith("| resnet50 | 8.00 | 16.00 |") and "2.00x | exact | 214 of 3000 | 20 |" in line
               for line in lines)
    assert any(line.startswith("| densenet121 | compile fails: InternalError: Var lv581") for line in lines)
    assert any(line.startswith("| convnext_tiny |") and "| 1 step | - |" in line for line in lines)
    assert any(line.startswith("| googlenet | not run (time) |") for line in lines)
    table = [line for line in lines if line.startswith("| ")]
    assert len({line.count("|") for line in table}) == 1                # every row as many cells as the header
    assert "exit code -11" in md
    assert bench_zoo.FINDINGS[0] + "\ngrouped convolutions pad 8 columns to 32\n" + bench_zoo.FINDINGS[1] in md


def test_profiled_when_slower_by_cpu_time_or_not_exact():
    loaded = {**_row("shufflenet_v2", 1, 8.3, 7.9), "ours_cpu_ms": 2.0, "onnxruntime_int8_cpu_ms": 3.1}
    assert not bench_zoo.is_slow_or_inexact(loaded)         # wall time at a load of 7 says slower; CPU time not
    assert bench_zoo.is_slow_or_inexact({**loaded, "ours_cpu_ms": 3.2})
    assert bench_zoo.is_slow_or_inexact({**loaded, "max_abs_diff": 5e-7})
    assert bench_zoo.is_slow_or_inexact(_row("googlenet", 2, 8.0, 7.0))     # no CPU time: wall time decides
    assert not bench_zoo.is_slow_or_inexact({"name": "densenet121", "threads": 1, "error": "exit code -11"})


def test_the_quantizer_table_has_every_row_and_names_the_misses():
    from scripts import check_quantizers
    cpu = {"onnxruntime_int8": 20.0, "onnxruntime_int8_exact": 30.0, "openvino_int8": 18.0}
    row = {**_row("nncf_performance", 1, 19.0, 21.0), "ours_cpu_ms": 19.0, "cpu_baselines": cpu, "differing": 0,
           "values": 3000, "openvino": {"openvino_int8": {"differing": 2000, "compared": 1000}}}
    run = {"commit": "0" * 40, "command": "python scripts/check_quantizers.py --bench", "date": "2026-11-29T18:00:00+00:00",
           "seconds": 1, "host": {"cpu": "AMD EPYC", "uarch": "znver3", "features": ["avx2"], "cpus": 2},
           "threads": 1, "load_before": [1, 1, 1], "load_after": [1, 1, 1]}
    data = {"host": "a host", "run": run, "rows": [row], "profiles": {},
            "quantizers": {"nncf_performance": "NNCF, preset PERFORMANCE", "s8s8_per_channel": "quantize_static",
                           "dynamic": "quantize_dynamic"},
            "compile": {"nncf_performance": {"compile_s": 40.0}, "s8s8_per_channel": {"error": "InternalError: x"}}}
    md = check_quantizers.markdown(data)
    table = [line for line in md.splitlines() if line.startswith("|")]
    assert len(table) == 5 and len({line.count("|") for line in table}) == 1      # header, separator, 3 rows
    assert "| nncf_performance | NNCF, preset PERFORMANCE | 0 of 3000 | 19.00 | 20.00 (1.05x) |" in md
    assert "| s8s8_per_channel | quantize_static | compile fails: InternalError: x |" in md
    assert "| dynamic | quantize_dynamic | not run |" in md
    assert "targets by CPU time (at least 1.0x onnxruntime int8 for every row, 1.0x OpenVINO for the NNCF rows): " \
           "nncf_performance 0.95x OpenVINO int8." in md


def test_a_dir_without_the_models_says_how_to_make_them(tmp_path, monkeypatch, capsys):
    (tmp_path / "resnet50.int8.onnx").write_bytes(b"")         # the float original is missing
    monkeypatch.setattr("sys.argv", ["bench_zoo.py", "--dir", str(tmp_path), "--models", "resnet50,googlenet",
                                     "--out", str(tmp_path / "out")])
    with pytest.raises(SystemExit) as stop:
        bench_zoo.main()
    assert stop.value.code == 2
    error = capsys.readouterr().err
    assert "lacks the models resnet50, googlenet" in error
    assert f"make_zoo.py --out {tmp_path} --models resnet50,googlenet" in error
    assert not (tmp_path / "out").exists()


def test_an_updated_quantizer_table_keeps_the_other_rows_each_with_its_run():
    from scripts import check_quantizers
    old_run = {"commit": "1" * 40, "command": "python scripts/check_quantizers.py --bench", "seconds": 9,
               "date": "2026-11-29T18:00:00+00:00", "host": {"cpu": "AMD EPYC", "uarch": "znver3",
                                                             "features": ["avx2"], "cpus": 2},
               "threads": 1, "load_before": [1, 1, 1], "load_after": [1, 1, 1]}
    new_run = dict(old_run, commit="2" * 40, command="python scripts/check_quantizers.py --bench --update")

    def row(name, ms):
        return {**_row(name, 1, ms, 21.0), "ours_cpu_ms": ms, "differing": 0, "values": 3000, "openvino": {},
                "cpu_baselines": {"onnxruntime_int8": 20.0}}
    earlier = {"host": "a host", "run": old_run, "profiles": {"symmetric": {"x": 1}},
               "quantizers": {"symmetric": "s", "dynamic": "d"},
               "compile": {"symmetric": {"compile_s": 1.0}, "dynamic": {"compile_s": 2.0}},
               "rows": [row("symmetric", 19.0), row("dynamic", 30.0)]}
    again = {"host": "a host", "run": new_run, "profiles": {},
             "quantizers": {"pt2e_hf_bert": "p", "dynamic": "d"},
             "compile": {"pt2e_hf_bert": {"compile_s": 3.0}, "dynamic": {"compile_s": 4.0}},
             "rows": [dict(row("pt2e_hf_bert", 18.0), run=new_run), dict(row("dynamic", 17.0), run=new_run)]}
    data = check_quantizers.merged(earlier, again)
    assert [r["name"] for r in data["rows"]] == ["symmetric", "dynamic", "pt2e_hf_bert"]     # options() order
    assert [r["run"]["commit"][0] for r in data["rows"]] == ["1", "2", "2"]
    assert data["rows"][1]["ours_cpu_ms"] == 17.0 and data["compile"]["dynamic"] == {"compile_s": 4.0}
    assert list(data["quantizers"]) == ["symmetric", "dynamic", "pt2e_hf_bert"] and "symmetric" in data["profiles"]
    md = check_quantizers.markdown(dict(data, profiles={}))
    assert f"at {'1' * 10} (work tree clean)" in md and md.count("- Run: ") == 2
    assert "--update` at 2222222222" in md and ": dynamic, pt2e_hf_bert." in md and "after: symmetric." in md
