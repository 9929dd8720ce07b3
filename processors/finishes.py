"""Group commit of run outcomes: the outcomes of several runs written in one transaction.

A lane whose handler returned queues the outcome (finish, with a resubmission for retries
and recurring jobs) and goes on to its next job.  The queue is committed when the lanes
are about to accept (nothing prefetched is left), when it holds ``limit`` outcomes, or
when its oldest has waited ``FINISH_DELAY`` seconds; one committer at a time.  Every job
keeps its own fence inside the shared transaction: a job lost meanwhile (``Halt``) writes
nothing and does not stop the others from committing.  Outcomes that cannot share a
transaction (``on_commit`` writes) are not queued: the processor writes them alone.
"""

from __future__ import annotations

import logging
import threading
import time

import jobs
from jobs import Halt
from jobs.engine.transactional import run as run_transaction

log = logging.getLogger("processors")

FINISH_DELAY = 0.01  # longest wait of a queued outcome for others to commit with
FINISH_LIMIT = 64  # outcomes per transaction: 64 values at FDB's 100 kB limit stay under 10 MB


class Finishes:
    """Outcomes waiting to be committed.  ``written(run, kind)`` is told of each outcome
    once it committed (``kind``: the stat it counts as) or once the job was found lost
    (``kind`` None); ``failed(run)`` when writing failed for good."""

    def __init__(self, db, *, written, failed, limit: int = FINISH_LIMIT):
        self.db = db
        self._written = written
        self._failed = failed
        self.limit = limit
        self._lock = threading.Lock()
        self._queue: list = []  # (run, outcome, kind)
        self._oldest = 0.0  # monotonic time the oldest queued outcome was queued
        self._committing = threading.Lock()

    def add(self, run, outcome, kind: str) -> bool:
        """Queue ``run``'s outcome; False if the run was halted first (nothing to write)."""
        with run.lock:
            if run.halted.is_set():
                return False
            run.finishing = True  # no more heartbeats; the lost-job watcher leaves it alone
        with self._lock:
            if not self._queue:
                self._oldest = time.monotonic()
            self._queue.append((run, outcome, kind))
        return True

    def __len__(self) -> int:
        return len(self._queue)

    def due(self, idle: bool) -> bool:
        """Whether to commit now; ``idle``: nothing more is prefetched."""
        queue = self._queue
        return bool(queue) and (idle or len(queue) >= self.limit or time.monotonic() - self._oldest >= FINISH_DELAY)

    def flush(self, wait: bool = True) -> None:
        """Commit everything queued (also what is queued meanwhile).  ``wait=False``:
        return at once if another thread is committing (it takes the new ones too)."""
        if not self._committing.acquire(blocking=wait):
            return
        try:
            while True:
                with self._lock:
                    batch, self._queue = self._queue[: self.limit], self._queue[self.limit:]
                    self._oldest = time.monotonic()
                if not batch:
                    return
                self._commit(batch)
        finally:
            self._committing.release()

    def _commit(self, batch: list) -> None:
        try:
            lost = run_transaction(self.db, _write_all, batch)
        except Exception:  # noqa: BLE001 - e.g. too large together: write them one by one
            if len(batch) > 1:
                for entry in batch:
                    self._commit([entry])
                return
            run = batch[0][0]
            log.exception("job %s/%s: writing its outcome failed; its type timeout will re-enqueue it",
                          run.job.type, run.job.id)
            self._failed(run)
            return
        for run, _outcome, kind in batch:
            if run in lost:
                run.halted.set()
                self._written(run, None)
            else:
                self._written(run, kind)


def _write_all(tr, batch: list) -> set:
    """Finish every run of ``batch`` that still holds its job (resubmitted first for a
    later run); the runs that lost theirs (nothing written for them)."""
    lost = set()
    for run, outcome, _kind in batch:
        job = run.job
        if run.halted.is_set():  # handed back meanwhile
            lost.add(run)
            continue
        # resubmit only a job still ours: it writes unfenced (the finish below fences)
        if outcome.again_at is not None and jobs.is_held(tr, job):
            jobs.resubmit(tr, job, scheduled_time=outcome.again_at)
        try:
            jobs.finish(tr, job, outcome.data)  # False: committed already (1021)
        except Halt:  # raised before it wrote anything
            lost.add(run)
    return lost
