import os
import tempfile

import pytest
from hypothesis import HealthCheck, settings

# CI: bounded, derandomized runs so the default suite stays fast and reproducible.
settings.register_profile("ci", max_examples=25, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# Entries are trusted once re-proved on this machine (synth/trust.py): tests keep their own trust
# store, shared by the xdist workers of one run, so they neither read nor change the user's.
os.environ.setdefault("QSYNTH_TRUST", os.path.join(
    tempfile.gettempdir(), f"qsynth-trust-{os.environ.get('PYTEST_XDIST_TESTRUNUID', os.getpid())}.json"))
# The same for compiled models (qnn/artifacts.py): qsynth run's cache, one per run of the suite.
os.environ.setdefault("QSYNTH_MODEL_CACHE", os.path.join(
    tempfile.gettempdir(), f"qsynth-models-{os.environ.get('PYTEST_XDIST_TESTRUNUID', os.getpid())}"))


@pytest.fixture(scope="module")
def lib_dir():
    """TVM's AArch64 runtime libraries for models run under qemu (ops/cross_model.py), fetched once: a
    host without qemu or the cross gcc skips, a failed fetch fails."""
    from tvm_integration.ops import cross_model
    if (why := cross_model.missing_tools()) is not None:
        pytest.skip(f"cannot run AArch64 programs here: {why}")
    return cross_model.runtime()
