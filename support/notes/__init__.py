"""The notes themselves: ``locate`` finds each claim's sentence in a copy of the notes (by a
fingerprint of its words, never by a copy of its text), ``pin`` writes those fingerprints
into the claims' entries, ``pages`` annotates the notes with a run's verdicts (one
self-contained HTML page per document, its mathematics rendered by ``tex``, a measured figure
written by ``measured``), ``errata`` lists what to correct and ``patch`` makes the corrections
in the notes' own text. Imports ``reports``, ``rules`` and ``machine``; nothing of
``harness``.
"""
