"""The fault-injection wrapper's round trips (``commit_latency``, ``read_latency``,
``jobs/engine/latency.py``), on every engine: a commit is answered no sooner than its
latency and applied halfway, so a transaction that read before it conflicts with it; reads
issued together overlap; the wrapper's other behaviour is unchanged.  Only lower bounds of
time are asserted, and one upper bound with a margin of several latencies."""

from __future__ import annotations

import time

import pytest
from enginekit import expect_fdb_error, read

from jobs.engine import latency, transactional, value_of
from jobs.engine.faults import FaultInjectingDatabase


def test_latencies_are_validated(db):
    for bad in (-0.1, 60, "1", True, None):
        with pytest.raises(ValueError, match="commit_latency"):
            FaultInjectingDatabase(db, commit_latency=bad)
        with pytest.raises(ValueError, match="read_latency"):
            FaultInjectingDatabase(db, read_latency=bad)


def test_a_commit_is_answered_after_its_latency(db, ks):
    slow = FaultInjectingDatabase(db, commit_latency=0.2)
    tr = slow.create_transaction()
    tr.set(ks.pack(("k",)), b"v")
    began = time.monotonic()
    tr.commit().wait()
    assert time.monotonic() - began >= 0.2
    assert read(db, ks.pack(("k",))) == b"v"
    began = time.monotonic()
    slow.create_transaction().commit().wait()  # read-only: no round trip (as on a cluster)
    assert time.monotonic() - began < 0.2


def test_a_transaction_that_read_before_a_commit_applied_conflicts_with_it(db, ks):
    """The commit is applied halfway through its latency, not when it was sent."""
    k, other = ks.pack(("k",)), ks.pack(("other",))
    slow = FaultInjectingDatabase(db, commit_latency=2.0)
    writer = slow.create_transaction()
    writer.set(k, b"new")
    sent = writer.commit()  # applied in 1 s, answered in 2 s
    reader = db.create_transaction()
    assert value_of(reader.get(k)) is None  # read before the writer's commit applied
    reader.set(other, b"x")
    sent.wait()
    with expect_fdb_error(1020):
        reader.commit().wait()
    assert read(db, k) == b"new" and read(db, other) is None


def test_faults_keep_their_meaning_behind_a_latency(db, ks):
    k = ks.pack(("k",))
    slow = FaultInjectingDatabase(db, commit_latency=0.05, unknown_committed=1.0)
    tr = slow.create_transaction()
    tr.set(k, b"v")
    with expect_fdb_error(1021):
        tr.commit().wait()
    assert read(db, k) == b"v" and slow.injected == {"unknown_committed": 1}


def test_reads_issued_together_overlap_and_each_waits(db, ks):
    keys = [ks.pack(("r", i)) for i in range(10)]
    for i, key in enumerate(keys):
        db.set(key, bytes([i]))
    slow = FaultInjectingDatabase(db, read_latency=0.5)
    tr = slow.create_transaction()
    began = time.monotonic()
    futures = [tr.get(key) for key in keys]  # (the first waits for the read version too)
    assert [value_of(f) for f in futures] == [bytes([i]) for i in range(10)]
    elapsed = time.monotonic() - began
    assert elapsed >= 1.0  # a read version, then the reads: two round trips
    assert elapsed < 5.0  # not ten one after another (5 s)
    began = time.monotonic()
    assert [kv.value for kv in tr.snapshot.get_range(keys[0], keys[2] + b"\xff")] == [b"\x00", b"\x01", b"\x02"]
    assert time.monotonic() - began >= 0.5  # the read version is known: one round trip
    assert tr.get_read_version().wait() > 0


def test_transactional_code_runs_unchanged_behind_latencies(db, ks):
    slow = FaultInjectingDatabase(db, commit_latency=0.002, read_latency=0.001, conflict=0.2, seed=3)

    @transactional
    def bump(tr):
        key = ks.pack(("n",))
        tr.set(key, bytes([(value_of(tr.get(key)) or b"\x00")[0] + 1]))

    for _ in range(20):
        bump(slow)
    assert read(db, ks.pack(("n",))) == bytes([20]) and slow.injected["conflict"] > 0


def test_the_time_waited_on_round_trips_is_summed(db, ks):
    """``latency.waited()``: reads issued together count once; a commit counts its latency;
    a read-only commit nothing (what bench.latency reports per job)."""
    keys = [ks.pack(("w", i)) for i in range(5)]
    slow = FaultInjectingDatabase(db, commit_latency=0.2, read_latency=0.1)
    before = latency.waited()
    tr = slow.create_transaction()
    futures = [tr.get(key) for key in keys]  # a read version, then the reads: 0.2 s
    assert [value_of(f) for f in futures] == [None] * 5
    tr.set(keys[0], b"v")
    tr.commit().wait()
    waited = latency.waited() - before
    assert 0.35 <= waited < 0.6  # 0.2 of reads (one wait, not five) and 0.2 of commit
    before = latency.waited()
    slow.create_transaction().commit().wait()
    assert latency.waited() == before
