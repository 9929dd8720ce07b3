"""Armed watches of an embedded database, and the thread that fires them."""

from __future__ import annotations

import os
import threading
import time

from . import errors as E
from .doorbell import Doorbell
from .errors import FDBError, StoreFileError
from .futures import Future

from .limits import MAX_WATCHES

UNKNOWN = object()  # a watch baseline that differs from every value


class Watches:
    """Armed watches of one database: ``key -> [(baseline value, future)]``.

    A daemon thread re-reads the watched keys whenever the store changes: at once after a
    local commit (``poke``), and for other processes' commits as soon as the store's
    doorbell rings (inotify on its log; see ``doorbell.py``).  Without a doorbell it polls
    SQLite's ``data_version`` every few milliseconds while any watch is armed; with one it
    still looks now and then (``BELL_SAFETY``), and goes back to polling for good if it
    finds commits that the doorbell missed (a filesystem that does not report them)."""

    POLL_MIN = 0.0005  # also the least time between two checks: a busy store wakes the thread often
    POLL_MAX = 0.004
    BELL_SAFETY = 0.25
    BELL_MISSES = 3  # unannounced commits seen before the doorbell is given up

    def __init__(self, db):
        self._db = db
        self._cond = threading.Condition()
        self._armed: dict[bytes, list[tuple[object, Future]]] = {}
        self._poked = False
        self._thread: threading.Thread | None = None
        self._closed = False
        self._bell: Doorbell | None = None  # set and cleared under _cond by the thread

    def count(self) -> int:
        return sum(len(v) for v in self._armed.values())

    def add(self, key: bytes, baseline, future: Future) -> None:
        with self._cond:
            if self.count() >= MAX_WATCHES:
                future.set_error(FDBError(E.TOO_MANY_WATCHES))
                return
            self._armed.setdefault(key, []).append((baseline, future))
            future.on_ready(lambda f, key=key: self._forget(key, f))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="jobs-watches", daemon=True)
                self._thread.start()
            self._wake()  # check the baseline against the store at once

    def _wake(self) -> None:
        """(Under _cond.)  Make the thread look at the store now, wherever it waits."""
        self._poked = True
        self._cond.notify()
        if self._bell is not None:
            self._bell.ring()

    def _forget(self, key: bytes, future: Future) -> None:
        with self._cond:
            items = self._armed.get(key)
            if items:
                items[:] = [(b, f) for b, f in items if f is not future]
                if not items:
                    del self._armed[key]

    def poke(self) -> None:
        if self._armed:
            with self._cond:
                self._wake()

    def _fail_all(self, error: FDBError) -> None:
        armed, self._armed = self._armed, {}
        for items in armed.values():
            for _b, f in items:
                f.set_error(error)

    def close(self) -> None:
        """Fail armed watches and stop the thread (joined, so the store can be deleted)."""
        with self._cond:
            self._closed = True
            self._fail_all(FDBError(E.OPERATION_CANCELLED))
            self._wake()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=10)

    def _run(self) -> None:
        with self._cond:
            if self._closed:
                return
            try:  # under the lock: close() cannot delete a memory store meanwhile
                conn = self._db._connect()
            except StoreFileError:
                self._fail_all(FDBError(E.OPERATION_CANCELLED, "store is gone"))
                return
            if os.environ.get("JOBS_EMBEDDED_WATCHES", "inotify") != "poll":
                self._bell = Doorbell.open(self._db.path)
        bell = self._bell
        misses = 0
        try:
            last_version, last_check = None, 0.0
            interval = self.POLL_MIN
            rang = False  # the doorbell rang and no new commit was seen since
            while True:
                with self._cond:
                    while not self._armed and not self._closed:
                        self._cond.wait()
                    if self._closed:
                        return
                    if not self._poked and bell is None:
                        self._cond.wait(interval)
                    waiting = not self._poked and bell is not None
                ring = False
                if waiting:
                    ring = bell.wait(interval)
                    rang = rang or ring
                    pause = last_check + self.POLL_MIN - time.monotonic()
                    if ring and pause > 0 and not self._poked:  # a burst of commits: one look for all
                        time.sleep(pause)
                with self._cond:
                    if self._closed:
                        return
                    poked, self._poked = self._poked, False
                    if poked and bell is not None:
                        bell.clear()  # (rung with the poke, under this lock)
                    keys = list(self._armed)
                version = conn.execute("PRAGMA data_version").fetchone()[0]
                if not poked and version == last_version:
                    if bell is None:
                        interval = min(interval * 1.25, self.POLL_MAX)
                    elif rang:  # the log is being written; the commit shows once it is whole
                        interval = self.POLL_MIN if ring else min(interval * 1.25, self.BELL_SAFETY)
                    else:
                        interval = self.BELL_SAFETY
                    continue
                if waiting and not rang and not poked and last_version is not None and not bell.wait(0):
                    # Another process committed and the doorbell did not say so (its event
                    # would be queued by now: inotify queues it in the write itself).
                    misses += 1
                    if misses >= self.BELL_MISSES:
                        with self._cond:
                            self._bell = None
                        bell.close()
                        bell = None
                # (with a doorbell, the next commit rings: no need to look again soon)
                last_version, interval = version, self.POLL_MIN if bell is None else self.BELL_SAFETY
                rang, last_check = False, time.monotonic()
                self._check(conn, keys)
        finally:
            with self._cond:
                self._bell = None
            if bell is not None:
                bell.close()
            conn.close()

    def _check(self, conn, keys: list[bytes]) -> None:
        current = {}
        for key in keys:
            row = conn.execute("SELECT v FROM kv WHERE k = ?", (key,)).fetchone()
            current[key] = row[0] if row else None
        fired = []
        with self._cond:
            for key, value in current.items():
                for baseline, future in self._armed.get(key, ()):
                    if baseline is UNKNOWN or baseline != value:
                        fired.append(future)
        for future in fired:
            future.set_result(None)
