"""The concrete data's path, in one place: the pytest plugin that declares ``--concrete-data``
and ``--require-data``, reads the ``CONCRETE_DATA`` variable (the only module that does),
resolves the path through the library's loader (:func:`support.lab.data.load_concrete`) and
hands the verified table to the ``concrete`` fixture and its description to the report.

A path the user named (the option, else the variable) must hold the verified table: anything
else is a usage error before any test runs, never a skip. With no path named, the table is
the user cache's, else the copy that ships with the suite; only if that copy is missing too
does ``concrete`` skip with the way to get the data (an error under ``--require-data``).
The commands that start pytest (``gpu-run``) or verify the data (``check-data``) ask
:func:`named` for the path a run would be given.
"""
from __future__ import annotations

import os

import pytest

from support.harness.session import DATA_SOURCE

VARIABLE = "CONCRETE_DATA"
_TABLE = pytest.StashKey[object]()


def named(option: str | None = None) -> str | None:
    """The path a user named: the option's value, else the variable, else None."""
    return option or os.environ.get(VARIABLE) or None


def named_source(config) -> str | None:
    """The path this run was given (``--concrete-data``, else ``CONCRETE_DATA``)."""
    return named(config.getoption("--concrete-data"))


def pytest_addoption(parser):
    group = parser.getgroup("claims", "executable-specification claims")
    group.addoption("--concrete-data", default=None, metavar="PATH",
                    help="the concrete data (.xls/.csv, or a folder holding one)")
    group.addoption("--require-data", action="store_true",
                    help="missing concrete data is an error, not a skip")


def pytest_configure(config):
    source = named_source(config)
    if config.getoption("help", False):
        return
    # lazily: the loader reads NumPy, which pytest's start-up does not need
    from support.lab.data import DataError, describe_source, load_concrete
    config.stash[DATA_SOURCE] = describe_source(source)
    if source is None:
        return
    try:
        config.stash[_TABLE] = load_concrete(source)
    except DataError as exc:
        raise pytest.UsageError(f"--concrete-data / {VARIABLE}: {exc}") from None


@pytest.fixture(scope="session")
def concrete(request):
    """The verified UCI concrete table: the path named (checked at start-up), else the user
    cache, else the copy that ships with the suite. Only if that copy is missing too does it
    skip with the way to get the data (an error under --require-data); a wrong file is an
    error."""
    from support.lab.data import load_concrete, missing_message, resolve
    table = request.config.stash.get(_TABLE, None)
    if table is not None:
        return table
    if resolve()[0] == "none":
        if request.config.getoption("--require-data"):
            pytest.fail(missing_message() + " (--require-data)", pytrace=False)
        pytest.skip(missing_message())
    return load_concrete()
