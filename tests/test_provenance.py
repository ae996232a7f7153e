"""A benchmark records the commit it measured (tvm_integration/bench/provenance.py), checked against a
repository made here with git itself."""
from __future__ import annotations

import subprocess

from tvm_integration.bench.provenance import commit


def git(root, *args):
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout.strip()


def test_commit_names_head_and_says_when_the_tree_differs(tmp_path):
    git(tmp_path, "init", "-q")
    (tmp_path / "a.txt").write_text("1")
    git(tmp_path, "add", "a.txt")
    git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    head = git(tmp_path, "rev-parse", "HEAD")
    assert commit(tmp_path) == head
    (tmp_path / "b.txt").write_text("untracked files do not count")
    assert commit(tmp_path) == head
    (tmp_path / "a.txt").write_text("2")
    assert commit(tmp_path) == head + "+dirty"


def test_outside_a_checkout_it_says_unknown(tmp_path):
    assert commit(tmp_path) == "unknown"
