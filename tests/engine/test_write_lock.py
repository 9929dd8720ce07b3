"""The embedded store's write lock (an ``flock`` across processes, then SQLite's own) is
for writing commits only: reads, read versions and the commits of read-only transactions
never wait for it, as FoundationDB checks nothing for a read-only commit."""

from __future__ import annotations

import threading

from enginekit import spawn

from jobs.engine.embedded import EmbeddedDatabase


def put(db, key: bytes, value: bytes = b"v") -> None:
    tr = db.create_transaction()
    tr.set(key, value)
    tr.commit().wait()


def test_read_only_transactions_take_no_write_lock(tmp_path):
    """Another process holds the write lock (its flock and SQLite's): reads and read-only
    commits go on; a writing commit waits for it."""
    path = str(tmp_path / "store.sqlite")
    with EmbeddedDatabase(path) as db:
        put(db, b"k")
        holder = spawn("hold", "sqlite:" + path, stdin=-1, stdout=-1, text=True)
        try:
            assert holder.stdout.readline().strip() == "held"
            for _ in range(3):
                tr = db.create_transaction()
                tr.get_read_version().wait()
                assert tr.get(b"k").wait() == b"v"
                assert [kv.key for kv in tr.get_range(b"a", b"z")] == [b"k"]
                tr.snapshot.get(b"other").wait()
                tr.commit().wait()
                assert tr.get_committed_version() == -1  # read-only: nothing committed
            written = threading.Event()
            writer = threading.Thread(target=lambda: (put(db, b"w"), written.set()), daemon=True)
            writer.start()
            assert not written.wait(0.5)  # the lock is really held
        finally:
            holder.stdin.close()
            holder.wait(60)
        assert written.wait(60)


def test_write_lock_stats_count_the_writing_commits_and_their_wait(tmp_path):
    """``write_lock_stats``: each writing commit takes the lock once (a read-only commit
    never); the time spent holding it and waiting for it (here behind another process
    that holds it for at least half a second) are summed."""
    path = str(tmp_path / "store.sqlite")
    with EmbeddedDatabase(path) as db:
        before = db.write_lock_stats()
        for i in range(5):
            put(db, b"k%d" % i)
            tr = db.create_transaction()
            tr.get(b"k0").wait()
            tr.commit().wait()  # (read-only)
        after = db.write_lock_stats()
        assert after["acquired"] - before["acquired"] == 5
        assert after["hold_seconds"] > before["hold_seconds"]
        holder = spawn("hold", "sqlite:" + path, stdin=-1, stdout=-1, text=True)
        try:
            assert holder.stdout.readline().strip() == "held"
            written = threading.Event()
            writer = threading.Thread(target=lambda: (put(db, b"w"), written.set()), daemon=True)
            writer.start()
            assert not written.wait(0.5)  # waiting for the lock, at least this long
        finally:
            holder.stdin.close()
            holder.wait(60)
        assert written.wait(60)
        waited = db.write_lock_stats()
        assert waited["acquired"] == after["acquired"] + 1
        assert waited["wait_seconds"] - after["wait_seconds"] >= 0.5
