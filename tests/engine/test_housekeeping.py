"""The embedded engine's housekeeping, kept off the commit path: WAL checkpoints on a
thread of their own.  (The commit history's bounds: ``test_history.py``.)"""

from __future__ import annotations

import time

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
