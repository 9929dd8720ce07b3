"""Stores as an older release left them: jobs written without today's argument checks (a
scheduled time no date can show, names with control characters), so that tests can show
that every view still displays them and that they can be removed."""

from __future__ import annotations

import jobs
from jobs import keys, rows
from jobs.engine import tuple as fdb_tuple


@jobs.transactional
def add_unchecked(tr, type: str, job_id: str, scheduled_time: float = 0.0, timeout: float | None = 60.0) -> None:
    """A new pending job with data ``{}``, written as ``jobs.add`` did before it checked
    names and times; ``timeout``: the type's timeout, written the same way (None: none)."""
    keys.ensure_store(tr)
    if timeout is not None:
        tr.set(keys.timeout_key(type), fdb_tuple.pack((float(timeout),)))
    rows.make_pending(tr, type, job_id, float(scheduled_time), b"{}")
