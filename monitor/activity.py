"""The activity monitor: re-enqueues running jobs whose workers stopped calling ``update``.

Per type, it samples the type's last-activity versionstamp every fraction of the type
timeout T, remembering when (on its own monotonic clock) it took each sample.  A running
job whose activity key is at or before a sample taken at least T ago has not been updated
for at least T, whatever the clocks of the workers' machines say; it is made pending again
(lock dropped, scheduled time and data kept) and its old worker gets ``Halt``.  With
samples every T/4, and at least every 0.5 s, a job is re-enqueued between T and
min(1.5 T, T + 1 s) after its last update (couch_jobs' single remembered stamp gives T to 2 T).  Several monitors over one store are
harmless: re-enqueueing is a transaction that re-checks each job's lock.

Each pass also removes finished jobs kept longer than their type's retention, a bounded
amount per pass (``retention.py``); while it leaves some due, passes come at the shortest
interval, so that retention catches up.
"""

from __future__ import annotations

import collections
import logging
import math
import threading
import time

import anyio
import anyio.to_thread

import jobs
from jobs import activity, counts, rates
from jobs.engine.transactional import run, run_noting

from .batching import AdaptiveBatch, Failures, Unreadable, jittered
from .retention import Pruner

log = logging.getLogger("monitor")

CHECKS_PER_TIMEOUT = 4
# At most half a second between samples, whatever the timeout: a job is re-enqueued at
# most about one second after its timeout ran out (one sample late, one pass late).
MIN_INTERVAL, MAX_INTERVAL = 0.05, 0.5
IDLE_INTERVAL = 1.0  # when no type has a timeout
TRANSACTION_TIMEOUT_MS = 4000  # under FDB's 5 s, so a too-slow batch fails and shrinks
# A running monitor prunes at most this often: its passes come every 0.05-0.5 s, and
# retention periods are minutes to days (``check()`` called by hand prunes every time).
PRUNE_INTERVAL = 1.0


class ActivityMonitor:
    """Watches every type that has a timeout (or only ``types``) in store ``db``.

    ``start()``/``stop()`` run it on a daemon thread; ``await monitor.serve()`` runs it in
    an anyio task; ``check()`` runs one pass (for tests and tools)."""

    def __init__(self, db, types: list[str] | None = None):
        self.db = db
        self.types = None if types is None else list(types)
        self.reenqueued = 0  # jobs this monitor made pending again, in all
        self.errors = 0  # passes that failed (logged)
        self._batch = AdaptiveBatch()
        self.unreadable = Unreadable()  # jobs passed over: their rows cannot be read (logged once)
        self.pruner = Pruner(db, self.types, unreadable=self.unreadable)  # ``pruner.removed``: jobs it removed
        # type -> (timeout, deque of (monotonic time, versionstamp)), oldest first
        self._samples: dict[str, tuple[float, collections.deque]] = {}
        self._rates_pruned: dict[str, float] = {}  # type -> when (monotonic) its old rates were last cleared
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- one pass ------------------------------------------------------------------------

    def check(self) -> int:
        """Sample every type and re-enqueue what is overdue, then prune what retention no
        longer keeps; returns how many jobs it re-enqueued.  A type that fails does not
        hold the others up: the pass goes through every type and the pruning, then raises
        what failed (each noted with its type; an ExceptionGroup if several did)."""
        types = self.types if self.types is not None else jobs.get_types(self.db)
        failures = Failures("activity monitor")
        kept, total = set(), 0
        for type in types:
            reenqueued = failures.catch(type, self._type_pass, type, kept)
            total += reenqueued or 0
        for gone in set(self._samples) - kept:
            del self._samples[gone]
        self.reenqueued += total
        failures.catch(None, self.pruner.prune)  # (noted with its types itself)
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
        reenqueued = self._check_type(type, timeout)
        self._prune_rates(type)
        return reenqueued

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

    def _prune_rates(self, type: str) -> None:
        """Clear the type's throughput counters older than an hour, and its job counters
        that are read no more (``counts.prune``), once a minute."""
        if time.monotonic() - self._rates_pruned.get(type, -math.inf) >= 60:
            run(self.db, rates.prune, type, time.time())
            run(self.db, counts.prune, type, time.time())
            self._rates_pruned[type] = time.monotonic()

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
        """Seconds between passes: a fraction of the shortest type timeout; the shortest
        while retention is behind (finished jobs due for removal are left)."""
        if self.pruner.behind:
            return MIN_INTERVAL
        timeouts = [t for t, _s in self._samples.values()]
        if not timeouts:
            return IDLE_INTERVAL
        return min(MAX_INTERVAL, max(MIN_INTERVAL, min(timeouts) / CHECKS_PER_TIMEOUT))

    # --- running it ----------------------------------------------------------------------

    def start(self) -> "ActivityMonitor":
        if self._thread is not None and self._thread.is_alive():
            return self
        self._stop.clear()
        self.pruner.interval = PRUNE_INTERVAL
        self._thread = threading.Thread(target=self._run, name="jobs-activity-monitor", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float | None = 10) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _check_logged(self) -> None:
        """One pass; a failure (store unreachable, a bug) is logged and counted, and the
        loop goes on: a monitor that died quietly would strand every dead worker's jobs."""
        try:
            self.check()
        except Exception:  # noqa: BLE001 - see above
            self.errors += 1
            log.exception("activity monitor pass failed; retrying")

    def _run(self) -> None:
        while not self._stop.is_set():
            self._check_logged()
            self._stop.wait(jittered(self.interval()))

    async def serve(self) -> None:
        """Run until cancelled (anyio: asyncio or trio)."""
        self.pruner.interval = PRUNE_INTERVAL
        while True:
            await anyio.to_thread.run_sync(self._check_logged)
            await anyio.sleep(jittered(self.interval()))


def _say_reenqueued(type: str, found: list) -> None:
    """Log the jobs one re-enqueue committed, by the worker that held them: a worker that
    died is expected now and then; one that is alive and listed here stalled past the type
    timeout (its jobs run again elsewhere, and its own outcomes for them are dropped)."""
    by_worker = collections.Counter(worker or "?" for _id, worker in found)
    log.warning("type %s: re-enqueued %d running job(s) not updated for the type timeout (%s; e.g. %s)", type,
                len(found), ", ".join(f"{n} of worker {w}" for w, n in by_worker.most_common()),
                ", ".join(job_id for job_id, _w in found[:5]))
