"""A processor's lanes: ``concurrency`` threads, each running one job at a time.

A lane takes a run from the feed, calls its handler (a sync one on the lane itself,
interruptible, see ``interrupt.py``; an async one in the event loop) and hands what it
returned to ``Outcomes``.  A lane in which an interrupt was raised retires; the
processor's event loop starts a fresh one in its place (:meth:`Lanes.replace_retired`).
"""

from __future__ import annotations

import logging
import math
import threading
import time

import anyio
import anyio.from_thread

from . import tracing
from .context import AsyncContext, Context
from .errors import TimeLimitExceeded
from .handlers import Handler
from .interrupt import Interruptible
from .run import Run
from .timelimits import Deadlines

log = logging.getLogger("processors")


class Lanes:
    """The lane threads of one serve: they run the runs of ``feed`` with ``handlers`` (by
    type), write outcomes through ``outcomes``, and drop each run from ``held`` unless its
    outcome was queued.  ``token``: the event loop's, for async handlers."""

    def __init__(self, concurrency: int, *, feed, handlers: dict[str, Handler], outcomes, held, stats, token):
        self._feed = feed
        self._handlers = handlers
        self._outcomes = outcomes
        self._finishes = outcomes.finishes
        self._held = held
        self._stats = stats
        self._token = token
        self._deadlines = Deadlines()  # (time limits: its thread starts at the first)
        self._threads = [self._start(i) for i in range(concurrency)]

    def replace_retired(self) -> None:
        """Start a fresh thread for each lane that retired after an interrupt."""
        for i, thread in enumerate(self._threads):
            if not thread.is_alive():
                self._threads[i] = self._start(i)

    def alive(self) -> bool:
        return any(thread.is_alive() for thread in self._threads)

    def _start(self, number: int) -> threading.Thread:
        thread = threading.Thread(target=self._lane, name=f"lane-{number}", daemon=True)
        thread.start()
        return thread

    def _lane(self) -> None:
        """One lane: take a run, execute it, until stopping (or an interrupt retires it)."""
        lane = Interruptible()
        feed = self._feed
        while not lane.interrupted:
            run = feed.take()
            if run is None:
                return
            self._execute(run, lane)
            # Nothing prefetched left: this lane's next accept writes the outcomes, unless
            # another lane's accept waits for jobs: then commit them now.  (An accept still
            # in its transaction leaves them to the next one, FINISH_DELAY at most.)
            if self._finishes.due(now=feed.empty() and feed.waiting):
                self._finishes.flush(wait=False)

    def _execute(self, run: Run, lane: Interruptible) -> None:
        """Run one job's handler on this lane and queue (or write) its outcome, inside the
        run's span when tracing (``tracing.py``)."""
        with tracing.running(run):
            self._execute_run(run, lane)

    def _execute_run(self, run: Run, lane: Interruptible) -> None:
        handler = self._handlers[run.job.type]
        queued = False
        try:
            if not run.state.start():  # lost (or handed back) before its handler started
                self._stats["halted"] += 1
                tracing.outcome("halted")
                return
            if run.job.lost is not None and run.job.lost.count >= handler.max_lost:
                self._outcomes.give_up(run, handler)  # a poison job: running it would kill this worker too
                return
            began = time.monotonic()
            returned = self._call(run, handler, lane)
            if returned is None:  # halted or handed back: nothing more is written
                self._stats["halted"] += 1
                tracing.outcome("halted")
                return
            self._feed.ran(time.monotonic() - began)
            queued = self._outcomes.complete(run, handler, *returned)
        except Exception as exc:  # noqa: BLE001 - never let one job kill the loop
            log.exception("job %s/%s: writing its outcome failed; its type timeout will re-enqueue it",
                          run.job.type, run.job.id)
            self._stats["errors"] += 1
            tracing.outcome("error", exc)
        finally:
            if not queued:
                self._held.drop(run)

    def _call(self, run: Run, handler: Handler, lane: Interruptible):
        """Call the handler: ``(result, error)``, or None if an async one was cancelled.
        A run over the handler's ``time_limit`` ends with ``TimeLimitExceeded``, whatever
        the handler did after it was interrupted."""
        if handler.is_async:
            returned = anyio.from_thread.run(self._call_async, run, handler, token=self._token)
        else:
            stopper = lane.start()
            deadline = None
            if handler.time_limit is not None:
                deadline = self._deadlines.arm(handler.time_limit,
                                               lambda: self._over_limit(run, handler, stopper))
            try:
                with run.state.stoppable(stopper if handler.interrupt else None):
                    returned = lane.run(lambda: handler.fn(Context(run)))
            finally:
                if deadline is not None:
                    deadline.disarm()
        if returned is not None and run.over_limit is not None and not run.state.halted.is_set():
            returned = None, _over_limit_error(run, returned[1])
        return returned

    @staticmethod
    def _over_limit(run: Run, handler: Handler, stopper) -> None:
        """(The deadlines thread.)  The sync handler ran past its time limit: interrupt it
        (if it may be), and have its job's data say so while it has not returned."""
        if run.state.halted.is_set():
            return
        run.exceed(handler.time_limit)
        if handler.interrupt:
            stopper(TimeLimitExceeded)

    async def _call_async(self, run: Run, handler: Handler):
        """An async handler, in the event loop: ``(result, error)``, None if cancelled
        (a run cancelled at its time limit: ``TimeLimitExceeded``)."""
        limit = handler.time_limit
        deadline = math.inf if limit is None else anyio.current_time() + limit
        with anyio.CancelScope(deadline=deadline) as scope, run.state.stoppable(scope.cancel):
            try:
                return await handler.fn(AsyncContext(run)), None
            except Exception as exc:  # noqa: BLE001 - user code: recorded
                return None, exc
        if limit is not None and not run.state.halted.is_set() and anyio.current_time() >= deadline:
            run.exceed(limit)
            return None, _over_limit_error(run, None)
        return None

    def close(self) -> None:
        """The processor stopped: end the time limits' thread."""
        self._deadlines.close()


def _over_limit_error(run: Run, raised: BaseException | None) -> TimeLimitExceeded:
    """The error of a run over its time limit (with the traceback of where its handler was
    interrupted, when it was)."""
    error = TimeLimitExceeded(f"job {run.job.type}/{run.job.id}: the run exceeded its time limit of "
                              f"{run.over_limit:g} s")
    if raised is not None:
        error = error.with_traceback(raised.__traceback__)
        if not isinstance(raised, TimeLimitExceeded):
            error.__context__ = raised
    return error
