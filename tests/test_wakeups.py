"""Waiting accepts of one process share the watches of a type's pending wake shards
(``jobs/wakeups.py``, layout 6): one set for them all, every waiter woken by an enqueue
on any shard (or on the one key of layouts 1-5), a waiter that leaves disturbing nobody."""

from __future__ import annotations

import threading

import jobs
from jobs import keys, pending, wakeups
from jobs.engine.transactional import run
from waiting import wait_until

T = "wakes"
WAKE = keys.watches_pending_keys(T)  # what the type's waiting accepts watch
ONE = (1).to_bytes(8, "little")


def test_enqueues_bump_the_shards_never_the_old_key(db):
    jobs.set_type_timeout(db, T, 60)
    for i in range(40):
        jobs.add(db, T, f"j{i}")
    r = keys.WATCHES_PENDING[T].range()
    bumped = {bytes(k) for k, _v in db.get_range(r.start, r.stop)}
    assert db.get(keys.watches_pending_key(T)) is None
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


def test_an_older_process_bumping_the_old_key_wakes_the_waiters(db):
    jobs.set_type_timeout(db, T, 60)
    ticket = run(db, pending.watch, T)
    assert not ticket.is_ready()
    run(db, lambda tr: tr.add(keys.watches_pending_key(T), ONE))  # what a layout-5 enqueue bumps
    assert wait_until(ticket.is_ready)
    ticket.wait()  # fired, no error
    assert wakeups.waiting(db, WAKE) == (0, 0)


def test_the_last_waiter_leaving_cancels_the_watches(db):
    jobs.set_type_timeout(db, T, 60)
    first, second = run(db, pending.watch, T), run(db, pending.watch, T)
    assert wakeups.waiting(db, WAKE) == (1, 2)
    first.cancel()
    assert wakeups.waiting(db, WAKE) == (1, 1) and not second.is_ready()
    second.cancel()
    assert wakeups.waiting(db, WAKE) == (0, 0)
