"""Locks between processes (xdist workers, the experiments' pool): one home for the file
locks the suite takes. ``fcntl.flock`` on POSIX; on Windows ``msvcrt.locking`` gives an
exclusive lock only (a shared request is taken exclusively there); where neither exists
the block runs unlocked and the lock yields False, so callers can fall back to not sharing.
"""
from __future__ import annotations

import contextlib
import os

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None
try:
    import msvcrt
except ImportError:  # POSIX
    msvcrt = None


@contextlib.contextmanager
def file_lock(path: os.PathLike, shared: bool = False):
    """Hold a lock on ``path`` (created if absent) for the ``with`` block: exclusive, or
    shared with other shared holders. Yields whether a lock is held."""
    with open(path, "a+b") as fh:
        if fcntl is not None:
            fcntl.flock(fh, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
            try:
                yield True
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)
        elif msvcrt is not None:
            fh.seek(0)
            while True:
                try:
                    msvcrt.locking(fh.fileno(), msvcrt.LK_LOCK, 1)   # retries for ~10 s
                    break
                except OSError:
                    continue
            try:
                yield True
            finally:
                fh.seek(0)
                msvcrt.locking(fh.fileno(), msvcrt.LK_UNLCK, 1)
        else:
            yield False
