"""The harness: the pytest plugins that turn claim tests into verdicts and a run into a report.

``plugin`` (selection, outcomes, expectations, the report at the end), ``session`` (the run's
state, stashed on the config: the plugins share it and import none of each other),
``recorder`` (the ``claim`` fixture's object), ``device_options`` (``--only-device``,
``--require-device``), ``timing_lock`` (timing tests run alone; the other tests' share of the
cores), ``schedule`` (the order tests start in under ``-n``), ``claim_modules`` (the claim
test modules imported: every control registered), ``controls`` (the negative controls'
runner) and ``control_options`` (their pytest options), the runners built on the test command: ``stability`` (N runs, what moved) and
``gpu_run`` (the GPU tier in one folder), and ``contributor`` (``new-claim``: a claim written
in its place and pinned to its sentence; ``check-claim``: the checks one claim must pass).
The plugins import no framework and nothing of ``lab`` at module top, so pytest's start-up
loads no torch. The top wing: it may import every other.
"""
