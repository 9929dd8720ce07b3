"""The embedded engine's housekeeping, kept off the commit path or bounded in it: WAL
checkpoints on a thread of their own, and the prune of the commit history (used for
conflict checks), whose work per prune does not grow with the commit rate."""

from __future__ import annotations

import time

from jobs.engine import commit as embedded_commit
from jobs.engine.commit import prune_history
from jobs.engine.checkpoints import Checkpointer
from jobs.engine.embedded import EmbeddedDatabase


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


def test_prune_keeps_recent_history_and_works_off_a_backlog_in_bounded_steps(tmp_path):
    db = EmbeddedDatabase(str(tmp_path / "jobs.sqlite"))
    conn = db._connect()
    try:
        now = time.time()
        old = 3 * embedded_commit.PRUNE_SCAN  # entries older than the history kept
        recent = 100
        rows = [(v, now - embedded_commit.HISTORY_SECONDS - 60 + v / 1000, b"") for v in range(1, old + 1)]
        rows += [(v, now - 1.0, b"") for v in range(old + 1, old + recent + 1)]
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("DELETE FROM commits")
        conn.executemany("INSERT INTO commits (version, ts, ranges) VALUES (?, ?, ?)", rows)
        conn.execute("COMMIT")

        pruned, steps = 0, []
        while True:
            conn.execute("BEGIN IMMEDIATE")
            after = prune_history(conn, now, pruned)
            conn.execute("COMMIT")
            if after == pruned:
                break
            steps.append(after - pruned)
            pruned = after
        assert pruned == old  # everything older than the history, nothing newer
        assert max(steps) <= embedded_commit.PRUNE_SCAN and len(steps) == 3
        left = [v for (v,) in conn.execute("SELECT version FROM commits ORDER BY version")]
        assert left == list(range(old + 1, old + recent + 1))
    finally:
        conn.close()
        db.close()
