"""Pausing a type, in the job layer: no accept takes a paused type's jobs;
waiting accepts stay waiting and wake on resume; running jobs heartbeat and finish as
usual; an accept concurrent with a pause conflicts; pause and resume are idempotent under
``commit_unknown_result`` (1021) and refuse bad names without writing.  Processors and
other processes: ``test_pause_workers.py``."""

from __future__ import annotations

import threading
import time

import anyio
import pytest

import jobs
import jobs.aio
from jobs.queue import accepting
from jobs.engine.errors import NOT_COMMITTED, error_code
from jobs.engine.faults import FaultInjectingDatabase
from jobs.engine.transactional import run
from waiting import DEADLINE, wait_until

T = "t"


@pytest.fixture(autouse=True)
def type_timeout(db):
    jobs.set_type_timeout(db, T, 60)


@pytest.fixture
def waits(monkeypatch):
    """An Event set whenever an accept (in this process) starts waiting on its watch."""
    started = threading.Event()
    wait = accepting.AcceptCall.wait

    def spy(self, w):
        started.set()
        return wait(self, w)

    monkeypatch.setattr(accepting.AcceptCall, "wait", spy)
    return started


def _accept_in_thread(db, **kwargs):
    out = []
    thread = threading.Thread(target=lambda: out.append(jobs.accept(db, T, **kwargs)), daemon=True)
    thread.start()
    return thread, out


# --- the job layer -------------------------------------------------------------------------


def test_paused_type_is_not_accepted_until_resumed(db):
    jobs.add(db, T, "a", {"n": 1})
    assert jobs.is_paused(db, T) is False
    jobs.pause(db, T)
    assert jobs.is_paused(db, T) is True
    assert jobs.accept(db, T, timeout=0) is None
    assert jobs.accept(db, T, timeout=0.2) is None
    assert jobs.accept_many(db, T, 5, timeout=0) == []
    assert jobs.accept(db, T, max_sched_time=float("inf"), timeout=0) is None
    assert jobs.get_job_state(db, T, "a") == "pending" and jobs.pending_count(db, T) == 1
    jobs.add(db, T, "b", {"n": 2})  # adding goes on while paused
    assert jobs.pending_count(db, T) == 2
    jobs.resume(db, T)
    assert jobs.is_paused(db, T) is False
    assert sorted(j.id for j in jobs.accept_many(db, T, 5, timeout=0)) == ["a", "b"]


def test_pause_is_per_type(db):
    jobs.set_type_timeout(db, "other", 60)
    jobs.add(db, T, "a")
    jobs.add(db, "other", "o")
    jobs.pause(db, T)
    assert jobs.accept(db, "other", timeout=0).id == "o"
    assert jobs.accept(db, T, timeout=0) is None
    assert jobs.is_paused(db, "other") is False


def test_a_blocked_accept_wakes_on_resume(db, waits):
    jobs.add(db, T, "a")
    jobs.pause(db, T)
    thread, out = _accept_in_thread(db, timeout=DEADLINE)
    assert waits.wait(DEADLINE), "the accept never waited"
    assert jobs.get_job_state(db, T, "a") == "pending"
    jobs.resume(db, T)  # no job added: the resume alone wakes it
    thread.join(DEADLINE)
    assert not thread.is_alive() and out[0] is not None and out[0].id == "a"
    assert jobs.get_job_state(db, T, "a") == "running"


def test_adding_while_paused_wakes_waiting_accepts_only_to_wait_again(db, waits):
    jobs.pause(db, T)
    thread, out = _accept_in_thread(db, timeout=DEADLINE)
    assert waits.wait(DEADLINE)
    waits.clear()
    jobs.add(db, T, "a")
    assert waits.wait(DEADLINE), "the accept did not go back to waiting"
    assert thread.is_alive() and jobs.get_job_state(db, T, "a") == "pending"
    jobs.resume(db, T)
    thread.join(DEADLINE)
    assert out[0].id == "a"


def test_a_future_job_falling_due_while_paused_is_not_taken(db, waits):
    due = time.time() + 0.3
    jobs.add(db, T, "later", scheduled_time=due)
    jobs.pause(db, T)
    thread, out = _accept_in_thread(db, timeout=DEADLINE)
    assert waits.wait(DEADLINE)
    assert wait_until(lambda: time.time() > due)
    waits.clear()
    jobs.add(db, T, "nudge", scheduled_time=due + 3600)  # an attempt after "later" fell due
    assert waits.wait(DEADLINE)
    assert thread.is_alive() and jobs.get_job_state(db, T, "later") == "pending"
    jobs.resume(db, T)
    thread.join(DEADLINE)
    assert out[0].id == "later"


def test_running_jobs_heartbeat_and_finish_while_paused(db):
    jobs.add(db, T, "a", {"n": 1})
    jobs.add(db, T, "r", {"n": 2})
    a, r = jobs.accept(db, T, timeout=0), jobs.accept(db, T, timeout=0)
    jobs.pause(db, T)
    a = jobs.update(db, a, {"n": 10})
    jobs.finish(db, a, {"done": True})
    assert jobs.get_job(db, T, a.id).state == "finished"
    jobs.resubmit(db, r)  # runs again when finished: pending, and not taken while paused
    jobs.finish(db, r)
    assert jobs.get_job_state(db, T, r.id) == "pending"
    assert jobs.accept(db, T, timeout=0) is None
    jobs.resume(db, T)
    assert jobs.accept(db, T, timeout=0).id == r.id


def test_an_accept_concurrent_with_a_pause_conflicts(db):
    """The accept read the flag before the pause committed: its commit must fail (1020),
    and its retry, after the pause, takes nothing."""
    jobs.add(db, T, "a")
    call = accepting.AcceptCall(db, T)
    tr = db.create_transaction()
    try:
        taken = call._body(tr)
        assert [j.id for j in taken] == ["a"]
        jobs.pause(db, T)
        with pytest.raises(Exception) as caught:
            tr.commit().wait()
        assert error_code(caught.value) == NOT_COMMITTED
    finally:
        getattr(tr, "close", lambda: None)()
    assert jobs.get_job_state(db, T, "a") == "pending"
    assert jobs.accept(db, T, timeout=0) is None


def test_unknown_type_can_be_paused_before_its_workers_start(db):
    jobs.pause(db, "new")  # no timeout, no job yet
    assert jobs.is_paused(db, "new") and "new" not in jobs.get_types(db)
    jobs.set_type_timeout(db, "new", 30)
    jobs.add(db, "new", "j")
    assert jobs.accept(db, "new", timeout=0) is None
    jobs.resume(db, "new")
    assert jobs.accept(db, "new", timeout=0).id == "j"
    jobs.resume(db, "never-paused")  # nothing to resume: nothing changes
    assert jobs.is_paused(db, "never-paused") is False


def test_pause_and_resume_are_idempotent_under_commit_unknown_result(db):
    faulty = FaultInjectingDatabase(db, unknown_committed=1.0)
    jobs.add(db, T, "a")
    jobs.pause(faulty, T)
    since = run(db, jobs.controls.pausing.paused_types)[T]
    jobs.pause(faulty, T)  # paused already: stays paused since the first pause
    assert jobs.is_paused(db, T) and run(db, jobs.controls.pausing.paused_types)[T] == since
    assert jobs.accept(faulty, T, timeout=0) is None
    jobs.resume(faulty, T)
    jobs.resume(faulty, T)
    assert not jobs.is_paused(db, T)
    assert jobs.accept(faulty, T, timeout=0).id == "a"
    assert faulty.injected["unknown_committed"] >= 3  # the pause, the resume and the accept


def test_pause_composes_with_the_callers_transaction(db):
    @jobs.transactional
    def pause_and_add(tr):
        jobs.pause(tr, T)
        jobs.add(tr, T, "a")
        return jobs.is_paused(tr, T)

    assert pause_and_add(db) is True
    assert jobs.accept(db, T, timeout=0) is None and jobs.get_job_state(db, T, "a") == "pending"


@pytest.mark.parametrize("bad, error", [("", ValueError), (None, TypeError), (3, TypeError),
                                        ("a\nb", ValueError)])
def test_bad_type_names_are_refused_and_write_nothing(db, commit_version, bad, error):
    before = commit_version()
    with pytest.raises(error):
        jobs.pause(db, bad)
    if bad != "a\nb":  # (a name only looked up may hold a control character)
        with pytest.raises(error):
            jobs.resume(db, bad)
        with pytest.raises(error):
            jobs.is_paused(db, bad)
    assert commit_version() == before


def test_async_twins(db):
    async def main():
        jobs.add(db, T, "a")
        await jobs.aio.pause(db, T)
        assert await jobs.aio.is_paused(db, T)
        with anyio.move_on_after(DEADLINE):
            async with anyio.create_task_group() as tg:
                got = []

                async def take():
                    got.append(await jobs.aio.accept(db, T, timeout=DEADLINE))

                tg.start_soon(take)
                await anyio.sleep(0)
                assert jobs.get_job_state(db, T, "a") == "pending"
                await jobs.aio.resume(db, T)
        assert got and got[0].id == "a"

    anyio.run(main)


def test_status_shows_paused_types(db):
    from jobs.observe import status

    jobs.pause(db, T)
    jobs.pause(db, "unknown")
    by_type = {t.type: t for t in status.gather(db).types}
    assert by_type[T].paused and by_type["unknown"].paused
    assert by_type[T].paused_since is not None and by_type[T].paused_since <= time.time()
    jobs.resume(db, T)
    by_type = {t.type: t for t in status.gather(db).types}
    assert not by_type[T].paused and by_type[T].paused_since is None
