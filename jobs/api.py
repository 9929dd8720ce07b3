"""The job API (couch_jobs.erl's part): argument checks, the state rules, the JobLock fence.

Every function but :func:`accept` takes ``tr``: a database (the call runs and commits its
own transaction, retried on conflicts) or a transaction (the call joins it and commits
nothing, so it composes with the caller's own writes).  ``accept`` waits, so it takes a
database.  Arguments and data are checked before anything is read or written, and an error
raised inside a transaction leaves nothing written by the call.

Retries after ``commit_unknown_result`` (1021) re-run a transaction that may have
committed; every write path gives the right answer when that happens:

* ``add``, ``update``, ``resubmit``, ``set_type_timeout``, ``clear_type_timeout``: running
  them again gives the same end state.
* ``accept``: see ``accepting.py`` (the lock is drawn once per call; a retry returns the
  job an earlier attempt locked).
* ``finish``: a finish records its lock in the row (``LastLock``); a finish that finds its
  own lock there knows it already committed and returns instead of raising ``Halt``.
  This also covers an application's transaction retried around ``finish``.  Creators'
  changes (re-add, resubmit, release) and ``accept`` clear ``LastLock``: once the job
  changed hands, a repeated finish must raise ``Halt`` so that the caller's own writes
  in that transaction never commit unfenced.  Known gap, the price of that: if a finish
  re-enqueued a job flagged for resubmission, committed behind 1021, and another worker
  accepted the job before the retry ran, the retry raises ``Halt`` although its finish
  did commit.
* ``remove`` and ``release`` on a database: a retry that finds the job already gone (or
  back in the queue) after an attempt that did the work succeeds.
"""

from __future__ import annotations

from dataclasses import replace

from . import checks, failed as failed_index, keys, pending, rows
from .accepting import AcceptCall
from .codec import Row, decode_data, encode_data
from .engine import tuple as fdb_tuple
from .engine import value_of
from .engine.transactional import within
from .errors import ForeignJobError, Halt, NoTypeTimeout, NotFound
from .job import Job, JobInfo, RunInfo

__all__ = [
    "Job",
    "JobInfo",
    "accept",
    "accept_many",
    "add",
    "clear_type_timeout",
    "finish",
    "get_active_jobs_ids",
    "get_job",
    "get_job_data",
    "get_job_state",
    "get_jobs",
    "get_type_timeout",
    "get_types",
    "is_resubmitted",
    "pending_count",
    "release",
    "remove",
    "resubmit",
    "set_type_timeout",
    "update",
]


def _in(tr, fn):
    """``fn(tr)`` inside ``tr`` if it is a transaction, else in a retried transaction of it;
    the store's layout is checked first either way."""

    def body(tr):
        keys.check_layout(tr)
        return fn(tr)

    return within(tr, body)


def _job(job) -> Job:
    if not isinstance(job, Job):
        raise checks.ArgumentTypeError(f"expected a Job from accept() or update(), not {type(job).__name__}")
    return job


def _not_found(type: str, job_id: str) -> NotFound:
    return NotFound(f"job {type}/{job_id} not found")


def _halt(job: Job) -> Halt:
    return Halt(f"job {job.type}/{job.id} is no longer held by this worker: stop working on it")


def _row_or_not_found(tr, type: str, job_id: str) -> Row:
    row = rows.get(tr, type, job_id)
    if row is None:
        raise _not_found(type, job_id)
    return row


def _row_of(tr, job: Job) -> Row | None:
    """The row of ``job``'s job, after checking that ``job`` comes from this store."""
    store = keys.store_id_future(tr)
    row = rows.get(tr, job.type, job.id)
    if keys.store_id_of(store) != job.store:
        raise ForeignJobError(f"job {job.type}/{job.id} was accepted from another store than this one")
    return row


# --- type timeouts -----------------------------------------------------------------------


def set_type_timeout(tr, type: str, seconds: float) -> None:
    """Seconds a running job of ``type`` may go without ``update`` before the activity
    monitor re-enqueues it.  Must be set before jobs of the type are added.  ValueError
    unless positive and finite, or when ``type`` contains control characters."""
    checks.name(type, "type", new=True)
    seconds = checks.seconds(seconds, "type timeout", positive=True)

    def body(tr):
        keys.ensure_store(tr)
        tr.set(keys.timeout_key(type), fdb_tuple.pack((seconds,)))

    _in(tr, body)


def get_type_timeout(tr, type: str) -> float | None:
    """The type's timeout in seconds, or None when it has none."""
    checks.name(type, "type")
    raw = _in(tr, lambda tr: value_of(tr.get(keys.timeout_key(type))))
    return None if raw is None else float(fdb_tuple.unpack(raw)[0])


def clear_type_timeout(tr, type: str) -> None:
    """Forget the type's timeout (adding jobs of the type then raises NoTypeTimeout)."""
    checks.name(type, "type")
    _in(tr, lambda tr: tr.clear(keys.timeout_key(type)))


def get_types(tr) -> list[str]:
    """Types that have a timeout, sorted."""
    r = keys.ACTIVITY_TIMEOUT.range()
    return _in(tr, lambda tr: [keys.ACTIVITY_TIMEOUT.unpack(k)[0] for k, _v in tr.get_range(r.start, r.stop)])


# --- job creation ------------------------------------------------------------------------


def add(tr, type: str, job_id: str, data: dict | None = None, scheduled_time: float = 0) -> None:
    """Add a job, or re-add an existing one (couch_jobs' rules):

    * new: pending at ``scheduled_time`` (seconds since the epoch; 0: as soon as possible)
      with ``data`` (None: ``{}``);
    * pending at the same time: nothing is written (the data is not replaced either);
    * pending at another time: time and data replaced;
    * running: flagged to run again at ``scheduled_time`` when it finishes (data ignored);
    * finished: pending again with the new data.

    Raises NoTypeTimeout when the type has no timeout, JobDataError for bad data;
    ValueError when type or id contains control characters or ``scheduled_time`` is not a
    time a view can show as a date (negative, NaN, from the year 9999 on)."""
    checks.name(type, "type", new=True)
    checks.name(job_id, "job id", new=True)
    keys.check_key_sizes(type, job_id)
    stime = checks.scheduled_time(scheduled_time)
    raw = encode_data(data)

    def body(tr):
        if not tr.get(keys.timeout_key(type)).wait().present():
            raise NoTypeTimeout(
                f"job type {type!r} has no timeout: call set_type_timeout(db, {type!r}, seconds) first"
            )
        row = rows.get(tr, type, job_id)
        state = None if row is None else row.state
        if state == "pending" and row.stime == stime:
            return
        if state == "running":
            rows.put(tr, type, job_id, replace(row, stime=stime, resubmit=True))
            return
        if state == "pending":
            pending.remove(tr, type, row.stime, job_id)
        elif state == "finished":
            failed_index.unmark(tr, type, job_id)
        rows.make_pending(tr, type, job_id, stime, raw)

    _in(tr, body)


def remove(tr, type: str, job_id: str) -> None:
    """Remove a job in any state; a worker running it gets Halt at its next update/finish.
    Raises NotFound."""
    checks.name(type, "type")
    checks.name(job_id, "job id")
    found = []  # an attempt found the job: its commit may have happened (1021)

    def body(tr):
        row = rows.get(tr, type, job_id)
        if row is None:
            if found:
                return
            raise _not_found(type, job_id)
        found.append(True)
        if row.state == "pending":
            pending.remove(tr, type, row.stime, job_id)
        elif row.state == "finished":
            failed_index.unmark(tr, type, job_id)
        rows.clear_activity(tr, type, row)
        rows.clear(tr, type, job_id)
        rows.bump_activity(tr, type)

    _in(tr, body)


# --- reading jobs --------------------------------------------------------------------------


def _read_row(tr, type: str, job_id: str) -> Row:
    checks.name(type, "type")
    checks.name(job_id, "job id")
    return _in(tr, lambda tr: _row_or_not_found(tr, type, job_id))


def get_job_data(tr, type: str, job_id: str) -> dict:
    """The job's data. Raises NotFound."""
    return decode_data(_read_row(tr, type, job_id).data)


def get_job_state(tr, type: str, job_id: str) -> str:
    """"pending", "running" or "finished". Raises NotFound."""
    return _read_row(tr, type, job_id).state


def _info(type: str, job_id: str, row: Row) -> JobInfo:
    return JobInfo(type, job_id, row.state, decode_data(row.data), row.stime)


def get_job(tr, type: str, job_id: str) -> JobInfo:
    """Type, id, state, data and scheduled time of a job. Raises NotFound."""
    return _info(type, job_id, _read_row(tr, type, job_id))


def get_run_info(tr, type: str, job_id: str) -> RunInfo:
    """The job's last worker, lost workers and failure time (see :class:`RunInfo`), read
    in one snapshot.  Raises NotFound."""
    checks.name(type, "type")
    checks.name(job_id, "job id")

    def body(tr):
        row = _row_or_not_found(tr, type, job_id)
        return RunInfo(row.worker, row.lost, failed_index.get(tr, type, job_id))

    return _in(tr, body)


def get_jobs(tr, type: str | None = None) -> list[JobInfo]:
    """Every job (of ``type``, if given), sorted by (type, id)."""
    if type is not None:
        checks.name(type, "type")
    infos = _in(tr, lambda tr: [_info(t, i, row) for t, i, row in rows.scan(tr, type)])
    return sorted(infos, key=lambda info: (info.type, info.id))


def get_active_jobs_ids(tr, type: str) -> list[str]:
    """Ids of the running jobs of ``type``, least recently active first."""
    checks.name(type, "type")
    return _in(tr, lambda tr: rows.active_ids(tr, type))


def pending_count(tr, type: str, max_sched_time: float | None = None, limit: int | None = None) -> int:
    """Pending jobs of ``type`` scheduled at or before ``max_sched_time`` (None: all, also
    those scheduled in the future), counting at most ``limit`` (None: no limit).  A
    snapshot read: adds no conflicts to the caller's transaction."""
    checks.name(type, "type")
    max_sched_time = checks.optional_seconds(max_sched_time, "max_sched_time")
    limit = checks.limit(limit)
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
    seconds pass first (None: wait forever; 0: don't wait).  Takes a database (it waits).

    Only jobs scheduled at or before ``max_sched_time`` are taken; None means now, re-read
    while waiting, so a waiting accept wakes when a future job falls due.  ``no_schedule``:
    only jobs scheduled at 0, picked near a random UUID without reading the queue's head
    (for UUID-like ids); with an explicit non-zero ``max_sched_time`` it is a ValueError.
    Safe under 1021: a retried attempt never leaves a second job locked."""
    taken = accept_many(db, type, 1, max_sched_time=max_sched_time, no_schedule=no_schedule, timeout=timeout)
    return taken[0] if taken else None


def accept_many(
    db,
    type: str,
    limit: int,
    *,
    max_sched_time: float | None = None,
    no_schedule: bool = False,
    timeout: float | None = None,
) -> list[Job]:
    """:func:`accept` for up to ``limit`` jobs in one transaction: waits like ``accept``
    for the first, then takes as many as are due at once (one commit for all); ``[]``
    when ``timeout`` passes first.  Each Job is fenced on its own (``update``/``finish``
    per job, in one transaction or several); the caller must heartbeat them all."""
    call = AcceptCall(db, type, max_sched_time, no_schedule, timeout, limit)
    while True:
        out = call.attempt()
        if isinstance(out, list):
            return out
        if out is None:
            continue
        if call.expired():
            out.watch.cancel()
            return []
        call.wait(out)


def update(tr, job: Job, data: dict | None = None) -> Job:
    """Heartbeat a running job (at least once per type timeout), optionally replacing its
    data.  Returns the renewed Job (see :func:`is_resubmitted`).  Raises Halt when the job
    is no longer this worker's (stop working on it; nothing was written), ForeignJobError
    for a Job of another store, JobDataError for bad data."""
    job = _job(job)
    raw = None if data is None else encode_data(data)

    def body(tr):
        row = _row_of(tr, job)
        if row is None or row.lock != job.lock:
            raise _halt(job)
        rows.clear_activity(tr, job.type, row)
        rows.put_running(tr, job.type, job.id, row if raw is None else replace(row, data=raw))
        return replace(job, data=job.data if data is None else data, resubmitted=row.resubmit)

    return _in(tr, body)


def finish(tr, job: Job, data: dict | None = None, *, failed: bool | str = False) -> bool:
    """Finish a running job, with ``data`` as its final data (None keeps the current data).
    A job flagged for resubmission becomes pending again at its scheduled time (a new run:
    its lost-worker count starts over).  ``failed``: the run failed for good (True, or a
    one-line reason); unless it is made pending again, the job is indexed as failed
    (counted by ``jobs status``, listed by ``jobs list --failed``) until it is re-added,
    resubmitted or removed.  Raises
    Halt when the job is no longer this worker's (nothing is written then), ForeignJobError
    for a Job of another store, JobDataError for bad data.  Finishing again with the same
    Job, e.g. in a transaction retried after 1021, is a no-op while nobody changed the job
    since (no re-add, resubmit, release or accept).  Returns True when this call finished
    the job, False for such a repeat (so a caller's own writes in the same transaction can
    be skipped too: they committed with the first finish)."""
    job = _job(job)
    raw = None if data is None else encode_data(data)

    def body(tr):
        row = _row_of(tr, job)
        if row is not None and row.last_lock == job.lock:
            return False  # this Job's finish already committed
        if row is None or row.lock != job.lock:
            raise _halt(job)
        rows.clear_activity(tr, job.type, row)
        final = row.data if raw is None else raw
        if row.resubmit:
            rows.put(tr, job.type, job.id, Row(None, None, row.stime, False, final, job.lock))
            pending.enqueue(tr, job.type, row.stime, job.id)
        else:  # Worker and Lost kept, for people: who ran it, how many workers it lost
            rows.put(tr, job.type, job.id, Row(row.seq, None, row.stime, False, final, job.lock, row.worker, row.lost))
            if failed:
                failed_index.mark(tr, job.type, job.id, failed if isinstance(failed, str) else None)
        rows.bump_activity(tr, job.type)
        return True

    return _in(tr, body)


def resubmit(tr, job: Job | JobInfo, scheduled_time: float | None = None, data: dict | None = None) -> Job | JobInfo:
    """Run the job again, at ``scheduled_time`` (None: its current scheduled time), with
    ``data`` (None: keep its data).  Running: flagged, and made pending at that time when it
    finishes; its data is not changed (as couch_jobs; the worker's finish data wins).
    Pending: rescheduled (nothing written if neither time nor data change).  Finished:
    pending again.  Not fenced: a creator may pass the JobInfo from get_job.  Returns the
    Job with ``resubmitted`` set when the job was running (a JobInfo is returned as given).
    Raises NotFound, ForeignJobError, JobDataError."""
    if not isinstance(job, (Job, JobInfo)):
        raise checks.ArgumentTypeError(f"expected a Job or JobInfo, not {type(job).__name__}")
    checks.name(job.type, "type")
    checks.name(job.id, "job id")
    stime = None if scheduled_time is None else checks.scheduled_time(scheduled_time)
    raw = None if data is None else encode_data(data)

    def body(tr):
        row = _row_of(tr, job) if isinstance(job, Job) else rows.get(tr, job.type, job.id)
        if row is None:
            raise _not_found(job.type, job.id)
        new_stime = row.stime if stime is None else stime
        if row.state == "running":
            rows.put(tr, job.type, job.id, replace(row, stime=new_stime, resubmit=True))
        elif row.state == "finished" or new_stime != row.stime or (raw is not None and raw != row.data):
            if row.state == "pending":
                pending.remove(tr, job.type, row.stime, job.id)
            else:
                failed_index.unmark(tr, job.type, job.id)
            rows.make_pending(tr, job.type, job.id, new_stime, row.data if raw is None else raw)
        return row

    row = _in(tr, body)
    if isinstance(job, JobInfo):
        return job
    if row.state == "running":  # the data was not changed
        return replace(job, resubmitted=True)
    # The data the job will run with: the stored data (a finished job's result) unless given.
    return replace(job, resubmitted=False, data=decode_data(row.data) if data is None else data)


def is_resubmitted(job: Job) -> bool:
    """Whether the job was flagged to run again, as of the Job's last ``update`` (or the
    ``resubmit`` that returned it)."""
    return _job(job).resubmitted


def is_held(tr, job: Job) -> bool:
    """Whether ``job`` is still running under this Job's lock: False once it was removed,
    re-enqueued, finished, or taken by another worker.  Read-only; for workers that want to
    notice a lost job sooner than their next ``update``."""
    job = _job(job)

    def body(tr):
        row = _row_of(tr, job)
        return row is not None and row.lock == job.lock

    return _in(tr, body)


def release(tr, job: Job) -> None:
    """Hand a running job back to pending at once, without finishing it (data and scheduled
    time kept; the next update/finish with this Job raises Halt).  For workers that stop
    before a job is done: the job need not wait out its type timeout.  Raises Halt when the
    job is no longer this worker's, ForeignJobError for a Job of another store."""
    job = _job(job)
    released = []  # an attempt released it: its commit may have happened (1021)

    def body(tr):
        row = _row_of(tr, job)
        if row is None or row.lock != job.lock:
            if released and row is not None and row.state == "pending":
                return
            raise _halt(job)
        released.append(True)
        rows.clear_activity(tr, job.type, row)
        rows.make_pending(tr, job.type, job.id, row.stime, row.data, lost=row.lost)  # the same run

    _in(tr, body)
