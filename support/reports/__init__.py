"""Reports of runs: ``report`` (one run's claims.json, claims.md and terminal summary),
``controlled`` (what a report says of the claims' controls), ``runs`` (runs as data: claims
reports and benchmark files), ``kept`` (what runs kept from other machines say of the claims a
run skipped), ``diff`` (two runs compared), ``keep`` (a run kept in claims/history/),
``matrix`` (many runs side by side), ``benchmarks`` (their benchmarks as rows), ``page``
(report blocks rendered as Markdown and HTML), and the notes' figures redrawn (``figure_data``
reads what they draw, ``plotting`` the drawing helpers, ``panels`` one function per figure,
``figures`` draws them all). Imports ``lab`` (the bowl of the Adam figures), ``rules`` and
``machine``; never ``notes`` or ``harness``.
"""
