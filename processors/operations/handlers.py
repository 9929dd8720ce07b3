"""The handlers a Processor runs for an operation: its partition jobs and its coordinator,
each writing what it decided with its job's finish (``ctx.on_commit``), fenced by the
job's lock."""

from __future__ import annotations

import jobs
from jobs.engine import run as run_transaction

from ..behaviors import Retry
from ..context import Context
from .kinds import JobContext, JobFailed, Operation
from .state import WORKER, close, final_state, mark_job, mark_stuck, read_outcomes, read_record

# A coordinator whose completion code fails is retried until it succeeds (the operation
# must complete), backing off up to a minute.
COORDINATOR_RETRY = Retry(max_attempts=2**31, backoff=1.0, max_backoff=60.0)


def job_handler(db, op: Operation):
    """The handler of ``op``'s partition jobs: run the partition, record its outcome with
    the job's finish."""

    def handle(ctx: Context):
        table, instance, part = ctx.data["table"], ctx.data["instance"], ctx.data["partition"]
        record = run_transaction(db, lambda tr: read_record(tr, table, op.type, instance))
        if record is None or record["state"] != "running":
            return {"skipped": None if record is None else record["state"]}
        # Which processors ran it, kept with the job (a re-run after a crash adds one):
        # the operation's status tells what ran where and what was re-run.
        ran_on = ctx.data.get("ran_on", []) + [WORKER]
        ctx.update({**ctx.data, "ran_on": ran_on})
        try:
            result, success = op.start_or_resume_job(JobContext(ctx, op, record["arg"])), True
        except JobFailed as exc:
            if not op.can_fail:
                raise TypeError(f"operation {op.type!r} cannot fail, but its job raised JobFailed: {exc}") from exc
            result, success = {**exc.result, "reason": str(exc)}, False
        except jobs.Halt:
            raise
        except Exception as exc:  # noqa: BLE001 - retried by the policy; the last attempt fails the job
            if ctx.attempt < op.retry.max_attempts:
                raise
            result, success = {"reason": f"{type(exc).__name__}: {exc}"}, False
        if not success:
            ctx.on_commit(lambda tr: op.cancel_job_and_cleanup(tr, record["arg"], table, part))
        ctx.on_commit(lambda tr: mark_job(tr, table, op.type, instance, part, success, result, ran_on))
        return {"success": success, "result": result}

    return handle


def job_lost(db, op: Operation):
    """``on_lost`` of the partition jobs: a job that lost too many workers fails its
    partition with the reason, as an unexpected error on its last attempt does (the
    operation then fails, whether or not it ``can_fail``: nothing would complete it)."""

    def lost(ctx: Context, reason: str):
        table, instance, part = ctx.data["table"], ctx.data["instance"], ctx.data["partition"]
        record = run_transaction(db, lambda tr: read_record(tr, table, op.type, instance))
        if record is None or record["state"] != "running":
            return
        ctx.on_commit(lambda tr: op.cancel_job_and_cleanup(tr, record["arg"], table, part))
        ran_on = ctx.data.get("ran_on", [])
        ctx.on_commit(lambda tr: mark_job(tr, table, op.type, instance, part, False, {"reason": reason}, ran_on))

    return lost


def coordinator_handler(db, op: Operation):
    """The handler of ``op``'s coordinator: once the operation is decided, complete it in the
    transaction that finishes this job."""

    def coordinate(ctx: Context):
        table, instance = ctx.data["table"], ctx.data["instance"]

        def look(tr):
            record = read_record(tr, table, op.type, instance)
            return record, final_state(record, read_outcomes(tr, table, op.type, instance))

        record, final = run_transaction(db, look)
        if final is None:  # completed already, or woken early (the last job enqueues it again)
            return {"state": None if record is None else record["state"]}
        # Decided: complete in the transaction that finishes this job, fenced by its lock.
        ctx.on_commit(lambda tr: complete_in(tr, op, table, instance))
        return None  # the operation's record holds its final state

    return coordinate


def coordinator_lost(op: Operation):
    """``on_lost`` of the coordinators: one that lost too many workers cannot fail the
    operation (its completion code may have run in part), so the operation is marked stuck
    with the reason (``OperationStatus.stuck``); it stays running until cancelled, which
    enqueues the coordinator again."""

    def lost(ctx: Context, reason: str):
        table, instance = ctx.data["table"], ctx.data["instance"]
        ctx.on_commit(lambda tr: mark_stuck(tr, table, op.type, instance, reason))

    return lost


def complete_in(tr, op: Operation, table: str, instance: int) -> None:
    """The coordinator's work, in the transaction that finishes its job: IF the operation
    is decided and not completed THEN clean up the partitions without an outcome (a cancel
    or a failure stopped their jobs), run its completion and record its final state."""
    record = read_record(tr, table, op.type, instance)
    outcomes = read_outcomes(tr, table, op.type, instance)
    final = final_state(record, outcomes)
    if final is None:
        return
    if final != "success":
        for part in record["partitions"]:
            if part not in outcomes:
                op.cancel_job_and_cleanup(tr, record["arg"], table, part)
    if op.complete_operation(tr, record["arg"], table, final == "success", dict(outcomes)) is False:
        final = "failed" if final == "success" else final
    close(tr, table, op.type, instance, final)
