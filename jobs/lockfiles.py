"""Lock files of one machine, shared by its processes: an exclusive ``flock`` on an empty
file in a directory of the machine's temporary directory (``places.py``'s slots,
``processors/turns.py``'s turns), and the removal of those files.

A lock file is named after what it locks (a store id, and a slot or the types served), so
a machine would gather files for every store its processes ever used: thousands after a
few test-suite runs.  So the process holding a file's lock may remove the file
(:func:`remove`: unlink it, then unlock), and whoever takes a lock checks that the file
it locked is still the one at its path (:func:`current`), else takes the path's new
file: a lock on a removed file excludes no one.  Files left by processes that died are
removed by :func:`sweep`, now and then (:func:`directory`), once they are old and free.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
import threading
import time

TRIES = 3  # files a take tries at one path (each removed by another process meanwhile)
STALE = 3600.0  # seconds since a file was made before a sweep removes it (if free)
SWEEP_EVERY = 600.0  # seconds between a process's sweeps of one directory
SWEEP_LIMIT = 2000  # files one sweep removes at most

_swept: dict[str, float] = {}  # directory -> when this process last swept it (monotonic)
_sweeping = threading.Lock()


def directory(name: str) -> str | None:
    """The lock directory ``name`` in the machine's temporary directory, made if missing
    (swept in the background if this process has not lately); None if it cannot be made."""
    path = os.path.join(tempfile.gettempdir(), name)
    try:
        os.makedirs(path, exist_ok=True)
    except OSError:
        return None
    _sweep_soon(path)
    return path


def open_file(path: str) -> int:
    """A new descriptor of the lock file ``path`` (made if missing), not inherited by exec."""
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)


def current(fd: int, path: str) -> bool:
    """Whether ``fd`` is the file at ``path`` now (not one removed since it was opened)."""
    try:
        here, there = os.fstat(fd), os.stat(path)
    except OSError:
        return False
    return (here.st_ino, here.st_dev) == (there.st_ino, there.st_dev)


def try_lock(path: str) -> int | None:
    """A new descriptor holding the lock of ``path`` now; None if another holds it (or
    the file system has no locks).  OSError if the file cannot be opened."""
    for _ in range(TRIES):
        fd = open_file(path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # (held: BlockingIOError; or no locks here)
            os.close(fd)
            return None
        if current(fd, path):
            return fd
        os.close(fd)  # (removed meanwhile: the path's new file, if any, is the lock)
    return None


def remove(fd: int, path: str, _unlink=os.unlink, _close=os.close) -> None:
    """Remove the lock file ``path`` whose lock ``fd`` holds, and close ``fd`` (unlocking
    it).  (``os`` bound: this may run from a ``__del__`` at interpreter exit.)"""
    try:
        _unlink(path)
    except OSError:
        pass
    try:
        _close(fd)
    except OSError:
        pass


def sweep(path: str, older_than: float = STALE, limit: int = SWEEP_LIMIT) -> int:
    """Remove the files of the lock directory ``path`` made more than ``older_than``
    seconds ago and free now, ``limit`` at most; how many were removed."""
    removed, before = 0, time.time() - older_than
    try:
        entries = list(os.scandir(path))
    except OSError:
        return 0
    for entry in entries:
        if removed >= limit:
            break
        try:
            if entry.stat(follow_symlinks=False).st_mtime > before or not entry.is_file(follow_symlinks=False):
                continue
            fd = try_lock(entry.path)
        except OSError:
            continue
        if fd is not None:
            remove(fd, entry.path)
            removed += 1
    return removed


def _sweep_soon(path: str) -> None:
    """Sweep ``path`` in a thread of its own, unless this process did within SWEEP_EVERY."""
    now = time.monotonic()
    with _sweeping:
        last = _swept.get(path)
        if last is not None and now - last < SWEEP_EVERY:
            return
        _swept[path] = now
    threading.Thread(target=sweep, args=(path,), name="jobs-lockfiles-sweep", daemon=True).start()
