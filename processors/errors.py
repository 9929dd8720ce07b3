"""Errors of the processors, under ``jobs.JobsError``.

    JobsError
    +-- TaskFailed       a submitted task finished with an error after its last attempt
"""

from __future__ import annotations

from jobs import JobsError


class TaskFailed(JobsError):
    """The task finished with an error after its last attempt."""

    def __init__(self, type: str, job_id: str, error: dict):
        self.type, self.job_id, self.error = type, job_id, error
        super().__init__(f"task {type}/{job_id} failed: {error.get('type')}: {error.get('message')}")
