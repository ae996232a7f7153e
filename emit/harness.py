"""``qsynth emit`` and ``qsynth test-kernels`` (their options: ``qsynth/commands/kernels.py``): the C kernel
library, and the check that every emitted kernel computes its spec on the machine.

The check runs the emitted C, compiled with gcc and/or clang, through the documented calling
convention: inputs are packed into deliberately misaligned buffers with padded strides and garbage
between rows (emit/inputs.py), and the whole writable buffer after the call must equal the numpy
reference of the spec (``spec.reference``, not the program) written into the tile (bitserial: added to
the initial ``out``) with everything outside it unchanged. x86 kernels run natively (skipped when the CPU lacks a feature),
AMX kernels natively or, where the host lacks AMX (or ``QSYNTH_AMX_EMULATE=1``), the same source
built with the plain-C emulation of the tile instructions (``amx_runtime``); NEON kernels under
``qemu-aarch64 -cpu max``; one process per batch of inputs. Each report row says how it ran
(``execution``: native, emulated or qemu). A kernel's drivers (its call, and its gemv or K loop) are one
executable, which may hold other kernels' too (``KernelDriver.build_together``): one compiler run for many.
"""
from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from isa_specs import host
from isa_specs.check import Process, ToolchainError, run_binary
from isa_specs.lanes import mask
from emit import EmitError, amx_runtime
from emit.inputs import MAX_PAD, Batch, domains, make_batch, random_layout_params, read_slot, sample_patterns
from emit.library import drivers_source, executable_source
from emit.model import kernel_model
from emit.toolchain import build, compiler_command
from synth import cache, trust

# ---------------------------------------------------------------- machine
class KernelDriver:
    """One entry's emitted C, compiled with ``compiler`` into a stdin/stdout driver; ``emulated``:
    with the AMX emulation (None: where ``amx_runtime.emulated`` says; True for a kernel without AMX
    is an EmitError)."""

    def __init__(self, entry: dict, compiler: str = "gcc", emulated: bool | None = None):
        self.entry, self.compiler = entry, compiler
        self.model = kernel_model(entry)
        self.spec, self.layout, self.isa = self.model["spec"], self.model["layout"], self.model["isa"]
        features = self.model["features"]
        if emulated and not amx_runtime.EMULATED_FEATURES & set(features):
            raise EmitError(f"{entry['name']} uses no emulated feature ({', '.join(sorted(features))})")
        self.emulated = amx_runtime.emulated(features) if emulated is None else emulated
        self._binary: Path | None = None

    @property
    def execution(self) -> str:
        """How the kernel runs here: emulated (AMX in plain C), qemu or native."""
        return "emulated" if self.emulated else "qemu" if self.isa.toolchain.runner else "native"

    def missing(self) -> str | None:
        """Why this host cannot run the kernel (as built: an emulated feature needs nothing), or None."""
        for feature in self.model["features"]:
            if self.emulated and feature in amx_runtime.EMULATED_FEATURES:
                continue
            reason = host.missing(feature, self.isa.toolchain.runner)
            if reason:
                return reason
        return None

    @functools.cached_property
    def command(self) -> tuple[str, ...]:
        """The compiler command this kernel's drivers are built with (one per ISA, compiler, used features and
        emulation): drivers of the same command can share an executable (``build_together``)."""
        return (self.isa.name, *compiler_command(self.isa.name, self.compiler, self.model["features"], self.emulated))

    def build(self) -> Path:
        """The executable holding this kernel's drivers: the one ``build_together`` made, else one of its own
        (built once; raises EmitError / ToolchainError when it cannot be)."""
        if self._binary is None:
            self._binary = self._compile([self])
        return self._binary

    @classmethod
    def build_together(cls, drivers: list[KernelDriver]) -> None:
        """Build the drivers not yet built with one compiler run per ``command``: a compiler run costs mostly
        its parse of the intrinsics headers (about 0.5 s of 0.7), so a cold build cache pays it once, not once
        per kernel. A group that does not build is left to build kernel by kernel when run, so that a kernel
        whose C does not compile fails by its own name and the others still run."""
        groups: dict[tuple[str, ...], list[KernelDriver]] = {}
        for d in drivers:
            if d._binary is None:
                groups.setdefault(d.command, []).append(d)
        for group in groups.values():
            try:
                binary = group[0]._compile(group)
            except (EmitError, ToolchainError):
                continue
            for d in group:
                d._binary = binary

    def _compile(self, drivers: list[KernelDriver]) -> Path:
        source = executable_source([(d.model, drivers_source(d.model)) for d in drivers])
        return build(source, self.isa.name, self.compiler, self.model["features"], self.emulated)

    def execute(self, driver: str, payload: bytes) -> bytes:
        """The stdout of this kernel's test driver ``driver`` (``kernel``, ``gemv`` or ``kloop``) on ``payload``."""
        return run_binary(self.isa, self.build(), payload, f"{driver} driver",
                          [f"{self.model['function']}_test_{driver}"])

    def process(self) -> Process:
        """A process of the kernel's test driver to keep running, for ``run``."""
        return Process(self.isa, self.build(), "kernel driver", [f"{self.model['function']}_test_kernel"])

    def run(self, batch: Batch, process: Process | None = None) -> np.ndarray:
        """The writable buffer after each call, (n, size); on ``process`` (``process()``), else on a process
        of its own."""
        n = len(batch.expected)
        head = [n]
        for b, x in enumerate(batch.buffers):
            head += [batch.strides[b], x.shape[1], batch.misalign[b]]
        records = np.concatenate(batch.buffers, axis=1)
        payload = np.array(head, "<u4").tobytes() + np.ascontiguousarray(records).tobytes()
        size = batch.expected.shape[1]
        stdout = process.ask(payload, n * size) if process else self.execute("kernel", payload)
        if len(stdout) != n * size:
            raise ToolchainError(f"driver wrote {len(stdout)} bytes, expected {n * size}")
        return np.frombuffer(stdout, np.uint8).reshape(n, size)


def first_mismatch(driver: KernelDriver, batch: Batch, got: np.ndarray) -> dict | None:
    """The first call whose writable buffer differs from the expected one, as a report, else None."""
    differs = np.any(got != batch.expected, axis=1)
    if not differs.any():
        return None
    j = int(np.argmax(differs))
    lay = driver.layout

    def outputs(final):
        buffers = [final if b.writable else x for b, x in zip(lay.buffers, batch.buffers)]
        return {f"output{k}": read_slot(buffers, s, batch.strides, lay)[j].tobytes().hex()
                for k, s in enumerate(lay.outputs)}
    return {"cache_key": driver.entry["cache_key"], "name": driver.entry["name"], "compiler": driver.compiler,
            "mismatches": int(differs.sum()), "samples": len(got), "sample": j,
            "inputs": {name: x[j].tobytes().hex() for name, x in batch.registers.items()},
            "strides": batch.strides, "misalign": batch.misalign,
            "first_differing_byte": int(np.argmax(got[j] != batch.expected[j])),
            "got": outputs(got), "want": outputs(batch.expected)}


def check_entry(entry: dict, compiler: str = "gcc", samples: int = 256, seed: int = 0,
                batch_size: int = 4096, emulated: bool | None = None) -> dict:
    """``check_driver`` of the entry's ``KernelDriver`` (``emulated`` as there); an entry whose C cannot be
    emitted gets a row of status error."""
    try:
        driver = KernelDriver(entry, compiler, emulated)
    except (EmitError, ToolchainError) as e:
        return dict(_row(entry, compiler), status="error", reason=f"the kernel's C does not build: {e}")
    return check_driver(driver, samples, seed, batch_size)


def check_entries(entries: list[dict], compilers: list[str], samples: int = 256, seed: int = 0) -> Iterator[dict]:
    """``check_entry`` of every entry with every compiler, in that order, the kernels of one compiler command
    built together first (``KernelDriver.build_together``)."""
    drivers = {}
    for entry in entries:
        for compiler in compilers:
            try:
                drivers[entry["cache_key"], compiler] = KernelDriver(entry, compiler)
            except (EmitError, ToolchainError):
                continue                                   # check_entry reports it
    KernelDriver.build_together([d for d in drivers.values() if not d.missing()])
    for entry in entries:
        for compiler in compilers:
            driver = drivers.get((entry["cache_key"], compiler))
            yield check_driver(driver, samples, seed) if driver else check_entry(entry, compiler, samples, seed)


def _row(entry: dict, compiler: str) -> dict:
    return {"cache_key": entry.get("cache_key"), "name": entry.get("name"), "compiler": compiler,
            "execution": "", "samples": 0, "mismatches": 0, "status": "passed", "reason": ""}


def check_driver(driver: KernelDriver, samples: int = 256, seed: int = 0, batch_size: int = 4096) -> dict:
    """Run ``samples`` edge-case and random inputs through the compiled kernel; a report row with
    ``execution`` (native, emulated, qemu) and ``status`` passed / failed (mismatch, first one in
    ``first_mismatch``) / error (does not build) / skipped (host cannot run it)."""
    row = dict(_row(driver.entry, driver.compiler), execution=driver.execution)
    reason = driver.missing()
    if reason:
        return dict(row, status="skipped", reason=reason)
    try:
        driver.build()
    except (EmitError, ToolchainError) as e:
        return dict(row, status="error", reason=f"the kernel's C does not build: {e}")
    rng = np.random.default_rng(seed)
    patterns = sample_patterns(len(driver.spec.input_names), samples, rng)
    for start in range(0, samples, batch_size):
        pad, misalign = random_layout_params(driver.layout, rng)
        batch = make_batch(driver.spec, driver.layout, patterns[start:start + batch_size], rng, pad, misalign)
        try:
            got = driver.run(batch)
        except ToolchainError as e:
            return dict(row, status="error", reason=f"the kernel does not run: {e}")
        row["samples"] += len(got)
        bad = first_mismatch(driver, batch, got)
        if bad:
            row["mismatches"] += bad["mismatches"]
            row.setdefault("first_mismatch", bad)
    for loop, check in (("gemv", check_gemv), ("kloop", check_kloop)):
        if not driver.model[loop] or row["mismatches"]:
            continue
        try:
            bad = check(driver, samples, rng)
        except (EmitError, ToolchainError) as e:
            return dict(row, status="error", reason=f"the {loop} loop does not build or run: {e}")
        if bad:
            row["mismatches"] += bad["mismatches"]
            row.setdefault("first_mismatch", bad)
    if row["mismatches"]:
        row.update(status="failed", reason=f"{row['mismatches']} of {row['samples']} calls differ from the spec")
    return row


# ---------------------------------------------------------------- the K loop of acc kernels
def lanes_planes(spec, w: np.ndarray, kwords: int) -> np.ndarray:
    """A lanes kernel's weights (n, wbits, stride: plane j = kwords words of ``rows`` channels, 8 bytes
    each) as the rows of gemv_reference (n, wbits·rows, 8·kwords: channel i's K bytes in order)."""
    n = len(w)
    planes = w[:, :, :kwords * spec.rows * 8].reshape(n, spec.wbits, kwords, spec.rows, 8)
    return planes.transpose(0, 1, 3, 2, 4).reshape(n, spec.wbits * spec.rows, kwords * 8)


def gemv_reference(spec, w: np.ndarray, a: np.ndarray, out: np.ndarray, kbytes: int, bits: int | None = None) -> np.ndarray:
    """numpy: ``out`` (n, cols·rows: column by column) plus every row's whole dot product with every
    activation column over the first ``kbytes`` bytes of the planes ``w`` (n, wbits·rows, stride) and
    ``a`` (n, cols·abits, stride: column by column), mod 2**bits (default: the spec's out_bits)."""
    pc = lambda x: np.unpackbits(x, axis=-1).sum(-1, dtype=np.int64)
    w, a = w[..., :kbytes], a[..., :kbytes]
    dot = np.zeros(out.shape, np.int64)
    for n in range(spec.cols):
        lanes = slice(n * spec.rows, (n + 1) * spec.rows)
        for j in range(spec.wbits):
            for k in range(spec.abits):
                plane = a[:, n * spec.abits + k:n * spec.abits + k + 1]
                d = pc(w[:, j * spec.rows:(j + 1) * spec.rows] & plane)
                if spec.encoding == "hybrid":
                    d = 2 * d - pc(plane)
                dot[:, lanes] += d << (j + k)
    wrap = np.uint64(mask(bits or spec.out_bits))
    return ((out.astype(np.int64) + dot).view(np.uint64) & wrap).astype(out.dtype)


def check_gemv(driver: KernelDriver, samples: int, rng: np.random.Generator) -> dict | None:
    """``_gemv`` on random, all-zero and all-one planes over a few block counts (and, for 16-bit
    accumulators, enough blocks to wrap a lane; for a lanes tile's narrow lanes, more words than one
    chunk) = ``gemv_reference``; the first mismatch, else None."""
    spec, m = driver.spec, driver.model
    rb, dtype = m["gemv"]["block_bytes"], np.dtype(m["gemv"]["out_type"].removesuffix("_t"))
    lanes = m["gemv"]["lanes_layout"]            # a block is one word: rows words of weights, one of each plane
    wb, ab = (spec.rows * 8, 8) if lanes else (rb, rb)
    runs = [(kb, max(1, samples // 8)) for kb in (1, 2, 3, 7)]
    if m["gemv"]["chunk_words"]:        # a lanes tile's narrow lanes: past its first chunk of K
        runs.append((m["gemv"]["chunk_words"] + 3, 2))
    elif spec.out_bits <= 16:
        runs.append(((1 << spec.out_bits) // rb + 3, 2))
    batches = []
    for kblocks, n in runs:
        kbytes = kblocks * ab
        ws, as_ = kblocks * wb + int(rng.integers(0, MAX_PAD)), kbytes + int(rng.integers(0, MAX_PAD))
        w = rng.integers(0, 256, (n, m["gemv"]["weight_rows"], ws), dtype=np.uint8)
        a = rng.integers(0, 256, (n, spec.abits * spec.cols, as_), dtype=np.uint8)
        for record, fill in ((0, 255), (min(1, n - 1), 0)):
            w[record], a[record] = fill, 255
        out = rng.integers(0, 1 << 16, (n, spec.rows * spec.cols)).astype(dtype)
        misalign = int(rng.integers(0, MAX_PAD))
        payload = np.array([n, kblocks, ws, as_, misalign], "<u4").tobytes() + b"".join(
            w[r].tobytes() + a[r].tobytes() + out[r].tobytes() for r in range(n))
        want = (gemv_reference(spec, lanes_planes(spec, w, kblocks), a, out, kbytes, 32) if lanes
                else gemv_reference(spec, w, a, out, kbytes))
        batches.append((kblocks, payload, want))
    for (kblocks, _, want), got in zip(batches, _run_batches(driver, "gemv", batches)):
        differs = np.any(got != want, axis=1)
        if differs.any():
            r = int(np.argmax(differs))
            return {"cache_key": driver.entry["cache_key"], "name": driver.entry["name"], "function": "gemv",
                    "mismatches": int(differs.sum()), "kblocks": kblocks, "sample": r,
                    "got": got[r].tolist(), "want": want[r].tolist()}
    return None


def _run_batches(driver: KernelDriver, name: str, batches: list[tuple[int, bytes, np.ndarray]]) -> list[np.ndarray]:
    """The outputs of driver ``name`` on every (kblocks, payload, expected) batch, each shaped and typed as
    expected: one process for them all (a driver reads batches until its input ends; under qemu a process
    costs more than a batch)."""
    stdout = driver.execute(name, b"".join(payload for _, payload, _ in batches))
    size = sum(want.nbytes for _, _, want in batches)
    if len(stdout) != size:
        raise ToolchainError(f"{name} driver wrote {len(stdout)} bytes, expected {size}")
    outputs, start = [], 0
    for _, _, want in batches:
        outputs.append(np.frombuffer(stdout[start:start + want.nbytes], want.dtype).reshape(want.shape))
        start += want.nbytes
    return outputs


def check_kloop(driver: KernelDriver, samples: int, rng: np.random.Generator) -> dict | None:
    """An int8 kernel's ``_kloop`` on random and extreme operands over a few block counts and both A
    layouts a GEMM uses (rows of the whole K, and one block of ``mr`` rows after another, as TVM's
    packing writes it) = C + A·B in numpy (int32, wrapping); the first mismatch, else None."""
    spec = driver.spec
    sa, sb = spec.signed
    doms = domains(spec)                                  # the spec's element ranges of A and B
    first = [next(n for n in spec.input_names if n.startswith(x)) for x in "ab"]
    (lo_a, hi_a), (lo_b, hi_b) = [(doms[n].lo, doms[n].hi + 1) for n in first]
    e, q = spec.elem_bits // 8, spec.group              # bytes per element; elements per k group
    types = {(1, False): np.uint8, (1, True): np.int8, (2, True): np.int16}
    batches = []
    for kblocks, n, blocked in ((1, 4, False), (2, 4, True), (5, 2, False), (3, 2, True)):
        k = kblocks * spec.k                              # strides and sizes below in elements
        if blocked:
            a_stride = spec.k + int(rng.integers(0, MAX_PAD))
            a_block = spec.mr * a_stride + int(rng.integers(0, MAX_PAD))
        else:
            a_stride, a_block = k + int(rng.integers(0, MAX_PAD)), spec.k
        a_size = (kblocks - 1) * a_block + (spec.mr - 1) * a_stride + spec.k
        b_stride, c_stride = q * spec.nr + int(rng.integers(0, MAX_PAD)), spec.nr + int(rng.integers(0, 4))
        a = rng.integers(lo_a, hi_a, (n, a_size)).astype(types[e, sa])
        b = rng.integers(lo_b, hi_b, (n, k // q, b_stride)).astype(types[e, sb])
        a[0], b[0] = lo_a, lo_b                               # -128 x -128 (or 0 x 0) everywhere
        a[-1], b[-1] = hi_a - 1, hi_b - 1                     # the largest products everywhere
        c = rng.integers(-2**31, 2**31, (n, spec.mr, c_stride)).astype(np.int32)
        misalign = int(rng.integers(0, MAX_PAD))
        head = [n, kblocks, a_stride * e, a_block * e, a_size * e, b_stride * e, c_stride, misalign]
        payload = np.array(head, "<u4").tobytes() + b"".join(
            a[r].tobytes() + b[r].tobytes() + c[r].tobytes() for r in range(n))
        kb, i, t = np.meshgrid(np.arange(kblocks), np.arange(spec.mr), np.arange(spec.k), indexing="ij")
        a_matrix = a[:, kb * a_block + i * a_stride + t].transpose(0, 2, 1, 3).reshape(n, spec.mr, k)
        bt = b[:, :, :q * spec.nr].reshape(n, k // q, spec.nr, q).transpose(0, 2, 1, 3).reshape(n, spec.nr, k)
        dot = np.einsum("rik,rjk->rij", a_matrix.astype(np.int64), bt.astype(np.int64))
        want = c.copy()
        want[:, :, :spec.nr] = ((c[:, :, :spec.nr].astype(np.int64) + dot) & 0xFFFFFFFF).astype(np.uint32).view(np.int32)
        batches.append((kblocks, payload, want))
    for (kblocks, _, want), got in zip(batches, _run_batches(driver, "kloop", batches)):
        differs = np.any(got != want, axis=(1, 2))
        if differs.any():
            r = int(np.argmax(differs))
            return {"cache_key": driver.entry["cache_key"], "name": driver.entry["name"], "function": "kloop",
                    "mismatches": int(differs.sum()), "kblocks": kblocks, "sample": r,
                    "first_differing_element": np.argwhere(got[r] != want[r])[0].tolist()}
    return None


# ---------------------------------------------------------------- selection
def selected_entries(isa: str, configs: list[str] | None) -> tuple[list[dict], list[str]]:
    """Cache entries of ``isa`` (or all) whose name contains one of ``configs``, each re-proved
    here unless already stamped (``synth.trust``); and one line per entry refused (unreadable, or
    not proved here)."""
    chosen, refused = [], []
    for path in cache.entries(cache.ROOT):
        try:
            entry = cache.read(path)
        except cache.CacheError as e:
            refused.append(str(e))
            continue
        if isa != "all" and entry["program"]["isa"] != isa:
            continue
        if configs and not any(c in entry["name"] for c in configs):
            continue
        chosen.append(path)
    entries, unproved = trust.load_all(chosen)
    return entries, refused + unproved
