"""Counting the jobs of a store of an earlier layout (``counts.py``): the upgrade to layout 5
records every type with jobs in ``("jobs", "recount", Type)``, and the activity monitor
counts each one's rows here, in id order, a page per transaction."""

from __future__ import annotations

from . import counts, keys, rows
from . import failed as failed_index
from . import finished as finished_index
from .engine import value_of
from .engine import tuple as fdb_tuple


def backfill(tr, type: str, limit: int) -> bool:
    """Count up to ``limit`` more rows of a type being counted, in id order from where the
    last call stopped; True once the type is counted (its position cleared).  Conflicting
    reads of the rows and of their failed entries: a change to one of them meanwhile makes
    this retry, and a change after it is counted by whoever makes it (``counted``).  A
    failed job gets its entry in the finished index if it had none (layout 5 keeps one for
    every failed job)."""
    raw = value_of(tr.get(keys.recount_key(type)))
    if raw is None:
        return True
    after = fdb_tuple.unpack(raw)[0]
    r = keys.DATA[type].range()
    begin = r.start if after is None else keys.data_key(type, after) + b"\x00"
    page = [(keys.DATA.unpack(k)[1], bytes(v)) for k, v in tr.get_range(begin, r.stop, limit=limit)]
    states = dict.fromkeys(counts.STATES, 0)
    ended = []
    for job_id, value in page:
        row = rows.decode(value, type, job_id)
        if row.state == "pending":
            counts.add_queued(tr, type, row.priority or 0, row.stime, 1)
        elif row.state == "running":
            states["running"] += 1
        else:  # (their reads run in parallel)
            ended.append((job_id, tr.get(keys.failed_key(type, job_id)), finished_index.entry_future(tr, type, job_id)))
    for job_id, failure, entry in ended:
        if value_of(failure) is None:
            states["finished"] += 1
            continue
        states["failed"] += 1
        if value_of(entry) is None:
            finished_index.mark(tr, type, job_id, True, failed_index.entry(value_of(failure))[0])
    for state, n in states.items():
        if n:
            counts.add_state(tr, type, state, n)
    done = len(page) < limit
    if done:
        tr.clear(keys.recount_key(type))
    else:
        tr.set(keys.recount_key(type), fdb_tuple.pack((page[-1][0],)))
    return done
