"""Distributed operations over the partitions of a table (the Ignite seed's approved design,
on the job queue).

An operation runs on a table and consists of one job per partition, run in parallel by
any processor; when every job succeeded, or one failed, or the operation was cancelled, a
coordinator completes it.  The seed's roles map onto the queue:

* executors are processors: a partition job is a queue job of type ``op.<type>``, so a
  job whose processor dies is re-enqueued by the activity monitor and run elsewhere, and a
  resumable job resumes from the progress it saved in its job data (``ctx.save_progress``);
* the coordinator is a queue job too (type ``op.<type>.complete``), enqueued by the
  transaction that records the last job outcome (or the cancel): at most one processor
  holds it at a time, another takes over if it dies, and the operation's state changes
  only in the transaction that finishes it, fenced by its lock.  Completion code may run
  more than once (a coordinator that stalled, then resumed) and must be idempotent.

State, changed only by transactions with the seed's conditions (key layout)::

    ("ops", table, "run")                        -> JSON [{type, instance, concurrent, compatible_with}]
    ("ops", table, type, "next")                 -> next instance id (JSON int)
    ("ops", table, type, instance, "op")         -> JSON {state, arg, partitions, started, ended}
    ("ops", table, type, instance, "job", part)  -> JSON {state: success|failed, result, at}
    ("ops", None, "layout")                      -> (LAYOUT.version,)  tuple-packed

Operation states: running -> success | failed, or running -> cancelling -> cancelled.
"""

from __future__ import annotations

import os
import socket
import time
import uuid

import orjson

import jobs
from jobs import JobsError, LayoutError, StoreError, checks, prefixes
from jobs.codec import read_json
from jobs.engine import Subspace, wait_future
from jobs.engine.transactional import LastAttempt, run as run_transaction, within
from jobs.engine.transactional import watch as watch_key
from jobs.layouts import Layout

from .behaviors import Retry
from .context import Context

LAYOUT = Layout("operations", prefixes.OPERATIONS, 1, error=StoreError, newer=LayoutError)
OPS = LAYOUT.space
WORKER = f"{socket.gethostname()}:{os.getpid()}"  # this process, as recorded in job outcomes
FINAL = ("success", "failed", "cancelled")
# A coordinator whose completion code fails is retried until it succeeds (the operation
# must complete), backing off up to a minute.
COORDINATOR_RETRY = Retry(max_attempts=2**31, backoff=1.0, max_backoff=60.0)


class OperationRefused(JobsError):
    """The operation is not compatible with one already running on the table."""


class OperationNotFound(jobs.NotFound):
    """No such operation instance."""


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

    def cancel_job_and_cleanup(self, arg, table: str, partition: str) -> None:
        """Undo what a job of ``partition`` may have left (idempotent; may run for a
        partition whose job never started)."""

    def complete_operation(self, arg, table: str, success: bool, results: dict) -> bool | None:
        """Run once all jobs succeeded (``success``) or the operation failed or was
        cancelled; ``results``: partition -> {state, result}.  Idempotent.  Returning
        False when ``success`` ends the operation failed all the same (e.g. a commit that
        turned out impossible)."""


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


class OperationStatus:
    """An operation instance as stored: ``state``, ``arg``, ``partitions`` (partition ->
    pending, running, success, failed or cancelled), ``results`` (partition -> result of
    completed jobs), ``ran_on`` (partition -> the processors that ran its job, more than
    one when it was re-run), ``started`` and ``ended`` (wall clock; ended None while running),
    ``stuck``: why it cannot complete by itself (its coordinator lost too many workers;
    cancel it), else None."""

    def __init__(self, table, type, instance, record: dict, parts: dict, results: dict, ran_on: dict):
        self.table, self.type, self.instance = table, type, instance
        self.ran_on = ran_on  # partition -> processors that ran its job ("host:pid"), in order
        self.state = record["state"]
        self.arg = record.get("arg")
        self.started, self.ended = record.get("started"), record.get("ended")
        self.stuck = record.get("stuck")
        self.partitions, self.results = parts, results

    @property
    def done(self) -> bool:
        return self.state in FINAL

    def as_dict(self) -> dict:
        return {"table": self.table, "type": self.type, "instance": self.instance, "state": self.state,
                "arg": self.arg, "partitions": self.partitions, "results": self.results, "ran_on": self.ran_on,
                "started": self.started, "ended": self.ended, "stuck": self.stuck}

    def __repr__(self) -> str:
        return f"<Operation {self.type} #{self.instance} on {self.table}: {self.state}>"


# --- keys and records ---------------------------------------------------------------------


def _dumps(value) -> bytes:
    return orjson.dumps(value)


def _run_key(table: str) -> bytes:
    return OPS.pack((table, "run"))


def _op_key(table: str, type: str, instance: int) -> bytes:
    return OPS.pack((table, type, instance, "op"))


def _job_space(table: str, type: str, instance: int) -> Subspace:
    return OPS[table][type][instance]["job"]


def _running(tr, table: str) -> list[dict]:
    """The table's running operations (the layout checked first)."""
    LAYOUT.check(tr)
    return read_json(tr, _run_key(table), [])


def job_id(table: str, instance: int, partition: str) -> str:
    """Queue id of an operation's partition job."""
    return f"{table}/{instance}/{partition}"


def partition_type(type: str) -> str:
    return f"op.{type}"


def coordinator_type(type: str) -> str:
    return f"op.{type}.complete"


def _outcomes(tr, table: str, type: str, instance: int) -> dict:
    LAYOUT.check(tr)
    space = _job_space(table, type, instance)
    r = space.range()
    return {space.unpack(kv.key)[0]: orjson.loads(bytes(kv.value)) for kv in tr.get_range(r.start, r.stop)}


def _compatible(new: Operation, running: dict) -> bool:
    if running["type"] == new.type:
        return new.concurrent and running.get("concurrent", False)
    return new.type in running.get("compatible_with", ()) or running["type"] in new.compatible_with


# --- the manager ----------------------------------------------------------------------------


class Operations:
    """The operations of store ``db``: register kinds, start/cancel/watch instances, and
    ``attach`` them to a Processor so that it runs their jobs and coordinators.

    ``partitions(tr, table) -> list[str]``: the table's partitions (the catalog's, in the
    pipeline), read in the transaction that starts an operation."""

    def __init__(self, db, partitions):
        if not callable(partitions):
            raise TypeError("partitions must be a function (tr, table) -> list of partition ids")
        self.db = db
        self.partitions = partitions
        self.kinds: dict[str, Operation] = {}

    def register(self, op: Operation) -> Operation:
        if not isinstance(op, Operation):
            raise TypeError(f"expected an Operation instance, not {type(op).__name__}")
        checks.name(op.type, "operation type")
        if op.type in self.kinds:
            raise ValueError(f"operation type {op.type!r} is already registered")
        self.kinds[op.type] = op
        return op

    def _kind(self, type: str) -> Operation:
        op = self.kinds.get(type)
        if op is None:
            raise ValueError(f"unknown operation type {type!r} (registered: {', '.join(sorted(self.kinds)) or 'none'})")
        return op

    # --- starting, cancelling, watching ----------------------------------------------------

    def start_operation(self, type: str, table: str, arg=None, *, partitions=None, tr=None) -> int:
        """Start an operation of ``type`` on ``table``; returns its instance id.  Raises
        OperationRefused when an incompatible operation runs on the table (nothing is
        written then), ValueError for a table without partitions.  ``partitions``: the
        partition ids to run on (default: the table's, from the provider); ``tr``: a
        transaction to start it in (default: its own), e.g. with a staged table."""
        op = self._kind(type)
        checks.name(table, "table")
        _dumps(arg)  # not JSON: TypeError now, not in a worker
        nonce = uuid.uuid4().hex
        drawn = LastAttempt()  # the instance an attempt took: its commit may have happened (1021)

        def body(tr):
            if drawn.committed(lambda i: (read_json(tr, _op_key(table, type, i)) or {}).get("nonce") == nonce):
                return drawn.value  # an earlier attempt of this call committed
            running = _running(tr, table)
            for other in running:
                if not _compatible(op, other):
                    raise OperationRefused(
                        f"cannot start {type!r} on {table!r}: operation {other['type']!r} "
                        f"#{other['instance']} is running there and they are not compatible"
                    )
            parts = [str(p) for p in (self.partitions(tr, table) if partitions is None else partitions)]
            if not parts:
                raise ValueError(f"table {table!r} has no partitions")
            next_key = OPS.pack((table, type, "next"))
            instance = read_json(tr, next_key, 1)
            LAYOUT.upgrade(tr)
            tr.set(next_key, _dumps(instance + 1))
            drawn.record(instance)
            record = {"state": "running", "arg": arg, "partitions": parts, "started": time.time(), "ended": None,
                      "fail_fast": op.fail_fast, "nonce": nonce}
            tr.set(_op_key(table, type, instance), _dumps(record))
            entry = {"type": type, "instance": instance, "concurrent": op.concurrent,
                     "compatible_with": sorted(op.compatible_with)}
            tr.set(_run_key(table), _dumps(running + [entry]))
            _declare_types(tr, op)
            for p in parts:
                jobs.add(tr, partition_type(type), job_id(table, instance, p),
                         {"table": table, "instance": instance, "partition": p})
            return instance

        return within(self.db if tr is None else tr, body)

    def cancel_operation(self, table: str, type: str, instance: int) -> bool:
        """Cancel a running operation: its coordinator stops the jobs, cleans up and
        completes it as cancelled.  False if it had already completed."""

        def body(tr):
            record = self._record(tr, table, type, instance)
            if record["state"] != "running":
                return False
            record["state"] = "cancelling"
            tr.set(_op_key(table, type, instance), _dumps(record))
            _stop_jobs(tr, table, type, instance, record)
            _enqueue_coordinator(tr, table, type, instance)
            return True

        return run_transaction(self.db, body)

    def _record(self, tr, table: str, type: str, instance: int) -> dict:
        LAYOUT.check(tr)
        record = read_json(tr, _op_key(table, type, instance))
        if record is None:
            raise OperationNotFound(f"no operation {type!r} #{instance} on table {table!r}")
        return record

    def operation_status(self, tr, table: str, type: str, instance: int) -> OperationStatus:
        """The operation and each partition's state (``tr``: a database or a transaction)."""

        def body(tr):
            record = self._record(tr, table, type, instance)
            outcomes = _outcomes(tr, table, type, instance)
            parts, results, ran_on = {}, {}, {}
            for p in record["partitions"]:
                if p in outcomes:
                    parts[p] = outcomes[p]["state"]
                    results[p] = outcomes[p].get("result")
                    ran_on[p] = outcomes[p].get("ran_on", [])
                elif record["state"] in FINAL or record["state"] == "cancelling":
                    parts[p] = "cancelled"
                else:  # its job's queue state; a job gone or finished without an outcome was stopped
                    try:
                        state = jobs.get_job_state(tr, partition_type(type), job_id(table, instance, p))
                    except jobs.NotFound:
                        state = "finished"
                    parts[p] = "cancelled" if state == "finished" else state
            return OperationStatus(table, type, instance, record, parts, results, ran_on)

        return within(tr, body)

    def running_operations(self, tr, table: str) -> list[dict]:
        """The table's running operations: [{type, instance, ...}] (the seed's runOps)."""
        return within(tr, lambda tr: _running(tr, table))

    def wait_operation(self, table: str, type: str, instance: int, timeout: float | None = None) -> OperationStatus:
        """Block until the operation completed (``timeout`` seconds at most: TimeoutError);
        waits on a watch of its record, no polling."""
        timeout = checks.optional_seconds(timeout, "timeout")
        deadline = None if timeout is None else time.monotonic() + timeout
        key = _op_key(table, type, instance)
        while True:
            def look(tr):
                record = self._record(tr, table, type, instance)
                return None if record["state"] in FINAL else watch_key(tr, key)

            watch = run_transaction(self.db, look)
            if watch is None:
                return self.operation_status(self.db, table, type, instance)
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                watch.cancel()
                raise TimeoutError(f"operation {type!r} #{instance} on {table!r} did not complete within {timeout} s")
            fired = wait_future(watch, None if left is None else min(left, 1.0))
            watch.cancel()
            if fired:
                try:
                    watch.wait()
                except Exception:  # noqa: BLE001 - a failed watch: read again
                    pass

    # --- running: handlers for a Processor -------------------------------------------------

    def attach(self, processor) -> None:
        """Register, on ``processor``, the handlers of every registered operation's
        partition jobs and coordinator."""
        for op in self.kinds.values():
            processor.handler(partition_type(op.type), timeout=op.job_timeout, retry=op.retry,
                              on_lost=self._job_lost(op))(self._job_handler(op))
            processor.handler(coordinator_type(op.type), timeout=op.job_timeout, retry=COORDINATOR_RETRY,
                              on_lost=_coordinator_lost(op))(self._coordinator_handler(op))

    def _job_handler(self, op: Operation):
        def handle(ctx: Context):
            table, instance, part = ctx.data["table"], ctx.data["instance"], ctx.data["partition"]
            record = run_transaction(self.db, lambda tr: read_json(tr, _op_key(table, op.type, instance)))
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
                op.cancel_job_and_cleanup(record["arg"], table, part)
            ctx.on_commit(lambda tr: _mark_job(tr, table, op.type, instance, part, success, result, ran_on))
            return {"success": success, "result": result}

        return handle

    def _job_lost(self, op: Operation):
        """``on_lost`` of the partition jobs: a job that lost too many workers fails its
        partition with the reason, as an unexpected error on its last attempt does (the
        operation then fails, whether or not it ``can_fail``: nothing would complete it)."""

        def lost(ctx: Context, reason: str):
            table, instance, part = ctx.data["table"], ctx.data["instance"], ctx.data["partition"]
            record = run_transaction(self.db, lambda tr: read_json(tr, _op_key(table, op.type, instance)))
            if record is None or record["state"] != "running":
                return
            op.cancel_job_and_cleanup(record["arg"], table, part)
            ran_on = ctx.data.get("ran_on", [])
            ctx.on_commit(lambda tr: _mark_job(tr, table, op.type, instance, part, False, {"reason": reason}, ran_on))

        return lost

    def _coordinator_handler(self, op: Operation):
        def complete(ctx: Context):
            table, instance = ctx.data["table"], ctx.data["instance"]

            def look(tr):
                return read_json(tr, _op_key(table, op.type, instance)), _outcomes(tr, table, op.type, instance)

            record, outcomes = run_transaction(self.db, look)
            if record is None or record["state"] in FINAL:
                return {"state": None if record is None else record["state"]}
            cancelled = record["state"] == "cancelling"
            failed = any(o["state"] != "success" for o in outcomes.values())
            if not cancelled and not failed and len(outcomes) < len(record["partitions"]):
                return {"state": "running"}  # woken early: the last job will enqueue it again
            if cancelled or failed:  # their jobs were removed with the cancel or failure
                for part in record["partitions"]:
                    if part not in outcomes:
                        op.cancel_job_and_cleanup(record["arg"], table, part)
            final = "cancelled" if cancelled else "failed" if failed else "success"
            results = {p: o for p, o in outcomes.items()}
            if op.complete_operation(record["arg"], table, final == "success", results) is False:
                final = "failed" if final == "success" else final
            ctx.on_commit(lambda tr: _close(tr, table, op.type, instance, final))
            return {"state": final}

        return complete


def _coordinator_lost(op: Operation):
    """``on_lost`` of the coordinators: one that lost too many workers cannot fail the
    operation (its completion code may have run in part), so the operation is marked stuck
    with the reason (``OperationStatus.stuck``); it stays running until cancelled, which
    enqueues the coordinator again."""

    def lost(ctx: Context, reason: str):
        table, instance = ctx.data["table"], ctx.data["instance"]
        ctx.on_commit(lambda tr: _mark_stuck(tr, table, op.type, instance, reason))

    return lost


def _mark_stuck(tr, table: str, type: str, instance: int, reason: str) -> None:
    """IF the operation has not completed THEN record why its coordinator gave up."""
    record = read_json(tr, _op_key(table, type, instance))
    if record is None or record["state"] in FINAL:
        return
    record["stuck"] = f"its coordinator failed: {reason}; cancel the operation to end it"
    tr.set(_op_key(table, type, instance), _dumps(record))


def _declare_types(tr, op: Operation) -> None:
    """Give the operation's job types a timeout unless they have one (processors attached
    later set theirs), so that an operation can start before any processor does."""
    for type in (partition_type(op.type), coordinator_type(op.type)):
        if jobs.get_type_timeout(tr, type) is None:
            jobs.set_type_timeout(tr, type, op.job_timeout)


def _enqueue_coordinator(tr, table: str, type: str, instance: int) -> None:
    jobs.add(tr, coordinator_type(type), f"{table}/{instance}", {"table": table, "instance": instance})


def _mark_job(tr, table: str, type: str, instance: int, part: str, success: bool, result, ran_on=()) -> None:
    """The seed's conditional invoke: IF the operation runs AND the job has no state THEN
    set it (and enqueue the coordinator when this was the last job, or a failure)."""
    record = read_json(tr, _op_key(table, type, instance))
    key = _job_space(table, type, instance).pack((part,))
    if record is None or record["state"] != "running" or tr.get(key).wait().present():
        return  # already completed elsewhere: ignore, as the seed says
    tr.set(key, _dumps({"state": "success" if success else "failed", "result": result, "at": time.time(),
                        "ran_on": list(ran_on)}))
    fail_now = not success and record.get("fail_fast", True)
    if fail_now:  # the operation fails: stop the other jobs now, free their slots
        _stop_jobs(tr, table, type, instance, record)
    if fail_now or len(_outcomes(tr, table, type, instance)) == len(record["partitions"]):
        _enqueue_coordinator(tr, table, type, instance)


def _stop_jobs(tr, table: str, type: str, instance: int, record: dict) -> None:
    """Remove the queue jobs of the partitions without an outcome (their workers get Halt
    and stop), so that the coordinator, which cleans them up, is not left waiting for a
    slot they hold."""
    done = _outcomes(tr, table, type, instance)
    for part in record["partitions"]:
        if part not in done:
            try:
                jobs.remove(tr, partition_type(type), job_id(table, instance, part))
            except jobs.NotFound:
                pass


def _close(tr, table: str, type: str, instance: int, final: str) -> None:
    """IF the operation is still running (or cancelling) THEN record its final state and
    take it off the table's running operations."""
    record = read_json(tr, _op_key(table, type, instance))
    if record is None or record["state"] in FINAL:
        return
    record["state"], record["ended"] = final, time.time()
    tr.set(_op_key(table, type, instance), _dumps(record))
    running = [r for r in read_json(tr, _run_key(table), []) if not (r["type"] == type and r["instance"] == instance)]
    tr.set(_run_key(table), _dumps(running))
