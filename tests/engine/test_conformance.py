"""Engine conformance: the FoundationDB API subset the project relies on, with FDB's
semantics, on every engine (see conftest.py: ``embedded``, ``memory``, ``fdb``).

Written against the FDB Python API only.  Where the real bindings defer an error to the
commit (size limits, reserved keys), the expected error is allowed anywhere up to and
including ``commit().wait()``.  Tests wait on conditions with generous deadlines and never
assert how long something took.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import struct
import subprocess
import threading
import time

import pytest
from enginekit import expect_fdb_error, from_le, le, read, rows, run_proc, spawn, val, wait_until

from jobs.engine import (
    KeySelector, Versionstamp, close, error_code, is_database, pack_with_versionstamp, transactional, wait_future,
)

# --- small helpers -------------------------------------------------------------------------


def commit(tr) -> None:
    tr.commit().wait()


def put(db, items: dict) -> None:
    tr = db.create_transaction()
    for k, v in items.items():
        tr.set(k, v)
    commit(tr)


@pytest.fixture
def abcde(db, ks):
    """Keys a..e (values 1..5) under the test prefix; returns a key maker."""

    def k(name: str) -> bytes:
        return ks.pack((name,))

    put(db, {k(c): str(i).encode() for i, c in enumerate("abcde", 1)})
    return k


# --- get / set / clear ---------------------------------------------------------------------


def test_get_set_clear(db, ks):
    k1, k2 = ks.pack(("one",)), ks.pack(("two",))
    assert read(db, k1) is None
    put(db, {k1: b"1", k2: b"2"})
    assert read(db, k1) == b"1"
    tr = db.create_transaction()
    assert tr.get(k1).wait() == b"1" and tr.get(k1).present()
    assert tr.get(ks.pack(("absent",))).wait() == None  # noqa: E711 - Value compares to None
    assert not tr.get(ks.pack(("absent",))).present()
    tr.clear(k1)
    tr.set(k2, b"22")
    commit(tr)
    assert read(db, k1) is None
    assert read(db, k2) == b"22"


def test_empty_value_is_present(db, ks):
    put(db, {ks.pack(("e",)): b""})
    tr = db.create_transaction()
    assert tr.get(ks.pack(("e",))).present()
    assert val(tr.get(ks.pack(("e",)))) == b""


def test_clear_range_is_half_open(db, abcde):
    tr = db.create_transaction()
    tr.clear_range(abcde("b"), abcde("d"))
    commit(tr)
    assert [read(db, abcde(c)) for c in "abcde"] == [b"1", None, None, b"4", b"5"]


def test_clear_range_startswith(db, ks, abcde):
    other = ks.pack(("zz",))
    put(db, {ks.pack(("p", 1)): b"x", ks.pack(("p", 2)): b"y", other: b"z"})
    tr = db.create_transaction()
    tr.clear_range_startswith(ks.pack(("p",)))
    commit(tr)
    assert rows(db.create_transaction().get_range_startswith(ks.pack(("p",)))) == []
    assert read(db, other) == b"z"


def test_database_shortcuts(db, ks):
    k = ks.pack(("short",))
    db[k] = b"v"
    assert val(db[k]) == b"v"
    db.set(k, b"w")
    assert val(db.get(k)) == b"w"
    assert rows(db.get_range(ks.range().start, ks.range().stop)) == [(k, b"w")]
    db.clear(k)
    assert val(db.get(k)) is None
    db.set(k, b"again")
    db.clear_range(ks.range().start, ks.range().stop)
    assert val(db.get(k)) is None


def test_uncommitted_writes_are_invisible_to_others(db, ks):
    k = ks.pack(("private",))
    tr = db.create_transaction()
    tr.set(k, b"mine")
    assert read(db, k) is None
    commit(tr)
    assert read(db, k) == b"mine"


# --- read-your-writes ----------------------------------------------------------------------


def test_read_your_writes_point(db, abcde):
    tr = db.create_transaction()
    tr.set(abcde("a"), b"A")
    tr.clear(abcde("b"))
    tr.clear_range(abcde("c"), abcde("e"))
    tr.set(abcde("new"), b"N")
    assert val(tr.get(abcde("a"))) == b"A"
    assert val(tr.get(abcde("b"))) is None
    assert val(tr.get(abcde("c"))) is None
    assert val(tr.get(abcde("d"))) is None
    assert val(tr.get(abcde("e"))) == b"5"
    assert val(tr.get(abcde("new"))) == b"N"
    tr.set(abcde("c"), b"C")  # set after a range clear
    assert val(tr.get(abcde("c"))) == b"C"


def test_read_your_writes_ranges(db, ks, abcde):
    k = abcde
    tr = db.create_transaction()
    tr.set(k("b"), b"20")
    tr.set(k("bb"), b"25")
    tr.clear(k("c"))
    tr.clear_range(k("d"), k("e"))
    tr.set(k("f"), b"6")
    begin, end = ks.range().start, ks.range().stop
    forward = [(k("a"), b"1"), (k("b"), b"20"), (k("bb"), b"25"), (k("e"), b"5"), (k("f"), b"6")]
    assert rows(tr.get_range(begin, end)) == forward
    assert rows(tr.get_range(begin, end, reverse=True)) == forward[::-1]
    assert rows(tr.get_range(begin, end, limit=2)) == forward[:2]
    assert rows(tr.get_range(begin, end, limit=2, reverse=True)) == forward[::-1][:2]
    assert rows(tr.get_range(k("b"), k("e"))) == forward[1:3]
    assert rows(tr.get_range_startswith(ks.key())) == forward
    # a range clear over buffered and stored keys, then a set inside it
    tr.clear_range(k("a"), k("bb"))
    tr.set(k("a"), b"again")
    assert rows(tr.get_range(begin, end)) == [(k("a"), b"again"), (k("bb"), b"25"), (k("e"), b"5"), (k("f"), b"6")]
    assert val(tr.get_key(KeySelector.first_greater_than(k("a")))) == k("bb")
    assert val(tr.get_key(KeySelector.last_less_than(k("e")))) == k("bb")
    commit(tr)
    assert rows(db.create_transaction().get_range(begin, end)) == [
        (k("a"), b"again"), (k("bb"), b"25"), (k("e"), b"5"), (k("f"), b"6"),
    ]  # fmt: skip


def test_read_your_writes_atomic(db, ks):
    k = ks.pack(("n",))
    put(db, {k: le(10)})
    tr = db.create_transaction()
    tr.add(k, le(5))
    tr.add(k, le(-3))
    assert from_le(val(tr.get(k))) == 12
    tr.add(ks.pack(("fresh",)), le(7))
    assert from_le(val(tr.get(ks.pack(("fresh",))))) == 7
    assert rows(tr.get_range_startswith(ks.key())) == [(ks.pack(("fresh",)), le(7)), (k, le(12))]
    commit(tr)
    assert from_le(read(db, k)) == 12


# --- range reads and key selectors ---------------------------------------------------------


def test_get_range_limit_reverse(db, ks, abcde):
    k = abcde
    begin, end = ks.range().start, ks.range().stop
    tr = db.create_transaction()
    everything = [(k(c), str(i).encode()) for i, c in enumerate("abcde", 1)]
    assert rows(tr.get_range(begin, end)) == everything
    assert rows(tr.get_range(begin, end, limit=3)) == everything[:3]
    assert rows(tr.get_range(begin, end, reverse=True)) == everything[::-1]
    assert rows(tr.get_range(begin, end, limit=2, reverse=True)) == everything[::-1][:2]
    assert rows(tr.get_range(k("b"), k("d"))) == everything[1:3]
    assert rows(tr.get_range(k("d"), k("b"))) == []  # begin after end: empty
    assert rows(tr.get_range(k("c"), k("c"))) == []
    assert rows(tr.snapshot.get_range(begin, end, limit=1)) == everything[:1]
    for key, value in tr.get_range(k("a"), k("b")):  # rows unpack as (key, value)
        assert (key, value) == (k("a"), b"1")


def test_key_selectors(db, ks, abcde):
    k = abcde
    tr = db.create_transaction()
    key = lambda sel: val(tr.get_key(sel))  # noqa: E731
    assert key(KeySelector.first_greater_or_equal(k("b"))) == k("b")
    assert key(KeySelector.first_greater_or_equal(k("bb"))) == k("c")
    assert key(KeySelector.first_greater_than(k("b"))) == k("c")
    assert key(KeySelector.first_greater_than(k("bb"))) == k("c")
    assert key(KeySelector.last_less_than(k("c"))) == k("b")
    assert key(KeySelector.last_less_than(k("cc"))) == k("c")
    assert key(KeySelector.last_less_or_equal(k("c"))) == k("c")
    assert key(KeySelector.last_less_or_equal(k("cc"))) == k("c")
    assert key(KeySelector.first_greater_or_equal(k("a")) + 2) == k("c")
    assert key(KeySelector.last_less_or_equal(k("e")) - 1) == k("d")
    assert key(KeySelector.first_greater_than(k("a")) + 1) == k("c")
    assert key(KeySelector.last_less_than(k("e")) - 2) == k("b")
    assert key(KeySelector(k("c"), False, 1)) == k("c")  # raw fields, as fdb.KeySelector
    assert val(tr.snapshot.get_key(KeySelector.first_greater_than(k("d")))) == k("e")


def test_get_range_with_key_selectors(db, ks, abcde):
    k = abcde
    tr = db.create_transaction()
    sel = KeySelector
    got = rows(tr.get_range(sel.first_greater_than(k("a")), sel.last_less_or_equal(k("d"))))
    assert [key for key, _ in got] == [k("b"), k("c")]
    got = rows(tr.get_range(sel.first_greater_or_equal(k("b")), sel.first_greater_than(k("d"))))
    assert [key for key, _ in got] == [k("b"), k("c"), k("d")]
    got = rows(tr.get_range(sel.first_greater_or_equal(k("a")) + 1, sel.first_greater_or_equal(k("e"))))
    assert [key for key, _ in got] == [k("b"), k("c"), k("d")]
    got = rows(tr.get_range(sel.first_greater_or_equal(k("b")), sel.first_greater_than(k("e")), limit=2, reverse=True))
    assert [key for key, _ in got] == [k("e"), k("d")]
    got = rows(tr.get_range(k("b"), sel.first_greater_than(k("c"))))  # a key and a selector
    assert [key for key, _ in got] == [k("b"), k("c")]


# --- conflicts -----------------------------------------------------------------------------


def _started(db, key):
    """A transaction that has read ``key`` (so it has a read version and a read conflict)."""
    tr = db.create_transaction()
    tr.get(key).wait()
    return tr


def _lost_conflict(db, k, other):
    """A transaction that read ``k``, wrote ``other`` and failed to commit (1020) because
    another transaction wrote ``k`` meanwhile."""
    t1 = _started(db, k)
    put(db, {k: b"t2"})
    t1.set(other, b"t1")
    with expect_fdb_error(1020):
        commit(t1)
    return t1


def test_read_write_conflict(db, ks):
    k, other = ks.pack(("k",)), ks.pack(("other",))
    _lost_conflict(db, k, other)
    assert read(db, other) is None  # nothing of t1 was written


def test_no_conflict_on_disjoint_keys(db, ks):
    k, j, other = ks.pack(("k",)), ks.pack(("j",)), ks.pack(("other",))
    t1 = _started(db, k)
    put(db, {j: b"t2"})
    t1.set(other, b"t1")
    commit(t1)
    assert read(db, other) == b"t1"


def test_no_conflict_with_commits_before_the_read_version(db, ks):
    k, other = ks.pack(("k",)), ks.pack(("other",))
    put(db, {k: b"before"})
    t1 = _started(db, k)
    t1.set(other, b"t1")
    commit(t1)


def test_snapshot_reads_add_no_conflicts(db, ks, abcde):
    k, other = ks.pack(("k",)), ks.pack(("other",))
    t1 = db.create_transaction()
    t1.snapshot.get(k).wait()
    rows(t1.snapshot.get_range(ks.range().start, ks.range().stop))
    t1.snapshot.get_key(KeySelector.first_greater_than(abcde("a"))).wait()
    put(db, {k: b"t2", abcde("b"): b"t2", abcde("bb"): b"new"})
    t1.set(other, b"t1")
    commit(t1)
    assert read(db, other) == b"t1"


def test_range_read_conflicts_with_insert_inside_range(db, ks, abcde):
    t1 = db.create_transaction()
    rows(t1.get_range(abcde("a"), abcde("e")))
    put(db, {abcde("cc"): b"phantom"})  # a key that did not exist when t1 read
    t1.set(ks.pack(("other",)), b"t1")
    with expect_fdb_error(1020):
        commit(t1)


def test_range_read_no_conflict_outside_range(db, ks, abcde):
    t1 = db.create_transaction()
    rows(t1.get_range(abcde("a"), abcde("c")))
    put(db, {abcde("c"): b"end is exclusive", abcde("d"): b"outside"})
    t1.set(ks.pack(("other",)), b"t1")
    commit(t1)


def test_limited_range_read_conflicts_only_on_scanned_part(db, ks, abcde):
    begin, end = abcde("a"), abcde("f")  # the keys ("other",) written below sort after "f"
    # keys a..e exist; a read with limit 2 scans [a, b] only
    t1 = db.create_transaction()
    assert [key for key, _ in rows(t1.get_range(begin, end, limit=2))] == [abcde("a"), abcde("b")]
    put(db, {abcde("c"): b"unscanned", abcde("d"): b"unscanned"})
    t1.set(ks.pack(("other",)), b"t1")
    commit(t1)

    t2 = db.create_transaction()
    rows(t2.get_range(begin, end, limit=2))
    put(db, {abcde("ab"): b"inside the scanned part"})
    t2.set(ks.pack(("other",)), b"t2")
    with expect_fdb_error(1020):
        commit(t2)


def test_limited_reverse_range_read_conflicts_only_on_scanned_part(db, ks, abcde):
    begin, end = abcde("a"), abcde("f")
    t1 = db.create_transaction()
    assert [key for key, _ in rows(t1.get_range(begin, end, limit=2, reverse=True))] == [abcde("e"), abcde("d")]
    put(db, {abcde("a"): b"unscanned", abcde("b"): b"unscanned"})
    t1.set(ks.pack(("other",)), b"t1")
    commit(t1)

    t2 = db.create_transaction()
    rows(t2.get_range(begin, end, limit=2, reverse=True))
    put(db, {abcde("dd"): b"inside the scanned part"})
    t2.set(ks.pack(("other",)), b"t2")
    with expect_fdb_error(1020):
        commit(t2)


def test_limited_range_read_after_writes_elsewhere_reads_the_store_and_conflicts_on_the_scanned_part(db, ks, abcde):
    """Writes outside the range (before it, at its excluded end, a cleared span after it)
    change neither what a limited read returns nor the part it conflicts on."""
    begin, end = abcde("b"), abcde("e")

    def read_after_writes(tr):
        tr.set(abcde("a"), b"before the range")
        tr.set(end, b"at its end, excluded")
        tr.clear_range(ks.pack(("f",)), ks.pack(("g",)))
        return [(key, value) for key, value in rows(tr.get_range(begin, end, limit=2))]

    t1 = db.create_transaction()
    assert read_after_writes(t1) == [(abcde("b"), b"2"), (abcde("c"), b"3")]
    put(db, {abcde("d"): b"unscanned"})
    commit(t1)

    t2 = db.create_transaction()
    read_after_writes(t2)
    put(db, {abcde("bb"): b"inside the scanned part"})
    with expect_fdb_error(1020):
        commit(t2)


def test_add_read_conflict_key(db, ks):
    k, other = ks.pack(("k",)), ks.pack(("other",))
    t1 = db.create_transaction()
    t1.get_read_version().wait()
    t1.add_read_conflict_key(k)
    put(db, {k: b"t2"})
    t1.set(other, b"t1")
    with expect_fdb_error(1020):
        commit(t1)


def test_add_read_conflict_range(db, ks):
    t1 = db.create_transaction()
    t1.get_read_version().wait()
    t1.add_read_conflict_range(ks.pack(("r", 0)), ks.pack(("r", 10)))
    put(db, {ks.pack(("r", 10)): b"outside"})  # end is exclusive
    t1.set(ks.pack(("other",)), b"t1")
    commit(t1)

    t2 = db.create_transaction()
    t2.get_read_version().wait()
    t2.add_read_conflict_range(ks.pack(("r", 0)), ks.pack(("r", 10)))
    put(db, {ks.pack(("r", 5)): b"inside"})
    t2.set(ks.pack(("other",)), b"t2")
    with expect_fdb_error(1020):
        commit(t2)


def test_add_write_conflict_key(db, ks):
    k = ks.pack(("k",))
    t1 = _started(db, k)
    t2 = db.create_transaction()
    t2.add_write_conflict_key(k)  # no write to k, but conflicts as if it were
    t2.set(ks.pack(("elsewhere",)), b"t2")
    commit(t2)
    t1.set(ks.pack(("other",)), b"t1")
    with expect_fdb_error(1020):
        commit(t1)


def test_write_only_transactions_never_conflict(db, ks):
    k = ks.pack(("k",))
    t1 = db.create_transaction()
    t1.get_read_version().wait()
    t1.set(k, b"t1")
    t1.add(ks.pack(("n",)), le(1))
    put(db, {k: b"t2", ks.pack(("n",)): le(10)})
    commit(t1)  # blind writes: no read conflict ranges, no conflict
    assert read(db, k) == b"t1"
    assert from_le(read(db, ks.pack(("n",)))) == 11


def test_atomic_ops_add_no_read_conflict(db, ks):
    n = ks.pack(("n",))
    t1, t2 = db.create_transaction(), db.create_transaction()
    t1.get_read_version().wait()
    t2.get_read_version().wait()
    t1.add(n, le(1))
    t2.add(n, le(2))
    commit(t2)
    commit(t1)
    assert from_le(read(db, n)) == 3


def test_read_only_transaction_commits_despite_changes(db, ks):
    k = ks.pack(("k",))
    t1 = _started(db, k)
    put(db, {k: b"changed"})
    commit(t1)  # nothing to write: nothing to conflict with


def test_conflict_is_retryable_and_retry_sees_new_value(db, ks):
    k, out = ks.pack(("k",)), ks.pack(("out",))
    put(db, {k: b"1"})
    t1 = _started(db, k)
    put(db, {k: b"2"})
    t1.set(out, b"from 1")
    try:
        commit(t1)
        pytest.fail("expected a conflict")
    except Exception as exc:  # noqa: BLE001
        t1.on_error(exc).wait()
    v = val(t1.get(k))
    assert v == b"2"
    t1.set(out, b"from " + v)
    commit(t1)
    assert read(db, out) == b"from 2"


# --- atomic operations ---------------------------------------------------------------------


def test_atomic_add_max_min_little_endian(db, ks):
    a, hi, lo = ks.pack(("add",)), ks.pack(("max",)), ks.pack(("min",))
    tr = db.create_transaction()
    tr.add(a, le(5))  # absent key counts as 0
    tr.max(hi, struct.pack("<H", 255))  # absent: takes the parameter
    tr.min(lo, struct.pack("<H", 256))  # absent: takes the parameter
    commit(tr)
    assert from_le(read(db, a)) == 5
    tr = db.create_transaction()
    tr.add(a, le(-7))
    tr.max(hi, struct.pack("<H", 256))  # b"\x00\x01" > b"\xff\x00" as a little-endian number
    tr.min(lo, struct.pack("<H", 255))  # b"\xff\x00" < b"\x00\x01" as a little-endian number
    commit(tr)
    assert from_le(read(db, a)) == -2
    assert read(db, hi) == struct.pack("<H", 256)
    assert read(db, lo) == struct.pack("<H", 255)
    tr = db.create_transaction()
    tr.max(hi, struct.pack("<H", 3))
    tr.min(lo, struct.pack("<H", 4000))
    commit(tr)
    assert read(db, hi) == struct.pack("<H", 256)
    assert read(db, lo) == struct.pack("<H", 255)


def test_atomic_add_wraps_at_parameter_width(db, ks):
    k = ks.pack(("w",))
    put(db, {k: b"\xff"})
    tr = db.create_transaction()
    tr.add(k, b"\x01")
    commit(tr)
    assert read(db, k) == b"\x00"


def test_many_adds_in_one_transaction(db, ks):
    """Several adds to a key in one commit (a group commit counting its jobs): the same
    result as one by one, with a set or clear in between, a wrap, or another width."""
    counter, mixed, wrap, widths = (ks.pack((name,)) for name in ("counter", "mixed", "wrap", "widths"))
    put(db, {wrap: b"\xfe", widths: le(1)})
    tr = db.create_transaction()
    for _ in range(40):
        tr.add(counter, le(1))
    tr.add(mixed, le(5))
    tr[mixed] = le(100)
    tr.add(mixed, le(2))
    tr.add(mixed, le(3))
    for _ in range(3):
        tr.add(wrap, b"\x01")
    tr.add(widths, le(1))
    tr.add(widths, b"\x01")
    commit(tr)
    assert from_le(read(db, counter)) == 40
    assert from_le(read(db, mixed)) == 105
    assert read(db, wrap) == b"\x01"
    assert read(db, widths) == b"\x03"  # the last add's width, as FoundationDB


def test_bitwise_and_byte_ops(db, ks):
    k = ks.pack(("bits",))
    put(db, {k: b"\x0f"})
    tr = db.create_transaction()
    tr.bit_or(k, b"\xf0")
    commit(tr)
    assert read(db, k) == b"\xff"
    tr = db.create_transaction()
    tr.bit_and(k, b"\x3c")
    tr.bit_xor(k, b"\x0f")
    commit(tr)
    assert read(db, k) == b"\x33"
    bm = ks.pack(("bytemax",))
    tr = db.create_transaction()
    tr.byte_max(bm, b"abc")
    tr.byte_max(bm, b"abd")
    tr.byte_min(bm, b"abcz")
    commit(tr)
    assert read(db, bm) == b"abcz"


# --- versionstamps -------------------------------------------------------------------------


def _stamped_commit(db, ks, i: int) -> bytes:
    tr = db.create_transaction()
    tr.set_versionstamped_key(pack_with_versionstamp(ks, ("vs", Versionstamp())), str(i).encode())
    tr.set_versionstamped_value(ks.pack(("vsv", i)), b"\x00" * 10 + b"tail" + struct.pack("<I", 0))
    future = tr.get_versionstamp()
    commit(tr)
    stamp = bytes(future.wait())
    assert len(stamp) == 10
    return stamp


def test_versionstamps_increase_with_commit_order(db, ks):
    stamps = [_stamped_commit(db, ks, i) for i in range(5)]
    assert stamps == sorted(stamps) and len(set(stamps)) == 5
    # the key holds the same stamp; keys sort in commit order
    tr = db.create_transaction()
    got = rows(tr.get_range_startswith(ks.pack(("vs",))))
    assert [v for _k, v in got] == [str(i).encode() for i in range(5)]
    for (key, _v), stamp in zip(got, stamps):
        _name, vs = ks.unpack(key)
        assert vs.tr_version == stamp and vs.is_complete()
    for i, stamp in enumerate(stamps):
        assert val(tr.get(ks.pack(("vsv", i)))) == stamp + b"tail"


def test_versionstamps_increase_across_handles_and_processes(engine, ks):
    engine.require_shared()
    first = _stamped_commit(engine.db, ks, 0)
    other = engine.open()
    try:
        second = _stamped_commit(other, ks, 1)
    finally:
        close(other)
    run_proc("set", engine.url, ks.pack(("x",)).hex(), b"y".hex())
    third = _stamped_commit(engine.db, ks, 2)
    assert first < second < third


def test_versionstamp_future_fails_when_commit_fails(db, ks):
    k = ks.pack(("k",))
    t1 = _started(db, k)
    t1.set_versionstamped_key(pack_with_versionstamp(ks, ("vs", Versionstamp())), b"")
    future = t1.get_versionstamp()
    put(db, {k: b"t2"})
    with expect_fdb_error(1020):
        commit(t1)
    with expect_fdb_error(2020):  # transaction_invalid_version (seen on FoundationDB 7.3)
        future.wait()


def test_versionstamp_of_concurrent_transactions_follow_commit_order(db, ks):
    t1, t2 = db.create_transaction(), db.create_transaction()
    t1.get_read_version().wait()
    t2.get_read_version().wait()
    for t, name in ((t1, b"t1"), (t2, b"t2")):
        t.set_versionstamped_key(pack_with_versionstamp(ks, ("vs", Versionstamp())), name)
    f1, f2 = t1.get_versionstamp(), t2.get_versionstamp()
    commit(t2)  # t2 started second but commits first
    commit(t1)
    assert bytes(f2.wait()) < bytes(f1.wait())
    assert [v for _k, v in rows(db.create_transaction().get_range_startswith(ks.pack(("vs",))))] == [b"t2", b"t1"]


# --- watches -------------------------------------------------------------------------------


def _arm(db, key):
    tr = db.create_transaction()
    w = tr.watch(key)
    commit(tr)
    return w


def test_watch_fires_on_change(db, ks):
    k = ks.pack(("w",))
    put(db, {k: b"0"})
    w = _arm(db, k)
    put(db, {k: b"1"})
    assert wait_future(w, 60), "watch did not fire after the key changed"
    w.wait()


def test_watch_fires_on_clear_and_on_create(db, ks):
    k = ks.pack(("w",))
    w = _arm(db, k)  # absent key
    put(db, {k: b"created"})
    assert wait_future(w, 60)
    w = _arm(db, k)
    tr = db.create_transaction()
    tr.clear(k)
    commit(tr)
    assert wait_future(w, 60)


def test_watch_fires_on_change_by_another_process(engine, ks):
    engine.require_shared()
    k = ks.pack(("w",))
    put(engine.db, {k: b"0"})
    w = _arm(engine.db, k)
    run_proc("set", engine.url, k.hex(), b"from child".hex())
    assert wait_future(w, 60), "watch did not fire after another process changed the key"
    w.wait()
    assert read(engine.db, k) == b"from child"


def test_watch_does_not_fire_without_change(db, ks):
    k, other = ks.pack(("w",)), ks.pack(("other",))
    put(db, {k: b"0"})
    w = _arm(db, k)
    for i in range(5):
        put(db, {other: str(i).encode()})
    assert not wait_future(w, 0.5), "watch fired although its key did not change"
    put(db, {k: b"1"})  # the watch was armed all along
    assert wait_future(w, 60)


def test_watch_armed_with_stale_value_fires(db, ks):
    k = ks.pack(("w",))
    put(db, {k: b"0"})
    tr = db.create_transaction()
    assert val(tr.snapshot.get(k)) == b"0"  # the value this transaction sees
    w = tr.watch(k)
    put(db, {k: b"1"})  # changes between the read and the watch's commit
    commit(tr)  # read-only: commits, and the watch fires on the change it missed
    assert wait_future(w, 60)


def test_a_watch_is_a_read(db, ks):
    """A watch adds a read conflict on its key, even after a snapshot read of it: a
    writing transaction whose watched key changed meanwhile fails (seen on FoundationDB)."""
    k = ks.pack(("w",))
    put(db, {k: b"0"})
    tr = db.create_transaction()
    assert val(tr.snapshot.get(k)) == b"0"
    tr.watch(k)
    put(db, {k: b"1"})
    tr.set(ks.pack(("unrelated",)), b"")
    with expect_fdb_error(1020):
        commit(tr)


def test_own_write_fires_the_watch_before_commit(db, ks):
    k = ks.pack(("w",))
    put(db, {k: b"0"})
    tr = db.create_transaction()
    w = tr.watch(k)
    tr.set(ks.pack(("unrelated",)), b"")
    assert not w.is_ready()
    tr.set(k, b"other value")
    assert wait_future(w, 60)  # before commit, as FoundationDB does
    w.wait()
    commit(tr)


def test_watch_cancel(db, ks):
    k = ks.pack(("w",))
    w = _arm(db, k)
    w.cancel()
    with expect_fdb_error(1101):
        w.wait()
    put(db, {k: b"after cancel"})  # nothing breaks


def test_watch_wakes_a_waiting_thread(db, ks):
    k = ks.pack(("w",))
    w = _arm(db, k)
    woke = threading.Event()

    def waiter():
        w.wait()
        woke.set()

    t = threading.Thread(target=waiter, daemon=True)
    t.start()
    put(db, {k: b"go"})
    assert woke.wait(60)
    t.join(60)


def test_watch_fires_on_a_write_without_a_write_conflict_range(db, ks):
    """A watch hears the stored value change, whatever conflict ranges the write left."""
    k = ks.pack(("w",))
    put(db, {k: b"0"})
    w = _arm(db, k)
    tr = db.create_transaction()
    tr.options.set_next_write_no_write_conflict_range()
    tr.set(k, b"unfenced")
    commit(tr)
    assert wait_future(w, 60), "watch did not fire on a write made without a conflict range"


@pytest.mark.parametrize("how", ["atomic add", "range clear", "versionstamped value"])
def test_watch_fires_on_every_kind_of_write(db, ks, how):
    k = ks.pack(("w",))
    put(db, {k: le(1)})
    w = _arm(db, k)
    for i in range(3):  # (commits that do not touch it, before and after)
        put(db, {ks.pack(("other", i)): b"x"})
    tr = db.create_transaction()
    if how == "atomic add":
        tr.add(k, le(1))
    elif how == "range clear":
        tr.clear_range(ks.pack(("v",)), ks.pack(("x",)))
    else:
        tr.set_versionstamped_value(k, b"\x00" * 10 + struct.pack("<I", 0))
    commit(tr)
    put(db, {ks.pack(("other", 9)): b"x"})
    assert wait_future(w, 60), f"watch did not fire on an {how}"


def test_a_watch_set_while_other_commits_land_fires_on_a_change_it_missed(db, ks):
    """The change lands between the watch's read version and its commit, among other
    commits: the watch fires on it once armed."""
    k = ks.pack(("w",))
    put(db, {k: b"0"})
    tr = db.create_transaction()
    tr.get_read_version().wait()
    w = tr.watch(k)
    for i in range(5):
        put(db, {ks.pack(("other", i)): b"x"})
    put(db, {k: b"1"})
    for i in range(5):
        put(db, {ks.pack(("other", i)): b"y"})
    commit(tr)
    assert wait_future(w, 60)


# --- limits --------------------------------------------------------------------------------


def test_key_too_large(db, ks):
    tr = db.create_transaction()
    with expect_fdb_error(2102):
        tr.set(ks.key() + b"k" * 10_001, b"v")
        commit(tr)
    tr = db.create_transaction()
    tr.set(ks.key() + b"k" * (10_000 - len(ks.key())), b"v")  # exactly at the limit
    commit(tr)


def test_value_too_large(db, ks):
    tr = db.create_transaction()
    with expect_fdb_error(2103):
        tr.set(ks.pack(("v",)), b"x" * 100_001)
        commit(tr)
    tr = db.create_transaction()
    tr.set(ks.pack(("v",)), b"x" * 100_000)  # exactly at the limit
    commit(tr)
    assert len(read(db, ks.pack(("v",)))) == 100_000


def test_transaction_too_large(db, ks):
    tr = db.create_transaction()
    with expect_fdb_error(2101):
        for i in range(110):
            tr.set(ks.pack(("big", i)), b"x" * 99_000)  # ~10.9 MB
        commit(tr)
    assert rows(db.create_transaction().get_range_startswith(ks.pack(("big",)))) == []


def test_system_keys_are_out_of_range(db):
    tr = db.create_transaction()
    with expect_fdb_error(2004):
        tr.set(b"\xff/jobs-test", b"v")
        commit(tr)
    tr = db.create_transaction()
    with expect_fdb_error(2004):
        tr.get(b"\xff/jobs-test").wait()
    tr = db.create_transaction()
    with expect_fdb_error(2004):
        tr.clear(b"\xff/jobs-test")
        commit(tr)


@pytest.fixture
def lifetime(engine, monkeypatch) -> float:
    """Seconds to sleep so that a transaction is past its 5 s limit: the embedded engine's
    limit is shortened through its module constant; a real cluster's cannot be."""
    if engine.name == "fdb":
        return 5.5
    from jobs.engine import limits

    monkeypatch.setattr(limits, "TRANSACTION_LIFETIME", 1.0)
    return 1.5


@pytest.mark.slow
def test_transaction_too_old(engine, db, ks, lifetime):
    """Past the 5 s limit a writing commit fails with 1007.  Reads get some slack on
    FoundationDB (a read 5.5 s old returned there; one 8.5 s old failed); the embedded
    engine is stricter and refuses reads at the limit too."""
    k = ks.pack(("k",))
    put(db, {k: b"v"})
    reader = db.create_transaction()
    reader.get(k).wait()
    writer = db.create_transaction()
    writer.get(k).wait()
    writer.set(ks.pack(("w",)), b"w")
    time.sleep(lifetime)
    if engine.name == "fdb":
        try:
            reader.get(ks.pack(("other",))).wait()
        except Exception as exc:  # noqa: BLE001 - either outcome is FoundationDB's
            assert error_code(exc) == 1007
    else:
        with expect_fdb_error(1007):
            reader.get(ks.pack(("other",))).wait()
    with expect_fdb_error(1007):
        commit(writer)
    if engine.name == "fdb":
        time.sleep(3.0)  # well past the slack
        with expect_fdb_error(1007):
            reader.get(ks.pack(("other2",))).wait()
    assert read(db, ks.pack(("w",))) is None
    writer.on_error(1007).wait()  # retryable: a fresh read version
    writer.get(k).wait()
    writer.set(ks.pack(("w",)), b"w")
    commit(writer)
    assert read(db, ks.pack(("w",))) == b"w"


# --- transactional and on_error ------------------------------------------------------------


def test_transactional_with_database_and_transaction(db, ks):
    @transactional
    def store(tr, key, value):
        tr.set(key, value)
        return value

    assert store(db, ks.pack(("a",)), b"1") == b"1"  # own transaction, committed
    assert read(db, ks.pack(("a",))) == b"1"
    tr = db.create_transaction()
    store(tr, ks.pack(("b",)), b"2")  # joins tr, does not commit it
    assert read(db, ks.pack(("b",))) is None
    assert val(tr.get(ks.pack(("b",)))) == b"2"
    commit(tr)
    assert read(db, ks.pack(("b",))) == b"2"
    store(tr=db, key=ks.pack(("c",)), value=b"3")  # by keyword
    assert read(db, ks.pack(("c",))) == b"3"
    assert is_database(db) and not is_database(db.create_transaction())


def test_transactional_retries_conflicts(db, ks):
    k, out = ks.pack(("k",)), ks.pack(("out",))
    put(db, {k: b"0"})
    calls = []

    @transactional
    def copy(tr):
        calls.append(1)
        v = val(tr.get(k))
        if len(calls) == 1:
            put(db, {k: b"changed"})  # another transaction commits under our feet
        tr.set(out, v)

    copy(db)
    assert len(calls) == 2
    assert read(db, out) == b"changed"


def test_transactional_composes_in_one_transaction(db, ks):
    @transactional
    def inner(tr, i):
        tr.set(ks.pack(("c", i)), b"x")

    @transactional
    def outer(tr, fail):
        inner(tr, 1)
        inner(tr, 2)
        if fail:
            raise RuntimeError("application error")

    with pytest.raises(RuntimeError):
        outer(db, True)
    assert rows(db.create_transaction().get_range_startswith(ks.pack(("c",)))) == []  # neither
    outer(db, False)
    assert len(rows(db.create_transaction().get_range_startswith(ks.pack(("c",))))) == 2  # both


def test_transactional_reraises_non_retryable(db, ks):
    calls = []

    @transactional
    def too_big(tr):
        calls.append(1)
        tr.set(ks.pack(("v",)), b"x" * 100_001)

    with expect_fdb_error(2103):
        too_big(db)
    assert len(calls) == 1


def test_transactional_retries_the_embedded_engines_error_raised_by_a_body_alike(db, ks):
    """A body may raise ``jobs.engine.FDBError`` itself (a simulated conflict) on any
    engine's transaction: a retryable code is retried as the engine's own error would be
    (the bindings' ``on_error`` takes no other class), any other code is raised as it was."""
    from jobs.engine import FDBError

    calls = []

    @transactional
    def conflicts_once(tr):
        calls.append(1)
        tr.set(ks.pack(("v",)), b"x")
        if len(calls) == 1:
            raise FDBError(1020)

    conflicts_once(db)
    assert len(calls) == 2 and read(db, ks.pack(("v",))) == b"x"
    refused = FDBError(2004, "the body's own")

    @transactional
    def fails(tr):
        calls.append(1)
        raise refused

    with pytest.raises(FDBError) as raised:
        fails(db)
    assert raised.value is refused and len(calls) == 3


@pytest.mark.parametrize("code", [1020, 1021, 1007])
def test_on_error_retries_and_resets(db, ks, code):
    k = ks.pack(("k",))
    tr = db.create_transaction()
    tr.set(k, b"lost")
    tr.on_error(code).wait()
    tr.set(ks.pack(("after",)), b"kept")
    commit(tr)
    assert read(db, k) is None  # the reset dropped the write made before on_error
    assert read(db, ks.pack(("after",))) == b"kept"


@pytest.mark.parametrize("code", [2101, 2102, 2103, 2004])
def test_on_error_reraises_others(db, code):
    tr = db.create_transaction()
    with expect_fdb_error(code):
        tr.on_error(code).wait()


def test_on_error_accepts_the_engines_exception(db, ks):
    tr = db.create_transaction()
    try:
        tr.set(ks.pack(("v",)), b"x" * 100_001)
        commit(tr)
        pytest.fail("expected 2103")
    except Exception as exc:  # noqa: BLE001
        with expect_fdb_error(2103):
            tr.on_error(exc).wait()


# --- several processes ---------------------------------------------------------------------


def _run_all(procs, timeout=300):
    deadline = time.monotonic() + timeout
    for p in procs:
        p.wait(timeout=max(1, deadline - time.monotonic()))
    for p in procs:
        assert p.returncode == 0, f"child exited {p.returncode}: {p.stderr.read() if p.stderr else ''}"


def test_processes_atomic_add_counter(engine, ks):
    engine.require_shared()
    k = ks.pack(("counter",))
    procs = [spawn("add", engine.url, k.hex(), 100) for _ in range(4)]
    _run_all(procs)
    assert from_le(read(engine.db, k)) == 400


def test_processes_read_modify_write_counter(engine, ks):
    engine.require_shared()
    k = ks.pack(("counter",))
    procs = [spawn("rmw", engine.url, k.hex(), 50) for _ in range(4)]
    _run_all(procs)
    assert read(engine.db, k) == b"200"


def test_threads_read_modify_write_counter(db, ks):
    k = ks.pack(("counter",))

    @transactional
    def incr(tr):
        tr.set(k, str(int(val(tr.get(k)) or b"0") + 1).encode())

    def work():
        for _ in range(50):
            incr(db)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert read(db, k) == b"200"


def test_sigkill_mid_commit_loses_no_acknowledged_commit(engine, ks):
    engine.require_shared()
    space = ks.subspace(("kill",))
    acked = 0
    for _round in range(3):
        child = spawn("commit-loop", engine.url, space.key().hex(), stdout=subprocess.PIPE, text=True)
        try:
            assert child.stdout.readline().strip() == "ready"
            target = acked + 20
            last = acked
            while last < target:
                line = child.stdout.readline()
                assert line, f"child died early with exit code {child.poll()}"
                last = int(line)
        finally:
            os.kill(child.pid, signal.SIGKILL)
            rest = child.stdout.read()  # acknowledgements printed before the kill
            child.wait(60)
        assert child.returncode == -signal.SIGKILL
        for line in rest.split():
            last = max(last, int(line))
        acked = last

        db2 = engine.open()  # a new handle, as after a crash
        try:
            tr = db2.create_transaction()
            counter = int(val(tr.get(space.pack(("counter",)))))
            assert acked <= counter <= acked + 1, (acked, counter)  # at most one unacknowledged
            logged = [space.unpack(k)[1] for k, _v in rows(tr.get_range_startswith(space.pack(("log",))))]
            assert logged == list(range(1, counter + 1))
            acked = counter
        finally:
            close(db2)
    if engine.path is not None:
        conn = sqlite3.connect(engine.path)
        try:
            assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        finally:
            conn.close()


# --- more FDB behaviour the layers above lean on -------------------------------------------


def test_write_skew_is_prevented(db, ks):
    a, b = ks.pack(("a",)), ks.pack(("b",))
    put(db, {a: b"1", b: b"1"})
    t1, t2 = db.create_transaction(), db.create_transaction()
    assert val(t1.get(a)) == b"1" and val(t2.get(b)) == b"1"
    t1.set(b, b"0")  # each keeps "at least one is 1" on its own reading
    t2.set(a, b"0")
    commit(t1)
    with expect_fdb_error(1020):
        commit(t2)
    assert (read(db, a), read(db, b)) == (b"1", b"0")


def test_get_key_conflicts_on_the_gap_it_skipped(db, ks, abcde):
    t1 = db.create_transaction()
    assert val(t1.get_key(KeySelector.first_greater_or_equal(abcde("bb")))) == abcde("c")
    put(db, {abcde("bc"): b"now the answer would differ"})
    t1.set(ks.pack(("other",)), b"t1")
    with expect_fdb_error(1020):
        commit(t1)


def test_atomic_op_after_range_clear_in_same_transaction(db, ks):
    n = ks.pack(("n",))
    put(db, {n: le(10)})
    tr = db.create_transaction()
    tr.clear_range(ks.range().start, ks.range().stop)
    tr.add(n, le(1))
    assert from_le(val(tr.get(n))) == 1
    assert rows(tr.get_range(ks.range().start, ks.range().stop)) == [(n, le(1))]
    commit(tr)
    assert from_le(read(db, n)) == 1


def test_versionstamped_value_is_unreadable_before_commit(db, ks):
    k = ks.pack(("vsv",))
    tr = db.create_transaction()
    tr.set_versionstamped_value(k, b"\x00" * 10 + struct.pack("<I", 0))
    with expect_fdb_error(1036):
        tr.get(k).wait()


def test_one_transaction_one_versionstamp(db, ks):
    tr = db.create_transaction()
    for user in (1, 2):
        tr.set_versionstamped_key(pack_with_versionstamp(ks, ("vs", Versionstamp(user_version=user))), b"")
    f = tr.get_versionstamp()
    commit(tr)
    stamps = [ks.unpack(k)[1] for k, _v in rows(db.create_transaction().get_range_startswith(ks.pack(("vs",))))]
    assert [s.user_version for s in stamps] == [1, 2]
    assert stamps[0].tr_version == stamps[1].tr_version == bytes(f.wait())


def test_reset_drops_everything(db, ks):
    tr = db.create_transaction()
    tr.set(ks.pack(("a",)), b"x")
    tr.reset()
    tr.set(ks.pack(("b",)), b"y")
    commit(tr)
    assert read(db, ks.pack(("a",))) is None
    assert read(db, ks.pack(("b",))) == b"y"


def test_cancel(db, ks):
    tr = db.create_transaction()
    tr.set(ks.pack(("a",)), b"x")
    tr.cancel()
    with expect_fdb_error(1025):
        tr.get(ks.pack(("a",))).wait()
    with expect_fdb_error(1025):
        commit(tr)
    assert read(db, ks.pack(("a",))) is None


def test_timeout_option(db, ks):
    tr = db.create_transaction()
    tr.options.set_timeout(100)
    time.sleep(0.5)
    with expect_fdb_error(1031):
        tr.get(ks.pack(("a",))).wait()
    with expect_fdb_error(1031):
        tr.on_error(1031).wait()  # not retryable


def test_retry_limit_option(db):
    tr = db.create_transaction()
    tr.options.set_retry_limit(2)
    tr.on_error(1020).wait()
    tr.on_error(1020).wait()
    with expect_fdb_error(1020):
        tr.on_error(1020).wait()


def test_committed_version_and_read_version(db, ks):
    tr = db.create_transaction()
    tr.set(ks.pack(("a",)), b"x")
    commit(tr)
    committed = tr.get_committed_version()
    assert committed > 0
    later = db.create_transaction()
    assert later.get_read_version().wait() >= committed
    ro = db.create_transaction()
    ro.get(ks.pack(("a",))).wait()
    commit(ro)
    assert ro.get_committed_version() == -1  # read-only: nothing committed


def test_clear_range_inverted(db, ks):
    tr = db.create_transaction()
    with expect_fdb_error(2005):
        tr.clear_range(ks.pack(("b",)), ks.pack(("a",)))
        commit(tr)


def test_large_range_read(db, ks):
    tr = db.create_transaction()
    for i in range(2000):
        tr.set(ks.pack(("r", i)), str(i).encode())
    commit(tr)
    tr = db.create_transaction()
    got = rows(tr.get_range_startswith(ks.pack(("r",))))
    assert [ks.unpack(k)[1] for k, _v in got] == list(range(2000))
    assert len(rows(tr.get_range_startswith(ks.pack(("r",)), limit=1500))) == 1500
    assert [ks.unpack(k)[1] for k, _v in rows(tr.get_range_startswith(ks.pack(("r",)), limit=3, reverse=True))] == [1999, 1998, 1997]


def test_watch_on_key_written_by_same_transaction(db, ks):
    k, other = ks.pack(("w",)), ks.pack(("other",))
    put(db, {k: b"old"})
    tr = db.create_transaction()
    tr.set(k, b"mine")
    w = tr.watch(k)
    commit(tr)
    put(db, {other: b"x"})
    assert not wait_future(w, 0.5), "watch fired although the key kept the value its transaction wrote"
    put(db, {k: b"theirs"})
    assert wait_future(w, 60)


def test_two_watches_on_one_key(db, ks):
    k = ks.pack(("w",))
    w1, w2 = _arm(db, k), _arm(db, k)
    put(db, {k: b"1"})
    assert wait_future(w1, 60) and wait_future(w2, 60)


def test_watch_of_failed_commit_fails(db, ks):
    k, other, watched = ks.pack(("w",)), ks.pack(("other",)), ks.pack(("watched",))
    t1 = _started(db, k)
    w = t1.watch(watched)
    put(db, {k: b"conflict"})
    t1.set(other, b"t1")
    with expect_fdb_error(1020):
        commit(t1)
    assert wait_future(w, 60)
    with expect_fdb_error(1020, 1025, 1101):
        w.wait()


def test_transaction_indexing(db, ks):
    tr = db.create_transaction()
    tr[ks.pack(("a",))] = b"1"
    tr[ks.pack(("b",))] = b"2"
    assert val(tr[ks.pack(("a",))]) == b"1"
    assert len(rows(tr[ks.pack(("a",)) : ks.pack(("c",))])) == 2
    del tr[ks.pack(("a",))]
    assert val(tr[ks.pack(("a",))]) is None
    commit(tr)
    assert read(db, ks.pack(("b",))) == b"2"


def test_watch_of_reset_transaction_is_cancelled(engine, db, ks):
    """FDB: "If an uncommitted transaction is reset or destroyed, then any watches it
    created will be set with the transaction_cancelled exception".  After ``on_error`` a
    cluster did not always do so (one of two runs: still pending after 10 s): the embedded
    engine cancels, and the job layer cancels such watches itself (``transactional.watch``)."""
    k = ks.pack(("w",))
    tr = db.create_transaction()
    w1 = tr.watch(k)
    tr.reset()
    assert wait_future(w1, 10), "watch of a reset transaction never became ready"
    with expect_fdb_error(1025):
        w1.wait()
    w2 = tr.watch(k)
    tr.on_error(1020).wait()
    if engine.name == "fdb" and not wait_future(w2, 10):
        w2.cancel()  # seen on FoundationDB 7.3: not cancelled by on_error
        return
    assert wait_future(w2, 10), "watch of a transaction reset by on_error never became ready"
    with expect_fdb_error(1025):
        w2.wait()


def test_close_right_after_a_watch_leaves_no_background_error(engine, monkeypatch):
    """Closing a database whose watch thread is still starting must be quiet (embedded
    engines; the bindings' databases are never closed)."""
    if engine.name == "fdb":
        pytest.skip("fdb.Database has no close()")
    from jobs.engine.urls import open_database

    errors = []
    monkeypatch.setattr(threading, "excepthook", lambda args: errors.append(args.exc_value))
    for _ in range(20):
        db = open_database(engine.url or "memory:")
        tr = db.create_transaction()
        w = tr.watch(b"watched")
        commit(tr)
        w.cancel()
        db.close()
    wait_until(lambda: not [t for t in threading.enumerate() if t.name == "jobs-watches"], timeout=10)
    assert errors == [], f"background watch thread failed after close: {errors[0]!r}"


def test_a_transaction_that_starts_while_its_database_closes_gets_operation_cancelled(engine):
    """A thread whose transaction opens a connection while another thread closes the
    database (a memory store's files are deleted) gets operation_cancelled, as any use
    of a closed database does, not a file error (a notifier thread counts on it to stop
    quietly)."""
    if engine.name == "fdb":
        pytest.skip("fdb.Database has no close()")
    from jobs.engine.errors import StoreFileError
    from jobs.engine.urls import open_database

    db = open_database(engine.url or "memory:")
    connect = db._connect

    def closed_under_it():
        db.close()
        raise StoreFileError("cannot open store: disk I/O error")

    while db._pool:  # (the next transaction connects)
        db._pool.pop().close()
    db._connect = closed_under_it
    tr = db.create_transaction()
    with expect_fdb_error(1101):
        tr.get(b"k").wait()
    db._connect = connect


# --- FoundationDB's behaviour as seen on a cluster (7.3.79): the embedded engine follows --


def test_a_failed_commit_leaves_the_transaction_unusable(db, ks):
    """After a failed commit the transaction refuses use (2017); ``on_error`` at once
    revives it, on a new read version.  Used again first, it stays refused (``on_error``
    answers 2017 too, as on a cluster) until ``reset``: using it would read and commit on
    a stale view (a lost update)."""
    k, other = ks.pack(("k",)), ks.pack(("other",))
    t1 = _lost_conflict(db, k, other)
    t1.on_error(1020).wait()
    assert val(t1.get(k)) == b"t2"  # usable again, on a new read version
    t1.set(other, b"t1")
    commit(t1)
    assert read(db, other) == b"t1"
    t1 = _lost_conflict(db, k, other)
    with expect_fdb_error(2017):
        t1.get(k).wait()
    with expect_fdb_error(2017):
        t1.set(other, b"again")
        commit(t1)
    with expect_fdb_error(2017):
        t1.on_error(1020).wait()
    with expect_fdb_error(2017):
        t1.get(k).wait()
    t1.reset()
    assert val(t1.get(k)) == b"t2"
    t1.set(other, b"after reset")
    commit(t1)
    assert read(db, other) == b"after reset"


def test_a_committed_transaction_used_again_is_revived_only_by_reset(db, ks):
    k = ks.pack(("k",))
    tr = db.create_transaction()
    tr.set(k, b"1")
    commit(tr)
    with expect_fdb_error(2017):
        tr.get(k).wait()
    with expect_fdb_error(2017):
        tr.on_error(1020).wait()
    tr.reset()
    assert val(tr.get(k)) == b"1"


def test_range_read_over_a_versionstamped_key_is_unreadable(db, ks):
    """A read of what the transaction wrote with a versionstamp fails (1036), and so does
    the transaction's commit afterwards (the error is kept), as on a cluster; ``on_error``
    forgets it."""
    def stamped():
        tr = db.create_transaction()
        tr.get_read_version().wait()
        tr.set(ks.pack(("a",)), b"a")
        tr.set_versionstamped_key(pack_with_versionstamp(ks, ("vs", Versionstamp())), b"v")
        return tr

    tr = stamped()
    with expect_fdb_error(1036):
        rows(tr.get_range(ks.range().start, ks.range().stop))
    assert rows(tr.get_range(ks.pack(("a",)), ks.pack(("b",)))) == [(ks.pack(("a",)), b"a")]  # elsewhere: fine
    with expect_fdb_error(1036):
        commit(tr)
    assert rows(db.create_transaction().get_range_startswith(ks.pack(("vs",)))) == []  # nothing written
    tr = stamped()
    with expect_fdb_error(1036):
        rows(tr.snapshot.get_range(ks.range().start, ks.range().stop))  # a snapshot read alike
    with expect_fdb_error(1036):
        commit(tr)
    tr = stamped()
    with expect_fdb_error(1036):
        rows(tr.get_range(ks.range().start, ks.range().stop))
    tr.on_error(1020).wait()  # a new attempt: the read's error is forgotten
    tr.set_versionstamped_key(pack_with_versionstamp(ks, ("vs", Versionstamp())), b"v")
    commit(tr)
    assert len(rows(db.create_transaction().get_range_startswith(ks.pack(("vs",))))) == 1


def test_a_read_of_a_versionstamped_value_fails_the_commit_too(db, ks):
    tr = db.create_transaction()
    tr.set_versionstamped_value(ks.pack(("sv",)), b"\x00" * 10 + struct.pack("<L", 0))
    with expect_fdb_error(1036):
        tr.get(ks.pack(("sv",))).wait()
    with expect_fdb_error(1036):
        commit(tr)


def test_max_retry_delay_caps_the_backoff(engine, db, monkeypatch):
    """``max_retry_delay`` (FoundationDB's default 1 s) bounds each ``on_error`` backoff,
    across ``on_error`` calls, until ``reset``."""
    slept = []
    if engine.name != "fdb":
        import jobs.engine.transaction as transaction

        monkeypatch.setattr(transaction.time, "sleep", slept.append)
    tr = db.create_transaction()
    tr.options.set_max_retry_delay(5)
    for _ in range(12):  # past 10 ms * 2**7: the default would back off up to 1 s
        tr.on_error(1020).wait()
    if engine.name != "fdb":
        assert len(slept) == 12 and max(slept) <= 0.005
        tr.reset()
        slept.clear()
        for _ in range(12):
            tr.on_error(1020).wait()
        assert max(slept) > 0.005  # (the i-th is uniform below 10 ms * 2**i, capped at 1 s: all of
        # the twelve below 5 ms has odds under 1e-18)


def test_reset_clears_options_on_error_keeps_them(db):
    tr = db.create_transaction()
    tr.options.set_retry_limit(1)
    tr.reset()
    for _ in range(3):  # no limit any more
        tr.on_error(1020).wait()
    tr = db.create_transaction()
    tr.options.set_retry_limit(1)
    tr.on_error(1020).wait()
    with expect_fdb_error(1020):  # kept across on_error
        tr.on_error(1020).wait()


def test_a_dropped_transaction_cancels_its_reads(db, ks):
    k = ks.pack(("k",))
    put(db, {k: b"v"})
    future = db.create_transaction().get(k)  # the transaction is destroyed at once
    with expect_fdb_error(1025):
        future.wait()
    tr = db.create_transaction()
    kept = tr.get(k)
    assert val(kept) == b"v"  # looked at while the transaction lived
    del tr
    assert val(kept) == b"v"


def test_own_writes_are_left_out_of_range_read_conflicts(db, ks):
    a, d = ks.pack(("a",)), ks.pack(("d",))
    tr = db.create_transaction()
    tr.clear_range(a, d)
    assert rows(tr.get_range(a, d)) == []
    put(db, {ks.pack(("b",)): b"other transaction"})  # inside the span this one cleared
    tr.set(ks.pack(("x",)), b"x")
    commit(tr)  # the cleared span's contents were known from its own write: no conflict
    assert read(db, ks.pack(("x",))) == b"x"


def test_range_read_still_conflicts_where_own_writes_do_not_cover(db, ks):
    a, d = ks.pack(("a",)), ks.pack(("d",))
    tr = db.create_transaction()
    tr.clear_range(a, ks.pack(("b",)))
    rows(tr.get_range(a, d))
    put(db, {ks.pack(("c",)): b"other transaction"})  # outside the cleared part
    tr.set(ks.pack(("x",)), b"x")
    with expect_fdb_error(1020):
        commit(tr)


def test_setting_the_same_value_does_not_fire_the_watch(engine, db, ks):
    """(A watch may fire spuriously on a cluster: there only the change is asserted.)"""
    k = ks.pack(("w",))
    put(db, {k: b"0"})
    tr = db.create_transaction()
    w = tr.watch(k)
    tr.set(k, b"0")
    commit(tr)
    if engine.name != "fdb":
        assert not wait_future(w, 0.3)
    put(db, {k: b"1"})
    assert wait_future(w, 60)


def test_options_are_the_bindings_own(db):
    tr = db.create_transaction()
    with pytest.raises(AttributeError):
        tr.options.set_no_such_option()
    tr.options.set_priority_batch()  # a real option
    tr.options.set_timeout(60_000)


def test_read_your_writes_disable(engine, db, ks):
    k = ks.pack(("k",))
    put(db, {k: b"stored"})
    tr = db.create_transaction()
    tr.options.set_read_your_writes_disable()
    tr.set(k, b"mine")
    assert val(tr.get(k)) == b"stored"  # the store's value, not this transaction's write
    assert rows(tr.get_range(k, k + b"\x00")) == [(k, b"stored")]
    commit(tr)
    assert read(db, k) == b"mine"
    tr = db.create_transaction()
    tr.get(k).wait()
    with expect_fdb_error(2000):  # only before reads and writes
        tr.options.set_read_your_writes_disable()
        commit(tr)


def test_snapshot_ryw_disable(db, ks):
    k = ks.pack(("k",))
    put(db, {k: b"stored"})
    tr = db.create_transaction()
    tr.options.set_snapshot_ryw_disable()
    tr.set(k, b"mine")
    assert val(tr.snapshot.get(k)) == b"stored"
    assert val(tr.get(k)) == b"mine"


def test_next_write_no_write_conflict_range(db, ks):
    k, other = ks.pack(("k",)), ks.pack(("other",))
    reader = _started(db, k)
    tr = db.create_transaction()
    tr.options.set_next_write_no_write_conflict_range()
    tr.set(k, b"unfenced")
    commit(tr)
    reader.set(other, b"x")
    commit(reader)  # the write left no conflict range for the reader to hit
    assert read(db, k) == b"unfenced"


def test_retryable_codes_are_foundationdbs():
    """Throttling and proxy-memory errors are retried (FoundationDB's predicate); errors
    that will not pass by themselves are not."""
    from jobs.engine.errors import FDBError, is_retryable

    for code in (1007, 1009, 1020, 1021, 1037, 1038, 1039, 1042, 1051, 1078, 1213, 1223):
        assert is_retryable(FDBError(code)), code
    for code in (1025, 1031, 1101, 2017, 2101):
        assert not is_retryable(FDBError(code)), code

