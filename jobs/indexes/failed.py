"""The index of failed jobs: ``("jobs", "failed", Type, JobId) = (at,)``.

A job finished with ``finish(..., failed=True)`` (a task that used up its attempts, or lost
too many workers) is indexed here by the finishing transaction, and unindexed by whatever
next changes its run (a re-add, a resubmit) or removes it.  So failed jobs are counted and
listed from this index alone, never by decoding every row; ``at`` is the finisher's wall
clock, for people (the dashboard's recent failures), nothing decides on it.
"""

from __future__ import annotations

import time

from .. import keys
from ..engine import tuple as fdb_tuple
from ..engine import value_of


REASON_LIMIT = 500  # characters of the reason kept in the index


def mark(tr, type: str, job_id: str, reason: str | None = None) -> None:
    """Index the job as failed, now, with a one-line ``reason``."""
    reason = None if reason is None else reason[:REASON_LIMIT]
    tr.set(keys.failed_key(type, job_id), fdb_tuple.pack((time.time(), reason)))


def entry(value: bytes) -> tuple[float, str | None]:
    """``(at, reason)`` of an index value."""
    at, *rest = fdb_tuple.unpack(value)
    return at, (rest[0] if rest else None)


def unmark(tr, type: str, job_id: str) -> None:
    """Drop the job from the index (a blind clear: nothing to read when it was not there)."""
    tr.clear(keys.failed_key(type, job_id))


def get(tr, type: str, job_id: str) -> tuple[float, str | None] | None:
    """``(at, reason)`` of a failed job, or None if it is not failed (a conflicting read)."""
    raw = value_of(tr.get(keys.failed_key(type, job_id)))
    return None if raw is None else entry(raw)


def listed(tr, type: str, after: str | None = None, limit: int = 0) -> list[tuple[str, float, str | None]]:
    """``(id, at, reason)`` of failed jobs of ``type`` in id order, from the id after
    ``after`` (None: the first), at most ``limit`` (0: all).  A snapshot read."""
    begin, end = type_range(type)
    if after is not None:
        begin = keys.failed_key(type, after) + b"\x00"
    return [(keys.FAILED.unpack(key)[1], *entry(value))
            for key, value in tr.snapshot.get_range(begin, end, limit=limit)]


def type_range(type: str) -> tuple[bytes, bytes]:
    r = keys.FAILED[type].range()
    return r.start, r.stop

