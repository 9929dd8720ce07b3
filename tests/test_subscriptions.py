"""Subscriptions (couch_jobs' subscription scenarios, and the bugs it had that we fix)."""

from __future__ import annotations

import threading

import anyio
import pytest

import jobs
import jobs.aio

T = "t"
WAIT = 30  # generous; never a timing assertion


@pytest.fixture(autouse=True)
def type_timeout(db):
    jobs.set_type_timeout(db, T, 60)


def test_subscribe_missing_job(db):
    with pytest.raises(jobs.NotFound):
        jobs.subscribe(db, T, "nope")


def test_pending_running_updates_finished(db):
    jobs.add(db, T, "j", {"v": 0})
    sub = jobs.subscribe(db, T, "j")
    assert (sub.state, sub.data) == ("pending", {"v": 0})
    job = jobs.accept(db, T, timeout=0)
    event = jobs.wait(sub, WAIT)
    assert (event.type, event.id, event.state) == (T, "j", "running")
    job = jobs.update(db, job, {"v": 1})
    event = jobs.wait(sub, WAIT)
    assert (event.state, event.data) == ("running", {"v": 1})  # each update while running
    jobs.finish(db, job, {"v": 2})
    event = jobs.wait(sub, WAIT, state="finished")
    assert (event.state, event.data) == ("finished", {"v": 2})
    assert (sub.state, sub.data) == ("finished", {"v": 2})
    assert jobs.wait(sub, 0.2) is None  # ended: no further events


def test_finished_job_subscription_gets_nothing(db):
    jobs.add(db, T, "j")
    jobs.finish(db, jobs.accept(db, T, timeout=0))
    sub = jobs.subscribe(db, T, "j")
    assert sub.state == "finished"
    jobs.add(db, T, "j")  # pending again: the finished subscription does not follow
    assert jobs.wait(sub, 0.3) is None


@pytest.mark.parametrize("accepted", [False, True])
def test_remove_gives_not_found(db, accepted):
    jobs.add(db, T, "j")
    if accepted:
        jobs.accept(db, T, timeout=0)
    sub = jobs.subscribe(db, T, "j")
    jobs.remove(db, T, "j")
    event = jobs.wait(sub, WAIT)
    assert event.state == "not_found" and event.data is None
    assert jobs.wait(sub, 0.2) is None


def test_several_subscriptions_and_state_filter(db):
    for i in range(3):
        jobs.add(db, T, f"j{i}")
    subs = [jobs.subscribe(db, T, f"j{i}") for i in range(3)]
    held = [jobs.accept(db, T, timeout=0) for _ in range(3)]
    for job in held:
        jobs.finish(db, job)
    finished = set()
    while len(finished) < 3:
        event = jobs.wait(subs, WAIT, state="finished")
        assert event is not None and event.state == "finished"  # the filter holds every time
        finished.add(event.id)
    assert finished == {"j0", "j1", "j2"}


def test_unsubscribe_drops_queued_events(db):
    jobs.add(db, T, "j")
    sub = jobs.subscribe(db, T, "j")
    jobs.finish(db, jobs.accept(db, T, timeout=0))
    other = jobs.subscribe(db, T, "j")  # proves the changes went through the notifier
    assert other.state == "finished"
    assert _eventually_queued(sub)
    jobs.unsubscribe(sub)
    assert jobs.wait(sub, 0.2) is None


def _eventually_queued(sub) -> bool:
    done = threading.Event()
    for _ in range(WAIT * 20):
        with sub._notifier.cond:
            if sub._events and sub._events[-1].state == "finished":  # changes may coalesce
                return True
        done.wait(0.05)
    return False


def test_waiting_thread_wakes(db):
    jobs.add(db, T, "j")
    sub = jobs.subscribe(db, T, "j")
    got = []
    waiter = threading.Thread(target=lambda: got.append(jobs.wait(sub, WAIT, state="finished")))
    waiter.start()
    jobs.finish(db, jobs.accept(db, T, timeout=0), {"ok": True})
    waiter.join(WAIT + 5)
    assert got and got[0].data == {"ok": True}


def test_bad_arguments(db):
    jobs.add(db, T, "j")
    sub = jobs.subscribe(db, T, "j")
    with pytest.raises(ValueError):
        jobs.wait(sub, 1, state="done")
    with pytest.raises(ValueError):
        jobs.wait(sub, -1)
    with pytest.raises(ValueError):
        jobs.wait([], 1)
    with pytest.raises(TypeError):
        jobs.wait("not a subscription", 1)
    with pytest.raises(ValueError):
        jobs.subscribe(db, "", "j")


def test_aio_wait(db):
    jobs.add(db, T, "j")

    async def main():
        sub = await jobs.aio.subscribe(db, T, "j")
        async with anyio.create_task_group() as tg:
            tg.start_soon(lambda: anyio.to_thread.run_sync(lambda: jobs.finish(db, jobs.accept(db, T, timeout=0))))
            with anyio.fail_after(WAIT):
                event = await jobs.aio.wait(sub, None, state="finished")
        assert event.state == "finished"
        with anyio.move_on_after(0.3):  # cancellable while waiting
            await jobs.aio.wait(jobs.subscribe(db, T, "j"), None)

    anyio.run(main)
