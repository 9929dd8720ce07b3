"""Retention, a duty of the monitor's (``duty.py``) beside the activity monitor: per type
with a retention (``jobs.controls.retention``), remove finished jobs kept longer than it, oldest
first (see below), in bounded amounts, however many jobs are due (the rest go at the next
passes).

A pass comes every ``INTERVAL`` seconds; one that leaves jobs due (``behind``) makes the
next come after ``CATCH_UP_INTERVAL`` and prune up to ``CATCH_UP`` times as many jobs (for
``PASS_SECONDS`` at most).  A bound per pass once a second alone removed 1,000 jobs a second at most, so a
type finishing more than that for good grew without end (``bench.soak``: 753,000 of a
million jobs kept, with a retention of one second).  While catching up, each batch starts
at a random point among the due jobs (``Pruner._prune_kind``): the monitors of four
worker processes taking the same oldest batch kept conflicting (``bench.soak
--processes 4``: 49,934 of 400,000 jobs kept, 3,441 now).

Each pass per type: one page of the backfill (jobs finished before the type had a
retention) until the store records it done (then one read),
then at most :data:`PER_PASS` jobs of each kind,
:data:`jobs.upkeep.pruning.BATCH` per transaction.  Several monitors may prune the same type at
once: each removal re-reads its job, so a job is removed once and nothing else is touched.
"""

from __future__ import annotations

import random
import time

from jobs.upkeep import pruning
from jobs.engine import run
from jobs.queue.finished import KINDS, backfill
from jobs.controls.retention import retentions

from .batching import Failures, Unreadable
from .duty import Duty

INTERVAL = 1.0  # seconds between passes: retention periods are minutes to days
CATCH_UP_INTERVAL = 0.05  # seconds after a pass that left jobs due
PER_PASS = 1_000  # jobs of one kind of one type removed per pass, at most
CATCH_UP = 5  # times PER_PASS a pass removes while the last one left jobs due
PASS_SECONDS = 0.5  # a pass that has pruned this long stops after its batch
_clock = time.monotonic
_random = random.random


class Pruner(Duty):
    """Prunes the types of ``types`` (None: every type with a retention) of store ``db``;
    ``removed`` counts the jobs it removed.  ``start()``/``stop()``, ``serve()``: as the
    activity monitor's; ``check()`` (or ``prune()``): one pass."""

    name = "retention"

    def __init__(self, db, types: list[str] | None = None, per_pass: int = PER_PASS, batch: int = pruning.BATCH,
                 unreadable: Unreadable | None = None):
        super().__init__()
        self.db, self.types = db, types
        self.unreadable = Unreadable() if unreadable is None else unreadable  # jobs passed over
        self.per_pass, self.batch = per_pass, batch
        self.removed = 0
        self.behind = False  # the last pass left jobs due: the next one comes sooner and prunes more

    def interval(self) -> float:
        return CATCH_UP_INTERVAL if self.behind else INTERVAL

    def check(self) -> int:
        return self.prune()

    def prune(self) -> int:
        """One pass; returns how many jobs it removed."""
        began = _clock()
        bound = self.per_pass * (CATCH_UP if self.behind else 1)
        periods = run(self.db, retentions)
        failures = Failures("retention")
        total, behind = 0, False
        for type, retention in sorted(periods.items()):
            if self.types is None or type in self.types:
                done, more = failures.catch(type, self._prune_type, type, retention, bound, began) or (0, False)
                total, behind = total + done, behind or more
        self.removed += total
        self.behind = behind
        failures.raise_any()
        return total

    def _prune_type(self, type: str, retention, bound: int, began: float) -> tuple[int, bool]:
        """One type's share of a pass: how many jobs it removed, and whether more may be due."""
        passed_over: list = []
        run(self.db, backfill, type, pruning.BACKFILL_PAGE, passed_over)  # (set_retention may start it over)
        self.unreadable.say(passed_over, "pruned")
        now, total, behind = time.time(), 0, False
        for kind in KINDS:
            period = retention.period(kind)
            if period is not None:
                done, more = self._prune_kind(type, kind, now - period, bound, began + PASS_SECONDS)
                total, behind = total + done, behind or more
        return total, behind

    def _prune_kind(self, type: str, kind: str, up_to: float, bound: int, until: float) -> tuple[int, bool]:
        """At most ``bound`` jobs, in about that many entries looked at (stale entries,
        left by jobs changed since, are dropped and count against the bound too), and no
        batch begun after ``until`` (monotonic); how many were removed, and whether more
        may be due.  Catching up (``behind``), each batch starts at a random point among
        the due entries: monitors that all took the oldest ones would conflict, and one
        that followed another's batches would catch it up and conflict from then on."""
        done, start, from_oldest = 0, 0, not self.behind
        while start < bound:
            spread = None if from_oldest else _random()
            passed_over: list = []
            ids, more = pruning.prune_page(self.db, type, kind, up_to, min(self.batch, bound - start), spread,
                                           passed_over)
            self.unreadable.say(passed_over, "pruned")
            done += len(ids)
            if not more:
                if spread is None:
                    return done, False
                start += len(ids)  # (a short batch from a random point: the older entries next, at once)
                from_oldest = True
                continue
            start, from_oldest = start + self.batch, not self.behind
            if _clock() >= until:
                break
        return done, True
