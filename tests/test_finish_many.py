"""``jobs.finish_many``: a batch of finishes in one transaction ends exactly as ``finish``
called for each job would (rows, counters, rates, the finished and failed indexes), each
job fenced on its own; per-type work is written once per batch, not once per job; bad
input is refused before anything is written."""

from __future__ import annotations

import pytest

import jobs
import jobs.aio
from jobs import keys
from jobs.observe import status
from jobs.engine.counting import CountingDatabase
from jobs.engine.faults import FaultInjectingDatabase
from stored import indexed, snapshot

T = "t"


@pytest.fixture
def db(db):
    jobs.set_type_timeout(db, T, 60)
    return db


@pytest.fixture
def reference(tmp_path):
    store = jobs.open("sqlite:" + str(tmp_path / "reference.sqlite"))
    jobs.set_type_timeout(store, T, 60)
    yield store
    store.close()


def _prepare(store) -> dict[str, jobs.Job]:
    """Held jobs in every situation a finish meets: plain, new data, failed, failed with a
    reason, flagged to run again, removed, taken by another worker, finished already."""
    jobs.set_retention(store, T, finished=3600)  # finishes are indexed
    names = ["plain", "data", "failed", "reason", "again", "removed", "taken", "repeat"]
    jobs.add_many(store, T, [(name, {"name": name}) for name in names])
    held = {job.id: job for job in jobs.accept_many(store, T, len(names), timeout=0)}
    jobs.resubmit(store, held["again"])
    jobs.remove(store, T, "removed")
    jobs.release(store, held["taken"])
    assert jobs.accept(store, T, timeout=0).id == "taken"  # (another lock now)
    jobs.finish(store, held["repeat"])
    return held


def _batch(held: dict) -> list:
    return [held["plain"], (held["data"], {"result": 1}), (held["failed"], None, True),
            (held["reason"], {"partial": 2}, "out of memory"), held["again"], held["removed"], held["taken"],
            held["repeat"]]


def _one_by_one(store, batch: list) -> list:
    out = []
    for item in batch:
        job, data, failed = (item, None, False) if isinstance(item, jobs.Job) else (*item, *(None, False)[len(item) - 1:])
        try:
            out.append(jobs.finish(store, job, data, failed=failed))
        except jobs.Halt:
            out.append(None)
    return out


def _outcome(store) -> tuple:
    infos = {j.id: (j.state, j.data, j.scheduled_time) for j in jobs.get_jobs(store, T)}
    (counted,) = status.gather(store).types
    (exact,) = status.gather(store, exact=True).types
    numbers = [(t.pending, t.running, t.finished, t.failed) for t in (counted, exact)]
    rates = (counted.last_hour.finished, counted.last_hour.failed)
    failures = sorted((f.id, f.reason) for f in counted.recent_failures)
    return infos, numbers, rates, failures, indexed(store, T)


def test_a_batch_ends_as_finishing_each_job_would(db, reference):
    held, ref_held = _prepare(db), _prepare(reference)
    done = jobs.finish_many(db, _batch(held))
    assert done == _one_by_one(reference, _batch(ref_held))
    assert done == [True, True, True, True, True, None, None, False]
    mine, theirs = _outcome(db), _outcome(reference)
    assert mine == theirs
    infos, numbers, rates, _failures, _indexed = mine
    assert numbers[0] == numbers[1]  # the counters agree with a count key by key
    assert infos["again"][0] == "pending" and infos["taken"][0] == "running" and "removed" not in infos
    assert rates == (4, 2)  # plain, data, again, and repeat's own finish; failed, reason


def test_a_job_given_twice_is_finished_once(db):
    jobs.add(db, T, "a")
    job = jobs.accept(db, T, timeout=0)
    assert jobs.finish_many(db, [job, (job, {"late": 1})]) == [True, False]
    assert jobs.get_job(db, T, "a").data == {}
    (t,) = status.gather(db).types
    assert (t.running, t.finished) == (0, 1)


def test_per_type_work_is_written_once_per_batch(db):
    """Counters, rates and the activity stamp: the same writes for 2 jobs as for 20."""
    def per_type_writes(n: int) -> int:
        jobs.add_many(db, T, [f"n{n}-{i}" for i in range(n)])
        held = jobs.accept_many(db, T, n, timeout=0)
        counting = CountingDatabase(db)
        assert jobs.finish_many(counting, held) == [True] * n
        (tally,) = counting.take()
        shared = (keys.COUNTS, keys.RATES)
        return sum(1 for w in tally.writes if any(w.key.startswith(s.key()) for s in shared)
                   or w.op == "set_versionstamped_value" and w.key.startswith(keys.WATCHES_ACTIVITY.key()))

    assert per_type_writes(2) == per_type_writes(20) == 4  # running -n, finished +n, the rate, the stamp


def test_an_accept_carrying_finishes_stamps_the_types_activity_once(db):
    """A worker's outcomes riding its next accept: the finishes and the accept stamp the
    type's activity (what wakes its monitor and subscribers) with one call, not one each."""
    from jobs.queue.accepting import AcceptCall

    jobs.add_many(db, T, ["a", "b", "c"])
    held = jobs.accept_many(db, T, 2, timeout=0)
    counting = CountingDatabase(db)
    taken = AcceptCall(counting, T).attempt(lambda tr: jobs.finish_many(tr, held))
    assert len(held) == 2 and [job.id for job in taken] == sorted({"a", "b", "c"} - {job.id for job in held})
    (tally,) = counting.take()
    stamps = [w for w in tally.writes if w.key.startswith(keys.WATCHES_ACTIVITY.key())]
    assert len(stamps) == 1 and stamps[0].op == "set_versionstamped_value"
    assert (status.gather(db).types[0].running, status.gather(db).types[0].finished) == (1, 2)


@pytest.mark.parametrize("item, error, message", [
    ("a job id", ValueError, r"finishes\[1\]: expected a Job"),
    ((), TypeError, r"finishes\[1\]"),
    ((None, {}), TypeError, r"finishes\[1\]: expected a Job"),
    (("held", {"x": {1, 2}}), jobs.JobDataError, r"finishes\[1\]"),
])
def test_bad_input_is_named_and_nothing_is_written(db, item, error, message):
    jobs.add_many(db, T, ["a", "b"])
    a, b = jobs.accept_many(db, T, 2, timeout=0)
    item = tuple(b if part == "held" else part for part in item) if isinstance(item, tuple) else item
    before = snapshot(db)
    with pytest.raises(error, match=message):
        jobs.finish_many(db, [a, item])
    assert snapshot(db) == before


def test_a_job_of_another_store_writes_nothing(db, reference):
    jobs.add(db, T, "a")
    jobs.add(reference, T, "b")
    mine, foreign = jobs.accept(db, T, timeout=0), jobs.accept(reference, T, timeout=0)
    before = snapshot(db)
    with pytest.raises(jobs.ForeignJobError):
        jobs.finish_many(db, [mine, foreign])
    assert snapshot(db) == before


def test_retried_commits_finish_each_job_once(db):
    """Commits that fail (1020, 1021 whether they happened or not): every job finished
    once and counted once."""
    jobs.add_many(db, T, [f"j{i:02d}" for i in range(40)])
    held = jobs.accept_many(db, T, 40, timeout=0)
    faulty = FaultInjectingDatabase(db, conflict=0.3, unknown_committed=0.3, unknown_not_committed=0.2, seed=3)
    for i in range(0, 40, 8):
        assert jobs.finish_many(faulty, held[i:i + 8]) in ([True] * 8, [False] * 8)
    assert faulty.faults > 0
    assert all(j.state == "finished" for j in jobs.get_jobs(db, T))
    (t,) = status.gather(db).types
    assert (t.running, t.finished, t.last_hour.finished) == (0, 40, 40)


def test_the_async_twin(db):
    import anyio

    jobs.add(db, T, "a")
    job = jobs.accept(db, T, timeout=0)

    async def main():
        return await jobs.aio.finish_many(db, [(job, {"ok": True})])

    assert anyio.run(main) == [True]
    assert jobs.get_job(db, T, "a").data == {"ok": True}
