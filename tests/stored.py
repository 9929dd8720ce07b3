"""What tests need to look at or prepare a store directly: a snapshot of the job layer's
keys (to show that a refused call wrote nothing), and jobs written as an older release
wrote them, without today's argument checks (a scheduled time no date can show, names with
control characters), to show that every view still displays them and that they can be
removed."""

from __future__ import annotations

import jobs
from jobs import keys, rows
from jobs.engine import tuple as fdb_tuple


def snapshot(db) -> list[tuple[bytes, bytes]]:
    """Every key and value of the job layer."""
    r = keys.ROOT.range()
    return [(bytes(k), bytes(v)) for k, v in db.get_range(r.start, r.stop)]


@jobs.transactional
def add_unchecked(tr, type: str, job_id: str, scheduled_time: float = 0.0, timeout: float | None = 60.0) -> None:
    """A new pending job with data ``{}``, written as ``jobs.add`` did before it checked
    names and times; ``timeout``: the type's timeout, written the same way (None: none)."""
    keys.ensure_store(tr)
    if timeout is not None:
        tr.set(keys.timeout_key(type), fdb_tuple.pack((float(timeout),)))
    rows.make_pending(tr, type, job_id, float(scheduled_time), b"{}")
