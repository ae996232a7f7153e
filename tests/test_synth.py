"""Synthesis engine: specs against independent numpy references, proofs that refuse wrong programs,
fresh synthesis of the A1W1 NEON kernel, the committed cache re-proved, tamper detection, CLI errors."""
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from isa_specs import get_isa
from isa_specs.lanes import NUMPY
from sketches import menus
from sketches.program import Instr, Op, Program
from synth import bitserial, cache, trust
from synth.kernel import synthesize, time_limit
from synth.proof import prove_equal
from synth.int8_spec import Int8Spec
from synth.spec import BitserialSpec, SpecError
from synth.stages import SynthesisFailed, synthesize_stage

pytestmark = pytest.mark.solver


def _bits(arrays, bits):
    return [NUMPY.from_bytes(a, b) for a, b in zip(arrays, bits)]


@pytest.mark.parametrize("abits,wbits,encoding,row_bits", [(1, 1, "unipolar", None), (2, 3, "unipolar", None),
                                                           (1, 1, "hybrid", None), (3, 2, "hybrid", None),
                                                           (2, 3, "unipolar", 64), (3, 2, "hybrid", 64)])
def test_bitserial_reference_matches_unpackbits(abits, wbits, encoding, row_bits):
    """Against dot products of unpacked bits, row by row; with rows packed two to a register, row
    2p+h is the h-th 8 bytes of register p and every activation plane is one 8-byte block."""
    spec = BitserialSpec.for_isa("neon", abits, wbits, encoding, row_bits=row_bits)
    q, kb = spec.rows_per_reg, spec.k_bits // 8
    rng = np.random.default_rng(abits * 10 + wbits)
    arrays = [rng.integers(0, 256, (64, 16), dtype=np.uint8) for _ in spec.input_names]
    acts = {f"a{k}": np.tile(rng.integers(0, 256, (64, kb), dtype=np.uint8), (1, q)) for k in range(abits)}
    arrays = [acts.get(n, x) for n, x in zip(spec.input_names, arrays)]
    got = NUMPY.to_bytes(spec.reference(NUMPY, _bits(arrays, spec.input_bits))[0], 64).view("<u2")
    x = dict(zip(spec.input_names, arrays))
    row = lambda name, h: np.unpackbits(x[name][:, h * kb:(h + 1) * kb], axis=1).astype(np.int64)
    for i in range(spec.rows):
        want = np.zeros(64, np.int64)
        for j in range(wbits):
            w = row(f"w{j}_{i // q}", i % q)
            w = w if encoding == "unipolar" else 2 * w - 1
            for k in range(abits):
                want += (w * row(f"a{k}", 0)).sum(axis=1) << (j + k)
        assert np.array_equal(got[:, i], want % 65536)


@pytest.mark.parametrize("isa,abits,wbits,encoding", [("neon", 1, 1, "unipolar"), ("neon", 3, 2, "hybrid"),
                                                     ("avx512", 2, 2, "unipolar"), ("avx512", 1, 3, "hybrid")])
def test_acc_reference_matches_unpackbits(isa, abits, wbits, encoding):
    """Every accumulator lane gains the popcounts of its bytes: per significance s the plane pairs with
    j + k = s, per pop{k} the activation plane alone; lanes wrap mod 2**out_bits."""
    spec = BitserialSpec.for_isa(isa, abits, wbits, encoding, layout="acc")
    rng = np.random.default_rng(abits * 10 + wbits)
    rb, lane_bytes = spec.reg_bits // 8, spec.out_bits // 8
    arrays = [rng.integers(0, 256, (32, rb), dtype=np.uint8) for _ in spec.input_names]
    for name, x in zip(spec.input_names, arrays):      # accumulators near the top: the add must wrap
        if name.startswith(("acc", "pop")):
            x[:, lane_bytes - 1::lane_bytes] = 255
    got = [NUMPY.to_bytes(r, 32) for r in spec.reference(NUMPY, _bits(arrays, spec.input_bits))]
    x = dict(zip(spec.input_names, arrays))
    dtype, wrap = f"<u{lane_bytes}", 1 << spec.out_bits
    lane_pop = lambda v: np.unpackbits(v, axis=1).reshape(32, -1, spec.out_bits).sum(-1)
    old = lambda n: np.ascontiguousarray(x[n]).view(dtype).astype(object)
    want = {}
    for s in range(abits + wbits - 1):
        for i in range(spec.rows):
            gain = sum(lane_pop(x[f"w{j}_{i}"] & x[f"a{s - j}"]) for j in range(wbits) if 0 <= s - j < abits)
            want[f"acc{s}_{i}"] = (old(f"acc{s}_{i}") + gain) % wrap
    for k in range(abits if encoding == "hybrid" else 0):
        want[f"pop{k}"] = (old(f"pop{k}") + lane_pop(x[f"a{k}"])) % wrap
    assert list(want) == spec.accumulator_names
    for g, name in zip(got, spec.accumulator_names):
        assert np.array_equal(np.ascontiguousarray(g).view(dtype).astype(object), want[name]), name


def test_acc_default_rows_keep_the_accumulators_in_registers():
    assert BitserialSpec.for_isa("neon", 1, 1, "unipolar", layout="acc").rows == 8
    assert BitserialSpec.for_isa("neon", 2, 2, "unipolar", layout="acc").rows == 4   # 8 x 3 > 16
    assert BitserialSpec.for_isa("neon", 3, 3, "hybrid", layout="acc").rows == 2     # 4 x 5 + 3 > 16
    assert BitserialSpec.for_isa("avx512", 2, 3, "unipolar", layout="acc").rows == 4
    assert BitserialSpec.for_isa("neon", 1, 1, "unipolar", rows=2, layout="acc").rows == 2
    key = BitserialSpec.for_isa("neon", 1, 1, "unipolar").key()
    assert "layout" not in key and BitserialSpec(**{k: v for k, v in key.items() if k != "kind"}).layout == "tile"


@pytest.mark.parametrize("isa,types,layout", [("neon", "u8u8", "rows"), ("neon", "u8u8", "k4"), ("neon", "s8s8", "k4"),
                                              ("neon", "u8s8", "k4"), ("avx512", "u8s8", "k4b"), ("amx", "u8s8", "tile")])
def test_int8_reference_matches_matmul(isa, types, layout):
    spec = Int8Spec.for_isa(isa, types, layout=layout)
    from synth.stages import kernel_inputs
    from isa_specs.ranges import sample
    names, bits, ranges, cidx = kernel_inputs(spec, {})
    arrays = sample(bits, ranges, cidx, np.random.default_rng(0), 16)
    A, B, C = spec.matrices(NUMPY, _bits(arrays, bits))
    val = lambda x, signed: (x.v.astype(np.int64) ^ (1 << 7)) - (1 << 7) if signed else x.v.astype(np.int64)
    sa, sb = spec.signed
    a = np.stack([[val(x, sa) for x in row] for row in A])          # mr, k, n
    b = np.stack([[val(x, sb) for x in col] for col in B])          # nr, k, n
    c = np.stack([[x.v.astype(np.int64) for x in row] for row in C])
    want = (c + np.einsum("ikn,jkn->ijn", a, b)) % 2**32
    outs = spec.reference(NUMPY, _bits(arrays, bits))
    lanes = [NUMPY.to_bytes(o, 16).view("<u4").T for o in outs]          # per output register: lanes, n
    if spec.layout == "tile":       # one register per 16x16 tile of C, tiles row-major, row-major inside
        got = np.stack([[lanes[i // 16 * (spec.nr // 16) + j // 16][i % 16 * 16 + j % 16] for j in range(spec.nr)]
                        for i in range(spec.mr)])
    else:
        got = np.concatenate(lanes).reshape(spec.mr, spec.nr, 16)
    assert np.array_equal(got, want)


@pytest.mark.parametrize("spec", [Int8Spec.for_isa("avx2", "w16", 4, 16, k=2), Int8Spec.for_isa("neon", "s8s8", layout="k4"),
                                  Int8Spec.for_isa("neon", "u8u8", layout="rows"), Int8Spec.for_isa("avx512", "u8s8", k=4)],
                         ids=lambda s: s.name)
def test_int8_reference_is_the_same_on_numpy_and_z3(spec):
    """A numpy batch takes one product of matrices (isa_specs.products), Z3 the element-wise
    terms the proofs use: on the same inputs, their edges included (every lane at the bound of its range,
    where products and sums wrap), they agree."""
    from synth.stages import kernel_inputs
    from isa_specs.lanes import Z3
    from isa_specs.ranges import sample
    import z3
    names, bits, ranges, cidx = kernel_inputs(spec, {})
    arrays = sample(bits, ranges, cidx, np.random.default_rng(1), 3)
    arrays = [np.concatenate([a, np.full_like(a[:1], 0xFF), np.full_like(a[:1], 0x80)]) for a in arrays]
    numpy_out = [NUMPY.to_bytes(o, len(arrays[0])) for o in spec.reference(NUMPY, _bits(arrays, bits))]
    for row in range(len(arrays[0])):
        ins = [Z3.const(int.from_bytes(a[row].tobytes(), "little"), b) for a, b in zip(arrays, bits)]
        z3_out = [z3.simplify(o).as_long() for o in spec.reference(Z3, ins)]
        assert z3_out == [int.from_bytes(o[row].tobytes(), "little") for o in numpy_out]


def test_int8_k_block_is_a_choice_of_the_k4_and_amx_tile_layouts():
    assert Int8Spec.for_isa("avx512", "u8s8").k == 16
    assert Int8Spec.for_isa("avx512", "u8s8", 14, 16, k=4).name == "int8_u8s8_k4b_14x16x4_avx512"
    with pytest.raises(SpecError, match="k must be a multiple of 4, got 6"):
        Int8Spec.for_isa("avx512", "u8s8", k=6)
    with pytest.raises(SpecError, match="--k for the amx tile must be a multiple of 64"):
        Int8Spec.for_isa("amx", "u8s8", k=4)
    assert Int8Spec.for_isa("amx", "u8s8", k=64).name == "int8_u8s8_tile_32x32x64_amx"


@pytest.mark.parametrize("reg_bits", [128, 64], ids=["Q", "D"])
def test_fresh_neon_a1w1_is_24_instructions_proved_and_minimal(reg_bits):
    """The paper's tiles: eight rows of 16-byte Q or 8-byte D registers (the D tile's row sums are
    widened into one Q register of eight 16-bit lanes by the last reduction level)."""
    entry = synthesize(BitserialSpec.for_isa("neon", 1, 1, "unipolar", reg_bits=reg_bits), timeout=120)
    assert entry["proof"]["proved"] and entry["length"] <= 24
    assert entry["proof"]["random_mismatches"] == 0
    compute = entry["stages"]["compute"]["minimality"]
    assert [e["status"] for e in compute] == ["unsat", "found"]      # no 1-instruction compute exists
    assert all(e["status"] == "unsat" for e in entry["stages"]["reduce"]["minimality"][:-1])


@pytest.mark.parametrize("encoding,length", [("unipolar", 12), ("hybrid", 18)])
def test_fresh_neon_packed_d_tile_halves_the_paper_kernel(encoding, length):
    """The paper's tile (eight rows of 8 bytes) with two rows per Q register: one and + cnt per
    two rows, a tree of two addp levels: 12 instructions where the D-register kernel needs 24."""
    spec = BitserialSpec.for_isa("neon", 1, 1, encoding, row_bits=64)
    entry = synthesize(spec, timeout=120)
    assert spec.name == f"bitserial_a1w1_{encoding}_8x64in128_neon"
    assert entry["proof"]["proved"] and entry["proof"]["random_mismatches"] == 0
    assert entry["length"] <= length


def test_fresh_neon_hybrid_multibit_tile_splits_the_correction():
    """Bipolar weights with two activation planes: popcount(a_k) per plane, weighted, then
    2R - 3P; one CEGIS query for the whole correction did not finish in 10 minutes."""
    entry = synthesize(BitserialSpec.for_isa("neon", 2, 2, "hybrid", row_bits=64), timeout=120)
    assert entry["proof"]["proved"] and entry["proof"]["random_mismatches"] == 0
    assert {"act_count", "act_weights", "correction"} <= set(entry["stages"])
    assert "dup.1d_low_u8" in [op for op, _ in entry["stages"]["act_count"]["program"]["body"]]  # one row's bits


def test_reduction_prover_refuses_a_wrong_program_and_z3_finds_the_counterexample():
    spec = BitserialSpec.for_isa("neon", 1, 1, "unipolar")
    isa = get_isa("neon")
    reduce = {s.problem.name: s for s in bitserial.stages(spec, isa)}["reduce"].problem
    # the right reduction except that rows 0 and 1 trade places: every lane sum is plausible, two are wrong
    body = [Instr(Op("addp.16b"), (1, 0)), Instr(Op("addp.16b"), (2, 3)), Instr(Op("addp.16b"), (4, 5)),
            Instr(Op("addp.16b"), (6, 7)), Instr(Op("addp.16b"), (8, 9)), Instr(Op("addp.16b"), (10, 11)),
            Instr(Op("addp.16b"), (12, 13)), Instr(Op("uaddlp.8h"), (14,))]
    wrong = Program("neon", tuple(reduce.input_names), tuple(reduce.input_bits), tuple(body), (15,))
    assert reduce.fast_prove(wrong) is None
    ob, cex = prove_equal(reduce, wrong, time.monotonic() + 60)
    assert ob.result == "refuted" and cex is not None


def test_fresh_avx2_nibble_table_kernel_is_proved():
    """AVX2 has no vector popcount: the per-byte count is assembled from separately synthesized nibble
    counts (vpshufb lookups) and proved whole by Z3."""
    entry = synthesize(BitserialSpec.for_isa("avx2", 1, 1, "unipolar"), timeout=120)
    assert entry["proof"]["proved"] and entry["proof"]["random_mismatches"] == 0
    ops = [line.split(" = ")[1].split("(")[0] for line in entry["program_text"][:-1]]
    assert {"vpshufb.ymm", "vpsadbw.ymm"} <= set(ops)
    compute = [o for o in entry["proof"]["obligations"] if o["name"].startswith("compute")]
    assert [(o["method"], o["result"]) for o in compute] == [("z3", "proved")]


def test_a_wrong_popcount_split_is_refused():
    """The split into parts is a sketch decision, checked by the stage proof: two low-nibble parts
    synthesize fine, but their sum is not the byte's popcount, so no stage program is accepted."""
    menu = dict(menus.bitserial("avx2", 256))
    menu["popcount_split"] = [menu["popcount_split"][0]] * 2
    stage = bitserial._popcount_stage("count", get_isa("avx2"), menu, 256, ["a"], lambda B, x: x[0])
    with pytest.raises(SynthesisFailed, match="no proved program from the Composite sketch"):
        synthesize_stage(stage, time.monotonic() + 120, np.random.default_rng(0))


def test_s8s7_precondition_is_what_makes_smull_smlal_sound():
    """MLAS's smull + smlal2 + sadalp dot (two products added in an int16 lane) is proved on the s8s7
    domain, B in [-127, 127], by the linear forms; with B's -128 allowed (s8s8) they cannot prove it,
    and it is wrong: two products of -128 x -128 make 32768, which wraps in the int16 lane."""
    from synth import int8
    body = [Instr(Op("dup.1d_low_s8"), (0,)), Instr(Op("dup.1d_low_s8"), (1,)), Instr(Op("smull.8h"), (3, 4)),
            Instr(Op("smlal2.8h"), (5, 0, 1)), Instr(Op("sadalp.4s"), (2, 6))]
    problems = {types: int8.stages(Int8Spec("neon", types, "acc", 4, 4, 16), get_isa("neon"))[0].problem
                for types in ("s8s7", "s8s8")}
    [program] = {Program("neon", tuple(p.input_names), tuple(p.input_bits), tuple(body), (7,))
                 for p in problems.values()}
    assert Int8Spec.for_isa("neon", "s8s7").lane_ranges()[4].lo == -127                  # b0
    assert problems["s8s7"].fast_prove(program).result == "proved"
    assert problems["s8s8"].fast_prove(program) is None
    a = b = np.full((1, 16), 0x80, np.uint8)                    # every lane -128
    x = _bits([a, b, np.zeros((1, 16), np.uint8)], [128] * 3)
    got = NUMPY.to_bytes(problems["s8s8"].run(NUMPY, program, x)[0], 1).view("<i4")
    want = NUMPY.to_bytes(problems["s8s8"].spec(NUMPY, x)[0], 1).view("<i4")
    assert want.tolist() == [[4 * 16384] * 4] and got.tolist() == [[-4 * 16384] * 4]  # int16 lanes: 32768 -> -32768


@pytest.mark.parametrize("path", cache.entries(), ids=lambda p: p.stem)
def test_committed_cache_entry_reproves(path):
    """Every committed entry re-proves here, through this run's trust store (conftest.py): an entry
    that another test loaded earlier in the run, and so re-proved, is not proved twice (the suite
    spent about 85 s of its 15 minutes proving the host's 160 entries a second time)."""
    assert trust.load(path)["content_hash"] == cache.read(path)["content_hash"]


def test_tampered_entry_is_detected_and_named(tmp_path):
    src = cache.entries()[0]
    dst = tmp_path / src.name
    shutil.copy(src, dst)
    text = dst.read_text()
    dst.write_text(text.replace('"length": ', '"length": 1', 1))
    with pytest.raises(cache.CacheError, match=src.stem):
        cache.read(dst)
    with pytest.raises(cache.CacheError, match=src.stem):
        trust.load(dst)                                          # a tampered entry is never used


def test_concurrent_writers_leave_valid_entries(tmp_path):
    entry = cache.read(cache.entries()[0])
    code = ("import json,sys; from pathlib import Path; from synth import cache; "
            f"e=json.load(open({str(cache.entries()[0])!r})); [cache.store(e, Path(sys.argv[1])) for _ in range(20)]")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path)]) for _ in range(4)]
    assert all(p.wait() == 0 for p in procs)
    [path] = cache.entries(tmp_path)
    assert cache.read(path)["program"] == entry["program"]
    assert not list(tmp_path.glob(".tmp-*"))


@pytest.mark.parametrize("argv,needle", [
    (["--abits", "0"], "--abits must be 1, 2 or 3, got 0"),
    (["--abits", "9"], "--abits must be 1, 2 or 3, got 9"),
    (["--isa", "amx"], "bitserial kernels exist for"),
    (["--layout", "rows"], "--layout must be one of tile, acc, lanes, got 'rows'"),
    (["--isa", "avx2", "--layout", "tile"], "avx2 bitserial kernels use --layout acc, not 'tile'"),
    (["--kernel", "int8", "--types", "u8u8", "--layout", "k4b"],
     "--layout for neon u8u8 int8 kernels must be one of rows, acc, k4, got 'k4b'"),
    (["--isa", "avx512", "--kernel", "int8", "--nr", "24"], "--nr for avx512 must be a multiple of 16 (whole registers)"),
    (["--row-bits", "48"], "--row-bits must be 64, 128 or 256 and below the 128 register bits, got 48"),
    (["--row-bits", "64", "--layout", "acc"], "--row-bits packs several rows into a register of the tile layout only"),
    (["--row-bits", "64", "--rows", "3"], "3 rows do not fill registers of 2 rows of 64 bits"),
])
def test_cli_bad_input_one_line_error_nothing_written(argv, needle, capsys):
    """Refused before any work, so run in this process (a process of its own: 0.7 s of CPU each); nothing
    written to the cache it would write to."""
    from qsynth.cli import main
    before = sorted(p.name for p in cache.entries())
    assert main(["synth", *_with_defaults(argv)]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1
    assert sorted(p.name for p in cache.entries()) == before


def _with_defaults(argv: list[str]) -> list[str]:
    return [*(["--isa", "neon"] if "--isa" not in argv else []),
            *(["--kernel", "bitserial"] if "--kernel" not in argv else []), *argv]


def test_cli_synthesis_out_of_time_is_one_line_exit_1_nothing_written(tmp_path):
    """The work failed (not the usage): exit 1. It synthesizes, so in a process of its own on a cache of its
    own ($QSYNTH_CACHE)."""
    before = sorted(p.name for p in cache.entries())
    proc = subprocess.run([sys.executable, "-m", "qsynth.cli", "synth",
                           *_with_defaults(["--timeout", "0.001", "--abits", "2", "--wbits", "3"])],
                          capture_output=True, text=True, env={**os.environ, "QSYNTH_CACHE": str(tmp_path)})
    assert proc.returncode == 1
    assert "synthesis failed within --timeout" in proc.stderr and proc.stderr.count("\n") == 1
    assert not list(tmp_path.glob("*.json")) and sorted(p.name for p in cache.entries()) == before


def _processes_with(marker: str) -> list[int]:
    """Live processes whose environment holds ``marker`` (workers outlive their parent's PID)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and marker.encode() in (proc / "environ").read_bytes():
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def test_a_killed_sweep_stops_its_workers(tmp_path):
    """SIGTERM to `qsynth sweep` (a job scheduler's kill) ends the synthesis workers with it."""
    marker = str(tmp_path / "sweep-cache")
    proc = subprocess.Popen([sys.executable, "-m", "qsynth.cli", "sweep", "--isa", "amx", "-j", "2", "--out",
                             str(tmp_path)], env={**os.environ, "QSYNTH_CACHE": marker},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while len(_processes_with(marker)) < 3 and time.monotonic() < deadline:  # parent + 2 workers (+ tracker)
            time.sleep(0.2)
        assert len(_processes_with(marker)) >= 3
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 128 + signal.SIGTERM
        deadline = time.monotonic() + 10
        while _processes_with(marker) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _processes_with(marker) == []
        assert not (tmp_path / "synthesis.md").exists()      # no summary of a run that did not finish
    finally:                                                 # a failed check must not leave a sweep running
        for pid in _processes_with(marker):
            os.kill(pid, signal.SIGKILL)


def test_a_time_limit_due_at_once_leaves_no_timer_running():
    """An alarm due as ``time_limit`` arms its timer (a 1 us limit here; a 1 ms one on a loaded host) raises
    as setitimer returns. Armed before the try block, the timer was then left re-firing every 0.25 s, and once
    SIGALRM's default action was back it killed the process (a cluster job, exit status -14)."""
    before = signal.getsignal(signal.SIGALRM)
    for _ in range(20):
        with pytest.raises(SynthesisFailed):
            with time_limit(1e-6):
                while True:
                    pass
        assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
        assert signal.getsignal(signal.SIGALRM) is before
