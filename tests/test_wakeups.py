"""Waiting accepts of one process share the watches of a type's pending wake shards
(``jobs/indexes/wakeups.py``): one set for them all, every waiter woken by an enqueue on any
shard, a waiter that leaves disturbing nobody."""

from __future__ import annotations

import threading

import jobs
from jobs import keys
from jobs.indexes import pending, wakeups
from jobs.engine.transactional import run
from waiting import wait_until

T = "wakes"
WAKE = keys.watches_pending_keys(T)  # what the type's waiting accepts watch
ONE = (1).to_bytes(8, "little")


def test_enqueues_bump_the_shards(db):
    jobs.set_type_timeout(db, T, 60)
    for i in range(40):
        jobs.add(db, T, f"j{i}")
    r = keys.WATCHES_PENDING[T].range()
    bumped = {bytes(k) for k, _v in db.get_range(r.start, r.stop)}
    assert 4 <= len(bumped) and bumped <= {keys.watches_pending_key(T, i) for i in range(keys.PENDING_SHARDS)}


def test_waiting_accepts_share_one_set_of_watches_and_each_gets_one_job(db):
    jobs.set_type_timeout(db, T, 60)
    got, n = [], 12
    threads = [threading.Thread(target=lambda: got.append(jobs.accept(db, T, timeout=60))) for _ in range(n)]
    for i, t in enumerate(threads):  # one after another: each reads after the first armed its set
        t.start()
        assert wait_until(lambda i=i: wakeups.waiting(db, WAKE)[1] == i + 1)
    assert wakeups.waiting(db, WAKE) == (1, n)
    for i in range(n):
        jobs.add(db, T, f"j{i}")
    for t in threads:
        t.join(60)
    assert sorted(job.id for job in got) == sorted(f"j{i}" for i in range(n))
    assert wakeups.waiting(db, WAKE) == (0, 0)  # fired, forgotten, its watches cancelled


def test_a_waiter_that_leaves_does_not_disturb_the_others(db):
    jobs.set_type_timeout(db, T, 60)
    got = []
    patient = threading.Thread(target=lambda: got.append(jobs.accept(db, T, timeout=60)))
    patient.start()
    assert wait_until(lambda: wakeups.waiting(db, WAKE)[1] == 1)
    assert jobs.accept(db, T, timeout=0.3) is None  # joins, times out, leaves
    assert wakeups.waiting(db, WAKE) == (1, 1)
    jobs.add(db, T, "late")
    patient.join(60)
    assert [job.id for job in got] == ["late"]


def test_the_last_waiter_leaving_cancels_the_watches(db):
    jobs.set_type_timeout(db, T, 60)
    first, second = run(db, pending.watch, T), run(db, pending.watch, T)
    assert wakeups.waiting(db, WAKE) == (1, 2)
    first.cancel()
    assert wakeups.waiting(db, WAKE) == (1, 1) and not second.is_ready()
    second.cancel()
    assert wakeups.waiting(db, WAKE) == (0, 0)


def test_a_transaction_that_writes_notes_the_wake_keys_for_a_watch_after_its_commit(db):
    """A transaction that writes may not watch (a watch is a read: it would conflict with
    every enqueue meanwhile): it notes the wake keys, and a watch set after it committed
    covers it as long as they did not change (an enqueue in between: look again)."""
    jobs.set_type_timeout(db, T, 60)
    seen = run(db, pending.wakes_seen, T)
    jobs.add(db, T, "between")  # after what the transaction saw
    assert not run(db, pending.wakes_unchanged, T, seen)
    seen = run(db, pending.wakes_seen, T)
    assert run(db, pending.wakes_unchanged, T, seen)
    assert pending.watch_joined(db, T, seen) is None  # no watch armed in this process


def test_a_watch_after_the_commit_joins_the_watches_already_armed(db):
    jobs.set_type_timeout(db, T, 60)
    armed = run(db, pending.watch, T)
    seen = run(db, pending.wakes_seen, T)  # read after the set was armed: it covers this
    joined = pending.watch_joined(db, T, seen)
    assert wakeups.waiting(db, WAKE) == (1, 2)
    jobs.add(db, T, "j")
    assert wait_until(lambda: armed.is_ready() and joined.is_ready())


def test_an_accept_that_writes_and_finds_nothing_waits_on_a_watch(db):
    """``attempt(also)`` on an empty queue commits ``also`` and returns a Wait whose watch
    fires on the next enqueue: set by a second transaction that reads only the wake
    keys (``rearms``), not by another whole accept."""
    from jobs.queue.accepting import AcceptCall, Wait

    jobs.set_type_timeout(db, T, 60)
    call = AcceptCall(db, T)
    out = call.attempt(lambda tr: tr.set(b"test/also", b"1"))
    assert isinstance(out, Wait) and db.get(b"test/also") == b"1" and call.rearms == 1
    assert not out.watch.is_ready()
    jobs.add(db, T, "j")
    assert wait_until(out.watch.is_ready)
    assert [job.id for job in call.attempt()] == ["j"]


def test_an_accept_that_writes_takes_a_job_enqueued_before_its_watch(db, monkeypatch):
    """A job enqueued after the writing attempt read and before the watch is set: the
    second transaction takes it instead of setting the watch."""
    from jobs.queue.accepting import AcceptCall

    jobs.set_type_timeout(db, T, 60)
    watch_joined = pending.watch_joined

    def enqueue_first(db_, type, seen):
        jobs.add(db, T, "raced")  # committed after the accept read, before its watch
        return watch_joined(db_, type, seen)

    monkeypatch.setattr(pending, "watch_joined", enqueue_first)
    call = AcceptCall(db, T)
    taken = call.attempt(lambda tr: tr.set(b"test/also", b"1"))
    assert [job.id for job in taken] == ["raced"] and call.rearms == 1
    assert jobs.get_job_state(db, T, "raced") == "running" and db.get(b"test/also") == b"1"
