"""Distributed operations (the Ignite seed): one job per partition on any processor, a
coordinator that completes the operation exactly once in effect, compatibility checks,
cancel, failure, resume from saved progress, and a coordinator that loses its job while completing.

Partitions come from a dict here (the catalog provides them in the pipeline).  Processors
run on threads; tests wait on conditions, never on durations.
"""

from __future__ import annotations

import threading

import orjson
import pytest

import jobs
from jobs.queue import activity
from jobs.codec import read_json
from jobs.engine.transactional import run
from processors import Processor
from processors.operations import (
    JobFailed,
    Operation,
    OperationNotFound,
    OperationRefused,
    Operations,
    coordinator_type,
    job_id,
    partition_type,
)
from test_poison import lose_worker
from waiting import DEADLINE, running, wait_until

TABLES = {"db.t": ["p0", "p1", "p2", "p3"], "db.u": ["only"], "db.empty": []}


def partitions(tr, table):
    return TABLES[table]


class Recorder(Operation):
    """Records what the framework calls; job behaviour per partition set by the test."""

    type = "count"

    def __init__(self):
        self.ran = []
        self.calls = []  # complete_operation's runs, committed or not
        self.fail = set()  # partitions whose job raises JobFailed
        self.block = threading.Event()  # set: jobs run through; clear: jobs wait on it
        self.block.set()
        self.started = threading.Event()

    def start_or_resume_job(self, ctx):
        self.ran.append(ctx.partition)
        self.started.set()
        while not self.block.wait(0.01):
            ctx.job.check()
        if ctx.partition in self.fail:
            raise JobFailed(f"{ctx.partition} has bad rows")
        return {"rows": len(ctx.partition), "arg": ctx.arg}

    def cancel_job_and_cleanup(self, tr, arg, table, partition):
        _append(tr, self, "cleaned", partition)

    def complete_operation(self, tr, arg, table, success, results):
        self.calls.append((table, success, sorted(results)))
        _append(tr, self, "completed", [table, success, sorted(results)])


def _append(tr, op: Operation, what: str, item) -> None:
    """Record a hook's effect through its transaction: only the attempts that commit count."""
    key = f"app/{op.type}/{what}".encode()
    tr.set(key, orjson.dumps(read_json(tr, key, []) + [item]))


def committed(db, op: Operation, what: str) -> list:
    """The effects ``op``'s hooks committed (``what``: "cleaned" or "completed"), in order."""
    return run(db, lambda tr: read_json(tr, f"app/{op.type}/{what}".encode(), []))


@pytest.fixture
def ops(db):
    return Operations(db, partitions)


def processor_for(db, ops, **kw):
    p = Processor(db, **kw)
    ops.attach(p)
    return p


def test_operation_runs_one_job_per_partition_and_completes_once(db, ops):
    op = ops.register(Recorder())
    p = processor_for(db, ops)
    instance = ops.start_operation("count", "db.t", {"x": 1})
    assert instance == 1
    assert [r["type"] for r in ops.running_operations(db, "db.t")] == ["count"]
    with running(p, concurrency=3):
        status = ops.wait_operation("db.t", "count", instance, timeout=DEADLINE)
    assert status.state == "success" and status.done
    assert sorted(op.ran) == TABLES["db.t"]
    assert status.partitions == {part: "success" for part in TABLES["db.t"]}
    assert status.results["p1"] == {"rows": 2, "arg": {"x": 1}}
    assert committed(db, op, "completed") == [["db.t", True, TABLES["db.t"]]]
    assert committed(db, op, "cleaned") == []
    assert ops.running_operations(db, "db.t") == []
    assert ops.start_operation("count", "db.t", None) == 2  # instance ids go on


def test_a_failed_job_fails_the_operation_and_stops_the_others(db, ops):
    op = ops.register(Recorder())
    op.fail = {"p0"}
    op.block.clear()
    p = processor_for(db, ops)
    with running(p, concurrency=2):
        instance = ops.start_operation("count", "db.t")
        assert wait_until(lambda: len(op.ran) == 2)  # two jobs hold the two slots
        op.block.set()  # p0 fails when it gets to run; the operation fails then
        status = ops.wait_operation("db.t", "count", instance, timeout=DEADLINE)
    assert status.state == "failed"
    assert status.partitions["p0"] == "failed"
    assert status.results["p0"] == {"reason": "p0 has bad rows"}
    completed, cleaned = committed(db, op, "completed"), committed(db, op, "cleaned")
    assert len(completed) == 1 and completed[0][1] is False
    assert "p0" in cleaned  # a failed job cleans up after itself
    for part, state in status.partitions.items():  # every other partition either ran or was stopped
        assert state in ("success", "cancelled", "failed")
        if state == "cancelled":
            assert part in cleaned
    assert ops.running_operations(db, "db.t") == []


def test_incompatible_operations_are_refused_and_compatible_ones_run(db, ops):
    ops.register(Recorder())

    class Index(Operation):
        type = "index"
        concurrent = True
        compatible_with = frozenset({"count"})

        def start_or_resume_job(self, ctx):
            return {}

    ops.register(Index())
    first = ops.start_operation("count", "db.t")
    with pytest.raises(OperationRefused, match="'count' #1 is running"):
        ops.start_operation("count", "db.t")  # not concurrent with itself
    assert ops.start_operation("count", "db.u") == 1  # another table is fine
    assert ops.start_operation("index", "db.t") == 1  # declared compatible with count
    assert ops.start_operation("index", "db.t") == 2  # concurrent with itself
    assert [(r["type"], r["instance"]) for r in ops.running_operations(db, "db.t")] == [
        ("count", first), ("index", 1), ("index", 2)]
    # nothing was written by the refused start
    assert len(jobs.get_jobs(db, partition_type("count"))) == len(TABLES["db.t"]) + 1


def test_cancel_stops_running_jobs_cleans_up_and_completes_cancelled(db, ops):
    op = ops.register(Recorder())
    op.block.clear()
    p = processor_for(db, ops)
    with running(p, concurrency=2):
        instance = ops.start_operation("count", "db.t")
        assert op.started.wait(DEADLINE)
        assert ops.cancel_operation("db.t", "count", instance) is True
        status = ops.wait_operation("db.t", "count", instance, timeout=DEADLINE)
        assert wait_until(lambda: jobs.get_active_jobs_ids(db, partition_type("count")) == [])
    assert status.state == "cancelled"
    assert set(status.partitions.values()) == {"cancelled"}
    assert sorted(committed(db, op, "cleaned")) == TABLES["db.t"]
    assert committed(db, op, "completed") == [["db.t", False, []]]
    assert ops.cancel_operation("db.t", "count", instance) is False  # already completed
    assert jobs.get_jobs(db, partition_type("count")) == []


def test_resumable_job_resumes_from_saved_progress_on_another_processor(db, ops):
    class Steps(Operation):
        type = "steps"
        resumable = True
        can_fail = False

        def __init__(self):
            self.seen = []
            self.hold = threading.Event()

        def start_or_resume_job(self, ctx):
            self.seen.append(ctx.progress)
            step = ctx.progress or 0
            while step < 5:
                step += 1
                ctx.save_progress(step)
                if step == 3 and not self.hold.is_set():
                    while not self.hold.wait(0.01):  # the first processor stops here
                        ctx.job.check()
            return {"steps": step}

    op = ops.register(Steps())
    first = processor_for(db, ops, grace=0)
    instance = ops.start_operation("steps", "db.u")
    with running(first):
        assert wait_until(lambda: op.seen == [None] and
                          jobs.get_job_data(db, partition_type("steps"), job_id("db.u", instance, "only"))
                          .get("progress") == 3)
    # the first processor handed the job back at once (grace 0); the next one resumes it
    op.hold.set()
    with running(processor_for(db, ops)):
        status = ops.wait_operation("db.u", "steps", instance, timeout=DEADLINE)
    assert status.state == "success" and status.results["only"] == {"steps": 5}
    assert op.seen == [None, 3]
    assert len(status.ran_on["only"]) == 2  # it ran twice: the status says so


def test_a_coordinator_that_lost_its_lock_commits_nothing(db, ops):
    """The first coordinator loses its job while completing (the activity monitor took it
    for dead and re-enqueued it): its completion's writes and the operation's final state
    go in the transaction that finishes its job, which then finds the lock gone and commits
    nothing; the coordinator that runs next completes the operation, once."""

    class Fragile(Recorder):
        type = "fragile"

        def complete_operation(self, tr, arg, table, success, results):
            super().complete_operation(tr, arg, table, success, results)
            if len(self.calls) == 1:  # the monitor re-enqueues it now, as for a dead worker
                assert lose_worker(db, coordinator_type("fragile")) == 1

    op = ops.register(Fragile())
    instance = ops.start_operation("fragile", "db.u")
    with running(processor_for(db, ops)):
        status = ops.wait_operation("db.u", "fragile", instance, timeout=DEADLINE)
    assert status.state == "success"
    assert len(op.calls) >= 2  # the completion ran again in the next coordinator ...
    assert committed(db, op, "completed") == [["db.u", True, ["only"]]]  # ... the lost one committed nothing
    assert run(db, activity.lost_total, coordinator_type("fragile")) == 1
    assert ops.running_operations(db, "db.u") == []


def test_hooks_written_without_the_transaction_are_refused(ops):
    class Old(Operation):
        type = "old"

        def complete_operation(self, arg, table, success, results):
            pass

    with pytest.raises(TypeError, match=r"take the transaction first: complete_operation\(self, tr, arg"):
        ops.register(Old())
    assert "old" not in ops.kinds


def test_bad_input(db, ops):
    ops.register(Recorder())
    with pytest.raises(ValueError, match="unknown operation type 'nope'"):
        ops.start_operation("nope", "db.t")
    with pytest.raises(ValueError, match="no partitions"):
        ops.start_operation("count", "db.empty")
    with pytest.raises(TypeError):
        ops.start_operation("count", "db.t", {"x": object()})
    with pytest.raises(ValueError, match="already registered"):
        ops.register(Recorder())
    with pytest.raises(TypeError):
        ops.register("count")
    with pytest.raises(OperationNotFound):
        ops.operation_status(db, "db.t", "count", 99)
    with pytest.raises(OperationNotFound):
        ops.cancel_operation("db.t", "count", 99)
    with pytest.raises(TimeoutError):
        ops.wait_operation("db.t", "count", ops.start_operation("count", "db.t"), timeout=0.05)
    assert ops.running_operations(db, "db.empty") == []


def test_an_operation_that_is_not_fail_fast_runs_every_job_before_failing(db, ops):
    class Survey(Recorder):
        type = "survey"
        fail_fast = False

    op = ops.register(Survey())
    op.fail = {"p0", "p2"}
    with running(processor_for(db, ops), concurrency=2):
        instance = ops.start_operation("survey", "db.t")
        status = ops.wait_operation("db.t", "survey", instance, timeout=DEADLINE)
    assert status.state == "failed"
    assert status.partitions == {"p0": "failed", "p1": "success", "p2": "failed", "p3": "success"}
    assert sorted(op.ran) == TABLES["db.t"] and sorted(committed(db, op, "cleaned")) == ["p0", "p2"]


def test_start_operation_is_safe_to_retry_after_an_unknown_commit_result(db, ops, engine_name):
    """Every commit reports 1021 after really committing: the start's retry must find its
    own operation, not refuse it (non-concurrent) or start a second one."""
    from jobs.engine.faults import FaultInjectingDatabase

    if engine_name == "fdb":
        pytest.skip("fault injection wraps the embedded engines here")
    ops.register(Recorder())
    faulty = Operations(FaultInjectingDatabase(db, unknown_committed=1.0, seed=3), partitions)
    faulty.register(Recorder())
    assert faulty.start_operation("count", "db.t") == 1
    assert [(r["type"], r["instance"]) for r in ops.running_operations(db, "db.t")] == [("count", 1)]
    assert len(jobs.get_jobs(db, partition_type("count"))) == len(TABLES["db.t"])
