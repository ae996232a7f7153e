"""Every Arm core we publish estimates for is costed on a scheduling model no other of them shares, asked of
llvm-mca itself (tvm_integration/bench/core_models.py): LLVM 19 gives cortex-a72 and cortex-a76 one model,
so an A76 column costed as ``-mcpu=cortex-a76`` repeats the A72's."""
import json
from itertools import combinations
from pathlib import Path

import pytest

from tvm_integration.bench import core_models, mca

pytestmark = pytest.mark.skipif(mca.missing_tools() is not None, reason=f"llvm-mca: {mca.missing_tools()}")
ARM = Path(__file__).resolve().parents[1] / "benchmarks" / "models_arm.json"


@pytest.mark.parametrize("a, b", list(combinations(core_models.REPORTED, 2)))
def test_reported_cores_have_distinct_models(a, b):
    assert core_models.resources(mca.mca_cpu(a)) != core_models.resources(mca.mca_cpu(b)), \
        f"{a} and {b} are both costed on LLVM's {core_models.model(mca.mca_cpu(a))} model"


def test_block_cycles_take_the_stand_in():
    """mca.block_cycles costs a core on its stand-in's model, not on the one its own -mcpu selects."""
    block = [mca.Block(0, ("mul v0.4s, v1.4s, v2.4s", "mla v3.4s, v0.4s, v4.4s", "ldr q5, [x0]",
                           "add v6.4s, v5.4s, v3.4s"), 1)]
    assert mca.block_cycles(block, "cortex-a76") == mca.block_cycles(block, mca.mca_cpu("cortex-a76"))
    assert mca.block_cycles(block, "cortex-a76") != mca.block_cycles(block, "cortex-a72")


def test_published_arm_rows_name_a_distinct_model():
    """Every costed row of benchmarks/models_arm.json was costed on today's model of its core (a row whose
    baseline failed to run has no cycles)."""
    rows = [r for r in json.loads(ARM.read_text())["rows"] if "columns" in r]
    stale = [f"{r['model']}/{r['core']}" for r in rows if r.get("mca_cpu", r["core"]) != mca.mca_cpu(r["core"])]
    assert not stale, f"costed on another core's model: {', '.join(stale)}"
    assert {r["core"] for r in rows} <= set(core_models.REPORTED)
