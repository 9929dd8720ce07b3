"""The directories of ``memory:`` stores (``EmbeddedDatabase(memory=True)``), in RAM under
/dev/shm where it can be written.

A memory store's directory is removed by its ``close``.  A process that exits without
closing it (killed, a forked child ending with ``os._exit``, a script that never closes)
would leave it for good: RAM lost until the machine restarts (over a hundred such
directories had gathered here after a few days of test runs).  So each directory holds
an *owner* file whose lock (shared) its process holds, with the children it forks (they
share the descriptor, and may use the store), and the next process that makes a memory
store removes the directories whose owners have all gone (:func:`sweep`).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
import threading
import time

PREFIX = "jobs-memory-"
OWNER = "owner"  # the file whose lock the store's processes hold
YOUNG = 60.0  # seconds: a directory this new may not have its owner's lock yet
SWEEP_EVERY = 600.0  # seconds between one process's sweeps

_swept = [float("-inf")]  # when this process last swept (monotonic)
_sweeping = threading.Lock()


def base() -> str:
    """Where memory stores' directories are made: /dev/shm (RAM) if writable."""
    return "/dev/shm" if os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()


def make() -> tuple[str, int]:
    """A new directory for a memory store, and the descriptor holding its owner lock
    (sweeping the others first if this process has not lately)."""
    where = base()
    _sweep_now_and_then(where)
    path = tempfile.mkdtemp(prefix=PREFIX, dir=where)
    try:
        fd = os.open(os.path.join(path, OWNER), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError:
        shutil.rmtree(path, ignore_errors=True)
        raise
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
    except OSError:  # (a file system without locks: no sweep can take it either)
        pass
    return path, fd


def remove(path: str, fd: int | None) -> None:
    """Remove a memory store's directory (its ``close``), then let its owner lock go."""
    shutil.rmtree(path, ignore_errors=True)
    if fd is not None:
        try:
            os.close(fd)
        except OSError:
            pass


def sweep(where: str | None = None) -> int:
    """Remove the memory stores' directories in ``where`` (:func:`base`) whose owners all
    ended without closing them; how many were removed.  A directory without an owner file
    is left alone: nothing tells whether a process still uses it."""
    where = base() if where is None else where
    removed, now = 0, time.time()
    try:
        entries = [e for e in os.scandir(where) if e.name.startswith(PREFIX)]
    except OSError:
        return 0
    for entry in entries:
        try:
            if not entry.is_dir(follow_symlinks=False) or now - entry.stat(follow_symlinks=False).st_mtime < YOUNG:
                continue
            fd = os.open(os.path.join(entry.path, OWNER), os.O_RDWR | os.O_CLOEXEC)
        except OSError:  # (another user's, without an owner file, or gone meanwhile)
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # (an owner lives)
            os.close(fd)
            continue
        remove(entry.path, fd)
        removed += 1
    return removed


def _sweep_now_and_then(where: str) -> None:
    now = time.monotonic()
    with _sweeping:
        if now - _swept[0] < SWEEP_EVERY:
            return
        _swept[0] = now
    sweep(where)
