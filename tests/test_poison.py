"""Poison jobs and failed jobs, in one process: lost workers
counted on the job and its type by the activity monitor's own transaction, the accepting
worker recorded, a handler's ``max_lost`` failing a job that keeps losing its worker, an
operation failing with such a partition job, and failed jobs counted, listed, retried and
discarded.  A lost worker is made here by what the monitor does to a silent one
(``reenqueue_inactive`` up to the type's last activity), so nothing waits on a timeout;
``test_poison_crash.py`` kills real worker processes."""

from __future__ import annotations

import os
import socket
import time

import orjson
import pytest

import jobs
import processors
from jobs.queue import activity
from jobs.observe import status
from jobs.queue.accepting import this_worker
from jobs import get_run_info
from jobsctl.cli import main as cli_main
from jobs.codec import Lost, Row, encode_row
from jobs.engine import tuple as fdb_tuple
from jobs.engine.transactional import run
from monitor import ActivityMonitor
from monitor.http import Gathered, dashboard_html, metrics_text
from processors import NotFailed, Processor, Retry, TaskFailed, WorkerLost
from processors.behaviors import TASK_KEY
from processors.operations import Operation, Operations, partition_type
from test_api import CommitThenUnknown
from waiting import DEADLINE, running, wait_until

T = "poison"
ME = f"{socket.gethostname()}/{os.getpid()}"


def lose_worker(db, type: str = T) -> int:
    """What the activity monitor does to every silent worker of ``type``, at once."""
    stamp = run(db, activity.last_activity, type)
    return run(db, activity.reenqueue_inactive, type, stamp, 1000)[0]


def type_status(db, type: str = T, limit: int = 10) -> status.TypeStatus:
    return next(t for t in status.gather(db, limit=limit).types if t.type == type)


@pytest.fixture(autouse=True)
def timeout(db):
    jobs.set_type_timeout(db, T, 60)


# --- the job layer: lost workers counted --------------------------------------------------


def test_accept_records_the_worker_and_the_monitor_counts_each_lost_one(db):
    jobs.add(db, T, "j", {"n": 1}, scheduled_time=5)
    job = jobs.accept(db, T, max_sched_time=10, timeout=0)
    assert this_worker() == ME and job.lost is None
    assert get_run_info(db, T, "j") == (ME, None, None)
    before = time.time()
    assert lose_worker(db) == 1
    info, run_info = jobs.get_job(db, T, "j"), get_run_info(db, T, "j")
    assert (info.state, info.data, info.scheduled_time) == ("pending", {"n": 1}, 5.0)  # as before
    assert run_info.worker is None  # pending: nobody holds it
    assert run_info.lost.count == 1 and run_info.lost.worker == ME and before <= run_info.lost.at <= time.time()
    again = jobs.accept(db, T, max_sched_time=10, timeout=0)
    assert again.lost == run_info.lost  # the next worker is told
    again = jobs.update(db, again, {"n": 2})  # updates keep the count
    assert lose_worker(db) == 1
    assert get_run_info(db, T, "j").lost.count == 2
    assert type_status(db).lost == 2  # the type's counter


def test_release_keeps_the_count_and_a_finish_shows_it(db):
    jobs.add(db, T, "j")
    jobs.accept(db, T, timeout=0)
    lose_worker(db)
    jobs.release(db, jobs.accept(db, T, timeout=0))  # a worker shutting down: not a loss
    assert get_run_info(db, T, "j").lost.count == 1
    jobs.finish(db, jobs.accept(db, T, timeout=0), {"done": True})
    worker, lost, failed = get_run_info(db, T, "j")
    assert (worker, lost.count, failed) == (ME, 1, None)  # the finished job tells what it went through


@pytest.mark.parametrize("new_run", ["re-add", "resubmit", "finish flagged for resubmission"])
def test_a_new_run_counts_from_zero(db, new_run):
    jobs.add(db, T, "j")
    jobs.accept(db, T, timeout=0)
    lose_worker(db)
    job = jobs.accept(db, T, timeout=0)
    if new_run == "finish flagged for resubmission":  # a retry or a recurring job's next run
        jobs.resubmit(db, job)
        jobs.finish(db, job)
    else:
        jobs.finish(db, job)
        if new_run == "re-add":
            jobs.add(db, T, "j", {"again": True})
        else:
            jobs.resubmit(db, jobs.get_job(db, T, "j"))
    assert jobs.get_job_state(db, T, "j") == "pending"
    assert get_run_info(db, T, "j").lost is None


def test_a_reenqueue_retried_after_an_unknown_result_counts_once(db):
    """The count is written by the re-enqueue's own transaction: a retry of a commit that
    happened finds the job no longer running and counts nothing more."""
    jobs.add(db, T, "j")
    jobs.accept(db, T, timeout=0)
    unknown = CommitThenUnknown(db)
    unknown.armed = 1
    monitor = ActivityMonitor(unknown, [T])
    assert monitor._reenqueue(T, run(db, activity.last_activity, T)) in (0, 1)
    assert unknown.raised == 1
    assert get_run_info(db, T, "j").lost.count == 1
    assert type_status(db).lost == 1


def test_the_monitor_thread_counts_a_silent_worker(db):
    jobs.set_type_timeout(db, T, 0.5)
    jobs.add(db, T, "j")
    jobs.accept(db, T, timeout=0)  # and never updated
    monitor = ActivityMonitor(db, [T]).start()
    try:
        assert wait_until(lambda: jobs.get_job_state(db, T, "j") == "pending")
    finally:
        monitor.stop()
    assert get_run_info(db, T, "j").lost.count == 1 and monitor.reenqueued == 1


# --- rows -------------------------------------------------------------------------------------


def test_rows_of_each_layout_decode():
    from jobs.codec import decode_row

    five = fdb_tuple.pack((None, None, 5.0, False, b"{}"))
    six = fdb_tuple.pack((None, b"L" * 16, 5.0, True, b"{}", None))
    assert decode_row(five) == Row(None, None, 5.0, False, b"{}")
    assert decode_row(six) == Row(None, b"L" * 16, 5.0, True, b"{}")
    lost = Row(None, None, 1.0, False, b"{}", None, "h/1", Lost(2, "h/9", 3.5))
    assert decode_row(encode_row(lost)) == lost
    assert encode_row(Row(None, None, 1.0, False, b"{}")) == fdb_tuple.pack((None, None, 1.0, False, b"{}", None))


# --- processors: max_lost -----------------------------------------------------------------


def test_max_lost_fails_the_job_with_the_lost_worker_named_and_never_runs_it(db):
    """What a handler that kills its worker does, here without the kills: its run loses
    ``max_lost`` workers; the next processor fails it as after a last attempt."""
    p = Processor(db, monitor=False)
    seen = []

    @p.handler(T, retry=Retry(max_attempts=2), max_lost=2)
    def poison(ctx):
        seen.append(ctx.lost)
        return {}

    jobs.add(db, T, "j", {"x": 1})
    for _ in range(2):
        jobs.accept(db, T, timeout=0)  # a worker that dies in the handler
        lose_worker(db)
    with running(p):
        assert wait_until(lambda: jobs.get_job_state(db, T, "j") == "finished")
    assert seen == []  # not run a third time
    data = jobs.get_job_data(db, T, "j")
    task = data[TASK_KEY]
    assert data["x"] == 1 and task["failed"] is True and task["attempts"] == 1
    assert task["last_error"]["type"] == "WorkerLost"
    message = task["last_error"]["message"]
    assert message.startswith(f"worker lost 2 times; last worker {ME} at 20"), message
    assert get_run_info(db, T, "j").failed[1] == f"WorkerLost: {message}"
    assert p.stats["failed"] == 1
    with pytest.raises(TaskFailed, match="worker lost 2 times"):
        processors.TaskFuture(db, T, "j").result(DEADLINE)


def test_ctx_lost_tells_a_handler_its_run_lost_workers(db):
    p = Processor(db, monitor=False)
    seen = []

    @p.handler(T)
    def handler(ctx):
        seen.append(ctx.lost)
        return {}

    jobs.add(db, T, "j")
    jobs.accept(db, T, timeout=0)
    lose_worker(db)
    with running(p):
        assert wait_until(lambda: jobs.get_job_state(db, T, "j") == "finished")
    assert seen == [1]  # under the default max_lost (3): run again


def test_max_lost_is_checked(db):
    p = Processor(db)
    for bad in (0, -1, 1.5, True, None):
        with pytest.raises(ValueError, match="max_lost"):
            p.handler(T, max_lost=bad)
    assert issubclass(WorkerLost, jobs.JobsError) and issubclass(NotFailed, jobs.JobsError)


class Count(Operation):
    type = "count"

    def __init__(self):
        self.cleaned = []

    def start_or_resume_job(self, ctx):
        return {"rows": 1}

    def cancel_job_and_cleanup(self, tr, arg, table, partition):
        self.cleaned.append(partition)


def test_a_partition_job_that_loses_max_lost_workers_fails_the_operation(db):
    ops = Operations(db, lambda tr, table: ["a", "b"])
    op = ops.register(Count())
    instance = ops.start_operation("count", "db.t")
    part = partition_type("count")
    for _ in range(3):  # the default max_lost: both partitions' workers die three times
        assert len(jobs.accept_many(db, part, 2, timeout=0)) == 2
        lose_worker(db, part)
    p = Processor(db, monitor=False)
    ops.attach(p)
    with running(p):
        status_ = ops.wait_operation("db.t", "count", instance, timeout=DEADLINE)
    assert status_.state == "failed"
    failed = [pt for pt, state in status_.partitions.items() if state == "failed"]
    assert failed  # (fail fast: the first one fails the operation, the other is stopped)
    reason = status_.results[failed[0]]["reason"]
    assert reason.startswith(f"worker lost 3 times; last worker {ME} at "), reason
    assert failed[0] in op.cleaned
    job = jobs.get_job_data(db, part, f"db.t/{instance}/{failed[0]}")
    assert job[TASK_KEY]["failed"] is True and job[TASK_KEY]["last_error"]["message"] == reason


# --- failed jobs: counted, listed, retried, discarded ------------------------------------


def fail(db, job_id: str, reason: str = "ValueError: no good") -> None:
    jobs.add(db, T, job_id, {"p": job_id, TASK_KEY: {"attempts": 3, "failed": True}})
    job = jobs.accept(db, T, timeout=0)
    jobs.finish(db, job, failed=reason)


def test_failed_jobs_are_counted_apart_from_finished_ones(db):
    fail(db, "f1", "E: one")
    fail(db, "f2", "E: two")
    jobs.add(db, T, "ok")
    jobs.finish(db, jobs.accept(db, T, timeout=0))
    t = type_status(db, limit=1)
    assert (t.finished, t.failed) == (1, 2)
    assert [(f.id, f.reason) for f in t.recent_failures] == [("f2", "E: two")]  # most recent, limit 1
    m = metrics_text(Gathered(status.gather(db), None, 0.0, 0.0))
    assert f'jobs_failed{{type="{T}"}} 2' in m and f'jobs_finished{{type="{T}"}} 1' in m
    assert f'jobs_lost{{type="{T}"}} 0' in m
    page = dashboard_html(status.gather(db))
    assert "Recent failures" in page and "E: one" in page and "E: two" in page


def test_a_failed_finish_of_a_job_flagged_to_run_again_is_not_indexed(db):
    jobs.add(db, T, "j")
    job = jobs.accept(db, T, timeout=0)
    jobs.add(db, T, "j", scheduled_time=5)  # flagged while running
    jobs.finish(db, job, failed="E: x")
    assert jobs.get_job_state(db, T, "j") == "pending" and get_run_info(db, T, "j").failed is None
    assert processors.failed_jobs(db, T) == []


def test_retry_failed_runs_it_again_from_its_first_attempt(db):
    fail(db, "f")
    processors.retry_failed(db, T, "f")
    info = jobs.get_job(db, T, "f")
    assert (info.state, info.data, info.scheduled_time) == ("pending", {"p": "f"}, 0.0)
    assert get_run_info(db, T, "f").failed is None and type_status(db).failed == 0
    with pytest.raises(NotFailed, match="pending, not failed"):
        processors.retry_failed(db, T, "f")
    with pytest.raises(jobs.NotFound):
        processors.retry_failed(db, T, "nosuch")


def test_retry_all_failed_and_discard(db, monkeypatch):
    monkeypatch.setattr(processors.failures, "PAGE", 2)
    for n in range(5):
        fail(db, f"f{n}")
    assert processors.retry_all_failed(db, T) == 5
    assert processors.failed_jobs(db, T) == []
    assert jobs.pending_count(db, T) == 5
    for n in range(5):
        jobs.remove(db, T, f"f{n}")
    fail(db, "f0")
    jobs.add(db, T, "f1")
    with pytest.raises(NotFailed):
        processors.discard_failed(db, T, "f1")  # pending: left alone
    processors.discard_failed(db, T, "f0")
    with pytest.raises(jobs.NotFound):
        jobs.get_job(db, T, "f0")
    assert type_status(db).failed == 0


def test_removing_or_readding_a_failed_job_unindexes_it(db):
    fail(db, "a")
    fail(db, "b")
    jobs.remove(db, T, "a")
    jobs.add(db, T, "b", {"new": True})
    assert processors.failed_jobs(db, T) == [] and type_status(db).failed == 0


def test_a_failed_run_of_a_retried_handler_is_indexed_with_its_error(db):
    p = Processor(db, monitor=False)

    @p.handler(T, retry=Retry(max_attempts=2, backoff=0.01))
    def bad(ctx):
        raise ValueError("no good")

    with running(p):
        future = p.submit(T, {"x": 1})
        with pytest.raises(TaskFailed):
            future.result(DEADLINE)
    (failed,) = processors.failed_jobs(db, T)
    assert (failed.id, failed.reason) == (future.job_id, "ValueError: no good")


# --- the command line ---------------------------------------------------------------------


def cli(capsys, db, *args) -> tuple[int, str]:
    if not hasattr(db, "path"):
        pytest.skip("the command line opens the store by URL: the file store only")
    code = cli_main(["--store", "sqlite:" + db.path, *args])
    out, err = capsys.readouterr()
    return code, out + err


def test_cli_lists_shows_retries_and_discards_failed_jobs(capsys, db):
    jobs.add(db, T, "ok")
    jobs.finish(db, jobs.accept(db, T, timeout=0))
    jobs.add(db, T, "p", {"x": 1})
    jobs.accept(db, T, timeout=0)
    lose_worker(db)
    job = jobs.accept(db, T, timeout=0)
    error = {"type": "ValueError", "message": "no good", "traceback": "Traceback (most recent call last):\n  x\n"}
    jobs.finish(db, job, {"x": 1, TASK_KEY: {"attempts": 2, "failed": True, "last_error": error}},
                failed="ValueError: no good")
    fail(db, "q")

    code, out = cli(capsys, db, "list", "--failed")
    assert code == 0 and out.split("\n")[0].split() == ["TYPE", "ID", "FAILED", "LAST", "ERROR"]
    assert [line.split()[1] for line in out.splitlines()[1:]] == ["p", "q"] and "ValueError: no good" in out
    code, out = cli(capsys, db, "--json", "list", T, "--failed")
    assert [(d["id"], d["reason"]) for d in orjson.loads(out)] == [("p", "ValueError: no good"),
                                                                   ("q", "ValueError: no good")]
    code, out = cli(capsys, db, "show", T, "p")
    fields = dict(line.split(None, 1) for line in out.splitlines() if line[:1].isalpha())
    assert fields["attempts"] == "2" and fields["error"] == "ValueError: no good"
    assert fields["lost"].startswith(f"1 worker(s); last {ME}") and fields["worker"] == ME
    assert "\ntraceback  Traceback (most recent call last):\n             x\n" in out
    doc = orjson.loads(cli(capsys, db, "--json", "show", T, "p")[1])
    assert doc["lost"]["count"] == 1 and doc["failed"]["reason"] == "ValueError: no good"

    code, out = cli(capsys, db, "status")
    head = out.splitlines()[0].split()
    assert head[7:10] == ["FINISHED", "FAILED", "LOST"] and out.splitlines()[1].split()[6:9] == ["1", "2", "1"]
    assert "recent failures" in out
    (t,) = orjson.loads(cli(capsys, db, "--json", "status")[1])["types"]
    assert (t["finished"], t["failed"], t["lost"]) == (1, 2, 1)
    assert {f["id"] for f in t["recent_failures"]} == {"p", "q"}

    assert cli(capsys, db, "retry", T, "p") == (0, f"retried 1 failed job(s) of {T}\n")
    assert jobs.get_job(db, T, "p").data == {"x": 1}
    code, out = cli(capsys, db, "retry", T, "p")
    assert code == 1 and "not failed" in out
    assert cli(capsys, db, "discard", T, "q") == (0, f"discarded {T}/q\n")
    fail(db, "r")
    assert cli(capsys, db, "retry", "--all-failed", T)[0] == 0
    assert processors.failed_jobs(db, T) == []
    assert cli(capsys, db, "retry", T)[0] == 2  # ID or --all-failed: a usage error
    assert cli(capsys, db, "retry", T, "p", "--all-failed")[0] == 2
