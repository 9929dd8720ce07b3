"""The fault-injection wrapper, on every engine: each fault does what it says (commits or
not), ``on_error`` retries after it, counters count, and ``transactional`` code that is
idempotent comes out exact under all faults together."""

from __future__ import annotations

import pytest
from enginekit import expect_fdb_error, from_le, le, read, rows, val

from jobs.engine import Versionstamp, is_database, pack_with_versionstamp, transactional, wait_future
from jobs.engine.faults import FaultInjectingDatabase


def _write(fdb_, key, value=b"x"):
    tr = fdb_.create_transaction()
    tr.set(key, value)
    return tr


def _read(db, key):
    return read(db, key)


@pytest.mark.parametrize(
    ("fault", "code", "committed"),
    [
        ("conflict", 1020, False),
        ("unknown_committed", 1021, True),
        ("unknown_not_committed", 1021, False),
        ("too_old", 1007, False),
    ],
)
def test_each_fault(db, ks, fault, code, committed):
    fdb_ = FaultInjectingDatabase(db, **{fault: 1.0}, seed=1)
    k = ks.pack(("k",))
    tr = _write(fdb_, k)
    with expect_fdb_error(code):
        tr.commit().wait()
    assert (_read(db, k) == b"x") is committed
    assert fdb_.injected == {fault: 1} and fdb_.faults == 1 and fdb_.commits == 1



def test_on_error_after_injected_fault_resets_and_retries(db, ks):
    k, k2 = ks.pack(("k",)), ks.pack(("k2",))
    for fault in ("conflict", "unknown_committed", "unknown_not_committed", "too_old"):
        fdb_ = FaultInjectingDatabase(db, **{fault: 1.0})
        tr = _write(fdb_, k, fault.encode())
        try:
            tr.commit().wait()
            pytest.fail("expected an injected fault")
        except Exception as exc:  # noqa: BLE001
            tr.on_error(exc).wait()  # the engine's own on_error, given the injected error
        setattr(fdb_, fault, 0.0)
        tr.set(k2, fault.encode())
        tr.commit().wait()
        assert _read(db, k2) == fault.encode()
        # the write made before on_error was dropped unless it had really committed
        assert (_read(db, k) == fault.encode()) is (fault == "unknown_committed")


def test_read_only_commits_are_never_faulted(db, ks):
    fdb_ = FaultInjectingDatabase(db, conflict=1.0)
    tr = fdb_.create_transaction()
    tr.get(ks.pack(("k",))).wait()
    tr.commit().wait()
    assert fdb_.commits == 0 and fdb_.faults == 0


def test_rates_are_validated():
    for bad in ({"conflict": -0.1}, {"too_old": 1.5}, {"conflict": 0.6, "unknown_committed": 0.6}, {"conflict": "x"}):
        with pytest.raises(ValueError):
            FaultInjectingDatabase(object(), **bad)


def test_seeded_faults_repeat(db, ks):
    def run(seed):
        fdb_ = FaultInjectingDatabase(db, conflict=0.3, unknown_not_committed=0.2, too_old=0.1, seed=seed)
        outcomes = []
        for i in range(40):
            tr = _write(fdb_, ks.pack(("s", i)))
            try:
                tr.commit().wait()
                outcomes.append(None)
            except Exception as exc:  # noqa: BLE001
                outcomes.append(exc.code)
        return outcomes

    assert run(5) == run(5)
    assert len(set(run(6))) > 1


def test_wrapper_is_a_database_and_its_transactions_are_not(db):
    fdb_ = FaultInjectingDatabase(db)
    assert is_database(fdb_)
    assert not is_database(fdb_.create_transaction())


def test_delegation(db, ks):
    fdb_ = FaultInjectingDatabase(db)
    tr = fdb_.create_transaction()
    tr.set(ks.pack(("a",)), b"1")
    assert val(tr.snapshot.get(ks.pack(("a",)))) == b"1"
    tr.options.set_timeout(60_000)
    assert rows(tr.get_range_startswith(ks.key())) == [(ks.pack(("a",)), b"1")]
    tr.commit().wait()
    assert fdb_.commits == 1


def test_database_shortcuts_go_through_faults(db, ks):
    fdb_ = FaultInjectingDatabase(db, conflict=0.5, too_old=0.2, seed=3)
    for i in range(30):
        fdb_.set(ks.pack(("d", i)), b"v")  # retried by the shortcut's own loop
    assert fdb_.faults > 0
    assert len(fdb_.get_range_startswith(ks.pack(("d",)))) == 30
    assert fdb_.get(ks.pack(("d", 0))) == b"v"
    fdb_.clear_range_startswith(ks.pack(("d",)))
    assert fdb_.get_range_startswith(ks.pack(("d",))) == []


def test_idempotent_transactional_code_is_exact_under_all_faults(db, ks):
    fdb_ = FaultInjectingDatabase(db, conflict=0.15, unknown_committed=0.15, unknown_not_committed=0.1, too_old=0.1, seed=11)
    done = ks.subspace(("done",))
    total = ks.pack(("total",))

    @transactional
    def apply_once(tr, i):
        # idempotent: a marker makes a retried, already-committed attempt a no-op
        if val(tr.get(done.pack((i,)))) is not None:
            return
        tr.set(done.pack((i,)), b"")
        tr.set(total, str(int(val(tr.get(total)) or b"0") + i).encode())

    for i in range(1, 61):
        apply_once(fdb_, i)
    assert fdb_.injected["unknown_committed"] > 0
    assert _read(db, total) == str(sum(range(1, 61))).encode()


def test_non_idempotent_code_double_applies_on_unknown_committed(db, ks):
    """What the wrapper is for: a blind increment retried after 1021 counts twice."""
    fdb_ = FaultInjectingDatabase(db, unknown_committed=0.3, seed=2)
    n = ks.pack(("n",))

    @transactional
    def incr(tr):
        tr.add(n, le(1))

    for _ in range(40):
        incr(fdb_)
    assert from_le(_read(db, n)) == 40 + fdb_.injected["unknown_committed"]
    assert fdb_.injected["unknown_committed"] > 0


def test_versionstamp_future_fails_on_dropped_commit(db, ks):
    fdb_ = FaultInjectingDatabase(db, conflict=1.0)
    tr = fdb_.create_transaction()
    tr.set_versionstamped_key(pack_with_versionstamp(ks, ("vs", Versionstamp())), b"")
    future = tr.get_versionstamp()
    with expect_fdb_error(1020):
        tr.commit().wait()
    tr.on_error(1020).wait()
    with expect_fdb_error(2020):  # transaction_invalid_version, as on a cluster
        future.wait()


def test_unknown_committed_fails_versionstamp_and_watches_as_fdb_does(db, ks):
    """FDB fails the versionstamp future (2020) and the watches (with the error) of a
    commit with an unknown result, although the commit may have happened (here it did)."""
    fdb_ = FaultInjectingDatabase(db, unknown_committed=1.0)
    w_key = ks.pack(("w",))
    tr = fdb_.create_transaction()
    tr.set_versionstamped_key(pack_with_versionstamp(ks, ("vs", Versionstamp())), b"")
    future = tr.get_versionstamp()
    watch = tr.watch(w_key)
    with expect_fdb_error(1021):
        tr.commit().wait()
    assert len(rows(db.create_transaction().get_range_startswith(ks.pack(("vs",))))) == 1  # committed
    with expect_fdb_error(2020):
        future.wait()
    with expect_fdb_error(1021):
        watch.wait()


def test_watch_through_the_wrapper(db, ks):
    fdb_ = FaultInjectingDatabase(db)
    k = ks.pack(("w",))
    tr = fdb_.create_transaction()
    w = tr.watch(k)
    tr.commit().wait()
    fdb_.set(k, b"changed")
    assert wait_future(w, 60)
    w.wait()
    tr = fdb_.create_transaction()
    w = tr.watch(k)
    tr.commit().wait()
    w.cancel()
    with expect_fdb_error(1101):
        w.wait()


def test_real_failure_wins_over_unknown_committed(db, ks):
    fdb_ = FaultInjectingDatabase(db, unknown_committed=1.0)
    k = ks.pack(("k",))
    tr = fdb_.create_transaction()
    tr.get(k).wait()
    future = tr.get_versionstamp()
    other = _write(db, k)  # a real conflict (held: a dropped transaction cancels its commit, 1025)
    other.commit().wait()
    tr.set(ks.pack(("other",)), b"")
    with expect_fdb_error(1020):
        tr.commit().wait()
    assert fdb_.faults == 0  # not counted as injected
    with expect_fdb_error(2020):
        future.wait()
