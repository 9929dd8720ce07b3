"""The activity monitor: jobs of workers that stop updating become pending again, their
old workers get Halt, and jobs that keep updating are left alone.  Waits are on
conditions with generous deadlines; nothing here asserts how fast."""

from __future__ import annotations

import threading

import anyio
import pytest

import jobs
from jobs.queue import activity
from jobs import keys
from jobs.queue.accepting import this_worker
from jobs.engine import FDBError
from monitor import ActivityMonitor
from monitor.batching import AdaptiveBatch, jittered

from waiting import DEADLINE, wait_until


def test_enqueue_inactive(db, caplog):
    """couch_jobs' enqueue_inactive: type timeout 2 s, the worker stops updating.  The
    monitor's log names the job and the worker that held it."""
    jobs.set_type_timeout(db, "t", 2)
    jobs.add(db, "t", "j", {"n": 1}, scheduled_time=5)
    job = jobs.accept(db, "t", max_sched_time=10, timeout=0)
    job = jobs.update(db, job, {"n": 2})
    monitor = ActivityMonitor(db).start()
    try:
        with caplog.at_level("WARNING", logger="monitor"):
            assert wait_until(lambda: jobs.get_job_state(db, "t", "j") == "pending")
            assert wait_until(lambda: monitor.reenqueued == 1)
    finally:
        monitor.stop()
    said = [r.getMessage() for r in caplog.records if "re-enqueued" in r.getMessage()]
    assert said == [f"type t: re-enqueued 1 running job(s) not updated for the type timeout "
                    f"(1 of worker {this_worker()}; e.g. j)"]
    info = jobs.get_job(db, "t", "j")
    assert info.data == {"n": 2} and info.scheduled_time == 5  # last data and time kept
    assert jobs.get_active_jobs_ids(db, "t") == []
    with pytest.raises(jobs.Halt):
        jobs.update(db, job)
    with pytest.raises(jobs.Halt):
        jobs.finish(db, job, {"late": True})
    assert jobs.get_job_data(db, "t", "j") == {"n": 2}
    assert jobs.accept(db, "t", max_sched_time=10, timeout=0).id == "j"


def test_updating_job_is_left_running(db):
    jobs.set_type_timeout(db, "t", 2)
    jobs.add(db, "t", "busy")
    jobs.add(db, "t", "idle")
    busy = jobs.accept(db, "t", timeout=0)
    idle = jobs.accept(db, "t", timeout=0)
    if busy.id != "busy":
        busy, idle = idle, busy
    stop = threading.Event()

    def heartbeat():
        nonlocal busy
        while not stop.is_set():
            busy = jobs.update(db, busy)
            stop.wait(0.05)

    beater = threading.Thread(target=heartbeat)
    beater.start()
    monitor = ActivityMonitor(db).start()
    try:
        assert wait_until(lambda: jobs.get_job_state(db, "t", "idle") == "pending")
        # the idle job was re-enqueued after >= 2 s of silence; the busy one, updated
        # every 50 ms all along, must still be running
        assert jobs.get_job_state(db, "t", "busy") == "running"
    finally:
        stop.set()
        beater.join()
        monitor.stop()
    jobs.finish(db, busy)
    assert jobs.get_job_state(db, "t", "busy") == "finished"


def test_many_stale_jobs_in_growing_batches(db):
    jobs.set_type_timeout(db, "t", 1)

    @jobs.transactional
    def add_all(tr):
        for i in range(300):
            jobs.add(tr, "t", f"j{i:03d}")

    add_all(db)
    held = [jobs.accept(db, "t", timeout=0) for _ in range(300)]
    assert None not in held
    monitor = ActivityMonitor(db)
    monitor._batch = AdaptiveBatch(initial=7, step=7)
    assert wait_until(lambda: monitor.check() >= 0 and jobs.pending_count(db, "t") == 300)
    assert monitor.reenqueued == 300
    assert monitor._batch.size > 7  # grew while batches came back full
    assert jobs.get_active_jobs_ids(db, "t") == []


def test_two_monitors_are_harmless(db):
    jobs.set_type_timeout(db, "t", 1)
    for i in range(20):
        jobs.add(db, "t", f"j{i}")
    for _ in range(20):
        jobs.accept(db, "t", timeout=0)
    monitors = [ActivityMonitor(db).start(), ActivityMonitor(db).start()]
    try:
        assert wait_until(lambda: jobs.pending_count(db, "t") == 20)
    finally:
        for m in monitors:
            m.stop()
    assert sum(m.reenqueued for m in monitors) == 20  # each job re-enqueued once
    assert jobs.get_active_jobs_ids(db, "t") == []


def test_monitor_types_filter_and_no_timeout(db):
    jobs.set_type_timeout(db, "watched", 1)
    jobs.set_type_timeout(db, "other", 1)
    jobs.add(db, "watched", "a")
    jobs.add(db, "other", "b")
    jobs.accept(db, "watched", timeout=0)
    jobs.accept(db, "other", timeout=0)
    monitor = ActivityMonitor(db, types=["watched", "missing"]).start()
    try:
        assert wait_until(lambda: jobs.get_job_state(db, "watched", "a") == "pending")
    finally:
        monitor.stop()
    assert jobs.get_job_state(db, "other", "b") == "running"


def test_serve_under_anyio(db):
    jobs.set_type_timeout(db, "t", 1)
    jobs.add(db, "t", "j")
    jobs.accept(db, "t", timeout=0)

    async def main():
        async with anyio.create_task_group() as tg:
            tg.start_soon(ActivityMonitor(db).serve)
            with anyio.fail_after(DEADLINE):
                while await anyio.to_thread.run_sync(jobs.get_job_state, db, "t", "j") != "pending":
                    await anyio.sleep(0.05)
            tg.cancel_scope.cancel()

    anyio.run(main)


def test_adaptive_batch():
    batch = AdaptiveBatch(initial=100, minimum=1, maximum=250, step=100)
    batch.full()
    batch.full()
    assert batch.size == 250  # capped
    assert batch.too_big(FDBError(2101)) and batch.size == 125
    assert batch.too_big(FDBError(1007)) and batch.size == 62
    assert not batch.too_big(FDBError(1020)) and batch.size == 62  # not a size problem
    assert not batch.too_big(ValueError()) and batch.size == 62
    tiny = AdaptiveBatch(initial=1)
    assert not tiny.too_big(FDBError(2101))  # nothing smaller to try: the caller raises


def test_jittered_stays_within_fraction():
    for _ in range(100):
        assert 1.0 <= jittered(1.0, 0.1) <= 1.1


def test_a_failing_pass_is_logged_and_the_monitor_goes_on(db, monkeypatch, caplog):
    """A pass that raises (store trouble) must not end the monitor's thread."""
    monitor = ActivityMonitor(db)
    calls = []

    def flaky_check():
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("store unreachable")
        return 0

    monkeypatch.setattr(monitor, "check", flaky_check)
    monkeypatch.setattr(monitor, "interval", lambda: 0.01)
    monitor.start()
    try:
        assert wait_until(lambda: len(calls) >= 3)
    finally:
        monitor.stop()
    assert monitor.errors == 1
    assert "store unreachable" in caplog.text


def test_a_type_that_fails_does_not_hold_the_others_up(db, monkeypatch):
    """A type whose re-enqueue fails at every pass (here a patched failure) does not hold
    up the other types' dead workers' jobs; the pass still fails, naming the type."""
    for type in ("a", "b"):
        jobs.set_type_timeout(db, type, 1)
        jobs.add(db, type, "j")
        assert jobs.accept(db, type, timeout=0).id == "j"
    reenqueue_inactive = activity.reenqueue_inactive

    def failing_for_a(tr, type, *args, **kwargs):
        if type == "a":
            raise RuntimeError("store trouble")
        return reenqueue_inactive(tr, type, *args, **kwargs)

    monkeypatch.setattr(activity, "reenqueue_inactive", failing_for_a)
    monitor = ActivityMonitor(db)
    raised = []  # what each pass raised (None: nothing)

    def check() -> bool:
        raised.append(None)
        try:
            monitor.check()
        except RuntimeError as exc:
            raised[-1] = exc
        return jobs.get_job_state(db, "b", "j") == "pending"

    assert wait_until(check)
    # b's job went in a pass where a's failed (not always the first: a's samples are taken
    # a moment before b's, so a pass may find a's due and b's not yet)
    assert raised[-1] is not None
    assert all("(activity monitor: type 'a')" in exc.__notes__ for exc in raised if exc is not None)
    assert monitor.reenqueued == 1 and jobs.get_job_state(db, "a", "j") == "running"


def test_a_job_whose_row_cannot_be_read_is_passed_over(db, caplog):
    """A running job whose row cannot be read (written by another program, damaged) is
    left as it is and logged once; its type's other dead workers' jobs are re-enqueued."""
    jobs.set_type_timeout(db, "t", 1)
    for job_id in ("bad", "good"):
        jobs.add(db, "t", job_id)
        assert jobs.accept(db, "t", timeout=0).id == job_id
    db[keys.data_key("t", "bad")] = b"not a row"
    monitor = ActivityMonitor(db)
    with caplog.at_level("ERROR", logger="monitor"):
        assert wait_until(lambda: monitor.check() == 1 and jobs.get_job_state(db, "t", "good") == "pending")
        for _ in range(3):
            assert monitor.check() == 0  # (passed over again, not logged again)
    said = [r.getMessage() for r in caplog.records if "t/bad" in r.getMessage()]
    assert len(said) == 1 and "not re-enqueued" in said[0]
    assert monitor.unreadable.jobs == {("t", "bad")}
    assert db[keys.data_key("t", "bad")] == b"not a row"


def test_a_failed_reenqueue_is_tried_again_at_the_next_pass(db, monkeypatch):
    """Not a type timeout later: the samples that made the jobs due are kept until their
    re-enqueue commits."""
    jobs.set_type_timeout(db, "t", 1)
    jobs.add(db, "t", "j")
    assert jobs.accept(db, "t", timeout=0).id == "j"
    reenqueue_inactive, calls = activity.reenqueue_inactive, []

    def failing_once(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("store trouble")
        return reenqueue_inactive(*args, **kwargs)

    monkeypatch.setattr(activity, "reenqueue_inactive", failing_once)
    monitor = ActivityMonitor(db)

    def check() -> int | None:
        try:
            return monitor.check()
        except RuntimeError:
            return None

    assert wait_until(lambda: check() is None)  # (the first attempt, once the job is due)
    assert check() == 1 and jobs.get_job_state(db, "t", "j") == "pending"
