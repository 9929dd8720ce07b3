"""The activity monitor: re-enqueues running jobs whose workers stopped calling ``update``.

Per type, it samples the type's last-activity versionstamp every fraction of the type
timeout T, remembering when (on its own monotonic clock) it took each sample.  A running
job whose activity key is at or before a sample taken at least T ago has not been updated
for at least T, whatever the clocks of the workers' machines say; it is made pending again
(lock dropped, scheduled time and data kept) and its old worker gets ``Halt``.  With
samples every T/4, and at least every 0.5 s, a job is re-enqueued between T and
min(1.5 T, T + 1 s) after its last update (couch_jobs' single remembered stamp gives T to 2 T).  Several monitors over one store are
harmless: re-enqueueing is a transaction that re-checks each job's lock.

That is all it does: retention (``retention.py``) and the counters' upkeep
(``counters.py``) are duties of their own, run beside it.
"""

from __future__ import annotations

import collections
import logging
import time

import jobs
from jobs.queue import activity
from jobs.engine import run, run_noting

from .batching import AdaptiveBatch, Failures, Unreadable
from .duty import Duty

log = logging.getLogger("monitor")

CHECKS_PER_TIMEOUT = 4
# At most half a second between samples, whatever the timeout: a job is re-enqueued at
# most about one second after its timeout ran out (one sample late, one pass late).
MIN_INTERVAL, MAX_INTERVAL = 0.05, 0.5
IDLE_INTERVAL = 1.0  # when no type has a timeout
TRANSACTION_TIMEOUT_MS = 4000  # under FDB's 5 s, so a too-slow batch fails and shrinks


class ActivityMonitor(Duty):
    """Watches every type that has a timeout (or only ``types``) in store ``db``.

    ``start()``/``stop()`` run it on a daemon thread; ``await monitor.serve()`` runs it in
    an anyio task; ``check()`` runs one pass (for tests and tools)."""

    name = "activity monitor"

    def __init__(self, db, types: list[str] | None = None):
        super().__init__()  # (``errors``: passes that failed, logged)
        self.db = db
        self.types = None if types is None else list(types)
        self.reenqueued = 0  # jobs this monitor made pending again, in all
        self._batch = AdaptiveBatch()
        self.unreadable = Unreadable()  # jobs passed over: their rows cannot be read (logged once)
        # type -> (timeout, deque of (monotonic time, versionstamp)), oldest first
        self._samples: dict[str, tuple[float, collections.deque]] = {}

    # --- one pass ------------------------------------------------------------------------

    def check(self) -> int:
        """Sample every type and re-enqueue what is overdue; returns how many jobs it
        re-enqueued.  A type that fails does not hold the others up: the pass goes through
        every type, then raises what failed (each noted with its type; an ExceptionGroup
        if several did)."""
        types = self.types if self.types is not None else jobs.get_types(self.db)
        failures = Failures("activity monitor")
        kept, total = set(), 0
        for type in types:
            reenqueued = failures.catch(type, self._type_pass, type, kept)
            total += reenqueued or 0
        for gone in set(self._samples) - kept:
            del self._samples[gone]
        self.reenqueued += total
        failures.raise_any()
        return total

    def _type_pass(self, type: str, kept: set) -> int:
        """One type's share of a pass: how many of its jobs it re-enqueued.  Adds the type
        to ``kept`` unless it has no timeout (its samples are dropped then)."""
        kept.add(type)  # (a type that fails keeps its samples)
        timeout = jobs.get_type_timeout(self.db, type)
        if timeout is None:
            kept.discard(type)
            return 0
        return self._check_type(type, timeout)

    def _check_type(self, type: str, timeout: float) -> int:
        known = self._samples.get(type)
        if known is None or known[0] != timeout:  # new type or new timeout: start over
            known = self._samples[type] = (timeout, collections.deque())
        samples = known[1]
        stamp = run(self.db, activity.last_activity, type)
        now = time.monotonic()
        if stamp is not None and (not samples or samples[-1][1] != stamp):
            samples.append((now, stamp))
        old = 0  # samples taken at least a timeout ago
        while old < len(samples) and now - samples[old][0] >= timeout:
            old += 1
        if not old:
            return 0
        # every job at or before the newest of them is re-enqueued now (later updates stamp
        # later); they are dropped once that is done (a failed attempt is retried next pass)
        reenqueued = self._reenqueue(type, samples[old - 1][1])
        for _ in range(old):
            samples.popleft()
        return reenqueued

    def _reenqueue(self, type: str, up_to: bytes) -> int:
        total = 0
        while True:
            found: list = []
            unreadable: list = []

            def attempt(tr):
                tr.options.set_timeout(TRANSACTION_TIMEOUT_MS)  # (options do not outlive a reset)
                del found[:], unreadable[:]
                return activity.reenqueue_inactive(tr, type, up_to, self._batch.size, found, unreadable)

            count, more = run_noting(self.db, self._batch.too_big, attempt)  # (too big: halved, at once)
            total += count
            if found:
                _say_reenqueued(type, found)
            self.unreadable.say(unreadable, "re-enqueued")
            if not more:
                return total
            self._batch.full()

    def interval(self) -> float:
        """Seconds between passes: a fraction of the shortest type timeout."""
        timeouts = [t for t, _s in self._samples.values()]
        if not timeouts:
            return IDLE_INTERVAL
        return min(MAX_INTERVAL, max(MIN_INTERVAL, min(timeouts) / CHECKS_PER_TIMEOUT))


def _say_reenqueued(type: str, found: list) -> None:
    """Log the jobs one re-enqueue committed, by the worker that held them: a worker that
    died is expected now and then; one that is alive and listed here stalled past the type
    timeout (its jobs run again elsewhere, and its own outcomes for them are dropped)."""
    by_worker = collections.Counter(worker or "?" for _id, worker in found)
    log.warning("type %s: re-enqueued %d running job(s) not updated for the type timeout (%s; e.g. %s)", type,
                len(found), ", ".join(f"{n} of worker {w}" for w, n in by_worker.most_common()),
                ", ".join(job_id for job_id, _w in found[:5]))
