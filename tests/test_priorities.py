"""Priorities: ``add(..., priority=N)``; accept takes due jobs of the lowest priority first,
then by scheduled time, with couch_jobs' random pick inside the best band; every
re-enqueue keeps a job's priority; bad priorities are refused before anything is written."""

from __future__ import annotations

import time

import pytest

import jobs
import processors
from jobs.queue import activity
from jobs import keys
from jobs.indexes import pending
from jobs.observe import status
from jobs.codec import Row, decode_row, encode_row
from jobs.engine import tuple as fdb_tuple
from jobs.engine.faults import FaultInjectingDatabase
from jobs.engine.transactional import run
from stored import snapshot

T = "prio"
FUTURE = 4_000_000_000.0  # year 2096: never due in a test


@pytest.fixture(autouse=True)
def type_timeout(db):
    jobs.set_type_timeout(db, T, 60)


def accept_all(db) -> list[str]:
    ids = []
    while (job := jobs.accept(db, T, timeout=0)) is not None:
        ids.append(job.id)
    return ids


def test_lower_priority_first_then_scheduled_time_negatives_included(db):
    jobs.add(db, T, "p3", priority=3)
    jobs.add(db, T, "p0-late", scheduled_time=20.0)
    jobs.add(db, T, "p0-early", scheduled_time=10.0)
    jobs.add(db, T, "m7", priority=-7, scheduled_time=30.0)
    jobs.add(db, T, "p1", priority=1)
    jobs.add(db, T, "m1", priority=-1)
    taken = accept_all(db)
    assert taken[:2] == ["m7", "m1"]
    assert set(taken[2:4]) == {"p0-early", "p0-late"}  # one band: couch_jobs' random pick
    assert taken[4:] == ["p1", "p3"]


def test_within_a_band_accept_picks_among_the_first_due_by_scheduled_time(db, monkeypatch):
    """The pick sees exactly the band's first SAMPLE due jobs (no luck involved)."""
    n = pending.SAMPLE + 4
    for i in range(n):
        jobs.add(db, T, f"b0-{i:02d}", scheduled_time=float(i + 1))
    jobs.add(db, T, "b1", priority=1)
    jobs.add(db, T, "better-but-future", priority=-3, scheduled_time=FUTURE)
    offered = []
    monkeypatch.setattr(pending, "_at_place", lambda tr, due: offered.append(list(due)) or due[-1])
    job = jobs.accept(db, T, timeout=0)
    assert [_id(k) for k in offered[0]] == [f"b0-{i:02d}" for i in range(pending.SAMPLE)]
    assert job.id == f"b0-{pending.SAMPLE - 1:02d}"
    offered.clear()
    jobs.accept(db, T, max_sched_time=2.5, timeout=0)  # only b0-00 and b0-01 are due by then
    assert [_id(k) for k in offered[0]] == ["b0-00", "b0-01"]


def _id(key: bytes) -> str:
    return keys.pending_entry(key)[2]


def test_future_jobs_of_a_better_priority_do_not_hide_due_ones(db):
    now = time.time()
    for band in range(-5, 0):
        jobs.add(db, T, f"later{band}", priority=band, scheduled_time=FUTURE + band)
    jobs.add(db, T, "due", priority=9)
    assert jobs.pending_count(db, T) == 6
    assert jobs.pending_count(db, T, max_sched_time=now + 60) == 1
    assert jobs.accept(db, T, timeout=0).id == "due"
    assert jobs.accept(db, T, timeout=0) is None
    assert run(db, pending.next_due, T, now) == FUTURE - 5  # the earliest of any band
    st = status.gather(db).types[0]
    assert (st.pending, st.due) == (5, 0)
    assert [(b.priority, b.pending, b.due) for b in st.bands] == [(p, 1, 0) for p in range(-5, 0)]


def test_a_batch_takes_the_best_bands_first(db):
    for i in range(3):
        jobs.add(db, T, f"best{i}", priority=-1)
    for i in range(10):
        jobs.add(db, T, f"zero{i}")
    jobs.add(db, T, "worst", priority=5)
    taken = {job.id for job in jobs.accept_many(db, T, 5, timeout=0)}
    assert {"best0", "best1", "best2"} <= taken and len(taken) == 5 and "worst" not in taken


def test_no_schedule_takes_the_best_band_with_jobs_at_zero(db):
    jobs.add(db, T, "future-best", priority=-9, scheduled_time=FUTURE)
    jobs.add(db, T, "zero-worse", priority=2)
    jobs.add(db, T, "zero-better", priority=1)
    assert jobs.accept(db, T, no_schedule=True, timeout=0).id == "zero-better"
    assert jobs.accept(db, T, no_schedule=True, timeout=0).id == "zero-worse"
    assert jobs.accept(db, T, no_schedule=True, timeout=0) is None
    for i in range(4):
        jobs.add(db, T, f"n{i}", priority=i % 2)
    assert {j.id for j in jobs.accept_many(db, T, 2, no_schedule=True, timeout=0)} == {"n0", "n2"}


def test_get_job_shows_the_priority(db):
    jobs.add(db, T, "j", {"x": 1}, 5.0, priority=-4)
    assert jobs.get_job(db, T, "j") == (T, "j", "pending", {"x": 1}, 5.0, -4, None)
    assert jobs.get_job(db, T, "j").priority == -4 and jobs.get_jobs(db, T)[0].priority == -4


# --- every re-enqueue keeps the priority ----------------------------------------------------


def pending_entries(db) -> list[tuple]:
    r = keys.PENDING[T].range()
    return [keys.pending_entry(k) for k, _v in db.get_range(r.start, r.stop)]


def test_release_monitor_and_resubmission_keep_the_priority(db):
    jobs.add(db, T, "j", priority=7)
    jobs.release(db, jobs.accept(db, T, timeout=0))
    assert pending_entries(db) == [(7, 0.0, "j")]
    job = jobs.accept(db, T, timeout=0)
    stamp = run(db, activity.last_activity, T)
    assert run(db, activity.reenqueue_inactive, T, stamp, 10) == (1, False)  # as the monitor does
    assert pending_entries(db) == [(7, 0.0, "j")]
    job = jobs.accept(db, T, timeout=0)
    jobs.resubmit(db, job)  # flagged: the finish re-enqueues it
    jobs.finish(db, job)
    assert pending_entries(db) == [(7, 0.0, "j")] and jobs.get_job(db, T, "j").priority == 7
    jobs.finish(db, jobs.accept(db, T, timeout=0))
    jobs.resubmit(db, jobs.get_job(db, T, "j"))  # finished: pending again, same band
    assert pending_entries(db) == [(7, 0.0, "j")]


def test_resubmit_and_re_add_may_change_the_priority(db):
    jobs.add(db, T, "j", {"v": 1}, priority=7)
    jobs.resubmit(db, jobs.get_job(db, T, "j"), priority=-2)
    assert pending_entries(db) == [(-2, 0.0, "j")]
    before = snapshot(db)
    jobs.add(db, T, "j", {"v": 2}, priority=-2)  # same time and priority: a no-op
    assert snapshot(db) == before
    jobs.add(db, T, "j", {"v": 3}, priority=4)  # another priority: replaced, data too
    assert pending_entries(db) == [(4, 0.0, "j")] and jobs.get_job_data(db, T, "j") == {"v": 3}
    job = jobs.accept(db, T, timeout=0)
    jobs.add(db, T, "j", priority=-8)  # running: flagged, the next run in band -8
    jobs.finish(db, job)
    assert pending_entries(db) == [(-8, 0.0, "j")]


def test_a_retried_task_keeps_its_priority(db):
    processor = processors.Processor(db)

    @processor.handler(T, retry=processors.Retry(max_attempts=3, backoff=0))
    def fail(ctx):
        raise RuntimeError("again")

    future = processor.submit(T, {}, priority=-6)
    assert jobs.get_job(db, T, future.job_id).priority == -6
    job = jobs.accept(db, T, timeout=0)
    jobs.resubmit(db, job, scheduled_time=0)  # what the retry policy does with a failed attempt
    jobs.finish(db, job)
    assert pending_entries(db) == [(-6, 0.0, future.job_id)]


# --- bad input and 1021 -----------------------------------------------------------------------


@pytest.mark.parametrize("bad", [True, 1.0, "1", None, 2**63, -(2**63) - 1])
def test_a_bad_priority_is_refused_and_writes_nothing(db, bad):
    jobs.add(db, T, "j")
    before = snapshot(db)
    with pytest.raises(ValueError, match="priority"):
        jobs.add(db, T, "other", priority=bad)
    if bad is not None:  # resubmit's None keeps the priority
        with pytest.raises(ValueError, match="priority"):
            jobs.resubmit(db, jobs.get_job(db, T, "j"), priority=bad)
    with pytest.raises(ValueError, match="priority"):
        processors.submit(db, T, {}, priority=bad)
    assert snapshot(db) == before


def test_the_extreme_priorities_are_accepted_and_ordered(db):
    jobs.add(db, T, "max", priority=2**63 - 1)
    jobs.add(db, T, "min", priority=-(2**63))
    assert accept_all(db) == ["min", "max"]


def test_add_and_resubmit_with_a_priority_are_safe_under_1021(db):
    unknown = FaultInjectingDatabase(db, unknown_committed=1.0)
    jobs.add(unknown, T, "j", {"a": 1}, 3.0, priority=-3)
    assert pending_entries(db) == [(-3, 3.0, "j")]
    jobs.resubmit(unknown, jobs.get_job(db, T, "j"), priority=2)
    assert pending_entries(db) == [(2, 3.0, "j")]
    assert jobs.get_job(db, T, "j") == (T, "j", "pending", {"a": 1}, 3.0, 2, None)
    assert jobs.pending_count(db, T) == 1


def test_rows_with_a_priority_are_the_tuple_layers():
    for priority in (1, -1, 255, -256, 2**40, -(2**63), 2**63 - 1):
        for worker in (None, "h/1"):
            row = Row(None, b"L" * 16, 2.0, True, b"{}", None, worker, None, priority)
            raw = encode_row(row)
            assert raw == fdb_tuple.pack((None, b"L" * 16, 2.0, True, b"{}", None, worker, None, priority))
            assert decode_row(raw) == row
    assert encode_row(Row(None, None, 1.0, False, b"{}")) == fdb_tuple.pack((None, None, 1.0, False, b"{}", None))
    with pytest.raises(jobs.StoreError, match="corrupt"):
        decode_row(fdb_tuple.pack((None, None, 1.0, False, b"{}", None, None, None, True)))
