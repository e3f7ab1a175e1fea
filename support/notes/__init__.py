"""The notes themselves: ``locate`` finds each claim's sentence in a copy of the notes (by a
fingerprint of its words, never by a copy of its text), ``pin`` writes those fingerprints
into the registry, ``pages`` annotates the notes with a run's verdicts (one self-contained
HTML page per document, its mathematics rendered by ``tex``) and ``errata`` lists what to
correct, with the patch of the notes that makes the corrections. Imports ``reports``, ``rules``
and ``machine``; nothing of ``harness``.
"""
