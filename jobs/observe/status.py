"""What ``jobsctl status`` reports, read from the job layer's indexes rather than by decoding
every job row (see ``keys.py`` for the layout):

* counts per type, from the counters every change keeps (``counts.py``): ``pending``,
  ``due`` and ``due_asap`` (due jobs added with no scheduled time), per priority band
  (``bands``; keyed jobs included), ``running``, ``finished`` (without failing) and
  ``failed``; ``lost``, the workers lost by the type's jobs in all, from the counter the
  activity monitor keeps.  The cost does not grow with the number of jobs.  Asked for
  ``exact`` counts, every type is counted from its ranges key by key
  (``status_ranges.py``).
* how long the longest-waiting due job has waited: since it was enqueued or fell due,
  whichever is later (each pending entry records when it was enqueued, by the enqueuer's
  wall clock), among the first ``status_ranges.SAMPLE`` due jobs of each band, the next
  in line (all of them when counted from the ranges).
* the most recent failures (id, when, reason): from the finished index, whose failed
  entries are in order of time, and the failed index's reasons.
* the type's retention (``retention.py``): how long finished and failed jobs are kept.
* the type's limits (``limits.py``) and how much of them is in use: the jobs holding one of
  its running slots, the jobs started in the last rate period (``limits.usage``: at most
  ``limits.MAX_SLOTS`` keys each); and how many of its job keys are in each place of the
  rotation (``fairness.py``), counted from their ranges (linear in keys, not jobs).
* whether the type is paused, and since when (the pauser's wall clock; ``pausing.py``).
* the live workers (``workers.py``): the processors serving the store, what they handle and
  hold; the gather clears the stale records it sees, as every reader of the registry does.
* how long ago running jobs were last active.  The store records no wall-clock time for
  that, only the versionstamp of each job's last update (its activity key) and of each
  type's last change (``watches_activity``).  ``behind`` is how far that stamp's commit
  version is behind the read version.  On both engines versions advance at about one
  million per second, so ``behind`` converts to an approximate age in seconds.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from .. import keys
from ..controls import limits as limits_mod, pausing, type_timeouts
from ..controls.limits import Limits
from ..controls.retention import KEEP_FOREVER, Retention, get_retention
from ..engine import run, value_of
from ..indexes import counts as counts_mod, pending, rates
from ..indexes.rates import Rates
from . import status_ranges as ranges_mod, workers as workers_mod
from ..queue import activity, finished as finished_index
from ..queue.reading import job_types
from ..stamps import FDB_VERSIONS_PER_SECOND
from ..upkeep import schedules as schedules_mod



@dataclass(frozen=True)
class Activity:
    """A versionstamped event: commit ``version``, ``behind`` the read version by that
    much, about ``age`` seconds ago."""

    version: int
    behind: int
    age: float


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
    """The pending jobs of one priority."""

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


PLACES = ranges_mod.PLACES


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
    last_hour: Rates = field(default_factory=Rates)  # runs finished (succeeded), failed, retried; start waits (rates.py)


@dataclass(frozen=True)
class Status:
    now: float
    versions: str  # what ``behind`` counts: "versions"
    types: list[TypeStatus]
    schedules: list[schedules_mod.Schedule] = field(default_factory=list)  # cron schedules, by type
    workers: list[workers_mod.Worker] = field(default_factory=list)  # live workers, by types


def gather(db, limit: int = 10, now: float | None = None, exact: bool = False) -> Status:
    """Status of every type that has a timeout, is paused, has limits or has jobs; at most ``limit``
    running jobs (least recently active first) and ``limit`` failures (most recent first)
    listed per type (the counts cover all).  ``exact``: count every range key by key, as
    for a type whose jobs are being counted, instead of reading the counters (linear in
    jobs: to check the counters).  Read-only, but for the stale worker records it clears."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ValueError(f"limit must be an int >= 0, not {limit!r}")
    now = time.time() if now is None else now
    names, paused = run(db, lambda tr: (job_types(tr), pausing.paused_types(tr)))
    types = [replace(_type_status(db, t, now, limit, exact), paused=t in paused, paused_since=paused.get(t))
             for t in names]
    return Status(now, "versions", types, schedules_mod.get_schedules(db), workers_mod.live_workers(db, now))


def probe(tr) -> None:
    """One snapshot read of the store's layout key in ``tr``: raises if the store cannot
    answer (a health check: ``monitor/http.py``'s ``/healthz``)."""
    tr.get_read_version().wait()
    tr.snapshot.get(keys.LAYOUT_KEY).wait()


class _Look(NamedTuple):
    """What the first transaction of a type's status reads, in one snapshot."""

    version: int
    timeout: float | None
    counts: counts_mod.Counts | None  # None: counted from the ranges (``exact``)
    ranges: dict  # name -> (begin, end, page size, whole): ``status_ranges.ranges``
    pages: dict  # name -> the first page of the range: (count, next page's start, kept entries)
    failures: list  # (id, at, reason) of the most recent failures, when ``counts``
    stamps: list  # (Seq, id) of the least recently active running jobs
    last: bytes | None
    lost: int
    retention: Retention
    limits: Limits | None
    usage: tuple[int | None, int | None]  # limits.usage: (running slots held, started in the period)
    rates: Rates  # the last hour's throughput and start waits


def _first_look(tr, type: str, now: float, limit: int, exact: bool, collected: ranges_mod.Collected) -> _Look:
    """Everything but the pages after the first, in one snapshot."""
    rv = tr.get_read_version().wait()
    counted = None if exact else counts_mod.read(tr, type, now)
    named = ranges_mod.ranges(type, float(now), [band for band, _head in pending.bands(tr, type)], counted is not None)
    pages = ranges_mod.first_pages(tr, named, collected)
    stamps = []
    if limit:  # (a range read's limit 0 means "no limit")
        for key, value in tr.snapshot.get_range(*keys.activity_range(type), limit=limit):
            stamps.append((keys.ACTIVITY.unpack(key)[1], bytes(value).decode()))
    failures = [] if counted is None or not limit else finished_index.recent_failures(tr, type, limit)
    type_limits = limits_mod.decode(value_of(tr.snapshot.get(keys.limits_key(type))))
    usage = (None, None) if type_limits is None else limits_mod.usage(tr, type, type_limits, now)
    return _Look(rv, type_timeouts.get_type_timeout(tr, type), counted, named, pages, failures, stamps,
                 activity.last_activity(tr, type), activity.lost_total(tr, type), get_retention(tr, type),
                 type_limits, usage, rates.read(tr, type, now))


def _numbers(look: _Look, counted: dict, collected: ranges_mod.Collected) -> dict:
    """The type's job counts, from its counters or else from its ranges (``counted``)."""
    c = look.counts
    if c is not None:
        return dict(pending=c.pending, due=sum(d for _p, d, _a in c.bands.values()),
                    due_asap=sum(a for _p, _d, a in c.bands.values()), running=c.running, finished=c.finished,
                    failed=c.failed, bands=[Band(b, p, d) for b, (p, d, _a) in c.bands.items()],
                    recent_failures=[Failure(*f) for f in look.failures])
    per_band = ranges_mod.by_band(counted, collected.keyed)
    pending_total = sum(per_band["pending"].values())
    return dict(
        pending=pending_total, due=sum(per_band["due"].values()), due_asap=sum(per_band["due_asap"].values()),
        running=counted["running"], failed=counted["failed"],
        # clamped: pages after the first are read at later versions than each other
        finished=max(0, counted["rows"] - pending_total - counted["running"] - counted["failed"]),
        bands=[Band(p, n, per_band["due"].get(p, 0)) for p, n in sorted(per_band["pending"].items()) if n],
        recent_failures=[Failure(*f) for f in collected.recent_failures()])


def _type_status(db, type: str, now: float, limit: int, exact: bool = False) -> TypeStatus:
    collected = ranges_mod.Collected(limit, now)
    look = run(db, _first_look, type, now, limit, exact, collected)
    counted = ranges_mod.count(db, look.ranges, look.pages, collected)

    def stamped(stamp: bytes) -> Activity:
        version = int.from_bytes(stamp[:8], "big")
        behind = look.version - version
        return Activity(version, behind, behind / FDB_VERSIONS_PER_SECOND)

    return TypeStatus(
        type=type,
        timeout=look.timeout,
        **_numbers(look, counted, collected),
        oldest_due_age=None if collected.since is None else max(0.0, now - collected.since),
        last_change=None if look.last is None else stamped(look.last),
        running_jobs=[RunningJob(job_id, stamped(seq.tr_version)) for seq, job_id in look.stamps],
        lost=look.lost,
        retention=look.retention,
        limits=look.limits,
        running_slots=look.usage[0],
        started_in_period=look.usage[1],
        keys=KeyPlaces(**{name: counted[f"keys:{name}"] for name in PLACES}),
        last_hour=look.rates,
    )
