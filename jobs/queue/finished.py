"""The index of finished jobs by when they finished:
``("jobs", "finished", Type, Kind, At, JobId)``, with ``("jobs", "finished_job", Type, JobId)
= (Kind, At)`` pointing at each job's entry.

``finish`` indexes the job in its own transaction (``Kind`` ``"failed"`` or ``"finished"``)
when it failed or its type has a retention (:func:`retained`: other types' successes pay no
index writes; setting a retention later starts the backfill over, which indexes the jobs
finished meanwhile);
whatever next changes its run (a re-add, a resubmit, a retry) or removes it clears both
keys (:func:`leave`), so retention finds the oldest finished jobs of a type with one range
read, however many there are, and never decodes a row to do it.

The clock: ``At`` is the finishing process's wall clock, and retention compares it with the
pruner's.  The activity monitor never decides on other machines' clocks when it re-enqueues
running jobs (an early decision there runs a job twice); here a skewed clock only moves the
removal of a finished job by the skew, seconds against periods of minutes to days, and
nothing runs or stops because of it.  Versionstamps would avoid the skew but not measure
time across restarts: a monitor would need one retention period of uptime before it could
prune anything, so with a retention of a week and workers redeployed daily, nothing would
ever be pruned.  The ``failed`` index keeps the same clock for the same reason.
"""

from __future__ import annotations

import time

from .. import ahead, keys
from ..engine import tuple as fdb_tuple, value_of
from ..indexes import counts, failed as failed_index
from . import rows

KINDS = ("finished", "failed")  # finished without failing; finished failed


def retained(tr, type: str):
    """Future of the type's retention setting, read with a conflict (present: finishes are
    indexed), so that a finish concurrent with ``set_retention`` retries and is indexed."""
    return ahead.read(tr, keys.retention_key(type), shared=True)


def mark(tr, type: str, job_id: str, failed: bool, at: float | None = None) -> None:
    """Index the job as finished (``failed`` or not) at ``at`` (None: now).  Blind writes:
    a job that is finishing has no entry (leaving the finished state cleared it)."""
    kind = "failed" if failed else "finished"
    at = time.time() if at is None else float(at)
    tr.set(keys.finished_key(type, kind, at, job_id), b"")
    tr.set(keys.finished_job_key(type, job_id), fdb_tuple.pack((kind, at)))


def entry_of(tr, type: str, job_id: str) -> tuple[str, float] | None:
    """``(kind, at)`` of the job's entry, or None (a conflicting read)."""
    return entry_in(entry_future(tr, type, job_id))


def entry_future(tr, type: str, job_id: str):
    """The read of the job's pointer, to wait on with :func:`entry_in` (reads in parallel)."""
    return tr.get(keys.finished_job_key(type, job_id))


def entry_in(future) -> tuple[str, float] | None:
    raw = value_of(future)
    return None if raw is None else tuple(fdb_tuple.unpack(raw))


def leave(tr, type: str, job_id: str) -> None:
    """The job leaves the finished state (re-added, resubmitted, removed): drop it from this
    index and from the failed index."""
    failed_index.unmark(tr, type, job_id)
    entry = entry_of(tr, type, job_id)
    counts.changed(tr, type, "finished" if entry is None else entry[0], -1)  # (failed: always indexed)
    if entry is not None:
        tr.clear(keys.finished_key(type, *entry, job_id))
        tr.clear(keys.finished_job_key(type, job_id))


def oldest(tr, type: str, kind: str, up_to: float, limit: int,
           since: float | None = None) -> list[tuple[bytes, float, str]]:
    """``(key, at, job_id)`` of up to ``limit`` entries of ``kind`` finished at or before
    ``up_to`` (and at or after ``since``), oldest first (a snapshot read: the caller
    re-reads each job)."""
    begin, end = keys.finished_range(type, kind, up_to, since)
    out = []
    for key, _value in tr.snapshot.get_range(begin, end, limit=limit):
        _type, _kind, at, job_id = keys.unpack_finished(key)
        out.append((bytes(key), at, job_id))
    return out


def due_span(tr, type: str, kind: str, up_to: float) -> tuple[float, float] | None:
    """``(oldest, newest)`` At of the entries of ``kind`` finished at or before ``up_to``,
    or None if there are none (snapshot reads)."""
    begin, end = keys.finished_range(type, kind, up_to)
    ends = [list(tr.snapshot.get_range(begin, end, limit=1, reverse=reverse)) for reverse in (False, True)]
    return None if not ends[0] else tuple(keys.unpack_finished(found[0].key)[2] for found in ends)


# --- jobs finished while their type had no retention -------------------------------------


def backfill_state(tr, type: str) -> tuple[bool, str | None]:
    """``(done, last id looked at)`` of the type's backfill (nothing yet: ``(False, None)``)."""
    raw = value_of(tr.get(keys.retention_backfill_key(type)))
    return (False, None) if raw is None else tuple(fdb_tuple.unpack(raw))


def backfill(tr, type: str, limit: int, unreadable: list | None = None) -> bool:
    """Index up to ``limit`` more rows' worth of the type's finished jobs that have no
    entry, from where the last call stopped; returns True once every row was looked at.
    Such jobs finished without failing while the type had no retention (failed jobs are
    always indexed); they are indexed at now, so they are kept at least one retention
    period from now.  Resumable and idempotent (the position is written in the same
    transaction; a job with an entry is skipped); the rows are read as a snapshot, with a
    conflict only on those indexed here.  A row that cannot be read is passed over (named
    in ``unreadable``, if given: ``rows.decode``)."""
    done, after = backfill_state(tr, type)
    if done:
        return True
    r = keys.DATA[type].range()
    begin = r.start if after is None else keys.data_key(type, after) + b"\x00"
    page = list(tr.snapshot.get_range(begin, r.stop, limit=limit))
    finished = []
    for key, value in page:
        job_id = keys.DATA.unpack(key)[1]
        row = rows.decode(bytes(value), type, job_id, [] if unreadable is None else unreadable)
        if row is not rows.UNREADABLE and row.state == "finished":
            finished.append((key, job_id, entry_future(tr, type, job_id)))
    for key, job_id, entry in finished:  # (their reads ran in parallel)
        if value_of(entry) is None:
            tr.add_read_conflict_key(key)
            mark(tr, type, job_id, False)
    done = len(page) < limit
    last = keys.DATA.unpack(page[-1].key)[1] if page else after
    tr.set(keys.retention_backfill_key(type), fdb_tuple.pack((done, last)))
    return done


def recent_failures(tr, type: str, limit: int) -> list[tuple[str, float, str | None]]:
    """``(id, at, reason)`` of the ``limit`` most recent failures, most recent first: this
    index's failed entries (in order of time; it keeps one per failed job) and their
    reasons from the failed index (snapshot reads)."""
    r = keys.FINISHED[type]["failed"].range()
    found = [keys.unpack_finished(key) for key, _v in tr.snapshot.get_range(r.start, r.stop, limit=limit,
                                                                            reverse=True)]
    futures = [tr.snapshot.get(keys.failed_key(type, job_id)) for _t, _k, _at, job_id in found]
    out = []
    for (_type, _kind, at, job_id), future in zip(found, futures):
        raw = value_of(future)
        out.append((job_id, *((at, None) if raw is None else failed_index.entry(raw))))
    return out
