"""Async twins of the job API for anyio (asyncio or trio) code.

The blocking calls run in worker threads.  ``accept`` waits in short slices so that a
cancelled task stops within a fraction of a second, and a job accepted just as the task is
cancelled is handed back to pending (``release``) rather than left running until its type
timeout.
"""

from __future__ import annotations

import functools
import math
import time

import anyio
import anyio.lowlevel
import anyio.to_thread

from . import api
from .api import Job, is_resubmitted

SLICE = 0.25  # longest blocking wait inside one thread call of accept()

__all__ = [
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
    "pending_count",
    "release",
    "remove",
    "resubmit",
    "set_type_timeout",
    "update",
]


def _twin(fn):
    @functools.wraps(fn)
    async def twin(*args, **kwargs):
        return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs))

    twin.__doc__ = f"Async twin of :func:`jobs.{fn.__name__}`.\n\n{fn.__doc__ or ''}"
    return twin


set_type_timeout = _twin(api.set_type_timeout)
get_type_timeout = _twin(api.get_type_timeout)
clear_type_timeout = _twin(api.clear_type_timeout)
get_types = _twin(api.get_types)
add = _twin(api.add)
remove = _twin(api.remove)
get_job_data = _twin(api.get_job_data)
get_job_state = _twin(api.get_job_state)
get_job = _twin(api.get_job)
get_jobs = _twin(api.get_jobs)
get_active_jobs_ids = _twin(api.get_active_jobs_ids)
pending_count = _twin(api.pending_count)
update = _twin(api.update)
finish = _twin(api.finish)
resubmit = _twin(api.resubmit)
release = _twin(api.release)


async def accept(
    db,
    type: str,
    *,
    max_sched_time: float | None = None,
    no_schedule: bool = False,
    timeout: float | None = None,
) -> Job | None:
    """Async :func:`jobs.accept`: same arguments and result; cancellable."""
    if timeout is not None and not math.isinf(timeout):
        api._seconds(timeout, "timeout")
        deadline = time.monotonic() + timeout
    else:
        deadline = None
    while True:
        wait = SLICE if deadline is None else max(0.0, min(SLICE, deadline - time.monotonic()))
        call = functools.partial(
            api.accept, db, type, max_sched_time=max_sched_time, no_schedule=no_schedule, timeout=wait
        )
        with anyio.CancelScope(shield=True):  # never drop a job accepted in the thread
            job = await anyio.to_thread.run_sync(call)
        try:
            await anyio.lowlevel.checkpoint_if_cancelled()
        except anyio.get_cancelled_exc_class():
            if job is not None:
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(api.release, db, job)
            raise
        if job is not None or (deadline is not None and time.monotonic() >= deadline):
            return job

