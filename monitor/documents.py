"""A job as people see it, the same in ``jobsctl show --json``, ``jobsctl list`` and the status
server's ``GET /api/jobs/{type}/{id}`` (the dashboard's drill-in): its ``JobInfo``
fields, then what the store knows of its run and when things happened to it, the unknown
left out.  A failed job's state is ``"failed"`` here, as ``jobsctl status`` and the
dashboard count it (the job API's state stays couch_jobs' ``"finished"``)."""

from __future__ import annotations

import jobs
from jobs import get_run_info, get_times
from jobs.job import JobTimes, RunInfo


def job_doc(info: jobs.JobInfo) -> dict:
    """A job's keys; ``priority`` only when it is not the default 0, ``key`` only when the
    job has one (as couch_jobs shows a job)."""
    doc = info._asdict()
    if not doc["priority"]:
        del doc["priority"]
    if doc["key"] is None:
        del doc["key"]
    return doc


def run_doc(run: RunInfo) -> dict:
    """The run's keys, those known: the last worker, the lost workers, the failure (a job
    never accepted has none)."""
    lost = None if run.lost is None else run.lost._asdict()
    failed = None if run.failed is None else dict(zip(("at", "reason"), run.failed))
    return {k: v for k, v in (("worker", run.worker), ("lost", lost), ("failed", failed)) if v is not None}


def times_doc(times: JobTimes) -> dict:
    """``{"times": {...}}`` with the known times (seconds since the epoch), or nothing."""
    known = {k: v for k, v in times._asdict().items() if v is not None}
    return {"times": known} if known else {}


def job_document(tr, type: str, job_id: str) -> dict:
    """The whole document of one job, read in one transaction.  Raises NotFound."""

    def body(tr):
        doc = {**job_doc(jobs.get_job(tr, type, job_id)), **run_doc(get_run_info(tr, type, job_id)),
               **times_doc(get_times(tr, type, job_id))}
        if doc["state"] == "finished" and "failed" in doc:
            doc["state"] = "failed"
        return doc

    return jobs.transactional(body)(tr)
