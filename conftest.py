"""Suite-wide configuration: the claims plugin, Hypothesis profiles and shared fixtures."""
from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

# the harness's plugins (support/harness/): they share the run's state through
# support/harness/session.py and import none of each other
pytest_plugins = ["support.harness.plugin", "support.harness.device_options",
                  "support.harness.timing_lock", "support.harness.schedule",
                  "support.harness.control_options", "pytester"]

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


def _data_source(config) -> str | None:
    return config.getoption("--concrete-data") or os.environ.get("CONCRETE_DATA") or None


_CONCRETE = pytest.StashKey()


def pytest_configure(config):
    """A data path the user named (--concrete-data or CONCRETE_DATA) must hold the verified
    table: anything else is a usage error, before any test runs, never a skip."""
    source = _data_source(config)
    if config.getoption("help", False):
        return
    from support.harness.session import DATA_SOURCE
    from support.lab.data import DataError, describe_source, load_concrete
    config.stash[DATA_SOURCE] = describe_source(source)
    if source is None:
        return
    try:
        config.stash[_CONCRETE] = load_concrete(source)
    except DataError as exc:
        raise pytest.UsageError(f"--concrete-data / CONCRETE_DATA: {exc}") from None


@pytest.fixture(scope="session")
def concrete(request):
    """The verified UCI concrete table: the path named (checked at start-up), else the user
    cache, else the copy that ships with the suite. Only if that copy is missing too does it
    skip with the way to get the data (an error under --require-data); a wrong file is an
    error."""
    from support.lab.data import load_concrete, missing_message, resolve
    named = request.config.stash.get(_CONCRETE, None)
    if named is not None:
        return named
    if resolve()[0] == "none":
        if request.config.getoption("--require-data"):
            pytest.fail(missing_message() + " (--require-data)", pytrace=False)
        pytest.skip(missing_message())
    return load_concrete()


@pytest.fixture(scope="session")
def fresh(request) -> bool:
    """True when shared expensive results must be recomputed (--fresh)."""
    return bool(request.config.getoption("--fresh"))


@pytest.fixture
def one_torch_thread():
    """Run the test with one intra-op thread (small tensors on a shared machine)."""
    from support.lab.train_torch import torch_threads
    with torch_threads(1):
        yield


@pytest.fixture
def cuda():
    """The CUDA device of a gpu-tier test (which carries ``@device_marks.needs("cuda")``, so it
    skips with the reason where there is none): torch seeded with 0 first, the work
    finished and the allocator's cached blocks released after, so every test's allocator
    readings start from the same state."""
    import torch
    torch.manual_seed(0)
    yield torch.device("cuda")
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
