"""The workers registry (``("jobs", "workers", WorkerId)``): the processors serving a store,
for people (``jobsctl workers``, ``jobsctl status``, ``/status``, ``/metrics``).

A processor :func:`register`\\ s as it starts, under a worker id new for each run, and
rewrites its record at each :func:`heartbeat` (a blind write of one small value: nothing is
read, nothing conflicts) with what it holds now; it :func:`unregister`\\ s when it stops.
A record says how long it stays live without a heartbeat (``stale_after``, chosen by the
worker: :func:`stale_bound`, ``STALE_BEATS`` heartbeat intervals and at least
``MIN_STALE`` seconds, so that two late beats, a busy machine or a clock a few seconds off
do not drop a live worker).  A worker killed with ``kill -9`` writes nothing more: its
record goes stale, and whoever reads the registry with :func:`live_workers` (``jobs
workers``, the status gather, a processor registering) clears the stale records it sees,
at most ``CLEAN_LIMIT`` per call, so the registry does not grow as processes come and go.

Times are wall clocks (the worker's for ``started`` and ``heartbeat``, the reader's for
``now``): the registry only informs, nothing is re-enqueued or decided on it (the activity
monitor decides on versionstamps), so clocks need only agree to well within
``MIN_STALE``.  A record cleared by a reader whose clock runs ahead is written again by its
worker's next heartbeat.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from dataclasses import dataclass, field, replace

from .. import checks, keys
from ..calls import within_store
from ..engine import tuple as fdb_tuple
from ..errors import StoreError

STALE_BEATS = 3  # heartbeat intervals a worker may miss before it is no longer live
MIN_STALE = 10.0  # seconds: the least staleness bound, whatever the interval
CLEAN_LIMIT = 100  # most stale records one read clears
MAX_HELD_IDS = 10  # held jobs named in a record (all are counted)
MAX_TYPES = 1000  # types one record lists


@dataclass(frozen=True)
class HeldJob:
    """A job a worker held at its last heartbeat; ``over_time_limit_since``: when its run
    went over its handler's time limit (wall clock), if it did and is still running (a
    handler blocked where it cannot be interrupted: it ends when the handler returns)."""

    type: str
    id: str
    over_time_limit_since: float | None = None


@dataclass(frozen=True)
class Worker:
    """One registered worker: ``id`` (new for each processor run), ``host``, ``pid``, the
    ``types`` it handles, its ``concurrency`` (lanes), when it ``started`` and last sent a
    ``heartbeat`` (its wall clock), how long it stays live without one (``stale_after``
    seconds), how many jobs it ``held`` then (accepted and not finished: running, or
    prefetched) and the first of them (``held_jobs``, at most ``MAX_HELD_IDS``)."""

    id: str
    host: str
    pid: int
    types: tuple[str, ...]
    concurrency: int
    started: float
    heartbeat: float
    stale_after: float
    held: int = 0
    held_jobs: tuple[HeldJob, ...] = field(default_factory=tuple)

    def over_time_limit(self) -> int:
        """How many of the jobs named in ``held_jobs`` are over their time limit."""
        return sum(j.over_time_limit_since is not None for j in self.held_jobs)

    def live(self, now: float) -> bool:
        """Whether a heartbeat came less than ``stale_after`` seconds before ``now``."""
        return now - self.heartbeat < self.stale_after


def stale_bound(interval: float) -> float:
    """How long a worker that heartbeats every ``interval`` seconds stays live without one:
    ``STALE_BEATS`` intervals, at least ``MIN_STALE`` seconds."""
    return max(STALE_BEATS * checks.seconds(interval, "interval", positive=True), MIN_STALE)


def new_worker(types, concurrency: int, *, interval: float, now: float | None = None) -> Worker:
    """The record of a worker of this process starting now (a new id), checked: ValueError
    or TypeError for bad types, concurrency or interval."""
    if isinstance(types, str) or not isinstance(types, (list, tuple, set, frozenset)):
        raise checks.ArgumentTypeError(f"types must be a list of type names, not {type(types).__name__}")
    names = tuple(sorted({checks.name(t, "type") for t in types}))
    if not names or len(names) > MAX_TYPES:
        raise ValueError(f"a worker handles 1 to {MAX_TYPES} types, not {len(names)}")
    _count(concurrency, "concurrency", least=1)
    started = time.time() if now is None else checks.seconds(now, "now")
    return Worker(uuid.uuid4().hex, socket.gethostname(), os.getpid(), names, concurrency, started, started,
                  stale_bound(interval))


def _count(value, what: str, least: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise checks.ArgumentTypeError(f"{what} must be an int, not {type(value).__name__}")
    if value < least:
        raise ValueError(f"{what} must be {least} or more, not {value}")
    return value


def _worker(value) -> Worker:
    if not isinstance(value, Worker):
        raise checks.ArgumentTypeError(f"expected a jobs.observe.workers.Worker (new_worker()), not {type(value).__name__}")
    return value


def register(tr, worker: Worker) -> Worker:
    """Write ``worker``'s record (a fresh heartbeat from its ``started``), and clear stale
    records of others (at most ``CLEAN_LIMIT``).  Running it again changes nothing more."""
    _worker(worker)

    def body(tr):
        clean_stale(tr)
        _write(tr, worker)
        return worker

    return within_store(tr, body)


def heartbeat(tr, worker: Worker, held=(), *, held_count: int | None = None, now: float | None = None) -> Worker:
    """Renew ``worker``'s record: heartbeat ``now`` (default: this clock), holding the jobs
    ``held`` (a list of ``(type, id)`` pairs, or ``(type, id, over_time_limit_since)``
    triples, of which the first ``MAX_HELD_IDS`` are named), or ``held_count`` jobs if given
    (``held`` then names some of them).  A blind
    write (the record is written again even if a reader cleared it); returns it."""
    _worker(worker)
    if not isinstance(held, (list, tuple)):
        raise checks.ArgumentTypeError(f"held must be a list of (type, id) pairs, not {type(held).__name__}")
    named = tuple(_held_job(*item) for item in held[:MAX_HELD_IDS])
    count = len(held) if held_count is None else _count(held_count, "held_count", least=len(named))
    at = time.time() if now is None else checks.seconds(now, "now")
    renewed = replace(worker, heartbeat=at, held=count, held_jobs=named)
    within_store(tr, lambda tr: _write(tr, renewed))
    return renewed


def _held_job(type: str, job_id: str, over_since: float | None = None) -> HeldJob:
    over = None if over_since is None else checks.seconds(over_since, "over_time_limit_since")
    return HeldJob(checks.name(type, "type"), checks.name(job_id, "job id"), over)


def unregister(tr, worker: Worker | str) -> None:
    """Clear the worker's record (a Worker or its id); clearing an absent one changes nothing."""
    worker_id = worker.id if isinstance(worker, Worker) else checks.name(worker, "worker id")
    within_store(tr, lambda tr: tr.clear(keys.worker_key(worker_id)))


def live_workers(tr, now: float | None = None, *, clean: bool = True) -> list[Worker]:
    """The live workers at ``now`` (default: this clock), by types then id; with ``clean``,
    clears the stale records it saw (at most ``CLEAN_LIMIT``, each with a read conflict: a
    heartbeat committed meanwhile makes the caller's transaction retry rather than drop a
    live worker)."""
    now = time.time() if now is None else checks.seconds(now, "now")

    def body(tr):
        records = registered(tr)
        if clean:
            _clear(tr, [w for w in records if not w.live(now)])
        return sorted((w for w in records if w.live(now)), key=lambda w: (w.types, w.started, w.id))

    return within_store(tr, body)


def clean_stale(tr, now: float | None = None) -> list[str]:
    """Clear the records stale at ``now`` (default: this clock), at most ``CLEAN_LIMIT``;
    the ids cleared."""
    now = time.time() if now is None else checks.seconds(now, "now")
    return within_store(tr, lambda tr: _clear(tr, [w for w in registered(tr) if not w.live(now)]))


def registered(tr) -> list[Worker]:
    """Every record, live or stale, by id (a snapshot read)."""
    r = keys.WORKERS.range()
    return within_store(tr, lambda tr: [decode(keys.WORKERS.unpack(k)[0], bytes(v))
                                        for k, v in tr.snapshot.get_range(r.start, r.stop)])


def _clear(tr, stale: list[Worker]) -> list[str]:
    gone = [w.id for w in stale[:CLEAN_LIMIT]]
    for worker_id in gone:
        key = keys.worker_key(worker_id)
        tr.add_read_conflict_key(key)
        tr.clear(key)
    return gone


def _write(tr, w: Worker) -> None:
    held_jobs = tuple((j.type, j.id) for j in w.held_jobs)
    over = tuple(j.over_time_limit_since for j in w.held_jobs)
    tr.set(keys.worker_key(w.id), fdb_tuple.pack(
        (w.host, w.pid, w.types, w.concurrency, w.started, w.heartbeat, w.stale_after, w.held, held_jobs, over)))


def decode(worker_id: str, raw: bytes) -> Worker:
    """The Worker of a stored record (fields a newer release appends are ignored);
    StoreError naming the worker if it is corrupt."""
    try:
        fields = fdb_tuple.unpack(raw)
        host, pid, types, lanes, started, beat, stale, held, held_jobs, over = fields[:10]
        return Worker(worker_id, host, int(pid), tuple(types), int(lanes), float(started), float(beat),
                      float(stale), int(held), tuple(HeldJob(t, i, s) for (t, i), s in zip(held_jobs, over)))
    except Exception as exc:  # noqa: BLE001 - any decoding failure means the same thing
        raise StoreError(f"the record of worker {worker_id!r} is corrupt ({raw[:40]!r})") from exc

