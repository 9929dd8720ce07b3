"""Group commit of run outcomes: the outcomes of several runs written in one transaction.

A lane whose handler returned queues the outcome (finish, with a resubmission for retries
and recurring jobs) and goes on to its next job.  The queue is written by the next accept
transaction (when nothing prefetched is left: one commit finishes the last batch and takes
the next), as much of it as fits beside the rows that accept may take (``TRANSACTION_ROWS``
rows of ``ROW_BYTES`` in all), in its first two attempts only (an accept retried again
hands it back, :class:`OutcomesNotCarried`), or
committed on its own when it holds ``limit`` outcomes or its oldest has
waited ``FINISH_DELAY`` seconds (one such committer at a time).  Once jobs trickle in, no
look carries them (``feed.py``): they are committed as the processor begins to wait for
the next job, or, while jobs come sooner than ``FINISH_DELAY`` apart, with the next ones,
within that delay (``feed_policy.FeedPolicy.hold_outcomes_until``).  Every job
keeps its own fence inside the shared transaction: a job lost meanwhile (``Halt``) writes
nothing and does not stop the others from committing.  Outcomes that cannot share a
transaction (``on_commit`` writes) are not queued: the processor writes them alone.
"""

from __future__ import annotations

import logging
import threading
import time

import jobs
from jobs.engine import run as run_transaction

log = logging.getLogger("processors")

FINISH_DELAY = 0.01  # longest wait of a queued outcome for others to commit with
FINISH_LIMIT = 64  # outcomes per transaction: 64 values at FDB's 100 kB limit stay under 10 MB
ROW_BYTES = 100_000  # most bytes of a job's row (FoundationDB's value limit)
TRANSACTION_ROWS = 96  # job rows one transaction writes at most: 9.6 MB of FDB's 10 MB at ROW_BYTES each
# Attempts of an accept that carry the queued outcomes: the first and its first retry (an
# accept that conflicted commits them with the job it takes next, rather than in a
# transaction of their own and then the accept's again).
CARRIES = 2


class OutcomesNotCarried(Exception):
    """The transaction that was to carry queued outcomes is being retried: commit them on
    their own (:meth:`Finishes.writer`)."""


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
        self._sizes: list[int] = []  # the bytes of each queued outcome's data, as encoded
        self._oldest = 0.0  # monotonic time the oldest queued outcome was queued
        self._committing = threading.Lock()

    def add(self, run, outcome, kind: str, size: int = ROW_BYTES) -> bool:
        """Queue ``run``'s outcome (``size``: the bytes of its data, encoded); False if the
        run was halted first (nothing to write)."""
        if not run.state.finish():  # (no more heartbeats; the lost-job watcher leaves it alone)
            return False
        run.queued_at = now = time.monotonic()
        with self._lock:
            if not self._queue:
                self._oldest = now
            self._queue.append((run, outcome, kind))
            self._sizes.append(size)
        return True

    def __len__(self) -> int:
        return len(self._queue)

    def due(self, now: bool) -> bool:
        """Whether to commit on their own now: ``now`` (no accept will carry them soon),
        ``limit`` outcomes queued, or the oldest waited ``FINISH_DELAY``."""
        queue = self._queue
        return bool(queue) and (now or len(queue) >= self.limit or time.monotonic() - self._oldest >= FINISH_DELAY)

    def oldest(self) -> float | None:
        """(Monotonic) when the oldest queued outcome was queued; None if none is."""
        with self._lock:
            return self._oldest if self._queue else None

    def flush(self, wait: bool = True) -> None:
        """Commit everything queued (also what is queued meanwhile).  ``wait=False``:
        return at once if another thread is committing (it takes the new ones too)."""
        if not self._committing.acquire(blocking=wait):
            return
        try:
            while batch := self.take():
                self.commit(batch)
        finally:
            self._committing.release()

    def take(self, room: int | None = None) -> list:
        """Remove up to ``limit`` queued outcomes, to be written by :meth:`commit` or by
        another transaction through :meth:`writer` (then :meth:`report`); with ``room``,
        only the first whose data take at most that many bytes together (the transaction
        carrying them writes other rows too)."""
        with self._lock:
            n = min(self.limit, len(self._queue))
            if room is not None:
                total = 0
                for i, size in enumerate(self._sizes[:n]):
                    total += size
                    if total > room:
                        n = i
                        break
            batch, self._queue = self._queue[:n], self._queue[n:]
            del self._sizes[:n]
            if n:
                self._oldest = time.monotonic()
        return batch

    def writer(self, batch: list):
        """``(write, lost)``: ``write(tr)`` writes ``batch`` inside a caller's transaction
        (e.g. the next accept's), ``lost`` then holds the runs whose jobs were lost in the
        attempt that committed.  The first ``CARRIES`` attempts carry them (a retry after
        a conflict backs off 10 ms at most; one after 1021 finds the finishes that
        committed and writes nothing again); called once more, ``write`` raises
        :class:`OutcomesNotCarried`, and the caller commits ``batch`` on its own (:meth:`commit`).  An
        accept that conflicts again and again (backing off longer each time) must not hold
        the outcomes past the jobs' type timeout: they are not heartbeated while they wait."""
        lost: set = set()
        tries = 0

        def write(tr) -> None:
            nonlocal tries
            tries += 1
            if tries > CARRIES:
                raise OutcomesNotCarried(len(batch))
            lost.clear()  # (an attempt before did not commit, or its finishes are repeats now)
            lost.update(_write_all(tr, batch))

        return write, lost

    def commit(self, batch: list) -> None:
        """Write ``batch`` in a transaction of its own (one by one if it fails together)."""
        try:
            lost = run_transaction(self.db, _write_all, batch)
        except Exception:  # noqa: BLE001 - e.g. too large together: write them one by one
            if len(batch) > 1:
                for entry in batch:
                    self.commit([entry])
                return
            run = batch[0][0]
            log.exception("job %s/%s: writing its outcome failed; its type timeout will re-enqueue it",
                          run.job.type, run.job.id)
            self._failed(run)
            return
        self.report(batch, lost)

    def report(self, batch: list, lost: set) -> None:
        """Tell of ``batch`` once it committed, ``lost`` naming the runs that wrote nothing
        (each said in the log: its handler ran, and another worker may run it again)."""
        for run, _outcome, kind in batch:
            if run in lost:
                if not run.state.halted.is_set():  # (halted before: said then)
                    log.warning("job %s/%s: its outcome was not written: the job was re-enqueued or removed "
                                "while its outcome waited %.3f s to be committed", run.job.type, run.job.id,
                                time.monotonic() - run.queued_at)
                run.state.halt()
                self._written(run, None)
            else:
                self._written(run, kind)


def _write_all(tr, batch: list) -> set:
    """Finish every run of ``batch`` that still holds its job (resubmitted first for a
    later run), in one ``jobs.finish_many``; the runs that lost theirs (nothing written
    for them).  Their rows are read together (``jobs.read_ahead``): one round trip for
    the batch on a cluster."""
    lost, live = set(), []
    for run, outcome, _kind in batch:
        if run.state.halted.is_set():  # handed back meanwhile
            lost.add(run)
        else:
            live.append((run, outcome))
    with jobs.read_ahead(tr, [run.job for run, _outcome in live]):
        for run, outcome in live:  # resubmit only a job still ours: it writes unfenced (finish fences)
            if outcome.again_at is not None and jobs.is_held(tr, run.job):
                jobs.resubmit(tr, run.job, scheduled_time=outcome.again_at)
        done = jobs.finish_many(tr, [(run.job, outcome.data, outcome.failed) for run, outcome in live])
    # (False: committed already, 1021; None: lost before anything was written for it)
    lost.update(run for (run, _outcome), finished in zip(live, done) if finished is None)
    return lost
