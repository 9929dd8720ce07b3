"""Reading jobs: one job (data, state, run info), every job, the running ids, the pending
count, the known types.  Nothing here writes."""

from __future__ import annotations

import time

from .. import checks, keys
from ..indexes import failed as failed_index, pending
from . import finished as finished_index, rows
from ..controls import limits, pausing, type_timeouts
from ..calls import not_found, within_store
from ..codec import Row, decode_data, lock_time
from ..engine import value_of
from ..job import JobInfo, JobTimes, RunInfo
from ..stamps import FDB_VERSIONS_PER_SECOND


def _row_or_not_found(tr, type: str, job_id: str) -> Row:
    row = rows.get(tr, type, job_id)
    if row is None:
        raise not_found(tr, type, job_id)
    return row


def _read_row(tr, type: str, job_id: str) -> Row:
    checks.name(type, "type")
    checks.name(job_id, "job id")
    return within_store(tr, lambda tr: _row_or_not_found(tr, type, job_id))


def get_job_data(tr, type: str, job_id: str) -> dict:
    """The job's data. Raises NotFound."""
    return decode_data(_read_row(tr, type, job_id).data)


def get_job_state(tr, type: str, job_id: str) -> str:
    """"pending", "running" or "finished". Raises NotFound."""
    return _read_row(tr, type, job_id).state


def _info(type: str, job_id: str, row: Row) -> JobInfo:
    return JobInfo(type, job_id, row.state, decode_data(row.data), row.stime, row.priority, row.key)


def get_job(tr, type: str, job_id: str) -> JobInfo:
    """Type, id, state, data, scheduled time and priority of a job. Raises NotFound."""
    return _info(type, job_id, _read_row(tr, type, job_id))


def get_run_info(tr, type: str, job_id: str) -> RunInfo:
    """The job's last worker, lost workers and failure time (see :class:`RunInfo`), read
    in one snapshot.  Raises NotFound."""
    checks.name(type, "type")
    checks.name(job_id, "job id")

    def body(tr):
        row = _row_or_not_found(tr, type, job_id)
        return RunInfo(row.worker, row.lost, failed_index.get(tr, type, job_id))

    return within_store(tr, body)


def get_times(tr, type: str, job_id: str) -> JobTimes:
    """When the job was enqueued, started, last active and finished, as far as the store
    knows (see :class:`JobTimes`), read in one snapshot.  Raises NotFound; StoreError if
    its lock is not one an accept draws (corrupt)."""
    checks.name(type, "type")
    checks.name(job_id, "job id")

    def body(tr):
        row = _row_or_not_found(tr, type, job_id)
        enqueued = last = None
        if row.state == "pending":
            enqueued = _enqueued(tr, type, job_id, row)
        elif row.state == "running" and row.seq is not None:
            version = int.from_bytes(row.seq.tr_version[:8], "big")
            last = time.time() - (tr.get_read_version().wait() - version) / FDB_VERSIONS_PER_SECOND
        entry = finished_index.entry_of(tr, type, job_id) if row.state == "finished" else None
        started = lock_time(row.lock if row.state == "running" else row.last_lock, f"the lock of job {type}/{job_id}")
        return JobTimes(enqueued, None if row.state == "pending" else started, last,
                        None if entry is None else entry[1])

    return within_store(tr, body)


def _enqueued(tr, type: str, job_id: str, row: Row) -> float | None:
    """When the pending job's entry was written."""
    if row.key is not None:
        key = keys.keyed_pending_key(type, row.key, row.priority, row.stime, job_id)
    else:
        key = keys.pending_key(type, row.priority, row.stime, job_id)
    raw = value_of(tr.snapshot.get(key))
    return None if raw is None else pending.queued_at(raw)


def get_jobs(tr, type: str | None = None, *, unreadable: list | None = None) -> list[JobInfo]:
    """Every job (of ``type``, if given), sorted by (type, id).  A job whose row cannot be
    read raises StoreError, or, if ``unreadable`` is given (a list), is left out and named
    there as ``(type, id, error)``."""
    if type is not None:
        checks.name(type, "type")

    def read(tr):
        found: list = []  # (this attempt's: a retry reads them again)
        infos = [_info(t, i, row) for t, i, row in rows.scan(tr, type, found if unreadable is not None else None)]
        return infos, found

    infos, found = within_store(tr, read)
    if unreadable is not None:
        unreadable.extend(found)
    return sorted(infos, key=lambda info: (info.type, info.id))


def get_active_jobs_ids(tr, type: str) -> list[str]:
    """Ids of the running jobs of ``type``, least recently active first."""
    checks.name(type, "type")
    return within_store(tr, lambda tr: rows.active_ids(tr, type))


def pending_count(tr, type: str, max_sched_time: float | None = None, limit: int | None = None) -> int:
    """Pending jobs of ``type`` scheduled at or before ``max_sched_time`` (None: all, also
    those scheduled in the future), counting at most ``limit`` (None: no limit).  A
    snapshot read: adds no conflicts to the caller's transaction."""
    checks.name(type, "type")
    max_sched_time = checks.optional_seconds(max_sched_time, "max_sched_time")
    limit = checks.limit(limit)
    return within_store(tr, lambda tr: pending.count(tr, type, max_sched_time, limit))


def job_types(tr) -> list[str]:
    """Types that have a timeout, are paused, have limits or have at least one job, sorted.
    Jobs are found by skipping from one type's rows to the next (one read per type), not
    by reading every row."""
    found = set(type_timeouts.get_types(tr)) | set(pausing.paused_types(tr)) | set(limits.limited_types(tr))
    begin, end = keys.DATA.range().start, keys.DATA.range().stop
    while (key := _first_key(tr, begin, end)) is not None:
        type = keys.DATA.unpack(key)[0]
        found.add(type)
        begin = keys.DATA[type].range().stop
    return sorted(found)


def _first_key(tr, begin: bytes, end: bytes) -> bytes | None:
    for key, _value in tr.snapshot.get_range(begin, end, limit=1):
        return bytes(key)
    return None
