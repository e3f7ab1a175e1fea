"""pytest plugin for device claims: ``--require-device``, ``--only-device``, and the device
fingerprint in pytest-benchmark's ``machine_info``.

* A test marked ``needs_device("cuda", ...)`` (see :func:`support.harness.device_marks.needs`
  and :func:`support.harness.device_marks.params`) is skipped, with the reason, when a device is absent.
* ``--require-device cuda`` (repeatable, or comma-separated) turns those "absent" skips into
  errors, and fails the run at the end if no test needing CUDA actually executed: a GPU run
  that silently skipped everything cannot pass.
* ``--only-device cpu`` (or ``cuda``...) keeps only the device variants of that device (a JAX
  variant counts with the hardware it runs on: ``jax:cpu`` with ``cpu``, ``jax:gpu`` with
  ``cuda``); tests that need no device are kept. :mod:`support.commands.gpu_steps` uses it to
  write one benchmark file per device.
* With pytest-benchmark installed, ``machine_info`` gains ``devices`` (the fingerprint of
  every device present, :func:`support.machine.devices.fingerprint`), ``frameworks`` (versions) and
  ``only_device``; each benchmark test also puts its claim ID and device in ``extra_info``.
"""
from __future__ import annotations

import pytest

from support.harness import device_marks
from support.machine import devices

_saved_key = pytest.StashKey[tuple]()
_failed_require_key = pytest.StashKey[list]()
PROP = device_marks.MARK


def _split(values) -> set[str]:
    out: set[str] = set()
    for v in values or []:
        out |= {x.strip() for x in v.split(",") if x.strip()}
    return out


def pytest_addoption(parser):
    group = parser.getgroup("devices", "device claims")
    group.addoption("--require-device", action="append", default=[], metavar="DEV",
                    help="a device that must be present and used (e.g. cuda): absence is an "
                         "error, and the run fails unless a test on it executed")
    group.addoption("--only-device", action="append", default=[], metavar="DEV",
                    help="run only the variants of these devices (cpu, cuda, mps; JAX "
                         "variants count with their hardware); tests needing no device run")


def pytest_configure(config):
    config.addinivalue_line("markers", "needs_device(*devices): the test runs on these devices "
                                       "(skipped with the reason when absent)")
    # the device sets are module state read by support.harness.device_marks; a nested
    # in-process session (pytester) sets its own, so keep this session's and put them back at
    # unconfigure
    config.stash[_saved_key] = (set(device_marks.REQUIRED), set(device_marks.ONLY))
    device_marks.REQUIRED.clear()
    device_marks.REQUIRED.update(_split(config.getoption("--require-device")))
    device_marks.ONLY.clear()
    device_marks.ONLY.update(_split(config.getoption("--only-device")))
    bad = (device_marks.REQUIRED | device_marks.ONLY) - set(devices.KNOWN)
    if bad:
        raise pytest.UsageError(f"unknown device(s) {sorted(bad)}; known: "
                                f"{', '.join(devices.KNOWN)}")
    config.pluginmanager.register(_Executed(), f"support-devices-executed-{id(config)}")
    if config.pluginmanager.hasplugin("benchmark"):
        config.pluginmanager.register(_BenchmarkHooks(), "support-devices-benchmark")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session, config, items):
    if not device_marks.ONLY:
        return
    keep, drop = [], []
    for item in items:
        devs = device_marks.item_devices(item)
        (keep if not devs or device_marks.selected(devs) else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_runtest_setup(item):
    devs = device_marks.item_devices(item)
    if not devs:
        return
    item.user_properties.append((PROP, ",".join(devs)))
    ok, reason = devices.check(devs)
    if ok:
        return
    missing = [d for d in devs if not devices.available(d)]
    required = [d for d in missing if d in device_marks.REQUIRED]
    if required:
        pytest.fail(f"--require-device {','.join(required)}: {reason}", pytrace=False)
    pytest.skip(reason)


def pytest_unconfigure(config):
    required, only = config.stash.get(_saved_key, (set(), set()))
    device_marks.REQUIRED.clear()
    device_marks.REQUIRED.update(required)
    device_marks.ONLY.clear()
    device_marks.ONLY.update(only)


class _Executed:
    """The devices that test variants of this session actually ran on. Registered per
    config, so a nested session keeps its own; the controller sees xdist workers' reports
    through this hook (user_properties travel with them)."""

    def __init__(self):
        self.devices: list[str] = []

    def pytest_runtest_logreport(self, report):
        if report.when != "call":
            return
        if report.skipped and not hasattr(report, "wasxfail"):
            return  # skipped inside the test: it did not run on the device
        for key, value in getattr(report, "user_properties", []):
            if key == PROP:
                self.devices.extend(value.split(","))


def _executed(config) -> list[str]:
    plugin = config.pluginmanager.get_plugin(f"support-devices-executed-{id(config)}")
    return plugin.devices if plugin is not None else []


def pytest_sessionfinish(session, exitstatus):
    config = session.config
    if hasattr(config, "workerinput") or not device_marks.REQUIRED:
        return
    ran = {d: _executed(config).count(d) for d in device_marks.REQUIRED}
    missing = [d for d, n in ran.items() if n == 0]
    config.stash[_failed_require_key] = missing
    if missing:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if hasattr(config, "workerinput") or not device_marks.REQUIRED:
        return
    missing = config.stash.get(_failed_require_key, [])
    ran = {d: _executed(config).count(d) for d in sorted(device_marks.REQUIRED)}
    if missing:
        terminalreporter.write_sep("!", "REQUIRED DEVICE NOT USED", red=True, bold=True)
        for d in missing:
            why = devices.absent_reason(d) if not devices.available(d) else \
                "present, but no test needing it was selected or none executed"
            terminalreporter.write_line(f"--require-device {d}: no test ran on {d}. {why}",
                                        red=True, bold=True)
        terminalreporter.write_line("The run FAILS: a device run that skipped its device "
                                    "proves nothing.", red=True, bold=True)
    else:
        terminalreporter.write_sep("-", "required devices used: " + ", ".join(
            f"{d} ({n} test variants)" for d, n in ran.items()))


class _BenchmarkHooks:
    """Registered only when pytest-benchmark is installed (its hook specs exist then)."""

    def pytest_benchmark_update_machine_info(self, config, machine_info):
        # the run's environment as claims.json describes it: one model for both files
        from support.machine.fingerprint import fingerprint
        machine_info["environment"] = fingerprint()
        machine_info["only_device"] = sorted(device_marks.ONLY) or "all"
