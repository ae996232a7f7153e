"""The cost tables cover every instruction form on every micro-architecture of its ISA.

A form added to an ISA module without re-running ``scripts/measure_costs.py`` fails here, so the
cost model never meets a form it has no figures for. A figure the scheduling model does not have
(AMX under LLVM 14) must be recorded as unavailable with its reason, never left out silently.
"""
from __future__ import annotations

import pytest

from isa_specs import ISA_NAMES, get_isa
from isa_specs.costs import UARCHS, cost, table


@pytest.mark.parametrize("name", ISA_NAMES)
def test_every_form_has_a_cost_or_a_reason_on_every_uarch(name):
    isa = get_isa(name)
    t = table(name)
    assert set(t["source"]) == set(UARCHS[name])
    unavailable = t.get("unavailable", {})
    missing = [(f, u) for f in isa.forms for u in UARCHS[name]
               if u not in t["forms"].get(f, {}) and not unavailable.get(f, {}).get(u)]
    stale = (set(t["forms"]) | set(unavailable)) - set(isa.forms)
    assert not missing and not stale, (
        f"rerun scripts/measure_costs.py {name}: missing {missing[:10]}, stale {sorted(stale)[:10]}")


@pytest.mark.parametrize("name", ISA_NAMES)
def test_figures_are_plausible(name):
    for form_id, per_uarch in table(name)["forms"].items():
        for uarch in per_uarch:
            c = cost(name, form_id, uarch)
            assert type(c.latency) is int and c.latency > 0, (form_id, uarch, c)
            assert type(c.rthroughput) is float and c.rthroughput > 0, (form_id, uarch, c)
            assert c.source.startswith("LLVM ") and f"-mcpu={uarch}" in c.source


def test_default_uarch_is_the_first():
    form_id = next(iter(get_isa("neon").forms))
    assert cost("neon", form_id) == cost("neon", form_id, UARCHS["neon"][0])


def test_missing_figures_raise_a_keyerror_naming_form_and_uarch():
    with pytest.raises(KeyError, match="no-such.form.*cortex-a53"):
        cost("neon", "no-such.form", "cortex-a53")
    with pytest.raises(KeyError, match="pentium"):
        cost("neon", next(iter(get_isa("neon").forms)), "pentium")
