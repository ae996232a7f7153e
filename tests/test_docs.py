"""The documentation stays true to the code: docs/cli.md is what scripts/cli_reference.py writes from the
typer app today, and every file path and relative link in README.md and docs/ names a file that exists."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from scripts import cli_reference

ROOT = Path(__file__).resolve().parent.parent

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FOLDERS = "qsynth|emit|synth|sketches|isa_specs|tvm_integration|scripts|tests|kernel_cache|benchmarks|docs"
PATH = re.compile(rf"`((?:{FOLDERS})/[^`\s]*)`")
LINK = re.compile(r"\]\(([^)#]+)(?:#[^)]*)?\)")


def test_cli_reference_is_current():
    assert (ROOT / "docs" / "cli.md").read_text() == cli_reference.reference(), \
        "docs/cli.md is stale: run python scripts/cli_reference.py"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_paths_and_links_exist(page):
    text = page.read_text()
    named = {p.rstrip(".,:;") for p in PATH.findall(text) if not re.search(r"[<{*…]", p)}
    missing = sorted(p for p in named if not (ROOT / p).exists())
    links = {link for link in LINK.findall(text) if "://" not in link}
    broken = sorted(link for link in links if not (page.parent / link).exists())
    assert not missing and not broken, f"{page.name}: no such path {missing}, broken links {broken}"
