"""Errors of the processors, under ``jobs.JobsError``.

    JobsError
    +-- TaskFailed       a submitted task finished with an error after its last attempt
    +-- WorkerLost       a job's run lost more workers than its handler's ``max_lost``
    +-- NotFailed        retry_failed/discard_failed on a job that is not failed
    +-- TimeLimitExceeded  a run went over its handler's ``time_limit`` (a failed attempt)
"""

from __future__ import annotations

from jobs import JobsError


class TaskFailed(JobsError):
    """The task finished with an error after its last attempt."""

    def __init__(self, type: str, job_id: str, error: dict):
        self.type, self.job_id, self.error = type, job_id, error
        super().__init__(f"task {type}/{job_id} failed: {error.get('type')}: {error.get('message')}")


class WorkerLost(JobsError):
    """The job's workers were lost (killed, or stopped heartbeating) too many times: it
    is not run again."""


class NotFailed(JobsError):
    """The job is not failed: only failed jobs can be retried or discarded this way."""


class TimeLimitExceeded(JobsError):
    """A run of the handler went over its ``time_limit``: it was interrupted (a sync
    handler as soon as it runs Python again, an async one cancelled), and the run counts
    as a failed attempt, retried by the handler's retry policy."""
