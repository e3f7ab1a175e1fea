"""The rules each claim is judged by: ``registry`` (the claims as their section files state
them beside the tests: figures, bounds, requirements), ``expectations`` (known verdicts),
``verdicts`` (the vocabulary and its rules), ``tolerances`` (the one table, bands and bounds),
``error_models`` (rounding bounds of properties), ``sources`` (what the test sources say, read
without running them), ``formatting`` (numbers as reports print them) and ``scaffold`` (where
a claim's entry and tests go, and a new claim's entry and test stub written there). Imports
only ``machine``.
"""
