"""The job API (couch_jobs' ``couch_jobs.erl``): validation, state rules, the JobLock fence.

Every function but :func:`accept` takes ``tr``: a database (the call runs and commits its
own transaction, retried on conflicts) or a transaction (the call joins it and commits
nothing, so it composes with the caller's writes).  ``accept`` waits, so it takes a
database.  Arguments are validated before anything is read or written.

Retries after ``commit_unknown_result`` (1021) re-run a transaction that may have committed;
each write path stays correct when that happens:

* ``add``/``update``/``resubmit``/``set_type_timeout``: re-running gives the same end state.
* ``accept``: the lock is drawn once per call; a retry first checks whether the job it
  picked already carries that lock, and returns it instead of locking a second job.
* ``finish``: a finish records its lock in the row (``LastLock``); a retry that finds its
  own lock there knows its finish committed, instead of raising ``Halt``.  Creators'
  changes (re-add, resubmit, release) clear ``LastLock``, so a finish repeated after the
  job was re-added raises ``Halt`` as it should.  Left open: if, between a finish that
  committed with 1021 and its retry, another worker accepts *and* finishes the job, the
  retry raises ``Halt``.
* ``remove`` on a database: a retry that no longer finds the job it found before succeeds.
"""

from __future__ import annotations

import math
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from . import keys, pending, rows
from .codec import Row, decode_data, encode_data
from .engine import tuple as fdb_tuple, wait_future
from .engine.transactional import is_database, run
from .errors import ForeignJobError, Halt, NoTypeTimeout, NotFound

STATES = ("pending", "running", "finished")


@dataclass(frozen=True, slots=True)
class Job:
    """A job held by a worker: returned by :func:`accept`, renewed by :func:`update`.

    ``lock`` fences every write made with it; ``store`` identifies the store it came from."""

    type: str
    id: str
    data: dict
    lock: bytes = field(repr=False)
    store: bytes | None = field(repr=False)
    resubmitted: bool = False


class JobInfo(NamedTuple):
    """A job as seen by :func:`get_job` / :func:`get_jobs`."""

    type: str
    id: str
    state: str
    data: dict
    scheduled_time: float


# --- argument checks ---------------------------------------------------------------------


def _name(value, what: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")
    if not value:
        raise ValueError(f"{what} must not be empty")
    return value


def _seconds(value, what: str, *, positive: bool = False, allow_inf: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} must be a number of seconds, not {type(value).__name__}")
    value = float(value)
    if math.isnan(value) or (math.isinf(value) and not allow_inf):
        raise ValueError(f"{what} must be a finite number, not {value}")
    if value < 0 or (positive and value == 0):
        raise ValueError(f"{what} must be {'positive' if positive else 'zero or more'}, not {value}")
    return value


def _job(job) -> Job:
    if not isinstance(job, Job):
        raise TypeError(f"expected a Job from accept() or update(), not {type(job).__name__}")
    return job


def _check_store(tr, job: Job) -> None:
    if job.store != keys.store_id(tr):
        raise ForeignJobError(f"job {job.type}/{job.id} was accepted from another store than this one")


def _in(tr, fn):
    """Run ``fn(tr)`` in ``tr`` if it is a transaction, else in a retried transaction of it."""
    return run(tr, fn) if is_database(tr) else fn(tr)


# --- type timeouts -----------------------------------------------------------------------


def set_type_timeout(tr, type: str, seconds: float) -> None:
    """Seconds a running job of ``type`` may go without ``update`` before it is re-enqueued.
    Must be set before jobs of the type are added."""
    _name(type, "type")
    seconds = _seconds(seconds, "type timeout", positive=True)

    def body(tr):
        keys.ensure_store(tr)
        tr.set(keys.timeout_key(type), fdb_tuple.pack((seconds,)))

    _in(tr, body)


def get_type_timeout(tr, type: str) -> float | None:
    _name(type, "type")
    raw = _in(tr, lambda tr: tr.get(keys.timeout_key(type)).wait())
    return None if raw is None else fdb_tuple.unpack(raw)[0]


def clear_type_timeout(tr, type: str) -> None:
    _name(type, "type")
    _in(tr, lambda tr: tr.clear(keys.timeout_key(type)))


def get_types(tr) -> list[str]:
    """Types that have a timeout set."""
    r = keys.ACTIVITY_TIMEOUT.range()
    return _in(tr, lambda tr: [keys.ACTIVITY_TIMEOUT.unpack(k)[0] for k, _v in tr.get_range(r.start, r.stop)])


# --- job creation ------------------------------------------------------------------------


def add(tr, type: str, job_id: str, data: dict | None = None, scheduled_time: float = 0) -> None:
    """Add a job, or re-add an existing one (couch_jobs' rules):

    * new: pending at ``scheduled_time`` (seconds since the epoch; 0 = now) with ``data``;
    * pending at the same time: nothing is written (data is not replaced);
    * pending at another time: time and data replaced;
    * running: flagged to be resubmitted at ``scheduled_time`` when it finishes (data ignored);
    * finished: pending again with the new data.

    Raises NoTypeTimeout when the type has no timeout, JobDataError for bad data."""
    _name(type, "type")
    _name(job_id, "job id")
    stime = _seconds(scheduled_time, "scheduled_time")
    raw = encode_data(data)

    def body(tr):
        if tr.get(keys.timeout_key(type)).wait() is None:
            raise NoTypeTimeout(f"job type {type!r} has no timeout: call set_type_timeout(db, {type!r}, seconds) first")
        row = rows.get(tr, type, job_id)
        state = None if row is None else row.state
        if state == "pending" and row.stime == stime:
            return
        if state == "running":
            rows.put(tr, type, job_id, replace(row, stime=stime, resubmit=True))
            return
        if state == "pending":
            pending.remove(tr, type, row.stime, job_id)
        rows.put(tr, type, job_id, Row(None, None, stime, False, raw))
        pending.enqueue(tr, type, stime, job_id)
        rows.bump_activity(tr, type)

    _in(tr, body)


def remove(tr, type: str, job_id: str) -> None:
    """Remove a job in any state; a worker running it gets Halt at its next update/finish.
    Raises NotFound."""
    _name(type, "type")
    _name(job_id, "job id")
    found = []

    def body(tr):
        row = rows.get(tr, type, job_id)
        if row is None:
            if found:  # an earlier attempt removed it and its commit may have happened (1021)
                return
            raise NotFound(f"job {type}/{job_id} not found")
        found.append(True)
        if row.state == "pending":
            pending.remove(tr, type, row.stime, job_id)
        rows.clear_activity(tr, type, row)
        rows.clear(tr, type, job_id)
        rows.bump_activity(tr, type)

    _in(tr, body)


def _row_or_not_found(tr, type: str, job_id: str) -> Row:
    _name(type, "type")
    _name(job_id, "job id")
    row = rows.get(tr, type, job_id)
    if row is None:
        raise NotFound(f"job {type}/{job_id} not found")
    return row


def get_job_data(tr, type: str, job_id: str) -> dict:
    """The job's data. Raises NotFound."""
    return decode_data(_in(tr, lambda tr: _row_or_not_found(tr, type, job_id)).data)


def get_job_state(tr, type: str, job_id: str) -> str:
    """"pending", "running" or "finished". Raises NotFound."""
    return _in(tr, lambda tr: _row_or_not_found(tr, type, job_id)).state


def _info(type: str, job_id: str, row: Row) -> JobInfo:
    return JobInfo(type, job_id, row.state, decode_data(row.data), row.stime)


def get_job(tr, type: str, job_id: str) -> JobInfo:
    """Type, id, state, data and scheduled time of a job. Raises NotFound."""
    return _info(type, job_id, _in(tr, lambda tr: _row_or_not_found(tr, type, job_id)))


def get_jobs(tr, type: str | None = None) -> list[JobInfo]:
    """Every job (of ``type``, if given), sorted by (type, id)."""
    if type is not None:
        _name(type, "type")
    return _in(tr, lambda tr: [_info(t, i, row) for t, i, row in rows.scan(tr, type)])


def get_active_jobs_ids(tr, type: str) -> list[str]:
    """Ids of the running jobs of ``type``, least recently active first."""
    _name(type, "type")
    return _in(tr, lambda tr: rows.active_ids(tr, type))


def pending_count(tr, type: str, max_sched_time: float | None = None, limit: int | None = None) -> int:
    """Pending jobs of ``type`` scheduled at or before ``max_sched_time`` (None: all), at
    most ``limit`` counted.  A snapshot read: adds no conflicts."""
    _name(type, "type")
    if max_sched_time is not None:
        max_sched_time = _seconds(max_sched_time, "max_sched_time", allow_inf=True)
        if math.isinf(max_sched_time):
            max_sched_time = None
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ValueError(f"limit must be a non-negative int, not {limit!r}")
    return _in(tr, lambda tr: pending.count(tr, type, max_sched_time, limit))


# --- job processing ----------------------------------------------------------------------


def accept(
    db,
    type: str,
    *,
    max_sched_time: float | None = None,
    no_schedule: bool = False,
    timeout: float | None = None,
) -> Job | None:
    """Take a pending job of ``type`` and run it: returns a Job, or None when ``timeout``
    seconds pass first (None: wait forever; 0: don't wait).

    Only jobs scheduled at or before ``max_sched_time`` (None: now, re-evaluated while
    waiting, so a job becomes acceptable when it falls due) are taken.  ``no_schedule=True``
    only takes jobs scheduled at 0 and picks them by a random UUID probe: use it when job ids
    are random (UUID-like) and nothing is scheduled."""
    _name(type, "type")
    if not is_database(db):
        raise TypeError("accept() waits, so it takes a database, not a transaction")
    if max_sched_time is not None:
        max_sched_time = _seconds(max_sched_time, "max_sched_time", allow_inf=True)
        if no_schedule and max_sched_time != 0:
            raise ValueError("no_schedule=True only takes jobs scheduled at 0: drop max_sched_time")
    if timeout is not None:
        timeout = _seconds(timeout, "timeout", allow_inf=True)
        if math.isinf(timeout):
            timeout = None
    deadline = None if timeout is None else time.monotonic() + timeout
    lock = uuid.uuid4().bytes  # once per call: how a retried attempt recognises its own commit
    picked: list[str] = []

    def attempt(tr):
        if picked:  # the previous attempt may have committed (1021): is that job ours?
            row = rows.get(tr, type, picked[-1])
            if row is not None and row.lock == lock:
                return Job(type, picked[-1], decode_data(row.data), lock, keys.store_id(tr)), None
        now = time.time()
        max_stime = now if max_sched_time is None else max_sched_time
        job_id = pending.dequeue(tr, type, max_stime, no_schedule)
        if job_id is None:
            wake_at = None
            if max_sched_time is None and not no_schedule:
                wake_at = pending.next_due(tr, type, max_stime)
            return None, (pending.watch(tr, type), wake_at)
        row = rows.get(tr, type, job_id)
        if row is None or row.state != "pending":
            return None, None  # a stale queue entry, now cleared: try again
        picked.append(job_id)
        rows.put_running(tr, type, job_id, Row(None, lock, row.stime, False, row.data, row.last_lock))
        return Job(type, job_id, decode_data(row.data), lock, keys.store_id(tr)), None

    while True:
        job, wait = run(db, attempt)
        if job is not None:
            return job
        if wait is None:
            continue
        watch, wake_at = wait
        limit = None if deadline is None else deadline - time.monotonic()
        if limit is not None and limit <= 0:
            watch.cancel()
            return None
        if wake_at is not None:
            until_due = max(0.0, wake_at - time.time())
            limit = until_due if limit is None else min(limit, until_due)
        if not wait_future(watch, limit):
            watch.cancel()


def update(tr, job: Job, data: dict | None = None) -> Job:
    """Heartbeat a running job (at least once per type timeout), optionally replacing its
    data.  Returns the renewed Job (see :func:`is_resubmitted`).  Raises Halt when the job
    is no longer this worker's: stop working on it; nothing was written."""
    job = _job(job)
    raw = None if data is None else encode_data(data)

    def body(tr):
        _check_store(tr, job)
        row = rows.get(tr, job.type, job.id)
        if row is None or row.lock != job.lock:
            raise Halt(f"job {job.type}/{job.id} is no longer held by this worker")
        rows.clear_activity(tr, job.type, row)
        rows.put_running(tr, job.type, job.id, replace(row, seq=None, data=raw or row.data))
        return replace(job, data=job.data if data is None else data, resubmitted=row.resubmit)

    return _in(tr, body)


def finish(tr, job: Job, data: dict | None = None) -> None:
    """Finish a running job, with ``data`` as its final data (None keeps the current data).
    A job flagged for resubmission becomes pending again at its scheduled time.  Raises
    Halt when the job is no longer this worker's; nothing is written then."""
    job = _job(job)
    raw = None if data is None else encode_data(data)

    def body(tr):
        _check_store(tr, job)
        row = rows.get(tr, job.type, job.id)
        if row is not None and row.last_lock == job.lock:
            return  # this finish already committed (a retry after 1021)
        if row is None or row.lock != job.lock:
            raise Halt(f"job {job.type}/{job.id} is no longer held by this worker")
        rows.clear_activity(tr, job.type, row)
        final = raw or row.data
        if row.resubmit:
            rows.put(tr, job.type, job.id, Row(None, None, row.stime, False, final, job.lock))
            pending.enqueue(tr, job.type, row.stime, job.id)
        else:
            rows.put(tr, job.type, job.id, Row(row.seq, None, row.stime, False, final, job.lock))
        rows.bump_activity(tr, job.type)

    _in(tr, body)


def resubmit(tr, job: Job | JobInfo, scheduled_time: float | None = None, data: dict | None = None) -> Job | JobInfo:
    """Run the job again, at ``scheduled_time`` (None: its current time), with ``data``
    (None: keep the data).  Running: flagged, re-enqueued when it finishes; pending:
    rescheduled; finished: pending again.  A creator may pass the JobInfo from get_job.
    Raises NotFound."""
    if not isinstance(job, (Job, JobInfo)):
        raise TypeError(f"expected a Job or JobInfo, not {type(job).__name__}")
    stime = None if scheduled_time is None else _seconds(scheduled_time, "scheduled_time")
    raw = None if data is None else encode_data(data)

    def body(tr):
        if isinstance(job, Job):
            _check_store(tr, job)
        row = _row_or_not_found(tr, job.type, job.id)
        new_stime = row.stime if stime is None else stime
        new_data = raw or row.data
        state = row.state
        if state == "running":
            rows.put(tr, job.type, job.id, replace(row, stime=new_stime, resubmit=True, data=new_data))
        elif state == "pending" and new_stime == row.stime and new_data == row.data:
            pass  # nothing changes: write nothing
        else:
            if state == "pending":
                pending.remove(tr, job.type, row.stime, job.id)
            rows.put(tr, job.type, job.id, Row(None, None, new_stime, False, new_data))
            pending.enqueue(tr, job.type, new_stime, job.id)
            rows.bump_activity(tr, job.type)
        return state

    state = _in(tr, body)
    if isinstance(job, Job):
        return replace(job, resubmitted=state == "running", data=job.data if data is None else data)
    return job


def is_resubmitted(job: Job) -> bool:
    """Whether the job was flagged for resubmission (as of the Job's last update)."""
    return _job(job).resubmitted


def release(tr, job: Job) -> None:
    """Hand a running job back to pending at once, without finishing it (data and scheduled
    time kept; the next update/finish with this Job raises Halt).  For workers that stop
    before a job is done: the job need not wait out its type timeout.  Raises Halt when the
    job is no longer this worker's."""
    job = _job(job)
    released = []

    def body(tr):
        _check_store(tr, job)
        row = rows.get(tr, job.type, job.id)
        if row is None or row.lock != job.lock:
            if released and row is not None and row.state == "pending":
                return  # an earlier attempt released it and may have committed (1021)
            raise Halt(f"job {job.type}/{job.id} is no longer held by this worker")
        released.append(True)
        rows.clear_activity(tr, job.type, row)
        rows.put(tr, job.type, job.id, Row(None, None, row.stime, False, row.data))
        pending.enqueue(tr, job.type, row.stime, job.id)
        rows.bump_activity(tr, job.type)

    _in(tr, body)
