"""The ``qsynth`` command line as a whole (qsynth/cli.py): every command, found by walking the app,
has ``--help`` with an example; a bad argument to any of them is one line on stderr and exit 2; an
unexpected error is one line and exit 1, its traceback only with ``--debug``."""
import subprocess
import sys

import pytest
import typer

from qsynth import cli


def _commands(command, path=()):
    """(path, click command) of every leaf command under ``command``."""
    subs = getattr(command, "commands", None)
    if not subs:
        return [(path, command)]
    return [leaf for name, sub in sorted(subs.items()) for leaf in _commands(sub, (*path, name))]


COMMANDS = [path for path, _ in _commands(typer.main.get_command(cli.build_app()))]


def test_every_command_is_there():
    assert {" ".join(p) for p in COMMANDS} == {
        "isa list", "isa check", "synth", "sweep", "host", "bench-layer", "cache ls", "cache verify", "emit",
        "test-kernels", "compile", "run", "bench-model", "inspect", "demo", "report"}


@pytest.mark.parametrize("path", COMMANDS, ids=" ".join)
def test_help_has_an_example(path, capsys):
    assert cli.main([*path, "--help"]) == 0
    out = capsys.readouterr().out
    assert "Usage: qsynth " + " ".join(path) in out and f"Example: qsynth {' '.join(path)}" in out


@pytest.mark.parametrize("path", COMMANDS, ids=" ".join)
def test_a_bad_argument_is_one_line_and_exit_2(path, capsys):
    assert cli.main([*path, "--no-such-option"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert captured.err.startswith("qsynth: error: No such option: --no-such-option")


def test_usage_errors_from_the_shell():
    for argv, needle in [(["isa", "list"], "Missing option '--isa'"), (["frobnicate"], "No such command 'frobnicate'"),
                         (["sweep", "--executor", "slurm"], "'slurm' is not one of 'local', 'ray'"),
                         (["sweep", "--address", "auto"], "--address is for --executor ray")]:
        proc = subprocess.run([sys.executable, "-m", "qsynth.cli", *argv], capture_output=True, text=True)
        assert proc.returncode == 2 and proc.stdout == "" and proc.stderr.count("\n") == 1, proc.stderr
        assert proc.stderr.startswith("qsynth: error: ") and needle in proc.stderr


def test_an_unexpected_error_is_one_line_without_debug(monkeypatch, capsys):
    from qsynth import host_report

    def broken(*args):
        raise RuntimeError("the cpu model table\nis broken")
    monkeypatch.setattr(host_report, "report", broken)
    assert cli.main(["host"]) == 1
    err = capsys.readouterr().err
    assert err == "qsynth: RuntimeError: the cpu model table is broken (qsynth --debug ... shows the traceback)\n"
    with pytest.raises(RuntimeError, match="is broken"):
        cli.main(["--debug", "host"])


def test_output_piped_into_head_is_not_an_error():
    proc = subprocess.run(f"{sys.executable} -m qsynth.cli isa list --isa avx512 | head -n 1; exit ${{PIPESTATUS[0]}}",
                          shell=True, executable="/bin/bash", capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.startswith("avx512: ") and proc.stderr == "", proc.stderr


def test_sweep_on_ray_without_ray_is_one_line_and_nothing_written(tmp_path, monkeypatch, capsys):
    from synth import cache
    monkeypatch.setattr(cache, "ROOT", tmp_path / "cache")
    monkeypatch.setitem(sys.modules, "ray", None)            # as if Ray were not installed
    argv = ["sweep", "--executor", "ray", "--isa", "neon", "--configs", "a1w1_unipolar_acc_8x64", "--out", str(tmp_path)]
    assert cli.main(argv) == 1
    assert capsys.readouterr().err == "qsynth: cluster: --executor ray needs Ray: pip install 'qsynth[cluster]'\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_sweep_on_ray_at_an_address_nobody_listens_on_is_one_line(tmp_path, monkeypatch, capsys):
    pytest.importorskip("ray", reason="Ray is not installed (pip install 'qsynth[cluster]')",
                        exc_type=ModuleNotFoundError)
    from synth import cache
    monkeypatch.setattr(cache, "ROOT", tmp_path / "cache")
    argv = ["sweep", "--executor", "ray", "--address", "127.0.0.1:1", "--isa", "neon", "--configs",
            "a1w1_unipolar_acc_8x64", "--out", str(tmp_path)]
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("qsynth: cluster: cannot reach the Ray cluster at 127.0.0.1:1: ") and err.count("\n") == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == []
