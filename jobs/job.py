"""The two values the API hands out: a worker's :class:`Job` and a creator's :class:`JobInfo`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple


@dataclass(frozen=True, slots=True)
class Job:
    """A job held by a worker: returned by ``accept``, renewed by ``update``.

    ``lock`` fences every write made with it (``update``/``finish`` raise Halt once the job
    carries another lock or none); ``store`` is the id of the store it was accepted from.
    ``resubmitted``: the job was flagged to run again, as of this Job's last update."""

    type: str
    id: str
    data: dict
    lock: bytes = field(repr=False)
    store: bytes | None = field(repr=False)
    resubmitted: bool = False


class JobInfo(NamedTuple):
    """A job as ``get_job``/``get_jobs`` see it (state "pending", "running" or "finished";
    ``scheduled_time`` in seconds since the epoch, 0 for as soon as possible)."""

    type: str
    id: str
    state: str
    data: dict
    scheduled_time: float
