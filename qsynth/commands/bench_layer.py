"""``qsynth bench-layer``: one ResNet-18 conv layer on our operators next to onnxruntime, OpenVINO and TVM."""
from __future__ import annotations

import os
from typing import Literal

import typer

from qsynth.commands.common import JSON_HELP, UsageError, int8_kernel_here, positive, print_json
from qsynth.progress import spinner

LAYERS = ("C2", "C3", "C4", "C5", "C6", "C7", "C8", "C9", "C10", "C11", "C12")


def bench_layer(layer: str = typer.Option(..., help="C2 ... C12 (ResNet-18, the paper's Table 1)"),
                config: str = typer.Option("int8", help="int8, or AxWy (x, y in 1..3) for the bitserial conv2d"),
                encoding: str = typer.Option("unipolar", help="bitserial: unipolar or hybrid (bipolar weights)"),
                threads: int = typer.Option(1, callback=positive, help="TVM threads"),
                isa: Literal["host", "avx512", "avx2", "amx"] = typer.Option("host", help="which kernels to run"),
                trials: int = typer.Option(7, callback=positive, help="timed runs; the median is reported"),
                json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> int:
    """One ResNet-18 conv layer: our operator vs onnxruntime int8/fp32, OpenVINO int8 (int8 config) and TVM's
    own lowering, checked against numpy in the same run; exit 1 if ours is wrong."""
    if layer not in LAYERS:
        raise UsageError(f"unknown layer {layer!r}; accepted: {', '.join(LAYERS)} (ResNet-18, the paper's Table 1)")
    os.environ["TVM_NUM_THREADS"] = str(threads)        # read when TVM's thread pool starts
    if config == "int8":
        row = _int8(layer, threads, trials, isa)
    else:
        row = _bitserial(layer, config, encoding, threads, trials, isa)
    if json:
        print_json(row)
        return 0 if row["correct"] else 1
    if config == "int8":
        print(f"{row['layer']} int8, {row['threads']} thread(s), {row['kernel']}: {row['ours_ms']:.3f} ms, "
              f"{row['gmacs']:.1f} G MAC/s" + (f" ({row['percent_of_peak']:.0f}% of peak)" if row["percent_of_peak"]
                                                else "") + f", correct={row['correct']}")
    else:
        print(f"{row['layer']} {row['config']} {row['encoding']}, {row['threads']} thread(s), {row['kernel']}: "
              f"{row['ours_ms']:.3f} ms, {row['gmacs']:.1f} G MAC/s, correct={row['correct']}")
    for name, ms in row["baselines"].items():
        print(f"  {name:<18} {ms:9.3f} ms  speedup {row['speedups'][name]:.2f}x (its time / ours)")
    if "openvino" in row:
        from tvm_integration.bench.openvino_baseline import describe
        print("\n".join(describe(name, report) for name, report in row["openvino"].items()))
    for note in row.get("notes", []):
        print(f"note: {note}")
    return 0 if row["correct"] else 1


def _int8(layer, threads, trials, isa) -> dict:
    from tvm_integration.bench.layers import bench_layer as run
    int8_kernel_here("isa", isa)
    with spinner(f"{layer} int8: building and timing"):
        return run(layer, threads, trials, isa)


def _bitserial(layer, config, encoding, threads, trials, isa) -> dict:
    """``--config AxWy [--encoding E]``: the layer on the bitserial conv2d (tvm_integration/bench/bitserial_layers.py)."""
    from isa_specs import host
    from tvm_integration.bench.bitserial_layers import bench_bitserial_layer, parse_config
    from tvm_integration.kernels.selection import BITSERIAL_ISAS, SelectionError, bitserial_kernel
    try:
        parsed = parse_config(config, encoding)
        if isa != "host" and isa not in BITSERIAL_ISAS:
            raise SelectionError(f"bitserial layers run on {', '.join(BITSERIAL_ISAS)}, not {isa}")
        kernel = bitserial_kernel(isa, parsed.abits, parsed.wbits, parsed.encoding)
    except (ValueError, SelectionError) as e:
        raise UsageError(str(e))
    if (why := next((w for f in kernel.features if (w := host.missing(f, ()))), None)) is not None:
        raise UsageError(f"--isa {isa}: this host cannot run {kernel.spec.name} ({why})")
    with spinner(f"{layer} {config}: building and timing"):
        return bench_bitserial_layer(layer, parsed, threads, trials, isa)


def register(app: typer.Typer) -> None:
    app.command("bench-layer", epilog="Example: qsynth bench-layer --layer C6 --config int8 --threads 1 --json")(
        bench_layer)
