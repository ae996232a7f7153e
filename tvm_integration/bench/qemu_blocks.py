"""The blocks a whole AArch64 process runs during one inference under qemu, and how often, for llvm-mca
(bench/mca.py): what a whole model costs on an Arm core this host does not have.

mca.profile logs every block with ``-d exec,nochain``, a line per run: fine for one operator, too slow
and too large for a whole model (hundreds of millions of runs). Here a small qemu plugin
(block_counter.c, built once with the host's cc) counts each block inline, and counts only the blocks
run between the two marks the driver executes around the inference it measures (qemu/measure.h), after
a warm-up run; the driver writes its code mappings (/proc/self/maps, the guest's under qemu), so every
block is attributed to its library: the compiled model, TVM's runtime, onnxruntime, libc, ...

The process runs as the core would run it: ``qemu-aarch64 -cpu <core>`` (its features: no dot product on
Cortex-A53/A72, so no library takes a dotprod path that llvm-mca's model of the core cannot cost) and
a root (``-L``) whose ``/proc/cpuinfo`` names the core: qemu 7.2 shows the host's, on which
onnxruntime's CPU detection (cpuinfo) crashes; onnxruntime also picks kernels by the core it reads there.
"""
from __future__ import annotations

import hashlib
import os
import re
import subprocess
import tempfile
from collections import Counter
from pathlib import Path

from isa_specs import derived_files
from synth.files import write_atomically
from tvm_integration.bench import mca
from tvm_integration.qemu import cross_model

PLUGIN = Path(__file__).with_name("block_counter.c")
# qemu-aarch64's -cpu models, as LLVM names the core: (MIDR part number, /proc/cpuinfo features)
_V80 = "fp asimd evtstrm aes pmull sha1 sha2 crc32 cpuid"
_V82 = _V80 + " atomics fphp asimdhp asimdrdm lrcpc dcpop asimddp"
CORES = {"cortex-a35": (0xd04, _V80), "cortex-a53": (0xd03, _V80), "cortex-a57": (0xd07, _V80),
         "cortex-a72": (0xd08, _V80), "cortex-a76": (0xd0b, _V82), "neoverse-n1": (0xd0c, _V82)}


def plugin() -> Path:
    """block_counter.c built for this host, kept in a private folder under a name holding the source's
    hash, and checked against its digest before each use (a plugin is code qemu loads)."""
    source = PLUGIN.read_bytes()
    built = derived_files.cache_folder("qemu-plugin") / f"block_counter-{hashlib.sha256(source).hexdigest()[:12]}.so"

    def build(out: Path) -> None:
        proc = subprocess.run(["cc", "-O2", "-shared", "-fPIC", str(PLUGIN), "-o", str(out)], capture_output=True,
                              text=True)
        if proc.returncode:
            raise RuntimeError(f"building the qemu plugin failed: {proc.stderr.strip()[-1500:]}")
    return derived_files.cached_build(built, build, "qemu plugin")


def root(core: str) -> Path:
    """The guest's root for ``core``: the cross gcc's libraries, and a /proc/cpuinfo naming the core, in a
    private folder, checked (and put right) on every call."""
    if core not in CORES:
        raise ValueError(f"core {core!r}: qemu-aarch64 models {', '.join(CORES)}; estimates need one of them")
    part, features = CORES[core]
    where = derived_files.cache_folder(f"aarch64-root-{core}")
    lib = where / "lib"
    if not (lib.is_symlink() and Path(os.readlink(lib)) == cross_model.SYSROOT / "lib"):
        derived_files.delete(lib)
        lib.symlink_to(cross_model.SYSROOT / "lib")
    cpuinfo = derived_files.private_folder(where / "proc") / "cpuinfo"
    text = (f"processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: {features}\nCPU implementer\t: 0x41\n"
            f"CPU architecture: 8\nCPU variant\t: 0x0\nCPU part\t: {part:#x}\nCPU revision\t: 0\n\n")
    try:
        intact = derived_files.own_file(cpuinfo) == text.encode()
    except derived_files.BadArtifact:
        intact = False
    if not intact:
        derived_files.delete(cpuinfo)
        write_atomically(cpuinfo, text)
    return where


def qemu_options(core: str, counts: Path) -> tuple[str, ...]:
    """qemu-aarch64's options to run a driver as ``core`` with its blocks counted into ``counts``
    (given after cross.QEMU's own: the last -cpu and -L win)."""
    return ("-cpu", core, "-L", str(root(core)), "-plugin", f"{plugin()},out={counts}")


def read(counts: Path, maps: Path) -> list[mca.Block]:
    """The blocks the plugin counted (``counts``) with their instructions, each attributed to the file
    mapped at its address (``maps``: the driver's executable mappings), with its offset in that file."""
    lines = counts.read_text().splitlines()
    if not lines or lines[0] != "marks 2":
        raise RuntimeError(f"the driver marked its inference {lines[0].split()[-1] if lines else 0} times, not twice")
    runs: Counter = Counter()
    for line in lines[1:]:
        start, n, *words = line.split()
        runs[int(start, 16), tuple(words)] += int(n)       # a block translated twice: one block
    mapping = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) \S+ ([0-9a-f]+) \S+ \S+[ \t]*([^\n]*)$", re.M)
    mappings = [(int(m[1], 16), int(m[2], 16), Path(m[4]).name if m[4] else "[anonymous]", int(m[3], 16))
                for m in mapping.finditer(maps.read_text())]
    text = _disassembled(list(runs))
    blocks = []
    for (start, words), n in runs.items():
        where, at = next(((name, start - lo + offset) for lo, hi, name, offset in mappings if lo <= start < hi),
                         ("[unmapped]", 0))
        blocks.append(mca.Block(start, text[start, words], n, where, at))
    return mca._joined(sorted(blocks, key=lambda b: b.start))


def _disassembled(blocks: list[tuple[int, tuple[str, ...]]]) -> dict[tuple[int, tuple[str, ...]], tuple[str, ...]]:
    """(address, instruction words) of each block -> its instructions, by llvm-objdump (``-mattr=+all``:
    every extension), laid one block after another in an object; a branch target is then made the
    address it has in the block's own place (so that a loop's branch to its own start reads as one:
    mca.Block.is_loop)."""
    source = "".join(f"b{i}:\n" + "".join(f".inst 0x{w}\n" for w in words) for i, (_, words) in enumerate(blocks))
    with tempfile.TemporaryDirectory(prefix="qsynth-blocks-") as tmp:
        (Path(tmp) / "blocks.s").write_text(source)
        mca._run([mca.tool("llvm-mc-19", "llvm-mc"), "-triple=aarch64", "-mattr=+all", "-filetype=obj",
                  str(Path(tmp) / "blocks.s"), "-o", str(Path(tmp) / "blocks.o")])
        out = mca._run([mca.tool("llvm-objdump-19", "llvm-objdump"), "-d", "--no-show-raw-insn", "--mattr=+all",
                        str(Path(tmp) / "blocks.o")])
    code = {int(m[1], 16): m[2].replace("\t", " ") for m in map(mca._LINE.match, out.splitlines()) if m}
    result, at = {}, 0
    for start, words in blocks:
        def placed(m, start=start, at=at):
            return f"0x{start + int(m[1], 16) - at:x} <{start + int(m[1], 16) - at:x}>"
        result[start, words] = tuple(mca._TARGET.sub(placed, code[at + 4 * k]) for k in range(len(words)))
        at += 4 * len(words)
    return result
