"""Async twins of the job API for anyio code (asyncio or trio).

Each twin runs the blocking call in a worker thread (``anyio.to_thread``) and is not
interrupted by cancellation while the call runs: the caller is cancelled once it returns,
so a commit's outcome is never left unknown by a cancellation.

``accept`` is built from the same core as ``jobs.accept`` (``accepting.AcceptCall``):
each attempt runs in a thread, shielded; waiting on the pending watch runs in a thread of
its own limiter (so that many waiting accepts never use up the default limiter that the
other twins need) and is abandoned at once on cancellation, which then cancels the watch.
A job accepted just as the task is cancelled is handed back to pending (``release``)
rather than left running until its type timeout.
"""

from __future__ import annotations

import functools
import math
import time

import anyio
import anyio.lowlevel
from anyio.lowlevel import RunVar
import anyio.to_thread

import jobs as api  # (the facade: this module's twins are of its calls)

from . import checks
from .controls import limits, retention
from .upkeep import pruning, repair
from .observe import subscriptions
from .queue.accepting import AcceptCall
from .errors import Halt
from .job import Job

__all__ = [
    "accept",
    "accept_many",
    "add",
    "add_many",
    "clear_limits",
    "clear_retention",
    "clear_type_timeout",
    "finish",
    "finish_many",
    "get_active_jobs_ids",
    "get_job",
    "get_job_data",
    "get_job_state",
    "get_jobs",
    "get_run_info",
    "get_times",
    "get_limits",
    "get_retention",
    "get_type_timeout",
    "get_types",
    "is_held",
    "is_paused",
    "is_resubmitted",
    "pause",
    "pending_count",
    "prune",
    "release",
    "remove",
    "remove_unreadable",
    "resubmit",
    "resume",
    "set_limits",
    "set_retention",
    "set_type_timeout",
    "subscribe",
    "unsubscribe",
    "update",
    "wait",
]

# Threads blocked on a pending watch: one per waiting accept, not bounded by the default
# limiter (40 threads), which the short calls of the other twins share.  One limiter per
# event loop, as anyio keeps its own default limiter.
_WAITERS: RunVar[anyio.CapacityLimiter] = RunVar("jobs_aio_accept_waiters")


def _waiters() -> anyio.CapacityLimiter:
    try:
        return _WAITERS.get()
    except LookupError:
        limiter = anyio.CapacityLimiter(math.inf)
        _WAITERS.set(limiter)
        return limiter


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
add_many = _twin(api.add_many)
remove = _twin(api.remove)
get_job_data = _twin(api.get_job_data)
get_job_state = _twin(api.get_job_state)
get_job = _twin(api.get_job)
get_jobs = _twin(api.get_jobs)
get_run_info = _twin(api.get_run_info)
get_times = _twin(api.get_times)
get_active_jobs_ids = _twin(api.get_active_jobs_ids)
pending_count = _twin(api.pending_count)
update = _twin(api.update)
finish = _twin(api.finish)
finish_many = _twin(api.finish_many)
resubmit = _twin(api.resubmit)
release = _twin(api.release)
is_held = _twin(api.is_held)
pause = _twin(api.pause)
resume = _twin(api.resume)
is_paused = _twin(api.is_paused)
is_resubmitted = api.is_resubmitted  # no I/O: the same function
subscribe = _twin(subscriptions.subscribe)
set_retention = _twin(retention.set_retention)
get_retention = _twin(retention.get_retention)
clear_retention = _twin(retention.clear_retention)
prune = _twin(pruning.prune)
remove_unreadable = _twin(repair.remove_unreadable)
set_limits = _twin(limits.set_limits)
get_limits = _twin(limits.get_limits)
clear_limits = _twin(limits.clear_limits)
unsubscribe = subscriptions.unsubscribe  # no I/O: the same function
WAIT_SLICE = 0.25  # longest thread wait of aio.wait, so a cancelled task stops soon


async def wait(subs, timeout: float | None, state: str | None = None):
    """Async :func:`jobs.wait`: waits in short thread slices (never abandoning a thread that
    may have taken an event), cancellable between slices."""
    timeout = checks.optional_seconds(timeout, "timeout")
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        left = WAIT_SLICE if deadline is None else max(0.0, min(WAIT_SLICE, deadline - time.monotonic()))
        with anyio.CancelScope(shield=True):
            event = await anyio.to_thread.run_sync(subscriptions.wait, subs, left, state, limiter=_waiters())
        if event is not None:
            return event
        await anyio.lowlevel.checkpoint()
        if deadline is not None and time.monotonic() >= deadline:
            return None
        many = subs if isinstance(subs, (list, tuple)) else [subs]
        if all(not s.active and not s._events for s in many):
            return None


async def accept(
    db,
    type: str,
    *,
    max_sched_time: float | None = None,
    no_schedule: bool = False,
    timeout: float | None = None,
) -> Job | None:
    """Async :func:`jobs.accept`: same arguments, result and errors; cancellable at any
    point without losing or stranding a job."""
    taken = await accept_many(db, type, 1, max_sched_time=max_sched_time, no_schedule=no_schedule, timeout=timeout)
    return taken[0] if taken else None


async def accept_many(
    db,
    type: str,
    limit: int,
    *,
    max_sched_time: float | None = None,
    no_schedule: bool = False,
    timeout: float | None = None,
) -> list[Job]:
    """Async :func:`jobs.accept_many`; cancellable like :func:`accept`."""
    call = AcceptCall(db, type, max_sched_time, no_schedule, timeout, limit)
    while True:
        with anyio.CancelScope(shield=True):  # an attempt's outcome must be seen
            out = await anyio.to_thread.run_sync(call.attempt)
        if isinstance(out, list):
            await _hand_back_if_cancelled(db, out)
            return out
        if out is None:
            continue
        if call.expired():
            out.watch.cancel()
            return []
        try:
            await anyio.to_thread.run_sync(call.wait, out, abandon_on_cancel=True, limiter=_waiters())
        finally:
            out.watch.cancel()  # wakes an abandoned wait; no effect on a watch that fired


async def _hand_back_if_cancelled(db, taken: list[Job]) -> None:
    """Re-raise a cancellation that arrived during the attempt, after releasing ``taken``."""
    try:
        await anyio.lowlevel.checkpoint_if_cancelled()
    except anyio.get_cancelled_exc_class():
        with anyio.CancelScope(shield=True):
            for job in taken:
                try:
                    await anyio.to_thread.run_sync(api.release, db, job)
                except Halt:  # already taken from us (removed): nothing to hand back
                    pass
        raise
