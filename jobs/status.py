"""What ``jobs status`` reports, read from the job layer's indexes rather than by decoding
every job row (see ``keys.py`` for the layout):

* counts per type: ``pending`` and ``due`` from the pending queue's keys (each priority
  band's ranges; ``bands`` keeps the counts of each priority band), ``running`` from
  the activity keys (one per running job), ``failed`` from the failed index (``failed.py``),
  ``finished`` (without failing) as the type's rows minus those three; ``lost``, the
  workers lost by the type's jobs in all, from the counter the activity monitor keeps.
  Ranges are counted in pages, each in its own read-only transaction after the first,
  so that a store of any size stays under FoundationDB's 5-second limit; a type whose
  ranges fit in one page is counted in one snapshot, exactly.
* how long the oldest due job has waited: since it was enqueued or fell due, whichever is
  later (each pending entry records when it was enqueued, by the enqueuer's wall clock).
  ``due_asap`` counts the due jobs added with no scheduled time.
* the most recent failures (id, when, reason), from the failed index's values.
* the type's retention (``retention.py``): how long finished and failed jobs are kept.
* whether the type is paused, and since when (the pauser's wall clock; ``pausing.py``).
* how long ago running jobs were last active.  The store records no wall-clock time for
  that, only the versionstamp of each job's last update (its activity key) and of each
  type's last change (``watches_activity``).  ``behind`` is how far that stamp's commit
  version is behind the read version.  On FoundationDB versions advance at about one
  million per second, so ``behind`` converts to an approximate age in seconds; the
  embedded engine's versions count commits, so there ``behind`` is a number of commits
  and ``age`` is None.
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass, field, replace

from . import activity, failed as failed_index, keys, pausing, pending, schedules as schedules_mod, type_timeouts
from .retention import KEEP_FOREVER, Retention, get_retention
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
class Failure:
    """A failed job: its id, when it failed (the finisher's clock) and the reason given."""

    id: str
    at: float
    reason: str | None


@dataclass(frozen=True)
class Band:
    """The pending jobs of one priority (legacy entries counted in 0)."""

    priority: int
    pending: int
    due: int


@dataclass(frozen=True)
class TypeStatus:
    type: str
    timeout: float | None  # None: jobs of the type exist but its timeout was cleared
    pending: int
    due: int  # pending and scheduled at or before now
    due_asap: int  # of those, added with no scheduled time
    oldest_due_age: float | None  # seconds the longest-waiting due job has waited
    running: int
    finished: int  # finished without failing
    last_change: Activity | None  # the type's last job change (watches_activity)
    running_jobs: list[RunningJob] = field(default_factory=list)  # least recently active first
    failed: int = 0  # finished failed (retries used up, or too many lost workers)
    lost: int = 0  # workers lost by the type's jobs (re-enqueued by a monitor), in all
    recent_failures: list[Failure] = field(default_factory=list)  # most recent first
    bands: list[Band] = field(default_factory=list)  # the priority bands with pending jobs, best first
    retention: Retention = KEEP_FOREVER  # how long finished and failed jobs are kept
    paused: bool = False  # no worker takes its jobs until it is resumed
    paused_since: float | None = None  # when it was paused (the pauser's wall clock)


@dataclass(frozen=True)
class Status:
    now: float
    versions: str  # what ``behind`` counts: "commits" (embedded) or "versions" (FoundationDB)
    types: list[TypeStatus]
    schedules: list[schedules_mod.Schedule] = field(default_factory=list)  # cron schedules, by type


def versions_are_time(db) -> bool:
    """True on FoundationDB, whose versions advance with time; False on the embedded
    engine (recognised by its commit counter, ``commit_version``, which the fault
    injecting wrapper forwards), whose versions count commits."""
    return not hasattr(db, "commit_version")


def gather(db, limit: int = 10, now: float | None = None) -> Status:
    """Status of every type that has a timeout, is paused or has jobs; at most ``limit``
    running jobs (least recently active first) and ``limit`` failures (most recent first)
    listed per type (the counts cover all).  Read-only."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ValueError(f"limit must be an int >= 0, not {limit!r}")
    now = time.time() if now is None else now
    timed = versions_are_time(db)
    names, paused = run(db, lambda tr: (job_types(tr), pausing.paused_types(tr)))
    types = [replace(_type_status(db, t, now, limit, timed), paused=t in paused, paused_since=paused.get(t))
             for t in names]
    return Status(now, "versions" if timed else "commits", types, schedules_mod.get_schedules(db))


def job_types(tr) -> list[str]:
    """Types that have a timeout, are paused or have at least one job, sorted.  Jobs are
    found by skipping from one type's rows to the next (one read per type), not by reading
    every row."""
    found = set(type_timeouts.get_types(tr)) | set(pausing.paused_types(tr))
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


def _ranges(type: str, now: float, bands: list) -> dict:
    """name -> (begin, end, page size) of the ranges counted for ``type``; the pending
    queue's names are (name, band), one per band in ``bands``."""
    queue = {}
    for band in bands:
        start = keys.band_prefix(type, band)
        queue[("pending", band)] = (start, strinc(start), BATCH)
        queue[("due", band)] = (start, strinc(keys.band_prefix(type, band, now)), BATCH)
        queue[("due_asap", band)] = (start, strinc(keys.band_prefix(type, band, 0.0)), BATCH)
    return {
        **queue,
        "running": (*keys.activity_range(type), BATCH),
        "failed": (*failed_index.type_range(type), BATCH),
        "rows": (keys.DATA[type].range().start, keys.DATA[type].range().stop, DATA_BATCH),
    }


def _page(tr, begin: bytes, end: bytes, size: int, seen=None) -> tuple[int, bytes | None]:
    """Keys in one page of ``[begin, end)`` and where the next page starts (None: done).
    ``seen(key, value)``, if given, is told of each entry."""
    last, n = None, 0
    for key, value in tr.snapshot.get_range(begin, end, limit=size):
        last, n = key, n + 1
        if seen is not None:
            seen(bytes(key), bytes(value))
    return n, (bytes(last) + b"\x00" if n == size else None)


def _count_rest(db, begin: bytes | None, end: bytes, size: int, seen=None) -> int:
    total = 0
    while begin is not None:
        n, begin = run(db, _page, begin, end, size, seen)
        total += n
    return total


class _Collected:
    """What the pages of the ``due`` and ``failed`` ranges tell besides their counts:
    since when each due job waits, and the ``limit`` most recent failures."""

    def __init__(self, limit: int):
        self.limit = limit
        self.clear()

    def clear(self) -> None:
        self.waiting: list[float | None] = []  # since when each due job waits (None: unknown)
        self.failures: list[tuple[float, str, str | None]] = []  # a min-heap of (at, id, reason)

    def due(self, key: bytes, value: bytes) -> None:
        stime = keys.pending_entry(key)[1]
        queued = pending.queued_at(value)
        self.waiting.append(max(stime, queued) if queued is not None else stime or None)

    def failed(self, key: bytes, value: bytes) -> None:
        if self.limit:
            at, reason = failed_index.entry(value)
            item = (at, keys.FAILED.unpack(key)[1], reason)
            (heapq.heappush if len(self.failures) < self.limit else heapq.heappushpop)(self.failures, item)

    def seen(self, name):
        name = name[0] if isinstance(name, tuple) else name
        return {"due": self.due, "failed": self.failed}.get(name)

    def recent_failures(self) -> list[Failure]:
        return [Failure(job_id, at, reason) for at, job_id, reason in sorted(self.failures, reverse=True)]


def _type_status(db, type: str, now: float, limit: int, timed: bool) -> TypeStatus:
    ranges = {}

    def first_look(tr):
        """Everything but the pages after the first, in one snapshot."""
        rv = tr.get_read_version().wait()
        timeout = type_timeouts.get_type_timeout(tr, type)
        collected.clear()  # (a retried attempt starts over)
        ranges.clear()
        ranges.update(_ranges(type, float(now), [band for band, _head in pending.bands(tr, type)]))
        pages = {name: _page(tr, *r, collected.seen(name)) for name, r in ranges.items()}
        stamps = []  # (Seq, id) of the least recently active running jobs
        if limit:  # (a range read's limit 0 means "no limit")
            for key, value in tr.snapshot.get_range(*keys.activity_range(type), limit=limit):
                stamps.append((keys.ACTIVITY.unpack(key)[1], bytes(value).decode()))
        return (rv, timeout, pages, stamps, activity.last_activity(tr, type), activity.lost_total(tr, type),
                get_retention(tr, type))

    collected = _Collected(limit)
    rv, timeout, pages, stamps, last, lost, retention = run(db, first_look)
    counts = {name: n + _count_rest(db, more, *ranges[name][1:], collected.seen(name))
              for name, (n, more) in pages.items()}
    since = min((t for t in collected.waiting if t is not None), default=None)
    by_band = _by_band(counts)

    def stamped(stamp: bytes) -> Activity:
        version = int.from_bytes(stamp[:8], "big")
        behind = rv - version
        return Activity(version, behind, behind / FDB_VERSIONS_PER_SECOND if timed else None)

    return TypeStatus(
        type=type,
        timeout=timeout,
        pending=sum(by_band["pending"].values()),
        due=sum(by_band["due"].values()),
        due_asap=sum(by_band["due_asap"].values()),
        oldest_due_age=None if since is None else max(0.0, now - since),
        running=counts["running"],
        # clamped: pages after the first are read at later versions than each other
        finished=max(0, counts["rows"] - sum(by_band["pending"].values()) - counts["running"] - counts["failed"]),
        last_change=None if last is None else stamped(last),
        running_jobs=[RunningJob(job_id, stamped(seq.tr_version)) for seq, job_id in stamps],
        failed=counts["failed"],
        lost=lost,
        recent_failures=collected.recent_failures(),
        bands=[Band(p, n, by_band["due"].get(p, 0)) for p, n in sorted(by_band["pending"].items()) if n],
        retention=retention,
    )


def _by_band(counts: dict) -> dict[str, dict[int, int]]:
    """The pending queue's counts: name -> {priority: count}, legacy entries in band 0."""
    out: dict[str, dict[int, int]] = {"pending": {}, "due": {}, "due_asap": {}}
    for name, n in counts.items():
        if isinstance(name, tuple):
            kind, band = name
            band = 0 if band is keys.LEGACY else band
            out[kind][band] = out[kind].get(band, 0) + n
    return out
