"""Wake-ups for commits that other processes make to an embedded store file.

SQLite appends every commit to the store's write-ahead log (``PATH-wal``) with write(2),
so on Linux an inotify watch sees each commit of any process at once: nothing to do for
the committer, no wake-ups while the store is quiet.  The watch is on the store's
directory, not on the log itself, because SQLite deletes the log when the last
connection closes and creates it again with the next one.

Where inotify is missing (another system, or the per-user limit of inotify instances
reached), :meth:`Doorbell.open` returns None and the caller polls instead.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import math
import os
import select
import struct

IN_MODIFY = 0x00000002
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_Q_OVERFLOW = 0x00004000
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len; then len bytes of NUL-padded name

_libc: ctypes.CDLL | None | bool = None  # False: looked, not available


def _inotify() -> ctypes.CDLL | None:
    global _libc
    if _libc is None:
        try:
            lib = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
            lib.inotify_init1.argtypes = [ctypes.c_int]
            lib.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
            _libc = lib
        except (OSError, AttributeError):
            _libc = False
    return _libc or None


class Doorbell:
    """Rings when a commit lands in one store file's log, or when :meth:`ring` is called
    (by this process: a local commit, a new watch, close).  One thread waits on it."""

    def __init__(self, fd: int, log_name: bytes):
        self._fd, self._log_name = fd, log_name
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._poll = select.poll()
        self._poll.register(fd, select.POLLIN)
        self._poll.register(self._wake_r, select.POLLIN)

    @classmethod
    def open(cls, path: str) -> Doorbell | None:
        """A doorbell for the store file ``path``, or None where inotify is not available."""
        libc = _inotify()
        if libc is None:
            return None
        fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            return None
        directory = os.path.dirname(os.path.abspath(path))
        if libc.inotify_add_watch(fd, os.fsencode(directory), IN_MODIFY | IN_CREATE | IN_MOVED_TO) < 0:
            os.close(fd)
            return None
        return cls(fd, os.fsencode(os.path.basename(path)) + b"-wal")

    def ring(self) -> None:
        try:
            os.write(self._wake_w, b"\0")
        except (BlockingIOError, OSError):  # the pipe is full (a ring is pending) or closed
            pass

    def clear(self) -> None:
        """Forget rings so far (their cause has been seen to)."""
        self._drain(self._wake_r)

    def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds; True if the store's log was written or
        :meth:`ring` was called since the last wait (False: nothing, or other files)."""
        rang = False
        for fd, _mask in self._poll.poll(max(0, math.ceil(timeout * 1000))):
            if fd == self._wake_r:
                rang = self._drain(self._wake_r) is not None or rang
            else:
                rang = self._logged(self._drain(fd) or b"") or rang
        return rang

    def _logged(self, events: bytes) -> bool:
        """Whether the inotify ``events`` include a write to the store's log (or lost
        some: a queue overflow)."""
        offset = 0
        while offset + _EVENT.size <= len(events):
            _wd, mask, _cookie, length = _EVENT.unpack_from(events, offset)
            offset += _EVENT.size
            name = events[offset:offset + length].rstrip(b"\0")
            offset += length
            if mask & IN_Q_OVERFLOW or name == self._log_name:
                return True
        return False

    @staticmethod
    def _drain(fd: int) -> bytes | None:
        chunks = []
        while True:
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks) if chunks else None

    def close(self) -> None:
        for fd in (self._fd, self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass
