"""Suite-wide configuration: the claims plugin, Hypothesis profiles and shared fixtures."""
from __future__ import annotations

import os
from pathlib import Path

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


@pytest.fixture(scope="session")
def concrete(request):
    """The verified UCI concrete table. Skips (or, with --require-data, errors) when absent;
    a wrong file is always an error."""
    from support.data import DataError, load_concrete
    source = _data_source(request.config)
    try:
        return load_concrete(source)
    except DataError as exc:
        missing = source is None or not Path(source).exists()
        if missing and not request.config.getoption("--require-data"):
            pytest.skip(f"concrete data not available: {exc}")
        raise


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
