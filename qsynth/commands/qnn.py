"""``qsynth compile``, ``qsynth run``, ``qsynth inspect`` and ``qsynth bench-model``: the QNN pipeline
(``tvm_integration.qnn``) on the command line.

    qsynth compile resnet_int8.onnx -o resnet_int8.so [--target host] [--threads 2]
    qsynth compile resnet_int8.onnx -o resnet_a53.so --target neon --mcpu cortex-a53     (an AArch64 library)
    qsynth run resnet_int8.onnx --input x.npy --output y.npy [--input name=path.npy ...] [--profile]
    qsynth bench-model resnet_int8.onnx --fp32 resnet.onnx --threads 1 --json [--input NAME=PATH.npy ...]
    qsynth bench-model resnet_int8.onnx --fp32 resnet.onnx --target neon --mcpu cortex-a53 [--tvm-default]
    qsynth inspect w2a2.onnx [--target host] [--json]     (or MODEL.tflite)

``run`` compiles once and keeps the library in a private, checked cache (``~/.cache/qsynth/models``,
``tvm_integration.qnn.runtime.artifacts``), so the next run loads it; ``--target neon`` keeps its AArch64
library there too (keyed by the core as well) and runs it under qemu-aarch64 (qemu/cross_model.py).
A model the pipeline refuses is a ``ModelError``, one line and exit 1 (qsynth/cli.py); bad input (an
unreadable or non-finite ``.npy``, an output that would overwrite the model or an input, or is a
directory) is a ``UsageError``, one line and exit 2. No output file is written unless the whole
command succeeded.
"""
from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path
from typing import TYPE_CHECKING, List, Literal, Optional

import typer

from qsynth.commands.common import JSON_HELP, UsageError, WorkFailed, int8_kernel_here, positive, print_json, \
    require_avx2
from qsynth.progress import spinner

if TYPE_CHECKING:
    import numpy as np

TARGETS = ("host", "avx512", "avx2", "amx", "neon")
def _model_file(value: str) -> str:
    """The MODEL argument names a file (bad usage, exit 2, otherwise)."""
    path = Path(value)
    if path.is_dir():
        raise typer.BadParameter(f"{value} is a directory; give the model file")
    if not path.is_file():
        raise typer.BadParameter(f"{value}: no such file" if not path.exists() else f"{value} is not a regular file")
    return value


MODEL = typer.Argument(..., help="a pre-quantized ONNX model (QDQ or QOperator) or a full-integer TFLite model",
                       callback=_model_file)
TARGET = typer.Option("host", help="which kernels to compile for")
Target = Literal[TARGETS]
THREADS = typer.Option(None, callback=positive, help="TVM threads (default: TVM's)")
ALLOW_FLOAT = typer.Option(False, "--allow-float", help="run a model with no quantized op, in float")
LOWBIT = typer.Option("fastest", "--lowbit", help="the operator of layers of 1-3-bit activations and weights: "
                      "fastest (the tuning log's measurement for the shape, else the rule of "
                      "kernels/lowbit_choice.py), bitserial or int8 (both exact)")
Lowbit = Literal["fastest", "bitserial", "int8"]
MCPU = typer.Option(None, "--mcpu", metavar="CORE", help="--target neon: the AArch64 core, as LLVM names it "
                                                         "(cortex-a53, cortex-a72, cortex-a76, ...)")


def compile(model: str = MODEL,
            output: str = typer.Option(..., "-o", "--output", help="the library (.so; its signature goes beside, "
                                                                    ".so.json)"),
            target: Target = TARGET, threads: Optional[int] = THREADS, allow_float: bool = ALLOW_FLOAT,
            mcpu: Optional[str] = MCPU, lowbit: Lowbit = LOWBIT) -> int:
    """Compile a pre-quantized ONNX or TFLite model to a library (--target neon: for AArch64, with the cross gcc)."""
    from tvm_integration.qnn.runtime.model import compile_model
    out = _output(output, "-o", [Path(model)], also=[Path(output + ".json")])
    _arm(target, mcpu)
    with spinner(f"compiling {model}"), _private_temporary_files():
        compiled = compile_model(model, target=target, threads=threads, allow_float=allow_float, mcpu=mcpu,
                                 lowbit=lowbit)
        compiled.save(out)
    print(f"{out} ({', '.join(f'{n} {d}{list(s)}' for n, (s, d) in compiled.inputs.items())} -> "
          f"{', '.join(compiled.outputs)})")
    if target == "neon":
        _print_inexact(compiled.inexact(), compiled.op_kinds or [])
    return 0


def run(model: str = MODEL,
        input: List[str] = typer.Option(..., "--input", metavar="[NAME=]PATH.npy",
                                        help="an input array (repeat for several inputs)"),
        output: str = typer.Option(..., "--output", help=".npy (one output) or .npz"),
        target: Target = TARGET, threads: Optional[int] = THREADS, allow_float: bool = ALLOW_FLOAT,
        profile: bool = typer.Option(False, "--profile", help="print where a run's time goes, per function"),
        mcpu: Optional[str] = MCPU, lowbit: Lowbit = LOWBIT) -> int:
    """Run a pre-quantized ONNX or TFLite model on numpy inputs (compiled once, the library kept in a private
    cache, ~/.cache/qsynth/models, and checked before it is loaded again; --target neon: compiled for AArch64
    and run under qemu-aarch64)."""
    from tvm_integration.qnn.runtime.artifacts import compiled_model
    from tvm_integration.qnn.runtime.model import input_specs
    model_path = Path(model)
    out = _output(output, "--output", [model_path, *(Path(spec.partition("=")[2] or spec) for spec in input)])
    _runs_here(target)
    _arm(target, mcpu)
    if profile and target == "neon":
        raise UsageError("--profile: a model for --target neon runs under qemu, whose speed is not the core's; "
                         "nothing to profile")
    with spinner(f"running {model}"):
        feeds = _inputs(input, list(input_specs(model_path, allow_float=allow_float)), model_path)
        compiled = compiled_model(model_path, target=target, threads=threads, allow_float=allow_float, mcpu=mcpu,
                                  lowbit=lowbit)
        outputs = compiled(feeds)
        _save_outputs(outputs, out)
        times = compiled.profile(feeds) if profile else None
    if times is not None:
        print(f"{'function':40} {'ms/run':>8} {'calls':>6}")
        for name, ms, calls in times:
            print(f"{name:40} {ms:8.3f} {calls:6}")
    return 0


def _runs_here(target: str) -> None:
    """``run`` executes what it builds: an explicit target whose kernels this host cannot run (``--target
    amx`` without AMX) is refused up front, in one line, instead of a crash in the first tile call;
    ``compile`` builds for it (a library for another machine)."""
    if target == "host":
        require_avx2()
    if target not in ("host", "neon"):      # neon: _arm
        int8_kernel_here("target", target, f"; qsynth compile --target {target} builds the library for a machine "
                                           "that can")


def _arm(target: str, mcpu: str | None) -> None:
    """``--mcpu`` names a core LLVM knows, and only with ``--target neon``; ``--target neon`` needs the
    cross gcc, qemu-aarch64 and TVM's AArch64 runtime (compile too: it asks that runtime whether it
    defines every function the library calls): each refused in one line, up front (a bad option:
    UsageError; a tool this host lacks: WorkFailed)."""
    from tvm_integration.qemu import cross_model
    if not _core(target, mcpu):
        return
    if (why := cross_model.missing_tools()) is not None:
        raise WorkFailed(f"--target neon: {why}")
    try:
        cross_model.runtime()
    except RuntimeError as e:        # no registry here, nothing cached
        raise WorkFailed(f"--target neon: no AArch64 TVM runtime: {' '.join(str(e).split())[:300]}")


def _core(target: str, mcpu: str | None) -> bool:
    """Whether ``target`` is neon (its ``--mcpu`` a core LLVM knows); ``--mcpu`` with another target: bad usage."""
    from tvm_integration.kernels import neon_int8
    if target != "neon":
        if mcpu is not None:
            raise UsageError(f"--mcpu {mcpu}: a core is chosen for --target neon only")
        return False
    try:
        neon_int8.core_family(mcpu)
    except ValueError as e:
        raise UsageError(str(e))
    return True


def bench_model(model: str = MODEL,
                fp32: Optional[str] = typer.Option(None, help="the float original, for onnxruntime fp32 (a "
                                                           ".tflite model: LiteRT fp32)"),
                threads: int = typer.Option(1, callback=positive, help="TVM, onnxruntime and OpenVINO threads"),
                trials: int = typer.Option(20, callback=positive, help="timed runs"),
                input: Optional[List[str]] = typer.Option(None, "--input", metavar="[NAME=]PATH.npy",
                                                          help="an input array (repeat for several inputs); "
                                                               "inputs not given are random values the model "
                                                               "accepts (ids within the embedding, masks of 0/1)"),
                target: Literal["host", "neon"] = typer.Option("host", help="neon: estimated cycles on --mcpu's "
                                                                            "core, under qemu"),
                mcpu: Optional[str] = MCPU,
                tvm_default: bool = typer.Option(False, "--tvm-default", help="--target neon: also TVM's default "
                                                                              "build of the model (slow)"),
                json: bool = typer.Option(False, "--json", help=JSON_HELP)) -> int:
    """A model on our build next to onnxruntime int8/fp32, OpenVINO int8 (and, on AMX hosts, OpenVINO held to
    VNNI) and TVM's own import (a .tflite model: next to LiteRT's default interpreter). --target neon: the
    estimated cycles of one inference on an Arm core (qemu's block counts x llvm-mca) next to onnxruntime's
    AArch64 build (a .tflite model: LiteRT's AArch64 build), by the same method."""
    from tvm_integration.qnn.runtime.model import input_specs, set_threads
    if target == "neon":
        return _bench_arm(model, fp32, threads, input, mcpu, tvm_default, json)
    from tvm_integration.bench.models import bench_model as run_bench
    if mcpu is not None:
        raise UsageError(f"--mcpu {mcpu}: a core is chosen for --target neon only")
    if tvm_default:
        raise UsageError("--tvm-default: for --target neon (on this host TVM's default build is always a column)")
    set_threads(threads)
    feeds = _inputs(input, list(input_specs(model)), Path(model)) if input else {}
    with spinner(f"compiling and timing {model}"):
        row = run_bench(model, fp32, threads, trials, feeds=feeds)
    if json:
        print_json(row)
        return 0
    reference = row["reference"]
    exact = " (its exact mode)" if reference == "onnxruntime" else ""
    print(f"{row['model']} on {row['host']}, {row['threads']} thread(s); compiled in {row['compile_s']:.1f} s; "
          f"largest difference from {reference}{exact}: {row[f'max_abs_diff_vs_{reference}']:g}")
    print(f"  {'ours':24} {row['ours_ms']:9.2f} ms")
    for name, ms in row["baselines"].items():
        print(f"  {name:24} refused: {row['refused'][name]}" if ms is None else
              f"  {name:24} {ms:9.2f} ms   speedup {row['speedups'][name]:.2f}x")
    from tvm_integration.bench.openvino_baseline import describe, differences
    if "onnxruntime_int8_default" in row:
        print(f"onnxruntime_int8 (its default): {differences(row['onnxruntime_int8_default'])}")
    if "openvino" in row:
        print("\n".join(describe(name, report) for name, report in row["openvino"].items()))
    return 0


def _bench_arm(model: str, fp32: str | None, threads: int, input: list[str] | None, mcpu: str | None,
               tvm_default: bool, json: bool) -> int:
    """``bench-model --target neon``: bench/arm_models.py's row, printed."""
    from tvm_integration.bench import arm_models, litert_aarch64, ort_aarch64, qemu_blocks
    from tvm_integration.kernels import neon_int8
    from tvm_integration.qnn.runtime.model import input_specs
    if mcpu is None:
        raise UsageError(f"--target neon: give --mcpu CORE, one qemu models ({', '.join(qemu_blocks.CORES)})")
    try:
        neon_int8.core_family(mcpu)         # a core LLVM knows,
        qemu_blocks.root(mcpu)              # and qemu models
    except ValueError as e:
        raise UsageError(f"--mcpu {mcpu}: {e}")
    _arm("neon", mcpu)
    tflite = Path(model).suffix == ".tflite"
    if tflite and (fp32 is not None or tvm_default or threads != 1):
        raise UsageError("--target neon: a .tflite model is benchmarked alone against LiteRT's AArch64 build "
                         "(no --fp32, no --tvm-default, one thread)")
    runtime, name = (litert_aarch64.runtime, "LiteRT") if tflite else (ort_aarch64.runtime, "onnxruntime")
    try:
        runtime()
    except RuntimeError as e:
        raise WorkFailed(f"--target neon: no AArch64 {name}: {' '.join(str(e).split())[:300]}")
    feeds = _inputs(input, list(input_specs(model)), Path(model)) if input else {}
    with spinner(f"compiling {model} for {mcpu} and counting its blocks under qemu"), _private_temporary_files():
        row = arm_models.bench_arm_model(model, mcpu, fp32, with_tvm_default=tvm_default, feeds=feeds,
                                         threads=threads)
    if json:
        print_json(row)
        return 0
    print(f"{row['model']} on {mcpu} (llvm-mca's model; qemu's block counts of one inference, after a warm-up), "
          f"{threads} thread(s)")
    _print_references(row)
    for name, column in row["columns"].items():
        if column["cycles"] is None:
            print(f"  {name:18} refused: {column['refused']}")
            continue
        ratio = f"   ratio {row['ratios'][name]:.2f}x" if name in row["ratios"] else ""
        top = ", ".join(f"{lib} {c / 1e6:.1f}" for lib, c in list(column["by_library"].items())[:3])
        print(f"  {name:18} {column['cycles'] / 1e6:9.2f} Mcycles{ratio}   ({top})")
    print("  ratio = qsynth / baseline (below 1: qsynth needs fewer cycles); no caches, memory stalls or branch "
          "misses (docs/measurements.md)")
    return 0


def _print_references(row: dict) -> None:
    """bench-model --target neon: the difference from each reference, which op kinds follow which, and what
    explains each difference (bench/arm_models.explanation)."""
    from tvm_integration.qnn.runtime import arm_reference
    of = row["differing"]["outputs"]
    measured = {arm_reference.ONNX: ("onnxruntime's x86 exact mode (the ONNX definition, but for its fused "
                                     "QLinearAdd)", "the ONNX definition is the reference of"),
                arm_reference.AARCH64: (arm_reference.REFERENCES[arm_reference.AARCH64], "the reference of"),
                arm_reference.LITERT: (arm_reference.REFERENCES[arm_reference.LITERT], "the reference of")}
    for reference, difference in row["max_abs_diff"].items():
        kinds = [k for k, r in row["follows"].items() if r == reference]
        run, of_kinds = measured[reference]
        print(f"  {run}: largest difference {difference:g}, {row['differing'][reference]} of {of} outputs differ; "
              f"{of_kinds} {', '.join(kinds) or 'no op of this model'}")
    if arm_reference.LITERT not in row["max_abs_diff"]:       # a TFLite model's one reference is printed above
        print(f"  each op kind's own reference (onnxruntime's AArch64 build, its QDQ Adds as ONNX defines them): "
              f"largest difference {row['max_abs_diff_vs_stated']:g}, {row['differing']['stated']} of {of} outputs "
              "differ")
    for line in row["not_exact"]:
        print(f"  {line}")
    for line in row["explanation"]:
        print(f"  {line}")


def _print_inexact(kinds: list, names: list[str]) -> None:
    """--target neon: each op kind not known to be exact against its reference, then each of ``names`` (the
    model's op kinds) where onnxruntime's AArch64 build departs from the reference, one line each."""
    from tvm_integration.qnn.runtime import arm_reference
    for kind in kinds:
        print(f"note: {arm_reference.describe(kind)}")
    for kind in arm_reference.departures(names):
        print(f"note: {arm_reference.describe_departure(kind)}")


def inspect(model: str = MODEL, target: Target = TARGET, allow_float: bool = ALLOW_FLOAT,
            json: bool = typer.Option(False, "--json", help=JSON_HELP), mcpu: Optional[str] = MCPU,
            lowbit: Lowbit = LOWBIT) -> int:
    """Each conv/dense layer's and MatMul's precision (AxWy, encoding; float32), operator and kernel, without
    compiling. --target neon: also each op kind's reference, whether it is exact against it and where
    onnxruntime's AArch64 build departs from it (--json: an object, its layers and its op_kinds)."""
    from tvm_integration.qnn.onnx.importer import load
    from tvm_integration.qnn.runtime import arm_reference
    from tvm_integration.qnn.runtime.model import read
    from tvm_integration.qnn.runtime.report import layers, table
    _core(target, mcpu)
    rows = layers(Path(model) if Path(model).suffix == ".tflite" else load(model, allow_float=allow_float), target,
                  mcpu, lowbit)
    kinds = [arm_reference.kind(k) for k in arm_reference.kinds(read(model, allow_float, target)[0],
                                                                Path(model).suffix == ".tflite")] \
        if target == "neon" else None
    if json:
        listed = [dict(layer=r.layer, op=r.kind, weights=r.shape, operator=r.operator, kernel=r.kernel,
                       **(dict(abits=None, wbits=None, encoding="float32", note="") if r.precision is None else
                          dict(abits=r.precision.abits, wbits=r.precision.wbits, encoding=r.precision.encoding,
                               note=r.precision.weights))) for r in rows]
        print_json(listed if kinds is None else {"layers": listed, "op_kinds": [
            dict(op=k.name, reference=k.reference, exact=k.exact, note=k.note,
                 onnxruntime_aarch64_departs=k.runtime_departs) for k in kinds]})
    else:
        print(table(rows))
        if kinds is not None:
            print("\nop kinds on Arm, each against its reference (qnn/runtime/arm_reference.py):")
            print("\n".join(f"  {arm_reference.describe(k)}" for k in kinds))
            print("".join(f"  {arm_reference.describe_departure(k)}\n" for k in kinds if k.runtime_departs), end="")
    return 0


def _inputs(specs: list[str], names: list[str], model: Path | None = None) -> dict[str, np.ndarray]:
    """``--input [NAME=]PATH.npy`` options -> the model's feeds (NAME may be left out of a model's only input).
    A file that is not a readable .npy array is bad input naming the file (numpy's EOFError on an empty file
    used to pass for Ctrl-C: click turns EOFError into an abort). NaN and infinities are refused: a
    quantized model's result for them is not defined (onnxruntime's own depends on its kernels, and ours
    differed from it on 509 of 1000 outputs), so no result is better than a wrong one (docs/operators.md)."""
    import numpy as np
    feeds = {}
    for spec in specs:
        name, path = _input_name(spec, names)
        x = _read_npy(spec, path)
        if x.dtype.kind in "fc" and not (finite := np.isfinite(x)).all():
            raise UsageError(f"--input {spec}: input {name!r} holds {np.size(finite) - np.count_nonzero(finite)} "
                             "NaN or infinite value(s); qsynth refuses them (a quantized model's result for them "
                             "is not defined)")
        feeds[name] = x
    if model is not None and model.suffix != ".tflite":
        _ids_in_range(feeds, model)
    return feeds


def _input_name(spec: str, names: list[str]) -> tuple[str, str]:
    """``--input`` ``NAME=PATH`` split at its first ``=`` when NAME is one of the model's inputs; else, for
    a model's only input, the whole of ``spec`` where that file exists (a path may hold ``=``) or holds
    no ``=``; ModelError otherwise, naming the inputs."""
    from tvm_integration.qnn.semantics.errors import ModelError
    name, sep, path = spec.partition("=")
    if sep and name in names:
        return name, path
    if len(names) == 1 and (not sep or Path(spec).exists()):
        return names[0], spec
    if sep:
        raise ModelError(f"--input {spec}: the model has no input {name!r}; it takes {', '.join(names)}")
    raise ModelError(f"--input {spec}: the model takes {len(names)} inputs ({', '.join(names)}); give each as "
                     "NAME=PATH.npy")


def _read_npy(spec: str, path: str):
    """The array of the .npy file at ``path``, or UsageError naming it: not a file, not a .npy (numpy's
    own message for bytes without its magic string is about pickled data), or a header whose shape needs
    more bytes than the file holds (numpy allocated that first: a header of [100000, 100000, 100000]
    raised MemoryError, an internal error)."""
    import numpy as np
    p = Path(path)
    if p.is_dir():
        raise UsageError(f"--input {spec}: {path} is a directory; give a .npy file")
    try:
        with open(p, "rb") as f:
            head = f.read(6)
            if head[:2] == b"PK":
                raise UsageError(f"--input {spec}: {path} is a .npz archive, not a .npy array")
            if head != b"\x93NUMPY":
                raise UsageError(f"--input {spec}: {path} is not a .npy file (it does not start with numpy's "
                                 "magic string)")
            f.seek(0)
            version = np.lib.format.read_magic(f)
            read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
                np.lib.format.read_array_header_2_0         # 2.0; 3.0 (utf-8 names) is refused as a ValueError
            shape, _, dtype = read_header(f)
            need, holds = int(np.prod(shape, dtype=object)) * dtype.itemsize, os.fstat(f.fileno()).st_size - f.tell()
            if dtype.hasobject or need > holds:
                raise UsageError(f"--input {spec}: {path} claims a {dtype} array of shape {list(shape)} "
                                 f"({need} bytes) but holds {holds}")
            f.seek(0)
            return np.load(f, allow_pickle=False)
    except (OSError, ValueError, EOFError, SyntaxError) as e:
        raise UsageError(f"--input {spec}: cannot read a .npy array from {path} "
                         f"({' '.join((str(e) or type(e).__name__).split())})")


def _ids_in_range(feeds: dict[str, np.ndarray], model: Path) -> None:
    """An id input (a Gather's indices: BERT's input_ids, positions, token types) holding a value outside
    its table's rows is bad input, refused naming it: onnxruntime refuses it too, and the compiled
    Gather would read out of bounds (a segfault)."""
    import onnx
    from tvm_integration.bench.inputs import index_rows
    for name, rows in index_rows(onnx.load(str(model), load_external_data=False)).items():
        x = feeds.get(name)
        if x is not None and x.dtype.kind in "iu" and x.size and (x.min() < -rows or x.max() >= rows):
            raise UsageError(f"--input {name}: ids in [{x.min()}, {x.max()}]; the table it indexes has {rows} rows "
                             f"(ids {-rows} .. {rows - 1})")


def _save_outputs(outputs: dict[str, np.ndarray], path: Path) -> None:
    """One output: a .npy file; several: a .npz archive, each under its output name; atomically."""
    import numpy as np
    from synth.files import write_atomically
    from tvm_integration.qnn.semantics.errors import ModelError
    buffer = io.BytesIO()
    if len(outputs) == 1 and path.suffix == ".npy":
        np.save(buffer, next(iter(outputs.values())))
    elif path.suffix == ".npz":
        np.savez(buffer, **outputs)
    else:
        raise ModelError(f"--output {path}: the model has {len(outputs)} output(s); write one to a .npy file "
                         "or any number to a .npz file")
    try:
        write_atomically(path, buffer.getvalue())
    except OSError as e:
        raise ModelError(f"cannot write {path}: {e.strerror}")


def _output(output: str, option: str, inputs: list[Path], also: list[Path] = ()) -> Path:
    """``output``, checked before any work: its directory writable (else ModelError, as a model the
    pipeline cannot write for), and neither it nor the files written ``also`` a directory or the model
    or an input (bad usage: exit 2, nothing written; ``compile m.onnx -o m.onnx`` used to replace the
    model with the library, and ``-o`` a directory left a stray signature beside it)."""
    from tvm_integration.qnn.semantics.errors import ModelError
    out = Path(output)
    if not out.parent.is_dir() or not os.access(out.parent, os.W_OK):
        raise ModelError(f"{option} {out}: {out.parent} is not a writable directory")
    for path in (out, *also):
        if path.is_dir():
            raise UsageError(f"{option} {output}: {path} is a directory; give a file name")
        for source in inputs:
            if os.path.realpath(path) == os.path.realpath(source) or (
                    path.exists() and source.exists() and os.path.samefile(path, source)):
                raise UsageError(f"{option} {output}: {path} would overwrite the input {source}; nothing written")
    return out


@contextlib.contextmanager
def _private_temporary_files():
    """Every temporary file of the block in a workspace of the private model cache, removed at its end
    (and, left by a killed compile, by a later one): nothing beside the model or in /tmp survives
    ``kill -9``. Where that folder is not private, the system's temporary directory."""
    from tvm_integration.qnn.runtime import artifacts
    try:
        folder = artifacts.private_folder()
    except artifacts.UnsafeFolder:
        yield
        return
    with artifacts.workspace(folder):
        yield


def register(app: typer.Typer) -> None:
    app.command("compile", epilog="Example: qsynth compile resnet_int8.onnx -o resnet_int8.so --threads 2")(compile)
    app.command("run", epilog="Example: qsynth run resnet_int8.onnx --input x.npy --output y.npy")(run)
    app.command("inspect", epilog="Example: qsynth inspect w2a2.onnx")(inspect)
    app.command("bench-model", epilog="Example: qsynth bench-model resnet_int8.onnx --fp32 resnet.onnx --json")(
        bench_model)
