"""Distributed operations over the partitions of a table (the Ignite seed's approved design,
on the job queue).

An operation runs on a table and consists of one job per partition, run in parallel by
any processor; when every job succeeded, or one failed, or the operation was cancelled, a
coordinator completes it.  The seed's roles map onto the queue:

* executors are processors: a partition job is a queue job of type ``op.<type>``, so a
  job whose processor dies is re-enqueued by the activity monitor and run elsewhere, and a
  resumable job resumes from the progress it saved in its job data (``ctx.save_progress``);
* the coordinator is a queue job too (type ``op.<type>.complete``), enqueued by the
  transaction that records the last job outcome (or the cancel): at most one processor
  holds it at a time, another takes over if it dies, and the operation's state changes
  only in the transaction that finishes it, fenced by its lock.  The operation's hooks
  (``complete_operation``, ``cancel_job_and_cleanup``) get that transaction: what they
  write commits with the final state, or not at all (a coordinator that lost its lock
  commits nothing).  They may run more than once (a retried transaction, a coordinator
  that stalled, then was replaced), so they only write through ``tr``; files they no
  longer want go to the pipeline's trash, deleted after a grace period.

State, changed only by transactions with the seed's conditions (key layout)::

    ("ops", table, "run")                        -> JSON [{type, instance, concurrent, compatible_with}]
    ("ops", table, type, "next")                 -> next instance id (JSON int)
    ("ops", table, type, instance, "op")         -> JSON {state, arg, partitions, started, ended}
    ("ops", table, type, instance, "job", part)  -> JSON {state: success|failed, result, at}
    ("ops", None, "layout")                      -> (LAYOUT.version,)  tuple-packed

Operation states: running -> success | failed, or running -> cancelling -> cancelled.
"""

from .handlers import COORDINATOR_RETRY
from .kinds import JobContext, JobFailed, Operation
from .manager import OperationNotFound, OperationRefused, Operations, OperationStatus
from .state import FINAL, LAYOUT, WORKER, coordinator_type, job_id, partition_type

__all__ = [
    "COORDINATOR_RETRY",
    "FINAL",
    "LAYOUT",
    "WORKER",
    "JobContext",
    "JobFailed",
    "Operation",
    "OperationNotFound",
    "OperationRefused",
    "OperationStatus",
    "Operations",
    "coordinator_type",
    "job_id",
    "partition_type",
]
