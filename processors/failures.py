"""Failed jobs, for operators: list them, run them again, or discard them.

A job fails for good when its handler used up its attempts (``Retry``) or its run lost
``max_lost`` workers; it then stays ``finished`` with ``_task.failed`` and is indexed as
failed by the job layer (``jobs/indexes/failed.py``), which is what these read: never every row.
"""

from __future__ import annotations

from dataclasses import dataclass

import jobs
from jobs import checks
from jobs.indexes import failed as failed_index
from jobs import get_run_info
from jobs.engine import run as run_transaction, within
from monitor.actions import JobActions

from . import behaviors
from .errors import NotFailed

PAGE = 100  # failed jobs retried per transaction by retry_all_failed


@dataclass(frozen=True)
class FailedJob:
    """A failed job: ``at`` when it failed (the finisher's clock), ``reason`` one line."""

    type: str
    id: str
    at: float
    reason: str | None


def failed_jobs(tr, type: str, limit: int = 0) -> list[FailedJob]:
    """The failed jobs of ``type``, by id; at most ``limit`` (0: all).  ``tr``: a database
    or a transaction (a snapshot read)."""
    checks.name(type, "type")
    return within(tr, lambda tr: [FailedJob(type, *entry) for entry in failed_index.listed(tr, type, limit=limit)])


def _failed_info(tr, type: str, job_id: str) -> jobs.JobInfo:
    info = jobs.get_job(tr, type, job_id)
    if get_run_info(tr, type, job_id).failed is None:
        raise NotFailed(f"job {type}/{job_id} is {info.state}, not failed: only failed jobs can be retried or discarded")
    return info


def retry_failed(tr, type: str, job_id: str) -> None:
    """Run a failed job again, now, from its first attempt: pending with its params (the
    failed run's attempts, error and lost workers dropped; a recurring job keeps its run
    count).  Raises NotFound, NotFailed.  Idempotent in effect: a retry of a retried job
    raises NotFailed and writes nothing."""

    def body(tr):
        info = _failed_info(tr, type, job_id)
        jobs.resubmit(tr, info, scheduled_time=0, data=behaviors.retried(info.data))

    within(tr, body)


def retry_all_failed(db, type: str) -> int:
    """Retry every failed job of ``type`` (:func:`retry_failed`), ``PAGE`` per transaction;
    returns how many.  Takes a database: it runs transactions of its own."""
    checks.name(type, "type")
    total = 0
    while True:
        def page(tr):
            entries = failed_index.listed(tr, type, limit=PAGE)
            for job_id, _at, _reason in entries:
                retry_failed(tr, type, job_id)
            return len(entries)

        n = run_transaction(db, page)
        total += n
        if n < PAGE:
            return total


def discard_failed(tr, type: str, job_id: str) -> None:
    """Remove a failed job for good.  Raises NotFound, NotFailed (a job in any other state
    is left alone: use ``jobs.remove`` for those)."""

    def body(tr):
        _failed_info(tr, type, job_id)
        jobs.remove(tr, type, job_id)

    within(tr, body)


class TaskActions(JobActions):
    """The status server's actions on a store that processors run: retry and discard as
    :func:`retry_failed` and :func:`discard_failed` (a retried task starts over from its
    first attempt, its failure bookkeeping dropped)."""

    def retry(self, type: str, job_id: str) -> None:
        retry_failed(self.db, type, job_id)

    def discard(self, type: str, job_id: str) -> None:
        discard_failed(self.db, type, job_id)
