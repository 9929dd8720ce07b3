"""The worker loop: accept jobs of the registered types, run their handlers, heartbeat,
finish, retry or reschedule; hand jobs back on shutdown.

    processor = Processor(jobs.open())

    @processor.handler("resize", timeout=30, retry=Retry(max_attempts=5))
    def resize(ctx):
        ...
        ctx.update({"done": 10})          # progress (renews the job)
        return {"size": 42}                # the finished job's data

    processor.run(concurrency=4)           # until SIGTERM/SIGINT or processor.stop()

Shape of a running processor:

* ``concurrency`` lanes (threads, ``lanes.py``) each run one job at a time: they take
  jobs from the feed (``feed.py``: batches accepted in one transaction, sized to what the
  lanes run soon), call the handler (a sync one on the lane itself, interruptible; an
  async one in the event loop), and write its outcome (``outcomes.py``), mostly through a
  group commit (``finishes.py``: finish, with a resubmission for retries and recurring
  jobs; many jobs per transaction, each fenced);
* an anyio event loop runs the rest: heartbeats renew every held job each third of its
  type timeout, and a watcher notices lost jobs at once (``holding.py``: a lost job is
  halted, its handler cancelled or interrupted, nothing more written); the activity
  monitor for the registered types re-enqueues jobs of dead workers, and retention and
  the counters' upkeep run beside it (``monitor/``); and the processor's
  entry in the workers registry is renewed every ``worker_heartbeat`` seconds
  (``registration.py``: ``jobsctl workers`` lists the live ones).

Each held job is a ``Run`` (``run.py``), whose state all of these change only through
its transitions.

Shutdown (``stop()``, SIGTERM or SIGINT; ``shutdown.py``): no more accepts; running
handlers get ``grace`` seconds; jobs still held then are handed back to pending at once
(``jobs.release``), and their handlers stopped.  A second signal skips the grace period.
"""

from __future__ import annotations

import collections
import inspect
import logging
import math
import signal
import threading

import anyio
import anyio.lowlevel
import anyio.to_thread

import jobs
from jobs import checks
from jobs.upkeep import schedules
from jobs.controls.cron import DEFAULT_TZ, Cron
from jobs.engine import describe_store, run as run_transaction
from monitor import duties as monitor_duties

from . import behaviors
from .feed import Feed
from .finishes import ROW_BYTES, TRANSACTION_ROWS
from .handlers import MAX_LOST, Handler
from .holding import BEATS_PER_TIMEOUT, LOST_CHECK, TIMEOUT_REFRESH, Held, heartbeats, watch_lost
from .lanes import Lanes
from .outcomes import Outcomes
from .registration import HEARTBEAT, Registration
from .run import Run
from .shutdown import STOP_WAIT, TICK, shut_down
from .submit import TaskFuture, submit

log = logging.getLogger("processors")

PREFETCH = 64  # most jobs accepted in one transaction (see feed.py)
CRON_POLL = 1.0  # seconds between two looks for due cron ticks (each a read-only transaction)

# Also named here, where they were first; each is read in the module that defines it
# (handlers, holding, shutdown), so that is the module to patch.
__all__ = ["BEATS_PER_TIMEOUT", "LOST_CHECK", "MAX_LOST", "PREFETCH", "STOP_WAIT", "TICK", "TIMEOUT_REFRESH",
           "Handler", "Processor"]


class Processor:
    """Runs handlers for job types of store ``db``.

    ``monitor``: also run the activity monitor, retention and the counters' upkeep for
    the registered types (several over one store are harmless).  ``grace``: seconds
    running handlers get at shutdown before their jobs are handed back.  ``prefetch``: most jobs accepted in one
    transaction (fewer when jobs are long; 1: one job at a time; at most
    ``finishes.TRANSACTION_ROWS``).  ``worker_heartbeat``:
    seconds between two renewals of its entry in the workers registry (``jobs.observe.workers``:
    it drops out after ``jobs.observe.workers.stale_bound`` of that without one).  ``stats``
    counts what happened (accepted, succeeded, retried, failed, halted, released, errors;
    accept_batches: accept transactions that took jobs; accept_empty: those that took none
    (nothing due, or only outcomes written); accept_rearms: the transactions that then set
    the watch of one that only wrote outcomes (or took a job that came meanwhile: a
    watch may not go in a transaction that writes); accept_retries: accept attempts
    retried; accept_conflicts: of them, lost to another worker that took a picked job
    first; watch_turns: turns to watch for new jobs this processor held, as the idle
    processor of its machine that an add wakes: ``turns.py``; outcomes_deferred: waits
    for jobs that held the outcomes queued to share a commit with the next ones, jobs
    coming one at a time but soon: ``feed.py``)."""

    def __init__(self, db, *, monitor: bool = True, grace: float = 30.0, prefetch: int = PREFETCH,
                 worker_heartbeat: float = HEARTBEAT):
        self.db = db
        self.monitor = monitor
        self.grace = checks.seconds(grace, "grace")
        if isinstance(prefetch, bool) or not isinstance(prefetch, int) or not 1 <= prefetch <= TRANSACTION_ROWS:
            raise ValueError(f"prefetch must be an int from 1 to {TRANSACTION_ROWS} (a batch's rows, "
                             f"{ROW_BYTES:,} bytes each at most, fit one transaction), not {prefetch!r}")
        self.prefetch = prefetch
        self.stats: collections.Counter = collections.Counter()
        self._handlers: dict[str, Handler] = {}
        self._beat_every: dict[str, float] = {}
        self._held = Held()  # the runs holding a job
        self.registration = Registration(db, self._held, checks.seconds(worker_heartbeat, "worker_heartbeat",
                                                                         positive=True))
        self._outcomes = Outcomes(db, self._held, self.stats)
        self._stopping = threading.Event()
        self._hurry = threading.Event()  # skip the grace period
        self._feed: Feed | None = None
        self._serving = False
        self.ready = threading.Event()  # set while serving: timeouts declared, accepting
        self._declared = False  # the handlers' type timeouts were written to the store
        self._periodic: list[tuple[float, object, object]] = []  # (seconds, fn, stop) of periodic()

    # --- registration --------------------------------------------------------------------

    def handler(self, type: str, *, timeout: float | None = None, retry=None, every: float | None = None,
                interrupt: bool = True, max_lost: int = MAX_LOST, on_lost=None, cron: str | None = None,
                tz: str | None = None, time_limit: float | None = None):
        """Register the decorated function (sync or async; it gets a Context) for jobs of
        ``type``.  ``timeout``: the heartbeat timeout (the type timeout) in seconds: how
        long a worker may go silent (dead, or stuck without heartbeating) before its job is
        re-enqueued; the processor heartbeats running jobs on its own, so it does not bound
        how long a handler runs (``time_limit`` does).  Set in the store when the processor
        starts (None: use the one already set).  ``time_limit``: seconds one run may take
        (a positive number; None: no limit); a run that exceeds it is interrupted (a sync
        handler at its next Python bytecode, an async one cancelled) and counts as a
        failed attempt with ``TimeLimitExceeded``, retried by ``retry``; until a handler
        blocked in C code returns, its job's data says so (``_task.over_time_limit``, seen
        in ``jobsctl show``).  ``retry``: a Retry or a number of attempts (default: one
        attempt).  ``every``: a recurring job, run again that many seconds after each run:
        the processor starts its chain as it starts (the job ``"every"``, unless a job of
        the type is pending or running already), one chain per type (a job of the type
        added by hand under another id runs once, unless it takes the chain over: the
        pending or running job of the smallest id keeps it).  ``interrupt=False``: a sync
        handler is never interrupted when its job is lost, only told (``ctx.halted``), nor
        at its ``time_limit`` (the run still counts as failed when it returns).
        ``max_lost``: a job whose run lost that many workers (killed, or silent for a type timeout: the
        activity monitor counts them) is not run again but finished failed, as after its
        last attempt, with ``worker lost N times; last worker HOST/PID at TIME``;
        ``on_lost(ctx, reason)``, if given, runs then instead of the handler (sync, on a
        lane; its ``ctx.on_commit`` writes commit with the failed finish).  ``cron``: run the
        type's job ``jobs.upkeep.schedules.JOB_ID`` at each tick of this cron expression in IANA
        zone ``tz`` (default UTC), each tick once however many processors run (the schedule
        is written to the store when the processor starts: see ``jobs/upkeep/schedules.py``)."""
        checks.name(type, "type")
        if type in self._handlers:
            raise ValueError(f"a handler for type {type!r} is already registered")
        timeout = checks.optional_seconds(timeout, "timeout")
        if timeout == 0:
            raise ValueError("timeout must be more than 0 seconds")
        every = checks.optional_seconds(every, "every")
        time_limit = _time_limit(time_limit)
        schedule = _cron(cron, tz, every)
        retry = behaviors.as_retry(retry)
        if isinstance(max_lost, bool) or not isinstance(max_lost, int) or max_lost < 1:
            raise ValueError(f"max_lost must be an int >= 1, not {max_lost!r}")
        if on_lost is not None and not callable(on_lost):
            raise TypeError(f"on_lost for {type!r} must be callable")

        def register(fn):
            if not callable(fn):
                raise TypeError(f"handler for {type!r} must be callable")
            is_async = inspect.iscoroutinefunction(fn)
            self._handlers[type] = Handler(type, fn, timeout, retry, every, bool(interrupt), is_async, max_lost,
                                           on_lost, schedule, time_limit)
            self._declared = False
            return fn

        return register

    def periodic(self, seconds: float, fn, *, stop=None) -> None:
        """Call ``fn()`` every ``seconds`` while this processor serves (the first time as it
        starts), and ``stop()``, if given, once it has stopped: a duty of this process, such
        as the heartbeat that keeps a registration alive (a recurring job, ``every=``, is a
        duty of the store that any one processor runs).  Both run in a worker thread; an
        exception is logged, and ``fn`` is called again at the next tick."""
        seconds = checks.seconds(seconds, "seconds", positive=True)
        if not callable(fn) or (stop is not None and not callable(stop)):
            raise TypeError("periodic() takes a callable fn, and a callable stop or None")
        self._periodic.append((seconds, fn, stop))

    @property
    def types(self) -> list[str]:
        return sorted(self._handlers)

    def submit(self, type: str, params: dict | None = None, **kwargs) -> TaskFuture:
        """:func:`processors.submit` on this processor's store (declaring the type
        timeouts of its handlers first, so that it works before the processor started)."""
        if not self._declared:
            self._declare_timeouts()
        return submit(self.db, type, params, **kwargs)

    # --- running -------------------------------------------------------------------------

    def run(self, concurrency: int = 1, *, signals: bool = True) -> None:
        """Run until ``stop()`` or, with ``signals`` (main thread only), SIGTERM/SIGINT."""
        try:
            anyio.run(self._run_with_signals, concurrency, signals)
        except BaseExceptionGroup as group:
            raise _sole(group) from None
        finally:  # (serve unregisters; unless interrupted before it could)
            self.registration.stop()

    async def _run_with_signals(self, concurrency: int, signals: bool) -> None:
        async with anyio.create_task_group() as tg:
            if signals and threading.current_thread() is threading.main_thread():
                await tg.start(self._watch_signals)
            await self.serve(concurrency)
            tg.cancel_scope.cancel()

    async def _watch_signals(self, *, task_status=anyio.TASK_STATUS_IGNORED) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as received:
            task_status.started()
            async for signum in received:
                if self._stopping.is_set():
                    log.warning("second %s: handing running jobs back now", signal.Signals(signum).name)
                    self._hurry.set()
                else:
                    log.info("%s: stopping (grace %.1f s)", signal.Signals(signum).name, self.grace)
                self.stop()

    def stop(self) -> None:
        """Stop gracefully (thread-safe; from a signal handler too): accept nothing more,
        let running handlers finish within the grace period, hand back the rest."""
        self._stopping.set()
        self._held.wake()  # (the lost-job watcher's wait, in a thread the loop must join)
        if self._feed is not None:
            self._feed.stop()

    async def serve(self, concurrency: int = 1) -> None:
        """The anyio form of :meth:`run`: returns after ``stop()``.  Cancelling it hands
        the jobs it holds back at once."""
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ValueError(f"concurrency must be an int >= 1, not {concurrency!r}")
        if not self._handlers:
            raise ValueError("no handlers registered: decorate a function with @processor.handler(type)")
        if self._serving:
            raise RuntimeError("this processor is already running")
        self._serving = True
        self._stopping.clear()
        self._hurry.clear()
        self._held.reopen()
        try:
            await anyio.to_thread.run_sync(self._prepare)
            await anyio.to_thread.run_sync(self.registration.start, self.types, concurrency)
            self.ready.set()
            async with anyio.create_task_group() as tg:
                if self.monitor:  # (the store's duties, for its types)
                    for duty in monitor_duties(self.db, self.types):
                        tg.start_soon(duty.serve)
                tg.start_soon(heartbeats, self._held, self._refresh_timeouts)
                tg.start_soon(watch_lost, self.db, self._held)
                for seconds, fn, stop in self._duties():
                    tg.start_soon(self._run_periodic, seconds, fn, stop)
                await self._supervise(concurrency)
                tg.cancel_scope.cancel()
        except BaseExceptionGroup as group:  # one failure: raise it as itself
            raise _sole(group) from None
        finally:
            self.ready.clear()
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(self.registration.stop)
            self._serving = False
            self._feed = None

    def _prepare(self) -> None:
        """Set the declared type timeouts (every type must have one), then the schedules."""
        self._declare_timeouts()
        self._refresh_timeouts()
        run_transaction(self.db, self._declare_schedules)

    def _declare_schedules(self, tr) -> None:
        """Write each cron handler's schedule; drop the schedule of a type whose handler has
        none now (an expression changed or removed takes effect as the processor starts);
        start the chain of each ``every=`` handler whose type has no pending or running job
        (the job ``behaviors.EVERY_JOB_ID``, due now: one chain however many processors
        start, and none more while a job added by hand runs the chain)."""
        for h in self._handlers.values():
            if h.cron is None:
                schedules.clear_schedule(tr, h.type)
            else:
                schedules.set_schedule(tr, h.type, h.cron.expression, h.cron.tz)
            if h.every is not None and not any(j.state in ("pending", "running")
                                               for j in jobs.get_jobs(tr, h.type, unreadable=[])):
                jobs.add(tr, h.type, behaviors.EVERY_JOB_ID, {})

    def _duties(self) -> list[tuple[float, object, object]]:
        """periodic() duties, the registration's heartbeat, and enqueueing the due ticks of
        the cron types."""
        duties = [*self._periodic, (self.registration.interval, self.registration.beat, None)]
        timed = [h.type for h in self._handlers.values() if h.cron is not None]
        if timed:
            duties.append((CRON_POLL, lambda: schedules.enqueue_due(self.db, timed), None))
        return duties

    def _declare_timeouts(self) -> None:
        def body(tr):
            for h in self._handlers.values():
                if h.timeout is not None:
                    jobs.set_type_timeout(tr, h.type, h.timeout)

        run_transaction(self.db, body)
        self._declared = True

    def _refresh_timeouts(self) -> None:
        for type in self._handlers:
            timeout = jobs.get_type_timeout(self.db, type)
            if timeout is None:
                raise jobs.NoTypeTimeout(
                    f"type {type!r} has no timeout in {describe_store(self.db)}: pass timeout= to "
                    "@processor.handler or run `jobsctl set-timeout`"
                )
            self._beat_every[type] = timeout / BEATS_PER_TIMEOUT

    # --- lanes --------------------------------------------------------------------------

    async def _supervise(self, concurrency: int) -> None:
        """Run the lanes until stop() (replacing any that retired), then shut down."""
        finishes = self._outcomes.finishes
        self._feed = feed = Feed(self.db, self.types, concurrency, self.prefetch, hold=self._hold,
                                 in_hand=self._held.__len__, finishes=finishes, stopping=self._stopping, stats=self.stats)
        if self._stopping.is_set():  # stop() came before the feed existed
            feed.stop()
        lanes = Lanes(concurrency, feed=feed, handlers=self._handlers, outcomes=self._outcomes, held=self._held,
                      stats=self.stats, token=anyio.lowlevel.current_token())
        try:
            while not self._stopping.is_set() and feed.fatal is None:
                await anyio.sleep(TICK)
                lanes.replace_retired()
                if finishes.due(now=False):  # outcomes waiting while every lane is busy
                    await anyio.to_thread.run_sync(finishes.flush, False)
        except anyio.get_cancelled_exc_class():
            self._hurry.set()  # cancelled: no grace period
            raise
        finally:
            with anyio.CancelScope(shield=True):
                self.stop()
                await shut_down(self.db, self._held, finishes, lanes, self.stats, grace=self.grace,
                                hurry=self._hurry)
                lanes.close()
        if feed.fatal is not None:
            raise feed.fatal

    def _hold(self, taken: list) -> list[Run]:
        """Accepted jobs become held runs (heartbeated, handed back at shutdown)."""
        runs = [Run(self.db, job, self._beat_every[job.type]) for job in taken]
        self._held.add(runs)  # (the lost-job watcher looks at them too)
        self.stats["accepted"] += len(runs)
        return runs

    # --- periodic duties ----------------------------------------------------------------

    async def _run_periodic(self, seconds: float, fn, stop) -> None:
        """One periodic() duty, until the task group is cancelled (the processor stopped)."""
        try:
            while True:
                try:
                    await anyio.to_thread.run_sync(fn)
                except Exception:  # noqa: BLE001 - called again at the next tick
                    log.exception("periodic %r failed; calling it again in %.3g s", fn, seconds)
                await anyio.sleep(seconds)
        finally:
            if stop is not None:
                with anyio.CancelScope(shield=True):
                    try:
                        await anyio.to_thread.run_sync(stop)
                    except Exception:  # noqa: BLE001 - stopping goes on
                        log.exception("stopping periodic %r failed", fn)


def _time_limit(value) -> float | None:
    """``time_limit=`` of a handler: None, or a positive finite number of seconds."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"time_limit must be a positive number of seconds (or None: no limit), not {value!r}")
    return float(value)


def _cron(cron: str | None, tz: str | None, every: float | None) -> Cron | None:
    """``cron=`` and ``tz=`` of a handler, checked (ValueError names what is wrong)."""
    if cron is None:
        if tz is not None:
            raise ValueError("tz= is the time zone of a cron= schedule: give cron= too")
        return None
    if every is not None:
        raise ValueError("cron= and every= both say when a job runs again: give one of them")
    return Cron(cron, DEFAULT_TZ if tz is None else tz)


def _sole(group: BaseExceptionGroup) -> BaseException:
    """The one exception inside nested task-group wrappers (else the group itself)."""
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc
