"""scripts/reproduce.py reruns a table's command from its record with the output sent to a temporary
folder: a script's (--json FILE or --out DIR) and a ``qsynth`` command's (``qsynth sweep``, whose table
is benchmarks/synthesis.*), the latter by this Python's qsynth.cli so that it runs this checkout."""
import sys

from scripts.reproduce import rerun_command


def _old_and_new(tmp_path, table: str):
    """A table's old JSON and the empty folder its rerun writes into."""
    old = tmp_path / table
    old.write_text("{}")
    (folder := tmp_path / "new").mkdir()
    return old, folder


def test_a_qsynth_sweep_reruns_through_this_checkouts_cli(tmp_path):
    old, folder = _old_and_new(tmp_path, "synthesis.json")
    command = rerun_command("qsynth sweep --isa neon --out benchmarks -j 2", old, folder)
    assert command == [sys.executable, "-m", "qsynth.cli", "sweep", "--isa", "neon", "-j", "2", "--out", str(folder)]
    assert (folder / "synthesis.json").read_text() == "{}"          # the sweep merges its rows into it


def test_a_script_writes_into_the_folder(tmp_path):
    old, folder = _old_and_new(tmp_path, "zoo.json")
    command = rerun_command("python scripts/bench_zoo.py --out benchmarks --threads 1", old, folder)
    assert command == [sys.executable, "scripts/bench_zoo.py", "--threads", "1", "--out", str(folder)]
