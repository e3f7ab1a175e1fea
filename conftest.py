"""Suite-wide configuration, what must sit at the root: the harness's plugins and the
Hypothesis profiles (both apply to the claims and to the harness's own tests). The claims'
shared fixtures are in claims/conftest.py; the concrete data's table, its ``concrete`` fixture
and its options are support/harness/concrete_data.py's."""
from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

# the harness's plugins (support/harness/): they share the run's state through
# support/harness/session.py and import none of each other
pytest_plugins = ["support.harness.plugin", "support.harness.concrete_data",
                  "support.harness.device_options", "support.harness.timing_lock",
                  "support.harness.schedule", "support.harness.control_options", "pytester"]

# Hypothesis profiles, selected with HYPOTHESIS_PROFILE (the default is "dev"):
#   dev       explores: new random examples on every run, 40 per property; the README's test
#             command, .ci/run and `python -m support stability` all run it, so CI meets the
#             examples a user's run meets. A failure found is kept in .hypothesis/ and
#             replayed first by the next run on the same checkout.
#   thorough  the release checks of support/README.md: 1,000 examples per property.
#   ci        derandomized: the same examples on every run and machine (to reproduce a run,
#             or to compare environments example for example; tox's envs use it).
# Examples that once broke a property are pinned with @example in the test. A property that
# takes a function-scoped fixture (``claim``) suppresses HealthCheck.function_scoped_fixture
# itself (the recorder keeps the worst example on purpose); no test overrides max_examples.
_COMMON = dict(deadline=None, print_blob=True, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=40, **_COMMON)
settings.register_profile("thorough", max_examples=1000, **_COMMON)
settings.register_profile("ci", derandomize=True, max_examples=40, **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))
