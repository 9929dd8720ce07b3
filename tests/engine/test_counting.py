"""The counting wrapper (``jobs/engine/counting.py``), on every engine: a committed
transaction's keys and bytes read and written and its conflict ranges are counted as
FoundationDB accounts them; failed attempts count only as retries; labels are per thread."""

from __future__ import annotations

import threading

from jobs.engine import transactional
from jobs.engine.counting import CountingDatabase, Write
from jobs.engine.faults import FaultInjectingDatabase
from jobs.engine.fdbapi import Versionstamp, pack_with_versionstamp


def test_reads_writes_and_conflicts_of_a_committed_transaction(db, ks):
    a, b, c = (ks.pack((n,)) for n in ("a", "b", "c"))
    db[a] = b"1"
    db[b] = b"22"
    counted = CountingDatabase(db)
    counted.take()

    @transactional
    def work(tr):
        assert tr[a] == b"1"  # point read: 1 key, a conflict range
        assert [kv.value for kv in tr.snapshot.get_range(a, ks.range().stop)] == [b"1", b"22"]
        tr.get(c).wait()  # absent: a key read, no bytes
        tr[c] = b"333"
        tr.add(b, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        tr.clear_range(a, b)
        tr.add_read_conflict_key(b)

    with counted.label("work"):
        work(counted)
    [tally] = counted.take()
    assert tally.label == "work" and tally.attempts == 1
    assert tally.keys_read == 4  # a, the two rows of the range, c
    assert tally.bytes_read == 2 * (len(a) + 1) + len(b) + 2  # a twice, b once, c absent
    assert tally.read_conflicts == [(a, a + b"\x00"), (c, c + b"\x00"), (b, b + b"\x00")]  # not the snapshot range
    assert tally.point_reads == [a, c] and tally.range_reads == [(a, ks.range().stop, 2)]
    assert tally.writes == [Write("set", c), Write("add", b), Write("clear_range", a, b)]
    assert tally.bytes_written == len(c) + 3 + len(b) + 8 + len(a) + len(b)
    assert tally.write_conflicts == [(c, c + b"\x00"), (b, b + b"\x00"), (a, b)]
    assert not tally.read_only


def test_a_limited_range_read_conflicts_up_to_its_last_row(db, ks):
    keys = [ks.pack((i,)) for i in range(5)]
    for k in keys:
        db[k] = b"v"
    counted = CountingDatabase(db)
    counted.take()
    r = ks.range()

    @transactional
    def first_two(tr):
        return [kv.key for kv in tr.get_range(r.start, r.stop, limit=2)], [
            kv.key for kv in tr.get_range(r.start, r.stop, limit=1, reverse=True)
        ]

    assert first_two(counted) == (keys[:2], keys[-1:])
    [tally] = counted.take()
    assert tally.read_only and tally.keys_read == 3
    assert tally.read_conflicts == [(r.start, keys[1] + b"\x00"), (keys[-1], r.stop)]


def test_failed_attempts_count_as_retries_of_the_commit_kept(db, ks):
    faulty = FaultInjectingDatabase(db, conflict=1.0, seed=1)
    counted = CountingDatabase(faulty)
    tries = []

    @transactional
    def write(tr):
        tries.append(1)
        if len(tries) == 3:
            faulty.conflict = 0.0
        tr[ks.pack(("k",))] = b"v"

    write(counted)
    [tally] = counted.take()
    assert tally.attempts == 3 and len(tally.writes) == 1


def test_versionstamped_keys_are_unique_and_labels_are_per_thread(db, ks):
    counted = CountingDatabase(db)
    stamped = pack_with_versionstamp(ks, (Versionstamp(),))
    seen = {}

    def run(name):
        with counted.label(name):
            transactional(lambda tr: tr.set_versionstamped_key(stamped, b"x"))(counted)

    threads = [threading.Thread(target=run, args=(n,)) for n in ("t1", "t2")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for tally in counted.take():
        seen[tally.label] = tally.writes
    assert set(seen) == {"t1", "t2"}
    assert seen["t1"] == [Write("set_versionstamped_key", stamped[:-4], unique=True)]
