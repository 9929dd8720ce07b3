"""What ``jobs.observe.status.gather`` reports of job keys and limits: keyed pending jobs (in their
keys' own queues) counted as pending, due, due as soon as possible and per priority band
like the type's own queue, and so not as finished; over several pages; the type's limits
with the running slots held and the jobs started in the rate period; its keys per place.
The command and the HTTP side: ``test_cli.py``, ``test_http_status.py``."""

from __future__ import annotations

import time

import pytest

import jobs
from jobs.observe import status, status_ranges
from jobs.engine.transactional import run

T = "t"


@pytest.fixture(autouse=True)
def type_timeout(db):
    jobs.set_type_timeout(db, T, 60)


def _type(db, name: str = T, **kw) -> status.TypeStatus:
    (found,) = [t for t in status.gather(db, **kw).types if t.type == name]
    return found


def mixed(db, monkeypatch) -> float:
    """Unkeyed and keyed jobs of ``t`` in every state: 1 finished, 1 running, and pending:
    unkeyed u0 (asap), u1 (due 500 s ago, priority -1), u2 (in an hour); keyed a0 (asap),
    a1 (asap, priority -1), a2 (in an hour, key a), b0 (due 200 s ago, enqueued 300 s ago,
    key b), c0 (in an hour, key c).  Returns when b0 was enqueued."""
    now = time.time()
    jobs.add(db, T, "f")
    jobs.finish(db, jobs.accept(db, T, timeout=0))
    jobs.add(db, T, "r")
    assert jobs.accept(db, T, timeout=0).id == "r"
    jobs.add(db, T, "u0")
    jobs.add(db, T, "u1", scheduled_time=now - 500, priority=-1)
    jobs.add(db, T, "u2", scheduled_time=now + 3600)
    jobs.add(db, T, "a0", key="a")
    jobs.add(db, T, "a1", key="a", priority=-1)
    jobs.add(db, T, "a2", key="a", scheduled_time=now + 3600)
    with monkeypatch.context() as m:  # enqueued 300 s ago, by the enqueuer's clock
        m.setattr(jobs.indexes.pending, "time", type("Clock", (), {"time": staticmethod(lambda: now - 300)}))
        jobs.add(db, T, "b0", key="b", scheduled_time=now - 200)
    jobs.add(db, T, "c0", key="c", scheduled_time=now + 3600)
    return now - 300


def test_keyed_pending_jobs_are_counted_as_pending_not_finished(db, monkeypatch):
    mixed(db, monkeypatch)
    t = _type(db)
    assert (t.pending, t.due, t.due_asap) == (8, 5, 3)  # u0 u1 u2 a0 a1 a2 b0 c0; u0 u1 a0 a1 b0; u0 a0 a1
    assert (t.running, t.finished, t.failed) == (1, 1, 0)
    assert t.bands == [status.Band(-1, 2, 2), status.Band(0, 6, 3)]
    assert 199 <= t.oldest_due_age < 400  # u1 waits since enqueued (now), b0 since due (200 s ago)
    assert t.keys == status.KeyPlaces(turns=2, asleep=1, full=0)  # a and b in turn, c asleep until its job
    assert t.limits is None and t.running_slots is None and t.started_in_period is None
    assert jobs.pending_count(db, T) == t.pending  # as the job layer counts them


def test_longest_wait_of_a_keyed_job(db, monkeypatch):
    enqueued = mixed(db, monkeypatch)
    for job_id in ("u0", "u1"):
        jobs.remove(db, T, job_id)
    t = _type(db)
    assert (t.pending, t.due) == (6, 3)
    assert t.oldest_due_age == pytest.approx(time.time() - (enqueued + 100), abs=5)  # b0: due 200 s ago


def test_keyed_jobs_counted_over_several_pages(db, monkeypatch):
    mixed(db, monkeypatch)
    for i in range(5):
        jobs.add(db, T, f"d{i}", key=f"k{i % 2}")
    expected = _type(db)
    monkeypatch.setattr(status_ranges, "BATCH", 2)
    monkeypatch.setattr(status_ranges, "DATA_BATCH", 3)
    t = _type(db, exact=True)
    assert (t.pending, t.due, t.due_asap, t.finished, t.running) == (13, 10, 8, 1, 1)
    assert (t.pending, t.due, t.due_asap, t.finished, t.bands, t.keys) == (
        expected.pending, expected.due, expected.due_asap, expected.finished, expected.bands, expected.keys)
    assert t.keys.turns == 4


def test_a_type_of_keyed_jobs_only(db):
    jobs.set_type_timeout(db, "keyed", 30)
    for i in range(3):
        jobs.add(db, "keyed", f"j{i}", key=f"k{i}", priority=i)
    t = _type(db, "keyed")
    assert (t.pending, t.due, t.due_asap, t.finished) == (3, 3, 3, 0)
    assert [(b.priority, b.pending) for b in t.bands] == [(0, 1), (1, 1), (2, 1)]
    job = jobs.accept(db, "keyed", timeout=0)
    jobs.finish(db, job)
    t = _type(db, "keyed")
    assert (t.pending, t.running, t.finished, t.keys.turns) == (2, 0, 1, 2)


def test_limits_and_their_use(db):
    jobs.set_limits(db, T, concurrency=3, rate=(10, 60), key_concurrency=1, key_rate=(5, 1.5))
    for i in range(2):
        jobs.add(db, T, f"a{i}", key="a")
    jobs.add(db, T, "u")
    t = _type(db)
    assert t.limits == jobs.Limits(3, jobs.Rate(10, 60.0), 1, jobs.Rate(5, 1.5))
    assert (t.running_slots, t.started_in_period) == (0, 0)
    taken = jobs.accept_many(db, T, 3, timeout=0)
    assert sorted(j.id for j in taken) in (["a0", "u"], ["a1", "u"])  # one job of key a at a time
    t = _type(db)
    assert (t.running, t.running_slots, t.started_in_period, t.pending) == (2, 2, 2, 1)
    assert t.keys == status.KeyPlaces(turns=0, asleep=0, full=1)  # a waits for its running job
    jobs.finish(db, taken[0])
    t = _type(db)
    assert (t.running_slots, t.started_in_period) == (1, 2)  # a start counts for the whole period
    assert _type(db, now=time.time() + 61).started_in_period == 0


def test_only_the_limits_set_are_used(db):
    jobs.set_limits(db, T, rate=(10, 60))
    t = _type(db)
    assert (t.running_slots, t.started_in_period) == (None, 0)
    jobs.set_limits(db, T, key_concurrency=2)
    t = _type(db)
    assert t.limits == jobs.Limits(key_concurrency=2) and (t.running_slots, t.started_in_period) == (None, None)
    jobs.clear_limits(db, T)
    assert _type(db).limits is None


def test_a_type_with_limits_only_is_listed(db):
    jobs.set_limits(db, "later", concurrency=2)
    assert "later" in run(db, status.job_types)
    t = _type(db, "later")
    assert (t.timeout, t.pending, t.running_slots) == (None, 0, 0)
    jobs.clear_limits(db, "later")
    assert "later" not in run(db, status.job_types)


def test_a_retried_page_is_counted_once(db, monkeypatch):
    """Every status transaction run twice, as the retry loop does after a failed attempt:
    the entries of a page are told once, from the attempt that returned."""
    for i in range(5):
        jobs.add(db, T, f"x{i}")
        jobs.finish(db, jobs.accept(db, T, timeout=0), failed=f"boom {i}")
    for i in range(6):
        jobs.add(db, T, f"k{i}", key=f"k{i % 2}")
    monkeypatch.setattr(status_ranges, "BATCH", 2)
    expected = _type(db)
    real = status_ranges.run

    def twice(db, fn, *args):
        real(db, fn, *args)
        return real(db, fn, *args)

    monkeypatch.setattr(status, "run", twice)
    monkeypatch.setattr(status_ranges, "run", twice)
    t = _type(db, exact=True)
    assert (t.pending, t.due, t.due_asap, t.failed, t.bands) == (
        expected.pending, expected.due, expected.due_asap, expected.failed, expected.bands)
    assert [f.id for f in t.recent_failures] == [f.id for f in expected.recent_failures]
    assert len(t.recent_failures) == len({f.id for f in t.recent_failures}) == 5
    assert (t.pending, t.failed) == (6, 5)
