"""Throughput and start waits per type: finishes and failures per
minute, and how long started jobs waited, kept as sharded per-minute counters; read over
the last hour by ``jobsctl status``, ``/status``, ``/metrics`` and the dashboard; cleared
after an hour by the counters' upkeep."""

from __future__ import annotations

import time

import pytest

import jobs
from jobs import keys
from jobs.indexes import rates
from jobs.observe import status
from jobs.codec import pack_int
from jobs.engine import strinc
from jobs.engine.counting import CountingDatabase
from jobs.engine.transactional import run
from monitor.counters import CounterPruner
from monitor.metrics import metrics_text

T = "t"


@pytest.fixture(autouse=True)
def type_timeout(db):
    jobs.set_type_timeout(db, T, 60)


def last_hour(db) -> rates.Rates:
    return run(db, lambda tr: rates.read(tr, T, time.time()))


def test_finished_failed_and_started_are_counted(db):
    for i in range(6):
        jobs.add(db, T, f"j{i}", key="k" if i % 2 else None)
    for i in range(6):
        job = jobs.accept(db, T, timeout=0)
        jobs.finish(db, job, failed="boom" if i < 2 else False)
    r = last_hour(db)
    assert (r.started, r.finished, r.failed) == (6, 4, 2)
    assert 0 <= r.wait_p50 <= r.wait_p99 < 60


def test_the_wait_counts_from_when_the_job_was_due(db, monkeypatch):
    with monkeypatch.context() as m:  # a job enqueued 100 s ago, by the enqueuer's clock
        m.setattr(jobs.indexes.pending, "time", type("Clock", (), {"time": staticmethod(lambda: time.time() - 100)}))
        jobs.add(db, T, "late", scheduled_time=time.time() - 200)  # due since it was enqueued
    job = jobs.accept(db, T, timeout=0)
    r = last_hour(db)
    assert 100 <= r.wait_p50 <= 100 * rates.BASE + 5 and r.wait_p99 == r.wait_p50
    jobs.finish(db, job)


def test_a_batch_counts_each_job(db):
    for i in range(10):
        jobs.add(db, T, f"j{i}")
    assert len(jobs.accept_many(db, T, 10, timeout=0)) == 10
    assert last_hour(db).started == 10


def test_an_accept_carrying_a_finish_adds_to_one_rate_key(db):
    """A worker's outcome riding its next accept: the finish is counted in the key the
    start adds to (one write, not two); a finish alone, and an accept alone, add to one key
    each; every count is read back."""
    from jobs.queue.accepting import AcceptCall

    jobs.add_many(db, T, ["a", "b", "c"])
    held = jobs.accept(db, T, timeout=0)
    counting = CountingDatabase(db)

    def rate_writes() -> list:
        (tally,) = counting.take()
        return [w for w in tally.writes if w.key.startswith(keys.RATES.key())]

    taken = AcceptCall(counting, T).attempt(lambda tr: jobs.finish_many(tr, [held]))
    assert len(taken) == 1
    (write,) = rate_writes()
    assert write.op == "add" and isinstance(keys.RATES.unpack(write.key)[2], int)
    jobs.finish(counting, taken[0], failed="boom")
    (write,) = rate_writes()
    assert keys.RATES.unpack(write.key)[2] is None  # (no job started in that transaction)
    r = last_hour(db)
    assert (r.started, r.finished, r.failed) == (2, 1, 1)
    assert [m[1:] for m in r.minutes] in ([(2, 1, 1, 0)], [(1, 1, 0, 0), (1, 0, 1, 0)], [(2, 1, 0, 0), (0, 0, 1, 0)])


def test_counters_of_one_key_never_spill_into_each_other(db):
    """The four counters of a key are added as one 32-byte integer: counts near their
    lane's size, added many times, stay each in its own."""
    big = (1 << 62) + 12345

    def write(tr):
        rated = {}
        rates.started(rated, T, [0.0] * 3)
        rates.finished(rated, T, False, big)
        rates.finished(rated, T, True, big - 1)
        rates.finished(rated, T, False, big - 2, retried=True)
        rates.write(tr, 0, rated)

    for _ in range(3):
        run(db, write)
    r = last_hour(db)
    assert (r.started, r.finished, r.failed, r.retried) == (9, 3 * big, 3 * (big - 1), 3 * (big - 2))


def test_a_failed_run_of_a_job_that_runs_again_is_retried_not_finished(db):
    """A run that failed and whose job was made pending again (a retry) is counted as
    retried: the last hour's finished are the runs that succeeded, as jobsctl status's
    FINISHED column counts jobs that succeeded."""
    jobs.add_many(db, T, ["again", "done", "bad"])
    again = jobs.accept(db, T, timeout=0)

    @jobs.transactional
    def retry(tr, job):
        jobs.resubmit(tr, job, scheduled_time=0)
        jobs.finish(tr, job, failed="boom, to run again")

    retry(db, again)
    jobs.finish(db, jobs.accept(db, T, timeout=0))
    jobs.finish(db, jobs.accept(db, T, timeout=0), failed="boom")
    r = last_hour(db)
    assert (r.started, r.finished, r.failed, r.retried) == (3, 1, 1, 1)
    assert sum(m[4] for m in r.minutes) == 1
    st = status.gather(db)
    assert (st.types[0].finished, st.types[0].failed, st.types[0].pending) == (1, 1, 1)


def test_keys_of_another_shape_are_passed_over(db):
    """Keys in the rates' range that ``write`` does not make (a bucket that is neither
    None nor an int) count for nothing."""
    minute = int(time.time() // 60)

    def foreign(tr):
        for kind, n in (("finished", 5), ("failed", 2), (("wait", 0), 4), (("wait", 40), 1)):
            tr.add(keys.RATES.pack((T, minute, kind)) + pack_int(3), n.to_bytes(8, "little"))

    run(db, foreign)
    jobs.add(db, T, "new")
    jobs.finish(db, jobs.accept(db, T, timeout=0))
    r = last_hour(db)
    assert (r.started, r.finished, r.failed, r.retried) == (1, 1, 0, 0)
    assert r.wait_p99 < 60 and [m[1:] for m in r.minutes] == [(1, 1, 0, 0)]


def test_buckets_and_quantiles():
    assert rates.bucket(0) == 0 and rates.bucket(0.0005) == 0
    assert rates.BASE ** (rates.bucket(2.0) - 1) < 2000 <= rates.BASE ** rates.bucket(2.0)
    assert rates._quantile({}, 0.5) is None
    assert rates._quantile({0: 99, 40: 1}, 0.5) == 0.0
    assert rates._quantile({0: 98, 40: 2}, 0.99) == rates.BASE ** 40 / 1000


def test_old_minutes_are_not_read_and_the_counters_upkeep_clears_them(db, monkeypatch):
    class Clock:
        @staticmethod
        def time():
            return real() - 2 * rates.KEEP

    real = time.time
    monkeypatch.setattr(rates, "time", Clock)
    jobs.add(db, T, "old")
    jobs.finish(db, jobs.accept(db, T, timeout=0))
    monkeypatch.undo()
    jobs.set_type_timeout(db, T, 60)
    assert last_hour(db) == rates.Rates()

    def count(tr):
        prefix = keys.RATES.pack((T,))
        return len(list(tr.get_range(prefix, strinc(prefix))))

    assert run(db, count) > 0
    CounterPruner(db).check()
    assert run(db, count) == 0


def test_status_metrics_and_text(db, capsys):
    jobs.add(db, T, "a")
    jobs.finish(db, jobs.accept(db, T, timeout=0), failed=True)
    st = status.gather(db)
    t = st.types[0]
    assert (t.last_hour.started, t.last_hour.failed) == (1, 1)
    g = type("G", (), {"status": st, "error": None, "seconds": 0.01})
    text = metrics_text(g)
    assert f'jobs_failed_last_hour{{type="{T}"}} 1' in text and f'jobs_started_last_hour{{type="{T}"}} 1' in text
    assert f'jobs_start_wait_seconds{{type="{T}",quantile="0.5"}}' in text
    from jobsctl import views

    assert "1 started, 0 finished, 1 failed; wait p50" in "\n".join(views.controls(st))
