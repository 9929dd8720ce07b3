"""A background job queue with couch_jobs' semantics on FoundationDB or an embedded engine.

    db = jobs.open()                       # $JOBS_STORE, else .jobs/jobs.sqlite
    jobs.set_type_timeout(db, "t", 30)
    jobs.add(db, "t", "job-1", {"x": 1})
    job = jobs.accept(db, "t")
    jobs.finish(db, job, {"done": True})

See ``jobs.api`` for the contract of each function, ``jobs.keys`` for the data model and
``jobs.aio`` for async twins.  Beyond couch_jobs' API: ``release`` hands a running job back
to pending at once (a worker shutting down); ``accept_many`` takes a batch of jobs in one
transaction; ``add(..., priority=N)`` puts a job in a priority band (lower runs first);
``pause`` and ``resume`` stop and restart every worker's accepts of a type;
``add(..., key=K)`` gives each key (a tenant) its turn, and ``set_limits`` bounds the jobs
running at once and started per period, per type and per key.
"""

from .observe.subscriptions import subscribe, unsubscribe, wait
from .api import (
    accept,
    accept_many,
    add,
    add_many,
    NewJob,
    clear_type_timeout,
    finish,
    finish_many,
    get_active_jobs_ids,
    get_job,
    get_job_data,
    get_job_state,
    get_jobs,
    get_run_info,
    get_times,
    get_type_timeout,
    get_types,
    is_held,
    is_paused,
    is_resubmitted,
    pause,
    pending_count,
    read_ahead,
    release,
    remove,
    resubmit,
    resume,
    set_type_timeout,
    update,
)
from .engine import transactional
from .upkeep.pruning import prune
from .upkeep.repair import remove_unreadable
from .controls.retention import Retention, clear_retention, get_retention, set_retention
from .controls.limits import Limits, Rate, clear_limits, get_limits, set_limits
from .errors import (
    ForeignJobError,
    Halt,
    JobDataError,
    JobsError,
    LayoutError,
    NotFound,
    NoTypeTimeout,
    StoreError,
    StoreOpenError,
)
from .store import open
from .job import Job, JobInfo

__all__ = [
    # the pinned API
    "set_type_timeout",
    "subscribe",
    "unsubscribe",
    "wait",
    "get_type_timeout",
    "clear_type_timeout",
    "add",
    "remove",
    "get_job_data",
    "get_job_state",
    "get_job",
    "get_types",
    "get_jobs",
    "get_active_jobs_ids",
    "pending_count",
    "accept",
    "update",
    "finish",
    "resubmit",
    "is_resubmitted",
    "transactional",
    "Job",
    "JobInfo",
    # opening a store
    "open",
    # beyond couch_jobs
    "release",
    "is_held",
    "read_ahead",
    "finish_many",
    "accept_many",
    "add_many",
    "NewJob",
    "get_run_info",
    "get_times",
    # retention
    "set_retention",
    "get_retention",
    "clear_retention",
    "prune",
    "Retention",
    # repair
    "remove_unreadable",
    # queue controls
    "pause",
    "resume",
    "is_paused",
    "set_limits",
    "get_limits",
    "clear_limits",
    "Limits",
    "Rate",
    # errors
    "JobsError",
    "NotFound",
    "Halt",
    "NoTypeTimeout",
    "JobDataError",
    "ForeignJobError",
    "StoreError",
    "LayoutError",
    "StoreOpenError",
]
