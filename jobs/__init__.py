"""A background job queue with couch_jobs' semantics on FoundationDB or an embedded engine.

    db = jobs.open()                       # $JOBS_STORE, else .jobs/jobs.sqlite
    jobs.set_type_timeout(db, "t", 30)
    jobs.add(db, "t", "job-1", {"x": 1})
    job = jobs.accept(db, "t")
    jobs.finish(db, job, {"done": True})

See ``jobs.api`` for the contract of each function and ``jobs.aio`` for async twins.
"""

from .api import (
    Job,
    JobInfo,
    accept,
    add,
    clear_type_timeout,
    finish,
    get_active_jobs_ids,
    get_job,
    get_job_data,
    get_job_state,
    get_jobs,
    get_type_timeout,
    get_types,
    is_resubmitted,
    pending_count,
    release,
    remove,
    resubmit,
    set_type_timeout,
    update,
)
from .engine import FDBError, transactional
from .engine.urls import StoreOpenError
from .engine.urls import open_database as open
from .errors import ForeignJobError, Halt, JobDataError, JobsError, LayoutError, NotFound, NoTypeTimeout

__all__ = [
    "FDBError",
    "ForeignJobError",
    "Halt",
    "Job",
    "JobDataError",
    "JobInfo",
    "JobsError",
    "LayoutError",
    "NoTypeTimeout",
    "NotFound",
    "StoreOpenError",
    "accept",
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
    "open",
    "pending_count",
    "release",
    "remove",
    "resubmit",
    "set_type_timeout",
    "transactional",
    "update",
]
