"""The job API in one namespace (couch_jobs.erl's part), and the contract its calls share.

The calls live by concern: ``type_timeouts`` (type timeouts, ``get_types``), ``pausing``
(``pause``, ``resume``, ``is_paused``), ``creator``
(``add``, ``remove``), ``reading`` (``get_job*``, ``get_jobs``, ``get_run_info``, ...),
``worker`` (``accept`` and the calls fenced by a Job's lock); ``calls`` holds what they
share.

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

from __future__ import annotations

from .queue.creator import NewJob, add, add_many, remove
from .job import Job, JobInfo
from .controls.pausing import is_paused, pause, resume
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
from .controls.type_timeouts import clear_type_timeout, get_type_timeout, get_types, set_type_timeout
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

__all__ = [
    "Job",
    "JobInfo",
    "accept",
    "accept_many",
    "add",
    "add_many",
    "NewJob",
    "clear_type_timeout",
    "finish",
    "finish_many",
    "read_ahead",
    "get_active_jobs_ids",
    "get_job",
    "get_job_data",
    "get_job_state",
    "get_jobs",
    "get_run_info",
    "get_times",
    "get_type_timeout",
    "get_types",
    "is_held",
    "is_paused",
    "is_resubmitted",
    "pause",
    "pending_count",
    "release",
    "remove",
    "resubmit",
    "resume",
    "set_type_timeout",
    "update",
]
