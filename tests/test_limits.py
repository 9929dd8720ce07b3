"""Concurrency and rate limits per type and per key, in the job layer:
set, read and cleared like the other controls; at most N running and M started per
period, whatever path a job stops running by; waiting accepts wake when a slot frees.
Several processes racing: ``test_limits_processes.py``."""

from __future__ import annotations

import threading
import time

import pytest

import jobs
from jobs.queue import activity
from jobs.controls import fairness, limits
from jobs import keys
from jobs.engine.transactional import run
from jobs.controls.limits import MAX_SLOTS, Limits, Rate
from waiting import DEADLINE

T = "t"


@pytest.fixture(autouse=True)
def type_timeout(db):
    jobs.set_type_timeout(db, T, 60)


def add_jobs(db, n: int, prefix: str = "j", key: str | None = None) -> None:
    for i in range(n):
        jobs.add(db, T, f"{prefix}{i:03d}", key=key)


def take_all(db, type: str = T) -> list[jobs.Job]:
    taken = []
    while (job := jobs.accept(db, type, timeout=0)) is not None:
        taken.append(job)
    return taken


# --- the record ----------------------------------------------------------------------------


def test_set_get_and_clear(db):
    assert jobs.get_limits(db, T) is None
    jobs.set_limits(db, T, concurrency=3, rate=(10, 60), key_concurrency=1, key_rate=Rate(2, 1.5))
    assert jobs.get_limits(db, T) == Limits(3, Rate(10, 60.0), 1, Rate(2, 1.5))
    jobs.set_limits(db, T, rate=(5, 1))  # replaces every limit
    assert jobs.get_limits(db, T) == Limits(rate=Rate(5, 1.0))
    jobs.clear_limits(db, T)
    assert jobs.get_limits(db, T) is None
    jobs.clear_limits(db, T)  # nothing to clear: fine


@pytest.mark.parametrize("kwargs, message", [
    ({"concurrency": 0}, "concurrency must be from 1"),
    ({"concurrency": -2}, "concurrency must be from 1"),
    ({"concurrency": MAX_SLOTS + 1}, "concurrency must be from 1"),
    ({"concurrency": True}, "concurrency must be an int"),
    ({"concurrency": 2.0}, "concurrency must be an int"),
    ({"rate": 5}, r"rate must be \(count, seconds\)"),
    ({"rate": (5,)}, r"rate must be \(count, seconds\)"),
    ({"rate": (5, 0)}, "rate's seconds must be positive"),
    ({"rate": (0, 1)}, "rate's count must be from 1"),
    ({"key_rate": (1, float("nan"))}, "key_rate's seconds must be a finite number"),
    ({"key_concurrency": "2"}, "key_concurrency must be an int"),
])  # fmt: skip
def test_bad_limits_are_refused_and_nothing_is_written(db, kwargs, message):
    jobs.set_limits(db, T, concurrency=4)
    with pytest.raises(ValueError, match=message):
        jobs.set_limits(db, T, **kwargs)
    assert jobs.get_limits(db, T) == Limits(concurrency=4)


def test_a_bad_key_is_refused(db):
    with pytest.raises(ValueError, match="key must not be empty"):
        jobs.add(db, T, "j", key="")
    with pytest.raises(ValueError, match="control character"):
        jobs.add(db, T, "j", key="a\nb")
    with pytest.raises(TypeError, match="key must be a str"):
        jobs.add(db, T, "j", key=7)
    assert jobs.get_jobs(db, T) == []


# --- running limits ------------------------------------------------------------------------


def test_at_most_n_jobs_of_a_type_run_at_once(db):
    jobs.set_limits(db, T, concurrency=3)
    add_jobs(db, 10)
    held = take_all(db)
    assert len(held) == 3
    jobs.finish(db, held[0])
    more = take_all(db)
    assert len(more) == 1
    assert len(jobs.accept_many(db, T, 5, timeout=0)) == 0  # a batch is bounded as well
    for job in held[1:] + more:
        jobs.finish(db, job)
    assert len(jobs.accept_many(db, T, 5, timeout=0)) == 3


def test_a_waiting_accept_wakes_when_a_running_slot_frees(db):
    jobs.set_limits(db, T, concurrency=1)
    add_jobs(db, 2)
    first = jobs.accept(db, T, timeout=0)
    got = []
    waiter = threading.Thread(target=lambda: got.append(jobs.accept(db, T, timeout=DEADLINE)))
    waiter.start()
    time.sleep(0.2)  # (the waiter is waiting, or about to: either way it must get the job)
    assert not got
    jobs.finish(db, first)
    waiter.join(DEADLINE + 5)
    assert got and got[0] is not None and got[0].id != first.id


@pytest.mark.parametrize("stop", ["release", "remove", "lost", "resubmitted"])
def test_every_way_a_job_stops_running_frees_its_slot(db, stop):
    jobs.set_limits(db, T, concurrency=1)
    add_jobs(db, 2)
    job = jobs.accept(db, T, timeout=0)
    assert jobs.accept(db, T, timeout=0) is None
    if stop == "release":
        jobs.release(db, job)
    elif stop == "remove":
        jobs.remove(db, T, job.id)
    elif stop == "lost":  # the activity monitor's re-enqueue
        stamp = activity.last_activity(db.create_transaction(), T)
        assert run(db, activity.reenqueue_inactive, T, stamp, 10)[0] == 1
    else:
        jobs.resubmit(db, job)
        jobs.finish(db, job)
    assert jobs.accept(db, T, timeout=0) is not None


def test_lowering_the_limit_lets_the_jobs_above_it_finish(db):
    jobs.set_limits(db, T, concurrency=3)
    add_jobs(db, 6)
    held = take_all(db)
    jobs.set_limits(db, T, concurrency=1)
    assert take_all(db) == []
    for job in held:
        jobs.finish(db, job)
    assert len(take_all(db)) == 1


def test_clearing_the_limits_lets_every_job_run(db):
    jobs.set_limits(db, T, concurrency=1)
    add_jobs(db, 4)
    held = take_all(db)
    jobs.clear_limits(db, T)
    assert len(held) + len(take_all(db)) == 4
    jobs.finish(db, held[0])  # (a slot held from before is freed as usual)


def test_per_key_running_limit(db):
    jobs.set_limits(db, T, key_concurrency=1)
    add_jobs(db, 3, "a", key="A")
    add_jobs(db, 2, "b", key="B")
    jobs.add(db, T, "free")  # no key: no per-key limit
    held = take_all(db)
    assert sorted(j.id[0] for j in held) == ["a", "b", "f"]
    a = next(j for j in held if j.id.startswith("a"))
    jobs.finish(db, a)
    again = take_all(db)
    assert [j.id[0] for j in again] == ["a"]  # key A came back when its slot was freed


def test_keys_and_type_limits_together(db):
    jobs.set_limits(db, T, concurrency=3, key_concurrency=2)
    for key in "ABC":
        add_jobs(db, 3, key.lower(), key=key)
    held = take_all(db)
    assert len(held) == 3
    by_key = {}
    for job in held:
        by_key[job.id[0]] = by_key.get(job.id[0], 0) + 1
    assert max(by_key.values()) <= 2


# --- rate limits ---------------------------------------------------------------------------


def test_at_most_m_jobs_start_per_period(db):
    jobs.set_limits(db, T, rate=(2, 3600))
    add_jobs(db, 5)
    held = take_all(db)
    assert len(held) == 2
    for job in held:
        jobs.finish(db, job)
    assert take_all(db) == []  # finishing does not give a start back


def test_a_waiting_accept_starts_once_the_period_has_passed(db):
    period = 0.5
    jobs.set_limits(db, T, rate=(2, period))
    add_jobs(db, 3)
    started = time.time()
    first = take_all(db)
    assert len(first) == 2
    third = jobs.accept(db, T, timeout=DEADLINE)
    assert third is not None
    assert time.time() >= started + period  # (a lower bound the limit guarantees)


def test_per_key_rate(db):
    jobs.set_limits(db, T, key_rate=(1, 3600))
    add_jobs(db, 3, "a", key="A")
    add_jobs(db, 3, "b", key="B")
    held = take_all(db)
    assert sorted(j.id[0] for j in held) == ["a", "b"]
    counts = run(db, lambda tr: fairness.counts(tr, T))
    assert counts["asleep"] == 2  # both keys sleep until their next rate slot frees


def test_a_limit_set_in_the_same_transaction_as_adds(db):
    def body(tr):
        jobs.set_limits(tr, T, concurrency=1)
        jobs.add(tr, T, "x")
        jobs.add(tr, T, "y")

    run(db, body)
    assert len(take_all(db)) == 1


def test_slots_are_in_the_store_for_people(db):
    jobs.set_limits(db, T, concurrency=2, rate=(10, 60))
    add_jobs(db, 3)
    take_all(db)
    usage = run(db, lambda tr: limits.usage(tr, T, jobs.get_limits(tr, T), time.time()))
    assert usage == (2, 2)
    assert run(db, lambda tr: limits.limited_types(tr)) == {T: Limits(2, Rate(10, 60.0))}
    assert keys.limits_key(T).startswith(keys.ROOT.key())


# --- a Processor -------------------------------------------------------------------------


def test_a_processor_keeps_to_the_limits(db):
    from processors import Processor
    from waiting import running, wait_until

    jobs.set_limits(db, "work", concurrency=2, key_concurrency=1)
    p = Processor(db)
    lock = threading.Lock()
    now: dict[str, int] = {}
    peaks = {"all": 0}

    @p.handler("work", timeout=30)
    def work(ctx):
        key = ctx.data["key"]
        with lock:
            now[key] = now.get(key, 0) + 1
            peaks["all"] = max(peaks["all"], sum(now.values()))
            peaks[key] = max(peaks.get(key, 0), now[key])
        time.sleep(0.02)  # long enough for the other lanes to try to start more
        with lock:
            now[key] -= 1

    jobs.set_type_timeout(db, "work", 30)
    run(db, lambda tr: [jobs.add(tr, "work", f"k{i % 3}-{i}", {"key": f"k{i % 3}"}, key=f"k{i % 3}")
                        for i in range(24)])
    with running(p, concurrency=4):
        assert wait_until(lambda: all(info.state == "finished" for info in jobs.get_jobs(db, "work")))
    assert peaks["all"] <= 2 and all(peaks[f"k{i}"] <= 1 for i in range(3))


def test_clearing_the_limits_wakes_a_waiting_accept(db):
    jobs.set_limits(db, T, concurrency=1)
    add_jobs(db, 2)
    jobs.accept(db, T, timeout=0)
    got = []
    waiter = threading.Thread(target=lambda: got.append(jobs.accept(db, T, timeout=DEADLINE)))
    waiter.start()
    time.sleep(0.2)  # (the waiter is waiting, or about to: either way it must get the job)
    jobs.clear_limits(db, T)
    waiter.join(DEADLINE + 5)
    assert got and got[0] is not None
