"""Task behaviors (the Polaris seed): how a handler's outcome becomes the job's next state.

The bookkeeping of a task lives in its job data, under one reserved key, so that it is
visible to ``jobsctl show`` and survives the worker::

    {...params...,
     "_task": {"attempts": 2,                       # failed attempts of the current run
               "last_error": {"type", "message", "traceback", "at"},
               "failed": true,                      # finished after its last attempt
               "runs": 5, "last_run": 1.7e9,        # recurring jobs only
               "last_result": {...},
               "over_time_limit": {"limit", "since"},  # the running handler is over its time_limit
               "trace": {"traceparent": ...}}}      # tracing.py: the submitter's trace context

Handlers see the params without ``_task`` (``ctx.data``).  A handler's result replaces the
data when the job finishes; a result may not use the reserved key.
"""

from __future__ import annotations

import math
import os
import random
import time
import traceback
from dataclasses import dataclass
from datetime import datetime, timezone

TASK_KEY = "_task"
TRACE = "trace"  # the key of the carried trace context in the bookkeeping (see tracing.py)
# The key of the mark a run over its handler's time_limit writes in the bookkeeping while
# its handler has not returned (a handler blocked in C code): {"limit": s, "since": t}.
# Only people read it: ``split`` leaves it out, so no outcome carries it on.
OVER_TIME_LIMIT = "over_time_limit"
EVERY_JOB_ID = "every"  # the id of the job a processor adds to start an every= handler's chain
TRACEBACK_LIMIT = 4000  # characters of traceback kept in the job data (the value limit is 100 kB)


@dataclass(frozen=True)
class Retry:
    """Retry policy of a job type: up to ``max_attempts`` runs in all; after failed attempt
    n the job waits ``backoff * 2**(n-1)`` seconds (at most ``max_backoff``), with up to
    ``jitter`` of it taken off at random so that failed jobs don't come back in lockstep."""

    max_attempts: int = 1
    backoff: float = 1.0
    max_backoff: float = 300.0
    jitter: float = 0.5

    def __post_init__(self):
        if not isinstance(self.max_attempts, int) or isinstance(self.max_attempts, bool) or self.max_attempts < 1:
            raise ValueError(f"Retry.max_attempts must be an int >= 1, not {self.max_attempts!r}")
        for name in ("backoff", "max_backoff"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
                raise ValueError(f"Retry.{name} must be a finite number of seconds >= 0, not {value!r}")
        if not isinstance(self.jitter, (int, float)) or not 0 <= self.jitter <= 1:
            raise ValueError(f"Retry.jitter must be between 0 and 1, not {self.jitter!r}")

    def delay(self, attempts: int) -> float:
        """Seconds to wait after the ``attempts``-th failed attempt."""
        base = min(self.max_backoff, self.backoff * 2 ** min(attempts - 1, 64))
        return base * (1 - self.jitter * random.random())


def as_retry(value) -> Retry:
    """``retry=`` of a handler: a Retry, an int (max attempts, default backoff) or None."""
    if value is None:
        return Retry()
    if isinstance(value, Retry):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return Retry(max_attempts=value)
    raise TypeError(f"retry must be a processors.Retry or an int (max attempts), not {type(value).__name__}")


def split(data: dict) -> tuple[dict, dict]:
    """(params, bookkeeping) of a job's data."""
    task = data.get(TASK_KEY)
    if not isinstance(task, dict):
        return data, {}
    if OVER_TIME_LIMIT in task:
        task = {k: v for k, v in task.items() if k != OVER_TIME_LIMIT}
    return {k: v for k, v in data.items() if k != TASK_KEY}, task


def error_info(exc: BaseException) -> dict:
    """A JSON record of a handler's exception; its traceback starts at the handler's own
    frames (:func:`user_traceback`)."""
    tb = "".join(traceback.format_exception(type(exc), exc, user_traceback(exc)))
    return {
        "type": type(exc).__qualname__,
        "message": str(exc)[:TRACEBACK_LIMIT],
        "traceback": tb[-TRACEBACK_LIMIT:],
        "at": time.time(),
    }


_OWN = os.path.dirname(os.path.abspath(__file__))  # this package's modules (not its subpackages)


def _own(tb) -> bool:
    return os.path.dirname(os.path.abspath(tb.tb_frame.f_code.co_filename)) == _OWN


def user_traceback(exc: BaseException):
    """``exc``'s traceback from the first frame that is not the processors' own run
    machinery (lanes, interrupts, outcomes: the frames above the handler), so that what a
    user reads starts at the handler; the whole of it when every frame is ours (an error
    of the machinery itself, e.g. a bad result)."""
    tb = exc.__traceback__
    while tb is not None and _own(tb):
        tb = tb.tb_next
    return exc.__traceback__ if tb is None else tb


@dataclass(frozen=True)
class Outcome:
    """What to write for a run that ended: finish with ``data``, and make the job pending
    again at ``again_at`` (None: it stays finished; as failed, with the reason ``failed``
    when that is not empty).  ``failed`` with ``again_at``: the run failed and the job runs
    again (a retry, or a recurring job's next run), counted as retried, not finished."""

    data: dict | None
    again_at: float | None = None
    failed: str = ""


def after_success(data: dict, result: dict | None, every: float | None, cron: bool = False) -> Outcome:
    """A run returned ``result``: it becomes the job's data (None keeps the data); a
    recurring job keeps its params, with the result noted, and runs again ``every`` s on
    (a ``cron`` one at its next tick, which its schedule enqueues)."""
    if every is None and not cron:
        if result is None and TRACE in split(data)[1]:  # the data is kept: not the trace context
            return Outcome(_untraced(data))
        return Outcome(result)
    params, task = split(data)
    return Outcome(_recurring(params, task, {"last_result": result}), _again(every))


def after_failure(data: dict, exc: BaseException, retry: Retry, every: float | None, cron: bool = False) -> Outcome:
    """A run raised ``exc``: retried after a backoff while attempts are left; else finished
    with the error recorded (a recurring job runs again at its next time instead: ``every``
    s on, or a ``cron`` one at its next tick)."""
    params, task = split(data)
    attempts = int(task.get("attempts", 0)) + 1
    error = error_info(exc)
    reason = f"{error['type']}: {error['message']}".splitlines()[0]
    if attempts < retry.max_attempts:
        task = {**task, "attempts": attempts, "last_error": error}
        return Outcome({**params, TASK_KEY: task}, time.time() + retry.delay(attempts), failed=reason)
    if every is not None or cron:
        return Outcome(_recurring(params, task, {"last_error": error, "failed": True}), _again(every), failed=reason)
    return Outcome({**params, TASK_KEY: {**task, "attempts": attempts, "last_error": error, "failed": True}},
                   failed=reason)


LAST_ATTEMPT = Retry(max_attempts=1)  # after_failure's policy for a run that is not retried


def lost_error(lost) -> str:
    """The reason a job whose run lost ``lost.count`` workers is failed (``lost``: a
    ``jobs.codec.Lost``)."""
    at = datetime.fromtimestamp(lost.at, timezone.utc).isoformat(timespec="seconds")
    return f"worker lost {lost.count} times; last worker {lost.worker or 'unknown'} at {at}"


def retried(data: dict) -> dict:
    """The data of a failed job run again by an operator: its params, with the failed
    run's bookkeeping dropped (attempts start over) but a recurring job's count and the
    carried trace context kept."""
    params, task = split(data)
    keep = {k: task[k] for k in ("runs", "last_run", TRACE) if k in task}
    return {**params, TASK_KEY: keep} if keep else params


def _again(every: float | None) -> float | None:
    """When a recurring job runs again: ``every`` s on; None for a cron job (its schedule
    enqueues its next tick)."""
    return None if every is None else time.time() + every


def _untraced(data: dict) -> dict:
    """``data`` without the carried trace context (and without an emptied bookkeeping)."""
    params, task = split(data)
    rest = {k: v for k, v in task.items() if k != TRACE}
    return {**params, TASK_KEY: rest} if rest else params


def _recurring(params: dict, task: dict, outcome: dict) -> dict:
    """Params of the next run of a recurring job, with this run noted (attempts reset; the
    carried trace context dropped: each later run starts a trace of its own)."""
    runs = int(task.get("runs", 0)) + 1
    return {**params, TASK_KEY: {"runs": runs, "last_run": time.time(), **outcome}}


def failed(data: dict) -> dict | None:
    """The error a finished job's data records as final, or None if it succeeded."""
    _params, task = split(data)
    if task.get("failed"):
        return task.get("last_error") or {"type": "Error", "message": "failed"}
    return None
