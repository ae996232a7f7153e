"""benchmarks/README.md, the page README.md links to, is what ``qsynth report`` makes of the JSON files
beside it: regenerated into a temporary folder, it must equal the committed page (a stale page once showed
a Zen 4 run's ResNet-18 next to an AMX host's models.md)."""
import shutil
from pathlib import Path

from qsynth.benchmarks_report import write_report

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def test_landing_page_equals_its_regeneration(tmp_path):
    for path in [*BENCHMARKS.glob("*.json"), *BENCHMARKS.glob("*.md")]:
        if path.name != "README.md":
            shutil.copy(path, tmp_path / path.name)
    write_report(tmp_path)
    regenerated = (tmp_path / "README.md").read_text()
    assert regenerated == (BENCHMARKS / "README.md").read_text(), \
        "benchmarks/README.md differs from its regeneration: run qsynth report --benchmarks benchmarks"
