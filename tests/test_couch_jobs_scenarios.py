"""couch_jobs' test scenarios (couch_jobs_tests.erl, fdbarchive branch) ported to the Python
API, with the points where this port does better than couch_jobs (docs/guide/jobs-api.md): future jobs
wake a waiting accept, resubmit without data keeps the data (also on a finished job), and
composition with the application's own transaction.

Every test runs on each engine of the ``db`` fixture.  "Nothing was written" is proven by
the job layer's keys (every engine) and, on the embedded engine, by its commit counter.
Threads and waiting accepts get generous deadlines; no test asserts how long anything took.
"""

from __future__ import annotations

import threading
import time
import uuid

import anyio
import pytest

import jobs
import jobs.aio
from jobs import keys
from jobs.queue import rows
from jobs.engine import close
from jobs.engine.faults import FaultInjectingDatabase

T = "t1"
T2 = "t2"
J1 = "j1"
J2 = "j2"
WAIT = 30.0  # deadline for anything that must happen "soon"; never asserted as a duration


@pytest.fixture(autouse=True)
def type_timeouts(db):
    jobs.set_type_timeout(db, T, 2)
    jobs.set_type_timeout(db, T2, 3)


@pytest.fixture
def anyio_backend():
    return "asyncio"


def store_snapshot(db) -> list:
    """Every key and value under the job layer's prefix."""
    r = keys.ROOT.range()
    return [(bytes(k), bytes(v)) for k, v in db.get_range(r.start, r.stop)]


class NothingWritten:
    """``with NothingWritten(db, commit_version): ...`` asserts the block changed no job key
    and, on the embedded engine, committed nothing at all."""

    def __init__(self, db, commit_version):
        self.db = db
        self.commit_version = commit_version

    def __enter__(self):
        self.snapshot = store_snapshot(self.db)
        self.version = self.commit_version()
        return self

    def __exit__(self, *exc):
        if exc[0] is None or issubclass(exc[0], Exception):
            if self.version is not None:
                assert self.commit_version() == self.version, "a commit happened"
            assert store_snapshot(self.db) == self.snapshot, "job keys changed"
        return False


def state_and_data(db, type, job_id):
    info = jobs.get_job(db, type, job_id)
    return info.state, info.data


def running_ids(db, type=T) -> list[str]:
    return sorted(i.id for i in jobs.get_jobs(db, type) if i.state == "running")


def start_thread(fn, *args):
    """Run ``fn(*args)`` in a daemon thread; returns (thread, results list)."""
    results: list = []
    errors: list = []

    def target():
        try:
            results.append(fn(*args))
        except BaseException as exc:  # noqa: BLE001 - re-raised by the test
            errors.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.errors = errors
    thread.start()
    return thread, results


def join(thread) -> None:
    thread.join(WAIT)
    assert not thread.is_alive(), f"thread still running after {WAIT} s"
    if thread.errors:
        raise thread.errors[0]


# --- add / remove ---------------------------------------------------------------------------


def test_add_remove_pending(db, app):
    jobs.add(db, T, J1)
    info = jobs.get_job(db, T, J1)
    assert info == jobs.JobInfo(T, J1, "pending", {}, 0.0)
    jobs.remove(db, T, J1)
    with pytest.raises(jobs.NotFound):
        jobs.get_job(db, T, J1)

    # with data, in a transaction of the caller
    data = {"x": 42}

    @jobs.transactional
    def add_in(tr):
        jobs.add(tr, T2, J2, data)

    add_in(db)
    assert state_and_data(db, T2, J2) == ("pending", data)
    jobs.remove(db, T2, J2)
    assert jobs.get_jobs(db) == []
    assert jobs.pending_count(db, T2) == 0


def test_remove_in_every_state(db):
    for job_id in ("p", "r", "f"):
        jobs.add(db, T, job_id, {"id": job_id})
    held = {job.id: job for job in (jobs.accept(db, T, timeout=0) for _ in range(3))}
    jobs.finish(db, held["f"])
    jobs.release(db, held["p"])
    states = {i.id: i.state for i in jobs.get_jobs(db, T)}
    assert states == {"f": "finished", "p": "pending", "r": "running"}
    for job_id in ("p", "r", "f"):
        jobs.remove(db, T, job_id)
        with pytest.raises(jobs.NotFound):
            jobs.get_job_state(db, T, job_id)
    assert jobs.get_jobs(db) == []
    assert jobs.get_active_jobs_ids(db, T) == []
    assert jobs.pending_count(db, T) == 0
    assert jobs.accept(db, T, timeout=0) is None


def test_add_remove_errors(db, commit_version):
    with NothingWritten(db, commit_version):
        with pytest.raises(jobs.NotFound):
            jobs.remove(db, T, "x")
        with pytest.raises(jobs.NotFound):
            jobs.remove(db, "no-such-type", "x")
        with pytest.raises(jobs.JobDataError):
            jobs.add(db, T, J1, {1: 2})  # not JSON: a non-string key
        with pytest.raises(jobs.NoTypeTimeout, match="x"):
            jobs.add(db, "x", J1, {})
        for read in (jobs.get_job, jobs.get_job_data, jobs.get_job_state):
            with pytest.raises(jobs.NotFound, match=J1):
                read(db, T, J1)
    jobs.add(db, T, J1, {})
    jobs.add(db, T, J1, {})
    jobs.remove(db, T, J1)
    with pytest.raises(jobs.NotFound):
        jobs.remove(db, T, J1)


def test_add_with_the_same_scheduled_time_is_read_only(db, commit_version):
    jobs.add(db, T, J1, {"v": 1})
    probe = FaultInjectingDatabase(db)  # no faults: counts the commits that write
    with NothingWritten(db, commit_version):
        jobs.add(db, T, J1, {"v": 1})
        jobs.add(db, T, J1, {"v": 2})  # same time: not even the data is replaced
        jobs.add(probe, T, J1)

        @jobs.transactional
        def readd(tr):
            jobs.add(tr, T, J1, {"v": 3}, 0)

        readd(probe)
    assert probe.commits == 0
    assert jobs.get_job(db, T, J1) == jobs.JobInfo(T, J1, "pending", {"v": 1}, 0.0)
    assert jobs.pending_count(db, T) == 1


# --- re-adding an existing job -----------------------------------------------------------------


def test_readd_pending_at_another_time_replaces_time_and_data(db):
    jobs.add(db, T, J1, {"test": 1})
    jobs.add(db, T, J1, {"test": 2}, 6)
    assert jobs.get_job(db, T, J1) == jobs.JobInfo(T, J1, "pending", {"test": 2}, 6.0)
    # the old queue entry is gone: one pending job, at 6
    assert jobs.pending_count(db, T) == 1
    assert jobs.pending_count(db, T, max_sched_time=5.99) == 0
    assert jobs.pending_count(db, T, max_sched_time=6) == 1
    job = jobs.accept(db, T, timeout=0)
    assert (job.id, job.data) == (J1, {"test": 2})
    assert jobs.accept(db, T, timeout=0) is None


def test_readd_running_flags_it_and_ignores_the_data(db):
    jobs.add(db, T, J1, {"test": 1})
    job = jobs.accept(db, T, timeout=0)
    jobs.add(db, T, J1, {"test": 2}, 6)
    assert jobs.get_job(db, T, J1) == jobs.JobInfo(T, J1, "running", {"test": 1}, 6.0)
    assert jobs.pending_count(db, T) == 0
    assert jobs.is_resubmitted(jobs.update(db, job))
    jobs.finish(db, job)
    assert jobs.get_job(db, T, J1) == jobs.JobInfo(T, J1, "pending", {"test": 1}, 6.0)
    again = jobs.accept(db, T, timeout=0)
    assert (again.id, again.data) == (J1, {"test": 1})
    assert not jobs.is_resubmitted(again)


def test_readd_running_then_finish_with_data_keeps_the_workers_data(db):
    jobs.add(db, T, J1, {"test": 1})
    job = jobs.accept(db, T, timeout=0)
    jobs.add(db, T, J1, {"test": 2}, 6)
    jobs.finish(db, job, {"result": 3})
    assert jobs.get_job(db, T, J1) == jobs.JobInfo(T, J1, "pending", {"result": 3}, 6.0)


def test_readd_finished_reenqueues_with_the_new_data(db):
    jobs.add(db, T, J1, {"test": 1})
    job = jobs.accept(db, T, timeout=0)
    jobs.finish(db, job)
    assert state_and_data(db, T, J1) == ("finished", {"test": 1})
    jobs.add(db, T, J1, {"test": 2}, 6)
    assert jobs.get_job(db, T, J1) == jobs.JobInfo(T, J1, "pending", {"test": 2}, 6.0)
    again = jobs.accept(db, T, timeout=0)
    assert (again.id, again.data) == (J1, {"test": 2})
    # the worker that finished it before holds nothing now
    with pytest.raises(jobs.Halt):
        jobs.update(db, job)


def test_resubmit_as_job_creator_by_readding(db):
    """couch_jobs' resubmit_as_job_creator: re-adding at 15, 16, 17, 18 walks the job
    through pending, running (flagged), pending, finished and pending again."""
    data = {"x": 42}
    jobs.add(db, T, J1, data, 15)
    jobs.add(db, T, J1, data, 16)  # pending: rescheduled, not flagged
    assert jobs.get_job(db, T, J1)[2:5:2] == ("pending", 16.0)
    job1 = jobs.accept(db, T, timeout=0)
    assert job1.data == data and not jobs.is_resubmitted(job1)

    jobs.add(db, T, J1, data, 17)  # running: flagged
    assert jobs.get_job(db, T, J1)[2:5:2] == ("running", 17.0)
    assert jobs.is_resubmitted(jobs.update(db, job1))
    jobs.finish(db, job1)
    assert jobs.get_job(db, T, J1)[2:5:2] == ("pending", 17.0)

    job2 = jobs.accept(db, T, timeout=0)
    jobs.finish(db, job2)
    assert jobs.get_job(db, T, J1)[2:5:2] == ("finished", 17.0)
    jobs.add(db, T, J1, data, 18)
    assert jobs.get_job(db, T, J1)[2:5:2] == ("pending", 18.0)


# --- reading jobs -------------------------------------------------------------------------------


def test_get_job_data_and_state(db):
    data = {"x": 42}
    jobs.add(db, T, J1, data)
    assert jobs.get_job_data(db, T, J1) == data
    assert jobs.get_job_state(db, T, J1) == "pending"
    jobs.remove(db, T, J1)
    with pytest.raises(jobs.NotFound):
        jobs.get_job_data(db, T, J1)
    with pytest.raises(jobs.NotFound):
        jobs.get_job_state(db, T, J1)


def test_get_job_and_get_jobs_sorted(db):
    jobs.add(db, T2, "b", {"n": 1})
    jobs.add(db, T2, "a", {"n": 2}, 12.5)
    jobs.add(db, T, "b", {"n": 3})
    jobs.add(db, T, "a", {"n": 4})
    expected = [
        jobs.JobInfo(T, "a", "pending", {"n": 4}, 0.0),
        jobs.JobInfo(T, "b", "pending", {"n": 3}, 0.0),
        jobs.JobInfo(T2, "a", "pending", {"n": 2}, 12.5),
        jobs.JobInfo(T2, "b", "pending", {"n": 1}, 0.0),
    ]
    assert jobs.get_jobs(db) == expected
    assert jobs.get_jobs(db, T2) == expected[2:]
    assert jobs.get_jobs(db, "no-such-type") == []
    info = jobs.get_job(db, T2, "a")
    assert info == expected[2]
    assert (info.type, info.id, info.state, info.data, info.scheduled_time) == (T2, "a", "pending", {"n": 2}, 12.5)

    job = jobs.accept(db, T2, max_sched_time=1, timeout=0)  # the one at 0
    assert job.id == "b"
    assert jobs.get_jobs(db, T2) == [expected[2], expected[3]._replace(state="running")]
    jobs.finish(db, job, {"done": True})
    assert jobs.get_jobs(db)[3] == jobs.JobInfo(T2, "b", "finished", {"done": True}, 0.0)


def test_type_timeouts_and_get_types(db):
    assert jobs.get_type_timeout(db, T) == 2.0
    assert isinstance(jobs.get_type_timeout(db, T), float)
    assert jobs.get_types(db) == [T, T2]
    jobs.set_type_timeout(db, "t3", 8)
    jobs.set_type_timeout(db, "a0", 0.5)
    assert jobs.get_types(db) == ["a0", T, T2, "t3"]
    assert jobs.get_type_timeout(db, "t3") == 8.0
    jobs.set_type_timeout(db, "t3", 9.5)  # set again: replaced
    assert jobs.get_type_timeout(db, "t3") == 9.5
    jobs.clear_type_timeout(db, "t3")
    assert jobs.get_type_timeout(db, "t3") is None
    assert jobs.get_types(db) == ["a0", T, T2]
    with pytest.raises(jobs.NoTypeTimeout):
        jobs.add(db, "t3", J1)
    jobs.clear_type_timeout(db, "never-set")  # clearing a missing timeout is fine
    assert jobs.get_type_timeout(db, "never-set") is None


def test_get_active_jobs_ids_in_order_of_last_activity(db):
    for job_id in ("a", "b", "c"):
        jobs.add(db, T, job_id, {})
    jobs.add(db, T2, "other", {})
    assert jobs.get_active_jobs_ids(db, T) == []
    first = jobs.accept(db, T, timeout=0)
    second = jobs.accept(db, T, timeout=0)
    assert jobs.get_active_jobs_ids(db, T) == [first.id, second.id]
    jobs.update(db, first)  # a heartbeat moves it to the most recent end
    assert jobs.get_active_jobs_ids(db, T) == [second.id, first.id]
    jobs.finish(db, second)
    assert jobs.get_active_jobs_ids(db, T) == [first.id]
    jobs.accept(db, T2, timeout=0)
    assert jobs.get_active_jobs_ids(db, T) == [first.id]
    assert jobs.get_active_jobs_ids(db, T2) == ["other"]


def test_pending_count_with_max_sched_time_and_limit(db):
    for n, stime in enumerate([0, 100, 100, 200, 300]):
        jobs.add(db, T, f"j{n}", {}, stime)
    future = time.time() + 3600
    jobs.add(db, T, "future", {}, future)
    jobs.add(db, T2, "other", {})
    assert jobs.pending_count(db, T) == 6  # None: every pending job, future ones too
    assert jobs.pending_count(db, T, max_sched_time=time.time()) == 5
    assert jobs.pending_count(db, T, max_sched_time=0) == 1
    assert jobs.pending_count(db, T, max_sched_time=99.5) == 1
    assert jobs.pending_count(db, T, max_sched_time=100) == 3  # inclusive
    assert jobs.pending_count(db, T, max_sched_time=future) == 6
    assert jobs.pending_count(db, T, limit=4) == 4
    assert jobs.pending_count(db, T, limit=10) == 6
    assert jobs.pending_count(db, T, limit=0) == 0
    assert jobs.pending_count(db, T, max_sched_time=100, limit=2) == 2
    assert jobs.pending_count(db, T, max_sched_time=100, limit=5) == 3
    assert jobs.pending_count(db, T2) == 1
    assert jobs.pending_count(db, "no-such-type") == 0
    job = jobs.accept(db, T, max_sched_time=0, timeout=0)
    assert job.id == "j0"
    assert jobs.pending_count(db, T) == 5
    assert jobs.pending_count(db, T, max_sched_time=100) == 2


# --- resubmit ----------------------------------------------------------------------------


def test_resubmit_as_creator_with_a_job_info(db, commit_version):
    jobs.add(db, T, J1, {"a": 1})
    info = jobs.get_job(db, T, J1)
    assert jobs.resubmit(db, info, 50) is info  # a JobInfo is returned as given
    assert jobs.get_job(db, T, J1) == jobs.JobInfo(T, J1, "pending", {"a": 1}, 50.0)
    jobs.resubmit(db, info, data={"a": 2})  # time kept, data replaced
    assert jobs.get_job(db, T, J1) == jobs.JobInfo(T, J1, "pending", {"a": 2}, 50.0)
    assert jobs.pending_count(db, T) == 1
    with NothingWritten(db, commit_version):
        jobs.resubmit(db, jobs.get_job(db, T, J1))  # pending, nothing changes: no write
        jobs.resubmit(db, jobs.get_job(db, T, J1), 50, {"a": 2})

    job = jobs.accept(db, T, timeout=0)
    jobs.resubmit(db, jobs.get_job(db, T, J1), 60, {"ignored": True})  # running: flagged
    assert jobs.get_job(db, T, J1) == jobs.JobInfo(T, J1, "running", {"a": 2}, 60.0)
    job = jobs.update(db, job)
    assert jobs.is_resubmitted(job)
    jobs.finish(db, job)
    assert jobs.get_job(db, T, J1) == jobs.JobInfo(T, J1, "pending", {"a": 2}, 60.0)

    job = jobs.accept(db, T, timeout=0)
    jobs.finish(db, job, {"result": 3})
    jobs.resubmit(db, jobs.get_job(db, T, J1), 70)  # finished: pending again
    assert jobs.get_job(db, T, J1) == jobs.JobInfo(T, J1, "pending", {"result": 3}, 70.0)

    jobs.remove(db, T, J1)
    with pytest.raises(jobs.NotFound):
        jobs.resubmit(db, info)


def test_resubmit_as_worker_enqueues_the_job(db):
    jobs.add(db, T, J1, {})
    job1 = jobs.accept(db, T, timeout=0)
    again = jobs.resubmit(db, job1, 6)
    assert isinstance(again, jobs.Job) and jobs.is_resubmitted(again)
    assert (again.id, again.data) == (J1, {})
    assert jobs.get_job(db, T, J1)[2:5:2] == ("running", 6.0)
    jobs.finish(db, job1)
    assert jobs.get_job(db, T, J1)[2:5:2] == ("pending", 6.0)
    job2 = jobs.accept(db, T, timeout=0)
    jobs.finish(db, job2)
    assert jobs.get_job_state(db, T, J1) == "finished"


def test_resubmit_finished_updates_job_data(db):
    jobs.add(db, T, J1, {"test": 1})
    job1 = jobs.accept(db, T, timeout=0)
    jobs.finish(db, job1)
    out = jobs.resubmit(db, job1, 6, {"test": 2})
    assert not jobs.is_resubmitted(out) and out.data == {"test": 2}
    assert jobs.get_job(db, T, J1) == jobs.JobInfo(T, J1, "pending", {"test": 2}, 6.0)
    assert jobs.accept(db, T, timeout=0).data == {"test": 2}


def test_resubmit_running_does_not_update_job_data(db):
    jobs.add(db, T, J1, {"test": 1})
    job1 = jobs.accept(db, T, timeout=0)
    out = jobs.resubmit(db, job1, 6, {"test": 2})
    assert jobs.is_resubmitted(out) and out.data == {"test": 1}
    jobs.finish(db, job1)
    assert jobs.accept(db, T, timeout=0).data == {"test": 1}


def test_resubmit_custom_schedtime(db):
    jobs.add(db, T, J1, {}, 7)
    job = jobs.accept(db, T, timeout=0)
    jobs.resubmit(db, job, 9)
    jobs.finish(db, job)
    assert jobs.get_job(db, T, J1)[2:5:2] == ("pending", 9.0)


def test_resubmit_running_without_a_time_keeps_its_time(db):
    jobs.add(db, T, J1, {}, 7)
    job = jobs.accept(db, T, timeout=0)
    jobs.resubmit(db, job)
    jobs.finish(db, job)
    assert jobs.get_job(db, T, J1)[2:5:2] == ("pending", 7.0)


def test_resubmit_without_data_keeps_the_data(db):
    jobs.add(db, T, J1, {"in": 1})
    jobs.resubmit(db, jobs.get_job(db, T, J1), 5)  # pending
    assert state_and_data(db, T, J1) == ("pending", {"in": 1})
    job = jobs.accept(db, T, timeout=0)
    job = jobs.update(db, job, {"progress": 2})
    out = jobs.resubmit(db, job)  # running
    assert out.data == {"progress": 2}
    jobs.finish(db, job)
    assert state_and_data(db, T, J1) == ("pending", {"progress": 2})
    job = jobs.accept(db, T, timeout=0)
    jobs.finish(db, job, {"out": 3})

    # finished: couch_jobs crashes here; this port re-enqueues with the finished data
    out = jobs.resubmit(db, job)
    assert not jobs.is_resubmitted(out)
    assert jobs.get_job(db, T, J1) == jobs.JobInfo(T, J1, "pending", {"out": 3}, 5.0)
    job = jobs.accept(db, T, timeout=0)
    assert job.data == {"out": 3}
    jobs.finish(db, job)
    jobs.resubmit(db, jobs.get_job(db, T, J1))  # finished, through a JobInfo
    assert jobs.get_job(db, T, J1) == jobs.JobInfo(T, J1, "pending", {"out": 3}, 5.0)


def test_resubmit_of_a_finished_job_returns_the_data_it_will_run_with(db):
    """The Job that resubmit returns for a finished job carries the data the job was
    re-enqueued with (as it does when data is given), not the worker's older copy."""
    jobs.add(db, T, J1, {"in": 1})
    job = jobs.accept(db, T, timeout=0)
    jobs.finish(db, job, {"out": 3})
    out = jobs.resubmit(db, job)
    assert jobs.get_job_data(db, T, J1) == {"out": 3}
    assert out.data == {"out": 3}


# --- accept and finish ---------------------------------------------------------------------


def test_basic_accept_and_finish(db):
    jobs.add(db, T, J1, {})
    job = jobs.accept(db, T, timeout=0)
    assert isinstance(job, jobs.Job)
    assert (job.type, job.id, job.data) == (T, J1, {})
    assert jobs.get_job_state(db, T, J1) == "running"
    assert jobs.get_active_jobs_ids(db, T) == [J1]
    assert jobs.pending_count(db, T) == 0

    @jobs.transactional
    def finish_in(tr, data):
        jobs.finish(tr, job, data)

    with pytest.raises(jobs.JobDataError):
        finish_in(db, {1: 1})
    assert jobs.get_job_state(db, T, J1) == "running"
    finish_in(db, {"x": 42})
    assert state_and_data(db, T, J1) == ("finished", {"x": 42})
    assert jobs.get_active_jobs_ids(db, T) == []
    assert jobs.accept(db, T, timeout=0) is None


def test_finish_without_data_keeps_the_data(db):
    jobs.add(db, T, J1, {"in": 1})
    job = jobs.accept(db, T, timeout=0)
    jobs.update(db, job, {"progress": 1})
    jobs.finish(db, job)
    assert state_and_data(db, T, J1) == ("finished", {"progress": 1})


def test_accept_timeout_zero_returns_none(db):
    assert jobs.accept(db, T, timeout=0) is None
    jobs.add(db, T, "later", {}, time.time() + 3600)
    jobs.add(db, T2, "other-type", {})
    assert jobs.accept(db, T, timeout=0) is None
    assert jobs.accept(db, T, timeout=0.2) is None
    assert jobs.get_job_state(db, T, "later") == "pending"


def test_accept_blocking(db):
    """A waiting accept takes a job added after it started; a second one keeps waiting
    while there is nothing, then takes the next job added."""
    thread, results = start_thread(lambda: jobs.accept(db, T, timeout=WAIT))
    time.sleep(0.1)  # most likely waiting by now (not required)
    jobs.add(db, T, J1, {})
    join(thread)
    assert results[0] is not None and (results[0].id, results[0].data) == (J1, {})

    thread, results = start_thread(lambda: jobs.accept(db, T, timeout=WAIT))
    thread.join(0.5)
    assert thread.is_alive() and results == []  # nothing to take: still waiting
    jobs.add(db, T, J2, {})
    join(thread)
    assert results[0] is not None and results[0].id == J2
    assert running_ids(db) == [J1, J2]


def test_accept_blocking_wakes_for_a_job_added_by_another_thread(db):
    timer = threading.Timer(0.2, jobs.add, (db, T, J1, {"late": True}))
    timer.start()
    try:
        job = jobs.accept(db, T, timeout=WAIT)
    finally:
        timer.join(WAIT)
    assert job is not None and (job.id, job.data) == (J1, {"late": True})


def test_many_waiting_accepts_each_take_one_job(db):
    threads = [start_thread(lambda: jobs.accept(db, T, timeout=WAIT)) for _ in range(4)]
    time.sleep(0.1)
    for n in range(4):
        jobs.add(db, T, f"j{n}", {})
    got = []
    for thread, results in threads:
        join(thread)
        got.extend(results)
    assert sorted(job.id for job in got) == ["j0", "j1", "j2", "j3"]
    assert running_ids(db) == ["j0", "j1", "j2", "j3"]


def test_future_job_is_not_taken_early_and_wakes_a_waiting_accept(db):
    due = time.time() + 1.0
    jobs.add(db, T, "later", {"v": 1}, due)
    assert jobs.accept(db, T, timeout=0) is None  # not due yet
    assert jobs.pending_count(db, T, max_sched_time=time.time()) == 0
    job = jobs.accept(db, T, timeout=WAIT)  # wakes when it falls due, no new enqueue
    assert job is not None and job.id == "later"
    assert time.time() >= due  # not taken early
    assert jobs.get_job_state(db, T, "later") == "running"


def test_future_job_added_while_an_accept_waits(db):
    thread, results = start_thread(lambda: jobs.accept(db, T, timeout=WAIT))
    time.sleep(0.1)
    due = time.time() + 0.5
    jobs.add(db, T, "later", {}, due)
    join(thread)
    assert results[0] is not None and results[0].id == "later"
    returned_at = time.time()
    assert returned_at >= due


def test_accept_with_max_sched_time_does_not_wait_for_later_jobs(db):
    jobs.add(db, T, J1, {}, 5000)
    assert jobs.accept(db, T, max_sched_time=1000, timeout=0.3) is None
    assert jobs.get_job_state(db, T, J1) == "pending"


def test_accept_max_schedtime(db):
    jobs.add(db, T, J1, {}, 5000)
    jobs.add(db, T, J2, {}, 3000)
    assert jobs.accept(db, T, max_sched_time=1000, timeout=0) is None
    assert jobs.accept(db, T, max_sched_time=3000, timeout=0).id == J2  # inclusive
    assert jobs.accept(db, T, max_sched_time=9000, timeout=0).id == J1
    assert jobs.accept(db, T, max_sched_time=9000, timeout=0) is None


def test_accept_no_schedule(db):
    ids = [uuid.uuid4().hex for _ in range(25)]
    for job_id in ids:
        jobs.add(db, T, job_id, {"id": job_id})
    jobs.add(db, T, "scheduled", {}, 10)  # not at 0: no_schedule never takes it
    with pytest.raises(ValueError, match="no_schedule"):
        jobs.accept(db, T, no_schedule=True, max_sched_time=1)
    accepted = []
    for _ in ids:
        job = jobs.accept(db, T, no_schedule=True, timeout=0)
        assert job is not None and job.data == {"id": job.id}
        accepted.append(job.id)
    assert sorted(accepted) == sorted(ids)  # each exactly once
    assert jobs.accept(db, T, no_schedule=True, timeout=0) is None
    assert jobs.get_job_state(db, T, "scheduled") == "pending"
    assert running_ids(db) == sorted(ids)


# --- update ----------------------------------------------------------------------------


def test_job_processor_update(db):
    jobs.add(db, T, J1, {})
    job = jobs.accept(db, T, timeout=0)

    @jobs.transactional
    def update_in(tr, data=None):
        return jobs.update(tr, job, data)

    job = update_in(db, {"x": 1})
    assert isinstance(job, jobs.Job) and job.data == {"x": 1}
    assert state_and_data(db, T, J1) == ("running", {"x": 1})
    job = update_in(db)  # heartbeat only
    assert job.data == {"x": 1}
    assert state_and_data(db, T, J1) == ("running", {"x": 1})
    job = update_in(db, {"x": 2})
    with pytest.raises(jobs.JobDataError):
        update_in(db, {1: 1})
    assert state_and_data(db, T, J1) == ("running", {"x": 2})
    jobs.finish(db, job, {"x": 3})
    assert state_and_data(db, T, J1) == ("finished", {"x": 3})


def test_update_heartbeat_renews_the_activity(db):
    jobs.add(db, T, "a", {})
    jobs.add(db, T, "b", {})
    a = jobs.accept(db, T, timeout=0)
    b = jobs.accept(db, T, timeout=0)

    @jobs.transactional
    def row_of(tr, job_id):
        return rows.get(tr, T, job_id)

    row_before = row_of(db, a.id)
    jobs.update(db, a)
    row_after = row_of(db, a.id)
    assert row_after.seq != row_before.seq and row_after.lock == row_before.lock
    assert jobs.get_active_jobs_ids(db, T) == [b.id, a.id]
    jobs.update(db, b)
    assert jobs.get_active_jobs_ids(db, T) == [a.id, b.id]


def test_is_resubmitted_after_update(db):
    jobs.add(db, T, J1, {})
    job = jobs.accept(db, T, timeout=0)
    assert not jobs.is_resubmitted(job)
    job = jobs.update(db, job)
    assert not jobs.is_resubmitted(job)
    jobs.add(db, T, J1, {}, 20)  # the creator re-adds it while it runs
    assert not jobs.is_resubmitted(job)  # as of this Job's last update
    renewed = jobs.update(db, job)
    assert jobs.is_resubmitted(renewed)
    assert jobs.is_resubmitted(jobs.update(db, renewed, {"p": 1}))
    jobs.finish(db, renewed)
    assert jobs.get_job(db, T, J1)[2:5:2] == ("pending", 20.0)
    job = jobs.accept(db, T, timeout=0)
    assert not jobs.is_resubmitted(jobs.update(db, job))
    jobs.resubmit(db, jobs.get_job(db, T, J1))  # flagged by a creator's resubmit
    assert jobs.is_resubmitted(jobs.update(db, job))


# --- the JobLock fence -----------------------------------------------------------------------


def test_halt_after_remove(db, commit_version):
    jobs.add(db, T, J1, {"v": 1})
    job = jobs.accept(db, T, timeout=0)
    jobs.remove(db, T, J1)
    with pytest.raises(jobs.NotFound):
        jobs.remove(db, T, J1)
    with NothingWritten(db, commit_version):
        for call in (
            lambda: jobs.update(db, job),
            lambda: jobs.update(db, job, {"v": 2}),
            lambda: jobs.finish(db, job),
            lambda: jobs.finish(db, job, {"v": 3}),
            lambda: jobs.release(db, job),
        ):
            with pytest.raises(jobs.Halt, match=J1):
                call()
    with pytest.raises(jobs.NotFound):
        jobs.get_job(db, T, J1)
    assert jobs.get_active_jobs_ids(db, T) == []


def test_halt_after_remove_and_readd_of_the_same_id(db, commit_version):
    jobs.add(db, T, J1, {"v": 1})
    old = jobs.accept(db, T, timeout=0)
    jobs.remove(db, T, J1)
    jobs.add(db, T, J1, {"v": 2})
    with NothingWritten(db, commit_version):
        with pytest.raises(jobs.Halt):
            jobs.finish(db, old, {"stale": True})
    assert state_and_data(db, T, J1) == ("pending", {"v": 2})
    new = jobs.accept(db, T, timeout=0)
    with NothingWritten(db, commit_version):
        with pytest.raises(jobs.Halt):
            jobs.update(db, old, {"stale": True})
        with pytest.raises(jobs.Halt):
            jobs.finish(db, old)
    jobs.finish(db, new, {"v": 3})
    assert state_and_data(db, T, J1) == ("finished", {"v": 3})


def test_halt_after_another_worker_took_the_job(db, commit_version):
    jobs.add(db, T, J1, {"v": 1})
    a = jobs.accept(db, T, timeout=0)
    jobs.release(db, a)
    b = jobs.accept(db, T, timeout=0)
    assert b.id == J1 and b.lock != a.lock
    with NothingWritten(db, commit_version):
        for call in (
            lambda: jobs.update(db, a),
            lambda: jobs.update(db, a, {"v": "a"}),
            lambda: jobs.finish(db, a, {"v": "a"}),
            lambda: jobs.finish(db, a),
            lambda: jobs.release(db, a),
        ):
            with pytest.raises(jobs.Halt):
                call()
    assert state_and_data(db, T, J1) == ("running", {"v": 1})
    assert jobs.get_active_jobs_ids(db, T) == [J1]
    b = jobs.update(db, b, {"v": "b"})
    jobs.finish(db, b)
    assert state_and_data(db, T, J1) == ("finished", {"v": "b"})


def test_halt_after_the_job_was_finished_resubmitted_and_taken_again(db, commit_version):
    jobs.add(db, T, J1, {})
    a = jobs.accept(db, T, timeout=0)
    jobs.resubmit(db, a)
    jobs.finish(db, a)
    b = jobs.accept(db, T, timeout=0)
    with NothingWritten(db, commit_version):
        with pytest.raises(jobs.Halt):
            jobs.update(db, a)
        with pytest.raises(jobs.Halt):
            jobs.finish(db, a)
    jobs.finish(db, b)


def test_release(db):
    jobs.add(db, T, J1, {"v": 1}, 100)
    a = jobs.accept(db, T, timeout=0)
    a = jobs.update(db, a, {"v": 2})
    jobs.release(db, a)
    assert jobs.get_job(db, T, J1) == jobs.JobInfo(T, J1, "pending", {"v": 2}, 100.0)
    assert jobs.get_active_jobs_ids(db, T) == []
    assert jobs.pending_count(db, T, max_sched_time=100) == 1
    with pytest.raises(jobs.Halt):
        jobs.release(db, a)
    with pytest.raises(jobs.Halt):
        jobs.update(db, a)
    with pytest.raises(jobs.Halt):
        jobs.finish(db, a)
    b = jobs.accept(db, T, timeout=0)
    assert (b.id, b.data) == (J1, {"v": 2})
    jobs.finish(db, b)
    with pytest.raises(jobs.Halt):  # released jobs are not finished by their old worker
        jobs.release(db, b)
    assert jobs.get_job_state(db, T, J1) == "finished"


def test_release_keeps_a_pending_resubmission_time(db):
    jobs.add(db, T, J1, {}, 7)
    job = jobs.accept(db, T, timeout=0)
    jobs.add(db, T, J1, {}, 8)  # flagged, at 8
    jobs.release(db, job)
    assert jobs.get_job(db, T, J1) == jobs.JobInfo(T, J1, "pending", {}, 8.0)
    assert jobs.pending_count(db, T) == 1
    again = jobs.accept(db, T, timeout=0)
    assert not jobs.is_resubmitted(jobs.update(db, again))


# --- composition with the application's transaction -----------------------------------------


def test_finish_in_the_application_transaction(db, app, commit_version):
    jobs.add(db, T, J1, {})
    jobs.add(db, T, J2, {})
    first = jobs.accept(db, T, timeout=0)
    second = jobs.accept(db, T, timeout=0)

    @jobs.transactional
    def work(tr, job):
        assert T in jobs.get_types(tr)  # job-layer reads join the transaction too
        tr.set(app.pack((job.id,)), b"output")
        jobs.finish(tr, job, {"d": 1})

    assert jobs.get_job_data(db, T, first.id) == {}
    work(db, first)
    assert db.get(app.pack((first.id,))) == b"output"
    assert state_and_data(db, T, first.id) == ("finished", {"d": 1})

    jobs.remove(db, T, second.id)
    with NothingWritten(db, commit_version):
        with pytest.raises(jobs.Halt):
            work(db, second)
    assert db.get(app.pack((second.id,))) is None  # the app's write did not commit


def test_finish_in_the_application_transaction_after_the_job_moved_on(db, app):
    jobs.add(db, T, J1, {})
    a = jobs.accept(db, T, timeout=0)
    jobs.release(db, a)
    b = jobs.accept(db, T, timeout=0)

    @jobs.transactional
    def work(tr, job, value):
        tr.set(app.pack(("out",)), value)
        jobs.finish(tr, job)

    with pytest.raises(jobs.Halt):
        work(db, a, b"from a")
    assert db.get(app.pack(("out",))) is None
    work(db, b, b"from b")
    assert db.get(app.pack(("out",))) == b"from b"


def test_add_inside_an_application_transaction(db, app):
    @jobs.transactional
    def place_order(tr, n, fail=False):
        tr.set(app.pack(("order", n)), b"placed")
        jobs.add(tr, T, f"ship-{n}", {"order": n})
        if fail:
            raise RuntimeError("application failure after add")

    place_order(db, 1)
    assert db.get(app.pack(("order", 1))) == b"placed"
    assert state_and_data(db, T, "ship-1") == ("pending", {"order": 1})

    with pytest.raises(RuntimeError):
        place_order(db, 2, fail=True)
    assert db.get(app.pack(("order", 2))) is None
    with pytest.raises(jobs.NotFound):
        jobs.get_job(db, T, "ship-2")

    @jobs.transactional
    def order_of_unknown_type(tr):
        tr.set(app.pack(("order", 3)), b"placed")
        jobs.add(tr, "no-timeout", "ship-3", {})

    with pytest.raises(jobs.NoTypeTimeout):
        order_of_unknown_type(db)
    assert db.get(app.pack(("order", 3))) is None
    assert jobs.pending_count(db, T) == 1


def test_calls_on_a_transaction_join_it_and_do_not_commit(db):
    tr = db.create_transaction()
    try:
        jobs.add(tr, T, J1, {"v": 1})
        assert jobs.get_job_state(tr, T, J1) == "pending"  # read-your-writes
        assert jobs.pending_count(tr, T) == 1
        with pytest.raises(jobs.NotFound):
            jobs.get_job(db, T, J1)  # not committed by add
        tr.commit().wait()
    finally:
        close(tr)
    assert state_and_data(db, T, J1) == ("pending", {"v": 1})


# --- async twins -----------------------------------------------------------------------------


@pytest.mark.anyio
async def test_aio_add_accept_update_finish(db):
    await jobs.aio.add(db, T, J1, {"x": 1})
    assert await jobs.aio.get_job_state(db, T, J1) == "pending"
    job = await jobs.aio.accept(db, T, timeout=WAIT)
    assert (job.id, job.data) == (J1, {"x": 1})
    job = await jobs.aio.update(db, job, {"x": 2})
    assert await jobs.aio.get_active_jobs_ids(db, T) == [J1]
    await jobs.aio.finish(db, job)
    assert await jobs.aio.get_job(db, T, J1) == jobs.JobInfo(T, J1, "finished", {"x": 2}, 0.0)
    assert await jobs.aio.accept(db, T, timeout=0) is None
    with pytest.raises(jobs.Halt):
        await jobs.aio.update(db, job)


@pytest.mark.anyio
async def test_aio_waiting_accept_wakes_on_add(db):
    got = []

    async def worker():
        got.append(await jobs.aio.accept(db, T, timeout=WAIT))

    with anyio.fail_after(WAIT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(worker)
            await anyio.sleep(0.1)
            await jobs.aio.add(db, T, J1, {"late": True})
    assert got[0] is not None and (got[0].id, got[0].data) == (J1, {"late": True})


@pytest.mark.anyio
async def test_aio_cancelled_waiting_accept_takes_nothing(db):
    with anyio.move_on_after(0.3) as scope:
        await jobs.aio.accept(db, T)
    assert scope.cancelled_caught
    await jobs.aio.add(db, T, J1, {})
    assert await jobs.aio.get_job_state(db, T, J1) == "pending"
    assert await jobs.aio.get_active_jobs_ids(db, T) == []
    job = await jobs.aio.accept(db, T, timeout=0)
    assert job.id == J1


@pytest.mark.anyio
async def test_aio_accept_cancelled_at_any_point_leaves_no_job_running(db):
    """An accept cancelled as a job arrives either returned the job (the caller holds it) or
    took nothing: no job is left running that nobody holds."""
    for n, delay in enumerate([0, 0, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05]):
        got: list = []

        async def taker():
            got.append(await jobs.aio.accept(db, T, timeout=WAIT))

        with anyio.fail_after(WAIT):
            async with anyio.create_task_group() as tg:
                tg.start_soon(taker)
                await anyio.sleep(0.02)
                await jobs.aio.add(db, T, f"j{n}", {})
                await anyio.sleep(delay)
                tg.cancel_scope.cancel()
        held = sorted(job.id for job in got)
        assert running_ids(db) == held
        assert sorted(jobs.get_active_jobs_ids(db, T)) == held
        for job in got:
            await jobs.aio.finish(db, job)
    states = [info.state for info in jobs.get_jobs(db, T)]
    assert set(states) <= {"pending", "finished"} and len(states) == 8


def test_is_held_follows_the_lock(db):
    jobs.add(db, T, J1, {})
    a = jobs.accept(db, T, timeout=0)
    assert jobs.is_held(db, a)
    jobs.release(db, a)
    assert not jobs.is_held(db, a)
    b = jobs.accept(db, T, timeout=0)
    assert jobs.is_held(db, b) and not jobs.is_held(db, a)  # taken by another worker
    jobs.finish(db, b)
    assert not jobs.is_held(db, b)
    c = jobs.accept(db, T, timeout=0) if jobs.resubmit(db, b) else None
    jobs.remove(db, T, J1)
    assert not jobs.is_held(db, c)
