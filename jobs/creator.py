"""The creator's side of the API: ``add`` and ``remove`` (any state; not fenced)."""

from __future__ import annotations

from dataclasses import replace

from . import checks, finished as finished_index, keys, pending, rows
from .calls import not_found, within_store
from .codec import encode_data
from .engine.transactional import LastAttempt
from .errors import NoTypeTimeout


def add(tr, type: str, job_id: str, data: dict | None = None, scheduled_time: float = 0,
        priority: int = 0, key: str | None = None) -> None:
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

    Raises NoTypeTimeout when the type has no timeout, JobDataError for bad data;
    ValueError when type or id contains control characters, ``scheduled_time`` is not a
    time a view can show as a date (negative, NaN, from the year 9999 on) or ``priority``
    is not an int of 64 bits (a bool neither), or ``key`` is not a str without control
    characters."""
    checks.name(type, "type", new=True)
    checks.name(job_id, "job id", new=True)
    if key is not None:
        checks.name(key, "key", new=True)
    checks.key_sizes(type, job_id, key)
    stime = checks.scheduled_time(scheduled_time)
    priority = checks.priority(priority)
    raw = encode_data(data)

    def body(tr):
        if not tr.get(keys.timeout_key(type)).wait().present():
            raise NoTypeTimeout(
                f"job type {type!r} has no timeout: call set_type_timeout(db, {type!r}, seconds) first"
            )
        row = rows.get(tr, type, job_id)
        state = None if row is None else row.state
        if state == "pending" and (row.stime, row.priority, row.key) == (stime, priority, key):
            return
        if state == "running":
            rows.put(tr, type, job_id, replace(row, stime=stime, priority=priority, key=key, resubmit=True))
            return
        if state == "pending":
            pending.remove(tr, type, row.priority, row.stime, job_id, row.key)
        elif state == "finished":
            finished_index.leave(tr, type, job_id)
        rows.make_pending(tr, type, job_id, stime, raw, priority=priority, key=key)

    within_store(tr, body)


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
            raise not_found(type, job_id)
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
