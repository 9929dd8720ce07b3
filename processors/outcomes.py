"""Writing what a run came to: its job finished (with the result, or failed), retried
later, or run again later (a recurring job), each counted in the processor's ``stats``.

Most outcomes are queued for the group commit (``finishes.py``).  An outcome with the
handler's ``on_commit`` writes is written alone, since those writes must not share a
transaction with other jobs' finishes; if one of them raises, the run counts as failed
and its job is finished (or retried) without them.
"""

from __future__ import annotations

import logging

import jobs
from jobs import Halt
from jobs.codec import encode_data
from jobs.engine import error_code, run as run_transaction

from . import behaviors, tracing
from .context import Context
from .errors import WorkerLost
from .finishes import ROW_BYTES, Finishes
from .handlers import Handler
from .run import Run

log = logging.getLogger("processors")


class Outcomes:
    """Writes the outcomes of the runs of ``held`` and counts them in ``stats``; a run
    leaves ``held`` once its outcome was written or its job found lost.  ``finishes``:
    the group commit's queue."""

    def __init__(self, db, held, stats):
        self.db = db
        self._held = held
        self._stats = stats
        self.finishes = Finishes(db, written=self._written, failed=self._write_failed)

    def complete(self, run: Run, handler: Handler, result, error: BaseException | None) -> bool:
        """Write the outcome of a run: finish, retry later, or run again later.  True when
        it was queued for the group commit (which then drops the run from ``held``)."""
        if run.state.halted.is_set():
            self._stats["halted"] += 1
            tracing.outcome("halted")
            return False
        if error is None:
            error = _bad_result(result)
        size = ROW_BYTES  # (a failure's data: not measured, taken as the largest)
        every = self._every(run, handler)
        if error is None:
            outcome = behaviors.after_success(run.job.data, result, every, handler.cron is not None)
            try:
                size = len(encode_data(outcome.data))  # a bad result fails the run, before any write
            except jobs.JobDataError as exc:
                error = exc
        if error is not None:
            outcome = self._failure(run, handler, error, every)
        kind = _kind(error, outcome, handler, every)
        tracing.outcome(kind, error)
        if error is None and run.on_commit:  # its writes must not share the transaction
            return self._write_alone(run, handler, outcome)
        if not self.finishes.add(run, outcome, kind, size):
            self._stats["halted"] += 1
            tracing.outcome("halted")
            return False
        return True

    def give_up(self, run: Run, handler: Handler) -> None:
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
        outcome = behaviors.after_failure(run.job.data, error, behaviors.LAST_ATTEMPT, handler.every,
                                           handler.cron is not None)
        try:
            written = self._write(run, outcome, hooks)
        except _HookFailed:  # the job fails all the same, without on_lost's writes
            log.exception("job %s/%s: on_lost's on_commit failed", run.job.type, run.job.id)
            written = self._write(run, outcome)
        kind = _kind(error, outcome, handler) if written else "halted"
        self._stats[kind] += 1
        tracing.outcome(kind, error)

    def _write_alone(self, run: Run, handler: Handler, outcome: behaviors.Outcome) -> bool:
        """Write an outcome with its ``on_commit`` writes in a transaction of its own."""
        try:
            written, kind = self._write(run, outcome, run.on_commit), "succeeded"
        except _HookFailed as exc:  # on_commit failed: the run counts as failed
            outcome = self._failure(run, handler, exc.__cause__)
            written, kind = self._write(run, outcome), _kind(exc.__cause__, outcome, handler)
            tracing.outcome(kind, exc.__cause__)
        self._stats[kind if written else "halted"] += 1
        if not written:
            tracing.outcome("halted")
        return False

    def _written(self, run: Run, kind: str | None) -> None:
        """The group commit wrote ``run``'s outcome (``kind``), or found its job lost (None)."""
        self._stats[kind or "halted"] += 1
        self._held.drop(run)

    def _write_failed(self, run: Run) -> None:
        self._stats["errors"] += 1
        self._held.drop(run)

    def _failure(self, run: Run, handler: Handler, error: BaseException, every=False) -> behaviors.Outcome:
        log.warning("job %s/%s failed: %s: %s", run.job.type, run.job.id, type(error).__name__, error,
                    exc_info=(type(error), error, error.__traceback__))
        every = self._every(run, handler) if every is False else every
        return behaviors.after_failure(run.job.data, error, handler.retry, every, handler.cron is not None)

    def _every(self, run: Run, handler: Handler) -> float | None:
        """The handler's ``every``, unless the run's job is not the type's one chain: a
        recurring type runs one chain of runs, that of its pending or running job of the
        smallest id (``behaviors.EVERY_JOB_ID``, which the processor adds as it starts,
        unless one was added by hand); another job of the type (added by hand under
        another id) runs once, as a job of a type that does not recur."""
        if handler.every is None:
            return None
        try:
            others = jobs.get_jobs(self.db, run.job.type, unreadable=[])
        except Exception:  # noqa: BLE001 - not known: the chain goes on (never none)
            log.exception("job %s/%s: reading the type's jobs failed", run.job.type, run.job.id)
            return handler.every
        first = any(info.id < run.job.id and info.state in ("pending", "running") for info in others)
        return None if first else handler.every

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

        halted_before = run.state.halted.is_set()  # (said when it was halted)
        try:
            # no heartbeat or hand-back in between; the lost-job watcher must not take our
            # finish for a loss
            with run.state.writing(finish=True):
                run_transaction(self.db, body)
        except Halt:  # halted before, or lost meanwhile: nothing written
            if not halted_before:
                log.warning("job %s/%s: its outcome was not written: the job was re-enqueued or removed meanwhile",
                            run.job.type, run.job.id)
            return False
        return True


class _HookFailed(Exception):
    """An ``on_commit`` function raised (its cause): the run counts as failed."""


def _bad_result(result) -> BaseException | None:
    """Why a handler's result cannot be the finished job's data, if it cannot."""
    if result is not None and not isinstance(result, dict):
        return TypeError(f"handler returned {type(result).__name__}; return a dict (or None)")
    if isinstance(result, dict) and behaviors.TASK_KEY in result:
        return ValueError(f"handler result may not use the reserved key {behaviors.TASK_KEY!r}")
    return None


def _kind(error: BaseException | None, outcome: behaviors.Outcome, handler: Handler, every=False) -> str:
    """The stat an outcome counts as once written (``every``: the run's, when not the
    handler's: a one-off job of a recurring type)."""
    if error is None:
        return "succeeded"
    every = handler.every if every is False else every
    recurring = every is not None or handler.cron is not None
    return "retried" if outcome.again_at is not None and not recurring else "failed"
