"""The counters' upkeep, a duty of the monitor's (``duty.py``) beside the activity monitor:
clear the counters nothing reads any more, so that they stay bounded by time, not by the
jobs that ever ran: per type, the per-minute rates older than an hour (``jobs.indexes.rates``)
and the job counters' past seconds and minutes that add up to nothing (``jobs.indexes.counts``).
A pass a minute; several over one store are harmless (each clear re-reads what it clears).
"""

from __future__ import annotations

import time

import jobs
from jobs.indexes import counts, rates
from jobs.engine import run

from .batching import Failures
from .duty import Duty

INTERVAL = 60.0  # seconds between passes: the counters are per minute (seconds: ten minutes kept)


class CounterPruner(Duty):
    """Prunes the counters of the types of ``types`` (None: every type) of store ``db``.
    ``start()``/``stop()``, ``serve()``: as the activity monitor's; ``check()``: one pass."""

    name = "counters upkeep"

    def __init__(self, db, types: list[str] | None = None):
        super().__init__()
        self.db = db
        self.types = None if types is None else list(types)

    def interval(self) -> float:
        return INTERVAL

    def check(self) -> None:
        """Prune every type's counters; a type that fails does not hold the others up (its
        error is raised once the pass went through them all)."""
        failures = Failures("counters upkeep")
        for type in self.types if self.types is not None else jobs.get_types(self.db):
            failures.catch(type, self._prune, type)
        failures.raise_any()

    def _prune(self, type: str) -> None:
        run(self.db, rates.prune, type, time.time())
        run(self.db, counts.prune, type, time.time())
