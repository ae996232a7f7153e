"""Every instruction form's semantics against the machine (natively on x86, qemu for AArch64), driven
by hypothesis; the Z3 semantics is checked against numpy on the same inputs."""
import functools
import shutil

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from conftest import HOST_RUNS
from isa_specs import ISA_NAMES, get_isa
from isa_specs.check import Case, Harness, numpy_outputs, z3_mismatches


def _cases():
    """Every (form, immediate) of every ISA; an ISA run under an emulator is marked ``qemu``. An ISA
    module that does not import is a collection error, not fewer cases."""
    qemu = [pytest.mark.qemu]
    for isa in map(get_isa, ISA_NAMES):
        for insn in isa.instructions:
            for form in insn.forms:
                for imm in (form.imm[:: max(1, len(form.imm) // 4)] if form.imm else (None,)):
                    yield pytest.param(isa.name, Case(insn, form, imm), marks=qemu * bool(isa.toolchain.runner),
                                       id=f"{isa.name}-{insn.form_id(form)}" + ("" if imm is None else f"-{imm}"))


def _unrunnable(isa, insn) -> str | None:
    """Why this host cannot run ``insn``'s harness: the ISA's compiler or runner (qemu) is not
    installed, or the CPU lacks the instruction's feature; None when it can."""
    absent = [tool for tool in (isa.toolchain.cc, *isa.toolchain.runner[:1]) if shutil.which(tool) is None]
    if absent:
        return f"{', '.join(absent)} not installed (apt-get install {' '.join(isa.toolchain.apt_packages)})"
    return HOST_RUNS.lacks(insn.feature)


@functools.cache
def _harness(isa_name):
    isa = get_isa(isa_name)
    runnable = [Case(i, f, m) for i in isa.instructions if not _unrunnable(isa, i)
                for f in i.forms for m in (f.imm or (None,))]
    return Harness(isa, runnable)


@pytest.mark.parametrize("isa_name,case", list(_cases()))
@settings(max_examples=8, deadline=None)
@given(data=st.data())
def test_semantics_match_machine_and_z3(isa_name, case, data):
    reason = _unrunnable(get_isa(isa_name), case.insn)
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
