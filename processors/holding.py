"""The jobs a processor holds: the registry of their runs, the heartbeats that renew them,
and the watcher that notices at once the ones taken away.

A heartbeat renews every held job each third of its type timeout (``BEATS_PER_TIMEOUT``);
a job found lost (``Halt``) is halted: its handler is cancelled or interrupted and nothing
more is written.  Heartbeats alone would notice that a type timeout late at worst, so the
watcher also waits on the activity watch of the held jobs' types (every job change stamps
it) and re-checks them when it fires.
"""

from __future__ import annotations

import logging
import threading
import time

import anyio
import anyio.to_thread

import jobs
from jobs import Halt
from jobs.queue import activity
from jobs.indexes import wakeups
from jobs.engine import run as run_transaction

from .run import Run

log = logging.getLogger("processors")

BEATS_PER_TIMEOUT = 3  # heartbeats per type timeout: two may be late before the job is lost
TIMEOUT_REFRESH = 10.0  # seconds between re-reads of the type timeouts (jobsctl set-timeout)
# Least time between two checks of the held jobs (a rate limit under load), and how long
# a job is held before the checks look at it.
LOST_CHECK = 0.05
# Longest wait of the lost-job watcher between two looks (idle: for a job to be held; busy:
# for a change of the held jobs' types).  ``Held.wake`` ends it at once (the processor
# stops): its thread is one the event loop must wait for before it can return.
WATCH_WAIT = 1.0


class Held:
    """The runs a processor holds, by (type, id): added when their jobs are accepted,
    dropped once their outcome is written, they are handed back, or their lane is done
    with them.  Lanes, the group commit and the event loop all change it."""

    def __init__(self):
        self._runs: dict[tuple[str, str], Run] = {}
        self._added = threading.Event()  # set by add() and wake(): wakes the lost-job watcher
        self._closed = False  # wake() was called: the watcher waits no more

    def add(self, runs: list[Run]) -> None:
        for run in runs:
            self._runs[(run.job.type, run.job.id)] = run
        self._added.set()

    def wake(self) -> None:
        """End the lost-job watcher's wait now, and any it begins later (the processor
        stops; any thread)."""
        self._closed = True
        self._added.set()

    def reopen(self) -> None:
        """(A processor serving again after a stop.)  The watcher waits again."""
        self._closed = False
        self._added = threading.Event()

    def drop(self, run: Run) -> None:
        self._runs.pop((run.job.type, run.job.id), None)

    def __len__(self) -> int:
        return len(self._runs)

    def runs(self) -> list[Run]:
        """A snapshot (other threads add and drop meanwhile)."""
        return list(self._runs.values())

    def wait_added(self, timeout: float) -> None:
        """Wait until runs are added (``timeout`` seconds at most)."""
        self._added.wait(timeout)
        if not self._closed:
            self._added.clear()

    def on_added(self) -> threading.Event:
        """A fresh event that the next :meth:`add` (or :meth:`wake`) sets."""
        self._added = threading.Event()
        if self._closed:
            self._added.set()
        return self._added


async def heartbeats(held: Held, refresh_timeouts) -> None:
    """Renew each held job when its next beat is due; ``refresh_timeouts()`` (blocking)
    re-reads the type timeouts every ``TIMEOUT_REFRESH`` seconds."""
    refreshed = time.monotonic()
    while True:
        now = time.monotonic()
        if now - refreshed >= TIMEOUT_REFRESH:
            refreshed = now
            try:
                await anyio.to_thread.run_sync(refresh_timeouts)
            except Exception:  # noqa: BLE001 - keep the last known timeouts
                log.exception("reading the type timeouts failed")
        for run in held.runs():
            if run.state.active and run.next_beat <= now:
                await _beat(run)
        next_beat = min((r.next_beat for r in held.runs()), default=now + 1.0)
        await anyio.sleep(min(1.0, max(0.01, next_beat - time.monotonic())))


async def _beat(run: Run) -> None:
    try:
        await anyio.to_thread.run_sync(run.update, None)
    except Halt:  # (run.update halted it)
        _lost(run)
    except Exception:  # noqa: BLE001 - a failed heartbeat is retried at the next tick
        log.exception("heartbeat of %s/%s failed", run.job.type, run.job.id)
        run.beat_in(min(1.0, run.beat_every))


async def watch_lost(db, held: Held) -> None:
    """Halt the handlers of jobs that were removed or re-enqueued as soon as that
    happens, not at their next heartbeat: the activity watches of each type of the held
    jobs (every job change stamps one), re-checking the held jobs at most every LOST_CHECK s
    (a job held for LOST_CHECK at least: one taken away is halted within 2 x LOST_CHECK of
    being held, and at once after that)."""
    while True:
        lost = await anyio.to_thread.run_sync(_lost_jobs, db, held)
        for run in lost:
            if run.state.take_away():  # (our own finish: not lost)
                _lost(run)
        await anyio.sleep(LOST_CHECK)


def _lost_jobs(db, held: Held) -> list[Run]:
    """Block until a type of a held job changes (``WATCH_WAIT`` at most; ``held.wake()``
    ends it); the held jobs that are no longer held then.  Never raises: a failed check is
    tried again.

    Only jobs held for ``LOST_CHECK`` already are checked: the next look, ``LOST_CHECK``
    on, checks those still held, as soon as the rate limit lets it check anything.  A
    processor of short jobs (``prefetch=1`` runs one a millisecond) would otherwise run a
    check, and set the watches that wake its watch thread at every commit, for jobs done
    before a removal could matter."""
    now = time.monotonic()
    active = [r for r in held.runs() if r.state.active]
    if not active:
        held.wait_added(WATCH_WAIT)
        return []
    runs = [r for r in active if now - r.held_since >= LOST_CHECK]
    if not runs:
        return []
    wake = held.on_added()

    def check(tr):
        with jobs.read_ahead(tr, [r.job for r in runs]):  # (one round trip for them all)
            lost = [r for r in runs if not jobs.is_held(tr, r.job)]
        return lost, [activity.watch(tr, t) for t in {r.job.type for r in runs}]

    try:
        lost, watches = run_transaction(db, check)
    except Exception:  # noqa: BLE001 - heartbeats still catch lost jobs
        log.exception("checking the held jobs failed")
        time.sleep(1.0)  # not a busy loop while the store is failing
        return []
    wakeups.sleep_until_any(watches, wake, 0 if lost else WATCH_WAIT)
    return lost


def _lost(run: Run) -> None:
    """A held job was taken away (removed or re-enqueued): say so and stop its handler."""
    log.warning("job %s/%s was taken away (removed or re-enqueued): stopping its handler", run.job.type, run.job.id)
    run.state.stop_handler()
