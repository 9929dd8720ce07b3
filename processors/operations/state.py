"""The operations' state in the store, and the seed's conditional writes on it.

Key layout (``("ops", ...)``, see :mod:`processors.operations`), changed only by
transactions with the seed's conditions: a partition's outcome is set IF the operation
runs AND the partition has none; the final state is recorded IF it has not completed.
"""

from __future__ import annotations

import os
import socket
import time

import orjson

import jobs
from jobs import LayoutError, StoreError, prefixes
from jobs.codec import read_json
from jobs.engine import Subspace
from jobs.layouts import Layout

LAYOUT = Layout("operations", prefixes.OPERATIONS, 1, error=StoreError, newer=LayoutError)
OPS = LAYOUT.space
WORKER = f"{socket.gethostname()}:{os.getpid()}"  # this process, as recorded in job outcomes
FINAL = ("success", "failed", "cancelled")


def dumps(value) -> bytes:
    return orjson.dumps(value)


def run_key(table: str) -> bytes:
    return OPS.pack((table, "run"))


def op_key(table: str, type: str, instance: int) -> bytes:
    return OPS.pack((table, type, instance, "op"))


def job_space(table: str, type: str, instance: int) -> Subspace:
    return OPS[table][type][instance]["job"]


def job_id(table: str, instance: int, partition: str) -> str:
    """Queue id of an operation's partition job."""
    return f"{table}/{instance}/{partition}"


def partition_type(type: str) -> str:
    return f"op.{type}"


def coordinator_type(type: str) -> str:
    return f"op.{type}.complete"


def read_record(tr, table: str, type: str, instance: int) -> dict | None:
    """An operation's record (None: no such instance), the layout checked first."""
    LAYOUT.check(tr)
    return read_json(tr, op_key(table, type, instance))


def running(tr, table: str) -> list[dict]:
    """The table's running operations (the layout checked first)."""
    LAYOUT.check(tr)
    return read_json(tr, run_key(table), [])


def read_outcomes(tr, table: str, type: str, instance: int) -> dict:
    LAYOUT.check(tr)
    space = job_space(table, type, instance)
    r = space.range()
    return {space.unpack(kv.key)[0]: orjson.loads(bytes(kv.value)) for kv in tr.get_range(r.start, r.stop)}


def final_state(record: dict | None, outcomes: dict) -> str | None:
    """The state an operation ends in, now that its coordinator runs: None while it still
    waits for outcomes, or when it completed already."""
    if record is None or record["state"] in FINAL:
        return None
    if record["state"] == "cancelling":
        return "cancelled"
    if any(o["state"] != "success" for o in outcomes.values()):
        return "failed"
    return "success" if len(outcomes) >= len(record["partitions"]) else None


def mark_stuck(tr, table: str, type: str, instance: int, reason: str) -> None:
    """IF the operation has not completed THEN record why its coordinator gave up."""
    record = read_record(tr, table, type, instance)
    if record is None or record["state"] in FINAL:
        return
    record["stuck"] = f"its coordinator failed: {reason}; cancel the operation to end it"
    tr.set(op_key(table, type, instance), dumps(record))


def enqueue_coordinator(tr, table: str, type: str, instance: int) -> None:
    jobs.add(tr, coordinator_type(type), f"{table}/{instance}", {"table": table, "instance": instance})


def mark_job(tr, table: str, type: str, instance: int, part: str, success: bool, result, ran_on=()) -> None:
    """The seed's conditional invoke: IF the operation runs AND the job has no state THEN
    set it (and enqueue the coordinator when this was the last job, or a failure)."""
    record = read_record(tr, table, type, instance)
    key = job_space(table, type, instance).pack((part,))
    if record is None or record["state"] != "running" or tr.get(key).wait().present():
        return  # already completed elsewhere: ignore, as the seed says
    tr.set(key, dumps({"state": "success" if success else "failed", "result": result, "at": time.time(),
                        "ran_on": list(ran_on)}))
    fail_now = not success and record.get("fail_fast", True)
    if fail_now:  # the operation fails: stop the other jobs now, free their slots
        stop_jobs(tr, table, type, instance, record)
    if fail_now or len(read_outcomes(tr, table, type, instance)) == len(record["partitions"]):
        enqueue_coordinator(tr, table, type, instance)


def stop_jobs(tr, table: str, type: str, instance: int, record: dict) -> None:
    """Remove the queue jobs of the partitions without an outcome (their workers get Halt
    and stop), so that the coordinator, which cleans them up, is not left waiting for a
    slot they hold."""
    done = read_outcomes(tr, table, type, instance)
    for part in record["partitions"]:
        if part not in done:
            try:
                jobs.remove(tr, partition_type(type), job_id(table, instance, part))
            except jobs.NotFound:
                pass


def close(tr, table: str, type: str, instance: int, final: str) -> None:
    """IF the operation is still running (or cancelling) THEN record its final state and
    take it off the table's running operations."""
    record = read_record(tr, table, type, instance)
    if record is None or record["state"] in FINAL:
        return
    record["state"], record["ended"] = final, time.time()
    tr.set(op_key(table, type, instance), dumps(record))
    running = [r for r in read_json(tr, run_key(table), []) if not (r["type"] == type and r["instance"] == instance)]
    tr.set(run_key(table), dumps(running))
