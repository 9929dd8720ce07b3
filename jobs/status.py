"""What ``jobs status`` reports, read from the job layer's indexes rather than by decoding
every job row (see ``keys.py`` for the layout):

* counts per type: ``pending`` and ``due`` from the pending queue's keys (each priority
  band's ranges) and from the keyed jobs' queues (``kpending``: one range per type, each
  entry classified by its priority and scheduled time); ``bands`` keeps the counts of each
  priority band, keyed jobs included.  ``running`` from
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
* the type's limits (``limits.py``) and how much of them is in use: the jobs holding one of
  its running slots, the jobs started in the last rate period (``limits.usage``: at most
  ``limits.MAX_SLOTS`` keys each); and how many of its job keys are in each place of the
  rotation (``fairness.py``), counted in pages as the other ranges.
* whether the type is paused, and since when (the pauser's wall clock; ``pausing.py``).
* the live workers (``workers.py``): the processors serving the store, what they handle and
  hold; the gather clears the stale records it sees, as every reader of the registry does.
* how long ago running jobs were last active.  The store records no wall-clock time for
  that, only the versionstamp of each job's last update (its activity key) and of each
  type's last change (``watches_activity``).  ``behind`` is how far that stamp's commit
  version is behind the read version.  On both engines versions advance at about one
  million per second, so ``behind`` converts to an approximate age in seconds; a stamp
  written by an embedded engine of an earlier release, whose versions counted commits,
  has no age (None) and ``behind`` is then a number of commits.
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from . import activity, fairness, failed as failed_index, keys, limits as limits_mod, pausing, pending
from . import rates, schedules as schedules_mod, type_timeouts, workers as workers_mod
from .rates import Rates
from .limits import Limits
from .retention import KEEP_FOREVER, Retention, get_retention
from .engine import strinc, value_of
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
class KeyPlaces:
    """How many job keys of a type with pending jobs are in each place (``fairness.py``):
    ``turns``, in the rotation, served in turn; ``asleep``, until their next job (or rate
    slot) is due; ``full``, at their running limit until one of their jobs stops."""

    turns: int = 0
    asleep: int = 0
    full: int = 0

    @property
    def total(self) -> int:
        return self.turns + self.asleep + self.full


PLACES = fairness.PLACES


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
    limits: Limits | None = None  # its concurrency and rate limits (None: none)
    running_slots: int | None = None  # jobs holding one of its running slots (None: no concurrency limit)
    started_in_period: int | None = None  # jobs started in the last rate period (None: no rate limit)
    keys: KeyPlaces = field(default_factory=KeyPlaces)  # its job keys with pending jobs, per place
    last_hour: Rates = field(default_factory=Rates)  # jobs finished and failed, start waits (rates.py)


@dataclass(frozen=True)
class Status:
    now: float
    versions: str  # what ``behind`` counts: "versions" (an embedded store of an earlier release said "commits")
    types: list[TypeStatus]
    schedules: list[schedules_mod.Schedule] = field(default_factory=list)  # cron schedules, by type
    workers: list[workers_mod.Worker] = field(default_factory=list)  # live workers, by types


TIMED_VERSIONS = 10**15  # embedded versions from here on measure time (10**15 µs: September 2001)


def versions_are_time(db):
    """For a version of ``db``, whether it measures time: always on FoundationDB; on the
    embedded engine (recognised by ``commit_version``, which the fault injecting wrapper
    forwards) once it is a clock's, not a commit counter's of an earlier release."""
    if not hasattr(db, "commit_version"):
        return lambda version: True
    return lambda version: version >= TIMED_VERSIONS


def gather(db, limit: int = 10, now: float | None = None) -> Status:
    """Status of every type that has a timeout, is paused, has limits or has jobs; at most ``limit``
    running jobs (least recently active first) and ``limit`` failures (most recent first)
    listed per type (the counts cover all).  Read-only, but for the stale worker records it
    clears."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ValueError(f"limit must be an int >= 0, not {limit!r}")
    now = time.time() if now is None else now
    timed = versions_are_time(db)
    names, paused = run(db, lambda tr: (job_types(tr), pausing.paused_types(tr)))
    types = [replace(_type_status(db, t, now, limit, timed), paused=t in paused, paused_since=paused.get(t))
             for t in names]
    return Status(now, "versions", types, schedules_mod.get_schedules(db), workers_mod.live_workers(db, now))


def job_types(tr) -> list[str]:
    """Types that have a timeout, are paused, have limits or have at least one job, sorted.
    Jobs are found by skipping from one type's rows to the next (one read per type), not
    by reading every row."""
    found = set(type_timeouts.get_types(tr)) | set(pausing.paused_types(tr)) | set(limits_mod.limited_types(tr))
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
    queue's names are (name, band), one per band in ``bands``; ``kpending`` holds every
    keyed pending job of the type, ``keys:PLACE`` its job keys in each place."""
    queue = {}
    for band in bands:
        start = keys.band_prefix(type, band)
        queue[("pending", band)] = (start, strinc(start), BATCH)
        queue[("due", band)] = (start, strinc(keys.band_prefix(type, band, now)), BATCH)
        queue[("due_asap", band)] = (start, strinc(keys.band_prefix(type, band, 0.0)), BATCH)
    keyed = keys.KPENDING.pack((type,))
    places = {f"keys:{name}": keys.keys_prefix(type, part) for name, part in PLACES.items()}
    return {
        **queue,
        "kpending": (keyed, strinc(keyed), BATCH),
        **{name: (prefix, strinc(prefix), BATCH) for name, prefix in places.items()},
        "running": (*keys.activity_range(type), BATCH),
        "failed": (*failed_index.type_range(type), BATCH),
        "rows": (keys.DATA[type].range().start, keys.DATA[type].range().stop, DATA_BATCH),
    }


def _page(tr, begin: bytes, end: bytes, size: int, keep: bool = False) -> tuple[int, bytes | None, list]:
    """Keys in one page of ``[begin, end)``, where the next page starts (None: done) and,
    if ``keep``, the page's entries (told to :class:`_Collected` once the read is done: a
    retried transaction must not tell them twice)."""
    last, n, kept = None, 0, []
    for key, value in tr.snapshot.get_range(begin, end, limit=size):
        last, n = key, n + 1
        if keep:
            kept.append((bytes(key), bytes(value)))
    return n, (bytes(last) + b"\x00" if n == size else None), kept


def _count_rest(db, begin: bytes | None, end: bytes, size: int, seen=None) -> int:
    total = 0
    while begin is not None:
        n, begin, kept = run(db, _page, begin, end, size, seen is not None)
        total += n
        for key, value in kept:
            seen(key, value)
    return total


class _Collected:
    """What the pages of the ``due``, ``kpending`` and ``failed`` ranges tell besides their
    counts: since when the longest-waiting due job waits, the keyed jobs per band (pending,
    due, due as soon as possible), and the ``limit`` most recent failures."""

    def __init__(self, limit: int, now: float):
        self.limit, self.now = limit, now
        self.since: float | None = None  # since when the longest-waiting due job waits
        self.keyed: dict[str, dict[int, int]] = {"pending": {}, "due": {}, "due_asap": {}}
        self.failures: list[tuple[float, str, str | None]] = []  # a min-heap of (at, id, reason)

    def _waits(self, stime: float, value: bytes) -> None:
        queued = pending.queued_at(value)
        since = max(stime, queued) if queued is not None else stime or None
        if since is not None and (self.since is None or since < self.since):
            self.since = since

    def due(self, key: bytes, value: bytes) -> None:
        self._waits(keys.pending_entry(key)[1], value)

    def kpending(self, key: bytes, value: bytes) -> None:
        """A keyed job's pending entry ``(Type, Key, Priority, STime, JobId)``."""
        _type, _key, priority, stime, _id = keys.KPENDING.unpack(key)
        kinds = ["pending"]
        if stime <= self.now:
            kinds.append("due")
            self._waits(stime, value)
            if stime == 0:
                kinds.append("due_asap")
        for kind in kinds:
            self.keyed[kind][priority] = self.keyed[kind].get(priority, 0) + 1

    def failed(self, key: bytes, value: bytes) -> None:
        if self.limit:
            at, reason = failed_index.entry(value)
            item = (at, keys.FAILED.unpack(key)[1], reason)
            (heapq.heappush if len(self.failures) < self.limit else heapq.heappushpop)(self.failures, item)

    def seen(self, name):
        name = name[0] if isinstance(name, tuple) else name
        return {"due": self.due, "kpending": self.kpending, "failed": self.failed}.get(name)

    def recent_failures(self) -> list[Failure]:
        return [Failure(job_id, at, reason) for at, job_id, reason in sorted(self.failures, reverse=True)]


class _Look(NamedTuple):
    """What the first transaction of a type's status reads, in one snapshot."""

    version: int
    timeout: float | None
    ranges: dict  # name -> (begin, end, page size)
    pages: dict  # name -> the first page of the range: (count, next page's start, kept entries)
    stamps: list  # (Seq, id) of the least recently active running jobs
    last: bytes | None
    lost: int
    retention: Retention
    limits: Limits | None
    usage: tuple[int | None, int | None]  # limits.usage: (running slots held, started in the period)
    rates: Rates  # the last hour's throughput and start waits


def _first_look(tr, type: str, now: float, limit: int, collected: _Collected) -> _Look:
    """Everything but the pages after the first, in one snapshot."""
    rv = tr.get_read_version().wait()
    ranges = _ranges(type, float(now), [band for band, _head in pending.bands(tr, type)])
    pages = {name: _page(tr, *r, collected.seen(name) is not None) for name, r in ranges.items()}
    stamps = []
    if limit:  # (a range read's limit 0 means "no limit")
        for key, value in tr.snapshot.get_range(*keys.activity_range(type), limit=limit):
            stamps.append((keys.ACTIVITY.unpack(key)[1], bytes(value).decode()))
    type_limits = limits_mod.decode(value_of(tr.snapshot.get(keys.limits_key(type))))
    usage = (None, None) if type_limits is None else limits_mod.usage(tr, type, type_limits, now)
    return _Look(rv, type_timeouts.get_type_timeout(tr, type), ranges, pages, stamps,
                 activity.last_activity(tr, type), activity.lost_total(tr, type), get_retention(tr, type),
                 type_limits, usage, rates.read(tr, type, now))


def _counts(db, look: _Look, collected: _Collected) -> dict:
    """name -> how many keys the range holds, its first page and the rest (each page after
    the first in its own transaction), told to ``collected`` as they are read."""
    counts = {}
    for name, (n, more, kept) in look.pages.items():
        seen = collected.seen(name)
        for key, value in kept:
            seen(key, value)
        counts[name] = n + _count_rest(db, more, *look.ranges[name][1:], seen)
    return counts


def _type_status(db, type: str, now: float, limit: int, timed) -> TypeStatus:
    collected = _Collected(limit, now)
    look = run(db, _first_look, type, now, limit, collected)
    counts = _counts(db, look, collected)
    by_band = _by_band(counts, collected.keyed)
    pending_total = sum(by_band["pending"].values())

    def stamped(stamp: bytes) -> Activity:
        version = int.from_bytes(stamp[:8], "big")
        behind = look.version - version
        return Activity(version, behind, behind / FDB_VERSIONS_PER_SECOND if timed(version) else None)

    return TypeStatus(
        type=type,
        timeout=look.timeout,
        pending=pending_total,
        due=sum(by_band["due"].values()),
        due_asap=sum(by_band["due_asap"].values()),
        oldest_due_age=None if collected.since is None else max(0.0, now - collected.since),
        running=counts["running"],
        # clamped: pages after the first are read at later versions than each other
        finished=max(0, counts["rows"] - pending_total - counts["running"] - counts["failed"]),
        last_change=None if look.last is None else stamped(look.last),
        running_jobs=[RunningJob(job_id, stamped(seq.tr_version)) for seq, job_id in look.stamps],
        failed=counts["failed"],
        lost=look.lost,
        recent_failures=collected.recent_failures(),
        bands=[Band(p, n, by_band["due"].get(p, 0)) for p, n in sorted(by_band["pending"].items()) if n],
        retention=look.retention,
        limits=look.limits,
        running_slots=look.usage[0],
        started_in_period=look.usage[1],
        keys=KeyPlaces(**{name: counts[f"keys:{name}"] for name in PLACES}),
        last_hour=look.rates,
    )


def _by_band(counts: dict, keyed: dict[str, dict[int, int]]) -> dict[str, dict[int, int]]:
    """The pending counts: name -> {priority: count}, the type's queue (legacy entries in
    band 0) and the keyed jobs' queues (``keyed``, counted by :class:`_Collected`) together."""
    out: dict[str, dict[int, int]] = {kind: dict(per_band) for kind, per_band in keyed.items()}
    for name, n in counts.items():
        if isinstance(name, tuple):
            kind, band = name
            band = 0 if band is keys.LEGACY else band
            out[kind][band] = out[kind].get(band, 0) + n
    return out
