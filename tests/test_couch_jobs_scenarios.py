"""couch_jobs' own test scenarios (apache/couchdb ``fdbarchive``,
``src/couch_jobs/test/couch_jobs_tests.erl``), ported to this API, on every engine.

Differences from the originals, all on purpose: types are strings only; couch_jobs'
``accept`` takes every scheduled time by default while ours takes jobs due by now, so the
small scheduled times below (seconds after 1970) are due; ``is_resubmitted`` is read from
the Job an ``update`` returns (JobInfo has no flag).  Scenarios of the activity monitor and
subscriptions belong to the monitor's tests.
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest

import jobs

T1, T2 = "t1", "t2"
J1, J2 = "j1", "j2"
WAIT = 30.0  # generous bound for threads; never a timing assertion


@pytest.fixture(autouse=True)
def types(db):
    jobs.set_type_timeout(db, T1, 2)
    jobs.set_type_timeout(db, T2, 3)


def job_state(db, type=T1, job_id=J1):
    info = jobs.get_job(db, type, job_id)
    return info.state, info.scheduled_time


def test_add_remove_pending(db):
    jobs.add(db, T1, J1, {})
    info = jobs.get_job(db, T1, J1)
    assert (info.state, info.data) == ("pending", {})
    jobs.remove(db, T1, J1)

    data = {"x": 42}  # in a transaction too
    jobs.transactional(lambda tr: jobs.add(tr, T2, J2, data))(db)
    info = jobs.get_job(db, T2, J2)
    assert (info.state, info.data) == ("pending", data)
    jobs.remove(db, T2, J2)
    assert jobs.get_jobs(db) == []


def test_get_job_data_and_state(db):
    data = {"x": 42}
    jobs.add(db, T1, J1, data)
    assert jobs.get_job_data(db, T1, J1) == data
    assert jobs.get_job_state(db, T1, J1) == "pending"
    jobs.remove(db, T1, J1)
    with pytest.raises(jobs.NotFound):
        jobs.get_job_data(db, T1, J1)
    with pytest.raises(jobs.NotFound):
        jobs.get_job_state(db, T1, J1)


def test_add_remove_errors(db):
    with pytest.raises(jobs.NotFound):
        jobs.remove(db, "999", "x")
    with pytest.raises(jobs.JobDataError):
        jobs.add(db, T1, J1, {1: 2})
    with pytest.raises(jobs.NoTypeTimeout):
        jobs.add(db, "x", J1, {})
    jobs.add(db, T1, J1, {})
    jobs.add(db, T1, J1, {})
    jobs.remove(db, T1, J1)
    assert jobs.get_jobs(db) == []


def test_add_with_the_same_scheduled_time_is_read_only(db):
    jobs.add(db, T1, J1, {"v": 1})
    tr = db.create_transaction()
    jobs.add(tr, T1, J1, {"v": 2})  # same time (0): nothing to do, data not replaced
    tr.commit().wait()
    assert tr.get_committed_version() == -1  # FDB's mark of a read-only commit
    assert jobs.get_job_data(db, T1, J1) == {"v": 1}


def test_resubmit_as_job_creator(db):
    data = {"x": 42}
    jobs.add(db, T1, J1, data, 15)

    jobs.add(db, T1, J1, data, 16)  # pending: only rescheduled
    assert job_state(db) == ("pending", 16)

    job1 = jobs.accept(db, T1, timeout=0)
    assert job1.data == data

    jobs.add(db, T1, J1, data, 17)  # running: flagged to be resubmitted
    assert job_state(db) == ("running", 17)
    assert jobs.is_resubmitted(jobs.update(db, job1))

    jobs.finish(db, job1)  # the flag makes it pending again
    assert job_state(db) == ("pending", 17)

    job2 = jobs.accept(db, T1, timeout=0)
    jobs.finish(db, job2)
    assert job_state(db) == ("finished", 17)
    jobs.add(db, T1, J1, data, 18)  # finished: re-enqueued
    assert job_state(db) == ("pending", 18)


def test_basic_accept_and_finish(db):
    jobs.add(db, T1, J1, {})
    job = jobs.accept(db, T1, timeout=0)
    assert (job.type, job.id, job.data) == (T1, J1, {})
    assert jobs.get_job_state(db, T1, J1) == "running"
    with pytest.raises(jobs.JobDataError):  # data checked in finish too
        jobs.transactional(lambda tr: jobs.finish(tr, job, {1: 1}))(db)
    assert jobs.get_job_state(db, T1, J1) == "running"
    data = {"x": 42}
    jobs.transactional(lambda tr: jobs.finish(tr, job, data))(db)
    info = jobs.get_job(db, T1, J1)
    assert (info.state, info.data) == ("finished", data)


def _accept_in_thread(db, type=T1):
    """Start ``accept(db, type)`` in a thread; returns (thread, result list)."""
    result: list = []
    thread = threading.Thread(target=lambda: result.append(jobs.accept(db, type, timeout=WAIT)), daemon=True)
    thread.start()
    return thread, result


def test_accept_blocking(db):
    thread, result = _accept_in_thread(db)
    jobs.add(db, T1, J1, {})
    thread.join(WAIT)
    assert result and result[0] is not None and (result[0].id, result[0].data) == (J1, {})

    thread, result = _accept_in_thread(db)
    thread.join(0.3)
    assert thread.is_alive() and not result  # nothing to take: still waiting
    jobs.add(db, T1, J2, {})
    thread.join(WAIT)
    assert result and result[0] is not None and result[0].id == J2


def test_job_processor_update(db):
    jobs.add(db, T1, J1, {})
    job = jobs.accept(db, T1, timeout=0)

    job = jobs.transactional(lambda tr: jobs.update(tr, job, {"x": 1}))(db)
    assert isinstance(job, jobs.Job) and job.data == {"x": 1}
    assert (jobs.get_job_state(db, T1, J1), jobs.get_job_data(db, T1, J1)) == ("running", {"x": 1})

    job = jobs.transactional(lambda tr: jobs.update(tr, job))(db)  # no data: kept
    assert jobs.get_job_data(db, T1, J1) == {"x": 1}

    job = jobs.transactional(lambda tr: jobs.update(tr, job, {"x": 2}))(db)
    with pytest.raises(jobs.JobDataError):
        jobs.transactional(lambda tr: jobs.update(tr, job, {1: 1}))(db)
    assert (jobs.get_job_state(db, T1, J1), jobs.get_job_data(db, T1, J1)) == ("running", {"x": 2})

    jobs.finish(db, job, {"x": 3})  # finish may replace the data as well
    assert (jobs.get_job_state(db, T1, J1), jobs.get_job_data(db, T1, J1)) == ("finished", {"x": 3})


def test_resubmit_enqueues_job(db):
    jobs.add(db, T1, J1, {})
    job1 = jobs.accept(db, T1, timeout=0)
    assert jobs.is_resubmitted(jobs.resubmit(db, job1, 6))
    jobs.finish(db, job1)
    assert job_state(db) == ("pending", 6)
    job2 = jobs.accept(db, T1, timeout=0)
    jobs.finish(db, job2)
    assert job_state(db) == ("finished", 6)


def test_resubmit_finished_updates_job_data(db):
    jobs.add(db, T1, J1, {"test": 1})
    job1 = jobs.accept(db, T1, timeout=0)
    jobs.finish(db, job1)
    jobs.resubmit(db, job1, 6, {"test": 2})
    assert jobs.accept(db, T1, timeout=0).data == {"test": 2}


def test_resubmit_running_does_not_update_job_data(db):
    jobs.add(db, T1, J1, {"test": 1})
    job1 = jobs.accept(db, T1, timeout=0)
    jobs.resubmit(db, job1, 6, {"test": 2})
    jobs.finish(db, job1)
    assert jobs.accept(db, T1, timeout=0).data == {"test": 1}


def test_resubmit_custom_schedtime(db):
    jobs.add(db, T1, J1, {}, 7)
    job = jobs.accept(db, T1, timeout=0)
    jobs.resubmit(db, job, 9)
    jobs.finish(db, job)
    assert job_state(db) == ("pending", 9)


def test_add_pending_updates_job_data(db):
    jobs.add(db, T1, J1, {"test": 1})
    jobs.add(db, T1, J1, {"test": 2}, 6)
    assert jobs.accept(db, T1, timeout=0).data == {"test": 2}


def test_add_finished_updates_job_data(db):
    jobs.add(db, T1, J1, {"test": 1})
    job1 = jobs.accept(db, T1, timeout=0)
    jobs.finish(db, job1)
    jobs.add(db, T1, J1, {"test": 2}, 6)
    assert jobs.accept(db, T1, timeout=0).data == {"test": 2}


def test_add_running_does_not_update_job_data(db):
    jobs.add(db, T1, J1, {"test": 1})
    job1 = jobs.accept(db, T1, timeout=0)
    jobs.add(db, T1, J1, {"test": 2}, 6)
    jobs.finish(db, job1)
    assert jobs.accept(db, T1, timeout=0).data == {"test": 1}


def test_accept_max_schedtime(db):
    jobs.add(db, T1, J1, {}, 5000)
    jobs.add(db, T1, J2, {}, 3000)
    assert jobs.accept(db, T1, max_sched_time=1000, timeout=0) is None
    assert jobs.accept(db, T1, max_sched_time=3000, timeout=0).id == J2  # inclusive
    assert jobs.accept(db, T1, max_sched_time=9000, timeout=0).id == J1


def test_accept_no_schedule(db):
    ids = [uuid.uuid4().hex for _ in range(25)]
    for job_id in ids:
        jobs.add(db, T1, job_id, {})
    with pytest.raises(ValueError):
        jobs.accept(db, T1, no_schedule=True, max_sched_time=1)
    accepted = [jobs.accept(db, T1, no_schedule=True, timeout=0) for _ in ids]
    assert all(job is not None for job in accepted)
    assert sorted(job.id for job in accepted) == sorted(ids)
    assert jobs.accept(db, T1, no_schedule=True, timeout=0) is None


def test_remove_running_job_halts_its_worker(db):
    jobs.add(db, T1, J1, {})
    job = jobs.accept(db, T1, timeout=0)
    jobs.remove(db, T1, J1)
    with pytest.raises(jobs.NotFound):
        jobs.remove(db, T1, J1)
    with pytest.raises(jobs.Halt):
        jobs.update(db, job)
    with pytest.raises(jobs.Halt):
        jobs.finish(db, job)
    assert jobs.get_jobs(db) == [] and jobs.get_active_jobs_ids(db, T1) == []


def test_halt_after_reenqueue_and_reaccept(db):
    """couch_jobs' enqueue_inactive ends with the old worker halted; the monitor is not
    here, so the job is handed back with ``release`` and taken by another worker."""
    jobs.add(db, T1, J1, {"y": 1})
    old = jobs.accept(db, T1, timeout=0)
    jobs.release(db, old)
    assert jobs.get_job_state(db, T1, J1) == "pending"
    with pytest.raises(jobs.Halt):
        jobs.update(db, old)
    new = jobs.accept(db, T1, timeout=0)
    with pytest.raises(jobs.Halt):
        jobs.update(db, old, {"y": 2})
    with pytest.raises(jobs.Halt):
        jobs.finish(db, old, {"y": 3})
    assert jobs.get_job_data(db, T1, J1) == {"y": 1}  # the halted calls wrote nothing
    jobs.finish(db, jobs.update(db, new, {"y": 4}))
    assert jobs.get_job(db, T1, J1).data == {"y": 4}


def test_check_get_jobs(db):
    jobs.add(db, T1, J1, {})
    jobs.add(db, T2, J2, {})
    assert [(i.type, i.id, i.state, i.data) for i in jobs.get_jobs(db)] == [
        (T1, J1, "pending", {}),
        (T2, J2, "pending", {}),
    ]
    jobs.accept(db, T1, timeout=0)
    assert [(i.type, i.id, i.state) for i in jobs.get_jobs(db)] == [(T1, J1, "running"), (T2, J2, "pending")]
    assert jobs.get_jobs(db, T2) == [jobs.JobInfo(T2, J2, "pending", {}, 0.0)]


def test_finish_in_the_application_transaction(db):
    """couch_jobs' use_fabric_transaction_object: the worker's own writes and finish commit
    together."""
    app_key = b"app/doc1"
    jobs.add(db, T1, J1, {})
    job = jobs.accept(db, T1, timeout=0)

    @jobs.transactional
    def work(tr):
        assert jobs.get_job_data(tr, T1, J1) == {}
        tr.set(app_key, b"result")
        jobs.finish(tr, job, {"d": 1})

    work(db)
    assert db.get(app_key) == b"result"
    assert jobs.get_job(db, T1, J1)[2:4] == ("finished", {"d": 1})
    jobs.remove(db, T1, J1)


def test_type_timeouts(db):
    assert jobs.get_type_timeout(db, T1) == 2
    assert jobs.get_types(db) == [T1, T2]
    jobs.set_type_timeout(db, "t3", 8)
    assert jobs.get_types(db) == [T1, T2, "t3"]
    jobs.clear_type_timeout(db, "t3")
    assert jobs.get_types(db) == [T1, T2]
    assert jobs.get_type_timeout(db, "t3") is None


def test_resubmit_without_data_keeps_data(db):
    """DESIGN: couch_jobs' resubmit without data crashes on finished jobs; ours keeps it."""
    jobs.add(db, T1, J1, {"keep": True})
    job = jobs.accept(db, T1, timeout=0)
    jobs.finish(db, job)
    jobs.resubmit(db, job)
    assert jobs.get_job(db, T1, J1)[2:4] == ("pending", {"keep": True})
    info = jobs.get_job(db, T1, J1)
    jobs.resubmit(db, info, scheduled_time=5)  # as a creator, with the JobInfo
    assert jobs.get_job(db, T1, J1)[2:] == ("pending", {"keep": True}, 5.0)


def test_max_sched_time_defaults_to_now_inclusive(db):
    now = time.time()
    jobs.add(db, T1, "later", {}, now + 3600)
    jobs.add(db, T1, "due", {}, now - 1)
    assert jobs.accept(db, T1, timeout=0).id == "due"
    assert jobs.accept(db, T1, timeout=0) is None  # "later" is not taken early
    assert jobs.pending_count(db, T1) == 1
    assert jobs.pending_count(db, T1, max_sched_time=now) == 0
    assert jobs.accept(db, T1, max_sched_time=float("inf"), timeout=0).id == "later"
