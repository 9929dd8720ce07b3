"""The worker loop: accept jobs of the registered types, run their handlers, heartbeat,
finish, retry or reschedule; hand jobs back on shutdown.

    processor = Processor(jobs.open())

    @processor.handler("resize", timeout=30, retry=Retry(max_attempts=5))
    def resize(ctx):
        ...
        ctx.update({"done": 10})          # progress (renews the job)
        return {"size": 42}                # the finished job's data

    processor.run(concurrency=4)           # until SIGTERM/SIGINT or processor.stop()

Shape of a running processor (one anyio event loop):

* one dispatcher takes a free slot, then accepts a job of any registered type
  (``_Acceptor``: one transaction per type, then one wait on all their pending watches);
* each job runs as a task: an async handler in the loop, a sync one on a thread of its own
  (``interrupt.HandlerThread``); its outcome is written by ``_complete`` in one transaction
  (finish, with a resubmission for retries and recurring jobs);
* a heartbeat task renews every held job each third of its type timeout; a job found lost
  (``Halt``) is halted: its handler is cancelled or interrupted and nothing more is written;
* the activity monitor for the registered types (re-enqueues jobs of dead workers).

Shutdown (``stop()``, SIGTERM or SIGINT): no more accepts; running handlers get ``grace``
seconds; jobs still held then are handed back to pending at once (``jobs.release``), and
their handlers stopped.  A second signal skips the grace period.
"""

from __future__ import annotations

import collections
import inspect
import logging
import math
import random
import signal
import threading
import time
from dataclasses import dataclass

import anyio
import anyio.lowlevel
import anyio.to_thread

import jobs
from jobs import Halt, checks, keys
from jobs.accepting import AcceptCall, Wait
from jobs.engine import error_code
from jobs.engine.transactional import run as run_transaction
from monitor import ActivityMonitor

from . import behaviors
from .context import AsyncContext, Context, Run
from .interrupt import HandlerThread
from .submit import TaskFuture, submit

log = logging.getLogger("processors")

BEATS_PER_TIMEOUT = 3  # heartbeats per type timeout: two may be late before the job is lost
ACCEPT_SLICE = 0.5  # longest blocking accept step, so stop() and cancellation are seen soon
TIMEOUT_REFRESH = 10.0  # seconds between re-reads of the type timeouts (jobs set-timeout)
STOP_WAIT = 10.0  # how long a stopping processor waits for halted sync handlers to return
ERROR_PAUSE_MAX = 5.0  # longest pause after a store error in the accept loop
LOST_CHECK = 0.05  # least time between two checks of the held jobs (rate limit under load)


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


class Processor:
    """Runs handlers for job types of store ``db``.

    ``monitor``: also run the activity monitor for the registered types (several monitors
    over one store are harmless).  ``grace``: seconds running handlers get at shutdown
    before their jobs are handed back.  ``stats`` counts what happened (accepted,
    succeeded, retried, failed, halted, released, errors)."""

    def __init__(self, db, *, monitor: bool = True, grace: float = 30.0):
        self.db = db
        self.monitor = monitor
        self.grace = checks.seconds(grace, "grace")
        self.stats: collections.Counter = collections.Counter()
        self._handlers: dict[str, Handler] = {}
        self._beat_every: dict[str, float] = {}
        self._running: dict[tuple[str, str], Run] = {}  # (type, id) -> the run holding it
        self._stopping = threading.Event()
        self._new_run = threading.Event()  # wakes the lost-job watcher
        self._hurry = threading.Event()  # skip the grace period
        self._acceptor: _Acceptor | None = None
        self._serving = False
        self.ready = threading.Event()  # set while serving: timeouts declared, accepting
        self._declared = False  # the handlers' type timeouts were written to the store

    # --- registration --------------------------------------------------------------------

    def handler(self, type: str, *, timeout: float | None = None, retry=None, every: float | None = None,
                interrupt: bool = True):
        """Register the decorated function (sync or async; it gets a Context) for jobs of
        ``type``.  ``timeout``: the type timeout in seconds, set in the store when the
        processor starts (None: use the one already set).  ``retry``: a Retry or a number
        of attempts (default: one attempt).  ``every``: a recurring job, run again that
        many seconds after each run.  ``interrupt=False``: a sync handler is never
        interrupted when its job is lost, only told (``ctx.halted``)."""
        checks.name(type, "type")
        if type in self._handlers:
            raise ValueError(f"a handler for type {type!r} is already registered")
        timeout = checks.optional_seconds(timeout, "timeout")
        if timeout == 0:
            raise ValueError("timeout must be more than 0 seconds")
        every = checks.optional_seconds(every, "every")
        retry = behaviors.as_retry(retry)

        def register(fn):
            if not callable(fn):
                raise TypeError(f"handler for {type!r} must be callable")
            is_async = inspect.iscoroutinefunction(fn)
            self._handlers[type] = Handler(type, fn, timeout, retry, every, bool(interrupt), is_async)
            self._declared = False
            return fn

        return register

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
        if self._acceptor is not None:
            self._acceptor.wake.set()

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
                await self._dispatch(concurrency)
                tg.cancel_scope.cancel()
        except BaseExceptionGroup as group:  # one failure: raise it as itself
            raise _sole(group) from None
        finally:
            self.ready.clear()
            self._serving = False
            self._acceptor = None

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

    # --- accepting -----------------------------------------------------------------------

    async def _dispatch(self, concurrency: int) -> None:
        slots = anyio.Semaphore(concurrency)
        self._waiters = anyio.CapacityLimiter(concurrency)  # threads waiting on sync handlers
        self._acceptor = acceptor = _Acceptor(self.db, self.types)
        if self._stopping.is_set():  # stop() came before the acceptor existed
            acceptor.wake.set()
        pause = 0.0
        async with anyio.create_task_group() as running:
            try:
                while not self._stopping.is_set():
                    with anyio.move_on_after(ACCEPT_SLICE) as waited:  # all slots busy: see stop()
                        await slots.acquire()
                    if waited.cancelled_caught:
                        continue
                    if self._stopping.is_set():
                        slots.release()
                        break
                    try:
                        job = await self._accept_step(acceptor)
                        pause = 0.0
                    except jobs.StoreError:
                        raise
                    except Exception:  # noqa: BLE001 - the store failing: log, pause, go on
                        log.exception("accept failed")
                        self.stats["errors"] += 1
                        job = None
                        pause = min(ERROR_PAUSE_MAX, max(0.05, pause * 2))
                        await anyio.sleep(pause)
                    if job is None:
                        slots.release()
                        continue
                    self.stats["accepted"] += 1
                    # registered before its task starts, so a stop right now still hands it back
                    run = Run(self.db, job, self._beat_every[job.type])
                    self._running[(job.type, job.id)] = run
                    self._new_run.set()  # the lost-job watcher looks at it too
                    running.start_soon(self._execute, run, slots)
            except anyio.get_cancelled_exc_class():
                self._hurry.set()  # cancelled: no grace period
                raise
            finally:
                with anyio.CancelScope(shield=True):
                    await self._shut_down()
                running.cancel_scope.cancel()  # handlers that ignored the stop: abandoned

    async def _accept_step(self, acceptor: "_Acceptor") -> jobs.Job | None:
        with anyio.CancelScope(shield=True):  # a job taken must be seen, never dropped
            job = await anyio.to_thread.run_sync(acceptor.step, ACCEPT_SLICE)
        if job is not None and self._stopping.is_set():
            await anyio.to_thread.run_sync(_release_quietly, self.db, job)
            return None
        if job is not None:
            try:
                await anyio.lowlevel.checkpoint_if_cancelled()
            except anyio.get_cancelled_exc_class():
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(_release_quietly, self.db, job)
                raise
        return job

    # --- running one job -----------------------------------------------------------------

    async def _execute(self, run: Run, slots: anyio.Semaphore) -> None:
        job = run.job
        handler = self._handlers[job.type]
        key = (job.type, job.id)
        try:
            if run.halted.is_set():  # lost (or handed back) before its handler started
                self.stats["halted"] += 1
                return
            if handler.is_async:
                with anyio.CancelScope() as scope:
                    run.stopper = scope.cancel
                    try:
                        result, error = await handler.fn(AsyncContext(run)), None
                    except Exception as exc:  # noqa: BLE001 - user code: recorded
                        result, error = None, exc
                if scope.cancelled_caught:  # halted or handed back: nothing more is written
                    self.stats["halted"] += 1
                    return
            else:
                thread = HandlerThread(lambda: handler.fn(Context(run)), f"job-{job.type}-{job.id}")
                run.stopper = thread.interrupt if handler.interrupt else None
                thread.start()
                await anyio.to_thread.run_sync(thread.done.wait, abandon_on_cancel=True, limiter=self._waiters)
                result, error = thread.result, thread.error
            await anyio.to_thread.run_sync(self._complete, run, handler, result, error)
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):  # the processor was cancelled: hand back now
                if await anyio.to_thread.run_sync(self._hand_back, run):
                    self.stats["released"] += 1
            run.stop_handler()
            raise
        except Exception:  # noqa: BLE001 - never let one job kill the loop
            log.exception("job %s/%s: writing its outcome failed; its type timeout will re-enqueue it", *key)
            self.stats["errors"] += 1
        finally:
            self._running.pop(key, None)
            slots.release()

    def _complete(self, run: Run, handler: Handler, result, error: BaseException | None) -> None:
        """Write the outcome of a run (blocking): finish, retry later, or run again later."""
        if run.halted.is_set():
            self.stats["halted"] += 1
            return
        if error is None:
            if result is not None and not isinstance(result, dict):
                error = TypeError(f"handler returned {type(result).__name__}; return a dict (or None)")
            elif isinstance(result, dict) and behaviors.TASK_KEY in result:
                error = ValueError(f"handler result may not use the reserved key {behaviors.TASK_KEY!r}")
        if error is None:
            outcome = behaviors.after_success(run.job.data, result, handler.every)
        else:
            outcome = self._failure(run, handler, error)
        try:
            written = self._write(run, outcome, run.on_commit if error is None else ())
        except (jobs.JobDataError, _HookFailed) as exc:  # bad result, or on_commit failed
            error = exc.__cause__ if isinstance(exc, _HookFailed) else exc
            outcome = self._failure(run, handler, error)
            written = self._write(run, outcome)
        if not written:
            self.stats["halted"] += 1
        elif error is None:
            self.stats["succeeded"] += 1
        elif outcome.again_at is not None and handler.every is None:
            self.stats["retried"] += 1
        else:
            self.stats["failed"] += 1

    def _failure(self, run: Run, handler: Handler, error: BaseException) -> behaviors.Outcome:
        log.warning("job %s/%s failed: %s: %s", run.job.type, run.job.id, type(error).__name__, error,
                    exc_info=(type(error), error, error.__traceback__))
        return behaviors.after_failure(run.job.data, error, handler.retry, handler.every)

    def _write(self, run: Run, outcome: behaviors.Outcome, hooks: list = ()) -> bool:
        """Finish the job (and resubmit it for ``again_at``) in one transaction, with the
        handler's ``on_commit`` writes; False if the job was lost meanwhile (nothing
        written)."""
        with run.lock:  # no heartbeat or hand-back in between
            if run.halted.is_set():
                return False
            run.finishing = True  # the lost-job watcher must not take our finish for a loss
            job = run.job

            def body(tr):
                if outcome.again_at is not None:  # finish then makes it pending at that time
                    jobs.resubmit(tr, job, scheduled_time=outcome.again_at)
                if jobs.finish(tr, job, outcome.data):  # False: committed already (1021)
                    for fn in hooks:
                        try:
                            fn(tr)
                        except Exception as exc:  # noqa: BLE001 - FDB errors pass, to be retried
                            if error_code(exc) is not None:
                                raise
                            raise _HookFailed() from exc

            try:
                run_transaction(self.db, body)
            except Halt:
                run.halted.set()
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
                if not run.halted.is_set() and run.next_beat <= now:
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
            run.next_beat = time.monotonic() + min(1.0, run.beat_every)

    # --- noticing lost jobs --------------------------------------------------------------

    async def _watch_lost(self) -> None:
        """Halt the handlers of jobs that were removed or re-enqueued as soon as that
        happens, not at their next heartbeat: one watch per type of the held jobs (every
        job change stamps it), re-checking the held jobs at most every LOST_CHECK s."""
        while True:
            lost = await anyio.to_thread.run_sync(self._lost_jobs)
            for run in lost:
                if not run.halted.is_set() and not run.finishing:  # (our own finish: not lost)
                    run.halt()
                    _lost(run)
            await anyio.sleep(LOST_CHECK)

    def _lost_jobs(self) -> list:
        """Block until a type of a held job changes (1 s at most); the held jobs that are
        no longer held then.  Never raises: a failed check is tried again."""
        held = [r for r in list(self._running.values()) if not r.halted.is_set()]
        if not held:
            self._new_run.wait(1.0)
            self._new_run.clear()
            return []
        wake = threading.Event()
        self._new_run = wake

        def check(tr):
            lost = [r for r in held if not jobs.is_held(tr, r.job)]
            return lost, [tr.watch(keys.watches_activity_key(t)) for t in {r.job.type for r in held}]

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

    async def _shut_down(self) -> None:
        """Let running handlers end within the grace period, then hand back the rest."""
        self._stopping.set()
        deadline = time.monotonic() + self.grace
        while self._running and not self._hurry.is_set() and time.monotonic() < deadline:
            await anyio.sleep(0.05)
        for run in list(self._running.values()):
            released = await anyio.to_thread.run_sync(self._hand_back, run)
            run.stop_handler()
            if released:
                self.stats["released"] += 1
        end = time.monotonic() + STOP_WAIT
        while self._running and time.monotonic() < end:
            await anyio.sleep(0.05)
        if self._running:  # e.g. blocked in C code: abandoned (their results are never written)
            log.warning("%d handler(s) ignored the stop; their jobs were handed back", len(self._running))

    def _hand_back(self, run: Run) -> bool:
        with run.lock:  # after a finish in flight, or before it (which then writes nothing)
            if run.halted.is_set():
                return False
            run.halted.set()
            return _release_quietly(self.db, run.job)


class _HookFailed(Exception):
    """An ``on_commit`` function raised (its cause): the run counts as failed."""


class _Acceptor:
    """Accepts one job of any of ``types``: an attempt per type (random order), then one
    wait on all their pending watches, in steps no longer than a slice so the caller can
    stop.  ``wake`` cuts a wait short (stop)."""

    def __init__(self, db, types: list[str]):
        self.db = db
        self.types = list(types)
        self.wake = threading.Event()
        self._calls: dict[str, AcceptCall] = {}
        self._waits: list[Wait] = []

    def step(self, slice_seconds: float) -> jobs.Job | None:
        if not self._waits:
            self.wake.clear()
            for type in random.sample(self.types, len(self.types)):
                call = self._calls.get(type)
                if call is None:  # a call (and its lock) lives until it returns a job (1021)
                    call = self._calls[type] = AcceptCall(self.db, type)
                out = call.attempt()
                if isinstance(out, jobs.Job):
                    del self._calls[type]
                    self._cancel_waits()
                    return out
                if out is None:  # a stale queue entry was dropped: look again at once
                    self._cancel_waits()
                    return None
                self._waits.append(out)
                out.watch.on_ready(lambda _f: self.wake.set())
        due = min((w.due for w in self._waits if w.due is not None), default=math.inf)
        limit = min(slice_seconds, max(0.0, due - time.time()))
        if self.wake.wait(limit) or time.time() >= due:
            self._cancel_waits()  # something changed: attempt again at the next step
        return None

    def _cancel_waits(self) -> None:
        for w in self._waits:
            w.watch.cancel()
        self._waits = []


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
    run.stop_handler()


def _sole(group: BaseExceptionGroup) -> BaseException:
    """The one exception inside nested task-group wrappers (else the group itself)."""
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc
