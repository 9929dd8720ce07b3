"""Reading jobs: one job (data, state, run info), every job, the running ids, the pending
count.  Nothing here writes."""

from __future__ import annotations

from . import checks, failed as failed_index, pending, rows
from .calls import not_found, within_store
from .codec import Row, decode_data
from .job import JobInfo, RunInfo


def _row_or_not_found(tr, type: str, job_id: str) -> Row:
    row = rows.get(tr, type, job_id)
    if row is None:
        raise not_found(type, job_id)
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


def get_jobs(tr, type: str | None = None) -> list[JobInfo]:
    """Every job (of ``type``, if given), sorted by (type, id)."""
    if type is not None:
        checks.name(type, "type")
    infos = within_store(tr, lambda tr: [_info(t, i, row) for t, i, row in rows.scan(tr, type)])
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
