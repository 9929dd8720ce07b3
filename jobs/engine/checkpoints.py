"""The embedded store's write-ahead-log checkpoints, on a thread of their own."""

from __future__ import annotations

import sqlite3
import threading

from .errors import StoreFileError


class Checkpointer:
    """Copies the write-ahead log back into the store file on a thread of its own.

    SQLite does it inside a commit once the log holds 1000 pages (``wal_autocheckpoint``),
    under the write lock, for milliseconds (fsyncs): every few hundred commits one commit
    stalls every writer, which is the tail of job latency.  Here commits leave it to this
    thread, which runs a PASSIVE checkpoint (it blocks neither writers nor readers) after
    every ``EVERY`` commits of this process (as many as SQLite's default: a one-write commit
    adds a page; waking the thread costs the committing thread a switch, so not more
    often).  The in-commit checkpoint stays as a safety net, at ``SAFETY_PAGES``, for a
    store written by many processes of few commits each."""

    EVERY = 1000
    SAFETY_PAGES = 20_000  # ~80 MB of log

    def __init__(self, db):
        self._db = db
        self._commits = 0
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False
        self.rounds = 0  # checkpoints run (for tests and curious people)

    def committed(self) -> None:
        self._commits += 1  # (unlocked: an approximate count is enough)
        if self._commits >= self.EVERY:
            self._commits = 0
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
            while True:
                self._event.wait()
                self._event.clear()
                if self._closed:
                    return
                try:
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                    self.rounds += 1
                except sqlite3.DatabaseError:
                    pass  # (another process is checkpointing; the next round catches up)
        finally:
            conn.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._event.set()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=10)
