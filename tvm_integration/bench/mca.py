"""Cycles of an AArch64 operator on an Arm core model, estimated with llvm-mca: what a NEON operator
costs on a core this host does not have (cross.QemuOperator runs it under qemu, whose speed says
nothing about an Arm core).

1. ``profile``: run the operator under qemu on one input with ``-d in_asm,exec,nochain`` limited to
   the operator's own code: every translated block's instruction addresses and how often each block
   ran. Block boundaries are qemu's (a block ends at a branch), so the counts are exact; where qemu
   also split straight-line code (at a page boundary, or its instruction limit) the two parts are
   costed as one block (``_joined``).
2. ``block_cycles``: llvm-mca's steady-state cycles of each block's instructions (as llvm-objdump
   prints them from the linked binary) on a core model (``-mtriple=aarch64 -mcpu=<mca_cpu(core)>``: a
   core LLVM models with another core's model is costed on a model of its own family, core_models.py),
   all blocks in one run as code regions.
3. ``estimate``: sum of runs x cycles over the blocks — of the whole operator, and of the blocks that
   popcount (``cnt``: the GEMM's K loop, its unrolled remainder; not the packing or the output
   stage); and the hottest popcounting loop (a block ending in a branch to its own start): its
   cycles per iteration and its iterations.

Basic-block throughput, as in BHive: no cache misses, no branch mispredictions, no overlap between
blocks. A comparison of two schedules on the same core model is what it is for.
"""
from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

_LINE = re.compile(r"^\s*([0-9a-f]+):\s+(.*?)\s*$")
_FUNCTION = re.compile(r"^([0-9a-f]+) <(.+)>:$")
_TARGET = re.compile(r"0x([0-9a-f]+) <[^>]*>")
# a core -> the -mcpu whose scheduling model costs it: LLVM 19 costs -mcpu=cortex-a76 on its Cortex-A57
# model; Neoverse-N1, derived from the A76, has its own
STAND_IN = {"cortex-a76": "neoverse-n1"}


@dataclass(frozen=True)
class Block:
    start: int
    instructions: tuple[str, ...]   # as llvm-objdump prints them
    runs: int
    where: str = ""                 # the library it is in (qemu_blocks.py: a whole process's blocks)
    offset: int = 0                 # where it starts in that library's file (qemu_blocks.read)

    @property
    def popcounts(self) -> int:
        return sum(1 for i in self.instructions if i.split()[0] == "cnt")

    @property
    def is_loop(self) -> bool:
        """Ends in a branch back to its own start: one run is one iteration."""
        m = _TARGET.search(self.instructions[-1])
        return bool(m) and int(m[1], 16) == self.start

    def assembly(self, label: str) -> str:
        """The instructions for llvm-mca after ``label``, which every branch targets."""
        return f"{label}:\n" + "\n".join("  " + _TARGET.sub(label, i) for i in self.instructions)


def tool(*names: str) -> str:
    """The first of ``names`` installed (newest LLVM first), or RuntimeError."""
    for name in names:
        if shutil.which(name):
            return name
    raise RuntimeError(f"none of {', '.join(names)} installed (apt-get install llvm)")


def missing_tools() -> str | None:
    """None when llvm-mca, llvm-objdump and llvm-nm are installed, else what is not."""
    try:
        for names in (("llvm-mca-19", "llvm-mca"), ("llvm-objdump-19", "llvm-objdump"), ("llvm-nm-19", "llvm-nm")):
            tool(*names)
    except RuntimeError as e:
        return str(e)
    return None


def _run(cmd: list[str]) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd[:3])} ... failed: {proc.stderr.strip()[-1500:]}")
    return proc.stdout


def operator_code(binary: Path, obj: Path) -> dict[int, str]:
    """address -> instruction of the functions the operator's object defines, in the linked binary
    (beside the driver and libc)."""
    out = _run([tool("llvm-nm-19", "llvm-nm"), "--defined-only", str(obj)])
    functions = {f[-1] for f in map(str.split, out.splitlines()) if len(f) == 3 and f[1] in "tT"}
    out = _run([tool("llvm-objdump-19", "llvm-objdump"), "-d", "--no-show-raw-insn", str(binary)])
    code, inside = {}, False
    for line in out.splitlines():
        if m := _FUNCTION.match(line):
            inside = m[2] in functions
        elif inside and (m := _LINE.match(line)):
            code[int(m[1], 16)] = m[2].replace("\t", " ")
    return code


def profile(op, x) -> list[Block]:
    """The blocks of the operator's code that ran when ``op`` (a cross.QemuOperator) ran on ``x``."""
    code = operator_code(op.binary, op.object)
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "qemu.log"
        op(x, qemu_options=("-d", "in_asm,exec,nochain", "-dfilter", f"{min(code):#x}..{max(code) + 4:#x}",
                            "-D", str(log)))
        extents, runs = _read_log(log.read_bytes())
    return _joined([Block(start, tuple(code[a] for a in sorted(extents[start]) if a in code), n)
                    for start, n in sorted(runs.items()) if start in extents and start in code])


def _falls_through(block: Block) -> bool:
    """Ends without a branch: qemu ended it where the code crosses a page, or at its instruction limit."""
    op = block.instructions[-1].split()[0]
    return not (op in ("b", "bl", "br", "blr", "ret", "cbz", "cbnz", "tbz", "tbnz") or op.startswith("b."))


def _joined(blocks: list[Block]) -> list[Block]:
    """``blocks`` with each one that falls through (``_falls_through``) costed together with the block
    it runs into, for its own runs (a loop split at a page stays one loop, not two halves that
    llvm-mca cannot overlap); the block run into keeps the runs it was entered from elsewhere."""
    by_start = {b.start: b for b in blocks}
    for b in sorted(blocks, key=lambda b: -b.start):      # the last first: a chain joins from its end
        after = by_start.get(b.start + 4 * len(b.instructions))
        if _falls_through(b) and after is not None and after.runs >= b.runs:
            by_start[b.start] = dataclasses.replace(b, instructions=b.instructions + after.instructions)
            by_start[after.start] = dataclasses.replace(after, runs=after.runs - b.runs)
    return [b for _, b in sorted(by_start.items()) if b.runs]


def _read_log(text: bytes) -> tuple[dict[int, set[int]], Counter]:
    """(block start -> its instruction addresses, block start -> runs) of a qemu log (millions of
    lines: matched as bytes, counted before they are converted)."""
    extents: dict[int, set[int]] = {}
    for block in re.finditer(rb"^IN:[^\n]*\n((?:0x[0-9a-f]+:[^\n]*\n)+)", text, re.M):
        addresses = [int(a, 16) for a in re.findall(rb"^0x([0-9a-f]+):", block[1], re.M)]
        extents[addresses[0]] = set(addresses)          # a block translated again replaces the first
    runs = Counter(re.findall(rb"\[[0-9a-f]{16}/([0-9a-f]{16})/", text))     # Trace 0: 0x.. [flags/pc/...]
    return extents, Counter({int(start, 16): n for start, n in runs.items()})


_CYCLES: dict[tuple[str, str], float] = {}     # (core, a block's assembly) -> cycles: llvm-mca once per block


def mca_cpu(core: str) -> str:
    """The ``-mcpu`` llvm-mca costs ``core`` with (``STAND_IN``)."""
    return STAND_IN.get(core, core)


def block_cycles(blocks: list[Block], core: str, iterations: int = 100) -> list[float]:
    """llvm-mca's cycles per run of each block on ``core``'s model (``mca_cpu``; steady state over
    ``iterations``); the blocks this process has costed before are not costed again. An instruction the
    model has no timing for is left out of its block, not an error."""
    assembly = [b.assembly(".Lb") for b in blocks]
    new = list(dict.fromkeys(a for a in assembly if (core, a) not in _CYCLES))
    source = "\n".join(f"# LLVM-MCA-BEGIN b{i}\n{a.replace('.Lb', f'.Lb{i}')}\n# LLVM-MCA-END b{i}"
                       for i, a in enumerate(new))
    if new:
        with tempfile.NamedTemporaryFile("w", suffix=".s") as f:
            f.write(source + "\n")
            f.flush()
            out = _run([tool("llvm-mca-19", "llvm-mca"), "-mtriple=aarch64", f"-mcpu={mca_cpu(core)}",
                        f"-iterations={iterations}", "-skip-unsupported-instructions=lack-sched", f.name])
        totals = [int(t) for t in re.findall(r"Total Cycles:\s+(\d+)", out)]
        if len(totals) != len(new):
            raise RuntimeError(f"llvm-mca reported {len(totals)} regions for {len(new)} blocks")
        _CYCLES.update({(core, a): t / iterations for a, t in zip(new, totals)})
    return [_CYCLES[core, a] for a in assembly]


def estimate(op, x, cores: tuple[str, ...] = ("cortex-a53", "cortex-a72")) -> dict:
    """Per core: estimated cycles of the whole operator on ``x``, of its popcounting blocks, and
    its hottest popcounting loop (cycles per iteration, iterations, instructions, popcounts)."""
    blocks = profile(op, x)
    result = {}
    for core in cores:
        cycles = block_cycles(blocks, core)
        counting = [(b, c) for b, c in zip(blocks, cycles) if b.popcounts]
        loops = [(b, c) for b, c in counting if b.is_loop]
        hot, per = max(loops, key=lambda bc: bc[0].runs * bc[1]) if loops else (None, 0.0)
        result[core] = {"operator": sum(b.runs * c for b, c in zip(blocks, cycles)),
                        "popcount_blocks": sum(b.runs * c for b, c in counting),
                        "loop": None if hot is None else {"cycles_per_iteration": per, "iterations": hot.runs,
                                                          "instructions": len(hot.instructions),
                                                          "popcounts": hot.popcounts}}
    return result
