"""Removing a job whose row cannot be read (``jobs.remove_unreadable``, ``jobsctl remove
--unreadable``): it must leave the store exactly as ``jobs.remove`` leaves it when the row
can be read, in every state a job can be in, and touch nothing else."""

from __future__ import annotations

import collections
import time

import pytest

import jobs
from jobs.indexes import counts
from jobs import keys
from jobs.upkeep import repair
from jobs.engine.transactional import run
from stored import snapshot

T = "t"
DAMAGED = b"\x99not a row"


def _pending(db):
    jobs.add(db, T, "j", {"x": 1})


def _scheduled_with_priority(db):
    jobs.add(db, T, "j", scheduled_time=time.time() + 3600, priority=3)


def _keyed(db):
    jobs.add(db, T, "j", key="tenant", priority=-2)


def _running_with_slots(db):
    jobs.set_limits(db, T, concurrency=5, key_concurrency=2)
    jobs.add(db, T, "j", key="tenant")
    return jobs.accept(db, T, timeout=0)


def _running_flagged_to_run_again(db):
    job = _running_with_slots(db)
    jobs.add(db, T, "j", scheduled_time=time.time() + 60)
    return job


def _finished(db):
    jobs.add(db, T, "j")
    jobs.finish(db, jobs.accept(db, T, timeout=0), {"done": True})


def _finished_under_a_retention(db):
    jobs.set_retention(db, T, finished=3600)
    _finished(db)


def _failed(db):
    jobs.add(db, T, "j")
    jobs.finish(db, jobs.accept(db, T, timeout=0), failed="boom")


STATES = {f.__name__.lstrip("_"): f for f in (_pending, _scheduled_with_priority, _keyed, _running_with_slots,
                                                 _running_flagged_to_run_again, _finished, _finished_under_a_retention, _failed)}


def _setting_up(db, state: str):
    """The job ``j`` in ``state``, beside a running job ``b`` and a pending keyed job
    ``a`` (holding the same kinds of keys as ``j`` may) that must stay as they are."""
    jobs.set_type_timeout(db, T, 60)
    jobs.add(db, T, "b")
    neighbour = jobs.accept(db, T, timeout=0)
    jobs.add(db, T, "a", key="tenant", scheduled_time=time.time() + 3600)  # (not due: not taken below)
    return neighbour, STATES[state](db)


def _contents(db) -> tuple[dict, dict]:
    """The job layer's keys and values, with the counters summed over their shards (a
    transaction picks one) and without the wake keys (each commit stamps them anew)."""
    plain, counted = {}, collections.Counter()
    wakes = (keys.WATCHES_ACTIVITY.key(), keys.WATCHES_PENDING.key())
    for key, value in snapshot(db):
        if key.startswith(keys.COUNTS.key()):
            counted[keys.COUNTS.unpack(key)[:-1]] += int.from_bytes(value, "little", signed=True)
        elif not key.startswith(wakes):
            plain[key] = value
    return plain, {name: n for name, n in counted.items() if n}


def _restore(db, contents: list[tuple[bytes, bytes]]) -> None:
    def body(tr):
        r = keys.ROOT.range()
        tr.clear_range(r.start, r.stop)
        for key, value in contents:
            tr.set(key, value)

    run(db, body)


EXPECTED = {
    "pending": {"queue_entries": 1, "running": False, "slots": 0, "finished": None},
    "scheduled_with_priority": {"queue_entries": 1, "running": False, "slots": 0, "finished": None},
    "keyed": {"queue_entries": 1, "running": False, "slots": 0, "finished": None},
    "running_with_slots": {"queue_entries": 0, "running": True, "slots": 2, "finished": None},
    "running_flagged_to_run_again": {"queue_entries": 0, "running": True, "slots": 2, "finished": None},
    "finished": {"queue_entries": 0, "running": False, "slots": 0, "finished": None},  # (indexed under a retention)
    "finished_under_a_retention": {"queue_entries": 0, "running": False, "slots": 0, "finished": "finished"},
    "failed": {"queue_entries": 0, "running": False, "slots": 0, "finished": "failed"},
}


@pytest.mark.parametrize("state", STATES)
def test_an_unreadable_job_is_removed_as_remove_removes_a_readable_one(db, state):
    neighbour, job = _setting_up(db, state)
    before = snapshot(db)
    jobs.remove(db, T, "j")
    removed = _contents(db)

    _restore(db, before)
    db[keys.data_key(T, "j")] = DAMAGED
    with pytest.raises(jobs.StoreError, match="remove --unreadable"):
        jobs.remove(db, T, "j")
    assert jobs.remove_unreadable(db, T, "j") == EXPECTED[state]
    assert _contents(db) == removed
    assert jobs.get_job_state(db, T, "a") == "pending" and jobs.get_job_state(db, T, "b") == "running"
    assert jobs.finish(db, neighbour)  # (its fence and slots untouched)
    if job is not None:  # the worker running it is told at its next update or finish
        with pytest.raises(jobs.Halt):
            jobs.finish(db, job)


def test_what_is_looked_at_goes_page_by_page(db, monkeypatch):
    monkeypatch.setattr(repair, "PAGE", 3)
    jobs.set_type_timeout(db, T, 60)
    jobs.add_many(db, T, [f"p{i}" for i in range(10)] + ["j"] + [f"q{i}" for i in range(10)])
    db[keys.data_key(T, "j")] = DAMAGED
    assert jobs.remove_unreadable(db, T, "j")["queue_entries"] == 1
    assert jobs.pending_count(db, T) == 20 and "j" not in {info.id for info in jobs.get_jobs(db, T)}
    assert sorted(job.id for job in jobs.accept_many(db, T, 30, timeout=0)) == sorted(
        [f"p{i}" for i in range(10)] + [f"q{i}" for i in range(10)])


def test_an_entry_taken_meanwhile_is_not_counted_out_twice(db, monkeypatch):
    """An accept takes a pending job whose row cannot be read off the queue (unrun) and
    counts it out: if that happens between the look and the removal, the removal leaves
    the entry (and the count) alone."""
    jobs.set_type_timeout(db, T, 60)
    jobs.add(db, T, "j")
    jobs.add(db, T, "k", scheduled_time=time.time() + 3600)
    db[keys.data_key(T, "j")] = DAMAGED
    look = repair._look

    def look_then_accept(*args):
        found = look(*args)
        assert jobs.accept(db, T, timeout=0) is None  # (it took j off the queue)
        return found

    monkeypatch.setattr(repair, "_look", look_then_accept)
    assert jobs.remove_unreadable(db, T, "j")["queue_entries"] == 0  # (found, but gone when removing)
    assert jobs.pending_count(db, T) == 1 and "j" not in {info.id for info in jobs.get_jobs(db, T)}
    assert run(db, counts.read, T, time.time()) == counts.Counts(0, 0, 0, {0: (1, 0, 0)})  # (k, not yet due)


def test_bad_calls_write_nothing(db):
    jobs.set_type_timeout(db, T, 60)
    jobs.add(db, T, "readable")
    before = snapshot(db)
    with pytest.raises(jobs.NotFound, match="t/missing"):
        jobs.remove_unreadable(db, T, "missing")
    with pytest.raises(ValueError, match="can be read: remove it with jobs.remove"):
        jobs.remove_unreadable(db, T, "readable")
    with pytest.raises(TypeError, match="takes a database, not a transaction"):
        run(db, jobs.remove_unreadable, T, "readable")
    with pytest.raises(ValueError, match="type"):
        jobs.remove_unreadable(db, "", "readable")
    assert snapshot(db) == before
