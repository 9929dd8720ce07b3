"""Fair turns between job keys: keys take turns whatever their
backlog, a new key's first job waits at most one pick, unkeyed jobs take part as one more
key, priorities and scheduled times order each key's own jobs, and every re-enqueue puts a
job back in its key's queue.  Single worker, so the order is exact."""

from __future__ import annotations

import time

import pytest

import jobs
from jobs.queue import activity
from jobs.controls import fairness
from jobs.engine.transactional import run
from waiting import DEADLINE

T = "t"


@pytest.fixture(autouse=True)
def type_timeout(db):
    jobs.set_type_timeout(db, T, 60)


def add_many(db, n: int, prefix: str, key: str | None, **kwargs) -> None:
    def body(tr):
        for i in range(n):
            jobs.add(tr, T, f"{prefix}{i:04d}", key=key, **kwargs)

    run(db, body)


def run_one(db) -> jobs.Job | None:
    job = jobs.accept(db, T, timeout=0)
    if job is not None:
        jobs.finish(db, job)
    return job


def key_of(job) -> str:
    return job.id[0]


def places(db) -> dict[str, int]:
    return run(db, lambda tr: fairness.counts(tr, T))


def test_two_keys_alternate_whatever_their_backlog(db):
    add_many(db, 200, "a", "A")
    add_many(db, 5, "b", "B")
    order = [key_of(run_one(db)) for _ in range(10)]
    for i in range(0, 10, 2):  # each turn serves A once and B once, in either order
        assert sorted(order[i:i + 2]) == ["a", "b"], order
    assert [key_of(run_one(db)) for _ in range(3)] == ["a"] * 3  # B is done


def test_a_new_keys_first_job_waits_at_most_one_pick(db):
    add_many(db, 300, "a", "A")
    for _ in range(20):
        assert key_of(run_one(db)) == "a"
    jobs.add(db, T, "b-lone", key="B")
    assert "b" in [key_of(run_one(db)) for _ in range(2)]


def test_unkeyed_jobs_take_part_as_one_more_key(db):
    add_many(db, 50, "a", "A")
    add_many(db, 50, "c", "C")
    add_many(db, 50, "u", None)
    order = [key_of(run_one(db)) for _ in range(30)]
    for i in range(0, 30, 3):
        assert sorted(order[i:i + 3]) == ["a", "c", "u"], order


def test_without_keys_the_queue_is_the_types_as_before(db):
    add_many(db, 5, "u", None)
    assert places(db) == {"turns": 0, "asleep": 0, "full": 0}
    assert sorted(run_one(db).id for _ in range(5)) == [f"u{i:04d}" for i in range(5)]


def test_priorities_order_a_keys_own_jobs(db):
    jobs.add(db, T, "a-late", key="A", priority=5)
    jobs.add(db, T, "a-first", key="A", priority=-5)
    jobs.add(db, T, "a-mid", key="A")
    assert [run_one(db).id for _ in range(3)] == ["a-first", "a-mid", "a-late"]


def test_a_key_whose_jobs_are_scheduled_later_sleeps_until_then(db):
    at = time.time() + 0.5
    jobs.add(db, T, "b-later", key="B", scheduled_time=at)
    assert places(db)["asleep"] == 1
    assert jobs.accept(db, T, timeout=0) is None
    job = jobs.accept(db, T, timeout=DEADLINE)
    assert job is not None and job.id == "b-later"
    assert time.time() >= at
    jobs.finish(db, job)
    assert jobs.accept(db, T, timeout=0) is None
    assert places(db) == {"turns": 0, "asleep": 0, "full": 0}  # the key left once empty


def test_an_earlier_job_wakes_a_sleeping_key(db):
    jobs.add(db, T, "b-tomorrow", key="B", scheduled_time=time.time() + 86400)
    jobs.add(db, T, "b-now", key="B")
    assert places(db)["turns"] == 1
    assert run_one(db).id == "b-now"


def test_keyed_jobs_are_counted_shown_and_removed(db):
    add_many(db, 3, "a", "A")
    jobs.add(db, T, "u")
    jobs.add(db, T, "a-later", key="A", scheduled_time=time.time() + 3600)
    assert jobs.pending_count(db, T) == 5
    assert jobs.pending_count(db, T, time.time()) == 4
    assert jobs.get_job(db, T, "a0001").key == "A"
    assert jobs.get_job(db, T, "u").key is None
    for i in range(3):
        jobs.remove(db, T, f"a{i:04d}")
    jobs.remove(db, T, "a-later")
    assert jobs.pending_count(db, T) == 1
    assert run_one(db).id == "u"
    assert jobs.accept(db, T, timeout=0) is None
    assert places(db) == {"turns": 0, "asleep": 0, "full": 0}


def test_re_adding_with_another_key_moves_the_job(db):
    jobs.add(db, T, "j", key="A")
    jobs.add(db, T, "j", key="B")
    assert jobs.get_job(db, T, "j").key == "B"
    job = jobs.accept(db, T, timeout=0)
    assert job.id == "j" and jobs.accept(db, T, timeout=0) is None


@pytest.mark.parametrize("back", ["release", "lost", "resubmitted"])
def test_every_re_enqueue_puts_a_job_back_in_its_keys_queue(db, back):
    jobs.set_limits(db, T, key_concurrency=1)
    jobs.add(db, T, "a0", key="A")
    job = jobs.accept(db, T, timeout=0)
    if back == "release":
        jobs.release(db, job)
    elif back == "lost":
        stamp = activity.last_activity(db.create_transaction(), T)
        assert run(db, activity.reenqueue_inactive, T, stamp, 10)[0] == 1
    else:
        jobs.resubmit(db, job)
        jobs.finish(db, job)
    info = jobs.get_job(db, T, "a0")
    assert (info.state, info.key) == ("pending", "A")
    again = jobs.accept(db, T, timeout=0)
    assert again is not None and again.id == "a0"


def test_a_full_key_steps_aside_and_comes_back(db):
    jobs.set_limits(db, T, key_concurrency=1)
    add_many(db, 3, "a", "A")
    add_many(db, 3, "b", "B")
    first = [jobs.accept(db, T, timeout=0) for _ in range(3)]
    assert sorted(key_of(j) for j in first if j) == ["a", "b"] and first[2] is None
    assert places(db)["full"] == 2
    jobs.finish(db, next(j for j in first if j and key_of(j) == "a"))
    nxt = jobs.accept(db, T, timeout=0)
    assert nxt is not None and key_of(nxt) == "a"


def test_a_batch_takes_turns_too(db):
    add_many(db, 20, "a", "A")
    add_many(db, 20, "b", "B")
    batch = jobs.accept_many(db, T, 6, timeout=0)
    assert sorted(key_of(j) for j in batch) == ["a"] * 3 + ["b"] * 3


def test_a_submitted_task_keeps_its_key_across_retries(db):
    import processors
    from waiting import running, wait_until

    p = processors.Processor(db)
    attempts = []

    @p.handler("keyed", timeout=30, retry=processors.Retry(max_attempts=2, backoff=0))
    def flaky(ctx):
        attempts.append(jobs.get_job(db, "keyed", ctx.job_id).key)
        if len(attempts) == 1:
            raise RuntimeError("once")
        return {"ok": True}

    future = p.submit("keyed", {}, key="tenant-7")  # (the handler's timeout= set the type's)
    with running(p):
        assert future.result(DEADLINE) == {"ok": True}
    assert attempts == ["tenant-7", "tenant-7"]
    with pytest.raises(ValueError, match="key must not be empty"):
        p.submit("keyed", {}, key="")
    assert wait_until(lambda: jobs.get_job(db, "keyed", future.job_id).key == "tenant-7")


def test_an_accept_with_no_keyed_jobs_reads_no_rotation(db):
    """Whether any key has pending jobs is asked with the accept's first reads (a
    selector, answered with them): with none, the accept makes no range read of the
    rotation, a round trip less on a cluster; with keyed jobs it reads the rotation."""
    from jobs import keys
    from jobs.engine.counting import CountingDatabase

    counted = CountingDatabase(db)
    rotation = keys.keys_prefix(T)

    def rotation_reads() -> int:
        return sum(1 for tally in counted.take() for begin, _end, _rows in tally.range_reads
                   if begin.startswith(rotation))

    add_many(db, 2, "u", None)
    assert run_one(counted) is not None and rotation_reads() == 0
    add_many(db, 2, "k", "tenant-a")
    assert run_one(counted) is not None and rotation_reads() >= 1
