"""One ``accept`` call, as a core without loops, shared by the blocking front
(``worker.accept``) and the async one (``aio.accept``)::

    call = AcceptCall(db, type, ...)      # validates
    out = call.attempt()                  # one retried transaction: [Job, ...] | Wait | None
    call.wait(out)                        # blocks until the watch fires, a job falls due,
                                          # or the deadline

Idempotency under ``commit_unknown_result`` (1021): the lock is drawn by an attempt and
kept while an earlier attempt may have locked jobs with it (the call's ``LastAttempt`` of
the ids each attempt locked), and every attempt after the first starts by checking whether
a job such an attempt locked carries that lock; if so an earlier commit did happen, and
those jobs are returned instead of locking others (which would stay running, unseen, until
their type timeout).  A call that takes a
batch (``limit``) locks all its jobs with its one lock: the fence stays per job, since a
job accepted again gets another call's lock.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from dataclasses import dataclass

from .. import ahead, checks, keys, store_ids
from ..codec import Row, decode_data, new_lock
from ..controls import fairness, limits, pausing
from ..engine import (
    LastAttempt, NOT_COMMITTED, OPERATION_CANCELLED, TRANSACTION_CANCELLED, TRANSACTION_SIZE_LIMIT,
    error_code, is_database, is_retryable, run_noting, value_of, wait_future,
)
from ..indexes import counts, pending, places
from ..job import Job
from . import rows

log = logging.getLogger("jobs")

# The job rows one accept rewrites, in bytes, at most (half of FoundationDB's transaction
# limit: the rest for keys, counts and what a caller writes beside, e.g. its outcomes).
ROWS_BYTES = TRANSACTION_SIZE_LIMIT // 2

# The longest back-off between two attempts of an accept, in ms (FoundationDB's client
# doubles it from 10 ms after each conflict, up to a second): a conflict of an accept means
# another worker took a job it picked, and the next attempt picks another, so a worker
# that lost several picks in a row need not sleep most of a second before its next.
ACCEPT_MAX_RETRY_DELAY_MS = 40

# A watch that failed with a retryable error: pause this long before reading again, so a
# persistent failure does not turn the wait into a busy loop.
WATCH_ERROR_PAUSE = 0.05


_worker: tuple[int, str] = (0, "")  # (pid, "host/pid"): this_worker()'s, for the process that made it


def this_worker() -> str:
    """``"host/pid"`` of this process, as accept records it in the rows it locks (made once
    per process: a forked child is another worker)."""
    global _worker
    pid = os.getpid()
    if _worker[0] != pid:
        _worker = (pid, f"{socket.gethostname()}/{pid}")
    return _worker[1]


@dataclass(frozen=True)
class Wait:
    """Nothing to take: wait on ``watch`` (fires when a job of the type is enqueued or the
    type resumes; None for a call that does not watch: ``AcceptCall.watching``), and no
    later than ``due``, when the earliest future job falls due (wall clock; None: no such
    job, the type is paused, or the call does not take future jobs)."""

    watch: object
    due: float | None


@dataclass(frozen=True)
class _UnarmedWait:
    """A Wait whose watch is still to be set: an attempt that wrote found nothing (a watch
    is a read: set there, it would conflict with every enqueue meanwhile); the wake keys as
    it saw them (``pending.wakes_seen``), and its Wait's ``due``."""

    wakes: tuple
    due: float | None


def _watch_error_is_transient(exc: BaseException) -> bool:
    code = error_code(exc)
    return code is not None and (is_retryable(exc) or code in (OPERATION_CANCELLED, TRANSACTION_CANCELLED))


class AcceptCall:
    """State of one ``accept`` call (its lock, the jobs it picked, its deadline).  Not
    thread-safe; one thread at a time drives it."""

    def __init__(self, db, type: str, max_sched_time=None, no_schedule: bool = False, timeout=None,
                 limit: int = 1):
        self.type = checks.name(type, "type")
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"limit must be an int >= 1, not {limit!r}")
        self.limit = limit
        if not is_database(db):
            raise checks.ArgumentTypeError("accept() waits, so it takes a database, not a transaction")
        self.db = db
        if not isinstance(no_schedule, bool):
            raise checks.ArgumentTypeError(f"no_schedule must be a bool, not {no_schedule.__class__.__name__}")
        self.no_schedule = no_schedule
        # None: "now" at each attempt, so that a future job is taken once it falls due.
        self.max_sched_time = None if max_sched_time is None else checks.seconds(
            max_sched_time, "max_sched_time", allow_inf=True
        )
        if no_schedule and self.max_sched_time not in (None, 0.0):
            raise ValueError("no_schedule=True only takes jobs scheduled at 0: drop max_sched_time")
        timeout = checks.optional_seconds(timeout, "timeout")
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self.lock: bytes | None = None  # drawn by attempt()
        # the ids each attempt of this call locked, over the call's life: those of attempts
        # that may have committed (1021) are looked for by the next attempts
        self._locked = LastAttempt()
        # (type, id, error) of the jobs this call took off the queue because their rows cannot
        # be read, each logged once its attempt committed
        self.unreadable: list[tuple[str, str, str]] = []
        # of one retried transaction, what each attempt took off the queue unread, as
        # (type, id, error, queue entry): an attempt names as its own those of the attempts
        # that may have committed whose entries are gone
        self._unread = LastAttempt()
        self.retries = 0  # attempts that failed with a retryable error, over the call's life
        self.conflicts = 0  # of them, conflicts (1020: another worker took a job first)
        self.rearms = 0  # transactions run by _rearm, over the call's life
        # Called with this call after each conflict (1020), before the back-off and the
        # next attempt (a processor holding the turn to watch passes it on).
        self.on_conflict = None
        # False: an attempt that finds nothing returns a Wait without a watch (``watch``
        # None: its caller learns of new jobs otherwise, as a processor not holding the
        # turn to watch does: ``processors/turns.py``)
        self.watching = True

    # --- one attempt ---------------------------------------------------------------------

    def attempt(self, own_writes=None) -> list[Job] | Wait | None:
        """Run one retried transaction: the jobs now held (1 to ``limit``); a Wait (none
        due, or the type paused; after an attempt that wrote ``own_writes``, its watch is
        set once it committed, by a transaction that looks again if a job came meanwhile);
        or None: attempt again at once (a stale queue entry was dropped).
        ``own_writes(tr)``, if given, writes the caller's own changes in the same
        transaction (committed in every case; e.g. a worker's finished jobs).  A new lock
        when no attempt may have locked a job with the old one (none picked yet): the lock
        says when its jobs started (``codec.new_lock``), not when the call began."""
        if not self._locked.values:
            self.lock = new_lock()
        out = run_noting(self.db, self._failed, self._body, own_writes)
        self._say_unreadable()
        if isinstance(out, _UnarmedWait):  # found nothing in a transaction that wrote: watch now
            joined = pending.watch_joined(self.db, self.type, out.wakes)
            if joined is not None:
                return Wait(joined, out.due)
            self.rearms += 1
            out = run_noting(self.db, self._failed, self._rearm, out)
            self._say_unreadable()
        return out

    def _say_unreadable(self) -> None:
        """Log the jobs the attempt that committed took off the queue unread."""
        for type, job_id, error, _entry in self._unread.value or ():
            log.error("%s: taken off the queue of %s unrun, its row left as it is (write it again, then re-add "
                      "the job, to run it)", error, self.type)
            self.unreadable.append((type, job_id, error))
        self._unread = LastAttempt()

    def _unreadable_taken_before(self, tr) -> list[tuple[str, str, str, bytes]]:
        """The jobs an attempt whose commit may have happened took off the queue unread
        whose entries are gone, to be named as this attempt's: it did commit (else this
        attempt finds such an entry again, and names it when it takes it)."""
        maybe = list(dict.fromkeys(taken for attempt in self._unread.values for taken in attempt))
        found = [tr.snapshot.get(entry) for _type, _id, _error, entry in maybe]
        return [taken for taken, value in zip(maybe, found) if value_of(value) is None]

    def _rearm(self, tr, seen: "_UnarmedWait"):
        """After an attempt that wrote and found nothing: its watch, set here if no job
        came since it read (this transaction reads only the wake keys), else an attempt
        of its own, in this transaction (a job came: take it)."""
        if pending.wakes_unchanged(tr, self.type, seen.wakes):
            return Wait(pending.watch(tr, self.type), seen.due)
        return self._body(tr)

    def _failed(self, exc) -> None:
        """An attempt failed: count it, and forget what it did unless its commit may have
        happened (after a conflict, 1020, its picks are no longer candidates for
        ``_already_mine``, so the next attempt does not read, with conflicts, the rows that
        the winners of those jobs are writing)."""
        self._locked.failed(exc)
        self._unread.failed(exc)
        if not is_retryable(exc):
            return
        self.retries += 1
        if error_code(exc) == NOT_COMMITTED:
            self.conflicts += 1
            places.conflicted()
            if self.on_conflict is not None:
                self.on_conflict(self)

    def _body(self, tr, own_writes=None):
        # (the finishes ``own_writes`` writes and this accept count in one tally: a job
        # finished and one taken leave the running count as it was, and nothing is written
        # for it)
        tr.options.set_max_retry_delay(ACCEPT_MAX_RETRY_DELAY_MS)  # (kept across on_error: set at each attempt)
        with counts.sharing(tr) as tally:
            return self._take(tr, own_writes, tally)

    def _take(self, tr, own_writes, tally):
        # (before this attempt takes anything off the queue; recorded even empty: what is
        # logged once it commits)
        self._unread.record(self._unreadable_taken_before(tr) if self._unread.values else [])
        keys.check_layout(tr)
        store = store_ids.store_id_future(tr)
        paused = pausing.flag(tr, self.type)  # read with a conflict: see pausing.py
        limits_record = limits.read(tr, self.type)  # with a conflict too: a change makes it retry
        keyed = fairness.probe(tr, self.type)
        if not self.no_schedule:
            pending.read_head_ahead(tr, self.type, self.limit)  # (with the reads above)
        if own_writes is not None:  # (after the reads above are asked for: they go out with its own)
            own_writes(tr)
        mine = self._already_mine(tr)
        if mine:  # (taken before any pause that committed since: it conflicted otherwise)
            store_id = store_ids.store_id_of(store)
            return [self._job(job_id, row, store_id) for job_id, row in mine]
        now = time.time()
        max_stime = now if self.max_sched_time is None else self.max_sched_time
        if value_of(paused) is not None:
            return self._nothing_to_take(tr, own_writes, None)
        admission = limits.Admission(tr, self.type, limits.decode(value_of(limits_record)), now)
        room = admission.room(self.limit)
        if not room:  # the type's running or rate limit is reached
            return self._nothing_to_take(tr, own_writes, None, admission.due)
        turns = fairness.turns_for(tr, self.type, admission, 0.0 if self.no_schedule else max_stime, now, keyed)
        if turns is not None:
            picked = [entry for entry, _key in turns.pick(room)]
        else:
            picked = pending.pick(tr, self.type, max_stime, room, self.no_schedule)
        waits = pending.waits(tr, picked, now)
        picked, rows = self._within_budget(tr, picked, admission)
        ids = pending.take(tr, picked)
        if not ids:
            if turns is not None and turns.wrote:
                return None  # keys moved: attempt again, from what this attempt wrote
            return self._nothing_to_take(tr, own_writes, max_stime, admission.due, keyed=turns is not None)
        taken = self._lock(tr, ids, picked, admission, rows, tally)
        if not taken:
            return None
        tally.started(self.type, waits[:len(taken)])
        store_id = store_ids.store_id_of(store)
        return [self._job(job_id, row, store_id) for job_id, row in taken]

    def _within_budget(self, tr, picked: list[bytes], admission) -> tuple[list[bytes], list]:
        """The first of ``picked`` whose rows one transaction can rewrite (``ROWS_BYTES`` in
        all, one row at least; the others' key slots given back), and their rows' futures
        (read in parallel): a batch of large jobs is taken by several accepts, where it
        failed with 2101 (too large) at every attempt."""
        futures = [tr.get(keys.data_key(self.type, keys.job_id_of(key))) for key in picked]
        total = 0
        for n, future in enumerate(futures):
            total += len(value_of(future) or b"")
            if n and total > ROWS_BYTES:
                for key in picked[n:]:
                    admission.drop(keys.job_id_of(key))
                return picked[:n], futures[:n]
        return picked, futures

    def _lock(self, tr, ids: list[str], entries: list[bytes], admission, futures: list, tally) -> list[tuple[str, Row]]:
        """Lock the jobs taken from the queue (their queue ``entries``; ``futures``: their
        rows, read by :meth:`_within_budget`), each with the running slots it holds,
        counted in ``tally``."""
        taken, unreadable = [], []
        worker = this_worker()
        for job_id, entry, future in zip(ids, entries, futures):
            row = rows.decode(value_of(future), self.type, job_id, unreadable)
            if row is rows.UNREADABLE:
                self._unread.value.append((*unreadable.pop(), entry))
                # Nothing can run it: off the queue (left there, every accept would pick it
                # first and stop), named, and counted as ended (finished): what
                # remove_unreadable counts out for a job with no key but its row.
                admission.drop(job_id)
                tally.changed(tr, self.type, "finished", 1)
                continue
            if row is None or row.state != "pending":
                admission.drop(job_id)
                continue  # cannot happen unless a queue entry outlived its job: drop it
            # LastLock cleared: once another worker holds the job, a finish repeated with an
            # older Job must raise Halt, or its caller's own writes would commit unfenced.
            # Lost kept: the count belongs to the run, whichever worker takes it next.
            rows.put_running(tr, self.type, job_id, Row(None, self.lock, row.stime, False, row.data, None, worker,
                                                        row.lost, row.priority, row.key, admission.hold(job_id)),
                             stamp=False)
            tally.changed(tr, self.type, "running", 1)
            taken.append((job_id, row))
        if taken:
            self._locked.record([job_id for job_id, _row in taken])
        if taken and tally.to_stamp(self.type):  # (once for the batch, and its carried finishes)
            rows.bump_activity(tr, self.type)
        return taken

    def _nothing_to_take(self, tr, own_writes, max_stime: float | None, limit_due: float | None = None,
                         keyed: bool = False):
        """Nothing to take (``max_stime`` None: the type is paused or at its limit, so no
        future job matters until that changes; ``limit_due``: when a rate slot frees;
        ``keyed``: some keys sleep): a Wait, or, when this transaction wrote ``own_writes``,
        what it saw of the wake keys (a watch here, a read, would make it conflict with every
        enqueue meanwhile: :meth:`attempt` sets it after the commit)."""
        takes_future_jobs = max_stime is not None and self.max_sched_time is None and not self.no_schedule
        dues = [limit_due]
        if takes_future_jobs:
            dues.append(pending.next_due(tr, self.type, max_stime))
        if keyed:
            dues.append(fairness.next_due(tr, self.type))
        due = min((d for d in dues if d is not None), default=None)
        if not self.watching:
            return Wait(None, due)
        if own_writes is not None:
            return _UnarmedWait(pending.wakes_seen(tr, self.type), due)
        return Wait(pending.watch(tr, self.type), due)

    def _job(self, job_id: str, row: Row, store_id) -> Job:
        return Job(self.type, job_id, decode_data(row.data), self.lock, store_id, lost=row.lost,
                   priority=row.priority, scheduled_time=row.stime)

    def _already_mine(self, tr) -> list[tuple[str, Row]]:
        """Jobs an earlier attempt of this call locked (its commit happened behind 1021)."""
        picked = dict.fromkeys(job_id for attempt in self._locked.values for job_id in attempt)
        with ahead.block(tr, [keys.data_key(self.type, job_id) for job_id in picked]):  # (read together)
            found = [(job_id, rows.get(tr, self.type, job_id)) for job_id in picked]
        return [(job_id, row) for job_id, row in found if row is not None and row.lock == self.lock]

    # --- waiting -------------------------------------------------------------------------

    def expired(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline

    def wait_seconds(self, w: Wait) -> float | None:
        """How long to wait on ``w``: until the deadline or ``w.due``, whichever is first
        (None: no bound)."""
        limit = None if self.deadline is None else max(0.0, self.deadline - time.monotonic())
        if w.due is not None:
            until_due = max(0.0, w.due - time.time())
            limit = until_due if limit is None else min(limit, until_due)
        return limit

    def wait(self, w: Wait) -> None:
        """Block until ``w``'s watch fires, a future job falls due, or the deadline passes;
        then the caller attempts again.  Cancels the watch unless it fired.  Raises the
        watch's error when retrying cannot help (e.g. too many watches)."""
        if not wait_future(w.watch, self.wait_seconds(w)):
            w.watch.cancel()
            return
        try:
            w.watch.wait()
        except Exception as exc:  # noqa: BLE001 - sorted just below
            if not _watch_error_is_transient(exc):
                raise
            time.sleep(WATCH_ERROR_PAUSE)
