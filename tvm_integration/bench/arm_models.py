"""A whole model's estimated cycles on an Arm core, qsynth's build next to onnxruntime's AArch64 build
(int8 on the same model, fp32 on its float original when given) and, on request, TVM's default build of
the same model for the core: ``qsynth bench-model MODEL --target neon --mcpu CORE`` and
scripts/bench_arm_models.py.

Every column is costed by one method: the process runs under ``qemu-aarch64 -cpu CORE``, one warm-up
inference and one measured inference between two marks; the blocks the measured one ran are counted
(bench/qemu_blocks.py) and each costed once by llvm-mca's model of the core (bench/mca.py). A column's
cycles are those of every block its process ran during the inference: the compiled model and the runtime
that drives it (TVM's VM in libtvm_runtime/libtvm_ffi; onnxruntime's session, graph executor and MLAS
kernels, all in libonnxruntime) and the C/C++ libraries they call (memcpy, malloc, expf); ``by_library``
splits them, and qsynth's column also by the compiled model's functions (``by_function``). Outputs are
checked: ours against onnxruntime on this host and under qemu. A TFLite model's baseline and one reference
is LiteRT's AArch64 build under qemu (bench/litert_aarch64.py), its blocks costed the same way.
"""
from __future__ import annotations

import bisect
import shutil
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import onnx

from tvm_integration.bench import inputs as model_inputs
from tvm_integration.bench import litert_aarch64, mca, ort_aarch64, qemu_blocks
from tvm_integration.bench.models import Refused, random_inputs, reference_session, tvm_own_import
from tvm_integration.bench.neon_int8_layers import is_multiply
from tvm_integration.qemu import cross_model
from tvm_integration.qnn.runtime import arm_reference


def cycles(blocks: list[mca.Block], core: str) -> dict:
    """Estimated cycles of ``blocks`` on ``core``: the total and each library's part."""
    by_library: dict[str, float] = defaultdict(float)
    for block, c in zip(blocks, mca.block_cycles(blocks, core)):
        by_library[block.where] += block.runs * c
    return {"cycles": sum(by_library.values()),
            "by_library": dict(sorted(by_library.items(), key=lambda kv: -kv[1]))}


def by_function(blocks: list[mca.Block], core: str, library: Path, maps: Path) -> dict:
    """The cycles of the blocks run in ``library`` (a compiled model; ``maps``: where the run mapped it)
    by the function holding each, the nearest symbol at or below the block (TVM's parallel bodies have
    none of their own and follow the function that launches them), and ``k_loop``: those of its blocks
    that hold a vector multiply (the GEMMs' K loops, as neon_int8_layers counts them)."""
    base = next(int(f[0].split("-")[0], 16) - int(f[2], 16) for f in map(str.split, maps.read_text().splitlines())
                if len(f) >= 6 and f[5] == str(library))
    out = mca._run([mca.tool("llvm-nm-19", "llvm-nm"), "--defined-only", str(library)])
    symbols = sorted((int(f[0], 16), f[2]) for f in map(str.split, out.splitlines()) if len(f) == 3 and f[1] in "tT")
    starts = [a for a, _ in symbols]
    functions: dict[str, float] = defaultdict(float)
    k_loop = 0.0
    for block, c in zip(blocks, mca.block_cycles(blocks, core)):
        if block.where == library.name and (at := bisect.bisect_right(starts, block.start - base) - 1) >= 0:
            functions[symbols[at][1]] += block.runs * c
            k_loop += block.runs * c if any(map(is_multiply, block.instructions)) else 0.0
    return {"by_function": dict(sorted(functions.items(), key=lambda kv: -kv[1])), "k_loop": k_loop}


def _measured(runner: cross_model.CrossModel, arrays: list[np.ndarray], core: str, threads: int,
              counts: Path) -> tuple[list[np.ndarray], list[mca.Block]]:
    """A compiled model's outputs on ``arrays`` under qemu as ``core``, and the blocks of its measured
    inference (counted into the file ``counts``)."""
    options = (*qemu_blocks.qemu_options(core, counts), "-E", f"TVM_NUM_THREADS={threads}")
    outputs = runner(*arrays, qemu_options=options, measure=True)
    return outputs, qemu_blocks.read(counts, runner.code_maps)


def tvm_default(path: Path, core: str, folder: Path) -> cross_model.CrossModel:
    """TVM 0.27's own Relax import of the model, built for the core by default (no qsynth operator), or
    models.Refused."""
    return cross_model.CrossModel(cross_model.export(tvm_own_import(path), folder / "tvm_default.so", mcpu=core))


def stated_model(path: Path, op_kinds, folder: Path) -> Path:
    """The model onnxruntime's AArch64 build runs to give the stated reference of a model whose rewritten op
    kinds are ``op_kinds``: ``path`` itself or, where that build departs from the ONNX definition on one of
    them (a QDQ Add, the one kind that departs), a copy in ``folder`` with those ops as defined
    (ort_aarch64.adds_as_defined)."""
    if not arm_reference.departures(op_kinds):
        return path
    stated = folder / "adds_as_defined.onnx"
    onnx.save(ort_aarch64.adds_as_defined(onnx.load(str(path))), str(stated))
    return stated


def bench_arm_model(path: str | Path, core: str, fp32: str | Path | None = None, with_tvm_default: bool = False,
                    feeds: dict[str, np.ndarray] | None = None, threads: int = 1) -> dict:
    """The row: each column's estimated cycles on ``core`` (``cycles``; None and ``refused``, the reason,
    when TVM's own import refuses the model; ``mca_cpu``: the -mcpu whose model costed them) and
    ``ratios`` (ours / theirs: below 1 ours needs fewer); our outputs' largest difference from each
    reference (``max_abs_diff``: the ONNX definition, i.e. onnxruntime's x86 exact mode on this host,
    and onnxruntime's AArch64 build under qemu; ``max_abs_diff_vs_stated``: from that build with each op
    kind as its stated reference computes it, the QDQ Adds as ONNX defines them, ort_aarch64.adds_as_defined),
    the reference each of the model's op kinds follows
    (``follows``), those not known to be exact against theirs (``not_exact``), those where onnxruntime's
    AArch64 build departs from the ONNX definition the build follows (``runtime_departs``) and those where its
    x86 exact mode does (``x86_departs``; qnn/runtime/arm_reference.py); how many output elements differ from
    each (``differing``: ``onnx``, ``onnxruntime_aarch64``, ``stated``, of ``outputs``) and what explains
    each difference (``explanation``, sentences). A TFLite model (``.tflite``): _tflite_row's row; ValueError
    with ``fp32``, ``with_tvm_default`` or more than one thread."""
    from tvm_integration.qnn.runtime.model import compile_model
    qemu_blocks.root(core)                                  # a core qemu does not model: ValueError, first
    path, start = Path(path), time.perf_counter()
    tflite = path.suffix == ".tflite"
    if tflite and (fp32 is not None or with_tvm_default or threads != 1):
        raise ValueError("a TFLite model on Arm is benchmarked alone against LiteRT's AArch64 build: no fp32 "
                         "original, no TVM default build, one thread")
    model = compile_model(path, target="neon", mcpu=core)
    given = feeds or {}
    drawn = random_inputs({n: s for n, s in model.inputs.items() if n not in given}, np.random.default_rng(0),
                          None if tflite else model_inputs.ranges(onnx.load(str(path), load_external_data=False)))
    feeds = {name: given[name] if name in given else drawn[name] for name in model.inputs}
    columns, work = {}, Path(tempfile.mkdtemp(prefix="qsynth-arm-bench-"))
    runner = model.runner()
    ours, blocks = _measured(runner, model.checked(feeds), core, threads, work / "qsynth.txt")
    columns["qsynth"] = cycles(blocks, core) | by_function(blocks, core, runner.library, runner.code_maps)
    if tflite:
        shutil.rmtree(work)
        return _tflite_row(path, model, core, feeds, ours, columns, start)
    reference = reference_session(path).run(None, feeds)
    theirs, blocks = ort_aarch64.run(path, feeds, model.outputs, core, threads)
    columns["onnxruntime_int8"] = cycles(blocks, core)
    stated = theirs
    if (stated_path := stated_model(path, model.op_kinds, work)) != path:
        stated, _ = ort_aarch64.run(stated_path, feeds, model.outputs, core, threads)
    if fp32 is not None:
        names = [o.name for o in onnx.load(str(fp32), load_external_data=False).graph.output]
        _, blocks = ort_aarch64.run(fp32, feeds, names, core, threads)
        columns["onnxruntime_fp32"] = cycles(blocks, core)
    if with_tvm_default:
        try:
            _, blocks = _measured(tvm_default(path, core, work), list(feeds.values()), core, threads,
                                  work / "tvm_default.txt")
            columns["tvm_default"] = cycles(blocks, core)
        except Refused as e:
            columns["tvm_default"] = {"cycles": None, "refused": str(e)}
    shutil.rmtree(work)

    ours_cycles = columns["qsynth"]["cycles"]
    differences = {arm_reference.ONNX: largest_difference(ours, reference),
                   arm_reference.AARCH64: largest_difference(ours, theirs)}
    row = {"model": path.name, "core": core, "mca_cpu": mca.mca_cpu(core), "threads": threads, "columns": columns,
            "ratios": {name: ours_cycles / c["cycles"] for name, c in columns.items()
                       if name != "qsynth" and c["cycles"] is not None},
            "max_abs_diff_vs_onnxruntime": differences[arm_reference.ONNX],
            "max_abs_diff_vs_onnxruntime_aarch64": differences[arm_reference.AARCH64],
            "onnxruntime_aarch64_vs_host": largest_difference(theirs, reference),
            "max_abs_diff_vs_stated": largest_difference(ours, stated),
            "max_abs_diff": differences, "follows": arm_reference.follows(model.op_kinds),
            "not_exact": [arm_reference.describe(k) for k in model.inexact()],
            "runtime_departs": [k.name for k in arm_reference.departures(model.op_kinds)],
            "x86_departs": [k.name for k in arm_reference.x86_departures(model.op_kinds)],
            "differing": {arm_reference.ONNX: differing(ours, reference),
                          arm_reference.AARCH64: differing(ours, theirs), "stated": differing(ours, stated),
                          "outputs": sum(int(x.size) for x in ours)},
            "seconds": time.perf_counter() - start}
    return row | {"explanation": explanation(row)}


def largest_difference(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    return max(float(np.max(np.abs(x.astype(np.float64) - y.astype(np.float64)))) if x.size else 0.0
               for x, y in zip(a, b, strict=True))


def differing(a: list[np.ndarray], b: list[np.ndarray]) -> int:
    return sum(int(np.count_nonzero(x != y)) for x, y in zip(a, b, strict=True))


def _tflite_row(path: Path, model, core: str, feeds: dict[str, np.ndarray], ours: list[np.ndarray], columns: dict,
                start: float) -> dict:
    """bench_arm_model's row for a TFLite model, whose every op kind's stated reference is LiteRT's AArch64
    build (arm_reference.LITERT): that build under qemu as ``core`` is both the baseline column
    (``litert_int8``) and the one reference; the row's keys are those of an ONNX model's row but for the
    references (``max_abs_diff``, ``differing``: LiteRT's AArch64 build)."""
    theirs, blocks = litert_aarch64.measured(path, feeds, core)
    theirs = [theirs[name] for name in model.outputs]
    columns["litert_int8"] = cycles(blocks, core)
    difference, count = largest_difference(ours, theirs), differing(ours, theirs)
    row = {"model": path.name, "core": core, "mca_cpu": mca.mca_cpu(core), "threads": 1, "columns": columns,
           "ratios": {"litert_int8": columns["qsynth"]["cycles"] / columns["litert_int8"]["cycles"]},
           "max_abs_diff_vs_stated": difference, "max_abs_diff": {arm_reference.LITERT: difference},
           "follows": arm_reference.follows(model.op_kinds),
           "not_exact": [arm_reference.describe(k) for k in model.inexact()], "runtime_departs": [], "x86_departs": [],
           "differing": {arm_reference.LITERT: count, "stated": count, "outputs": sum(int(x.size) for x in ours)},
           "seconds": time.perf_counter() - start}
    return row | {"explanation": explanation(row)}


def explanation(row: dict) -> list[str]:
    """What a row's differences from the two onnxruntime builds come from, one sentence each, as far as the
    known departures of those builds from each op kind's stated reference explain them (arm_reference): a
    difference from the AArch64 build is explained when ours equals that build with the kinds it departs on
    computed as defined; one from the x86 exact mode, by the kinds where that mode is not the stated
    reference. Where ours differs from the stated reference, nothing is explained, and the sentence says so."""
    counts, of = row["differing"], row["differing"]["outputs"]
    amount = lambda ref, largest: f"{largest:g} on {counts[ref]} of {of} outputs"
    if counts["stated"]:
        unknown = f"; op kinds not known to be exact: {', '.join(row['not_exact'])}" if row["not_exact"] else ""
        return [f"ours differs from each op kind's stated reference by "
                f"{amount('stated', row['max_abs_diff_vs_stated'])}: NOT explained by any known departure of the "
                f"reference runtimes{unknown}"]
    lines = []
    if counts.get(arm_reference.AARCH64):
        causes = "; ".join(f"{k}: {arm_reference.kind(k).runtime_departs}" for k in row["runtime_departs"])
        lines.append(f"the difference from onnxruntime's AArch64 build "
                     f"({amount(arm_reference.AARCH64, row['max_abs_diff'][arm_reference.AARCH64])}) comes entirely "
                     f"from how it computes {', '.join(row['runtime_departs'])}: with those ops as ONNX defines them "
                     f"(ort_aarch64.adds_as_defined) that build equals ours on every output ({causes})")
    if counts.get(arm_reference.ONNX):
        open_order = [k for k, ref in row["follows"].items() if ref == arm_reference.AARCH64]
        causes = [f"{', '.join(open_order)} (ONNX leaves their order open, or does not define onnxruntime's own "
                  f"ops; ours follow the AArch64 build)"] \
            if open_order else []
        causes += [f"{k} ({arm_reference.kind(k).x86_departs})" for k in row["x86_departs"]]
        lines.append(f"the difference from onnxruntime's x86 exact mode "
                     f"({amount(arm_reference.ONNX, row['max_abs_diff'][arm_reference.ONNX])}) comes from the op kinds "
                     f"where that mode is not the stated reference, since ours equals the stated reference on every "
                     f"output: {'; '.join(causes)}" if causes else
                     f"the difference from onnxruntime's x86 exact mode "
                     f"({amount(arm_reference.ONNX, row['max_abs_diff'][arm_reference.ONNX])}) is NOT explained: every "
                     f"op kind follows the ONNX definition and ours equals the stated reference")
    return lines
