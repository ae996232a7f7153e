"""Hostile files in the kernel cache and runaway synthesis (issue 31, item 6): odd files (a FIFO, a
device node, links, a directory) are skipped with one line naming each, never opened; a writer's
temporary file never fails a reader, and a stale one is removed; a refused entry is re-proved and
reported once per process; --timeout bounds synthesis, and a spec too large to prove is refused up
front. Every CLI run is a subprocess with a timeout, so a hang fails its test instead of the suite."""
import copy
import json
import logging
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from synth import cache, trust

SMALL = "int8_u8s8_k4_4x4x16_neon"          # the quickest entry to re-prove and to synthesize
AVX2 = "int8_u8s8_k4b_12x8x4_avx2"
LIMIT = 120                                  # seconds: far above any run here; only a hang reaches it


def _path(name: str) -> Path:
    return next(p for p in cache.entries() if cache.read(p)["name"] == name)


def _run(argv, root, trust_store, prelude=""):
    """``qsynth ARGV`` (or ``python -c PRELUDE`` given ARGV) on the cache ``root``: (process, seconds)."""
    env = dict(os.environ, QSYNTH_CACHE=str(root), QSYNTH_TRUST=str(trust_store))
    command = ["-c", prelude, *argv] if prelude else ["-m", "qsynth.cli", *argv]
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, *command], capture_output=True, text=True, env=env, timeout=LIMIT,
                          cwd=Path(__file__).resolve().parent.parent)
    return proc, time.monotonic() - t0


@pytest.fixture
def odd_cache(tmp_path):
    """A cache of one good entry beside a FIFO, a link to /dev/zero, a device node (as root), a link to
    a valid entry outside the cache and a directory, all named like entries."""
    root = tmp_path / "cache"
    root.mkdir()
    good = shutil.copy(_path(SMALL), root)
    outside = shutil.copy(_path(AVX2), tmp_path)
    os.mkfifo(root / "fifo.json")
    (root / "zero.json").symlink_to("/dev/zero")
    (root / Path(outside).name).symlink_to(outside)
    (root / "dir.json").mkdir()
    odd = ["fifo.json", "zero.json", Path(outside).name, "dir.json"]
    if os.geteuid() == 0:
        os.mknod(root / "null.json", 0o600 | stat.S_IFCHR, os.makedev(1, 3))     # /dev/null's device
        odd.append("null.json")
    return root, Path(good).name, odd


def _named_once(stderr: str, names) -> None:
    lines = stderr.splitlines()
    for name in names:
        assert len([line for line in lines if name in line and "skipping" in line]) == 1, (name, stderr)


def test_cache_ls_skips_odd_files_with_one_line_each(odd_cache, tmp_path):
    root, good, odd = odd_cache
    proc, _ = _run(["cache", "ls", "--json"], root, tmp_path / "trust.json")
    assert proc.returncode == 0, proc.stderr
    assert [r["cache_key"] for r in json.loads(proc.stdout)] == [Path(good).stem]
    _named_once(proc.stderr, odd)
    assert "a FIFO" in proc.stderr and "/dev/zero" in proc.stderr and len(proc.stderr.splitlines()) == len(odd)


def test_kernel_lookups_skip_odd_files_once_per_process(odd_cache, tmp_path):
    """What `qsynth inspect` and `compile` read: the int8 tiles of each ISA, the cache scanned per ISA."""
    root, _, odd = odd_cache
    prelude = ("import sys; from pathlib import Path; from tvm_integration import torch_kept_out\n"
               "torch_kept_out.keep_torch_out_of_tvm(); from tvm_integration.kernels import int8\n"
               "for isa in ('neon', 'avx2', 'avx512'): print(isa, len(int8.proved_entries(isa, Path(sys.argv[1]))))")
    proc, _ = _run([str(root)], root, tmp_path / "trust.json", prelude)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["neon", "1", "avx2", "0", "avx512", "0"]
    _named_once(proc.stderr, odd)


def test_reading_an_odd_file_by_name_is_refused_not_opened(odd_cache, tmp_path):
    """A lookup by key opens the file directly (`qsynth synth` on a cache hit): a FIFO or a device at
    that name is a CacheError naming it, not a hang or an endless read."""
    root, _, odd = odd_cache
    prelude = ("import sys; from pathlib import Path; from synth import cache\n"
               "for name in sys.argv[2:]:\n"
               "    try: cache.read(Path(sys.argv[1]) / name)\n"
               "    except cache.CacheError as e: print(e)")
    proc, _ = _run([str(root), *odd], root, tmp_path / "trust.json", prelude)
    assert proc.returncode == 0, proc.stderr
    assert [line.split(":")[0] for line in proc.stdout.splitlines()] == odd
    assert all("not a regular file" in line for line in proc.stdout.splitlines())


def test_an_oversized_entry_is_skipped(tmp_path, caplog):
    root = tmp_path / "cache"
    root.mkdir()
    big = root / "big.json"
    with big.open("wb") as f:
        f.truncate(1 << 30)                  # sparse: 1 GiB to read, none of it on disk
    with caplog.at_level(logging.WARNING, "qsynth.cache"):
        assert cache.entries(root) == []
    assert [r.getMessage() for r in caplog.records] == [
        f"kernel cache: skipping {big}: {1 << 30} bytes, larger than an entry ({8 << 20} at most)"]


def test_temporary_files_of_writers_never_fail_verify(tmp_path):
    """A fresh temporary file (a writer's rename under way) is ignored; a stale one, left by a killed
    writer, is removed with one line naming it. Both used to fail `cache verify` until deleted."""
    root = tmp_path / "cache"
    root.mkdir()
    shutil.copy(_path(SMALL), root)
    fresh, stale = root / ".tmp-fresh1.json", root / ".tmp-stale1.json"
    fresh.write_text('{"format": 1, "half')
    stale.write_text('{"format": 1, "half')
    hours_ago = time.time() - 2 * 3600
    os.utime(stale, (hours_ago, hours_ago))
    proc, _ = _run(["cache", "verify", "-j", "1"], root, tmp_path / "trust.json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.rstrip().endswith("1 entries, 0 failed")
    assert proc.stderr.splitlines() == [f"kernel cache: removed {stale}, a temporary file left by an interrupted writer"]
    assert fresh.exists() and not stale.exists()


def _tampered(root: Path, name: str) -> Path:
    """The entry ``name`` with a constant edited and its content hash recomputed, stored under ``root``."""
    entry = copy.deepcopy(cache.read(_path(name)))
    entry = {k: v for k, v in entry.items() if k not in ("cache_key", "content_hash", "format")}
    entry["constants"] = dict(entry["constants"], zero={"value": "0x1", "bits": 128})
    return cache.store(entry, root)


def test_a_refused_entry_is_proved_and_reported_once_per_process(tmp_path, monkeypatch, caplog):
    """7 tampered entries made one `qsynth inspect` re-prove them at every lookup: ~450 warnings, 36 s."""
    monkeypatch.setenv("QSYNTH_TRUST", str(tmp_path / "trust.json"))
    path = _tampered(tmp_path / "cache", AVX2)
    proofs = []
    real = trust.verdict
    monkeypatch.setattr(trust, "verdict", lambda p: proofs.append(p) or real(p))
    entries, refused = trust.load_all([path])
    assert entries == [] and len(refused) == 1 and refused[0].startswith(f"{path.name} {AVX2}: not proved here")
    assert trust.load_all([path]) == ([], refused)             # still counted as refused, not re-proved
    assert trust.unreported(refused) == refused and trust.unreported(refused) == []
    with pytest.raises(cache.CacheError, match="not proved here"):
        trust.load(path)
    assert proofs == [path]
    from tvm_integration.kernels import int8
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            assert int8.proved_entries("avx2", tmp_path / "cache") == []
    assert proofs == [path] and caplog.records == []           # reported above, not again


def test_an_absurd_spec_is_refused_up_front(tmp_path):
    """`--layout acc --rows 100000` ran for minutes until memory ran out, whatever --timeout said."""
    root = tmp_path / "cache"
    proc, seconds = _run(["synth", "--isa", "avx512", "--kernel", "bitserial", "--layout", "acc", "--rows", "100000",
                          "--timeout", "30"], root, tmp_path / "trust.json")
    assert proc.returncode == 2 and seconds < 60
    assert proc.stderr.splitlines() == [
        "qsynth: error: bitserial_a1w1_unipolar_acc_100000x512_avx512: 51200000 bit products (rows x columns "
        "x K bits x plane pairs) per call; synthesis takes at most 262144"]
    assert not root.exists() or not list(root.iterdir())


_SLOW_PROOF = """import sys, time
import synth.kernel
synth.kernel.prove_composition = lambda *args: time.sleep(100)    # a proof with no deadline of its own
from qsynth.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_timeout_bounds_the_whole_synthesis(tmp_path):
    """The solver calls kept --timeout, the steps after them did not (a large tile's composition proof
    ran for minutes): cut at the limit, one line, exit 1, nothing in the cache."""
    root = tmp_path / "cache"
    proc, seconds = _run(["synth", "--isa", "neon", "--kernel", "int8", "--types", "u8s8", "--timeout", "5"],
                         root, tmp_path / "trust.json", _SLOW_PROOF)
    assert proc.returncode == 1 and seconds < 40, (seconds, proc.stderr)
    assert proc.stderr.splitlines() == ["qsynth: error: synthesis failed within --timeout 5s: time limit reached"]
    assert not root.exists() or not list(root.iterdir())


def test_cache_state_changes_with_each_entry_written_or_removed(tmp_path):
    """What the operators keep per state of the cache (bitserial._per_cache_state) is recomputed once an
    entry is stored, rewritten or removed: cache.state differs after each, and not otherwise."""
    entry = cache.read(_path(SMALL))
    empty = cache.state(tmp_path)
    path = cache.store(entry, tmp_path)
    one = cache.state(tmp_path)
    assert one != empty and cache.state(tmp_path) == one
    cache.store(entry, tmp_path)                       # the same entry written again: a new file renamed in
    assert cache.state(tmp_path) not in (empty, one)
    path.unlink()
    assert cache.state(tmp_path) == empty == ()
