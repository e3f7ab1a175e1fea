"""The machine a run measures on: ``environment`` (versions, CPU, threads, BLAS, precision
switches), ``fingerprint`` (those put together for a report), ``devices`` (the one device
table), ``timing`` (the one timing method), ``load`` (how much other work can have delayed a
trial), ``memory`` (allocator and tensor readings) and ``locks`` (file locks). The bottom
wing: it imports nothing else of the suite.
"""
