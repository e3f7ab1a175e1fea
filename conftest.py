"""Suite-wide configuration: the claims plugin, Hypothesis profiles and shared fixtures."""
from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

pytest_plugins = ["support.plugin", "support.devices_plugin", "pytester"]

# CI is deterministic; local runs explore. Select with HYPOTHESIS_PROFILE=ci|dev.
settings.register_profile(
    "ci", derandomize=True, deadline=None, max_examples=40, print_blob=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
settings.register_profile(
    "dev", deadline=None, max_examples=40,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))


def _data_source(config) -> str | None:
    return config.getoption("--concrete-data") or os.environ.get("CONCRETE_DATA") or None


_CONCRETE = pytest.StashKey()


def pytest_configure(config):
    """A data path the user named (--concrete-data or CONCRETE_DATA) must hold the verified
    table: anything else is a usage error, before any test runs, never a skip."""
    source = _data_source(config)
    if source is None or config.getoption("help", False):
        return
    from support.data import DataError, load_concrete
    try:
        config.stash[_CONCRETE] = load_concrete(source)
    except DataError as exc:
        raise pytest.UsageError(f"--concrete-data / CONCRETE_DATA: {exc}") from None


@pytest.fixture(scope="session")
def concrete(request):
    """The verified UCI concrete table: the path named (checked at start-up), else the user
    cache. With neither, skips with the way to get it (an error under --require-data); a
    wrong file in the cache is an error."""
    from support.data import ZIP_MEMBER, cache_dir, load_concrete, missing_message
    named = request.config.stash.get(_CONCRETE, None)
    if named is not None:
        return named
    if not (cache_dir() / ZIP_MEMBER).exists():
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
    from support.train_torch import torch_threads
    with torch_threads(1):
        yield
