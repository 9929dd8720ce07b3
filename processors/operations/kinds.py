"""What a kind of distributed operation is: the :class:`Operation` a user subclasses, the
:class:`JobContext` its partition jobs get, :class:`JobFailed`, and the checks made when a
kind is registered."""

from __future__ import annotations

import inspect

from ..behaviors import Retry
from ..context import Context


class JobFailed(Exception):
    """Raised by a job's code to finish its partition unsuccessfully (operations that can
    fail); the message becomes the partition's failure reason, and ``result`` (a JSON
    object, e.g. a report) its result beside it."""

    def __init__(self, reason: str, result: dict | None = None):
        super().__init__(reason)
        self.result = dict(result or {})


class Operation:
    """A kind of distributed operation: subclass it (class attributes are its attributes).

    ``concurrent``: several instances may run on one table at once; ``compatible_with``:
    other operation types that may run beside it (either side declaring it is enough);
    ``can_fail``: its jobs may finish unsuccessfully (JobFailed); ``fail_fast``: the first
    failed job stops the others (else they all run and report); ``resumable``: a job that
    is started again gets the progress it saved, else it starts over."""

    type: str = ""
    concurrent: bool = False
    compatible_with: frozenset = frozenset()
    can_fail: bool = True
    fail_fast: bool = True  # a failed job stops the others (False: all run, for a full report)
    resumable: bool = False
    job_timeout: float = 60.0  # type timeout of its partition jobs (heartbeats keep them)
    retry: Retry = Retry(max_attempts=3, backoff=1.0)  # unexpected errors, per partition job

    def start_or_resume_job(self, ctx: "JobContext") -> dict | None:
        """Run the job of ``ctx.partition``; return its result (a JSON object) on success,
        raise JobFailed to fail it."""
        raise NotImplementedError

    def cancel_job_and_cleanup(self, tr, arg, table: str, partition: str) -> None:
        """Undo, in ``tr``, what a job of ``partition`` may have left (idempotent; may run
        for a partition whose job never started).  ``tr`` ends the partition: its failing
        job's finish, or the coordinator's."""

    def complete_operation(self, tr, arg, table: str, success: bool, results: dict) -> bool | None:
        """Complete the operation in ``tr``, the transaction that finishes its coordinator
        (fenced by its lock, with the operation's final state), once all jobs succeeded
        (``success``) or the operation failed or was cancelled; ``results``: partition ->
        {state, result}.  Idempotent; writes only through ``tr``.  Returning False when
        ``success`` ends the operation failed all the same (e.g. a commit that turned out
        impossible)."""


class JobContext:
    """What a partition job's code gets: ``table``, ``partition``, ``arg``, ``instance``,
    ``progress`` (what it saved before, resumable operations only), ``save_progress()``,
    ``attempt_id`` (unique to this run: name its output after it), and ``job`` (the
    processor's Context: ``halted``, ``check()``)."""

    def __init__(self, job: Context, op: Operation, arg):
        self.job = job
        self.table = job.data["table"]
        self.partition = job.data["partition"]
        self.instance = job.data["instance"]
        self.arg = arg
        self.attempt_id = job.run_id
        self.progress = job.data.get("progress") if op.resumable else None

    def save_progress(self, progress) -> None:
        """Persist ``progress`` (JSON) with the job (fenced: raises Halt if it was lost)."""
        self.job.update({**self.job.data, "progress": progress})
        self.progress = progress


def check_hooks(op: Operation) -> None:
    """TypeError for hooks written for the old signatures (without ``tr``), now rather
    than in a coordinator."""
    for name, wanted in (("cancel_job_and_cleanup", 4), ("complete_operation", 5)):
        try:
            params = inspect.signature(getattr(op, name)).parameters.values()
        except (TypeError, ValueError):
            continue  # not introspectable (a builtin): trust it
        if any(p.kind is p.VAR_POSITIONAL for p in params):
            continue
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        if len(positional) != wanted:
            raise TypeError(
                f"{type(op).__name__}.{name} takes {len(positional)} arguments; operation hooks take the "
                f"transaction first: {name}(self, tr, {'arg, table, partition' if wanted == 4 else 'arg, table, success, results'})"
            )


def compatible(new: Operation, running: dict) -> bool:
    """Whether ``new`` may start beside the running operation ``running`` (its runOps entry)."""
    if running["type"] == new.type:
        return new.concurrent and running.get("concurrent", False)
    return new.type in running.get("compatible_with", ()) or running["type"] in new.compatible_with
