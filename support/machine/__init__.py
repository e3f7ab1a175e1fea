"""The machine a run measures on: ``environment`` (versions, CPU, threads, BLAS, precision
switches), ``fingerprint`` (those put together for a report), ``devices`` (the one device
table), ``timing`` (the one timing method; ``estimates`` its statistics and intervals),
``load`` (how many cores other work kept busy during a trial), ``sensitivity`` (what that load
was measured to do to each timing figure), ``memory`` (allocator and tensor readings) and
``locks`` (file locks). The bottom wing: it imports nothing else of the suite.
"""
