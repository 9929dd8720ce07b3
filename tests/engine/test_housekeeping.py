"""The embedded engine's housekeeping, kept off the commit path: WAL checkpoints on a
thread of their own, and the log started over once it is long.  (The commit history's bounds: ``test_history.py``.)"""

from __future__ import annotations

import math
import os
import sqlite3
import threading
import time

import pytest
from waiting import DEADLINE, wait_until

from jobs.engine import store
from jobs.engine.checkpoints import Checkpointer
from jobs.engine.embedded import EmbeddedDatabase

PAGE = b"v" * (store.PAGE_BYTES * 3 // 4)  # (a value of about a page)


def test_checkpoints_run_outside_commits(tmp_path):
    path = str(tmp_path / "jobs.sqlite")
    db = EmbeddedDatabase(path)
    try:
        conn = db._connect()
        assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == Checkpointer.SAFETY_PAGES
        conn.close()
        for i in range(3 * Checkpointer.EVERY):
            tr = db.create_transaction()
            tr.set(b"k%d" % i, b"v" * 100)
            tr.commit().wait()
        deadline = time.monotonic() + 30
        while db._checkpointer.rounds < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert db._checkpointer.rounds >= 1
        tr = db.create_transaction()
        assert tr.get(b"k0").wait() == b"v" * 100
    finally:
        db.close()
    assert not db._checkpointer._thread.is_alive()


def _commit_pages(db, n: int, start: int = 0) -> None:
    """``n`` commits, each reading a key (a read snapshot, as a worker's) and writing about
    a page."""
    for i in range(start, start + n):
        tr = db.create_transaction()
        tr.get(b"k%d" % (i - 1)).wait()
        tr.set(b"k%d" % i, PAGE)
        tr.commit().wait()


def _commit_until(db, done, start: int) -> int:
    """Commit pages (100 at a time) until ``done()`` (a restart runs after some of them, on
    the checkpointer's thread: under load one may find a reader it waited for in vain, so
    tests count on no one in particular); the next key number."""
    deadline = time.monotonic() + DEADLINE
    while not done():
        assert time.monotonic() < deadline
        _commit_pages(db, 100, start)
        start += 100
    return start


def _restart_now(db) -> None:
    """A restart of the log, run here (none under way meanwhile: it goes on until one is done)."""
    checkpointer, conn = db._checkpointer, db._connect()
    conn.execute("PRAGMA busy_timeout = 0")  # (as the checkpointer's own)
    try:
        restarts = checkpointer.restarts
        assert wait_until(lambda: checkpointer._restart(conn) or checkpointer.restarts > restarts)
    finally:
        conn.close()


@pytest.fixture
def short_log(monkeypatch):
    """A checkpointer that starts the log over at 100 pages (a round every 20 commits),
    trying again 0.05 s after a restart given up (doubling)."""
    monkeypatch.setattr(Checkpointer, "EVERY", 20)
    monkeypatch.setattr(Checkpointer, "RESTART_PAGES", 100)
    monkeypatch.setattr(Checkpointer, "RESTART_BACKOFF", 0.05)


def test_a_long_log_is_started_over(tmp_path, short_log):
    """Copying the log back does not shorten it: beside writers whose snapshots are in it,
    SQLite never starts it over, and it grew to SAFETY_PAGES.  Once it holds RESTART_PAGES
    the checkpointer starts it over, and the next write cuts its file to RESTART_PAGES."""
    path = str(tmp_path / "jobs.sqlite")
    with EmbeddedDatabase(path) as db:
        _commit_pages(db, 1000)  # (some 1000 pages of log if never started over)
        end = _commit_until(db, lambda: db._checkpointer.restarts >= 3, 1000)
        _commit_pages(db, 300, start=end)  # (300 pages more, then a restart and a write)
        _restart_now(db)
        _commit_pages(db, 1, start=end + 300)
        assert os.path.getsize(path + "-wal") <= Checkpointer.log_limit_bytes(store.PAGE_BYTES)
        tr = db.create_transaction()
        assert [tr.get(b"k%d" % i).wait() for i in (0, 999, end + 300)] == [PAGE] * 3


def test_a_reader_in_the_log_delays_its_restart_and_loses_nothing(tmp_path, short_log, monkeypatch):
    """A snapshot held open keeps the log from starting over: a restart waits
    RESTART_WAIT_MS for it, gives up, and is tried again only after a back-off that doubles
    (not at every round: each try stalls every commit); commits go on meanwhile, and the
    log starts over once the reader ends."""
    monkeypatch.setattr(Checkpointer, "EVERY", 1)
    path = str(tmp_path / "jobs.sqlite")
    with EmbeddedDatabase(path) as db:
        _commit_pages(db, 10)
        reader = db.create_transaction()
        assert reader.get(b"k5").wait() == PAGE  # (its snapshot: in the log)
        checkpointer = db._checkpointer
        began = time.monotonic()
        _commit_pages(db, 1000, start=10)
        assert wait_until(lambda: checkpointer.restarts_busy >= 1)
        assert checkpointer.restarts == 0
        # (a round after every commit here; tries 0.05 s apart, then 0.1, 0.2, ...)
        elapsed = time.monotonic() - began
        assert checkpointer.restarts_busy <= 2 + math.log2(1 + elapsed / Checkpointer.RESTART_BACKOFF)
        assert not reader.get(b"k300").wait().present()  # (still its snapshot)
        reader.reset()
        _commit_until(db, lambda: checkpointer.restarts >= 1, 1010)
        tr = db.create_transaction()
        assert [tr.get(b"k%d" % i).wait() for i in (0, 500, 1009)] == [PAGE] * 3


def test_a_committer_ends_its_snapshot_before_waiting_for_the_write_lock(tmp_path):
    """A commit that finds the write lock taken (by another process) will find its
    snapshot stale once it gets it: it ends the snapshot before waiting, so that a
    checkpoint under that lock can start the log over meanwhile."""
    path = str(tmp_path / "jobs.sqlite")
    with EmbeddedDatabase(path) as db, EmbeddedDatabase(path) as other:  # (other: its own flock)
        _commit_pages(db, 3)
        tr = db.create_transaction()
        tr.get(b"k1").wait()
        tr.set(b"mine", b"v")
        other._writer.acquire()
        try:
            committer = threading.Thread(target=lambda: tr.commit().wait(), daemon=True)
            committer.start()
            assert wait_until(lambda: tr._conn is not None and not tr._conn.in_transaction)
            assert committer.is_alive()  # (waiting for the lock, its snapshot ended)
        finally:
            other._writer.release()
        committer.join(DEADLINE)
        assert not committer.is_alive()
        assert db.create_transaction().get(b"mine").wait() == b"v"


def test_a_log_that_cannot_start_over_is_logged(tmp_path, short_log, caplog):
    """A reader that never ends its snapshot keeps the log growing: every WARN_AFTER
    restarts given up in a row say so (nothing fails, so nothing else would)."""
    path = str(tmp_path / "jobs.sqlite")
    with EmbeddedDatabase(path) as db:
        _commit_pages(db, 10)
        reader = db.create_transaction()
        reader.get(b"k5").wait()
        checkpointer = db._checkpointer
        with caplog.at_level("WARNING", logger="jobs.engine"):
            _commit_until(db, lambda: checkpointer.restarts_busy >= Checkpointer.WARN_AFTER, 10)
            assert wait_until(lambda: any("cannot start over" in r.getMessage() for r in caplog.records))
        assert checkpointer.restarts == 0
        reader.reset()


def _page_size(path: str) -> int:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("PRAGMA page_size").fetchone()[0]
    finally:
        conn.close()


def test_a_new_store_has_small_pages(tmp_path):
    path = str(tmp_path / "new.sqlite")
    with EmbeddedDatabase(path) as db:
        conn = db._connect()
        try:
            limit = conn.execute("PRAGMA journal_size_limit").fetchone()[0]
            assert limit == Checkpointer.log_limit_bytes(store.PAGE_BYTES)
        finally:
            conn.close()
    assert _page_size(path) == store.PAGE_BYTES < 4096


def test_a_restart_that_meets_another_process_checkpoint_is_no_reader_staying(tmp_path, short_log, caplog):
    """SQLite answers -1 pages when another process's checkpoint holds the log: that is not
    a reader staying in it, so it neither backs off nor warns; the next round tries again."""

    class Busy:  # (a connection whose checkpoints all meet another process's)
        def execute(self, _sql):
            return self

        def fetchone(self):
            return (1, -1, -1)

    path = str(tmp_path / "jobs.sqlite")
    with EmbeddedDatabase(path) as db:
        checkpointer = db._checkpointer
        with caplog.at_level("WARNING", logger="jobs.engine"):
            for _ in range(Checkpointer.WARN_AFTER + 1):
                checkpointer._restart(Busy())
        assert (checkpointer.restarts, checkpointer.restarts_busy, checkpointer._retry_at) == (0, 0, 0.0)
        assert not [r for r in caplog.records if "cannot start over" in r.getMessage()]
