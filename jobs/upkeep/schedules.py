"""Cron schedules: a job of a type run at each tick of a cron expression (``cron.py``).

One record per type, ``("jobs", "schedules", Type) = (cron, tz, last)``, where ``last`` is
the last tick enqueued (or the time the schedule was set: ticks start after it), and one
job per type, id :data:`JOB_ID`, that each tick makes pending again.

How each tick is enqueued exactly once, however many processes tick: :func:`enqueue_due`
reads the record (a conflicting read), and if the latest tick at or before now is after
``last``, writes ``last = tick`` and makes the job pending, in one transaction.  That is a
compare-and-set: of two processes that saw the same ``last``, one commits and the other
conflicts, retries, and finds the tick enqueued; a retry after ``commit_unknown_result``
does the same.  The job then runs once, as any job: accepted by one worker, finished with
its lock.  Consequences, by design:

* ticks missed while no process ticked (a restart, a queue too busy to start the job) are
  coalesced: the latest due tick is enqueued, once; a restart shorter than the period
  misses none;
* a tick due while the previous run still runs flags the job to run again when it ends
  (``resubmit``); one due while the job still waits moves it to the new tick;
* :func:`set_schedule` with another expression or zone replaces the record, and ticks
  start after that moment (the old schedule's ticks no longer come); :func:`clear_schedule`
  removes it.

``now`` is the clock every function here reads: tests replace it to step across ticks.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from .. import checks, keys
from ..calls import within_store
from ..controls.cron import Cron, DEFAULT_TZ
from ..engine import describe_store, tuple as fdb_tuple, value_of
from ..errors import NoTypeTimeout, StoreError
from ..queue.creator import add
from ..queue.reading import get_job
from ..queue.rows import get as get_row
from ..queue.worker import resubmit

JOB_ID = "cron"  # the id of a type's scheduled job


def now() -> float:
    """The schedules' clock (seconds since the epoch)."""
    return time.time()


@dataclass(frozen=True)
class Schedule:
    """A type's schedule: its cron ``expression`` in zone ``tz``, the ``last`` tick
    enqueued (or when the schedule was set) and the ``next`` one to come (as of ``now()``:
    if it is past, no process has enqueued it yet)."""

    type: str
    expression: str
    tz: str
    last: float
    next: float | None


def set_schedule(tr, type: str, expression: str, tz: str = DEFAULT_TZ) -> bool:
    """Run jobs of ``type`` (the job :data:`JOB_ID`, data ``{}``) at each tick of the cron
    ``expression`` in IANA zone ``tz``, from now on; processes that call
    :func:`enqueue_due` for the type enqueue the ticks.  Idempotent: the same expression
    and zone again writes nothing (and keeps ``last``, so a missed tick still comes); another
    one replaces the schedule.  True if it wrote.  ValueError for a bad expression, zone or
    type; NoTypeTimeout when the type has no timeout."""
    checks.name(type, "type", new=True)
    cron = Cron(expression, tz)
    at = now()

    def body(tr):
        if not tr.get(keys.timeout_key(type)).wait().present():
            raise NoTypeTimeout(f"job type {type!r} has no timeout in {describe_store(tr)}: set one before scheduling it")
        found = _record(tr, type)
        if found is not None and found[0] == cron:
            return False
        _put(tr, type, cron, at)
        return True

    return within_store(tr, body)


def clear_schedule(tr, type: str) -> bool:
    """Stop scheduling ``type`` (its job is left as it is: a pending tick still runs).
    True if it had a schedule."""
    checks.name(type, "type")

    def body(tr):
        if _record(tr, type) is None:
            return False
        tr.clear(keys.schedule_key(type))
        return True

    return within_store(tr, body)


def get_schedule(tr, type: str) -> Schedule | None:
    """The type's schedule, or None."""
    checks.name(type, "type")
    at = now()

    def body(tr):
        found = _record(tr, type)
        return None if found is None else _schedule(type, *found, at)

    return within_store(tr, body)


def get_schedules(tr) -> list[Schedule]:
    """Every schedule, by type (a snapshot read)."""
    r = keys.SCHEDULES.range()
    at = now()

    def body(tr):
        return [_schedule(keys.SCHEDULES.unpack(k)[0], *_decode(v), at)
                for k, v in tr.snapshot.get_range(r.start, r.stop)]

    return within_store(tr, body)


def enqueue_due(tr, types: list[str]) -> list[tuple[str, float]]:
    """Enqueue the due tick of each of ``types`` that has a schedule (see the module's
    docstring): ``(type, tick)`` of those this call enqueued.  Read-only when none is due.
    Safe to retry after ``commit_unknown_result``: the tick is enqueued once."""
    for type in types:
        checks.name(type, "type")
    at = now()

    def body(tr):
        enqueued = []
        for type in types:
            found = _record(tr, type)
            if found is None:
                continue
            cron, last = found
            tick = cron.latest(at)
            if tick is None or tick <= last:
                continue
            _put(tr, type, cron, tick)
            # due by the schedules' clock; min(): due by the queue's (time.time) as well
            _make_pending(tr, type, min(tick, time.time()))
            enqueued.append((type, tick))
        return enqueued

    return within_store(tr, body)


def _make_pending(tr, type: str, stime: float) -> None:
    """The scheduled job pending at ``stime`` (a running one: flagged to run again then),
    its data kept (a recurring task's bookkeeping)."""
    if get_row(tr, type, JOB_ID) is None:
        add(tr, type, JOB_ID, {}, scheduled_time=stime)
    else:
        resubmit(tr, get_job(tr, type, JOB_ID), scheduled_time=stime)


def _schedule(type: str, cron: Cron, last: float, at: float) -> Schedule:
    due = cron.latest(at)
    upcoming = due if due is not None and due > last else cron.after(max(last, at))
    return Schedule(type, cron.expression, cron.tz, last, upcoming)


def _record(tr, type: str) -> tuple[Cron, float] | None:
    raw = value_of(tr.get(keys.schedule_key(type)))
    return None if raw is None else _decode(raw)


def _decode(raw: bytes) -> tuple[Cron, float]:
    try:
        expression, tz, last = fdb_tuple.unpack(raw)
        return Cron(expression, tz), float(last)
    except (ValueError, TypeError) as exc:  # written by a newer cron library, or corrupt
        raise StoreError(f"a cron schedule in the store cannot be read ({exc}): set it again") from exc


def _put(tr, type: str, cron: Cron, last: float) -> None:
    tr.set(keys.schedule_key(type), fdb_tuple.pack((cron.expression, cron.tz, float(last))))
