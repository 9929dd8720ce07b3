"""A background job queue with couch_jobs' semantics on FoundationDB or an embedded engine.

    db = jobs.open()                       # $JOBS_STORE, else .jobs/jobs.sqlite
    jobs.set_type_timeout(db, "t", 30)
    jobs.add(db, "t", "job-1", {"x": 1})
    job = jobs.accept(db, "t")
    jobs.finish(db, job, {"done": True})

The calls live by concern (``jobs.queue``: adding, accepting and finishing, reading;
``jobs.controls``: type timeouts, pausing, limits, retention; ``jobs.observe``: following
jobs) and are all here, the one public namespace; ``jobs.aio`` has their async twins and
``jobs.keys`` the data model.  Beyond couch_jobs' API: ``release`` hands a running job back
to pending at once (a worker shutting down); ``accept_many`` takes a batch of jobs in one
transaction; ``add(..., priority=N)`` puts a job in a priority band (lower runs first);
``pause`` and ``resume`` stop and restart every worker's accepts of a type;
``add(..., key=K)`` gives each key (a tenant) its turn, and ``set_limits`` bounds the jobs
running at once and started per period, per type and per key.

Every function but :func:`accept` takes ``tr``: a database (the call runs and commits its
own transaction, retried on conflicts) or a transaction (the call joins it and commits
nothing, so it composes with the caller's own writes).  ``accept`` waits, so it takes a
database.  Arguments and data are checked before anything is read or written, and an error
raised inside a transaction leaves nothing written by the call.

Retries after ``commit_unknown_result`` (1021) re-run a transaction that may have
committed; every write path gives the right answer when that happens:

* ``add``, ``update``, ``resubmit``, ``set_type_timeout``, ``clear_type_timeout``,
  ``pause``, ``resume``: running them again gives the same end state.
* ``accept``: see ``accepting.py`` (the lock is drawn once per call; a retry returns the
  job an earlier attempt locked).
* ``finish`` (and ``finish_many``, job by job): a finish records its lock in the row
  (``LastLock``); a finish that finds its own lock there knows it already committed and
  returns instead of raising ``Halt``.
  This also covers an application's transaction retried around ``finish``.  Creators'
  changes (re-add, resubmit, release) and ``accept`` clear ``LastLock``: once the job
  changed hands, a repeated finish must raise ``Halt`` so that the caller's own writes
  in that transaction never commit unfenced.  Known gap, the price of that: if a finish
  re-enqueued a job flagged for resubmission, committed behind 1021, and another worker
  accepted the job before the retry ran, the retry raises ``Halt`` although its finish
  did commit.
* ``remove`` and ``release`` on a database: a retry that finds the job already gone (or
  back in the queue) after an attempt that did the work succeeds.
"""

from .observe.subscriptions import subscribe, unsubscribe, wait
from .queue.creator import NewJob, add, add_many, remove
from .queue.reading import (
    get_active_jobs_ids,
    get_job,
    get_job_data,
    get_job_state,
    get_jobs,
    get_run_info,
    get_times,
    pending_count,
)
from .queue.worker import (
    accept,
    accept_many,
    finish,
    finish_many,
    is_held,
    is_resubmitted,
    read_ahead,
    release,
    resubmit,
    update,
)
from .controls.pausing import is_paused, pause, resume
from .controls.type_timeouts import clear_type_timeout, get_type_timeout, get_types, set_type_timeout
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
