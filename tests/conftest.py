import os

from hypothesis import HealthCheck, settings

# CI: bounded, derandomized runs so the default suite stays fast and reproducible.
settings.register_profile("ci", max_examples=25, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
