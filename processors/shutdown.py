"""A processor's shutdown: running handlers get a grace period; the jobs still held then
are handed back to pending at once (``jobs.release``) and their handlers stopped.
"""

from __future__ import annotations

import logging
import threading
import time

import anyio
import anyio.to_thread

import jobs
from jobs import Halt

from .run import Run

log = logging.getLogger("processors")

STOP_WAIT = 10.0  # how long a stopping processor waits for halted sync handlers to return
TICK = 0.05  # how often the event loop looks at stop(), dead lanes and late outcomes


async def shut_down(db, held, finishes, lanes, stats, *, grace: float, hurry: threading.Event) -> None:
    """Let started handlers end within ``grace`` seconds (none once ``hurry`` is set),
    write their outcomes, hand back the rest of ``held`` (started or only prefetched),
    and wait for the ``lanes`` to end.  The feed must be stopped already."""
    deadline = time.monotonic() + grace
    while not hurry.is_set() and time.monotonic() < deadline and any(
        r.state.started and not r.state.finishing for r in held.runs()
    ):
        await anyio.sleep(TICK)
    await anyio.to_thread.run_sync(finishes.flush)
    for run in held.runs():
        released = await anyio.to_thread.run_sync(_hand_back, db, run)
        run.state.stop_handler()
        if released:
            stats["released"] += 1
    end = time.monotonic() + STOP_WAIT
    while lanes.alive() and time.monotonic() < end:
        await anyio.sleep(TICK)
    await anyio.to_thread.run_sync(finishes.flush)  # outcomes queued meanwhile
    for run in held.runs():
        if not run.state.started or run.state.halted.is_set():
            held.drop(run)
    if lanes.alive():  # e.g. blocked in C code: abandoned
        log.warning("handler(s) ignored the stop; their jobs were handed back")


def _hand_back(db, run: Run) -> bool:
    """Hand ``run``'s job back to pending; False if it was no longer ours, or its outcome
    is being written (which then goes ahead: a queued outcome is written instead)."""
    # under the run's lock: after a finish in flight, or before it (which then writes nothing)
    return run.state.take_away(then=lambda: _release_quietly(db, run.job))


def _release_quietly(db, job: jobs.Job) -> bool:
    """Hand ``job`` back to pending; False if it was no longer ours (nothing to hand back)."""
    try:
        jobs.release(db, job)
        return True
    except Halt:
        return False
