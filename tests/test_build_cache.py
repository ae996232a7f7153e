"""The build directory's compiled outputs (kernel IR, drivers) are checked before every use
(emit/toolchain.py, synth/files.py): an edited, truncated, linked or planted output is removed with one
warning line and rebuilt from its source, never used; a build directory others can write is refused.
Each case in a scratch QSYNTH_BUILD_DIR, with clang building a real IR module."""
from __future__ import annotations

import os

import pytest

from emit import toolchain
from isa_specs.check import ToolchainError

SOURCE = "int add(int a, int b) { return a + b; }\n"
CMD = ["clang", "-O1", "-S", "-emit-llvm", "-x", "c"]


@pytest.fixture
def build(tmp_path, monkeypatch):
    folder = tmp_path / "build"
    monkeypatch.setenv("QSYNTH_BUILD_DIR", str(folder))
    return folder


def compiled() -> str:
    """The module's IR, less the lines naming the temporary source file it was built from."""
    text = toolchain.cached_compile(CMD, SOURCE, "test-{}.ll").read_text()
    return "\n".join(line for line in text.splitlines() if not line.startswith(("; ModuleID", "source_filename")))


def test_an_edited_output_is_rebuilt_not_used(build, capsys):
    """The issue's case: `sed -i 's/add/sub/'` on a cached .ll changed a model's outputs silently."""
    good = compiled()
    assert "add nsw i32" in good
    path = toolchain.cached_compile(CMD, SOURCE, "test-{}.ll")
    path.write_text(path.read_text().replace("add nsw i32", "sub nsw i32"))
    assert compiled() == good
    err = capsys.readouterr().err
    assert err.count("warning") == 1 and "does not match the digest" in err and "building anew" in err


def test_a_truncated_output_is_rebuilt(build, capsys):
    good = compiled()
    path = toolchain.cached_compile(CMD, SOURCE, "test-{}.ll")
    path.write_bytes(path.read_bytes()[:40])
    assert compiled() == good and "does not match the digest" in capsys.readouterr().err


def test_a_link_is_not_followed_and_a_planted_file_not_used(build, tmp_path, capsys):
    """A link to another file (its contents never read, never printed), and a file qsynth never wrote
    (no sidecar), both put where the output goes before the first build."""
    good = compiled()
    path = toolchain.cached_compile(CMD, SOURCE, "test-{}.ll")
    secret = tmp_path / "secret"
    secret.write_text("root:x:0:0:secret line\n")
    path.unlink()
    path.symlink_to(secret)
    assert compiled() == good and not path.is_symlink()
    err = capsys.readouterr().err
    assert "secret line" not in err and "building anew" in err
    for p in (path, path.with_name(path.name + ".sha256.json")):
        p.unlink()
    path.write_text(good.replace("add nsw i32", "sub nsw i32"))           # planted, no sidecar
    assert compiled() == good and "building anew" in capsys.readouterr().err


def test_a_build_directory_others_can_write_is_refused(build):
    build.mkdir(mode=0o700)
    os.chmod(build, 0o777)
    with pytest.raises(ToolchainError, match="build directory refused: .* writable by other users"):
        compiled()


def test_an_unchanged_output_is_reused(build, capsys):
    path = toolchain.cached_compile(CMD, SOURCE, "test-{}.ll")
    stamp = path.stat().st_mtime_ns
    assert toolchain.cached_compile(CMD, SOURCE, "test-{}.ll") == path and path.stat().st_mtime_ns == stamp
    assert capsys.readouterr().err == ""


def test_a_replaced_instruction_harness_is_not_run(build, capsys):
    """The instruction harness (isa_specs/check.py) is a program the differential test runs: one replaced
    by another program (here a shell script that would print a marker) is rebuilt, never run."""
    from isa_specs import get_isa
    from isa_specs.check import Case, Harness
    isa = get_isa("avx2")
    insn = next(i for i in isa.instructions if i.mnemonic == "vpaddd")
    cases = [Case(insn, form, None) for form in insn.forms]
    first = Harness(isa, cases).binary
    first.write_text("#!/bin/sh\necho planted\n")
    again = Harness(isa, cases)
    assert again.binary == first and b"planted" not in first.read_bytes()
    assert "does not match the digest" in capsys.readouterr().err
