"""The embedded engine's commit, under the store's write lock: the conflict check of a
transaction's reads against the writes committed since its read version (``history.py``),
and the replay of its mutation log into SQLite."""

from __future__ import annotations

import sqlite3
import time
from bisect import bisect_left

from .atomic import ATOMIC_OPS, KEEPS_A_VALUE
from .history import CEILING_STEP
from .ranges import apply_stamp, merge_ranges

VERSIONS_PER_SECOND = 1_000_000  # FoundationDB's nominal version rate

_PUT = "INSERT OR REPLACE INTO kv (k, v) VALUES (?, ?)"
_UPSERT_ATOMIC = ("INSERT INTO kv (k, v) VALUES (?, fdb_atomic(?, NULL, ?)) "
                  "ON CONFLICT (k) DO UPDATE SET v = fdb_atomic(?, v, ?)")
_DELETE = "DELETE FROM kv WHERE k = ?"
_UPSERT_ADD = "INSERT INTO kv (k, v) VALUES (?, ?) ON CONFLICT (k) DO UPDATE SET v = fdb_atomic('add', v, excluded.v)"


def apply_log(conn, log: list, stamp: bytes) -> None:
    """Replay the mutation log into SQLite.  A key's last write wins, so the sets and
    clears are reduced to each key's final value, applied at the end in one
    ``executemany`` for the puts and one for the deletes (a batch of jobs that clears one
    key and sets another for each job makes two statements, not two per job).  What
    cannot wait is applied in log order before them: a range clear (dropping the final
    values it covers), an atomic operation on a key the log has not written yet; an
    atomic operation on a key it has is worked out on that value; adds to a key nothing
    else touches are summed and applied once (:func:`_apply_sums`)."""
    final: dict[bytes, bytes | None] = {}  # key -> its value after the log (None: cleared)
    summed = _summable_adds(log, stamp) if len(log) > 1 else {}  # key -> [sum, length]
    cleared = False  # (whether final holds a None)
    for m in log:
        kind = m[0]
        if kind == "set":
            final[m[1]] = m[2]
        elif kind == "clear":
            final[m[1]] = None
            cleared = True
        elif kind == "stamp_key":
            final[apply_stamp(m[1], stamp)] = m[2]
        elif kind == "stamp_value":
            final[m[1]] = apply_stamp(m[2], stamp)
        elif kind == "clear_range":
            begin, end = m[1], m[2]
            for key in [key for key in final if begin <= key < end]:
                del final[key]
            conn.execute("DELETE FROM kv WHERE k >= ? AND k < ?", (begin, end))
        elif m[1] == "add" and m[2] in summed:
            summed[m[2]][0] += int.from_bytes(m[3], "little")
        elif m[2] in final:
            final[m[2]] = ATOMIC_OPS[m[1]](final[m[2]], m[3])
            cleared = cleared or final[m[2]] is None
        else:
            _apply_atomic(conn, m)
    puts = list(final.items())
    if cleared:
        puts = [(key, value) for key, value in puts if value is not None]
        _execute(conn, _DELETE, [(key,) for key, value in final.items() if value is None])
    if puts:
        _execute(conn, _PUT, puts)
    if summed:
        _apply_sums(conn, summed)


def write_ranges(log: list, no_conflict: set, extra_writes: list) -> tuple[list[tuple[bytes, bytes]], list[bytes]]:
    """A commit's write conflict ranges as far as they do not depend on its version (worked
    out before the write lock is taken), sorted and disjoint: the key or range of each
    mutation in ``log`` but those made under next_write_no_write_conflict_range
    (``no_conflict``: their indexes), and ``extra_writes``; and the keys of its
    versionstamped-key writes (:func:`with_stamped` places them once the version is
    known).  Keys written are one range each (the ranges of two neighbouring keys touch,
    which a conflict check takes as it takes one range): merged only with ranges."""
    if no_conflict:
        log = [m for i, m in enumerate(log) if i not in no_conflict]
    elif len(log) == 1 and log[0][0] == "set" and not extra_writes:  # (one key set: at once)
        return [(log[0][1], log[0][1] + b"\x00")], []
    points = {m[1] for m in log if m[0] == "set"}  # (the commonest, in one pass)
    spans, stamped = [], []
    for m in [m for m in log if m[0] != "set"]:
        kind = m[0]
        if kind == "clear_range":
            spans.append((m[1], m[2]))
        elif kind == "stamp_key":
            stamped.append(m[1])
        else:
            points.add(m[2] if kind == "atomic" else m[1])
    ranges = [(key, key + b"\x00") for key in sorted(points)]
    if spans or extra_writes:
        return merge_ranges(ranges + spans + extra_writes), stamped
    return ranges, stamped


def with_stamped(ranges: list[tuple[bytes, bytes]], stamped: list[bytes], stamp: bytes) -> list[tuple[bytes, bytes]]:
    """``ranges`` (:func:`write_ranges`) with the ``stamped`` keys' ranges, their
    versionstamp ``stamp`` filled in (under the write lock: the version is known)."""
    if not stamped:
        return ranges
    out = list(ranges)
    for template in stamped:
        key = apply_stamp(template, stamp)
        i = bisect_left(out, (key,))  # (the first range that begins at the key or after it)
        if (i < len(out) and out[i][0] == key) or (i and out[i - 1][1] > key):
            continue  # within a range already
        out.insert(i, (key, key + b"\x00"))
    return out


def _execute(conn, sql: str, rows: list) -> None:
    """``sql`` once per row: ``execute`` for one row (``executemany`` costs more there)."""
    if len(rows) == 1:
        conn.execute(sql, rows[0])
    else:
        conn.executemany(sql, rows)


def _apply_sums(conn, summed: dict[bytes, list]) -> None:
    """Apply the summed adds: one UPSERT for all, a new key taking the sum and a stored
    one adding it (``fdb_atomic``): one statement where reading the stored values and
    writing them took two (the Python callback per key costs less than the second)."""
    _execute(conn, _UPSERT_ADD, [(key, (total % (1 << (8 * n))).to_bytes(n, "little"))
                                 for key, (total, n) in summed.items()])


def _apply_atomic(conn, m: tuple) -> None:
    """One atomic operation ``("atomic", op, key, param)`` on the stored value: one UPSERT
    when it always leaves a value, else read and written."""
    _atomic, op, key, param = m
    if op in KEEPS_A_VALUE:
        conn.execute(_UPSERT_ATOMIC, (key, op, param, op, param))
    else:
        row = conn.execute("SELECT v FROM kv WHERE k = ?", (key,)).fetchone()
        value = ATOMIC_OPS[op](row[0] if row else None, param)
        if value is None:
            conn.execute(_DELETE, (key,))
        else:
            conn.execute(_PUT, (key, value))


def _summable_adds(log: list, stamp: bytes) -> dict[bytes, list]:
    """The keys whose only mutations in ``log`` are atomic adds with one parameter length:
    adds commute, so their sum is applied once (a group commit adds to the same counters
    once per job), all such keys together (:func:`_apply_sums`).  key -> [0, length]."""
    adds: dict[bytes, int] = {}  # key -> the length of its adds' parameters
    other: set[bytes] = set()
    for m in log:
        if m[0] == "atomic" and m[1] == "add":
            if adds.setdefault(m[2], len(m[3])) != len(m[3]):
                other.add(m[2])
    if not adds:
        return {}
    ranges = []
    for m in log:  # (again: the keys that something other than an add writes)
        kind = m[0]
        if kind == "set" or kind == "clear":
            if m[1] in adds:
                other.add(m[1])
        elif kind == "clear_range":
            ranges.append((m[1], m[2]))
        elif kind == "atomic":
            if m[1] != "add":
                other.add(m[2])
        else:
            other.add(apply_stamp(m[1], stamp) if kind == "stamp_key" else m[1])
    return {key: [0, n] for key, n in adds.items()
            if key not in other and not any(b <= key < e for b, e in ranges)}


def commit_log(db, conn, read_version: int | None, reads, log: list, no_conflict: set, extra_writes) -> tuple[int, bytes]:
    """Commit a transaction's mutation ``log`` on ``conn``, under the store's write lock:
    1007 if its read version is older than the history kept, 1020 if its ``reads`` overlap
    a later commit's writes, else its write ranges are recorded in the history
    (``history.py``) and the log applied.  Returns the new commit version and its 10-byte
    versionstamp (the version, big-endian, then batch order 0).

    ``conn`` may still hold the transaction's read snapshot (at ``read_version``): when no
    commit came since, that SQLite transaction becomes the write one (its first write takes
    SQLite's write lock), which saves ending it and beginning another; else it is ended
    here, before the log is applied in a transaction of its own.  It is ended before
    waiting for the write lock too (another commit holds it, and will make the snapshot
    stale): a snapshot held meanwhile would keep the checkpointer, which takes that lock to
    start the write-ahead log over, waiting for it (``checkpoints.py``)."""
    history = db._history
    # (before the lock, what does not need it: ending a snapshot that a commit since has
    # made stale, and the write ranges but those of versionstamped keys)
    if conn.in_transaction and not history.quiet_since(read_version):
        conn.execute("COMMIT")
    ranges, stamped = write_ranges(log, no_conflict, extra_writes)
    # (a snapshot is ended before waiting for another commit: see _WriteLock.acquire)
    writer = db._write_lock().acquire(conn.commit if conn.in_transaction else None)
    try:
        version = history.begin()
        if conn.in_transaction and version != read_version:  # (a commit since: a stale snapshot)
            conn.execute("COMMIT")
        if reads and read_version is not None and version > read_version:
            history.check(reads, read_version)
        now = time.time()
        # As FoundationDB's, versions advance about a million a second (and at least one
        # per commit), so a versionstamp tells when it was written on both engines.
        version = max(version + 1, int(now * VERSIONS_PER_SECOND))
        stamp = version.to_bytes(8, "big") + b"\x00\x00"
        history.record(version, now, with_stamped(ranges, stamped, stamp))
        if no_conflict:  # (writes the ring does not show: watches must read the store)
            history.unrecorded(version)
        ceiling = version + CEILING_STEP if version > history.ceiling else None
        try:
            _write(conn, log, stamp, ceiling, lambda: history.showing(version))
        except BaseException:
            history.settle(version)  # (it may have happened: it counts as done)
            raise
        history.settle(version, ceiling)
    finally:
        writer.release()
    return version, stamp


def _write(conn, log: list, stamp: bytes, ceiling: int | None, showing) -> None:
    """Apply ``log`` in one SQLite transaction, with the versions' new durable ``ceiling``
    if any: ``BEGIN IMMEDIATE``, its statements, ``COMMIT``; a log of one statement runs
    by itself (SQLite commits it alone), and a commit of nothing but write conflict
    ranges writes nothing.  ``showing()`` is called just before the statement that makes
    the writes visible to other snapshots (``history.unseen_since``).  On a ``conn`` in a
    read snapshot of the current version (:func:`commit_log`), the statements run in that
    transaction instead; should SQLite refuse to make it a write one (busy: it never
    invokes the busy handler for that), it is ended and the log applied as above."""
    upgrade = conn.in_transaction
    if not upgrade and ceiling is None and len(log) < 2 and (not log or _one_statement(log[0])):
        if log:
            showing()
            _apply_one(conn, log[0], stamp)
        return
    if not upgrade:
        conn.execute("BEGIN IMMEDIATE")
    try:
        apply_log(conn, log, stamp)
        if ceiling is not None:
            conn.execute("UPDATE state SET version = ?", (ceiling,))
        showing()
        conn.execute("COMMIT")
    except sqlite3.OperationalError as exc:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        if not (upgrade and _busy(exc)):
            raise
        _write(conn, log, stamp, ceiling, showing)  # (not in a transaction now: its own)
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _busy(exc: sqlite3.OperationalError) -> bool:
    """SQLITE_BUSY or one of its extended codes (BUSY_SNAPSHOT: a snapshot gone stale)."""
    return (getattr(exc, "sqlite_errorcode", 0) & 0xFF) == sqlite3.SQLITE_BUSY


def _apply_one(conn, m: tuple, stamp: bytes) -> None:
    """:func:`apply_log` of the one mutation ``m`` (shorter for the commonest two)."""
    kind = m[0]
    if kind == "set":
        conn.execute(_PUT, (m[1], m[2]))
    elif kind == "clear":
        conn.execute(_DELETE, (m[1],))
    else:
        apply_log(conn, [m], stamp)


def _one_statement(m: tuple) -> bool:
    """Whether the mutation ``m`` is applied by one SQL statement (:func:`apply_log`)."""
    return m[0] != "atomic" or m[1] in KEEPS_A_VALUE
