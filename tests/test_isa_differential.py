"""Every instruction form's semantics against the machine (natively on x86, qemu for AArch64), driven
by hypothesis; the Z3 semantics is checked against numpy on the same inputs."""
import functools
import importlib

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from isa_specs import ISA_NAMES, get_isa, host
from isa_specs.check import Case, Harness, numpy_outputs, z3_mismatches


def _isas():
    for name in ISA_NAMES:
        try:
            importlib.import_module(f"isa_specs.{name}")
        except ModuleNotFoundError:
            continue
        yield get_isa(name)


def _cases():
    for isa in _isas():
        for insn in isa.instructions:
            for form in insn.forms:
                for imm in (form.imm[:: max(1, len(form.imm) // 4)] if form.imm else (None,)):
                    yield pytest.param(isa.name, Case(insn, form, imm),
                                       id=f"{isa.name}-{insn.form_id(form)}" + ("" if imm is None else f"-{imm}"))


@functools.cache
def _harness(isa_name):
    isa = get_isa(isa_name)
    runnable = [Case(i, f, m) for i in isa.instructions if not host.missing(i.feature, isa.toolchain.runner)
                for f in i.forms for m in (f.imm or (None,))]
    return Harness(isa, runnable)


@pytest.mark.parametrize("isa_name,case", list(_cases()))
@settings(max_examples=8, deadline=None)
@given(data=st.data())
def test_semantics_match_machine_and_z3(isa_name, case, data):
    isa = get_isa(isa_name)
    reason = host.missing(case.insn.feature, isa.toolchain.runner)
    if reason:
        pytest.skip(reason)
    n = data.draw(st.integers(1, max(1, min(32, 4096 // case.input_bytes))), label="batch")
    inputs = [np.frombuffer(data.draw(st.binary(min_size=n * op.ctype.bits // 8, max_size=n * op.ctype.bits // 8)),
                            np.uint8).reshape(n, -1) for op in case.form.registers]
    harness = _harness(isa_name)
    index = next(i for i, c in enumerate(harness.cases) if c == case)
    [machine] = harness.run([(index, np.concatenate(inputs, axis=1))])
    want = numpy_outputs(case, inputs)
    assert machine.tobytes().hex() == want.tobytes().hex()
    assert z3_mismatches(case, inputs, want, count=2) == 0
