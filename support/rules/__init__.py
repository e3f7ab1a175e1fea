"""The rules each claim is judged by: ``entries`` (the claims as their section files state
them beside the tests: figures, bounds, requirements), ``expectations`` (known verdicts),
``verdicts`` (the vocabulary and its rules), ``tolerances`` (the one table, bands and bounds),
``error_models`` (rounding bounds of properties), ``controls`` (what a negative, positive or
level control is, what its outcome under one session means and what it may change),
``control_summary`` (what a claim's controls add up to, and this machine's ledger of their
last outcomes), ``sources`` (what the test sources say, read without running them),
``formatting`` (numbers as reports print them) and ``scaffold`` (where a claim's entry and
tests go, and a new claim's entry and test stub written there). Imports only ``machine``.
"""
