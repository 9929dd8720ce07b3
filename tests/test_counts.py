"""The per-type job counters (``jobs/indexes/counts.py``): they say what counting every key says,
whatever path changed the jobs; old buckets are pruned; and a status gather reads as many
keys at ten times the jobs."""

from __future__ import annotations

import collections
import random
import time

import pytest

import jobs
from jobs.queue import activity
from jobs.indexes import counts
from jobs import keys
from jobs.observe import status, status_ranges
from jobs.engine.counting import CountingDatabase
from jobs.engine.transactional import run
from monitor.retention import Pruner

T = "counted"
FIELDS = ("pending", "due", "due_asap", "running", "finished", "failed", "bands")


def numbers(db, now: float, exact: bool = False) -> dict:
    found = [t for t in status.gather(db, now=now, exact=exact).types if t.type == T]
    if not found:
        return {}
    t = found[0]
    out = {name: getattr(t, name) for name in FIELDS}
    out["failures"] = sorted(f.id for f in t.recent_failures)
    return out


def assert_counted(db, now: float | None = None) -> dict:
    now = time.time() if now is None else now
    counted, exact = numbers(db, now), numbers(db, now, exact=True)
    assert counted == exact
    return counted


def scheduled(rng: random.Random, now: float) -> float:
    """As soon as possible, long past, earlier this minute or the one before, or later."""
    return rng.choice([0, 0, now - 3600, now - 100.5, now - 5.5, now + 100.5, now + 7200])


def step(db, rng: random.Random, held: list, n: int) -> None:
    """One random change, by any of the paths that change a job's state."""
    now, ids = time.time(), [f"j{i}" for i in range(12)]
    op = rng.choice(["add", "add", "accept", "finish", "fail", "release", "remove", "resubmit", "lost"])
    if op == "add":
        jobs.add(db, T, rng.choice(ids), {"n": n}, scheduled_time=scheduled(rng, now),
                 priority=rng.choice([0, 0, -1, 3]), key=rng.choice([None, None, "a", "b"]))
    elif op == "accept":
        held.extend(jobs.accept_many(db, T, rng.choice([1, 3]), timeout=0) or [])
    elif op in ("finish", "fail") and held:
        job = held.pop(rng.randrange(len(held)))
        try:
            jobs.finish(db, job, failed=f"boom {n}" if op == "fail" else False)
        except jobs.Halt:
            pass
    elif op == "release" and held:
        try:
            jobs.release(db, held.pop())
        except jobs.Halt:
            pass
    elif op == "remove":
        try:
            jobs.remove(db, T, rng.choice(ids))
        except jobs.NotFound:
            pass
    elif op == "resubmit":
        try:
            jobs.resubmit(db, jobs.get_job(db, T, rng.choice(ids)), scheduled_time=scheduled(rng, now))
        except jobs.NotFound:
            pass
    elif op == "lost":  # the activity monitor re-enqueues every running job
        stamp = run(db, activity.last_activity, T)
        if stamp is not None:
            run(db, activity.reenqueue_inactive, T, stamp, 100)


def test_the_counters_say_what_counting_every_key_says(db):
    jobs.set_type_timeout(db, T, 60)
    rng, held = random.Random(7), []
    for n in range(150):
        step(db, rng, held, n)
        assert_counted(db)
    jobs.set_retention(db, T, finished=0, failed=0)  # pruning: finished and failed jobs removed
    Pruner(db, [T]).prune()
    assert_counted(db)


def test_an_accept_carrying_a_finish_adds_nothing_to_the_running_count(db, monkeypatch):
    """A finish and an accept in one transaction (a worker's outcome riding its next
    accept) move the running count by -1 and +1: counted in one tally, nothing is written
    for it (an add of 0 is a write all the same), and the counters stay exact.  A finish
    in a transaction of its own, or an accept, still adds."""
    from jobs.queue.accepting import AcceptCall

    jobs.set_type_timeout(db, T, 60)
    jobs.add_many(db, T, ["a", "b", "c"])
    held = jobs.accept(db, T, timeout=0)
    added = []
    changed = counts.changed
    monkeypatch.setattr(counts, "changed", lambda tr, type, state, n: added.append((state, n)) or
                        changed(tr, type, state, n))
    taken = AcceptCall(db, T).attempt(lambda tr: jobs.finish_many(tr, [held]))
    assert len(taken) == 1 and taken[0].id != held.id and added == [("finished", 1)]
    assert assert_counted(db)["running"] == 1
    added.clear()
    jobs.finish(db, taken[0])
    assert added == [("running", -1), ("finished", 1)]
    added.clear()
    assert jobs.accept(db, T, timeout=0) is not None and added == [("running", 1)]
    assert assert_counted(db)["running"] == 1 and assert_counted(db)["finished"] == 2


class _Tr:
    """A transaction, as ``counts.sharing`` sees it (its writes are noted elsewhere)."""


@pytest.mark.parametrize("make", [_Tr])  # (the state lives on the transaction: txstate.of)
def test_a_block_sharing_a_tally_within_another_leaves_the_write_to_it(monkeypatch, make):
    """``counts.sharing``: a block within another of the same transaction counts in the
    outer one's tally, written once as the outer block ends, an add of 0 not at all; a
    block that raises writes nothing."""
    written = []
    monkeypatch.setattr(counts, "changed", lambda tr, type, state, n: written.append((state, n)))
    tr = make()
    with counts.sharing(tr) as outer:
        outer.changed(tr, T, "running", 1)
        with counts.sharing(tr) as inner:
            inner.changed(tr, T, "running", -1)
            inner.changed(tr, T, "finished", 1)
        inner_wrote = list(written)
    assert inner is outer and inner_wrote == [] and written == [("finished", 1)]
    written.clear()
    with pytest.raises(ValueError), counts.sharing(tr) as tally:
        tally.changed(tr, T, "running", 1)
        raise ValueError("the transaction is not committed")
    assert written == []
    with counts.sharing(tr) as tally:  # (nothing left shared by the blocks before)
        assert tally is not outer and tally is not inner


def test_due_counts_follow_the_clock_across_minutes(db):
    jobs.set_type_timeout(db, T, 60)
    base = (time.time() // 60 + 10) * 60  # a minute boundary in the future
    for i, offset in enumerate([-70.5, -30.5, -1.5, 1.5, 30.5, 90.5]):
        jobs.add(db, T, f"s{i}", scheduled_time=base + offset)
    jobs.add(db, T, "asap")
    for now, due in [(base - 200, 1), (base - 40, 2), (base - 1, 4), (base + 2, 5), (base + 95, 7)]:
        assert assert_counted(db, now)["due"] == due


def test_old_buckets_are_pruned_and_a_prune_with_nothing_to_do_writes_nothing(db):
    jobs.set_type_timeout(db, T, 60)
    now = time.time()
    jobs.add(db, T, "old", scheduled_time=now - 7200.5)
    jobs.add(db, T, "taken", scheduled_time=now - 3600.5)
    jobs.add(db, T, "later", scheduled_time=now + 3600.5)
    jobs.remove(db, T, "taken")  # its minute and second now add up to nothing

    def bucket_keys(name):
        r = keys.COUNTS[T][name].range()
        return {keys.COUNTS.unpack(k)[2] for k, _v in db.get_range(r.start, r.stop)}

    assert len(bucket_keys("at")) == 3 and len(bucket_keys("sec")) == 3
    assert run(db, counts.prune, T, now) > 0
    assert bucket_keys("at") == {int(now - 7200.5) // 60, int(now + 3600.5) // 60}  # the empty minute went
    assert bucket_keys("sec") == {int(now + 3600.5)}  # past seconds are read no more
    assert run(db, counts.prune, T, now) == 0
    assert assert_counted(db, now)["pending"] == 2


class _Counting:
    """A database whose transactions count the keys their range reads return."""

    def __init__(self, db):
        self.db, self.keys = db, 0

    def create_transaction(self):
        return _CountingTr(self.db.create_transaction(), self)

    def __getattr__(self, name):
        return getattr(self.db, name)


class _CountingTr:
    def __init__(self, tr, counter):
        self._tr, self._counter = tr, counter

    @property
    def snapshot(self):
        return _CountingTr(self._tr.snapshot, self._counter)

    def get_range(self, *args, **kwargs):
        found = list(self._tr.get_range(*args, **kwargs))
        self._counter.keys += len(found)
        return found

    def __getattr__(self, name):
        return getattr(self._tr, name)


@pytest.mark.parametrize("keyed", [False, True])
def test_a_gather_reads_as_many_keys_at_ten_times_the_jobs(db, monkeypatch, keyed):
    """Linear would be 1,800 keys more; the same keys are read, but for a few more of the
    last hour's wait buckets (``rates.py``) that the second round's waits may fill."""
    monkeypatch.setattr(status_ranges, "SAMPLE", 20)
    monkeypatch.setattr(counts, "SHARDS", 1)  # (which shards a round writes is not the point)
    monkeypatch.setattr(keys, "ACTIVITY_SHARDS", 1)
    jobs.set_type_timeout(db, T, 60)
    read = []
    for total in (200, 2000):
        def body(tr, start=len(read) and 200):
            for i in range(start, total):
                jobs.add(tr, T, f"j{i}", scheduled_time=0 if i % 2 else 5.0, key=f"k{i % 3}" if keyed else None)
        run(db, body)
        for n in range(40):  # more failures than listed
            jobs.finish(db, jobs.accept(db, T, timeout=0), failed=bool(n % 2))
        counting = _Counting(db)
        status.gather(counting)
        read.append(counting.keys)
    assert read[1] <= read[0] + 10


def test_every_kind_of_transaction_spreads_over_every_shard(db):
    """Each transaction adds to one shard, drawn at random: a process alternating accepts
    and finishes spreads each over every shard (taking shards in turn put each kind on
    half of them; a transaction's address, which CPython reuses, would not spread them)."""
    n = 800  # 100 per shard on average; the bound below is 5 standard deviations away
    jobs.set_type_timeout(db, T, 60)
    jobs.add_many(db, T, [f"j{i}" for i in range(n)])
    counted = CountingDatabase(db)
    for _ in range(n):
        with counted.label("accept"):
            job = jobs.accept(counted, T, timeout=0)
        with counted.label("finish"):
            jobs.finish(counted, job)
    running = keys.COUNTS[T]["running"]
    used = {"accept": collections.Counter(), "finish": collections.Counter()}
    for tally in counted.take():
        for w in tally.mutations():
            if running.contains(w.key):
                used[tally.label][running.unpack(w.key)[-1]] += 1
    for label, shards in used.items():
        assert set(shards) == set(range(counts.SHARDS)), label
        assert min(shards.values()) >= n / counts.SHARDS / 2, (label, shards)
