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

* ``concurrency`` lanes (threads) each run one job at a time: they take jobs from the
  feed (``feed.py``: batches accepted in one transaction, sized to what the lanes run
  soon), call the handler (a sync one on the lane itself, interruptible; an async one in
  the event loop), and queue its outcome for a group commit (``finishes.py``: finish, with
  a resubmission for retries and recurring jobs; many jobs per transaction, each fenced);
* an anyio event loop runs the rest: a heartbeat task renews every held job each third of
  its type timeout; a job found lost (``Halt``) is halted: its handler is cancelled or
  interrupted and nothing more is written; a watcher notices lost jobs at once; the
  activity monitor for the registered types re-enqueues jobs of dead workers.

Shutdown (``stop()``, SIGTERM or SIGINT): no more accepts; running handlers get ``grace``
seconds; jobs still held then are handed back to pending at once (``jobs.release``), and
their handlers stopped.  A second signal skips the grace period.
"""

from __future__ import annotations

import collections
import inspect
import logging
import signal
import threading
import time
from dataclasses import dataclass

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread

import jobs
from jobs import Halt, checks, keys
from jobs.codec import encode_data
from jobs.engine import error_code
from jobs.engine.transactional import run as run_transaction
from jobs.engine.transactional import watch
from monitor import ActivityMonitor

from . import behaviors
from .context import AsyncContext, Context
from .errors import WorkerLost
from .feed import Feed
from .finishes import Finishes
from .interrupt import Interruptible
from .run import Run
from .submit import TaskFuture, submit

log = logging.getLogger("processors")

BEATS_PER_TIMEOUT = 3  # heartbeats per type timeout: two may be late before the job is lost
TIMEOUT_REFRESH = 10.0  # seconds between re-reads of the type timeouts (jobs set-timeout)
STOP_WAIT = 10.0  # how long a stopping processor waits for halted sync handlers to return
LOST_CHECK = 0.05  # least time between two checks of the held jobs (rate limit under load)
TICK = 0.05  # how often the event loop looks at stop(), dead lanes and late outcomes
PREFETCH = 32  # most jobs accepted in one transaction (see feed.py)
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


class Processor:
    """Runs handlers for job types of store ``db``.

    ``monitor``: also run the activity monitor for the registered types (several monitors
    over one store are harmless).  ``grace``: seconds running handlers get at shutdown
    before their jobs are handed back.  ``prefetch``: most jobs accepted in one
    transaction (fewer when jobs are long; 1: one job at a time).  ``stats`` counts what
    happened (accepted, succeeded, retried, failed, halted, released, errors)."""

    def __init__(self, db, *, monitor: bool = True, grace: float = 30.0, prefetch: int = PREFETCH):
        self.db = db
        self.monitor = monitor
        self.grace = checks.seconds(grace, "grace")
        if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 1:
            raise ValueError(f"prefetch must be an int >= 1, not {prefetch!r}")
        self.prefetch = prefetch
        self.stats: collections.Counter = collections.Counter()
        self._handlers: dict[str, Handler] = {}
        self._beat_every: dict[str, float] = {}
        self._running: dict[tuple[str, str], Run] = {}  # (type, id) -> the run holding it
        self._stopping = threading.Event()
        self._new_run = threading.Event()  # wakes the lost-job watcher
        self._hurry = threading.Event()  # skip the grace period
        self._feed: Feed | None = None
        self._finishes = Finishes(db, written=self._written, failed=self._write_failed)
        self._serving = False
        self.ready = threading.Event()  # set while serving: timeouts declared, accepting
        self._declared = False  # the handlers' type timeouts were written to the store
        self._periodic: list[tuple[float, object, object]] = []  # (seconds, fn, stop) of periodic()

    # --- registration --------------------------------------------------------------------

    def handler(self, type: str, *, timeout: float | None = None, retry=None, every: float | None = None,
                interrupt: bool = True, max_lost: int = MAX_LOST, on_lost=None):
        """Register the decorated function (sync or async; it gets a Context) for jobs of
        ``type``.  ``timeout``: the type timeout in seconds, set in the store when the
        processor starts (None: use the one already set).  ``retry``: a Retry or a number
        of attempts (default: one attempt).  ``every``: a recurring job, run again that
        many seconds after each run.  ``interrupt=False``: a sync handler is never
        interrupted when its job is lost, only told (``ctx.halted``).  ``max_lost``: a
        job whose run lost that many workers (killed, or silent for a type timeout: the
        activity monitor counts them) is not run again but finished failed, as after its
        last attempt, with ``worker lost N times; last worker HOST/PID at TIME``;
        ``on_lost(ctx, reason)``, if given, runs then instead of the handler (sync, on a
        lane; its ``ctx.on_commit`` writes commit with the failed finish)."""
        checks.name(type, "type")
        if type in self._handlers:
            raise ValueError(f"a handler for type {type!r} is already registered")
        timeout = checks.optional_seconds(timeout, "timeout")
        if timeout == 0:
            raise ValueError("timeout must be more than 0 seconds")
        every = checks.optional_seconds(every, "every")
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
                                           on_lost)
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
        try:
            await anyio.to_thread.run_sync(self._prepare)
            self.ready.set()
            async with anyio.create_task_group() as tg:
                if self.monitor:
                    tg.start_soon(ActivityMonitor(self.db, self.types).serve)
                tg.start_soon(self._heartbeats)
                tg.start_soon(self._watch_lost)
                for seconds, fn, stop in self._periodic:
                    tg.start_soon(self._run_periodic, seconds, fn, stop)
                await self._supervise(concurrency)
                tg.cancel_scope.cancel()
        except BaseExceptionGroup as group:  # one failure: raise it as itself
            raise _sole(group) from None
        finally:
            self.ready.clear()
            self._serving = False
            self._feed = None

    def _prepare(self) -> None:
        """Set the declared type timeouts; every type must have one."""
        self._declare_timeouts()
        self._refresh_timeouts()

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
                    f"type {type!r} has no timeout: pass timeout= to @processor.handler or run `jobs set-timeout`"
                )
            self._beat_every[type] = timeout / BEATS_PER_TIMEOUT

    # --- lanes --------------------------------------------------------------------------

    async def _supervise(self, concurrency: int) -> None:
        """Run the lanes until stop() (replacing any that retired), then shut down."""
        self._token = anyio.lowlevel.current_token()
        self._feed = feed = Feed(self.db, self.types, concurrency, self.prefetch, hold=self._hold,
                                 finishes=self._finishes, stopping=self._stopping, stats=self.stats)
        if self._stopping.is_set():  # stop() came before the feed existed
            feed.stop()
        lanes = [self._start_lane(i) for i in range(concurrency)]
        try:
            while not self._stopping.is_set() and feed.fatal is None:
                await anyio.sleep(TICK)
                for i, lane in enumerate(lanes):
                    if not lane.is_alive():  # retired after an interrupt: a fresh thread
                        lanes[i] = self._start_lane(i)
                if self._finishes.due(now=False):  # outcomes waiting while every lane is busy
                    await anyio.to_thread.run_sync(self._finishes.flush, False)
        except anyio.get_cancelled_exc_class():
            self._hurry.set()  # cancelled: no grace period
            raise
        finally:
            with anyio.CancelScope(shield=True):
                await self._shut_down(lanes)
        if feed.fatal is not None:
            raise feed.fatal

    def _start_lane(self, number: int) -> threading.Thread:
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
            # another lane is accepting (it may be waiting for jobs): then commit them now.
            if self._finishes.due(now=feed.empty() and feed.accepting):
                self._finishes.flush(wait=False)

    def _hold(self, taken: list) -> list[Run]:
        """Accepted jobs become held runs (heartbeated, handed back at shutdown)."""
        runs = []
        for job in taken:
            run = Run(self.db, job, self._beat_every[job.type])
            self._running[(job.type, job.id)] = run
            runs.append(run)
        self.stats["accepted"] += len(runs)
        self._new_run.set()  # the lost-job watcher looks at them too
        return runs

    # --- running one job -----------------------------------------------------------------

    def _execute(self, run: Run, lane: Interruptible) -> None:
        """Run one job's handler on this lane and queue (or write) its outcome."""
        job = run.job
        handler = self._handlers[job.type]
        key = (job.type, job.id)
        queued = False
        try:
            if not run.state.start():  # lost (or handed back) before its handler started
                self.stats["halted"] += 1
                return
            if run.job.lost is not None and run.job.lost.count >= handler.max_lost:
                self._give_up(run, handler)  # a poison job: running it would kill this worker too
                return
            began = time.monotonic()
            if handler.is_async:
                result, error, cancelled = anyio.from_thread.run(self._call_async, run, handler, token=self._token)
                if cancelled:  # halted or handed back: nothing more is written
                    self.stats["halted"] += 1
                    return
            else:
                stopper = lane.start()
                with run.state.stoppable(stopper if handler.interrupt else None):
                    result, error = lane.run(lambda: handler.fn(Context(run)))
            self._feed.ran(time.monotonic() - began)
            queued = self._complete(run, handler, result, error)
        except Exception:  # noqa: BLE001 - never let one job kill the loop
            log.exception("job %s/%s: writing its outcome failed; its type timeout will re-enqueue it", *key)
            self.stats["errors"] += 1
        finally:
            if not queued:
                self._running.pop(key, None)

    async def _call_async(self, run: Run, handler: Handler):
        """An async handler, in the event loop: (result, error, cancelled)."""
        with anyio.CancelScope() as scope, run.state.stoppable(scope.cancel):
            try:
                return await handler.fn(AsyncContext(run)), None, False
            except Exception as exc:  # noqa: BLE001 - user code: recorded
                return None, exc, False
        return None, None, True

    def _complete(self, run: Run, handler: Handler, result, error: BaseException | None) -> bool:
        """Write the outcome of a run: finish, retry later, or run again later.  True when
        it was queued for the group commit (which then drops the run from ``_running``)."""
        if run.state.halted.is_set():
            self.stats["halted"] += 1
            return False
        if error is None:
            if result is not None and not isinstance(result, dict):
                error = TypeError(f"handler returned {type(result).__name__}; return a dict (or None)")
            elif isinstance(result, dict) and behaviors.TASK_KEY in result:
                error = ValueError(f"handler result may not use the reserved key {behaviors.TASK_KEY!r}")
        if error is None:
            outcome = behaviors.after_success(run.job.data, result, handler.every)
            try:
                encode_data(outcome.data)  # a bad result fails the run, before any write
            except jobs.JobDataError as exc:
                error = exc
        if error is not None:
            outcome = self._failure(run, handler, error)
        kind = _kind(error, outcome, handler)
        if error is None and run.on_commit:  # its writes must not share the transaction
            return self._write_alone(run, handler, outcome)
        if not self._finishes.add(run, outcome, kind):
            self.stats["halted"] += 1
            return False
        return True

    def _give_up(self, run: Run, handler: Handler) -> None:
        """Finish a job whose run lost ``max_lost`` workers as failed, as after its last
        attempt, with the reason; the handler is not called (``on_lost`` is, if given)."""
        error = WorkerLost(behaviors.lost_error(run.job.lost))
        log.error("job %s/%s: %s: failing it", run.job.type, run.job.id, error)
        hooks = run.on_commit
        try:
            if handler.on_lost is not None:
                handler.on_lost(Context(run), str(error))
        except Exception:  # noqa: BLE001 - the job fails all the same; its writes are dropped
            log.exception("job %s/%s: on_lost failed", run.job.type, run.job.id)
            hooks = []
        outcome = behaviors.after_failure(run.job.data, error, behaviors.LAST_ATTEMPT, handler.every)
        try:
            written = self._write(run, outcome, hooks)
        except _HookFailed:  # the job fails all the same, without on_lost's writes
            log.exception("job %s/%s: on_lost's on_commit failed", run.job.type, run.job.id)
            written = self._write(run, outcome)
        self.stats[_kind(error, outcome, handler) if written else "halted"] += 1

    def _write_alone(self, run: Run, handler: Handler, outcome: behaviors.Outcome) -> bool:
        """Write an outcome with its ``on_commit`` writes in a transaction of its own."""
        try:
            written, kind = self._write(run, outcome, run.on_commit), "succeeded"
        except _HookFailed as exc:  # on_commit failed: the run counts as failed
            outcome = self._failure(run, handler, exc.__cause__)
            written, kind = self._write(run, outcome), _kind(exc.__cause__, outcome, handler)
        self.stats[kind if written else "halted"] += 1
        return False

    def _written(self, run: Run, kind: str | None) -> None:
        """The group commit wrote ``run``'s outcome (``kind``), or found its job lost (None)."""
        self.stats[kind or "halted"] += 1
        self._running.pop((run.job.type, run.job.id), None)

    def _write_failed(self, run: Run) -> None:
        self.stats["errors"] += 1
        self._running.pop((run.job.type, run.job.id), None)

    def _failure(self, run: Run, handler: Handler, error: BaseException) -> behaviors.Outcome:
        log.warning("job %s/%s failed: %s: %s", run.job.type, run.job.id, type(error).__name__, error,
                    exc_info=(type(error), error, error.__traceback__))
        return behaviors.after_failure(run.job.data, error, handler.retry, handler.every)

    def _write(self, run: Run, outcome: behaviors.Outcome, hooks: list = ()) -> bool:
        """Finish the job (and resubmit it for ``again_at``) in one transaction, with the
        handler's ``on_commit`` writes; False if the job was lost meanwhile (nothing
        written)."""
        def body(tr):
            job = run.job  # (renewed by the last heartbeat; none comes once finishing)
            if outcome.again_at is not None:  # finish then makes it pending at that time
                jobs.resubmit(tr, job, scheduled_time=outcome.again_at)
            if jobs.finish(tr, job, outcome.data, failed=outcome.failed):  # False: committed already (1021)
                for fn in hooks:
                    try:
                        fn(tr)
                    except Exception as exc:  # noqa: BLE001 - FDB errors pass, to be retried
                        if error_code(exc) is not None:
                            raise
                        raise _HookFailed() from exc

        try:
            # no heartbeat or hand-back in between; the lost-job watcher must not take our
            # finish for a loss
            with run.state.writing(finish=True):
                run_transaction(self.db, body)
        except Halt:  # halted before, or lost meanwhile: nothing written
            return False
        return True

    # --- heartbeats ----------------------------------------------------------------------

    async def _heartbeats(self) -> None:
        refreshed = time.monotonic()
        while True:
            now = time.monotonic()
            if now - refreshed >= TIMEOUT_REFRESH:
                refreshed = now
                try:
                    await anyio.to_thread.run_sync(self._refresh_timeouts)
                except Exception:  # noqa: BLE001 - keep the last known timeouts
                    log.exception("reading the type timeouts failed")
            for run in list(self._running.values()):
                if run.state.active and run.next_beat <= now:
                    await self._beat(run)
            pending_beats = [r.next_beat for r in self._running.values()]
            next_beat = min(pending_beats, default=now + 1.0)
            await anyio.sleep(min(1.0, max(0.01, next_beat - time.monotonic())))

    async def _beat(self, run: Run) -> None:
        try:
            await anyio.to_thread.run_sync(run.update, None)
        except Halt:  # (run.update marked it halted)
            _lost(run)
        except Exception:  # noqa: BLE001 - a failed heartbeat is retried at the next tick
            log.exception("heartbeat of %s/%s failed", run.job.type, run.job.id)
            run.beat_in(min(1.0, run.beat_every))

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

    # --- noticing lost jobs --------------------------------------------------------------

    async def _watch_lost(self) -> None:
        """Halt the handlers of jobs that were removed or re-enqueued as soon as that
        happens, not at their next heartbeat: one watch per type of the held jobs (every
        job change stamps it), re-checking the held jobs at most every LOST_CHECK s."""
        while True:
            lost = await anyio.to_thread.run_sync(self._lost_jobs)
            for run in lost:
                if run.state.take_away():  # (our own finish: not lost)
                    _lost(run)
            await anyio.sleep(LOST_CHECK)

    def _lost_jobs(self) -> list:
        """Block until a type of a held job changes (1 s at most); the held jobs that are
        no longer held then.  Never raises: a failed check is tried again."""
        held = [r for r in list(self._running.values()) if r.state.active]
        if not held:
            self._new_run.wait(1.0)
            self._new_run.clear()
            return []
        wake = threading.Event()
        self._new_run = wake

        def check(tr):
            lost = [r for r in held if not jobs.is_held(tr, r.job)]
            return lost, [watch(tr, keys.watches_activity_key(t)) for t in {r.job.type for r in held}]

        try:
            lost, watches = run_transaction(self.db, check)
        except Exception:  # noqa: BLE001 - heartbeats still catch lost jobs
            log.exception("checking the held jobs failed")
            time.sleep(1.0)  # not a busy loop while the store is failing
            return []
        if not lost:
            for w in watches:
                w.on_ready(lambda _f: wake.set())
            wake.wait(1.0)
        for w in watches:
            w.cancel()
        return lost

    # --- shutdown ------------------------------------------------------------------------

    async def _shut_down(self, lanes: list[threading.Thread]) -> None:
        """Let started handlers end within the grace period, write their outcomes, hand
        back the rest (started or only prefetched), and wait for the lanes to end."""
        self._stopping.set()
        self._feed.stop()
        deadline = time.monotonic() + self.grace
        while not self._hurry.is_set() and time.monotonic() < deadline and any(
            r.state.started and not r.state.finishing for r in list(self._running.values())
        ):
            await anyio.sleep(TICK)
        await anyio.to_thread.run_sync(self._finishes.flush)
        for run in list(self._running.values()):
            released = await anyio.to_thread.run_sync(self._hand_back, run)
            run.state.stop_handler()
            if released:
                self.stats["released"] += 1
        end = time.monotonic() + STOP_WAIT
        while any(lane.is_alive() for lane in lanes) and time.monotonic() < end:
            await anyio.sleep(TICK)
        await anyio.to_thread.run_sync(self._finishes.flush)  # outcomes queued meanwhile
        for run in list(self._running.values()):
            if not run.state.started or run.state.halted.is_set():
                self._running.pop((run.job.type, run.job.id), None)
        if any(lane.is_alive() for lane in lanes):  # e.g. blocked in C code: abandoned
            log.warning("handler(s) ignored the stop; their jobs were handed back")

    def _hand_back(self, run: Run) -> bool:
        # after a finish in flight, or before it (which then writes nothing); a run
        # finishing already is not handed back: its queued outcome is written instead
        return run.state.take_away(then=lambda: _release_quietly(self.db, run.job))


class _HookFailed(Exception):
    """An ``on_commit`` function raised (its cause): the run counts as failed."""


def _release_quietly(db, job: jobs.Job) -> bool:
    """Hand ``job`` back to pending; False if it was no longer ours (nothing to hand back)."""
    try:
        jobs.release(db, job)
        return True
    except Halt:
        return False


def _lost(run: Run) -> None:
    """A held job was taken away (removed or re-enqueued): say so and stop its handler."""
    log.warning("job %s/%s was taken away (removed or re-enqueued): stopping its handler", run.job.type, run.job.id)
    run.state.stop_handler()


def _kind(error: BaseException | None, outcome: behaviors.Outcome, handler: Handler) -> str:
    """The stat an outcome counts as once written."""
    if error is None:
        return "succeeded"
    return "retried" if outcome.again_at is not None and handler.every is None else "failed"


def _sole(group: BaseExceptionGroup) -> BaseException:
    """The one exception inside nested task-group wrappers (else the group itself)."""
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc
