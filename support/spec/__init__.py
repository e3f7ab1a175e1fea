"""What the notes say and how a measurement is judged against it: ``registry`` (the claims,
their figures and requirements), ``expectations`` (known verdicts), ``verdicts`` (the
vocabulary and its rules), ``tolerances`` (the one table, bands and bounds),
``error_models`` (rounding bounds of properties), ``sources`` (what the test sources say,
read without running them) and ``formatting`` (numbers as reports print them). Imports only
``machine``.
"""
