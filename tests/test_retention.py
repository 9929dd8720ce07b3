"""Retention: finished jobs (and failed ones, on their own period) are removed once they
are older than their type's retention, by the monitor's retention duty in bounded batches or
by ``jobs.prune``; the index they are found by follows every change of a job's state; jobs
finished while their type had no retention are indexed once; and a steady workload keeps
the store's size flat.  Ages come from the index's finish times, which tests move back
(``stored.age_finished``) rather than wait: nothing here asserts how fast."""

from __future__ import annotations

import math

import orjson

import pytest

import jobs
import processors
from jobs.queue import finished
from jobs import keys
from jobs.upkeep import pruning
from jobs.engine.faults import FaultInjectingDatabase
from jobs.engine.transactional import run
import monitor
from monitor import retention as retention_pass

from stored import age_finished, indexed, snapshot
from waiting import wait_until

T = "t"
DAY = 86_400.0


@pytest.fixture(autouse=True)
def type_timeout(db):
    jobs.set_type_timeout(db, T, 60)


def run_jobs(db, ids, failed=False, type=T):
    """Add, accept and finish each job of ``ids`` (``failed``: finished failed)."""
    for job_id in ids:
        jobs.add(db, type, job_id, {"n": job_id})
        job = jobs.accept(db, type, timeout=0)
        assert job is not None and job.id == job_id
        jobs.finish(db, job, {"done": job_id}, failed="broke" if failed else False)


def job_ids(db, type=T) -> set[str]:
    return {info.id for info in jobs.get_jobs(db, type)}


# --- the setting -------------------------------------------------------------------------


def test_set_get_clear_retention(db):
    assert jobs.get_retention(db, T) == jobs.Retention(None, None)  # keep forever: the default
    jobs.set_retention(db, T, finished=3600, failed=7 * DAY)
    assert jobs.get_retention(db, T) == jobs.Retention(3600.0, 7 * DAY)
    jobs.set_retention(db, T, failed=60)
    assert jobs.get_retention(db, T) == jobs.Retention(None, 60.0)
    jobs.clear_retention(db, T)
    assert jobs.get_retention(db, T) == jobs.Retention(None, None)
    jobs.set_retention(db, T, finished=0)
    jobs.set_retention(db, T)  # both None: keep forever, no key left
    assert not [k for k, _v in snapshot(db) if k.startswith(keys.RETENTION.key())]


@pytest.mark.parametrize("bad", [-1, math.nan, math.inf, True, "60"])
def test_bad_retention_writes_nothing(db, bad):
    before = snapshot(db)
    with pytest.raises(ValueError):
        jobs.set_retention(db, T, finished=bad)
    with pytest.raises(ValueError):
        jobs.set_retention(db, T, finished=60, failed=bad)
    with pytest.raises(ValueError):
        jobs.set_retention(db, "bad\ntype", finished=60)
    with pytest.raises(ValueError):
        jobs.prune(db, T, older_than=bad)
    assert snapshot(db) == before


# --- the index of finished jobs -------------------------------------------------------------


def test_index_follows_every_change_of_state(db):
    jobs.set_retention(db, T, finished=3600)  # only types with a retention are indexed
    run_jobs(db, ["readd", "resubmit", "remove", "keep"])
    run_jobs(db, ["retry", "discard"], failed=True)
    assert indexed(db) == {"readd": "finished", "resubmit": "finished", "remove": "finished",
                           "keep": "finished", "retry": "failed", "discard": "failed"}
    jobs.add(db, T, "readd", {})
    jobs.resubmit(db, jobs.get_job(db, T, "resubmit"))
    jobs.remove(db, T, "remove")
    processors.retry_failed(db, T, "retry")
    processors.discard_failed(db, T, "discard")
    assert indexed(db) == {"keep": "finished"}
    # a job flagged for resubmission is pending again when it finishes: not indexed
    jobs.add(db, T, "again", {})
    job = jobs.accept(db, T, timeout=0)
    jobs.add(db, T, job.id, {})
    jobs.finish(db, job)
    assert jobs.get_job_state(db, T, job.id) == "pending" and job.id not in indexed(db)


def test_only_types_with_a_retention_are_indexed_and_setting_one_indexes_the_rest(db):
    """A type without a retention pays no index writes; setting one (again) starts the
    backfill over, which indexes what finished meanwhile."""
    run_jobs(db, ["before"])
    assert indexed(db) == {}
    jobs.set_retention(db, T, finished=3600)
    assert run(db, finished.backfill, T, 100) is True
    assert indexed(db) == {"before": "finished"}
    jobs.clear_retention(db, T)
    run_jobs(db, ["between"])
    assert indexed(db) == {"before": "finished"}
    jobs.set_retention(db, T, finished=3600)
    assert run(db, finished.backfill, T, 100) is True
    assert indexed(db) == {"before": "finished", "between": "finished"}
    run_jobs(db, ["after"])
    assert indexed(db)["after"] == "finished"


def test_the_backfill_passes_over_a_row_that_cannot_be_read(db):
    run_jobs(db, ["a", "b", "c"])
    db[keys.data_key(T, "b")] = b"not a row"
    jobs.set_retention(db, T, finished=3600)
    passed_over = []
    assert run(db, finished.backfill, T, 100, passed_over) is True
    assert indexed(db) == {"a": "finished", "c": "finished"}
    assert [(t, job_id) for t, job_id, _error in passed_over] == [(T, "b")] and f"{T}/b" in passed_over[0][2]


@pytest.mark.parametrize("unknown", [1.0])
def test_writes_are_idempotent_under_1021(db, unknown):
    faulty = FaultInjectingDatabase(db, unknown_committed=unknown)
    jobs.set_retention(faulty, T, finished=3600, failed=60)
    assert jobs.get_retention(db, T) == jobs.Retention(3600.0, 60.0)
    run_jobs(faulty, ["a", "b", "c"])
    run_jobs(faulty, ["f"], failed=True)
    assert indexed(db) == {"a": "finished", "b": "finished", "c": "finished", "f": "failed"}
    jobs.add(faulty, T, "a", {})
    jobs.remove(faulty, T, "b")
    assert indexed(db) == {"c": "finished", "f": "failed"}
    age_finished(db, T, ["c", "f"], 2 * DAY)
    assert jobs.prune(faulty, T) == [(T, "c")]  # reported although the retry found it gone
    assert jobs.prune(faulty, T, failed=True) == [(T, "f")]
    assert job_ids(db) == {"a"} and indexed(db) == {}
    assert faulty.injected["unknown_committed"] > 0
    jobs.clear_retention(faulty, T)
    assert jobs.get_retention(db, T) == jobs.Retention(None, None)


# --- pruning --------------------------------------------------------------------------------


def test_running_monitor_prunes_old_finished_jobs_and_keeps_young_ones(db):
    jobs.set_retention(db, T, finished=3600)
    run_jobs(db, ["old-1", "old-2", "young"])
    run_jobs(db, ["old-failed"], failed=True)
    age_finished(db, T, ["old-1", "old-2", "old-failed"], 2 * 3600)
    pruner = retention_pass.Pruner(db).start()
    try:
        assert wait_until(lambda: job_ids(db) == {"young", "old-failed"})
    finally:
        pruner.stop()
    assert pruner.removed == 2
    with pytest.raises(jobs.NotFound):
        jobs.get_job(db, T, "old-1")
    assert indexed(db) == {"young": "finished", "old-failed": "failed"}  # failed: kept forever


def test_the_stores_duties_started_by_hand_prune_and_reenqueue(db):
    """``monitor.duties``: what a program that runs no processor and no ``jobsctl monitor``
    starts itself; finished jobs are pruned and a dead worker's job is re-enqueued."""
    jobs.set_retention(db, T, finished=3600)
    run_jobs(db, ["old", "young"])
    age_finished(db, T, ["old"], 2 * 3600)
    jobs.set_type_timeout(db, "held", 0.5)
    jobs.add(db, "held", "lost", {})
    assert jobs.accept(db, "held") is not None  # and never heard of again
    duties = monitor.duties(db)
    assert [type(d) for d in duties] == [monitor.ActivityMonitor, monitor.Pruner, monitor.CounterPruner]
    for duty in duties:
        duty.start()
    try:
        assert wait_until(lambda: job_ids(db) == {"young"})
        assert wait_until(lambda: jobs.get_job_state(db, "held", "lost") == "pending")
    finally:
        for duty in duties:
            duty.stop()
    assert duties[1].removed == 1 and duties[0].reenqueued == 1


def test_failed_jobs_follow_their_own_period(db):
    jobs.set_retention(db, T, finished=DAY, failed=60)
    run_jobs(db, ["ok"])
    run_jobs(db, ["bad"], failed=True)
    age_finished(db, T, ["ok", "bad"], 120)
    pruner = retention_pass.Pruner(db).start()
    try:
        assert wait_until(lambda: job_ids(db) == {"ok"})
    finally:
        pruner.stop()
    assert processors.failed_jobs(db, T) == []


def test_prune_by_hand(db):
    run_jobs(db, ["a", "b"])
    run_jobs(db, ["f"], failed=True)
    jobs.add(db, T, "pending", {})
    assert jobs.prune(db) == []  # no retention: nothing
    assert jobs.prune(db, T, older_than=3600) == []  # too young
    age_finished(db, T, ["a"], 7200)
    assert jobs.prune(db, T, older_than=3600) == [(T, "a")]
    assert jobs.prune(db, older_than=0) == [(T, "b")]  # every type; failed ones apart
    assert jobs.prune(db, T, older_than=0, failed=True) == [(T, "f")]
    assert job_ids(db) == {"pending"} and indexed(db) == {}
    with pytest.raises(ValueError):
        jobs.prune(db, "", older_than=0)


def recorded_batches(monkeypatch) -> list[list[str]]:
    """The ids each ``prune_batch`` removes from now on, a list per batch (oldest first)."""
    batches = []
    prune_batch = pruning.prune_batch

    def recorded(tr, *args, **kwargs):
        removed, more = prune_batch(tr, *args, **kwargs)
        batches.append(list(removed))
        return removed, more

    monkeypatch.setattr(pruning, "prune_batch", recorded)
    return batches


def test_a_monitor_pass_prunes_in_bounded_batches(db, monkeypatch):
    jobs.set_retention(db, T, finished=60)
    run_jobs(db, [f"j{i:03}" for i in range(250)])
    age_finished(db, T, [f"j{i:03}" for i in range(250)], 120)
    batches = recorded_batches(monkeypatch)
    pruner = retention_pass.Pruner(db)
    pruner.per_pass = 150
    pruner.check()
    assert pruner.removed == 150 and len(job_ids(db)) == 100  # the oldest first
    assert job_ids(db) == {f"j{i:03}" for i in range(150, 250)}
    pruner.check()
    assert pruner.removed == 250 and job_ids(db) == set()
    assert batches and max(map(len, batches)) <= pruning.BATCH  # per transaction


def test_a_monitor_behind_on_retention_prunes_at_every_pass_and_comes_back_sooner(db):
    """A pass that leaves jobs due (a type finishing jobs faster than one bounded pass a
    second removes) makes the next pass come at the shortest interval, and remove up to
    CATCH_UP times as many, until retention has caught up; then the interval is a second
    again."""
    jobs.set_retention(db, T, finished=60)
    run_jobs(db, [f"j{i:03}" for i in range(250)])
    age_finished(db, T, [f"j{i:03}" for i in range(250)], 120)
    pruner = retention_pass.Pruner(db)
    pruner.per_pass = 100
    assert pruner.interval() == retention_pass.INTERVAL == 1.0
    pruner.check()
    assert pruner.removed == 100 and pruner.behind
    assert pruner.interval() == retention_pass.CATCH_UP_INTERVAL == 0.05
    pruner.check()  # (up to CATCH_UP times as many)
    assert pruner.removed == 250 and job_ids(db) == set()
    assert not pruner.behind and pruner.interval() == retention_pass.INTERVAL


def test_a_pass_catching_up_stops_after_its_time(db, monkeypatch):
    """A pass begins no batch after PASS_SECONDS,
    however many jobs its bound allows; it is behind, and the next pass goes on."""
    jobs.set_retention(db, T, finished=60)
    run_jobs(db, [f"j{i:03}" for i in range(250)])
    age_finished(db, T, [f"j{i:03}" for i in range(250)], 120)
    now = [0.0]

    def clock():  # (each look at the clock: a second later)
        now[0] += 1.0
        return now[0]

    monkeypatch.setattr(retention_pass, "_clock", clock)
    monkeypatch.setattr(retention_pass, "_random", lambda: 0.0)  # (catching up from the oldest)
    pruner = retention_pass.Pruner(db, batch=50)
    assert retention_pass.PASS_SECONDS < 1.0
    assert pruner.prune() == 50 and pruner.behind  # (one batch, then its time was up)
    assert pruner.prune() == 50 and len(job_ids(db)) == 150


def test_a_pass_catching_up_starts_at_a_random_point_among_the_due_jobs(db, monkeypatch):
    """Monitors catching up take their batches from a random point among the due jobs (so
    several monitors do not all go for the same oldest ones and conflict), then those
    before it: every due job goes, and none that is not due."""
    jobs.set_retention(db, T, finished=60)
    old, new = [f"o{i:03}" for i in range(150)], [f"n{i:03}" for i in range(100)]
    run_jobs(db, old + new + ["young"])
    age_finished(db, T, old, 1000)
    age_finished(db, T, new, 200)
    batches = recorded_batches(monkeypatch)
    monkeypatch.setattr(retention_pass, "_random", lambda: 0.5)  # (half-way: between old and new)
    pruner = retention_pass.Pruner(db, per_pass=50, batch=50)
    assert pruner.prune() == 50 and pruner.behind and batches == [old[:50]]  # (not behind: the oldest)
    assert pruner.prune() == 200
    assert batches[1:3] == [new[:50], new[50:]]  # from the random point on
    assert set().union(*batches[3:]) == set(old[50:])  # then the ones before it
    assert job_ids(db) == {"young"}
    assert pruner.prune() == 0 and not pruner.behind


def test_a_type_that_fails_does_not_hold_the_others_up(db, monkeypatch):
    """A type whose pruning fails at every pass (here a patched failure) does not hold the
    other types up; the pass still fails, naming the type."""
    jobs.set_type_timeout(db, "u", 60)
    for type in (T, "u"):
        jobs.set_retention(db, type, finished=60)
        run_jobs(db, ["a", "b"], type=type)
        age_finished(db, type, ["a", "b"], 120)
    prune_page = pruning.prune_page

    def failing_for_t(db, type, *args, **kwargs):
        if type == T:
            raise RuntimeError("store trouble")
        return prune_page(db, type, *args, **kwargs)

    monkeypatch.setattr(pruning, "prune_page", failing_for_t)
    pruner = retention_pass.Pruner(db)
    with pytest.raises(RuntimeError) as raised:
        pruner.prune()
    assert f"(retention: type {T!r})" in raised.value.__notes__
    assert pruner.removed == 2 and job_ids(db, "u") == set() and job_ids(db) == {"a", "b"}


def test_a_job_whose_row_cannot_be_read_is_passed_over(db, caplog):
    """A finished job whose row cannot be read is left as it is and logged once; the other
    jobs of its type are pruned; ``jobs.prune`` removes them too, then raises naming it."""
    jobs.set_retention(db, T, finished=60)
    ids = [f"j{i}" for i in range(5)]
    run_jobs(db, ids)
    age_finished(db, T, ids, 120)
    bad = keys.data_key(T, "j0")  # (the oldest: every batch finds it first)
    db[bad] = b"not a row"
    pruner = retention_pass.Pruner(db, batch=2)
    with caplog.at_level("ERROR", logger="monitor"):
        assert pruner.prune() == 4 and not pruner.behind
        assert pruner.prune() == 0
    said = [r.getMessage() for r in caplog.records if f"{T}/j0" in r.getMessage()]
    assert len(said) == 1 and "not pruned" in said[0]
    assert pruner.unreadable.jobs == {(T, "j0")} and db[bad] == b"not a row"
    run_jobs(db, ["k"])
    age_finished(db, T, ["k"], 120)
    with pytest.raises(jobs.StoreError, match=f"removed 1 jobs; left 1 .*{T}/j0"):
        jobs.prune(db, T)
    assert db[bad] == b"not a row" and indexed(db)  # (j0's entry kept)


def test_two_monitors_prune_each_job_once(db):
    jobs.set_retention(db, T, finished=60)
    ids = [f"j{i}" for i in range(120)]
    run_jobs(db, ids)
    age_finished(db, T, ids, 120)
    pruners = [retention_pass.Pruner(db).start(), retention_pass.Pruner(db).start()]
    try:
        assert wait_until(lambda: job_ids(db) == set())
    finally:
        for p in pruners:
            p.stop()
    assert sum(p.removed for p in pruners) == 120
    assert not [k for k, _v in snapshot(db) if k.startswith(keys.FINISHED.key())]


def test_a_monitor_pass_is_idempotent_under_1021(db):
    jobs.set_retention(db, T, finished=60, failed=60)
    ids = [f"j{i:03}" for i in range(130)]
    run_jobs(db, ids)
    run_jobs(db, ["f"], failed=True)
    age_finished(db, T, [*ids, "f"], 120)
    faulty = FaultInjectingDatabase(db, unknown_committed=1.0)
    pruner = retention_pass.Pruner(faulty)
    pruner.check()
    assert job_ids(db) == set() and pruner.removed == 131  # each counted once
    assert faulty.injected["unknown_committed"] >= 3  # the backfill's, and two batches of finished jobs


# --- jobs finished while their type had no retention ----------------------------------------


def test_jobs_finished_without_a_retention_are_indexed_once_and_pruned(db):
    run_jobs(db, [f"ok{i}" for i in range(7)])
    run_jobs(db, ["bad"], failed=True)
    jobs.add(db, T, "pending", {})
    assert indexed(db) == {"bad": "failed"}  # (failed jobs are always indexed)
    page = jobs.transactional(lambda tr: finished.backfill(tr, T, 3))
    assert page(db) is False  # 9 rows, 3 a page: resumable from the last row looked at
    assert jobs.transactional(lambda tr: finished.backfill_state(tr, T))(db) == (False, "ok1")
    faulty = FaultInjectingDatabase(db, unknown_committed=1.0)
    while not page(faulty):
        pass
    assert indexed(db) == {**{f"ok{i}": "finished" for i in range(7)}, "bad": "failed"}
    # the failed one has its failure's time; the others count from the backfill
    jobs.set_retention(db, T, finished=3600, failed=0)
    retention_pass.Pruner(db).check()
    assert "bad" not in job_ids(db) and len(job_ids(db)) == 8
    assert jobs.prune(db, T, older_than=0) == [(T, f"ok{i}") for i in range(7)]


def test_a_monitor_indexes_the_jobs_finished_before_the_retention_was_set(db):
    run_jobs(db, ["old"])
    assert indexed(db) == {}
    jobs.set_retention(db, T, finished=0)
    pruner = retention_pass.Pruner(db).start()
    try:
        assert wait_until(lambda: job_ids(db) == set())
    finally:
        pruner.stop()


# --- the store's size stays flat --------------------------------------------------------------


def job_keys(db) -> int:
    """The job layer's keys but the per-minute rate counters (``jobs/indexes/rates.py``: bounded by
    time, an hour's worth, not by jobs; ``test_rates.py`` checks that they go), the job
    counters (``jobs/indexes/counts.py``: bounded by shards, priorities and scheduled minutes, which
    ``test_counts.py`` checks are pruned) and the activity stamps and pending wakes (bounded
    by their shards: ``test_activity_shards.py``, ``test_wakeups.py``)."""
    skip = (keys.RATES.key(), keys.COUNTS.key(), keys.WATCHES_ACTIVITY.key(), keys.WATCHES_PENDING.key())
    return sum(1 for k, _v in snapshot(db) if not k.startswith(skip))


def test_store_size_stays_flat_under_a_steady_workload(db):
    """2000 jobs (after a first one) added, run and finished in rounds of 100 beside a running monitor, with a
    retention of 0.2 s: after every round, the job layer's keys come back under the keys of
    one round's jobs (3 per finished job) plus the type's own; without retention they would
    grow by 3 per job."""
    jobs.set_retention(db, T, finished=0.2)
    pruner = retention_pass.Pruner(db).start()
    counts = []
    try:
        run_jobs(db, ["first"])  # the type's own keys: timeout, retention, watches, backfill...
        assert wait_until(lambda: job_ids(db) == set())
        base = job_keys(db)
        bound = base + 3 * 100
        for round in range(20):
            run_jobs(db, [f"r{round}-{i}" for i in range(100)])
            assert wait_until(lambda: job_keys(db) <= bound), f"round {round}: {job_keys(db)} keys"
            counts.append(job_keys(db))
        assert wait_until(lambda: job_keys(db) <= base)
    finally:
        pruner.stop()
    assert max(counts) <= bound and pruner.removed == 2001


# --- the jobs command ---------------------------------------------------------------------------


def test_jobs_command(db, tmp_path, capsys):
    if not hasattr(db, "path"):
        pytest.skip("the command opens the store by URL: a file store")
    from jobsctl import cli

    def jobs_cmd(*argv, json=False):
        code = cli.main(["--store", f"sqlite:{db.path}", *map(str, argv), *(["--json"] if json else [])])
        out, err = capsys.readouterr()
        return code, out, err

    code, out, _ = jobs_cmd("set-retention", T, "--finished", "7d", "--failed", "90")
    assert code == 0 and out.strip() == f"{T}: finished jobs kept 7d00h, failed jobs kept 1m30s"
    assert jobs.get_retention(db, T) == jobs.Retention(7 * DAY, 90.0)
    code, out, _ = jobs_cmd("status", json=True)
    assert orjson.loads(out)["types"][0]["retention"] == {"finished": 7 * DAY, "failed": 90.0}
    assert "t: finished 7d00h, failed 1m30s" in jobs_cmd("status")[1]
    run_jobs(db, ["a", "b"])
    run_jobs(db, ["f"], failed=True)
    age_finished(db, T, ["a", "f"], 8 * DAY)
    code, out, _ = jobs_cmd("prune")
    assert code == 0 and out.splitlines() == [f"{T}/a", "removed 1 finished job(s)"]
    code, out, _ = jobs_cmd("prune", T, "--failed", json=True)
    assert orjson.loads(out)["removed"] == [{"type": T, "id": "f"}]
    code, out, _ = jobs_cmd("prune", "--older-than", "0")
    assert out.splitlines() == [f"{T}/b", "removed 1 finished job(s)"]
    code, out, _ = jobs_cmd("clear-retention", T)
    assert code == 0 and jobs.get_retention(db, T) == jobs.Retention(None, None)
    assert "retention" not in jobs_cmd("status")[1]
    before = snapshot(db)
    assert jobs_cmd("set-retention", T, "--finished", "-1")[0] == 2  # a usage error
    assert jobs_cmd("prune", "--older-than", "soon")[0] == 2
    assert snapshot(db) == before
