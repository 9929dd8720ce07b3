"""The worker's side of the API: ``accept`` a job, then ``update``, ``finish`` or ``release``
it; every write made with the Job is fenced by its lock (``Halt`` once the job carries
another lock or none).  ``resubmit`` also takes a creator's JobInfo, unfenced."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from .. import ahead, checks, keys, store_ids
from ..calls import not_found, within_store
from ..codec import Row, decode_data, encode_data
from ..controls import fairness
from ..engine import LastAttempt, is_database, value_of
from ..errors import ForeignJobError, Halt, JobDataError
from ..indexes import counts, failed as failed_index, pending
from ..job import Job, JobInfo
from . import finished as finished_index, rows
from .accepting import AcceptCall


def _job(job) -> Job:
    if not isinstance(job, Job):
        raise checks.ArgumentTypeError(f"expected a Job from accept() or update(), not {type(job).__name__}")
    return job


def _halt(job: Job) -> Halt:
    return Halt(f"job {job.type}/{job.id} is no longer held by this worker: stop working on it")


def _row_of(tr, job: Job) -> Row | None:
    """The row of ``job``'s job, after checking that ``job`` comes from this store."""
    store = store_ids.store_id_future(tr)
    row = rows.get(tr, job.type, job.id)
    if store_ids.store_id_of(store) != job.store:
        raise ForeignJobError(f"job {job.type}/{job.id} was accepted from another store than this one")
    return row



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
        rows.put_running(tr, job.type, job.id, row if raw is None else row._replace(data=raw))
        return replace(job, data=job.data if data is None else data, resubmitted=row.resubmit)

    return within_store(tr, body)


def finish(tr, job: Job, data: dict | None = None, *, failed: bool | str = False) -> bool:
    """Finish a running job, with ``data`` as its final data (None keeps the current data).
    A job flagged for resubmission becomes pending again at its scheduled time (a new run:
    its lost-worker count starts over).  ``failed``: the run failed for good (True, or a
    one-line reason); unless it is made pending again, the job is indexed as failed
    (counted by ``jobsctl status``, listed by ``jobsctl list --failed``) until it is re-added,
    resubmitted or removed.  A failed run of a job made pending again (a retry) is counted
    in the last hour's rates as retried, neither finished nor failed.  Raises
    Halt when the job is no longer this worker's (nothing is written then), ForeignJobError
    for a Job of another store, JobDataError for bad data.  Finishing again with the same
    Job, e.g. in a transaction retried after 1021, is a no-op while nobody changed the job
    since (no re-add, resubmit, release or accept).  Returns True when this call finished
    the job, False for such a repeat (so a caller's own writes in the same transaction can
    be skipped too: they committed with the first finish)."""
    job = _job(job)
    done = _finish_batch(tr, [(job, None if data is None else encode_data(data), failed)])[0]
    if done is None:
        raise _halt(job)
    return done


def finish_many(tr, finishes: Iterable) -> list[bool | None]:
    """:func:`finish` for each of ``finishes`` in one transaction (a Job, or a tuple
    ``(job, data)`` or ``(job, data, failed)``), with what a finish costs per type done
    once for all: the rows and the type's retention read together (one round trip on a
    cluster), one add per counter, one rate update and one activity stamp per type.  Each
    job is fenced on its own, and the result says what became of it, in order: True
    finished, False a repeat (its finish committed already, as :func:`finish` returns),
    None no longer this worker's (where ``finish`` raises Halt: nothing is written for it,
    the others are finished all the same).  Bad data (JobDataError) and a Job of another
    store (ForeignJobError) raise before anything is written."""
    return _finish_batch(tr, [_finish_item(i, item) for i, item in enumerate(finishes)])


def _finish_batch(tr, items: list[tuple[Job, bytes | None, bool | str]]) -> list[bool | None]:
    """:func:`finish_many` of checked ``(job, raw data or None, failed)`` items."""

    def body(tr):
        store = store_ids.store_id_future(tr)
        types = dict.fromkeys(job.type for job, _raw, _failed in items)
        read = [keys.data_key(job.type, job.id) for job, _raw, _failed in items]
        # (the tally written as the block ends, or by an accept carrying these finishes)
        with counts.sharing(tr) as tally, ahead.block(tr, read + [keys.retention_key(type) for type in types]):
            retained = {type: finished_index.retained(tr, type) for type in types}
            store_id = store_ids.store_id_of(store)
            for job, _raw, _failed in items:
                if job.store != store_id:
                    raise ForeignJobError(f"job {job.type}/{job.id} was accepted from another store than this one")
            # (each row read as its turn comes: a job given twice sees its first finish)
            done = [_finish_row(tr, job, rows.get(tr, job.type, job.id), raw, failed, retained, tally)
                    for job, raw, failed in items]
        for (job, _raw, _failed), finished in zip(items, done):
            if finished and tally.to_stamp(job.type):  # (once a type, with a carrying accept's)
                rows.bump_activity(tr, job.type)
        return done

    return within_store(tr, body)


def _finish_item(i: int, item) -> tuple[Job, bytes | None, bool | str]:
    """``(job, raw data or None, failed)`` of ``finish_many``'s item ``i``, checked."""
    if isinstance(item, Job):
        return item, None, False
    if not isinstance(item, tuple) or not 1 <= len(item) <= 3:
        raise checks.ArgumentTypeError(f"finishes[{i}]: expected a Job or a tuple (job, data[, failed]), "
                                       f"not {type(item).__name__}")
    job, data, failed = (*item, *(None, False)[len(item) - 1:])
    try:
        return _job(job), None if data is None else encode_data(data), failed
    except (TypeError, JobDataError) as exc:  # the same error, saying which item
        raise exc.__class__(f"finishes[{i}]: {exc}") from exc


def _finish_row(tr, job: Job, row: Row | None, raw: bytes | None, failed, retained: dict, tally):
    """Finish one job of a batch whose row is ``row`` (:func:`finish_many`'s result for it),
    tallying its counters and its rate in ``tally``."""
    if row is not None and row.last_lock == job.lock:
        return False  # this Job's finish already committed
    if row is None or row.lock != job.lock:
        return None
    rows.stop_running(tr, job.type, job.id, row, tally.changed)
    final = row.data if raw is None else raw
    if row.resubmit:
        rows.put(tr, job.type, job.id, Row(None, None, row.stime, False, final, job.lock, priority=row.priority,
                                           key=row.key))
        fairness.enqueue(tr, job.type, row.priority, row.stime, job.id, row.key)
    else:  # Worker and Lost kept, for people: who ran it, how many workers it lost
        rows.put(tr, job.type, job.id, Row(row.seq, None, row.stime, False, final, job.lock, row.worker,
                                           row.lost, row.priority, row.key))
        if failed:
            failed_index.mark(tr, job.type, job.id, failed if isinstance(failed, str) else None)
        if failed or value_of(retained[job.type]) is not None:  # (failed jobs are always indexed)
            finished_index.mark(tr, job.type, job.id, bool(failed))
        tally.changed(tr, job.type, "failed" if failed else "finished", 1)
    # (a failed run of a job made pending again is retried, not finished: rates.py)
    tally.finished(job.type, bool(failed) and not row.resubmit, retried=bool(failed) and row.resubmit)
    return True


def resubmit(tr, job: Job | JobInfo, scheduled_time: float | None = None, data: dict | None = None,
             priority: int | None = None) -> Job | JobInfo:
    """Run the job again, at ``scheduled_time`` (None: its current scheduled time), with
    ``data`` (None: keep its data), in band ``priority`` (None: keep its priority).
    Running: flagged, and made pending at that time and priority when it finishes; its data
    is not changed (as couch_jobs; the worker's finish data wins).  Pending: rescheduled
    (nothing written if neither time, priority nor data change).  Finished: pending again.
    Not fenced: a creator may pass the JobInfo from get_job.  Returns the Job with
    ``resubmitted`` set when the job was running (a JobInfo is returned as given).  Raises
    NotFound, ForeignJobError, JobDataError; ValueError for a bad time or priority."""
    if not isinstance(job, (Job, JobInfo)):
        raise checks.ArgumentTypeError(f"expected a Job or JobInfo, not {type(job).__name__}")
    checks.name(job.type, "type")
    checks.name(job.id, "job id")
    stime = None if scheduled_time is None else checks.scheduled_time(scheduled_time)
    priority = None if priority is None else checks.priority(priority)
    raw = None if data is None else encode_data(data)

    def body(tr):
        row = _row_of(tr, job) if isinstance(job, Job) else rows.get(tr, job.type, job.id)
        if row is None:
            raise not_found(tr, job.type, job.id)
        new_stime = row.stime if stime is None else stime
        new_priority = row.priority if priority is None else priority
        if row.state == "running":
            rows.put(tr, job.type, job.id, row._replace(stime=new_stime, priority=new_priority, resubmit=True))
        elif (row.state == "finished" or (new_stime, new_priority) != (row.stime, row.priority)
              or (raw is not None and raw != row.data)):
            if row.state == "pending":
                pending.remove(tr, job.type, row.priority, row.stime, job.id, row.key)
            else:
                finished_index.leave(tr, job.type, job.id)
            rows.make_pending(tr, job.type, job.id, new_stime, row.data if raw is None else raw,
                              priority=new_priority, key=row.key)
        return row

    row = within_store(tr, body)
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


def read_ahead(tr, held):
    """``with jobs.read_ahead(tr, held):`` the ``update``/``finish``/``is_held``/``release``
    calls of these Jobs inside the block, in transaction ``tr``, find their rows read
    already: the reads go out together, one round trip on a cluster instead of one per job
    (for a worker finishing a batch in one transaction).  Nothing else changes: each call
    still fences on its own row."""
    if is_database(tr):
        raise checks.ArgumentTypeError("read_ahead needs a transaction (its reads belong to it), not a database")
    held = [_job(job) for job in held]
    return ahead.block(tr, [keys.data_key(job.type, job.id) for job in held]
                       + [keys.retention_key(job.type) for job in held])


def is_held(tr, job: Job) -> bool:
    """Whether ``job`` is still running under this Job's lock: False once it was removed,
    re-enqueued, finished, or taken by another worker.  Read-only; for workers that want to
    notice a lost job sooner than their next ``update``."""
    job = _job(job)

    def body(tr):
        row = _row_of(tr, job)
        return row is not None and row.lock == job.lock

    return within_store(tr, body)


def release(tr, job: Job) -> None:
    """Hand a running job back to pending at once, without finishing it (data and scheduled
    time kept; the next update/finish with this Job raises Halt).  For workers that stop
    before a job is done: the job need not wait out its type timeout.  Raises Halt when the
    job is no longer this worker's, ForeignJobError for a Job of another store."""
    job = _job(job)
    released = LastAttempt()  # an attempt released it: its commit may have happened (1021)

    def body(tr):
        row = _row_of(tr, job)
        if row is None or row.lock != job.lock:
            if released.committed(lambda _: row is not None and row.state == "pending"):
                return
            raise _halt(job)
        released.record(True)
        rows.stop_running(tr, job.type, job.id, row)
        rows.make_pending(tr, job.type, job.id, row.stime, row.data, lost=row.lost, priority=row.priority,
                          key=row.key)  # same run

    within_store(tr, body)
