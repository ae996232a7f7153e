import functools
import os
import sys
import tempfile

import pytest
from hypothesis import HealthCheck, settings

from isa_specs import host
from isa_specs.features import AARCH64, X86
from synth import trust
from tvm_integration.torch_kept_out import keep_torch_out_of_tvm

keep_torch_out_of_tvm()     # no test passes torch tensors to TVM: 3 s of CPU less in each process that imports TVM

# PYTHONDONTWRITEBYTECODE (this environment sets it) made each xdist worker, and each Python a test starts,
# compile the project's sources and the test files again: collecting the suite took 22 s of CPU against 13-15
# with their bytecode kept. Kept as Python keeps it by default, in __pycache__ (gitignored); Python checks it
# against its source's time and size. Set here, before xdist starts its workers with this environment.
if os.environ.pop("PYTHONDONTWRITEBYTECODE", None) is not None:
    sys.dont_write_bytecode = False

# CI: bounded, derandomized runs so the default suite stays fast and reproducible.
settings.register_profile("ci", max_examples=25, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# Entries are trusted once re-proved on this machine (synth/trust.py). Tests keep a trust store of their
# own, so they neither read nor change the user's, and keep it from run to run: a stamp names an entry's
# content hash and the verifier's source (trust.fingerprint), so an entry changed in a checkout, or any
# change to isa_specs/, sketches/ or synth/, re-proves on first use, and only identical bytes under an
# identical verifier are not proved again (a fresh store per run re-proved the whole cache each time:
# 269 s of CPU, a sixth of the suite). One store per fingerprint: worktrees with different verifiers
# would otherwise drop each other's stamps. Tests of proving itself set stores of their own.
os.environ.setdefault("QSYNTH_TRUST", os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "qsynth", "tests",
    f"verified-{trust.fingerprint()}.json"))
# The same for compiled models (qnn/runtime/artifacts.py): qsynth run's cache, one per run of the suite.
os.environ.setdefault("QSYNTH_MODEL_CACHE", os.path.join(
    tempfile.gettempdir(), f"qsynth-models-{os.environ.get('PYTEST_XDIST_TESTRUNUID', os.getpid())}"))


class HostRuns:
    """What this host runs, decided here once for every test that skips or branches on it, so that a
    skip names a host fact (a CPU feature, the tile permission, a tool) and a broken install fails
    instead. The parts that import TVM are computed on first use."""

    def __init__(self, model: host.HostModel):
        self.features = frozenset(host.x86_features(model))    # features.X86 names the host model shows

    def lacks(self, *features: str) -> str | None:
        """Why the host cannot execute one of ``features`` (features.X86 names, or AArch64 ones: qemu),
        None when it executes them all."""
        for f in features:
            if f in AARCH64:
                if self.qemu:
                    return self.qemu
            elif f not in self.features:
                return f"host CPU lacks {X86[f].cpuinfo}"
        return None

    @property
    def vnni(self) -> bool:
        """Whether the host shows VNNI (vpdpbusd), with which other libraries' u8 x s8 products do not
        saturate."""
        return any(f in self.features for f in host.VNNI)

    def cannot_run(self, kernel) -> str | None:
        """Why the host cannot run ``kernel`` (an int8 or bitserial tile), None when it can."""
        return self.amx if "amx-int8" in kernel.features else self.lacks(*kernel.features)

    @functools.cached_property
    def amx(self) -> str | None:
        """None when AMX tiles run natively (the CPU's features and Linux's tile data permission), else
        why they run on the emulation only."""
        from tvm_integration.kernels import amx_runtime
        why = self.lacks("amx-tile", "amx-int8")
        if why is None and (refused := amx_runtime.permission()) is not None:
            why = f"Linux refuses this process AMX tile data ({refused})"
        return why

    @functools.cached_property
    def int8_why(self) -> str | None:
        """Why the host has no u8 x s8 tile: it lacks every feature of selection's preference."""
        from tvm_integration.kernels.selection import INT8_PREFERENCE
        kinds = [feature for _, feature in INT8_PREFERENCE]
        if any(f in self.features for f in kinds):
            return None
        return "host CPU lacks " + ", ".join(X86[f].cpuinfo for f in kinds)

    @functools.cached_property
    def int8(self):
        """The u8 x s8 tile int8 operators take here (selection.int8_kernel("host")), None where
        ``int8_why``; a host with the features that gets none fails: that is a broken cache."""
        from tvm_integration.kernels import selection
        return None if self.int8_why else selection.int8_kernel("host")

    @functools.cached_property
    def qemu(self) -> str | None:
        """None when AArch64 operators build and run here under qemu-aarch64, else the missing tool."""
        from tvm_integration.qemu import cross
        return (why := cross.missing_tools()) and f"AArch64 operators run under qemu: {why}"


HOST_RUNS = HostRuns(host.model())


def skip_if(why: str | None):
    """A skip mark whose reason is the host fact ``why`` (a ``HOST_RUNS`` answer), inert when it is None."""
    return pytest.mark.skipif(why is not None, reason=why or "")


@pytest.fixture(scope="session")
def host_runs() -> HostRuns:
    """``HOST_RUNS`` for a test that branches on the host inside its body."""
    return HOST_RUNS


@pytest.fixture(scope="module")
def lib_dir():
    """TVM's AArch64 runtime libraries for models run under qemu (qemu/cross_model.py), fetched once: a
    host without qemu or the cross gcc skips, a failed fetch fails."""
    from tvm_integration.qemu import cross_model
    if (why := cross_model.missing_tools()) is not None:
        pytest.skip(f"cannot run AArch64 programs here: {why}")
    return cross_model.runtime()


@pytest.fixture
def custom_op_model(tmp_path):
    """``custom.onnx``: one op of a domain no runtime knows (x -> y, float [1, 4]), for refusals."""
    import onnx
    from onnx import TensorProto, helper
    node = helper.make_node("Frobnicate", ["x"], ["y"], domain="qsynth.test")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    path = tmp_path / "custom.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                      helper.make_opsetid("qsynth.test", 1)]), str(path))
    return path
