"""The two values the API hands out: a worker's :class:`Job` and a creator's :class:`JobInfo`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from .codec import Lost


@dataclass(frozen=True, slots=True)
class Job:
    """A job held by a worker: returned by ``accept``, renewed by ``update``.

    ``lock`` fences every write made with it (``update``/``finish`` raise Halt once the job
    carries another lock or none); ``store`` is the id of the store it was accepted from.
    ``resubmitted``: the job was flagged to run again, as of this Job's last update.
    ``lost``: the workers this run of the job lost before (count, last worker, when), as of
    its accept; None when none was lost.  ``priority`` and ``scheduled_time``: the band
    and the time it was pending at, as of its accept (the order a batch runs in)."""

    type: str
    id: str
    data: dict
    lock: bytes = field(repr=False)
    store: bytes | None = field(repr=False)
    resubmitted: bool = False
    lost: Lost | None = None
    priority: int = field(default=0, repr=False, compare=False)
    scheduled_time: float = field(default=0.0, repr=False, compare=False)


class JobInfo(NamedTuple):
    """A job as ``get_job``/``get_jobs`` see it (state "pending", "running" or "finished";
    ``scheduled_time`` in seconds since the epoch, 0 for as soon as possible; ``priority``:
    its band, lower first; ``key``: its job key, None for none)."""

    type: str
    id: str
    state: str
    data: dict
    scheduled_time: float
    priority: int = 0
    key: str | None = None


class RunInfo(NamedTuple):
    """What the store knows of a job's current run beyond :class:`JobInfo` (``get_run_info``):
    ``worker``: ``"host/pid"`` of the process that last accepted it (None: never, or not
    since it was last made pending); ``lost``: the workers the run lost (count, last worker,
    when), None if none; ``failed``: ``(at, reason)`` when it finished failed
    (``finish(..., failed=...)``), None unless it is failed now."""

    worker: str | None
    lost: Lost | None
    failed: tuple[float, str | None] | None


class JobTimes(NamedTuple):
    """When things happened to a job (``get_times``), seconds since the epoch, None when
    not known: ``enqueued``, when its pending entry was written (pending jobs; the
    enqueuer's clock); ``started``, when the accept of its current run (running) or last
    run (finished) drew its lock (the accepting machine's clock); ``last_activity``, its
    last accept or update (running jobs; from its versionstamp's age, approximate);
    ``finished``, when it finished (failed jobs, and any finished job of a type with a
    retention: the finished index; the finisher's clock)."""

    enqueued: float | None
    started: float | None
    last_activity: float | None
    finished: float | None
