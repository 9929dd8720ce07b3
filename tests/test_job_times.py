"""``jobs.get_times``: when a job was enqueued, started, last active and finished, for
``jobsctl show`` and the dashboard's drill-in, on both engines' clocks."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

import jobs
from jobs import get_times, keys
from jobs.codec import encode_row, lock_time, new_lock
from jobs.engine.transactional import run
from jobs.queue import rows

T = "timed"


@pytest.fixture
def db(db):
    jobs.set_type_timeout(db, T, 60)
    return db


def near(t, now=None) -> bool:
    return t is not None and abs(t - (time.time() if now is None else now)) < 30


def test_a_job_through_its_states(db):
    before = time.time()
    jobs.add(db, T, "j")
    t = get_times(db, T, "j")
    assert near(t.enqueued) and t.enqueued >= before - 1 and (t.started, t.last_activity, t.finished) == (None,) * 3
    job = jobs.accept(db, T, timeout=0)
    t = get_times(db, T, "j")
    assert t.enqueued is None and near(t.started) and near(t.last_activity) and t.finished is None
    jobs.finish(db, job, failed="boom")
    done = get_times(db, T, "j")
    assert done.started == t.started and near(done.finished) and done.last_activity is None  # the last run's start


def test_a_finished_job_of_a_type_without_retention_has_no_finish_time(db):
    jobs.add(db, T, "ok")
    jobs.finish(db, jobs.accept(db, T, timeout=0))
    t = get_times(db, T, "ok")
    assert near(t.started) and t.finished is None  # (failed jobs and retained types are indexed)


def test_a_job_started_when_it_was_taken_not_when_the_accept_began(db):
    """A blocking accept that waited for the job: its lock was drawn after the wait."""
    got = []
    waiter = threading.Thread(target=lambda: got.append(jobs.accept(db, T, timeout=60)))
    waiter.start()
    time.sleep(0.3)  # the accept is waiting by now (if not, it starts later: the result is the same)
    added = time.time()
    jobs.add(db, T, "late")
    waiter.join(60)
    assert got and got[0].id == "late"
    assert get_times(db, T, "late").started >= added - 0.001


def test_locks_carry_their_time():
    now = time.time()
    assert near(lock_time(new_lock()), now) and lock_time(new_lock()) >= now - 0.001
    assert len(new_lock()) == 16 and new_lock() != new_lock()
    assert lock_time(None) is None


@pytest.mark.parametrize("lock", [bytes(16), uuid.uuid4().bytes, new_lock()[:15], new_lock() + b"x", "a str lock"])
def test_a_lock_new_lock_did_not_make_is_corrupt(lock):
    with pytest.raises(jobs.StoreError, match="a job's lock is corrupt"):
        lock_time(lock)


def test_a_job_whose_lock_is_corrupt_has_no_times_but_a_store_error_naming_it(db):
    jobs.add(db, T, "j")
    jobs.accept(db, T, timeout=0)
    row = run(db, rows.get, T, "j")
    db[keys.data_key(T, "j")] = encode_row(row._replace(lock=uuid.uuid4().bytes))  # (16 random bytes)
    with pytest.raises(jobs.StoreError, match=f"the lock of job {T}/j is corrupt"):
        get_times(db, T, "j")


def test_not_found(db):
    with pytest.raises(jobs.NotFound):
        get_times(db, T, "nope")
