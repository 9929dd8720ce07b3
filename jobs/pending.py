"""The pending queue of each type (couch_jobs_pending's part):
``("jobs", "pending", Type, STime, JobId)``.

Dequeue picks a random eligible job from a *snapshot* read of the queue's head and adds one
read conflict key, on the job it takes: workers that pick different jobs never conflict,
and two that pick the same one conflict at commit (1020) and the loser retries.  A batch
is a run of neighbouring jobs at a random place in a wider head, for the same reason.
"""

from __future__ import annotations

import random
import struct
import time
import uuid

from . import keys
from .engine import KeySelector, strinc
from .engine.transactional import watch as watch_key

SAMPLE = 16  # head of the queue read to pick from: enough that a few workers rarely pick alike
BATCH_SPREAD = 8  # a batch of n is a run of n taken at a random place in the first n * 8
_ONE = (1).to_bytes(8, "little")
_QUEUED_AT = struct.Struct(">d")


def enqueue(tr, type: str, stime: float, job_id: str) -> None:
    # The value: when the job was enqueued (wall clock of the enqueuing machine, for people:
    # ``jobs status`` shows how long due jobs have waited; nothing decides on it).
    tr.set(keys.pending_key(type, stime, job_id), _QUEUED_AT.pack(time.time()))
    wake(tr, type)


def wake(tr, type: str) -> None:
    """Wake the accepts waiting for jobs of ``type`` (a job was enqueued, the type resumed)."""
    tr.add(keys.watches_pending_key(type), _ONE)


def queued_at(value: bytes) -> float | None:
    """When a pending entry was enqueued (None: written by a release that kept no time)."""
    return _QUEUED_AT.unpack(value)[0] if len(value) == _QUEUED_AT.size else None


def remove(tr, type: str, stime: float, job_id: str) -> None:
    tr.clear(keys.pending_key(type, stime, job_id))


def _bounds(type: str, max_stime: float | None) -> tuple[bytes, bytes]:
    """Key range of the pending jobs scheduled at or before ``max_stime`` (None: all)."""
    prefix = keys.pending_prefix(type)
    if max_stime is None:
        return prefix, strinc(prefix)
    return prefix, strinc(keys.pending_prefix(type, float(max_stime)))


def _job_id(key: bytes) -> str:
    return keys.PENDING.unpack(key)[2]


def dequeue(tr, type: str, max_stime: float, no_schedule: bool = False) -> str | None:
    """Take (clear) a random eligible pending job and return its id, or None.  Eligible:
    scheduled at or before ``max_stime``; with ``no_schedule``, scheduled at 0 (ids
    UUID-like, picked near a random UUID without reading the queue's head)."""
    taken = dequeue_many(tr, type, max_stime, 1, no_schedule)
    return taken[0] if taken else None


def dequeue_many(tr, type: str, max_stime: float, limit: int, no_schedule: bool = False) -> list[str]:
    """Take (clear) up to ``limit`` eligible pending jobs and return their ids: one random
    job for a limit of 1; else a run of neighbours at a random place in the queue's head
    (or near a random UUID), so that workers taking batches at once rarely collide.  One
    read conflict key per job taken."""
    return take(tr, pick(tr, type, max_stime, limit, no_schedule))


def pick(tr, type: str, max_stime: float, limit: int, no_schedule: bool = False) -> list[bytes]:
    """The pending keys :func:`dequeue_many` would take, read without a conflict and not
    yet taken: a caller that reads something else meanwhile decides before :func:`take`."""
    if no_schedule:
        return _pick_near_uuid(tr, type) if limit == 1 else _run_near_uuid(tr, type, limit)
    return _pick_from_head(tr, type, max_stime, limit)


def take(tr, picked: list[bytes]) -> list[str]:
    """Take (clear) the ``picked`` pending keys; their job ids."""
    for key in picked:
        tr.add_read_conflict_key(key)  # the one conflict: another worker that took this job
        tr.clear(key)
    return [_job_id(key) for key in picked]


def _pick_from_head(tr, type: str, max_stime: float, limit: int) -> list[bytes]:
    begin, end = _bounds(type, max_stime)
    window = SAMPLE if limit == 1 else limit * BATCH_SPREAD
    head = [key for key, _value in tr.snapshot.get_range(begin, end, limit=window)]
    if limit == 1:
        return [random.choice(head)] if head else []
    if len(head) <= limit:
        return head
    start = random.randrange(len(head) - limit + 1)
    return head[start:start + limit]


def _pick_near_uuid(tr, type: str) -> list[bytes]:
    """The job scheduled at 0 nearest a random UUID, after or before it (50/50, so neither
    end of the id space waits longer than the other)."""
    prefix = keys.pending_prefix(type, 0.0)
    probe = keys.pending_key(type, 0.0, uuid.uuid4().hex)
    after = KeySelector.first_greater_or_equal(probe)
    before = KeySelector.last_less_or_equal(probe)
    for selector in (after, before) if random.random() < 0.5 else (before, after):
        key = bytes(tr.snapshot.get_key(selector).wait())
        if key.startswith(prefix) and key != prefix:
            return [key]
    return []


def _run_near_uuid(tr, type: str, limit: int) -> list[bytes]:
    """Up to ``limit`` jobs scheduled at 0 from a random UUID on (wrapping around)."""
    prefix = keys.pending_prefix(type, 0.0)
    probe = keys.pending_key(type, 0.0, uuid.uuid4().hex)
    picked = [k for k, _v in tr.snapshot.get_range(probe, strinc(prefix), limit=limit)]
    if len(picked) < limit:
        picked += [k for k, _v in tr.snapshot.get_range(prefix, probe, limit=limit - len(picked))]
    return picked


def count(tr, type: str, max_stime: float | None = None, limit: int | None = None) -> int:
    """Pending jobs scheduled at or before ``max_stime`` (None: all), at most ``limit``.
    A snapshot read."""
    if limit == 0:
        return 0  # (a range read's limit 0 means "no limit")
    begin, end = _bounds(type, max_stime)
    return sum(1 for _row in tr.snapshot.get_range(begin, end, limit=limit or 0))


def next_due(tr, type: str, after: float) -> float | None:
    """Scheduled time of the earliest pending job due later than ``after``, if any.  A
    snapshot read: the pending watch covers changes."""
    _begin, begin = _bounds(type, after)
    end = strinc(keys.pending_prefix(type))
    for key, _value in tr.snapshot.get_range(begin, end, limit=1):
        return keys.PENDING.unpack(key)[1]
    return None


def watch(tr, type: str):
    """Watch that fires when a job of ``type`` is enqueued or the type resumes (wait on it
    after commit).  A
    watch is a read: set it in a transaction that writes nothing, or that transaction
    conflicts with every concurrent enqueue."""
    return watch_key(tr, keys.watches_pending_key(type))
