"""Differential test: the same random transactions on two engines give the same results.

Each case runs one script of two interleaved transactions (reads, range reads with limits
and reverse, key selectors in ``get_key`` and as either end of a range read, snapshot
reads, sets, clears, range clears, atomic ops, read conflict keys, versionstamped keys and
the reads they make unreadable), commits them in a random order, then uses each again
(a read, ``on_error``, ``reset``, a write and a commit: what a failed or finished
transaction allows) and reads the whole key space back.  Every read's result, every
outcome (done, or its FoundationDB error code) and the final contents must be equal on
both engines.

Whenever a cluster is given (``FDB_CLUSTER_FILE``) the pair is (embedded, fdb): the
embedded engine is held to FoundationDB's behaviour.  Without one, the pair is (embedded,
memory), which only checks the harness itself.
"""

from __future__ import annotations

import os
import random

import pytest
from enginekit import rows, val

from jobs.engine import KeySelector, Subspace, Versionstamp, close, error_code, pack_with_versionstamp
from jobs.engine.urls import open_database

PREFIX = Subspace(("jobs-engine-tests", "differential"))
KEYS = [PREFIX.pack((i,)) for i in range(10)]
TOP = PREFIX.pack((999,))  # the end of the ranges read and cleared: below the fences
# Keys always there around KEYS, so that a selector a few keys off resolves inside the
# prefix (other tests' keys lie around it on a shared cluster, none in a fresh store).
FENCES = [PREFIX.pack((i,)) for i in (-3, -2, -1, 1000, 1001, 1002, 1003)]
ATOMIC = ["add", "max", "min", "bit_and", "bit_or", "bit_xor", "byte_max", "byte_min",
          "append_if_fits", "compare_and_clear"]
CASES = 600


def _value(rng) -> bytes:
    return bytes(rng.randrange(256) for _ in range(rng.randint(0, 8)))


def _op(rng) -> tuple:
    """One operation for one of the two transactions (index 0 or 1)."""
    who = rng.randrange(2)
    kind = rng.choice(["get", "get", "snap_get", "range", "range", "get_key", "set", "set", "clear",
                       "clear_range", "atomic", "atomic", "conflict_key", "stamped_key"])
    k = rng.choice(KEYS)
    if kind in ("get", "snap_get", "clear", "conflict_key"):
        return who, kind, k
    if kind == "stamped_key":  # (just after KEYS[i]: inside the ranges read)
        return who, kind, rng.randrange(len(KEYS)), _value(rng)
    if kind == "set":
        return who, kind, k, _value(rng)
    if kind == "atomic":
        return who, kind, rng.choice(ATOMIC), k, _value(rng) or b"\x01"
    if kind == "get_key":
        return who, kind, k, rng.random() < 0.5, rng.randint(-2, 3)
    lo, hi = sorted(rng.sample(range(len(KEYS) + 1), 2))
    begin = KEYS[lo]
    end = KEYS[hi] if hi < len(KEYS) else TOP
    if kind == "clear_range":
        return who, kind, begin, end
    # an end is a key, or a selector (or_equal, offset) anchored on it
    begin, end = (e if rng.random() < 0.6 else (e, rng.random() < 0.5, rng.randint(0, 2)) for e in (begin, end))
    return who, kind, begin, end, rng.choice([0, 0, 1, 2, 3]), rng.random() < 0.3, rng.random() < 0.3


AFTER = ["get", "get", "on_error", "on_error", "reset", "set", "commit", "commit"]


def _after(rng) -> list[list[tuple]]:
    """For each transaction, what is done with it once both committed (or failed)."""
    return [[(kind, rng.choice(KEYS), _value(rng)) for kind in rng.choices(AFTER, k=rng.randint(0, 5))]
            for _ in range(2)]


def script(seed: int) -> tuple[list, list[tuple], list[int], list[list[tuple]]]:
    rng = random.Random(seed)
    initial = {k: _value(rng) for k in KEYS if rng.random() < 0.6} | {k: b"fence" for k in FENCES}
    ops = [_op(rng) for _ in range(rng.randint(2, 14))]
    return list(initial.items()), ops, rng.sample([0, 1], 2), _after(rng)


def _selector_type(db):
    if type(db).__module__.startswith("fdb"):
        import fdb

        return fdb.KeySelector  # the bindings take only their own in get_range
    return KeySelector


def _unstamped(key: bytes) -> bytes:
    """``key`` with a versionstamp's 10 bytes (which differ by engine and run) blanked."""
    for k in KEYS:
        if key.startswith(k + b"\x33") and len(key) == len(k) + 13:
            return k + b"\x33<stamp>"
    return key


def _rows(result) -> list:
    return [(_unstamped(k), v) for k, v in rows(result)]


def _end(end, Sel):
    return end if isinstance(end, bytes) else Sel(*end)


def _outcome(fn):
    try:
        return ("ok", fn())
    except Exception as exc:  # noqa: BLE001 - FoundationDB errors are part of the result
        code = error_code(exc)
        if code is None:
            raise
        return ("error", code)


def _apply(tr, op, Sel):
    kind = op[1]
    if kind == "get":
        return val(tr.get(op[2]))
    if kind == "snap_get":
        return val(tr.snapshot.get(op[2]))
    if kind == "get_key":
        _who, _kind, k, or_equal, offset = op
        key = bytes(tr.get_key(Sel(k, or_equal, offset)).wait())
        return _unstamped(key) if key.startswith(PREFIX.key()) else ("outside",)  # other tests' keys may be there
    if kind == "range":
        _who, _kind, begin, end, limit, reverse, snapshot = op
        reader = tr.snapshot if snapshot else tr
        return _rows(reader.get_range(_end(begin, Sel), _end(end, Sel), limit=limit, reverse=reverse))
    if kind == "stamped_key":
        return tr.set_versionstamped_key(pack_with_versionstamp(KEYS[op[2]], (Versionstamp(),)), op[3])
    if kind == "set":
        return tr.set(op[2], op[3])
    if kind == "clear":
        return tr.clear(op[2])
    if kind == "clear_range":
        return tr.clear_range(op[2], op[3])
    if kind == "atomic":
        return getattr(tr, op[2])(op[3], op[4])
    return tr.add_read_conflict_key(op[2])


def _again(tr, kind: str, k: bytes, v: bytes):
    """One use of a transaction after its commit (``AFTER``)."""
    if kind == "get":
        return val(tr.get(k))
    if kind == "on_error":
        return tr.on_error(1020).wait() and None
    if kind == "reset":
        return tr.reset()
    if kind == "set":
        return tr.set(k, v)
    return tr.commit().wait() and None


def run_script(db, seed: int) -> list:
    initial, ops, order, after = script(seed)
    Sel = _selector_type(db)
    tr = db.create_transaction()
    r = PREFIX.range()
    tr.clear_range(r.start, r.stop)
    for k, v in initial:
        tr.set(k, v)
    tr.commit().wait()
    trs = [db.create_transaction(), db.create_transaction()]
    out = [_outcome(lambda op=op: _apply(trs[op[0]], op, Sel)) for op in ops]
    for i in order:
        out.append(("commit", i, _outcome(lambda i=i: trs[i].commit().wait() and None)))
    for i in order:
        for kind, k, v in after[i]:
            done = _outcome(lambda: _again(trs[i], kind, k, v))
            # (a write's own error may come at once or at the next use: FoundationDB allows both)
            out.append(("again", i, kind, "-" if kind == "set" else done))
    tr = db.create_transaction()
    out.append(("final", _rows(tr.get_range(r.start, r.stop))))
    return out


@pytest.fixture
def pair(tmp_path):
    cluster_file = os.environ.get("FDB_CLUSTER_FILE")
    other_url = "fdb:" + cluster_file if cluster_file else "memory:"
    dbs = (open_database("sqlite:" + str(tmp_path / "diff.sqlite")), open_database(other_url))
    yield dbs
    for db in dbs:
        tr = db.create_transaction()
        tr.clear_range(PREFIX.range().start, PREFIX.range().stop)
        tr.commit().wait()
        close(db)


def test_random_transactions_agree(pair):
    embedded, other = pair
    for seed in range(CASES):
        expected = run_script(other, seed)
        got = run_script(embedded, seed)
        assert got == expected, f"seed {seed}: {script(seed)}"
