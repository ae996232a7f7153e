"""Every instruction form's semantics against the machine (natively on x86, qemu for AArch64), driven
by hypothesis; the Z3 semantics is checked against numpy on the same inputs."""
import functools
import shutil

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from conftest import HOST_RUNS
from isa_specs import ISA_NAMES, get_isa
from isa_specs.check import Case, Harness, numpy_outputs, z3_mismatches, z3_semantics


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


@functools.cache
def _unrunnable(isa_name: str, feature: str) -> str | None:
    """Why this host cannot run the harness of an instruction of ``feature``: the ISA's compiler or runner
    (qemu) is not installed, or the CPU lacks the feature; None when it can."""
    isa = get_isa(isa_name)
    absent = [tool for tool in (isa.toolchain.cc, *isa.toolchain.runner[:1]) if shutil.which(tool) is None]
    if absent:
        return f"{', '.join(absent)} not installed (apt-get install {' '.join(isa.toolchain.apt_packages)})"
    return HOST_RUNS.lacks(feature)


@functools.cache
def _harness(isa_name):
    isa = get_isa(isa_name)
    runnable = [Case(i, f, m) for i in isa.instructions if not _unrunnable(isa_name, i.feature)
                for f in i.forms for m in (f.imm or (None,))]
    return Harness(isa, runnable)


@functools.cache
def _compiled(isa_name: str, form_id: str, imm: int | None) -> tuple[int, tuple]:
    """A case's index in its ISA's harness and its Z3 semantics, found and built once for all its examples."""
    cases = _harness(isa_name).cases
    index = next(i for i, c in enumerate(cases) if (c.form_id, c.imm) == (form_id, imm))
    return index, z3_semantics(cases[index])


@pytest.fixture(scope="module")
def running():
    """``running(isa_name)``: the ISA's harness and one process of it (check.Process) that every example of
    the module's cases asks in turn: under qemu a process costs more than the eight examples of a case."""
    processes = {}

    def harness_and_process(isa_name):
        harness = _harness(isa_name)
        return harness, processes.setdefault(isa_name, harness.process())
    yield harness_and_process
    for process in processes.values():
        process.close()


@pytest.mark.parametrize("isa_name,case", list(_cases()))
@settings(max_examples=8, deadline=None)
@given(data=st.data())
def test_semantics_match_machine_and_z3(running, isa_name, case, data):
    reason = _unrunnable(isa_name, case.insn.feature)
    if reason:
        pytest.skip(reason)
    n = data.draw(st.integers(1, max(1, min(32, 4096 // case.input_bytes))), label="batch")
    inputs = [np.frombuffer(data.draw(st.binary(min_size=n * op.ctype.bits // 8, max_size=n * op.ctype.bits // 8)),
                            np.uint8).reshape(n, -1) for op in case.form.registers]
    harness, process = running(isa_name)
    index, semantics = _compiled(isa_name, case.form_id, case.imm)
    [machine] = harness.run([(index, np.concatenate(inputs, axis=1))], process)
    want = numpy_outputs(case, inputs)
    assert machine.tobytes().hex() == want.tobytes().hex()
    assert z3_mismatches(case, inputs, want, count=2, semantics=semantics) == 0
