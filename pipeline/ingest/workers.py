"""Ingest workers: the names chunks are placed on, registered with a time to live and
renewed by heartbeats (:func:`pipeline.ingest.attach` makes a processor send them), and
the hints a new transaction gets from the live ones."""

from __future__ import annotations

import time

from jobs import checks

from .. import schema
from . import layout
from .records import Hints, Worker, decode, encode, worker

WORKER_TTL = 30.0  # seconds a worker registration lives after its last heartbeat
HEARTBEATS_PER_TTL = 3  # two may be late before the registration expires
clock = time.time  # the time registrations are measured with (seconds since the epoch; tests set it)


def live_workers(tr) -> list[Worker]:
    """The live workers (registrations not expired), by name."""
    now = clock()
    return [w for w in _registered(tr) if w.live(now)]


def _registered(tr) -> list[Worker]:
    """Every worker record, expired or not, by name."""
    return [worker(name, decode(v, f"ingest worker record {k!r}")) for name, k, v in layout.workers(tr)]


def hints(tr) -> Hints:
    """The hints of a transaction beginning now: the live workers and their threads."""
    workers = live_workers(tr.snapshot)  # a hint: no conflict with workers coming and going
    return Hints(len(workers), min((w.threads for w in workers), default=0), tuple(w.name for w in workers))


def register_worker(tr, name: str, *, threads: int = 1, ttl: float = WORKER_TTL) -> Worker:
    """Register an ingest worker (a name chunks are placed on, with its number of loading
    threads, for the hints of new transactions), or renew its registration: it lives
    ``ttl`` seconds, so call this again sooner (a heartbeat: :func:`attach` makes the
    processor do it) to stay registered.  Times are the machines' clocks: keep them in
    step to well within ``ttl``."""
    schema.token(name, "worker name")
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be an int >= 1, not {threads!r}")
    ttl = checks.seconds(ttl, "ttl", positive=True)
    key = layout.worker_key(name)

    def body(tr):
        now = clock()
        raw = layout.read(tr.snapshot, key)  # only to keep `since`: renewals must not conflict
        old = None if raw is None else worker(name, decode(raw, f"ingest worker record {name!r}"))
        since = old.since if old is not None and old.live(now) else now
        tr.set(key, encode({"threads": threads, "since": since, "seen": now, "ttl": ttl}))
        return Worker(name, threads, since, now, ttl)

    return layout.run(tr, body)


def unregister_worker(tr, name: str) -> None:
    """Forget a worker: no new chunk is placed on it (chunks placed there keep their
    placement).  A processor that :func:`attach` registered does it when it stops."""
    schema.token(name, "worker name")
    layout.run(tr, lambda tr: tr.clear(layout.worker_key(name)))


def forget_expired_workers(tr) -> list[str]:
    """Clear the records of expired registrations (a worker that comes back registers
    anew), so that they do not pile up as processes come and go; the names forgotten.  The
    records are read with conflicts: a renewal committed meanwhile makes this retry (or, in
    the caller's transaction, fail) rather than forget a live worker.  The collector job
    (``pipeline.collector``) runs it."""

    def body(tr):
        now = clock()
        gone = [w.name for w in _registered(tr) if not w.live(now)]
        for name in gone:
            tr.clear(layout.worker_key(name))
        return gone

    return layout.run(tr, body)


def list_workers(tr) -> list[Worker]:
    """The live workers (registered, not expired), sorted by name."""
    return layout.run(tr, live_workers)
