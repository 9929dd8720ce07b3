"""The creator's side of the API: ``add`` and ``remove`` (any state; not fenced)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from .. import ahead, checks, keys
from . import finished as finished_index, rows
from ..controls.type_timeouts import set_type_timeout
from ..indexes import pending
from ..calls import not_found, within_store
from ..codec import encode_data
from ..engine import LastAttempt, describe_store, is_database, value_of
from ..errors import JobDataError, NoTypeTimeout


def add(tr, type: str, job_id: str, data: dict | None = None, scheduled_time: float = 0,
        priority: int = 0, key: str | None = None, type_timeout: float | None = None) -> None:
    """Add a job, or re-add an existing one (couch_jobs' rules; the priority and the key
    go with the scheduled time):

    * new: pending at ``scheduled_time`` (seconds since the epoch; 0: as soon as possible)
      with ``data`` (None: ``{}``), in band ``priority`` (an int, negatives allowed: accept
      takes due jobs of the lowest priority first, then by scheduled time);
    * pending at the same time and priority: nothing is written (nor the data replaced);
    * pending at another time or priority: time, priority and data replaced;
    * running: flagged to run again at ``scheduled_time`` with ``priority`` when it
      finishes (data ignored);
    * finished: pending again with the new data.

    ``key`` (e.g. a tenant): the job waits in that key's own queue, and accept serves the
    type's keys in turn (``fairness.py``), each under the type's per-key limits
    (``set_limits``); None: the type's queue, as couch_jobs.

    ``type_timeout``: the type's timeout (seconds), set in the same transaction if the type
    has none, so that an application can add jobs before any worker of the type has run
    (a timeout the type has is kept: a worker's own declaration wins).

    Raises NoTypeTimeout when the type has no timeout (and none is given), JobDataError for
    bad data;
    ValueError when type or id contains control characters, ``scheduled_time`` is not a
    time a view can show as a date (negative, NaN, from the year 9999 on) or ``priority``
    is not an int of 64 bits (a bool neither), or ``key`` is not a str without control
    characters."""
    checks.name(type, "type", new=True)
    job = _checked(type, job_id, data, scheduled_time, priority, key)
    type_timeout = _type_timeout(type_timeout)

    def body(tr):
        timeout = _timeout_read(tr, type)  # (both reads issued together: one round trip)
        row = ahead.read(tr, keys.data_key(type, job_id))
        _require_timeout(tr, timeout, type, type_timeout)
        _add_row(tr, type, job, rows.decode(value_of(row), type, job_id))

    within_store(tr, body)


class NewJob(NamedTuple):
    """One job for :func:`add_many`: what :func:`add` takes after the type."""

    id: str
    data: dict | None = None
    scheduled_time: float = 0
    priority: int = 0
    key: str | None = None


class _Checked(NamedTuple):
    id: str
    stime: float
    priority: int
    key: str | None
    raw: bytes


def _checked(type: str, job_id, data, scheduled_time, priority, key) -> _Checked:
    """The job's arguments checked and normalised (before anything is read or written)."""
    checks.name(job_id, "job id", new=True)
    if key is not None:
        checks.name(key, "key", new=True)
    checks.key_sizes(type, job_id, key)
    return _Checked(job_id, checks.scheduled_time(scheduled_time), checks.priority(priority), key,
                    encode_data(data))


def _timeout_read(tr, type: str):
    """The future of the read of ``type``'s timeout (for :func:`_require_timeout`)."""
    return tr.get(keys.timeout_key(type))


def _type_timeout(seconds: float | None) -> float | None:
    """``type_timeout`` checked before anything is written (None: none given)."""
    return None if seconds is None else checks.seconds(seconds, "type timeout", positive=True)


def _require_timeout(tr, timeout, type: str, default: float | None = None) -> None:
    """NoTypeTimeout unless the type's timeout (``timeout``: its read) is set, or set here
    to ``default``; the error names the store, which may not be the one meant (another
    working directory's default)."""
    if value_of(timeout) is not None:
        return
    if default is not None:
        set_type_timeout(tr, type, default)
    else:
        raise NoTypeTimeout(f"job type {type!r} has no timeout in {describe_store(tr)}: "
                            f"call set_type_timeout(db, {type!r}, seconds) first")


def _add_row(tr, type: str, job: _Checked, row) -> None:
    """``add``'s rules for the job whose row (just read) is ``row`` (None: a new job)."""
    job_id, stime, priority, key, raw = job
    state = None if row is None else row.state
    if state == "pending" and (row.stime, row.priority, row.key) == (stime, priority, key):
        return
    if state == "running":
        rows.put(tr, type, job_id, row._replace(stime=stime, priority=priority, key=key, resubmit=True))
        return
    if state == "pending":
        pending.remove(tr, type, row.priority, row.stime, job_id, row.key)
    elif state == "finished":
        finished_index.leave(tr, type, job_id)
    rows.make_pending(tr, type, job_id, stime, raw, priority=priority, key=key)


BULK_CHUNK = 1_000  # jobs per transaction when add_many is given a database


def add_many(tr, type: str, jobs: Iterable, type_timeout: float | None = None) -> None:
    """Add many jobs of ``type``, each as ``add(tr, type, ...)`` would (the same rules for
    jobs that exist, the same checks), with one read per job and one write per counter
    for all.  ``jobs``: :class:`NewJob` items, tuples of its fields, or ids alone.  Every
    job is checked before anything is written: a bad one raises ValueError (or JobDataError)
    naming its place, and so does an id given twice.  Given a transaction: in it, all or
    nothing.  Given a database: ``BULK_CHUNK`` jobs per transaction, in order, each retried
    as ``add`` is (a chunk whose commit happened writes nothing more when retried).
    ``type_timeout``: as :func:`add`'s."""
    checks.name(type, "type", new=True)
    type_timeout = _type_timeout(type_timeout)
    batch, seen = [], set()
    for i, item in enumerate(jobs):
        try:
            job = _checked(type, *_new_job(item))
        except (TypeError, ValueError, JobDataError) as exc:  # the same error, saying which job
            kind = checks.ArgumentTypeError if type_error(exc) else exc.__class__
            raise kind(f"jobs[{i}]: {exc}") from exc
        if job.id in seen:
            raise ValueError(f"jobs[{i}]: job id {job.id!r} is given twice")
        seen.add(job.id)
        batch.append(job)
    if not is_database(tr):
        within_store(tr, lambda tr: _add_batch(tr, type, batch, type_timeout))
        return
    for start in range(0, len(batch), BULK_CHUNK):
        chunk = batch[start:start + BULK_CHUNK]
        within_store(tr, lambda tr, chunk=chunk: _add_batch(tr, type, chunk, type_timeout))


_DEFAULTS = tuple(NewJob._field_defaults.values())  # (data, scheduled_time, priority, key)


def _new_job(item) -> tuple:
    """An item of :func:`add_many`'s ``jobs`` as :class:`NewJob`'s five fields (TypeError
    for a wrong number of them), without making a NewJob for each."""
    if isinstance(item, str):
        return (item, *_DEFAULTS)
    fields = tuple(item)
    if 0 < len(fields) <= len(NewJob._fields):
        return fields + _DEFAULTS[len(fields) - 1:]
    return NewJob(*fields)


def type_error(exc: Exception) -> bool:
    """A plain TypeError (a wrong number of fields, an item that is no tuple): the API
    raises an ArgumentTypeError, a ValueError too, for every bad argument."""
    return isinstance(exc, TypeError) and not isinstance(exc, ValueError)


def _add_batch(tr, type: str, batch: list[_Checked], type_timeout: float | None) -> None:
    timeout = _timeout_read(tr, type)
    data_keys = [keys.data_key(type, job.id) for job in batch]
    futures = [tr.get(key) for key in data_keys]  # (read in parallel)
    _require_timeout(tr, timeout, type, type_timeout)
    new = []
    for job, key, future in zip(batch, data_keys, futures):
        raw = value_of(future)
        if raw is None and job.key is None:
            new.append((key, job.id, job.stime, job.priority, job.raw))
        else:
            _add_row(tr, type, job, rows.decode(raw, type, job.id))
    if new:
        rows.make_pending_many(tr, type, new)


def remove(tr, type: str, job_id: str) -> None:
    """Remove a job in any state; a worker running it gets Halt at its next update/finish.
    Raises NotFound."""
    checks.name(type, "type")
    checks.name(job_id, "job id")
    found = LastAttempt()  # an attempt found the job: its commit may have happened (1021)

    def body(tr):
        row = rows.get(tr, type, job_id)
        if row is None:
            if found.committed():  # gone: that attempt removed it
                return
            raise not_found(tr, type, job_id)
        found.record(True)
        remove_row(tr, type, job_id, row)

    within_store(tr, body)


def remove_row(tr, type: str, job_id: str, row) -> None:
    """Remove the job whose row (just read) is ``row``, with every key that refers to it."""
    if row.state == "pending":
        pending.remove(tr, type, row.priority, row.stime, job_id, row.key)
    elif row.state == "finished":
        finished_index.leave(tr, type, job_id)
    rows.stop_running(tr, type, job_id, row)
    rows.clear(tr, type, job_id)
    rows.bump_activity(tr, type)
