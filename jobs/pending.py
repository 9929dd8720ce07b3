"""The pending queue of each type: ``("jobs", "pending", Type, STime, JobId)``.

Dequeue picks a random eligible job from a snapshot read of the queue's head and adds one
read conflict key, on the job it takes: workers that pick different jobs never conflict,
and two that pick the same one conflict at commit (1020) and the loser retries.
"""

from __future__ import annotations

import random
import uuid

from . import keys
from .engine import KeySelector, strinc

SAMPLE = 16  # head of the queue read to pick from: enough that a few workers rarely pick alike
_ONE = (1).to_bytes(8, "little")


def enqueue(tr, type: str, stime: float, job_id: str) -> None:
    tr.set(keys.pending_key(type, stime, job_id), b"")
    tr.add(keys.watches_pending_key(type), _ONE)  # wakes waiting accepts


def remove(tr, type: str, stime: float, job_id: str) -> None:
    tr.clear(keys.pending_key(type, stime, job_id))


def _bounds(type: str, max_stime: float | None) -> tuple[bytes, bytes]:
    prefix = keys.PENDING.pack((type,))
    if max_stime is None:
        return prefix, strinc(prefix)
    return prefix, strinc(keys.PENDING.pack((type, float(max_stime))))


def dequeue(tr, type: str, max_stime: float, no_schedule: bool = False) -> str | None:
    """Take (clear) a random eligible pending job; return its id, or None."""
    if no_schedule:
        key = _random_key_uuid(tr, type)
    else:
        begin, end = _bounds(type, max_stime)
        rows = tr.snapshot.get_range(begin, end, limit=SAMPLE)
        key = random.choice(rows).key if rows else None
    if key is None:
        return None
    tr.add_read_conflict_key(key)
    tr.clear(key)
    return keys.PENDING.unpack(key)[2]


def _random_key_uuid(tr, type: str) -> bytes | None:
    """couch_jobs' no_schedule pick: the pending job (scheduled at 0) nearest a random UUID,
    before or after it at random, without reading the queue's head."""
    prefix = keys.PENDING.pack((type, 0.0))
    probe = keys.PENDING.pack((type, 0.0, uuid.uuid4().hex))
    after = KeySelector.first_greater_or_equal(probe)
    before = KeySelector.last_less_or_equal(probe)
    for selector in (after, before) if random.random() < 0.5 else (before, after):
        key = tr.snapshot.get_key(selector).wait()
        if key.startswith(prefix) and key != prefix:
            return key
    return None


def count(tr, type: str, max_stime: float | None = None, limit: int | None = None) -> int:
    begin, end = _bounds(type, max_stime)
    return len(tr.snapshot.get_range(begin, end, limit=limit or 0))


def next_due(tr, type: str, after: float) -> float | None:
    """Scheduled time of the earliest pending job due later than ``after``, if any."""
    _begin, end = _bounds(type, after)
    rows = tr.snapshot.get_range(end, strinc(keys.PENDING.pack((type,))), limit=1)
    return keys.PENDING.unpack(rows[0].key)[1] if rows else None


def watch(tr, type: str):
    """Watch that fires when a job of ``type`` is enqueued (wait on it after commit)."""
    return tr.watch(keys.watches_pending_key(type))
