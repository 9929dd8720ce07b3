"""Worker loops and task behaviors on the job layer (distributed partition operations and
the Spark pipeline build on them).

    processor = processors.Processor(jobs.open())

    @processor.handler("email", timeout=30, retry=processors.Retry(max_attempts=5))
    def send(ctx):
        return {"sent": deliver(ctx.data["to"])}

    processor.run(concurrency=4)                          # a worker process
    processors.submit(db, "email", {"to": "a@b"}).result()   # a client, anywhere
"""

from .behaviors import Retry
from .context import AsyncContext, Context
from .errors import NotFailed, TaskFailed, TimeLimitExceeded, WorkerLost
from .failures import FailedJob, discard_failed, failed_jobs, retry_all_failed, retry_failed
from .interrupt import Interrupted
from .processor import Processor
from .submit import TaskFuture, asubmit, submit, task_id

__all__ = [
    "AsyncContext",
    "Context",
    "FailedJob",
    "Interrupted",
    "NotFailed",
    "Processor",
    "Retry",
    "TaskFailed",
    "TaskFuture",
    "TimeLimitExceeded",
    "WorkerLost",
    "asubmit",
    "discard_failed",
    "failed_jobs",
    "retry_all_failed",
    "retry_failed",
    "submit",
    "task_id",
]
