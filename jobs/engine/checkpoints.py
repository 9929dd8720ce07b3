"""The embedded store's write-ahead-log checkpoints, on a thread of their own."""

from __future__ import annotations

import logging
import sqlite3
import threading
import time

from .errors import StoreFileError

log = logging.getLogger("jobs.engine")


class Checkpointer:
    """Copies the write-ahead log back into the store file on a thread of its own, and
    starts the log over once it is long.

    SQLite does the copying inside a commit once the log holds 1000 pages
    (``wal_autocheckpoint``), under the write lock, for milliseconds (fsyncs): every few
    hundred commits one commit stalls every writer, which is the tail of job latency.  Here
    commits leave it to this thread, which runs a PASSIVE checkpoint (it blocks neither
    writers nor readers) after every ``EVERY`` commits of this process (as many as SQLite's
    default: a one-write commit adds a page; waking the thread costs the committing thread
    a switch, and each round copies again the pages written since, so not more often), or
    sooner after commits of many writes (:meth:`committed`).  The in-commit checkpoint
    stays as a safety net, at ``SAFETY_PAGES``, for a store written by many processes of
    few commits each.

    Copying does not shorten the log: SQLite writes it from its start again only when a
    write begins with the whole log copied and no reader in it, which busy writers beside a
    PASSIVE checkpoint never leave, so the log grew to ``SAFETY_PAGES``.  So once it holds
    ``RESTART_PAGES``, this thread takes the store's write lock (no commit adds pages
    meanwhile; a committer that finds the lock taken ends its read snapshot before it
    waits: ``store._WriteLock.acquire``) and runs a RESTART checkpoint, which copies the
    rest and waits, ``RESTART_WAIT_MS`` at most, for the readers still in the log
    (snapshots begun since read the store file); the next write starts the log over,
    and cuts its file to ``RESTART_PAGES`` (:meth:`log_limit_bytes`,
    ``journal_size_limit``).  A restart that found a reader staying longer is tried again
    ``RESTART_BACKOFF`` seconds later at the earliest, twice as long after each one given up
    in a row (``RESTART_BACKOFF_MAX`` at most): a reader that holds its snapshot for long
    would otherwise stall every commit for ``RESTART_WAIT_MS`` each time the log grows
    ``RESTART_PAGES``, which busy writers add within a tenth of a second.  Every
    ``WARN_AFTER`` restarts given up in a row are logged (a warning of the ``jobs.engine``
    logger): such a reader is a bug of its program, and the log grows while it stays."""

    EVERY = 1000
    SAFETY_PAGES = 20_000  # ~40 MB of log
    RESTART_PAGES = 4_000  # ~8 MB of log
    RESTART_WAIT_MS = 20
    WARN_AFTER = 3  # restarts given up in a row before a warning (and every so many after)
    RESTART_POLL = 0.0001  # seconds between a restart's looks for readers left in the log
    RESTART_BACKOFF = 0.1  # seconds before a restart given up is tried again (doubling)
    RESTART_BACKOFF_MAX = 60.0

    def __init__(self, db):
        self._db = db
        self._commits = self._writes = 0
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._retry_at = 0.0  # (monotonic) no restart before, after one given up
        self._backoff = 0.0  # the wait after the last restart given up
        self.rounds = 0  # checkpoints run (for tests and curious people)
        self.restarts = 0  # of them, restarts of the log (it was RESTART_PAGES or longer)
        self.restarts_busy = 0  # restarts given up: a reader stayed in the log
        self._busy_in_a_row = 0

    @classmethod
    def log_limit_bytes(cls, page_bytes: int) -> int:
        """The size a log started over is cut to: ``RESTART_PAGES`` pages of ``page_bytes``."""
        return cls.RESTART_PAGES * page_bytes

    def committed(self, writes: int = 1) -> None:
        """A commit of ``writes`` mutations (each writes a page of the log at most): a round
        after ``EVERY`` commits, or sooner once they made ``RESTART_PAGES`` writes (a bulk
        add's commits write a hundred pages each)."""
        self._commits += 1  # (unlocked: approximate counts are enough)
        self._writes += writes
        if self._commits >= self.EVERY or self._writes >= self.RESTART_PAGES:
            self._commits = self._writes = 0
            with self._lock:
                if self._closed:
                    return
                if self._thread is None or not self._thread.is_alive():
                    self._thread = threading.Thread(target=self._run, name="jobs-checkpoint", daemon=True)
                    self._thread.start()
                self._event.set()

    def _run(self) -> None:
        try:
            conn = self._db._connect()
        except StoreFileError:
            return
        try:
            # (never waits on SQLite's locks: PASSIVE does not, and a restart looks again
            # itself, holding the write lock; another process's checkpoint says busy)
            conn.execute("PRAGMA busy_timeout = 0")
            while True:
                self._event.wait()
                self._event.clear()
                if self._closed:
                    return
                try:
                    _busy, pages, _copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                    self.rounds += 1
                    if pages >= self.RESTART_PAGES and time.monotonic() >= self._retry_at:
                        self._restart(conn)
                except sqlite3.DatabaseError:
                    pass  # (another process is checkpointing; the next round catches up)
        finally:
            conn.close()

    def _restart(self, conn) -> None:
        """A RESTART checkpoint under the store's write lock (see the class).  Its wait for
        the readers still in the log is a loop of attempts ``RESTART_POLL`` apart, not
        SQLite's busy handler, which sleeps a millisecond and more between looks: every
        commit waits while this holds the write lock, and a reader leaves the log within
        a fraction of that (any snapshot begun once it is all copied reads the store
        file instead)."""
        with self._db._write_lock():
            deadline = time.monotonic() + self.RESTART_WAIT_MS / 1000
            while True:
                busy, pages, _copied = conn.execute("PRAGMA wal_checkpoint(RESTART)").fetchone()
                if not busy or time.monotonic() >= deadline:
                    break
                time.sleep(self.RESTART_POLL)
        if busy and pages < 0:  # (-1: another process's checkpoint was under way, not a reader)
            return  # (the next round tries again)
        if busy:
            self.restarts_busy += 1
            self._busy_in_a_row += 1
            self._backoff = min(self.RESTART_BACKOFF_MAX, self._backoff * 2 or self.RESTART_BACKOFF)
            self._retry_at = time.monotonic() + self._backoff
            if self._busy_in_a_row % self.WARN_AFTER == 0:
                log.warning("store %s: its write-ahead log cannot start over (%d restarts given up in a row, the "
                            "last at %d pages): a read snapshot stays in it (a transaction that read and was "
                            "neither committed, reset nor dropped, in this process or another)", self._db.path,
                            self._busy_in_a_row, pages)
        else:
            self.restarts += 1
            self._busy_in_a_row = 0
            self._backoff, self._retry_at = 0.0, 0.0

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._event.set()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=10)
