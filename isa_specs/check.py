"""Differential validation of instruction semantics against real execution.

For every form of every instruction, a generated C harness calls the intrinsic on the same inputs
the numpy semantics sees (natively on x86, under qemu-aarch64 for NEON) and the outputs are compared
byte for byte. The Z3 semantics is evaluated on a subset of the same inputs and compared with numpy,
so the three agree: machine = numpy = Z3.
"""
from __future__ import annotations

import hashlib
import math
import os
import select
import selectors
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import jinja2
import numpy as np
import z3

from isa_specs import host
from isa_specs.derived_files import UnsafeFolder, cache_root, cached_build, private_folder
from isa_specs.instruction import CType, Form, Instruction, evaluate
from isa_specs.isa import ISA
from isa_specs.lanes import NUMPY, Z3, mask

_TEMPLATES = jinja2.Environment(
    loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
    trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined)


class ToolchainError(RuntimeError):
    """The compiler or emulator needed for a check is missing or failed."""


@dataclass(frozen=True)
class Case:
    """One (form, immediate) pair compiled into the harness."""
    insn: Instruction
    form: Form
    imm: int | None

    @property
    def form_id(self) -> str:
        return self.insn.form_id(self.form)

    @property
    def offsets(self) -> list[int]:
        sizes = [op.ctype.bits // 8 for op in self.form.registers]
        return [sum(sizes[:i]) for i in range(len(sizes))]

    @property
    def input_bytes(self) -> int:
        return sum(op.ctype.bits // 8 for op in self.form.registers)

    @property
    def result_bytes(self) -> int:
        return self.form.result.bits // 8

    @property
    def args(self) -> list[str]:
        regs = iter(f"a{i}" for i in range(len(self.form.registers)))
        return [str(self.imm) if op.ctype.is_imm else next(regs) for op in self.form.operands]


# ---------------------------------------------------------------- inputs
def _edge_lanes(ctype: CType) -> list[int]:
    """Lane values at the edges of the element type: zero, one, all ones, maxima, minima."""
    e = ctype.elem_bits
    return [0, 1, mask(e), mask(e - 1), 1 << (e - 1), (1 << (e - 1)) + 1, mask(e) - 1]


def _lanes_to_bytes(values: np.ndarray, elem_bits: int) -> np.ndarray:
    """(n, lanes) array of lane values → (n, lanes * elem_bits / 8) little-endian bytes."""
    dtype = {8: "<u1", 16: "<u2", 32: "<u4", 64: "<u8"}[elem_bits]
    raw = np.ascontiguousarray(values.astype(np.uint64).astype(dtype)).view(np.uint8)
    return raw.reshape(values.shape[0], values.shape[1] * elem_bits // 8)


def sample_inputs(form: Form, n: int, rng: np.random.Generator) -> list[np.ndarray]:
    """``n`` input tuples for ``form``, one (n, bytes) uint8 array per register operand.

    The first rows (at most half) combine uniform edge patterns (every lane the same edge value)
    across operands, then come rows whose lanes are each drawn from the edge values, then uniformly
    random bytes.
    """
    regs = form.registers
    out = []
    for k, op in enumerate(regs):
        lanes = op.ctype.bits // op.ctype.elem_bits
        edges = np.array(_edge_lanes(op.ctype), dtype=np.uint64)
        # uniform edge patterns, enumerated so that operands vary independently
        uniform = edges[(np.arange(n) // len(edges) ** k) % len(edges)][:, None].repeat(lanes, 1)
        mixed = edges[rng.integers(0, len(edges), (n, lanes))]
        rand = rng.integers(0, 256, (n, op.ctype.bits // 8), dtype=np.uint8)
        n_uniform = min(n // 2, len(edges) ** len(regs))   # at least half the rows tell lanes apart
        n_mixed = (n - n_uniform) // 2
        rows = np.concatenate([
            _lanes_to_bytes(uniform[:n_uniform], op.ctype.elem_bits),
            _lanes_to_bytes(mixed[:n_mixed], op.ctype.elem_bits),
            rand[: n - n_uniform - n_mixed]])
        out.append(rows)
    return out


# ---------------------------------------------------------------- machine
class Harness:
    """A compiled harness for a list of cases, run on the host or under the ISA's emulator."""

    def __init__(self, isa: ISA, cases: list[Case]):
        self.isa, self.cases = isa, cases
        amx = any(c.insn.feature == "amx-int8" for c in cases)
        source = _TEMPLATES.get_template("harness.c.j2").render(isa=isa, cases=cases, amx=amx)
        tc = isa.toolchain
        key = hashlib.sha256((source + tc.cc + " ".join(tc.cflags)).encode()).hexdigest()[:20]
        # run from the build directory: checked against the digest it was written with first
        self.binary = cached_build(build_folder() / f"harness-{isa.name}-{key}",
                                   lambda path: _compile(isa, source, path), "build directory")

    def process(self) -> Process:
        """A process of the harness to keep running, for ``run``."""
        return Process(self.isa, self.binary, "harness")

    def run(self, requests: list[tuple[int, np.ndarray]], process: Process | None = None) -> list[np.ndarray]:
        """``requests``: (case index, (n, input_bytes) uint8) → list of (n, result_bytes) outputs; on
        ``process`` (``process()``), else on a process of their own."""
        payload = b"".join(np.array([i, len(x)], "<u4").tobytes() + np.ascontiguousarray(x).tobytes()
                           for i, x in requests)
        sizes = [self.cases[i].result_bytes * len(x) for i, x in requests]
        stdout = process.ask(payload, sum(sizes)) if process else run_binary(self.isa, self.binary, payload, "harness")
        outs, pos = [], 0
        for (_, x), size in zip(requests, sizes):
            outs.append(np.frombuffer(stdout[pos:pos + size], np.uint8).reshape(len(x), -1))
            pos += size
        if pos != len(stdout):
            raise ToolchainError(f"harness wrote {len(stdout)} bytes, expected {pos}")
        return outs


def build_folder() -> Path:
    """The build directory (``QSYNTH_BUILD_DIR``, default ``~/.cache/qsynth/build``) of harnesses, kernels
    and their IR, private to this user (``derived_files.private_folder``), else ToolchainError."""
    try:
        return private_folder(Path(os.environ.get("QSYNTH_BUILD_DIR") or cache_root() / "build"))
    except UnsafeFolder as e:
        raise ToolchainError(f"build directory refused: {e}; set QSYNTH_BUILD_DIR to a folder only you can "
                             "write") from e


def run_binary(isa: ISA, binary: Path, payload: bytes, what: str, args: list[str] = ()) -> bytes:
    """Run a test binary for ``isa`` (natively or under its emulator) with ``args`` on ``payload``; its stdout."""
    cmd = [*isa.toolchain.runner, str(binary), *args]
    try:
        proc = subprocess.run(cmd, input=payload, capture_output=True, timeout=600)
    except FileNotFoundError as e:
        raise _not_installed(isa, cmd) from e
    if proc.returncode != 0:
        raise ToolchainError(f"{what} exited with {proc.returncode}: {proc.stderr.decode()[-500:]}")
    return proc.stdout


def _not_installed(isa: ISA, cmd: list[str]) -> ToolchainError:
    return ToolchainError(f"cannot run {cmd[0]}: install {' '.join(isa.toolchain.apt_packages)}")


class Process:
    """A test binary (natively or under its ISA's emulator) kept running to answer request after request on
    stdin and stdout, for a caller that knows each answer's size (the binary flushes its output after each
    request): a process under qemu costs about 40 ms and a small request far less, and the hypothesis-driven
    tests send thousands. Started on the first request, and again on the next one after a failure, so that a
    request never meets a process an earlier one broke."""

    def __init__(self, isa: ISA, binary: Path, what: str, args: list[str] = ()):
        self.isa, self.what = isa, what
        self.cmd = [*isa.toolchain.runner, str(binary), *args]
        self._proc: subprocess.Popen | None = None

    def ask(self, payload: bytes, size: int, timeout: float = 600.0) -> bytes:
        """The ``size`` bytes the binary answers to ``payload``, read while it is written (as
        ``subprocess.communicate`` does, so that neither side waits on a full pipe); killed after ``timeout``
        seconds."""
        proc = self._running()
        deadline, sent, answer, ended = time.monotonic() + timeout, 0, bytearray(), False
        with selectors.DefaultSelector() as ready:
            if size:
                ready.register(proc.stdout, selectors.EVENT_READ)
            if payload:
                ready.register(proc.stdin, selectors.EVENT_WRITE)
            while ready.get_map() and not ended:
                events = ready.select(deadline - time.monotonic())
                ended = not events                            # out of time
                for key, _ in events:
                    if key.fileobj is proc.stdout:
                        chunk = os.read(proc.stdout.fileno(), size - len(answer))
                        answer += chunk
                        ended = not chunk                     # it exited
                        if len(answer) == size:
                            ready.unregister(proc.stdout)
                        continue
                    try:
                        sent += os.write(proc.stdin.fileno(), payload[sent:sent + select.PIPE_BUF])
                    except BrokenPipeError:
                        sent = len(payload)                   # it exited: its answer ends short
                    if sent == len(payload):
                        ready.unregister(proc.stdin)
        if len(answer) != size:
            proc.kill()
            code, errors = self._end()
            raise ToolchainError(f"{self.what} answered {len(answer)} bytes of {size} (exit {code}): {errors[-500:]}")
        return bytes(answer)

    def _running(self) -> subprocess.Popen:
        if self._proc is None:
            try:
                self._proc = subprocess.Popen(self.cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                              stderr=subprocess.PIPE)
            except FileNotFoundError as e:
                raise _not_installed(self.isa, self.cmd) from e
        return self._proc

    def _end(self) -> tuple[int, str]:
        """Wait for the process to exit and close its pipes: its exit code and what it wrote to stderr."""
        proc, self._proc = self._proc, None
        try:
            proc.stdin.close()
        except BrokenPipeError:
            pass
        code = proc.wait()
        errors = proc.stderr.read().decode()
        proc.stdout.close()
        proc.stderr.close()
        return code, errors

    def close(self) -> None:
        """End the input; an exit other than 0, or output nobody asked for, is a ToolchainError."""
        if self._proc is None:
            return
        self._proc.stdin.close()
        extra = self._proc.stdout.read()
        code, errors = self._end()
        if code != 0 or extra:
            raise ToolchainError(f"{self.what} exited with {code} after {len(extra)} bytes unasked: {errors[-500:]}")

    def __enter__(self) -> Process:
        return self

    def __exit__(self, kind, *_) -> None:
        if kind is None:
            self.close()
        elif self._proc is not None:                  # a failure on the way out: it is the error to report
            self._proc.kill()
            self._end()


def _compile(isa: ISA, source: str, binary: Path) -> None:
    tc = isa.toolchain
    src = binary.with_name("harness.c")
    src.write_text(source)
    try:
        proc = subprocess.run([tc.cc, *tc.cflags, "-o", str(binary), str(src)], capture_output=True, text=True)
    except FileNotFoundError as e:
        raise ToolchainError(f"compiler {tc.cc} not found: install {' '.join(tc.apt_packages)}") from e
    if proc.returncode != 0:
        raise ToolchainError(f"{isa.name} harness failed to compile:\n{proc.stderr[-3000:]}")


# ---------------------------------------------------------------- comparison
def numpy_outputs(case: Case, inputs: list[np.ndarray]) -> np.ndarray:
    regs = [NUMPY.from_bytes(x, op.ctype.bits) for x, op in zip(inputs, case.form.registers)]
    result = evaluate(NUMPY, case.insn, case.form, regs, case.imm)
    return NUMPY.to_bytes(result, len(inputs[0]))


def z3_semantics(case: Case) -> tuple[list[z3.BitVecRef], z3.ExprRef]:
    """The case's Z3 semantics: its register operands as bit-vectors a0, a1, ..., and its result's term."""
    regs = [z3.BitVec(f"a{i}", op.ctype.bits) for i, op in enumerate(case.form.registers)]
    return regs, evaluate(Z3, case.insn, case.form, regs, case.imm)


def z3_mismatches(case: Case, inputs: list[np.ndarray], expected: np.ndarray, count: int,
                  semantics: tuple[list[z3.BitVecRef], z3.ExprRef] | None = None) -> int:
    """Evaluate the Z3 semantics (``z3_semantics``, or the one given, built once for many batches) on
    ``count`` inputs spread over the batch (edge, mixed and random rows); number of disagreements with numpy."""
    regs, term = semantics or z3_semantics(case)
    bad = 0
    for row in np.unique(np.linspace(0, len(expected) - 1, min(count, len(expected))).astype(int)):
        subst = [(r, z3.BitVecVal(int.from_bytes(x[row].tobytes(), "little"), r.size())) for r, x in zip(regs, inputs)]
        got = z3.simplify(z3.substitute(term, *subst)).as_long()
        bad += got != int.from_bytes(expected[row].tobytes(), "little")
    return bad


def check_isa(isa: ISA, samples: int, z3_samples: int = 16, seed: int = 0,
              only: set[str] | None = None) -> list[dict]:
    """Check every form (or the mnemonics in ``only``); one report row per form."""
    rng = np.random.default_rng(seed)
    rows, cases, plan = [], [], []
    for insn in isa.instructions:
        if only is not None and insn.mnemonic not in only:
            continue
        for form in insn.forms:
            row = {"instruction": insn.mnemonic, "form": form.arrangement, "intrinsic": form.intrinsic,
                   "feature": insn.feature, "samples": 0, "mismatches": 0, "z3_samples": 0,
                   "z3_mismatches": 0, "status": "passed", "reason": ""}
            rows.append(row)
            reason = host.missing(insn.feature, isa.toolchain.runner)
            if reason:
                row.update(status="skipped", reason=reason)
                continue
            imms = form.imm or (None,)
            per_imm = math.ceil(samples / len(imms))
            for imm in imms:
                plan.append((row, len(cases), sample_inputs(form, per_imm, rng)))
                cases.append(Case(insn, form, imm))
    if not cases:
        return rows
    harness = Harness(isa, cases)
    machine = harness.run([(i, np.concatenate(x, axis=1)) for _, i, x in plan])
    for (row, i, inputs), got in zip(plan, machine):
        want = numpy_outputs(cases[i], inputs)
        differs = np.any(got != want, axis=1)
        row["samples"] += len(got)
        row["mismatches"] += int(differs.sum())
        if differs.any() and "first_mismatch" not in row:
            j = int(np.argmax(differs))
            row["first_mismatch"] = {"imm": cases[i].imm, "inputs": [x[j].tobytes().hex() for x in inputs],
                                     "machine": got[j].tobytes().hex(), "numpy": want[j].tobytes().hex()}
        n_z3 = max(2, z3_samples // len(cases[i].form.imm or (None,)))   # an edge row and a random row
        row["z3_samples"] += min(n_z3, len(got))
        row["z3_mismatches"] += z3_mismatches(cases[i], inputs, want, n_z3)
    for row in rows:
        if row["status"] != "skipped" and (row["mismatches"] or row["z3_mismatches"]):
            row.update(status="failed", reason=f"{row['mismatches']} machine and {row['z3_mismatches']} z3 mismatches")
    return rows
