"""The index of failed jobs: ``("jobs", "failed", Type, JobId) = (at,)``.

A job finished with ``finish(..., failed=True)`` (a task that used up its attempts, or lost
too many workers) is indexed here by the finishing transaction, and unindexed by whatever
next changes its run (a re-add, a resubmit) or removes it.  So failed jobs are counted and
listed from this index alone, never by decoding every row; ``at`` is the finisher's wall
clock, for people (the dashboard's recent failures), nothing decides on it.
"""

from __future__ import annotations

import time

from . import keys
from .engine import tuple as fdb_tuple
from .engine import value_of


def mark(tr, type: str, job_id: str) -> None:
    """Index the job as failed, now (a key only layout 2 knows: the layout says so first)."""
    keys.upgrade_layout(tr)
    tr.set(keys.failed_key(type, job_id), fdb_tuple.pack((time.time(),)))


def unmark(tr, type: str, job_id: str) -> None:
    """Drop the job from the index (a blind clear: nothing to read when it was not there)."""
    tr.clear(keys.failed_key(type, job_id))


def failed_at(tr, type: str, job_id: str) -> float | None:
    """When the job was indexed as failed, or None if it is not failed."""
    raw = value_of(tr.get(keys.failed_key(type, job_id)))
    return None if raw is None else fdb_tuple.unpack(raw)[0]


def listed(tr, type: str | None = None, limit: int = 0) -> list[tuple[str, str, float]]:
    """``(type, id, at)`` of the failed jobs (of ``type``), in key order; at most ``limit``
    (0: all).  A snapshot read."""
    r = (keys.FAILED if type is None else keys.FAILED[type]).range()
    out = []
    for key, value in tr.snapshot.get_range(r.start, r.stop, limit=limit):
        t, job_id = keys.FAILED.unpack(key)
        out.append((t, job_id, fdb_tuple.unpack(value)[0]))
    return out


def type_range(type: str) -> tuple[bytes, bytes]:
    r = keys.FAILED[type].range()
    return r.start, r.stop
