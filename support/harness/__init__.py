"""The harness: the in-process pytest wiring that turns claim tests into verdicts and a run
into a report.

``plugin`` (selection, outcomes, expectations, the report at the end), ``session`` (the run's
state, stashed on the config: the plugins share it and import none of each other),
``recorder`` (the ``claim`` fixture's object), ``timed`` (the timing method's pytest side:
settling a ratio, recording times and estimates, benchmarks), ``concrete_data`` (the data's
option, variable and ``concrete`` fixture), ``device_marks`` (a test's devices) and
``device_options`` (``--only-device``, ``--require-device``), ``timing_lock`` (timing tests
run alone; the other tests' share of the cores), ``schedule`` (the order tests start in under
``-n``), ``shutdown`` (the frameworks' exit messages dropped), ``claim_modules`` (the claim
test modules imported: every control registered) and ``control_options`` (the controls'
pytest options). The plugins import no framework and nothing of ``lab`` at module top, so
pytest's start-up loads no torch. Imports every wing below; the commands sit above it.
"""
