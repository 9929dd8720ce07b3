"""The :class:`Operations` of a store: register kinds, start, cancel, watch and report
instances, and attach them to a Processor."""

from __future__ import annotations

import time
import uuid

import jobs
from jobs import JobsError, checks
from jobs.codec import read_json
from jobs.engine import LastAttempt, run as run_transaction, wait_future, watch as watch_key, within

from .handlers import COORDINATOR_RETRY, coordinator_handler, coordinator_lost, job_handler, job_lost
from .kinds import Operation, check_hooks, compatible
from .state import (
    FINAL,
    LAYOUT,
    OPS,
    coordinator_type,
    dumps,
    enqueue_coordinator,
    job_id,
    op_key,
    partition_type,
    read_outcomes,
    read_record,
    run_key,
    running,
    stop_jobs,
)


class OperationRefused(JobsError):
    """The operation is not compatible with one already running on the table."""


class OperationNotFound(jobs.NotFound):
    """No such operation instance."""


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
        check_hooks(op)
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
        dumps(arg)  # not JSON: TypeError now, not in a worker
        nonce = uuid.uuid4().hex
        drawn = LastAttempt()  # the instance an attempt took: its commit may have happened (1021)

        def body(tr):
            if drawn.committed(lambda i: (read_json(tr, op_key(table, type, i)) or {}).get("nonce") == nonce):
                return drawn.value  # an earlier attempt of this call committed
            others = running(tr, table)
            for other in others:
                if not compatible(op, other):
                    raise OperationRefused(
                        f"cannot start {type!r} on {table!r}: operation {other['type']!r} "
                        f"#{other['instance']} is running there and they are not compatible"
                    )
            parts = [str(p) for p in (self.partitions(tr, table) if partitions is None else partitions)]
            if not parts:
                raise ValueError(f"table {table!r} has no partitions")
            next_key = OPS.pack((table, type, "next"))
            instance = read_json(tr, next_key, 1)
            LAYOUT.ensure(tr)
            tr.set(next_key, dumps(instance + 1))
            drawn.record(instance)
            record = {"state": "running", "arg": arg, "partitions": parts, "started": time.time(), "ended": None,
                      "fail_fast": op.fail_fast, "nonce": nonce}
            tr.set(op_key(table, type, instance), dumps(record))
            entry = {"type": type, "instance": instance, "concurrent": op.concurrent,
                     "compatible_with": sorted(op.compatible_with)}
            tr.set(run_key(table), dumps(others + [entry]))
            declare_types(tr, op)
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
            tr.set(op_key(table, type, instance), dumps(record))
            stop_jobs(tr, table, type, instance, record)
            enqueue_coordinator(tr, table, type, instance)
            return True

        return run_transaction(self.db, body)

    def _record(self, tr, table: str, type: str, instance: int) -> dict:
        record = read_record(tr, table, type, instance)
        if record is None:
            raise OperationNotFound(f"no operation {type!r} #{instance} on table {table!r}")
        return record

    def operation_status(self, tr, table: str, type: str, instance: int) -> OperationStatus:
        """The operation and each partition's state (``tr``: a database or a transaction)."""

        def body(tr):
            record = self._record(tr, table, type, instance)
            outcomes = read_outcomes(tr, table, type, instance)
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
        return within(tr, lambda tr: running(tr, table))

    def wait_operation(self, table: str, type: str, instance: int, timeout: float | None = None) -> OperationStatus:
        """Block until the operation completed (``timeout`` seconds at most: TimeoutError);
        waits on a watch of its record, no polling."""
        timeout = checks.optional_seconds(timeout, "timeout")
        deadline = None if timeout is None else time.monotonic() + timeout
        key = op_key(table, type, instance)
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
                              on_lost=job_lost(self.db, op))(job_handler(self.db, op))
            processor.handler(coordinator_type(op.type), timeout=op.job_timeout, retry=COORDINATOR_RETRY,
                              on_lost=coordinator_lost(op))(coordinator_handler(self.db, op))


def declare_types(tr, op: Operation) -> None:
    """Give the operation's job types a timeout unless they have one (processors attached
    later set theirs), so that an operation can start before any processor does."""
    for type in (partition_type(op.type), coordinator_type(op.type)):
        if jobs.get_type_timeout(tr, type) is None:
            jobs.set_type_timeout(tr, type, op.job_timeout)
