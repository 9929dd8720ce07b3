"""The garbage collector as a recurring job: the trash emptied without anyone calling
:func:`pipeline.collect_garbage` by hand.

    collector.attach(processor, grace=600, every=60)   # pipeline.runtime.processor does it

Every processor that attaches it can run the job, but there is one job per store (type
``pipeline.gc``, id ``trash``: a deterministic id), so one processor collects per tick
however many run; the job runs again ``every`` seconds after each run.  Each run deletes
the locations trashed more than ``grace`` seconds ago: a reader that looked a partition up
before it was dropped or replaced has that long to finish reading it.  ``grace`` and
``every`` belong to the processor that runs the tick: give every processor the same ones.
Each run also forgets expired ingest worker registrations (``ingest.forget_expired_workers``),
which would otherwise pile up as worker processes come and go.

By hand: ``pipeline.collect_garbage(db, grace=...)``, or ``jobsctl gc [--grace SECONDS]``.
"""

from __future__ import annotations

import jobs
from jobs import checks

from . import ingest
from .catalog import collect_garbage

__all__ = ["DEFAULT_EVERY", "DEFAULT_GRACE", "JOB_ID", "JOB_TYPE", "attach", "schedule"]

JOB_TYPE = "pipeline.gc"
JOB_ID = "trash"
DEFAULT_GRACE = 600.0  # seconds trashed data stays readable
DEFAULT_EVERY = 60.0  # seconds between two runs
TIMEOUT = 60.0  # type timeout of the job (the processor heartbeats it while it deletes)


def attach(processor, *, grace: float = DEFAULT_GRACE, every: float = DEFAULT_EVERY) -> None:
    """Make ``processor`` run the collector job (deleting what was trashed more than
    ``grace`` seconds ago, every ``every`` seconds), and make sure the job exists."""
    grace = checks.seconds(grace, "grace")
    every = checks.seconds(every, "every", positive=True)
    db = processor.db

    @processor.handler(JOB_TYPE, timeout=TIMEOUT, every=every)
    def collect(ctx):
        deleted = collect_garbage(db, grace=grace)
        forgotten = ingest.forget_expired_workers(db)
        return {"deleted": len(deleted), "grace": grace, "workers_forgotten": len(forgotten)}

    schedule(db)


@jobs.transactional
def schedule(tr) -> None:
    """Add the collector job unless it is pending or running (re-adding would move a
    pending job's time, or flag a running one for resubmission); a finished one (removed by
    hand, or failed for good) is enqueued again.  Idempotent."""
    if jobs.get_type_timeout(tr, JOB_TYPE) is None:
        jobs.set_type_timeout(tr, JOB_TYPE, TIMEOUT)
    try:
        state = jobs.get_job_state(tr, JOB_TYPE, JOB_ID)
    except jobs.NotFound:
        state = None
    if state in (None, "finished"):
        jobs.add(tr, JOB_TYPE, JOB_ID, {})
