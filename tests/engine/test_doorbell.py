"""The embedded engine's doorbell (inotify on the store's log): it rings for commits of
other connections, not for other files; watches fire with it, without it, and when it
stays silent (the watch thread notices, gives it up and polls); a ring whose commit has
not settled yet is followed up without waiting on the bell, for a while."""

from __future__ import annotations

import os
import sqlite3
import sys
import threading
import time

import pytest
from enginekit import wait_until

from jobs.engine import watches
from jobs.engine.doorbell import Doorbell
from jobs.engine.embedded import EmbeddedDatabase
from jobs.engine.watches import Watches

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux's")


def _store(tmp_path) -> str:
    path = str(tmp_path / "store.sqlite")
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    return path, conn


def test_rings_for_a_commit_of_another_connection(tmp_path):
    path, conn = _store(tmp_path)
    bell = Doorbell.open(path)
    assert bell is not None
    try:
        bell.wait(0)  # (the set-up's own writes)
        conn.execute("INSERT INTO t VALUES (1)")
        conn.commit()
        assert bell.wait(30)
        assert not bell.wait(0)  # drained
    finally:
        bell.close()
        conn.close()


def test_silent_for_other_files_and_rings_on_request(tmp_path):
    path, conn = _store(tmp_path)
    bell = Doorbell.open(path)
    try:
        bell.wait(0)
        with open(tmp_path / "records.log", "ab") as f:
            f.write(b"x\n")
        with open(tmp_path / "xstore.sqlite-wal", "ab") as f:  # a name that merely ends the same
            f.write(b"x\n")
        assert not bell.wait(0.2)
        bell.ring()
        assert bell.wait(30)
    finally:
        bell.close()
        conn.close()


def test_rings_when_the_log_is_created_again(tmp_path):
    path, conn = _store(tmp_path)
    conn.close()  # the last connection: SQLite removes the log
    assert not os.path.exists(path + "-wal")
    bell = Doorbell.open(path)
    try:
        conn = sqlite3.connect(path)
        conn.execute("INSERT INTO t VALUES (2)")
        conn.commit()
        assert bell.wait(30)
    finally:
        bell.close()
        conn.close()


def _armed(db, key: bytes = b"k") -> threading.Event:
    """A watch on ``key`` armed through ``db``: the event set when it fires."""
    tr = db.create_transaction()
    future = tr.watch(key)
    tr.commit().wait()
    fired = threading.Event()
    future.on_ready(lambda _f: fired.set())
    return fired


def _watch_fires_for_another_handle(tmp_path) -> EmbeddedDatabase:
    """Arm a watch on one handle, commit through another (as another process would: its
    commit pokes only its own handle), and wait for the watch.  Returns the watching db."""
    path = str(tmp_path / "jobs.sqlite")
    watcher, writer = EmbeddedDatabase(path), EmbeddedDatabase(path)
    try:
        fired = _armed(watcher)
        assert not fired.wait(0.1)
        tr = writer.create_transaction()
        tr.set(b"k", b"v")
        tr.commit().wait()
        assert fired.wait(30), "the watch did not fire"
        return watcher
    finally:
        writer.close()


def test_watch_fires_with_the_doorbell(tmp_path):
    watcher = _watch_fires_for_another_handle(tmp_path)
    try:
        assert watcher._watches._bell is not None
    finally:
        watcher.close()


def test_watch_fires_without_a_doorbell(tmp_path, monkeypatch):
    monkeypatch.setattr(Doorbell, "open", classmethod(lambda cls, path: None))
    _watch_fires_for_another_handle(tmp_path).close()


def test_polling_on_request(tmp_path, monkeypatch):
    monkeypatch.setenv("JOBS_EMBEDDED_WATCHES", "poll")
    watcher = _watch_fires_for_another_handle(tmp_path)
    try:
        assert watcher._watches._bell is None
    finally:
        watcher.close()


class _DeafBell(Doorbell):
    """A doorbell on a filesystem that reports nothing: only ring() gets through."""

    def _logged(self, events: bytes) -> bool:
        return False


def test_a_silent_doorbell_is_given_up(tmp_path, monkeypatch):
    monkeypatch.setattr(Watches, "BELL_SAFETY", 0.05)
    monkeypatch.setattr(watches, "Doorbell", _DeafBell)
    path = str(tmp_path / "jobs.sqlite")
    watcher, writer = EmbeddedDatabase(path), EmbeddedDatabase(path)
    try:
        for i in range(Watches.BELL_MISSES):
            fired = _armed(watcher)
            assert not fired.wait(0.2)  # (the thread's first look is done: it waits on the bell)
            tr = writer.create_transaction()
            tr.set(b"k", b"%d" % i)
            tr.commit().wait()
            assert fired.wait(30), "the safety look did not find the commit"
        assert watcher._watches._bell is None
        tr = watcher.create_transaction()
        future = tr.watch(b"k")
        tr.commit().wait()
        tr = writer.create_transaction()
        tr.set(b"k", b"polled")
        tr.commit().wait()
        future.wait()  # (polling: fires quickly; the test's timeout bounds it)
    finally:
        writer.close()
        watcher.close()



class _CountingBell(Doorbell):
    """The doorbell, counting the waits the watch thread makes on it."""

    waits = 0

    def wait(self, timeout: float) -> bool:
        type(self).waits += 1
        return super().wait(timeout)


def _settle_held(tmp_path, monkeypatch, seconds: float):
    """A watcher's thread, the watch on b"k" armed, and a writer whose commit of b"k" has
    rung (its log is written) but is held ``seconds`` before it settles (its version is
    not current yet).  Yields the bell's wait count as the hold begins; the watch fires
    once the commit settles."""
    monkeypatch.setattr(watches, "Doorbell", _CountingBell)
    path = str(tmp_path / "jobs.sqlite")
    watcher, writer = EmbeddedDatabase(path), EmbeddedDatabase(path)
    try:
        fired = _armed(watcher)
        assert not fired.wait(0.2)  # (the thread's first look is done: it waits on the bell)
        holding, settle = threading.Event(), writer._history.settle

        def held_settle(*args):
            holding.set()
            time.sleep(seconds)
            settle(*args)

        writer._history.settle = held_settle
        tr = writer.create_transaction()
        tr.set(b"k", b"v")
        committer = threading.Thread(target=lambda: tr.commit().wait())
        committer.start()
        assert holding.wait(30)
        yield _CountingBell.waits
        committer.join(30)
        assert fired.wait(30)
    finally:
        writer.close()
        watcher.close()


def test_a_rung_commit_not_settled_yet_is_looked_for_again_without_the_bell(tmp_path, monkeypatch):
    """The ring comes with the commit's last write to the log, its version a little later:
    the thread looks again in SETTLE_PAUSE rather than in the bell's shortest wait (a whole
    millisecond, poll(2)'s unit), with no ring left to cut that short."""
    monkeypatch.setattr(Watches, "SETTLE_MAX", 30.0)
    for before in _settle_held(tmp_path, monkeypatch, 0.3):
        time.sleep(0.2)
        assert _CountingBell.waits - before <= 1  # (at most the wait that the ring ended)


def test_a_commit_left_unsettled_is_looked_for_on_the_bell_again_after_settle_max(tmp_path, monkeypatch):
    """(A committer killed under the write lock leaves its commit unsettled until the next
    commit: the thread does not look every SETTLE_PAUSE for long.)"""
    monkeypatch.setattr(Watches, "SETTLE_MAX", 0.05)
    for before in _settle_held(tmp_path, monkeypatch, 3.0):  # (the bell's waits resume within the hold)
        assert wait_until(lambda: _CountingBell.waits - before >= 5, 2.5)
