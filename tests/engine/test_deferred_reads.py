"""The embedded engine makes a transaction's point reads together: ``get`` returns at once,
and the first value looked at reads every key asked for and not yet read, in one query,
as a cluster serves reads issued together in one round trip.  Each still reads the store
as of the transaction's snapshot and sees the transaction's writes made before it, not
after."""

from __future__ import annotations

import sqlite3

import pytest

from jobs.engine import FDBError, keyvalues
from jobs.engine.embedded import EmbeddedDatabase

ONE = (1).to_bytes(8, "little")


@pytest.fixture
def db(tmp_path):
    with EmbeddedDatabase(str(tmp_path / "store.sqlite")) as db:
        tr = db.create_transaction()
        for i in range(10):
            tr.set(b"k%d" % i, b"v%d" % i)
        tr.set(b"n", ONE)
        tr.commit().wait()
        yield db


def _selects(tr) -> list[str]:
    """The SELECT statements the transaction's snapshot connection runs from now on."""
    statements: list[str] = []
    tr.get_read_version().wait()  # (opens the snapshot's connection)
    tr._conn.set_trace_callback(statements.append)
    return statements


def test_reads_asked_together_are_made_in_one_query(db):
    tr = db.create_transaction()
    statements = _selects(tr)
    futures = [tr.get(b"k%d" % i) for i in range(10)] + [tr.get(b"absent")]
    assert statements == []  # nothing read yet
    assert [f.wait() for f in futures[:10]] == [b"v%d" % i for i in range(10)]
    assert not futures[10].present()
    assert len(statements) == 1  # one statement, naming every key asked for
    assert all(f"x'{key.hex()}'" in statements[0] for key in [b"k%d" % i for i in range(10)] + [b"absent"])
    assert tr.get(b"k3").wait() == b"v3" and len(statements) == 1  # read before: no query


@pytest.mark.parametrize("absent", [1, 7, 23, 590])
def test_reads_of_any_number_of_keys_find_what_is_stored(db, absent):
    """Few keys are read by a compound of point reads, many by IN lists of 500 at most
    (``keyvalues.stored_values``): both find exactly the stored keys."""
    tr = db.create_transaction()
    keys = [b"k%d" % i for i in range(10)] + [b"none%d" % i for i in range(absent)]
    values = [f.wait().value for f in [tr.get(key) for key in keys]]
    assert values == [b"v%d" % i for i in range(10)] + [None] * absent


def test_reads_of_any_number_of_keys_run_a_few_statements(tmp_path):
    """However many keys are read, a few distinct statements run (IN lists padded to a
    multiple of 32 keys): each is compiled and kept in every connection's cache, and one
    per number of keys filled the caches with statements of up to 500 parameters."""
    conn = sqlite3.connect(str(tmp_path / "kv.sqlite"))
    conn.execute("CREATE TABLE kv (k BLOB PRIMARY KEY, v BLOB) WITHOUT ROWID")
    stored = [b"k%04d" % i for i in range(700)]
    conn.executemany("INSERT INTO kv VALUES (?, ?)", [(key, key[::-1]) for key in stored])
    texts = set()

    class Recording:
        def execute(self, sql, params):
            texts.add(sql)
            return conn.execute(sql, params)

    for n in range(1201):
        keys = stored[:(n + 1) // 2] + [b"none%d" % i for i in range(n // 2)]
        assert keyvalues.stored_values(Recording(), keys) == {key: key[::-1] for key in stored[:(n + 1) // 2]}
    assert len(texts) <= keyvalues._UNION_MAX + len(keyvalues._IN_SIZES) == 47


def test_a_read_sees_the_writes_made_before_it_not_after(db):
    tr = db.create_transaction()
    tr.add(b"n", ONE)
    before_set = tr.get(b"k1")
    counted = tr.get(b"n")  # the store's 1, plus this transaction's add
    tr.set(b"k1", b"new")
    tr.add(b"n", ONE)
    assert before_set.wait() == b"v1"
    assert int.from_bytes(counted.wait(), "little") == 2
    assert tr.get(b"k1").wait() == b"new"
    assert int.from_bytes(tr.get(b"n").wait(), "little") == 3


def test_reads_not_looked_at_before_commit_keep_their_values(db):
    tr = db.create_transaction()
    future = tr.get(b"k2")
    tr.set(b"k2", b"changed")
    tr.commit().wait()
    assert future.wait() == b"v2"


def test_reads_of_an_attempt_that_is_retried_keep_their_values(db):
    tr = db.create_transaction()
    future = tr.get(b"k4")
    tr.on_error(FDBError(1020)).wait()
    assert future.wait() == b"v4"
    assert tr.get(b"k5").wait() == b"v5"


def test_a_read_still_conflicts_when_asked_for(db):
    """The read conflict is recorded by ``get``, whether or not its value is looked at."""
    tr = db.create_transaction()
    tr.get(b"k6")
    tr.set(b"out", b"x")
    other = db.create_transaction()
    other.set(b"k6", b"w")
    other.commit().wait()
    with pytest.raises(FDBError) as raised:
        tr.commit().wait()
    assert raised.value.code == 1020
