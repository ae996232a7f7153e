"""onnxruntime's AArch64 build running an ONNX model under qemu-aarch64: the baseline whose inference is
costed like qsynth's (bench/arm_models.py), by the same qemu block counts and llvm-mca core model.

``runtime()`` fetches ``libonnxruntime.so`` from the registry's aarch64 wheel of the onnxruntime version
this host runs (``pip download --platform manylinux_2_28_aarch64``; its MLAS kernels are inside it) once
into the private folder ``$XDG_CACHE_HOME/qsynth/aarch64-onnxruntime<version>/``, and ``driver`` links
qemu/ort_driver.c against it with the cross gcc (onnxruntime's C API: this host has no AArch64 C++
compiler); both are checked before every use (qemu/wheels.py). ``run`` runs the driver: one inference,
or, with its blocks counted (bench/qemu_blocks.py), a warm-up inference and then the measured one between
the driver's marks; ``run_each`` runs one inference on each of several inputs in one qemu process.
"""
from __future__ import annotations

import bisect
import functools
import importlib.metadata
import re
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import helper

from isa_specs import derived_files
from tvm_integration.bench import mca, qemu_blocks
from tvm_integration.qemu import cross, cross_model, wheels

DRIVER = Path(__file__).parent.parent / "qemu" / "ort_driver.c"
LIBRARY = "libonnxruntime.so.1"             # its soname, what the driver is linked against


def runtime() -> Path:
    """The private folder holding onnxruntime's AArch64 library, checked against its digest, fetched from
    the registry when missing or damaged (qemu/wheels.py); RuntimeError when it cannot be."""
    version = importlib.metadata.version("onnxruntime")
    folder = derived_files.cache_folder(f"aarch64-onnxruntime{version}")
    wheels.library(folder, "onnxruntime", version, lambda name: Path(name).name == f"libonnxruntime.so.{version}",
                   LIBRARY)
    return folder


def driver() -> Path:
    """ort_driver.c linked against the AArch64 onnxruntime (kept beside it, checked with it before each use,
    rebuilt when a source or the library changes)."""
    lib_dir = runtime()
    sources = [DRIVER, DRIVER.with_name("npy.h"), DRIVER.with_name("measure.h")]
    return wheels.linked(lib_dir, "ort_driver", sources, [lib_dir / LIBRARY], lambda out: [
        cross.CC, "-O2", str(DRIVER), "-o", str(out), f"-L{lib_dir}", f"-l:{LIBRARY}",
        f"-Wl,-rpath-link,{cross_model.SYSROOT / 'lib'}"])


def run(model: str | Path, feeds: dict[str, np.ndarray], outputs: list[str], core: str,
        threads: int = 1, counted: bool = True) -> tuple[list[np.ndarray], list[mca.Block]]:
    """onnxruntime's outputs (in the order of ``outputs``, the model's output names) on ``feeds`` under
    qemu as ``core``, and the blocks its measured inference ran (bench/qemu_blocks.py); ``counted`` False:
    no blocks, one inference and no warm-up, qemu without the counting plugin (several times faster, for
    outputs only)."""
    with tempfile.TemporaryDirectory(prefix="qsynth-ort-aarch64-") as tmp:
        tmp = Path(tmp)
        (results,) = _driven(model, [feeds], outputs, core, threads, tmp, tmp / "counts.txt" if counted else None)
        return results, qemu_blocks.read(tmp / "counts.txt", tmp / "out0_maps.txt") if counted else []


def run_each(model: str | Path, feeds: list[dict[str, np.ndarray]], outputs: list[str], core: str,
             threads: int = 1) -> list[list[np.ndarray]]:
    """``run``'s outputs (not counted) on each of ``feeds``, all run by one qemu process (a start costs about
    2.4 s of CPU)."""
    with tempfile.TemporaryDirectory(prefix="qsynth-ort-aarch64-") as tmp:
        return _driven(model, feeds, outputs, core, threads, Path(tmp), None)


def _driven(model: str | Path, feeds: list[dict[str, np.ndarray]], outputs: list[str], core: str, threads: int,
            tmp: Path, counts: Path | None) -> list[list[np.ndarray]]:
    """The driver's outputs on each of ``feeds``, its files in ``tmp``; ``counts``: the blocks of the measured
    inference (the driver's --measure, one run) counted into that file, else qemu without the plugin."""
    if (why := cross_model.missing_tools()) is not None:
        raise RuntimeError(f"cannot run onnxruntime for AArch64 here: {why}")
    binary = driver()
    runs = []
    for r, feed in enumerate(feeds):
        runs += ["--", str(tmp / f"out{r}_")]
        for i, (name, x) in enumerate(feed.items()):
            np.save(tmp / f"in{r}_{i}.npy", np.asarray(x, order="C"))    # ascontiguousarray makes a 0-d input 1-d
            runs.append(f"{name}={tmp / f'in{r}_{i}.npy'}")
    options = qemu_blocks.qemu_options(core, counts) if counts else ("-cpu", core, "-L", str(qemu_blocks.root(core)))
    cmd = [*cross.QEMU, *options, "-E", f"LD_LIBRARY_PATH={wheels.library_folder(binary)}", str(binary),
           *(["--measure"] if counts else []), str(Path(model).resolve()), str(threads), *outputs, *runs]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if proc.returncode:
        raise RuntimeError(f"onnxruntime failed under qemu (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return [[np.load(tmp / f"out{r}_{i}.npy") for i in range(len(outputs))] for r in range(len(feeds))]


def by_function(blocks: list[mca.Block], core: str) -> dict[str, float]:
    """The cycles of ``blocks`` (``run``'s) run inside onnxruntime's library by the function holding each.
    The library has no symbols, so a function is a range of its .eh_frame (one unwind entry, FDE, a C++
    function), named by its first address (hex, the library's own numbering: ``llvm-objdump -d
    --start-address`` shows it); MLAS's assembly kernels have no entry and are named by the 4 KB page holding
    them (``page 10d5000``). Sorted, the largest first."""
    text, ranges = _functions(runtime() / LIBRARY)
    starts = [lo for lo, _ in ranges]
    functions: dict[str, float] = {}
    for block, c in zip(blocks, mca.block_cycles(blocks, core)):
        if block.where != LIBRARY:
            continue
        address = block.offset - text[0] + text[1]
        at = bisect.bisect_right(starts, address) - 1
        name = f"{ranges[at][0]:x}" if at >= 0 and address < ranges[at][1] else f"page {address >> 12 << 12:x}"
        functions[name] = functions.get(name, 0.0) + block.runs * c
    return dict(sorted(functions.items(), key=lambda kv: -kv[1]))


@functools.cache
def _functions(library: Path) -> tuple[tuple[int, int], list[tuple[int, int]]]:
    """(.text's file offset and address, the sorted (start, end) address ranges of ``library``'s FDEs)."""
    sections = mca._run([mca.tool("llvm-readelf-19", "llvm-readelf"), "-S", "-W", str(library)])
    text = next((int(f[-7], 16), int(f[-8], 16)) for f in map(str.split, sections.splitlines()) if ".text" in f)
    frames = mca._run([mca.tool("llvm-dwarfdump-19", "llvm-dwarfdump"), "--eh-frame", str(library)])
    entries = re.findall(r" FDE .* pc=([0-9a-f]+)\.\.\.([0-9a-f]+)", frames)
    return text, sorted((int(lo, 16), int(hi, 16)) for lo, hi in entries)


def adds_as_defined(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` whose DequantizeLinear -> Add -> QuantizeLinear groups each also output the Add's
    float sum: onnxruntime fuses no node whose output leaves the graph (its QDQ selectors' CheckOutputEdges),
    so its AArch64 build computes those Adds as ONNX defines them (float Add, then QuantizeLinear, which
    rounds half to even) instead of MLAS's NEON QLinearAdd (integer multipliers, ties away from zero;
    docs/measurements.md). The model's stated reference on Arm where it holds QDQ Adds (arm_reference)."""
    made_by = {out: n.op_type for n in model.graph.node for out in n.output}
    quantized = {i for n in model.graph.node if n.op_type == "QuantizeLinear" for i in n.input[:1]}
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    copy.graph.output.extend(helper.make_tensor_value_info(n.output[0], onnx.TensorProto.FLOAT, None)
                             for n in model.graph.node if n.op_type == "Add" and n.output[0] in quantized
                             and all(made_by.get(i) == "DequantizeLinear" for i in n.input))
    return copy
