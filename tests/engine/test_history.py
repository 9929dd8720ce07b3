"""The embedded engine's commit history (``jobs/engine/history.py``): the write ranges of
recent commits and the commit counter, in a memory-mapped file beside the store.  Its
bounds (1007 past them, never a missed conflict), a committer killed in the middle of a
commit, restarts, the store format it came with, and what a commit costs SQLite."""

from __future__ import annotations

import fcntl
import marshal
import os
import random
import signal
import sqlite3
import struct
import sys
import threading
import time

import pytest
from enginekit import expect_fdb_error, read, spawn, wait_until
from waiting import DEADLINE

from jobs.engine import commit as commit_module
from jobs.engine import history, watches
from jobs.engine.futures import wait_future
from jobs.engine.embedded import EmbeddedDatabase
from jobs.engine.ranges import merge_ranges
from jobs.engine.urls import StoreOpenError, open_database


@pytest.fixture
def path(tmp_path) -> str:
    return str(tmp_path / "store.sqlite")


def put(db, key: bytes, value: bytes = b"v") -> int:
    tr = db.create_transaction()
    tr.set(key, value)
    tr.commit().wait()
    return tr.get_committed_version()


def reader_of(db, key: bytes):
    """A transaction that has read ``key`` and will write another key: it conflicts with
    any later commit that writes ``key``."""
    tr = db.create_transaction()
    tr.get(key).wait()
    tr.set(b"out/" + key, b"x")
    return tr


def header(db) -> list[int]:
    with open(db.path + "-hist", "rb") as f:
        return list(history._F.unpack(f.read(history._F.size)))


def set_header(db, field: int, value: int) -> None:
    with open(db.path + "-hist", "r+b") as f:
        f.seek(field * 8)
        f.write(struct.pack("<Q", value))


def test_a_full_history_drops_its_oldest_commits_and_older_read_versions_get_1007(path, monkeypatch):
    monkeypatch.setattr(history, "INITIAL_CAPACITY", 64 << 10)
    monkeypatch.setattr(history, "MAX_CAPACITY", 64 << 10)  # no room to grow
    with EmbeddedDatabase(path) as db:
        put(db, b"k")
        old = reader_of(db, b"k")
        for i in range(2000):  # ~128 kB of records: the ring wraps
            put(db, b"filler/%05d" % i)
        recent = reader_of(db, b"k")
        with expect_fdb_error(1007):
            old.commit().wait()
        recent.commit().wait()
        assert os.path.getsize(path + "-hist") == history.HEADER_SIZE + (64 << 10)


def test_the_history_grows_rather_than_drop_young_commits(path, monkeypatch):
    monkeypatch.setattr(history, "INITIAL_CAPACITY", 64 << 10)
    monkeypatch.setattr(history, "MAX_CAPACITY", 1 << 20)
    with EmbeddedDatabase(path) as db:
        put(db, b"k")
        old = reader_of(db, b"k")
        unrelated = reader_of(db, b"j")
        put(db, b"k", b"changed")  # the first commit after the readers' read version
        for i in range(2000):
            put(db, b"filler/%05d" % i)
        assert header(db)[history._CAPACITY] > 64 << 10
        with expect_fdb_error(1020):  # found in the grown ring, not lost
            old.commit().wait()
        unrelated.commit().wait()


def test_a_commit_with_huge_write_ranges_is_coarsened_and_still_conflicts(path, monkeypatch):
    monkeypatch.setattr(history, "MAX_PAYLOAD", 4096)
    with EmbeddedDatabase(path) as db:
        put(db, b"m/0500x")
        between = reader_of(db, b"m/0500x")  # a key between two of the big commit's keys
        outside = reader_of(db, b"n")
        tr = db.create_transaction()
        for i in range(1000):
            tr.set(b"m/%04d" % i, b"v")
        tr.commit().wait()
        with expect_fdb_error(1020):  # (a spurious conflict: the price of coarse ranges)
            between.commit().wait()
        outside.commit().wait()


def test_coarsened_ranges_cover_the_originals_within_the_limit():
    ranges = [(b"k%05d" % i, b"k%05d\x00" % i) for i in range(0, 20000, 3)]
    payload = history.coarsen(ranges, 2000)
    coarse = marshal.loads(payload)
    assert len(payload) <= 2000
    for b, e in ranges:
        assert any(cb <= b and e <= ce for cb, ce in coarse)


@pytest.mark.parametrize("when", ["before", "after"])
def test_a_committer_killed_in_its_commit_counts_as_committed(path, when):
    """Killed with its history record written and its SQLite commit not done, or done: the
    store goes on, later versionstamps are greater, and a transaction that read what it
    wrote before it died conflicts (when it did not commit, needlessly: conservative)."""
    key = b"stamped"
    with EmbeddedDatabase(path) as db:
        put(db, key, b"before")
        reader = reader_of(db, key)
        child = spawn("die-in-commit", "sqlite:" + path, key.hex(), when)
        assert child.wait(120) == -signal.SIGKILL
        value = read(db, key)
        assert (value == b"before") == (when == "before")
        with expect_fdb_error(1020):
            reader.commit().wait()
        tr = db.create_transaction()
        tr.set_versionstamped_value(b"later", b"\x00" * 10 + (0).to_bytes(4, "little"))
        stamp = tr.get_versionstamp()
        tr.commit().wait()
        if when == "after":
            assert stamp.wait() > value[:10]
        assert header(db)[history._PENDING] == 0


def test_a_growth_cut_short_drops_the_history_and_older_read_versions_get_1007(path):
    with EmbeddedDatabase(path) as db:
        put(db, b"k")
        reader = reader_of(db, b"unrelated")
        put(db, b"k")
        set_header(db, history._GROWING, 1)  # as a committer killed while growing the ring
        put(db, b"other")
        with expect_fdb_error(1007):  # its history is gone: retried, never passed unchecked
            reader.commit().wait()
        reader_of(db, b"unrelated").commit().wait()


def test_a_record_that_is_not_whole_drops_the_history_and_older_read_versions_get_1007(path):
    with EmbeddedDatabase(path) as db:
        reader = reader_of(db, b"k")
        put(db, b"other")
        fields = header(db)
        end = (fields[history._HEAD] - 1) % fields[history._CAPACITY] + 1
        with open(path + "-hist", "r+b") as f:  # the newest record's trailer, torn
            f.seek(history.HEADER_SIZE + end - 4)
            f.write(struct.pack("<I", 7))
        with expect_fdb_error(1007):
            reader.commit().wait()
        later = reader_of(db, b"k")
        put(db, b"k")
        with expect_fdb_error(1020):  # the history goes on from there
            later.commit().wait()


def test_versions_go_on_across_a_restart_without_jumping(path):
    with EmbeddedDatabase(path) as db:
        first = put(db, b"k")
    with EmbeddedDatabase(path) as db:
        assert db.commit_version() == first
        second = put(db, b"k")
    assert first < second <= max(first + 1, int(time.time() * 1e6))


def test_a_history_of_another_boot_restarts_from_the_durable_ceiling(path):
    with EmbeddedDatabase(path) as db:
        first = put(db, b"k")
        ceiling = header(db)[history._CEILING]
        set_header(db, history._BOOT, header(db)[history._BOOT] ^ 1)
    assert ceiling > first
    with EmbeddedDatabase(path) as db:
        assert db.commit_version() == ceiling  # past every version it may have lost
        assert put(db, b"k") > ceiling


def test_the_history_of_a_replaced_store_file_is_not_used(path):
    old = EmbeddedDatabase(path)  # still open: its history file is in use
    try:
        put(old, b"k", b"old")
        for suffix in ("", "-wal", "-shm"):
            os.remove(path + suffix)
        with EmbeddedDatabase(path) as new:
            assert read(new, b"k") is None
            put(new, b"k", b"new")
            assert read(new, b"k") == b"new"
            assert header(new)[history._ID] != history._F.unpack_from(old._history._header)[history._ID]
            assert os.stat(path + "-hist").st_ino != os.fstat(old._history._fd).st_ino
    finally:
        old.close()


def test_a_store_of_an_older_format_is_refused(path):
    EmbeddedDatabase(path).close()
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("UPDATE meta SET value = 1 WHERE name = 'format_version'")
    conn.close()
    with pytest.raises(StoreOpenError, match=r"has store format 1, which no release opens \(this one's is 2\)"):
        open_database("sqlite:" + path)


def test_a_store_of_a_newer_format_is_refused(path):
    EmbeddedDatabase(path).close()
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("UPDATE meta SET value = 3 WHERE name = 'format_version'")
    conn.close()
    with pytest.raises(StoreOpenError, match=r"written by a newer release \(format 3 > 2\)"):
        open_database("sqlite:" + path)


def test_a_one_write_commit_is_one_sqlite_statement(path, monkeypatch):
    """Beyond the write itself, a commit costs SQLite nothing: no counter row, no history
    row; the durable ceiling of the versions is raised (in a transaction with the write)
    once per CEILING_STEP of versions."""
    monkeypatch.setattr(commit_module, "CEILING_STEP", 10**12)
    with EmbeddedDatabase(path) as db:
        statements: list[str] = []
        conn = db._get_conn()
        conn.set_trace_callback(statements.append)
        db._put_conn(conn, rollback=False)
        put(db, b"a")  # the first commit raises the ceiling
        assert [s.split()[0] for s in statements] == ["BEGIN", "INSERT", "UPDATE", "COMMIT"]
        statements.clear()
        put(db, b"b")
        assert [s.split()[0] for s in statements] == ["INSERT"]
        statements.clear()
        tr = db.create_transaction()  # a read and a write: the snapshot's start (its first
        tr.get(b"a").wait()  # read, _PIN), the write in the same SQLite transaction, its end
        tr.set(b"c", b"v")
        tr.commit().wait()
        assert [s.split()[0] for s in statements] == ["BEGIN", "SELECT", "SELECT", "INSERT", "COMMIT"]
        statements.clear()
        tr = db.create_transaction()  # another commit since the snapshot: it is ended first
        tr.get(b"a").wait()
        tr.set(b"d", b"v")
        put(db, b"e")
        tr.commit().wait()
        assert [s.split()[0] for s in statements] == ["BEGIN", "SELECT", "SELECT", "COMMIT", "INSERT"]  # (put: another connection)
        assert [db.get(k) for k in (b"c", b"d", b"e")] == [b"v", b"v", b"v"]


def test_a_snapshot_a_commit_since_made_stale_is_ended_before_the_write_lock_is_taken(path, monkeypatch):
    """Only what must be serialized runs under the store's write lock: a transaction whose
    read snapshot cannot become its write transaction (another commit came since) ends it
    first."""
    with EmbeddedDatabase(path) as db:
        put(db, b"a")
        statements: list[str] = []
        conn = db._get_conn()
        conn.set_trace_callback(statements.append)
        db._put_conn(conn, rollback=False)
        acquire = type(db._writer).acquire
        monkeypatch.setattr(type(db._writer), "acquire",
                            lambda lock, *a: (statements.append("LOCK"), acquire(lock, *a))[1])
        tr = db.create_transaction()
        tr.get(b"a").wait()
        tr.set(b"d", b"v")
        other = db.create_transaction()
        other.set(b"e", b"v")
        other.commit().wait()
        statements.clear()
        tr.commit().wait()
        assert [s.split()[0] for s in statements] == ["COMMIT", "LOCK", "INSERT"]
        assert [db.get(k) for k in (b"d", b"e")] == [b"v", b"v"]


def test_a_snapshot_begun_while_a_commit_is_under_way_waits_for_it_and_reads_at_its_version(path, monkeypatch):
    """A transaction that begins its snapshot after another's SQLite commit but before that
    commit is settled would read its writes at an older read version, and its own commit
    would count them as a conflict (1020, which FoundationDB would not report): the
    snapshot waits for the commit under way instead (a shared lock, not the write lock),
    and reads at its version.  (Its wait's bound, GATE_WAIT: the test below.)"""
    from jobs.engine.store import _CommitGate

    monkeypatch.setattr(_CommitGate, "GATE_WAIT", DEADLINE)
    with EmbeddedDatabase(path) as db:
        put(db, b"k", b"0")
        written, go = threading.Event(), threading.Event()
        write = commit_module._write

        def paused_after_sqlite_commit(conn, log, stamp, ceiling, showing):
            write(conn, log, stamp, ceiling, showing)
            if log[0][1] == b"k":
                written.set()
                go.wait(DEADLINE)

        monkeypatch.setattr(commit_module, "_write", paused_after_sqlite_commit)
        committer = threading.Thread(target=put, args=(db, b"k", b"1"))
        committer.start()
        assert written.wait(DEADLINE)
        out: list = []

        def read_then_write():
            tr = reader_of(db, b"k")
            out.append(tr.get(b"k").wait())
            tr.commit().wait()
            out.append("committed")

        reader = threading.Thread(target=read_then_write)
        reader.start()
        reader.join(0.3)
        assert reader.is_alive() and out == []  # (waiting for the commit under way)
        go.set()
        committer.join(DEADLINE)
        reader.join(DEADLINE)
        assert out == [b"1", "committed"]


def test_a_snapshot_begun_while_a_commit_still_writes_does_not_wait_and_reads_before_it(path, monkeypatch):
    """A commit under way whose SQLite commit has not begun cannot be in a snapshot that
    starts meanwhile (the write-ahead log shows a transaction's writes only once its commit
    is written): the snapshot starts at once, at the version before it; a read of a key
    that commit writes is then a real conflict (1020), a read of another key is not."""
    from jobs.engine.store import _CommitGate

    monkeypatch.setattr(_CommitGate, "GATE_WAIT", 0.2)
    gated = []
    enter = _CommitGate.__enter__
    monkeypatch.setattr(_CommitGate, "__enter__", lambda gate: (gated.append(1), enter(gate))[1])
    with EmbeddedDatabase(path) as db:
        put(db, b"k", b"0")
        before = put(db, b"other", b"0")
        writing, go = threading.Event(), threading.Event()
        write = commit_module._write

        def paused_before_sqlite_commit(conn, log, stamp, ceiling, showing):
            def show():
                if log[0][1] == b"k":
                    writing.set()
                    go.wait(DEADLINE)
                showing()
            write(conn, log, stamp, ceiling, show)

        monkeypatch.setattr(commit_module, "_write", paused_before_sqlite_commit)
        committer = threading.Thread(target=put, args=(db, b"k", b"1"))
        committer.start()
        try:
            assert writing.wait(DEADLINE)
            assert db._history.committing()  # (recorded, under way)
            on_k, on_other = reader_of(db, b"k"), reader_of(db, b"other")
            assert on_k.get(b"k").wait() == b"0" and on_k.get_read_version().wait() == before
            assert on_other.get_read_version().wait() == before
            assert committer.is_alive() and gated == []  # (no wait: read while it writes)
        finally:
            go.set()
            committer.join(DEADLINE)
        on_other.commit().wait()
        expect_fdb_error(1020, lambda: on_k.commit().wait())


def test_a_snapshot_waits_a_bounded_time_for_a_committer_stopped_in_its_commit(path, monkeypatch):
    """A committer stopped holding the write lock (SIGSTOP, a debugger) holds every writer
    up but not the reads: a snapshot that finds its commit under way waits ``GATE_WAIT``
    at most, then reads."""
    from jobs.engine.store import _CommitGate

    monkeypatch.setattr(_CommitGate, "GATE_WAIT", 0.05)
    with EmbeddedDatabase(path) as db:
        put(db, b"k", b"0")
        held, release = threading.Event(), threading.Event()

        def stopped_committer():
            with db._write_lock():
                held.set()
                release.wait(DEADLINE)

        committer = threading.Thread(target=stopped_committer)
        committer.start()
        assert held.wait(DEADLINE)
        monkeypatch.setattr(db._history, "quiet_since", lambda version: False)  # (its commit under way,
        monkeypatch.setattr(db._history, "unseen_since", lambda version: False)  # its SQLite commit begun)
        try:
            tr = db.create_transaction()
            assert tr.get(b"k").wait() == b"0"
            assert committer.is_alive() and not db._gate._held  # (read while the commit stalls)
        finally:
            release.set()
            committer.join(DEADLINE)


def test_write_ranges_worked_out_before_the_lock_are_those_of_every_write_once_stamped():
    """``write_ranges`` (before the lock) and ``with_stamped`` (under it) give the ranges of
    every write of the log, versionstamped keys where their stamp puts them, sorted and
    disjoint, and nothing else."""
    rng = random.Random(7)
    stamp = (123456789).to_bytes(8, "big") + b"\x00\x00"
    for _ in range(300):
        keys = [bytes([rng.randrange(97, 102)]) * rng.randrange(1, 3) for _ in range(rng.randrange(1, 12))]
        log, expected = [], []
        for key in keys:
            kind = rng.choice(["set", "clear", "atomic", "clear_range", "stamp_key"])
            if kind == "set":
                log.append(("set", key, b"v"))
            elif kind == "clear":
                log.append(("clear", key))
            elif kind == "atomic":
                log.append(("atomic", "add", key, b"\x01"))
            elif kind == "clear_range":
                log.append(("clear_range", key, key + b"\xff"))
                expected.append((key, key + b"\xff"))
                continue
            else:  # a key whose 10 bytes from offset 1 take the stamp
                log.append(("stamp_key", key[:1] + b"\x00" * 10 + key[1:] + (1).to_bytes(4, "little"), b"v"))
                key = key[:1] + stamp + key[1:]
            expected.append((key, key + b"\x00"))
        extra = [(b"c", b"cc")] if rng.random() < 0.3 else []
        ranges, stamped = commit_module.write_ranges(log, set(), extra)
        out = commit_module.with_stamped(ranges, stamped, stamp)
        assert out == sorted(out) and all(b < e for b, e in out)
        assert all(e <= b for (_b0, e), (b, _e1) in zip(out, out[1:]))  # disjoint
        assert merge_ranges(out) == merge_ranges(expected + extra)


@pytest.mark.parametrize("writes", [1, 3])
def test_a_snapshot_sqlite_refuses_to_make_a_write_one_commits_in_a_transaction_of_its_own(path, writes):
    """The commit of a transaction that read writes in its read snapshot's SQLite
    transaction; if SQLite refuses that (busy, here another connection holding its write
    lock outside the store's), the snapshot is ended and the log applied on its own,
    waiting for SQLite's lock as every commit does."""
    with EmbeddedDatabase(path) as db:
        put(db, b"a")
        tr = db.create_transaction()
        tr.get(b"a").wait()
        for i in range(writes):
            tr.set(b"w%d" % i, b"mine")
        other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        other.execute("BEGIN IMMEDIATE")
        other.execute("INSERT INTO kv (k, v) VALUES (x'6f74686572', x'01')")
        release = threading.Timer(0.3, lambda: other.execute("COMMIT"))
        release.start()
        try:
            tr.commit().wait()
        finally:
            release.join()
            other.close()
        assert [db.get(b"w%d" % i) for i in range(writes)] == [b"mine"] * writes
        assert db.get(b"other") == b"\x01"


def test_watches_of_one_transaction_cost_one_read_and_one_wake(path, monkeypatch):
    """A waiting accept watches each of its type's wake shards: their baselines are read
    in one statement and armed with one wake of the watch thread; cancelled ones leave the
    armed set, and the others still fire."""
    keys = [b"shard/%02d" % i for i in range(17)]
    with EmbeddedDatabase(path) as db:
        put(db, keys[0], b"0")
        wakes = []
        wake = watches.Watches._wake
        monkeypatch.setattr(watches.Watches, "_wake", lambda self: (wakes.append(1), wake(self)))
        statements: list[str] = []
        conn = db._get_conn()
        conn.set_trace_callback(statements.append)
        db._put_conn(conn, rollback=False)
        tr = db.create_transaction()
        futures = [tr.watch(key) for key in keys]
        tr.commit().wait()
        assert [s.split()[0] for s in statements] == ["BEGIN", "SELECT", "SELECT", "ROLLBACK"]
        assert len(wakes) == 1 and db._watches.count() == 17
        for future in futures[1:]:
            future.cancel()
        assert db._watches.count() == 1
        put(db, keys[0], b"1")
        assert wait_future(futures[0], 30)


def test_watches_on_keys_the_transaction_read_take_their_baselines_from_those_reads(path):
    """(A watch set after the keys were read, as an accept does after one that wrote: ``AcceptCall._rearm``.)  No
    second query at commit, and the watch still fires on a change, not on its own read."""
    keys = [b"shard/%02d" % i for i in range(17)]
    with EmbeddedDatabase(path) as db:
        put(db, keys[3], b"0")
        statements: list[str] = []
        conn = db._get_conn()
        conn.set_trace_callback(statements.append)
        db._put_conn(conn, rollback=False)
        tr = db.create_transaction()
        values = [tr.snapshot.get(key) for key in keys]
        assert [bytes(v) if v.present() else None for v in values] == [None] * 3 + [b"0"] + [None] * 13
        futures = [tr.watch(key) for key in keys]
        tr.commit().wait()
        assert [s.split()[0] for s in statements] == ["BEGIN", "SELECT", "SELECT", "ROLLBACK"]
        assert not any(f.is_ready() for f in futures)
        put(db, keys[3], b"0")  # (the same value: no change)
        put(db, keys[16], b"1")
        assert wait_future(futures[16], 30)
        assert not futures[3].is_ready()
        for f in futures:
            f.cancel()


def _keys_in(commits) -> set[bytes]:
    return {b for ranges in commits for b, _e in ranges}


def test_writes_since_tells_the_ranges_of_the_commits_in_a_window(path, monkeypatch):
    monkeypatch.setattr(history, "INITIAL_CAPACITY", 64 << 10)
    monkeypatch.setattr(history, "MAX_CAPACITY", 64 << 10)
    with EmbeddedDatabase(path) as db:
        h = db._history
        versions = [put(db, b"k/%d" % i) for i in range(5)]
        assert h.writes_since(versions[4], versions[4]) == []
        window = h.writes_since(versions[1], versions[3])
        assert window == [[(b"k/3", b"k/3\x00")], [(b"k/2", b"k/2\x00")]]  # (newest first)
        assert _keys_in(h.writes_since(versions[0] - 1, versions[4])) == {b"k/%d" % i for i in range(5)}
        tr = db.create_transaction()  # a write the ring does not show: nothing told past it
        tr.options.set_next_write_no_write_conflict_range()
        tr.set(b"blind", b"v")
        tr.commit().wait()
        blind = tr.get_committed_version()
        assert h.writes_since(versions[4], blind) is None
        assert h.writes_since(blind, put(db, b"after")) == [[(b"after", b"after\x00")]]
        for i in range(2000):  # the ring wraps: the first commits are dropped
            put(db, b"filler/%05d" % i)
        assert h.writes_since(versions[0], h.read_version()) is None
        newest = h.read_version()
        assert h.writes_since(newest, put(db, b"last")) == [[(b"last", b"last\x00")]]


def test_writes_since_tells_nothing_of_more_commits_than_its_limit(path):
    with EmbeddedDatabase(path) as db:
        h = db._history
        since = put(db, b"before")
        versions = [put(db, b"k/%d" % i) for i in range(10)]
        assert len(h.writes_since(since, versions[-1], limit=10)) == 10
        assert h.writes_since(since, versions[-1], limit=9) is None
        assert len(h.writes_since(versions[0], versions[-1], limit=9)) == 9
        assert h.writes_since(since, versions[4], limit=5) == h.writes_since(since, versions[4])


@pytest.mark.parametrize("ring", ["wraps", "grows"])
def test_writes_since_read_while_commits_go_on_is_whole_or_none(path, monkeypatch, ring):
    """A reader without the lock, as the watch thread is, against a committer that wraps
    (or grows) the ring under it: every answer it gives holds exactly the commits of its
    window; when it cannot tell, None."""
    monkeypatch.setattr(history, "INITIAL_CAPACITY", 16 << 10)
    monkeypatch.setattr(history, "MAX_CAPACITY", 16 << 10 if ring == "wraps" else 4 << 20)
    monkeypatch.setattr(sys, "getswitchinterval", sys.getswitchinterval)
    sys.setswitchinterval(1e-5)
    written: dict[int, bytes] = {}
    answers = []
    with EmbeddedDatabase(path) as db:
        h = db._history
        done = threading.Event()

        def commit_many():
            for i in range(1000):
                key = b"k/%05d" % i
                written[put(db, key)] = key
            done.set()

        committer = threading.Thread(target=commit_many)
        since = h.read_version()
        committer.start()
        try:
            while not done.is_set():
                upto = h.read_version()
                answers.append((since, upto, h.writes_since(since, upto)))
                since = upto if answers[-1][2] is not None or len(answers) % 5 == 0 else since
        finally:
            committer.join()
    told = [(a, b, commits) for a, b, commits in answers if commits is not None]
    assert len(told) > 10
    for a, b, commits in told:
        assert _keys_in(commits) == {key for v, key in written.items() if a < v <= b}


@pytest.mark.parametrize("ring", ["wraps", "grows"])
def test_writes_since_overtaken_by_committers_tells_nothing(path, monkeypatch, ring):
    """Records read whole, and then the committers wrap the ring past them (or grow it,
    which moves every record): they may have been written over mid-read, so None."""
    monkeypatch.setattr(history, "INITIAL_CAPACITY", 16 << 10)
    monkeypatch.setattr(history, "MAX_CAPACITY", 16 << 10 if ring == "wraps" else 4 << 20)
    with EmbeddedDatabase(path) as db:
        h = db._history
        since = put(db, b"before")  # (the read reaches back to a record at since)
        for i in range(50):
            put(db, b"k/%d" % i)
        upto = h.read_version()
        assert len(h.writes_since(since, upto)) == 50
        records = history._records

        def overtaken(*args):
            read = list(records(*args))
            for i in range(600):  # more than the ring holds
                put(db, b"filler/%05d" % i)
            yield from read

        monkeypatch.setattr(history, "_records", overtaken)
        assert h.writes_since(since, upto) is None
        assert header(db)[history._CAPACITY] == (16 << 10 if ring == "wraps" else 64 << 10)


def test_the_watch_thread_reads_only_the_watched_keys_a_commit_wrote(path, monkeypatch):
    """Commits that do not write a watched key cost the watch thread no query, and a new
    watch none either (the history tells what changed since its read version); the
    commit that writes it, one."""
    with EmbeddedDatabase(path) as db:
        statements: list[str] = []
        connect = db._connect

        def traced():
            conn = connect()
            if threading.current_thread().name == "jobs-watches":
                conn.set_trace_callback(statements.append)
            return conn

        monkeypatch.setattr(db, "_connect", traced)
        warm = _armed(db, b"warm")  # (the thread's first look reads every watched key)
        put(db, b"warm")
        assert wait_future(warm, 30)
        statements.clear()
        watch = _armed(db, b"k")
        for i in range(20):
            put(db, b"other/%d" % i)
        assert not watch.is_ready()
        put(db, b"k", b"changed")
        assert wait_future(watch, 30)
        assert len(statements) == 1 and statements[0].startswith("SELECT"), statements


def test_a_watch_armed_long_after_the_last_look_is_looked_at_without_decoding_the_commits_since(path, monkeypatch):
    """A processor whose watch thread slept through many commits (it had no watch, e.g.
    not its turn) reads the watched keys when it arms one, rather than decoding every
    commit since its last look (seconds of them took tens of milliseconds)."""
    decoded = []
    loads = history.marshal.loads

    class Marshal:  # (history's marshal, counting what the watch thread decodes)
        dumps = staticmethod(history.marshal.dumps)

        @staticmethod
        def loads(data):
            if threading.current_thread().name == "jobs-watches":
                decoded.append(data)
            return loads(data)

    monkeypatch.setattr(history, "marshal", Marshal)
    with EmbeddedDatabase(path) as db:
        warm = _armed(db, b"warm")
        put(db, b"warm")
        assert wait_future(warm, 30)
        assert wait_until(lambda: not db._watches._armed, 30)  # (the thread sleeps: no watch)
        for i in range(200):  # (more than Watches.WRITES_READ_MAX)
            put(db, b"other/%d" % i)
        decoded.clear()
        watch = _armed(db, b"k")
        assert wait_until(lambda: db._watches._from is None, 30)  # (looked at since it was armed)
        assert decoded == []
        put(db, b"other")
        assert not watch.is_ready()
        put(db, b"k", b"changed")
        assert wait_future(watch, 30)


def test_a_watched_key_written_without_a_conflict_range_fires_the_watch(path):
    """Such a write is not in the history's ranges: a look past it reads the store."""
    with EmbeddedDatabase(path) as db:
        warm = _armed(db, b"warm")
        put(db, b"warm")
        assert wait_future(warm, 30)
        watch = _armed(db, b"k")
        assert wait_until(lambda: db._watches._from is None, 30)  # (looked at since it was armed)
        tr = db.create_transaction()
        tr.options.set_next_write_no_write_conflict_range()
        tr.set(b"k", b"unfenced")
        tr.commit().wait()
        assert wait_future(watch, 30)


def test_cancelled_watches_are_dropped_and_the_watch_thread_sleeps(path):
    """A cancel tells the watch thread to prune (no callback per watch): with nothing
    left armed it stops looking at commits."""
    with EmbeddedDatabase(path) as db:
        tr = db.create_transaction()
        futures = [tr.watch(b"shard/%02d" % i) for i in range(17)]
        tr.commit().wait()
        for future in futures:
            future.cancel()
        put(db, b"other")  # (a look after the cancels)
        assert wait_until(lambda: not db._watches._armed, 30)


def _armed(db, key: bytes):
    tr = db.create_transaction()
    watch = tr.watch(key)
    tr.commit().wait()
    return watch


def test_a_commit_between_the_read_version_and_the_snapshot_is_not_a_conflict(path):
    """A commit that lands after a transaction read its version but before its snapshot
    started would be in the snapshot with a later version than the transaction's, so the
    check would count it as a conflict although the transaction read what it wrote.  The
    snapshot starts again at the later version: the transaction reads the value that
    commit wrote, as of its read version, and commits."""
    with EmbeddedDatabase(path) as db:
        put(db, b"k", b"old")
        real = db._history.read_version
        landed = []

        def then_a_commit():
            version = real()
            if not landed:  # (once: the retry reads the version again)
                landed.append(put(db, b"k", b"new"))
            return version

        db._history.read_version = then_a_commit
        tr = db.create_transaction()
        assert tr.get(b"k").wait() == b"new"
        assert tr.get_read_version().wait() == landed[0]
        tr.set(b"other", b"v")
        tr.commit().wait()  # 1020 if the snapshot held a commit newer than its version


def _alone_on(hist: str) -> bool:
    """Whether no open store holds the history file (its exclusive lock is free)."""
    fd = os.open(hist, os.O_RDWR)
    try:
        return history._try_flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(fd)


def test_a_forked_child_closing_the_store_leaves_the_parent_attached(path):
    with EmbeddedDatabase(path) as db:
        put(db, b"k", b"parent")
        pid = os.fork()
        if pid == 0:  # the child: commit, close, exit without pytest's cleanup
            code = 1
            try:
                put(db, b"k", b"child")
                db.close()
                code = 0
            finally:
                os._exit(code)
        _pid, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert read(db, b"k") == b"child"
        assert not _alone_on(path + "-hist")  # the parent still holds its shared lock
        assert put(db, b"k", b"again") > 0
    assert _alone_on(path + "-hist")  # ... released when the parent closes
