"""Every kernel in the cache (and the hand-written programs of helpers_kernels.py, one per emission
path), emitted as C, compiled (gcc and clang) and run on the machine (natively on x86, under qemu for
NEON) through its documented calling convention, against the numpy reference of its spec: edge cases
and random inputs, then hypothesis-driven batches. AMX kernels run on every host with the plain-C
emulation of the tile instructions, and natively as well where the host has AMX (test ids end in
-emulated / -native). A deliberately wrong program must be caught and reported with its cache key."""
from __future__ import annotations

import copy
import functools
import shutil
import subprocess

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from conftest import HOST_RUNS
from isa_specs import get_isa
from isa_specs.check import ToolchainError
from isa_specs.lanes import NUMPY
from sketches.program import Op, Program
from synth import cache
from synth.kernel import spec_from_key
from synth.int8_spec import Int8Spec
from synth.spec import BitserialSpec
from emit import EmitError, harness
from emit.convention import function_name, layout
from emit.harness import KernelDriver, check_driver, check_entry, first_mismatch
from emit.inputs import MAX_PAD, N_PATTERNS, aligned_misalignment, make_batch, random_layout_params, sample_patterns
from emit.library import emit_entry, emit_library
from emit.llvm_ir import emit_llvm_ir
from emit.steps import constant_bytes
from emit.toolchain import compiler_command

from helpers_kernels import HANDWRITTEN

EDGE_SAMPLES = 200          # per kernel and compiler in the default suite; `qsynth test-kernels` scales up


def _entries() -> tuple[list[dict], list[str]]:
    """The committed cache's entries, and the reason (naming the file) of each one that cannot be read."""
    entries, unreadable = [], []
    for path in cache.entries():
        try:
            entries.append(cache.read(path))
        except cache.CacheError as e:
            unreadable.append(str(e))
    return entries, unreadable


ENTRIES, UNREADABLE = _entries()
KERNELS = ENTRIES + HANDWRITTEN


def _executions(entry: dict) -> list[bool | None]:
    """``emulated`` values an entry is tested with: AMX emulated everywhere and natively where the host
    has AMX; other kernels as the host runs them (None)."""
    if entry["program"]["isa"] != "amx":
        return [None]
    return [True, False] if HOST_RUNS.amx is None else [True]


RUNS = [(e, emulated) for e in KERNELS for emulated in _executions(e)]
RUN_IDS = [f"{e['name']}-{e['key']['cost']}" + {None: "", True: "-emulated", False: "-native"}[emulated]
           for e, emulated in RUNS]
ONE_PER_KIND = list({(e["program"]["isa"], e["spec"]["kind"]): e for e in reversed(KERNELS)}.values())
KIND_IDS = [f"{e['program']['isa']}-{e['spec']['kind']}" for e in ONE_PER_KIND]


@functools.cache
def _driver(cache_key: str, compiler: str, emulated: bool | None = None) -> KernelDriver:
    entry = next(e for e in KERNELS if e["cache_key"] == cache_key)
    return KernelDriver(entry, compiler, emulated)


@functools.cache
def _build_group(compiler: str, command: tuple[str, ...]) -> None:
    """Build the drivers of the runs of one compiler command this host runs together
    (``KernelDriver.build_together``): an empty build cache costs one compiler run per ISA and flags, not one
    per kernel."""
    drivers = [_driver(e["cache_key"], compiler, emulated) for e, emulated in RUNS]
    KernelDriver.build_together([d for d in drivers if d.command == command and not d.missing()])


def _runnable(entry: dict, compiler: str, emulated: bool | None = None) -> KernelDriver:
    """The entry's driver, built, or a skip naming what this host lacks (CPU feature, qemu, compiler)."""
    driver = _driver(entry["cache_key"], compiler, emulated)
    reason = driver.missing()
    if reason:
        pytest.skip(reason)
    cc = compiler_command(driver.isa.name, compiler)[0]
    if not shutil.which(cc):
        pytest.skip(f"{cc} not installed")
    _build_group(compiler, driver.command)
    return driver


# ---------------------------------------------------------------- every kernel
def test_every_cache_entry_is_readable():
    """An entry the suite cannot read would have no kernel test: it fails here, by name."""
    assert not UNREADABLE, "\n".join(UNREADABLE)


@pytest.mark.parametrize("compiler", ["gcc", "clang"])
@pytest.mark.parametrize("entry,emulated", RUNS, ids=RUN_IDS)
def test_kernel_matches_spec_on_edge_cases_and_random_inputs(entry, emulated, compiler):
    driver = _runnable(entry, compiler, emulated)
    row = check_driver(driver, samples=EDGE_SAMPLES, seed=0)
    assert row["status"] == "passed", row
    assert row["execution"] == driver.execution == ("emulated" if emulated else "qemu" if driver.isa.toolchain.runner
                                                    else "native")


@pytest.fixture
def gcc_driver(entry, emulated):
    """The entry's gcc driver and one process of it that the test's examples ask in turn (a test's fixture
    lives through all its hypothesis examples): under qemu a process costs more than an example."""
    driver = _runnable(entry, "gcc", emulated)
    with driver.process() as process:
        yield driver, process


@pytest.mark.parametrize("entry,emulated", RUNS, ids=RUN_IDS)
@settings(max_examples=8, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_kernel_matches_spec_property(gcc_driver, entry, emulated, data):
    """Hypothesis chooses, per call and input register, an edge pattern (every lane 0, 1, all ones,
    signed max/min…), per-lane edge mixtures or random lanes of the spec's domain, plus stride padding
    and misalignment. gcc only: clang builds get the edge-case test above."""
    driver, process = gcc_driver
    lay, n_slots = driver.layout, len(driver.spec.input_names)
    n = data.draw(st.integers(1, 12), label="calls")
    patterns = np.array(data.draw(st.lists(st.lists(st.integers(0, N_PATTERNS - 1), min_size=n_slots,
                                                    max_size=n_slots), min_size=n, max_size=n), label="patterns"))
    pad = [data.draw(st.integers(0, MAX_PAD - 1), label=f"pad {b.name}") for b in lay.buffers]
    misalign = [data.draw(st.integers(0, MAX_PAD - 1), label=f"misalign {b.name}") for b in lay.buffers]
    misalign = [aligned_misalignment(b.pointee, m) for m, b in zip(misalign, lay.buffers)]
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 32 - 1), label="seed"))
    batch = make_batch(driver.spec, lay, patterns, rng, pad, misalign)
    assert first_mismatch(driver, batch, driver.run(batch, process)) is None


def test_kernels_built_together_share_one_executable_and_fail_alone(monkeypatch):
    """Drivers of one compiler command share an executable; when one kernel's C does not compile, each
    kernel builds alone, so that one fails by its own name and the others still run (AMX: emulated, so on
    every host)."""
    amx = [e for e in ENTRIES if e["program"]["isa"] == "amx"][:3]
    together = [KernelDriver(e, "gcc", True) for e in amx]
    KernelDriver.build_together(together)
    assert len({d.build() for d in together}) == 1
    broken = function_name(amx[0])
    right = harness.drivers_source
    monkeypatch.setattr(harness, "drivers_source",
                        lambda m: right(m) + ("#error this kernel does not build\n" if m["function"] == broken else ""))
    alone = [KernelDriver(e, "gcc", True) for e in amx]
    KernelDriver.build_together(alone)
    rows = [check_driver(d, samples=16) for d in alone]
    assert rows[0]["status"] == "error" and "this kernel does not build" in rows[0]["reason"], rows[0]
    assert [r["status"] for r in rows[1:]] == ["passed", "passed"], rows
    assert len({together[0].build(), *(d.build() for d in alone[1:])}) == 3


# ---------------------------------------------------------------- wrong programs are caught
def _program_outputs(entry: dict, program: Program, registers: dict, n: int) -> list[np.ndarray]:
    spec = spec_from_key(entry["spec"])
    ins = [NUMPY.from_bytes(registers[name], bits) for name, bits in zip(spec.input_names, spec.input_bits)]
    for name, bits in zip(program.inputs[len(ins):], program.input_bits[len(ins):]):
        value = np.frombuffer(constant_bytes(entry["constants"][name], bits), np.uint8)
        ins.append(NUMPY.from_bytes(np.tile(value, (n, 1)), bits))
    return [NUMPY.to_bytes(x, n) for x in program.run(NUMPY, get_isa(program.isa), ins)]


def _mutations(program: Program):
    """Programs one edit away: an opcode swapped for another form of the same register widths
    (``and`` → ``eor``, ``sdot`` → ``udot``, ``tdpbusd`` → ``tdpbssd``…), then two operands swapped."""
    isa = get_isa(program.isa)

    def widths(form):
        return [op.ctype.bits for op in form.registers], form.result.bits

    def edited(k, op, args):
        body = list(program.body)
        body[k] = type(body[k])(op, args)
        return Program(program.isa, program.inputs, program.input_bits, tuple(body), program.outputs)

    for k in reversed(range(len(program.body))):
        ins = program.body[k]
        _, form = isa.forms[ins.op.form_id]
        for fid, (_, other) in isa.forms.items():
            if fid != ins.op.form_id and widths(other) == widths(form) and \
                    (ins.op.imm in other.imm if other.imm else ins.op.imm is None):
                yield edited(k, Op(fid, ins.op.imm), ins.args)
    for k in reversed(range(len(program.body))):
        args = program.body[k].args
        for i in range(len(args)):
            for j in range(i + 1, len(args)):
                if args[i] != args[j]:
                    swapped = list(args)
                    swapped[i], swapped[j] = args[j], args[i]
                    yield edited(k, program.body[k].op, tuple(swapped))


def mutate(entry: dict) -> dict:
    """The entry with a one-edit program (see ``_mutations``) that still emits and whose numpy
    evaluation differs from the original's on spec-domain inputs: a deliberately wrong kernel."""
    program = Program.from_json(entry["program"])
    spec = spec_from_key(entry["spec"])
    rng = np.random.default_rng(0)
    batch = make_batch(spec, layout(spec), sample_patterns(len(spec.input_names), 64, rng), rng,
                       *random_layout_params(layout(spec), rng))
    original = _program_outputs(entry, program, batch.registers, 64)
    for mutated in _mutations(program):
        candidate = dict(copy.deepcopy(entry), program=mutated.to_json())
        try:
            emit_entry(candidate)
        except EmitError:
            continue
        got = _program_outputs(entry, mutated, batch.registers, 64)
        if any(np.any(g != o) for g, o in zip(got, original)):
            return candidate
    raise AssertionError(f"no one-edit mutation changes {entry['name']}")


@pytest.mark.parametrize("entry", ONE_PER_KIND, ids=KIND_IDS)
def test_wrong_program_is_caught(entry):
    _runnable(entry, "gcc")
    row = check_entry(mutate(entry), "gcc", samples=64)
    assert row["status"] == "failed", row
    assert row["first_mismatch"]["cache_key"] == entry["cache_key"]


def test_wrong_gemv_loop_is_caught(monkeypatch):
    """A K loop whose epilogue is off by one (the proved body left intact) fails test-kernels."""
    entry = next((e for e in KERNELS if "_acc_" in e["name"] and "hybrid" in e["name"]), None)
    if entry is None:
        pytest.skip("no hybrid acc kernel in the cache")
    _runnable(entry, "gcc")
    right = harness.drivers_source
    monkeypatch.setattr(harness, "drivers_source", lambda m: right(m).replace("(2 * dot - ", "(2 * dot + 1 - "))
    row = check_entry(entry, "gcc", samples=16)
    assert row["status"] == "failed" and row["first_mismatch"]["function"] == "gemv", row
    assert row["first_mismatch"]["cache_key"] == entry["cache_key"]


@pytest.mark.parametrize("suffix", ["_6x64x16_avx512", "_s8s8_k4_4x4x16_neon", "_amx"])
def test_wrong_kloop_is_caught(monkeypatch, suffix):
    """A K loop that steps B by one row too few per block (the proved body intact) fails: the VNNI
    and NEON loops around the kernel, the AMX loop with its tiles."""
    entry = next((e for e in KERNELS if e["name"].endswith(suffix)), None)
    if entry is None:
        pytest.skip(f"no *{suffix} kernel in the cache")
    _runnable(entry, "gcc")
    right = harness.drivers_source
    rows = spec_from_key(entry["spec"]).k // 4
    monkeypatch.setattr(harness, "drivers_source",
                        lambda m: right(m).replace(f"kb) * {rows} * b_stride", f"kb) * {rows - 1} * b_stride"))
    row = check_entry(entry, "gcc", samples=16)
    assert row["status"] == "failed" and row["first_mismatch"]["function"] == "kloop", row
    assert row["first_mismatch"]["cache_key"] == entry["cache_key"]


def _stored(entry: dict, root) -> str:
    """Store ``entry`` (program possibly changed) as a valid cache entry under ``root``; its key."""
    plain = {k: v for k, v in entry.items() if k not in ("cache_key", "content_hash", "format")}
    return cache.read(cache.store(plain, root))["cache_key"]


def _run_cli(argv: list[str]) -> int:
    from qsynth.cli import main
    return main(argv)


def test_cli_refuses_entries_that_do_not_reprove(tmp_path, monkeypatch, capsys):
    """A wrong or ill-typed program stored with a valid content hash is refused by name before
    anything is compiled: ``emit`` writes nothing, ``test-kernels`` builds nothing and fails."""
    entry = next((e for e in ONE_PER_KIND if not _driver(e["cache_key"], "gcc").missing()), None)
    if entry is None:
        pytest.skip("no cached kernel runs on this host")
    wrong = _stored(mutate(entry), tmp_path)
    broken = copy.deepcopy(entry)
    broken["key"] = dict(broken["key"], cost="latency")          # another cache key, same spec
    broken["program"]["body"][0][0] = "no_such_instruction.16b"
    unbuildable = _stored(broken, tmp_path)
    monkeypatch.setattr(cache, "ROOT", tmp_path)
    assert _run_cli(["emit", "-o", str(tmp_path / "out")]) == 1
    assert not (tmp_path / "out").exists()
    err = capsys.readouterr().err
    assert f"refusing {wrong}.json {entry['name']}: not proved here: kernel program = inlined stage programs" in err
    assert f"refusing {unbuildable}.json {entry['name']}: not proved here:" in err
    assert _run_cli(["test-kernels", "--samples", "40", "--compilers", "gcc"]) == 1
    captured = capsys.readouterr()
    assert "0 kernel builds" in captured.out and "2 entries refused" in captured.out
    assert f"refusing {wrong}.json" in captured.err and f"refusing {unbuildable}.json" in captured.err


@pytest.mark.parametrize("entry", ONE_PER_KIND, ids=KIND_IDS)
def test_emit_rejects_ill_typed_programs(entry):
    """The instruction computing the output replaced by an unknown form, or by a form whose operand
    widths differ: emission refuses, naming the problem, instead of writing C that may compile."""
    program = Program.from_json(entry["program"])
    k = program.outputs[0] - len(program.inputs)
    unknown = copy.deepcopy(entry)
    unknown["program"]["body"][k][0] = "no_such_instruction.16b"
    with pytest.raises(EmitError, match="not a .* instruction form"):
        emit_entry(unknown)
    isa = get_isa(program.isa)
    _, form = isa.forms[program.body[k].op.form_id]
    widths = [r.ctype.bits for r in form.registers]
    other = next(str(Op(fid, f.imm[0] if f.imm else None)) for fid, (_, f) in isa.forms.items()
                 if len(f.registers) == len(widths) and [r.ctype.bits for r in f.registers] != widths)
    narrowed = copy.deepcopy(entry)
    narrowed["program"]["body"][k][0] = other
    with pytest.raises(EmitError, match="width mismatch"):
        emit_entry(narrowed)


# ---------------------------------------------------------------- library, header, IR
def test_emit_library_header_compiles_for_every_isa(tmp_path):
    manifest = emit_library(KERNELS, tmp_path)
    assert len(manifest["kernels"]) == len({k["function"] for k in manifest["kernels"]}) == len(KERNELS)
    for k in manifest["kernels"]:
        assert (tmp_path / k["file"]).exists() and k["calling_convention"]
    (tmp_path / "use.c").write_text('#include "qsynth_kernels.h"\nint main(void) { return 0; }\n')
    isas = {k["isa"] for k in manifest["kernels"]}
    for isa_name in ("neon", "avx2", "avx512", "amx"):
        if isa_name not in isas:
            continue
        cmd = compiler_command(isa_name, "gcc")
        if not shutil.which(cmd[0]):
            continue
        proc = subprocess.run([*cmd, "-Wall", "-Werror", "-fsyntax-only", "-I", str(tmp_path), str(tmp_path / "use.c")],
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("entry", ONE_PER_KIND, ids=KIND_IDS)
def test_llvm_ir_keeps_the_extern_wrapper(entry):
    if not shutil.which("clang"):
        pytest.skip("clang not installed")
    try:
        ir = emit_llvm_ir(entry)
    except ToolchainError as e:
        pytest.fail(str(e))
    fn = f"{function_name(entry)}_extern"
    assert f"@{fn}(" in ir and "define" in ir
    triple = "aarch64" if entry["program"]["isa"] == "neon" else "x86_64"
    assert f'target triple = "{triple}' in ir


def test_bitserial_layout_is_the_documented_convention():
    """Plane j of weight row i at w + (j*rows + i)*w_stride, activation plane k at a + k*a_stride,
    rows lanes of out_bits added to out (signed lanes for hybrid)."""
    spec = BitserialSpec("neon", 2, 3, "hybrid", 8, 128, 16)
    lay = layout(spec)
    assert [b.name for b in lay.buffers] == ["w", "a", "out"] and lay.buffers[2].pointee == "int16_t"
    [piece] = lay.inputs["w2_5"].pieces
    assert (lay.buffers[piece.buffer].name, piece.row, piece.offset, piece.nbytes) == ("w", 2 * 8 + 5, 0, 16)
    [piece] = lay.inputs["a1"].pieces
    assert (lay.buffers[piece.buffer].name, piece.row, piece.nbytes) == ("a", 1, 16)
    assert lay.accumulate == 16 and lay.outputs[0].nbytes == 16


def test_packed_rows_read_the_d_tile_image():
    """Two 8-byte rows per Q register with w_stride 16 read exactly the bytes of the D tile (one row
    per 8 bytes, w_stride 8): register p of plane j = rows 2p, 2p+1; the activation's 8 bytes twice."""
    packed = BitserialSpec("neon", 2, 3, "unipolar", 8, 128, 16, row_bits=64)
    rows = BitserialSpec("neon", 2, 3, "unipolar", 8, 64, 16)
    image = lambda lay, name, stride: [(lay.buffers[p.buffer].name, p.row * stride + p.offset, p.nbytes)
                                       for p in lay.inputs[name].pieces]
    lp, lr = layout(packed), layout(rows)
    for j in range(3):
        for p in range(4):
            [(buf, start, n)] = image(lp, f"w{j}_{p}", 16)
            assert [(buf, start, 8), (buf, start + 8, 8)] == image(lr, f"w{j}_{2 * p}", 8) + image(lr, f"w{j}_{2 * p + 1}", 8)
    assert _where(lp, lp.inputs["a1"]) == ([("a", 1, 0, 8)], 2)


def _where(lay, slot):
    return [(lay.buffers[p.buffer].name, p.row, p.offset, p.nbytes) for p in slot.pieces], slot.repeat


def test_int8_layouts_are_the_documented_convention():
    """rows: a{i}/b{j} = row i of A / row j of B (int16 elements for s16); k4: b{g} = nr*4 packed bytes
    at b + g*b_stride; k4b: a{i}_{g} = A[i][4g..4g+3] broadcast, b{g}_{c} / c{i}_{c} = column block c
    of B's packed row g / C's row i; tile: 16 rows x 64 bytes per tile; c rows
    at c + i*c_stride int32 (stride unit 4 bytes), stored back as the outputs."""
    rows = layout(Int8Spec("neon", "s16", "rows", 4, 4, 8))
    assert _where(rows, rows.inputs["a2"]) == ([("a", 2, 0, 16)], 1)
    assert _where(rows, rows.inputs["b3"]) == ([("b", 3, 0, 16)], 1)
    k4 = layout(Int8Spec("neon", "s8s8", "k4", 4, 4, 16))
    assert _where(k4, k4.inputs["b3"]) == ([("b", 3, 0, 16)], 1)
    assert [b.unit for b in k4.buffers] == [1, 1, 4] and k4.outputs == tuple(k4.inputs[f"c{i}"] for i in range(4))
    k4b = layout(Int8Spec("avx512", "u8s8", "k4b", 4, 32, 8))     # two column blocks of 16 int32
    assert _where(k4b, k4b.inputs["a1_1"]) == ([("a", 1, 4, 4)], 16)
    assert _where(k4b, k4b.inputs["b1_1"]) == ([("b", 1, 64, 64)], 1)           # k group 1, columns 16..31
    assert _where(k4b, k4b.inputs["c2_1"]) == ([("c", 2, 64, 64)], 1)           # row 2, columns 16..31
    assert k4b.outputs == tuple(k4b.inputs[f"c{i}_{c}"] for i in range(4) for c in range(2))
    tile = layout(Int8Spec("amx", "u8s8", "tile", 32, 32, 128))
    assert _where(tile, tile.inputs["a1_1"]) == ([("a", r, 64, 64) for r in range(16, 32)], 1)
    assert _where(tile, tile.inputs["b1_0"]) == ([("b", r, 64, 64) for r in range(16)], 1)
    assert _where(tile, tile.outputs[1]) == ([("c", r, 64, 64) for r in range(16)], 1)     # c0_1
