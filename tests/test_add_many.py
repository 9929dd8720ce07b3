"""``jobs.add_many``: many jobs at once, each by ``add``'s rules; every job checked before
anything is written; all or nothing in a transaction; chunked and retried safely on a
database; counted as ``add`` counts."""

from __future__ import annotations

import time

import anyio
import pytest

import jobs
import jobs.aio
from jobs import NewJob
from jobs.queue import creator
from jobs.observe import status
from jobs.engine.faults import FaultInjectingDatabase

T = "bulk"


@pytest.fixture
def db(db):
    jobs.set_type_timeout(db, T, 60)
    return db


def infos(db) -> dict:
    return {j.id: (j.state, j.data, j.scheduled_time, j.priority, j.key) for j in jobs.get_jobs(db, T)}


def test_new_jobs_in_every_form(db):
    later = time.time() + 3600
    jobs.add_many(db, T, ["a", ("b", {"x": 1}), NewJob("c", {"y": 2}, later, priority=-1),
                          NewJob("d", key="tenant")])
    assert infos(db) == {"a": ("pending", {}, 0.0, 0, None), "b": ("pending", {"x": 1}, 0.0, 0, None),
                         "c": ("pending", {"y": 2}, later, -1, None), "d": ("pending", {}, 0.0, 0, "tenant")}
    taken = {jobs.accept(db, T, timeout=0).id for _ in range(3)}
    assert taken == {"a", "b", "d"}  # c is scheduled later


def test_existing_jobs_follow_adds_rules(db, app):
    """The same store reached by add and by add_many: the same result."""
    def setup(store):
        jobs.set_type_timeout(store, T, 60)
        jobs.add(store, T, "run", {"old": True})
        jobs.add(store, T, "done", {"old": True})
        for job in (jobs.accept(store, T, timeout=0), jobs.accept(store, T, timeout=0)):
            if job.id == "done":
                jobs.finish(store, job)
        for job_id in ("pend", "pend-same"):
            jobs.add(store, T, job_id, {"old": True})

    setup(db)
    setup(app)
    later = time.time() + 600
    batch = [NewJob("pend", {"new": 1}, later), NewJob("pend-same", {"new": 2}), NewJob("run", {"new": 3}, later),
             NewJob("done", {"new": 4}), NewJob("fresh", {"new": 5})]
    jobs.add_many(db, T, batch)
    for job in batch:
        jobs.add(app, T, *job)
    assert infos(db) == infos(app)
    assert infos(db)["pend-same"][1] == {"old": True}  # pending at the same time: nothing written
    assert infos(db)["run"][0] == "running"


@pytest.fixture
def app(tmp_path):
    store = jobs.open("sqlite:" + str(tmp_path / "reference.sqlite"))
    yield store
    store.close()


@pytest.mark.parametrize("item, error, message", [
    (("ok", {"x": 1}, -1.0), ValueError, r"jobs\[1\]: .*scheduled"),
    (("ok", None, 0, True), ValueError, r"jobs\[1\]: .*priority"),
    (("ok", {"x": {1, 2}}), jobs.JobDataError, r"jobs\[1\]"),
    (("bad\nid",), ValueError, r"jobs\[1\]: .*control"),
    (("ok", None, 0, 0, None, "extra"), TypeError, r"jobs\[1\]"),
    (7, TypeError, r"jobs\[1\]"),
    ((), TypeError, r"jobs\[1\]"),
    ("first", ValueError, r"jobs\[1\]: job id 'first' is given twice"),
])
def test_a_bad_job_is_named_and_nothing_is_written(db, item, error, message):
    with pytest.raises(error, match=message):
        jobs.add_many(db, T, ["first", item, "last"])
    assert jobs.get_jobs(db, T) == []


def test_in_a_transaction_all_or_nothing(db):
    @jobs.transactional
    def body(tr):
        jobs.add_many(tr, T, [f"j{i}" for i in range(10)])
        raise RuntimeError("the caller fails after adding")

    with pytest.raises(RuntimeError):
        body(db)
    assert jobs.get_jobs(db, T) == []


def test_no_type_timeout(db):
    with pytest.raises(jobs.NoTypeTimeout):
        jobs.add_many(db, "untimed", ["a"])


def test_a_database_gets_chunks_each_retried_safely(db, monkeypatch):
    """Commits that fail (1020, 1021 whether they happened or not): every job added once,
    pending once, counted once."""
    monkeypatch.setattr(creator, "BULK_CHUNK", 7)
    faulty = FaultInjectingDatabase(db, conflict=0.2, unknown_committed=0.3, unknown_not_committed=0.2, seed=5)
    jobs.add_many(faulty, T, [(f"j{i:03d}", {"i": i}) for i in range(100)])
    assert faulty.faults > 0
    assert [j.data["i"] for j in jobs.get_jobs(db, T)] == list(range(100))
    (t,) = status.gather(db).types
    exact = {x.type: x for x in status.gather(db, exact=True).types}[T]
    assert (t.pending, t.due) == (exact.pending, exact.due) == (100, 100)
    assert jobs.pending_count(db, T) == 100


def test_the_async_twin(db):
    async def main():
        await jobs.aio.add_many(db, T, ["x", "y"])

    anyio.run(main)
    assert sorted(infos(db)) == ["x", "y"]


def test_the_bulk_benchmark_runs(tmp_path):
    from bench import bulk

    assert bulk.main(["--jobs", "200", "--repeat", "1", "--dir", str(tmp_path)]) == 0
