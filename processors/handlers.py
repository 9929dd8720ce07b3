"""A registered handler: the function a processor calls for jobs of one type, and how."""

from __future__ import annotations

from dataclasses import dataclass

from jobs.controls.cron import Cron

from . import behaviors

MAX_LOST = 3  # lost workers after which a job is failed rather than run again (a poison job)


@dataclass(frozen=True)
class Handler:
    """A registered handler and its type's behavior."""

    type: str
    fn: object
    timeout: float | None
    retry: behaviors.Retry
    every: float | None
    interrupt: bool
    is_async: bool
    max_lost: int = MAX_LOST
    on_lost: object = None  # fn(ctx, reason) run instead of the handler once max_lost is reached
    cron: Cron | None = None  # run at each tick of this schedule (jobs/upkeep/schedules.py)
    time_limit: float | None = None  # seconds a run may take before it is interrupted (failed)
