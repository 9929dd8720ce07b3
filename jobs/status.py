"""What ``jobs status`` reports, read from the job layer's indexes rather than by decoding
every job row (see ``keys.py`` for the layout):

* counts per type: ``pending`` and ``due`` from the pending queue's keys, ``running`` from
  the activity keys (one per running job), ``finished`` as the type's rows minus those two.
  Ranges are counted in pages, each in its own read-only transaction after the first,
  so that a store of any size stays under FoundationDB's 5-second limit; a type whose
  ranges fit in one page is counted in one snapshot, exactly.
* how long the oldest due job has waited: since it was enqueued or fell due, whichever is
  later (each pending entry records when it was enqueued, by the enqueuer's wall clock).
  ``due_asap`` counts the due jobs added with no scheduled time.
* how long ago running jobs were last active.  The store records no wall-clock time for
  that, only the versionstamp of each job's last update (its activity key) and of each
  type's last change (``watches_activity``).  ``behind`` is how far that stamp's commit
  version is behind the read version.  On FoundationDB versions advance at about one
  million per second, so ``behind`` converts to an approximate age in seconds; the
  embedded engine's versions count commits, so there ``behind`` is a number of commits
  and ``age`` is None.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from . import activity, api, keys, pending
from .engine import strinc
from .engine.transactional import run

BATCH = 10_000  # index keys counted per transaction (small keys, empty or short values)
DATA_BATCH = 1_000  # job rows per transaction: their values carry job data (<= 100 kB)
FDB_VERSIONS_PER_SECOND = 1_000_000  # FoundationDB's nominal version rate


@dataclass(frozen=True)
class Activity:
    """A versionstamped event: commit ``version``, ``behind`` the read version by that
    much, ``age`` in seconds when the engine's versions measure time (else None)."""

    version: int
    behind: int
    age: float | None


@dataclass(frozen=True)
class RunningJob:
    id: str
    last_activity: Activity


@dataclass(frozen=True)
class TypeStatus:
    type: str
    timeout: float | None  # None: jobs of the type exist but its timeout was cleared
    pending: int
    due: int  # pending and scheduled at or before now
    due_asap: int  # of those, added with no scheduled time
    oldest_due_age: float | None  # seconds the longest-waiting due job has waited
    running: int
    finished: int
    last_change: Activity | None  # the type's last job change (watches_activity)
    running_jobs: list[RunningJob] = field(default_factory=list)  # least recently active first


@dataclass(frozen=True)
class Status:
    now: float
    versions: str  # what ``behind`` counts: "commits" (embedded) or "versions" (FoundationDB)
    types: list[TypeStatus]


def versions_are_time(db) -> bool:
    """True on FoundationDB, whose versions advance with time; False on the embedded
    engine (recognised by its commit counter, ``commit_version``, which the fault
    injecting wrapper forwards), whose versions count commits."""
    return not hasattr(db, "commit_version")


def gather(db, limit: int = 10, now: float | None = None) -> Status:
    """Status of every type that has a timeout or has jobs; at most ``limit`` running jobs
    listed per type (least recently active first; the count covers all).  Read-only."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ValueError(f"limit must be an int >= 0, not {limit!r}")
    now = time.time() if now is None else now
    timed = versions_are_time(db)
    types = [_type_status(db, t, now, limit, timed) for t in run(db, job_types)]
    return Status(now, "versions" if timed else "commits", types)


def job_types(tr) -> list[str]:
    """Types that have a timeout or at least one job, sorted.  Jobs are found by skipping
    from one type's rows to the next (one read per type), not by reading every row."""
    found = set(api.get_types(tr))
    begin, end = keys.DATA.range().start, keys.DATA.range().stop
    while (key := _first_key(tr, begin, end)) is not None:
        type = keys.DATA.unpack(key)[0]
        found.add(type)
        begin = keys.DATA[type].range().stop
    return sorted(found)


def _first_key(tr, begin: bytes, end: bytes) -> bytes | None:
    for key, _value in tr.snapshot.get_range(begin, end, limit=1):
        return bytes(key)
    return None


def _ranges(type: str, now: float) -> dict[str, tuple[bytes, bytes, int]]:
    """name -> (begin, end, page size) of the ranges counted for ``type``."""
    queue = keys.pending_prefix(type)
    return {
        "pending": (queue, strinc(queue), BATCH),
        "due": (queue, strinc(keys.pending_prefix(type, float(now))), BATCH),
        "due_asap": (queue, strinc(keys.pending_prefix(type, 0.0)), BATCH),
        "running": (*keys.activity_range(type), BATCH),
        "rows": (keys.DATA[type].range().start, keys.DATA[type].range().stop, DATA_BATCH),
    }


def _page(tr, begin: bytes, end: bytes, size: int, waiting=None) -> tuple[int, bytes | None]:
    """Keys in one page of ``[begin, end)`` and where the next page starts (None: done).
    ``waiting``: a list that gets, for each pending entry, since when it waits."""
    last, n = None, 0
    for key, value in tr.snapshot.get_range(begin, end, limit=size):
        last, n = key, n + 1
        if waiting is not None:
            stime = keys.PENDING.unpack(key)[1]
            queued = pending.queued_at(bytes(value))
            waiting.append(max(stime, queued) if queued is not None else stime or None)
    return n, (bytes(last) + b"\x00" if n == size else None)


def _count_rest(db, begin: bytes | None, end: bytes, size: int, waiting=None) -> int:
    total = 0
    while begin is not None:
        n, begin = run(db, _page, begin, end, size, waiting)
        total += n
    return total


def _type_status(db, type: str, now: float, limit: int, timed: bool) -> TypeStatus:
    ranges = _ranges(type, now)

    def first_look(tr):
        """Everything but the pages after the first, in one snapshot."""
        rv = tr.get_read_version().wait()
        timeout = api.get_type_timeout(tr, type)
        del waiting[:]  # (a retried attempt starts over)
        pages = {name: _page(tr, *r, waiting if name == "due" else None) for name, r in ranges.items()}
        stamps = []  # (Seq, id) of the least recently active running jobs
        if limit:  # (a range read's limit 0 means "no limit")
            for key, value in tr.snapshot.get_range(*keys.activity_range(type), limit=limit):
                stamps.append((keys.ACTIVITY.unpack(key)[1], bytes(value).decode()))
        return rv, timeout, pages, stamps, activity.last_activity(tr, type)

    waiting: list[float | None] = []  # since when each due job waits (None: unknown)
    rv, timeout, pages, stamps, last = run(db, first_look)
    counts = {name: n + _count_rest(db, more, *ranges[name][1:], waiting if name == "due" else None)
              for name, (n, more) in pages.items()}
    since = min((t for t in waiting if t is not None), default=None)

    def stamped(stamp: bytes) -> Activity:
        version = int.from_bytes(stamp[:8], "big")
        behind = rv - version
        return Activity(version, behind, behind / FDB_VERSIONS_PER_SECOND if timed else None)

    return TypeStatus(
        type=type,
        timeout=timeout,
        pending=counts["pending"],
        due=counts["due"],
        due_asap=counts["due_asap"],
        oldest_due_age=None if since is None else max(0.0, now - since),
        running=counts["running"],
        # clamped: pages after the first are read at later versions than each other
        finished=max(0, counts["rows"] - counts["pending"] - counts["running"]),
        last_change=None if last is None else stamped(last),
        running_jobs=[RunningJob(job_id, stamped(seq.tr_version)) for seq, job_id in stamps],
    )
