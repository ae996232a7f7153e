"""``qsynth report`` (qsynth/benchmarks_report.py) on small hand-written benchmark files in a temporary
folder: the markdown shows what the JSON holds (values and means worked out here by hand), every
figure it links is a PNG that reads back as an image, an absent file is a note, bad input one line."""
from __future__ import annotations

import json
import math

import pytest

from qsynth import cli

PNG = b"\x89PNG\r\n\x1a\n"


def layer(name, config, encoding, fp32_speedup, threads=1, correct=True):
    ours = 0.5
    return {"layer": name, "config": config, "encoding": encoding, "threads": threads, "correct": correct,
            "ours_ms": ours, "baselines": {"onnxruntime_fp32": ours * fp32_speedup, "plain_tir": ours * 1.5},
            "speedups": {"onnxruntime_fp32": fp32_speedup, "plain_tir": 1.5}}


INPUTS = {
    "layers_bitserial": [layer("C2", "A1W1", "unipolar", 4.0), layer("C2", "A2W2", "unipolar", 2.0),
                         layer("C12", "A1W1", "unipolar", 9.0), layer("C12", "A2W2", "unipolar", 3.0),
                         layer("C12", "A1W1", "unipolar", 99.0, threads=2),           # 2 threads: not in Figure 10
                         layer("C6", "A1W1", "unipolar", 50.0, correct=False)],       # wrong output: left out
    "layers": {"rows": [{"layer": "C2", "threads": 1, "correct": True, "speedups": {"onnxruntime_fp32": 2.5}},
                        {"layer": "C12", "threads": 1, "correct": True, "speedups": {"onnxruntime_fp32": 3.5}}]},
    "synthesis": {"run": {"executor": "local", "jobs": 2, "kernels": 4, "from_cache": 0, "wall_seconds": 12.0},
                  "kernels": [
                      {"name": "bitserial_a1w1_unipolar_8x128_neon", "status": "proved", "length": 24,
                       "wall_seconds": 0.5},
                      {"name": "bitserial_a1w1_unipolar_acc_8x512_avx512", "status": "proved", "length": 24,
                       "wall_seconds": 1.0},
                      {"name": "bitserial_a1w1_hybrid_acc_8x512_avx512", "status": "proved", "length": 26,
                       "wall_seconds": 3.0},
                      {"name": "int8_u8s8_k4b_8x48x16_avx512", "status": "proved", "length": 96,
                       "wall_seconds": 0.25}]},
    "kernels": {"machine": {"cpu": "Test CPU", "uarch": "testarch"}, "neon": [{}, {}],
                "x86": [{"name": "int8_u8s8_k4b_8x48x16_avx512", "isa": "avx512", "length": 96,
                         "fraction_of_peak": 0.875, "peak_instruction": "vpdpbusd zmm"},
                        {"name": "bitserial_a1w1_unipolar_acc_4x256_avx2", "isa": "avx2", "length": 40}],
                "x86_skipped": {"int8_u8s8_tile_32x32x256_amx": "host CPU lacks amx_int8"}},
    "models": {"run": {"command": "test", "unrecorded": "a test's"}, "rows": [
        {"name": "resnet18", "threads": 1, "ours_ms": 12.0, "max_abs_diff_vs_onnxruntime": 0.0, "compile_s": 30.0,
         "baselines": {"onnxruntime_int8": 10.0, "onnxruntime_fp32": 36.0}}]},
}
ACCURACY = {"rows": [{"config": "fp32", "top1": 0.98, "ms": 2.0}, {"config": "W2A2", "top1": 0.97, "ms": 0.5},
                     {"config": "W3A3", "top1": 0.96, "ms": 0.8}]}         # W3A3: slower and less accurate


@pytest.fixture
def folder(tmp_path):
    for name, data in INPUTS.items():
        (tmp_path / f"{name}.json").write_text(json.dumps(data))
    (tmp_path / "mutation.md").write_text("# other\n")
    return tmp_path


def run_report(folder, capsys):
    assert cli.main(["report", "--benchmarks", str(folder), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    return (folder / "README.md").read_text(), summary


def test_markdown_lists_what_the_json_holds(folder, capsys):
    text, _ = run_report(folder, capsys)
    assert "| layer | A1W1 unipolar | A2W2 unipolar | int8 |" in text
    assert "| C2 | 4.00x | 2.00x | 2.50x |" in text and "| C12 | 9.00x | 3.00x | 3.50x |" in text
    assert "99.00x" not in text and "50.00x" not in text             # 2-thread row and wrong output left out
    assert "C6 A1W1 unipolar" in text                               # ... and the wrong one named
    assert f"A1W1 unipolar {math.sqrt(4 * 9):.2f}x" in text and f"A2W2 unipolar {math.sqrt(2 * 3):.2f}x" in text
    # Table 2: the paper's A1W1 row, our NEON tile (24 instructions, 0.5 s), the avx512 median of 1 and 3 s
    assert "| A1W1 | 2.4 | 9.0 | 5.8 | 17.2 | 24 | 0.50 | 2.00 | 0.50 |" in text
    assert "| int8 | – | – | – | – | – | – | 0.25 | – |" in text
    assert "| int8_u8s8_k4b_8x48x16_avx512 | avx512 | 96 | 88% | vpdpbusd zmm |" in text
    assert "avx2: no peak instruction defined" in text and "1 kernel" in text
    assert "int8_u8s8_tile_32x32x256_amx (host CPU lacks amx_int8)" in text
    assert "| resnet18 | 1 | 12.00 | 36.00 | 10.00 | 0 | 30 |" in text
    assert "no lowbit_accuracy.json" in text
    assert "[mutation.md](mutation.md)" in text


def test_every_linked_figure_is_a_readable_png(folder, capsys):
    from matplotlib import image
    text, summary = run_report(folder, capsys)
    linked = {line.split("](")[1].rstrip(")") for line in text.splitlines() if line.startswith("![")}
    assert linked == {f"figures/{n}" for n in ("layers_speedup.png", "c2_configs.png", "synthesis_time.png",
                                                 "kernels_peak.png", "models_latency.png")}
    assert sorted(summary["figures"]) == sorted(str(folder / f) for f in linked)
    for f in linked:
        data = (folder / f).read_bytes()
        assert data.startswith(PNG)
        pixels = image.imread(folder / f)
        assert pixels.shape[0] > 200 and pixels.shape[1] > 400 and pixels.std() > 0.05     # not blank
    assert not list(folder.rglob(".tmp-*"))                         # atomic writes leave nothing behind


def test_pareto_front_when_the_accuracy_data_exists(folder, capsys):
    (folder / "lowbit_accuracy.json").write_text(json.dumps(ACCURACY))
    text, summary = run_report(folder, capsys)
    assert "| fp32 | 98.0% | 500.0 | yes |" in text and "| W2A2 | 97.0% | 2000.0 | yes |" in text
    assert "| W3A3 | 96.0% | 1250.0 |  |" in text
    assert (folder / "figures" / "pareto.png").read_bytes().startswith(PNG) and not summary["notes"]


def test_pareto_lists_a_configuration_without_a_time_and_draws_the_others(folder, capsys):
    rows = ACCURACY["rows"] + [{"config": "W1A1", "top1": 0.95, "qsynth_error": "Quant q: 32-bit"}]
    (folder / "lowbit_accuracy.json").write_text(json.dumps({"rows": rows}))
    text, summary = run_report(folder, capsys)
    assert "| W1A1 | 95.0% | not measured |  |" in text and "Not measured: W1A1: Quant q: 32-bit." in text
    assert "| W2A2 | 97.0% | 2000.0 | yes |" in text
    assert (folder / "figures" / "pareto.png").read_bytes().startswith(PNG)
    assert summary["notes"] == ["lowbit_accuracy.json: W1A1 not measured: Quant q: 32-bit"]


def test_bad_input(folder, capsys):
    assert cli.main(["report", "--benchmarks", str(folder / "nowhere")]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    (folder / "models.json").write_text("{not json")
    assert cli.main(["report", "--benchmarks", str(folder)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "models.json: not readable JSON" in err
    assert not (folder / "README.md").exists()
