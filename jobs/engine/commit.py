"""The embedded engine's commit, under the store's write lock: the conflict check of a
transaction's reads against the writes committed since its read version, and the replay
of its mutation log into SQLite."""

from __future__ import annotations

import marshal
import random
import time

from . import errors as E
from .atomic import ATOMIC_OPS, KEEPS_A_VALUE
from .errors import FDBError
from .ranges import apply_stamp, merge_ranges, overlaps

HISTORY_SECONDS = 10.0  # how long commit write ranges are kept for conflict checks
PRUNE_EVERY = 256  # commits between prunes of that history (on average: one commit in this many prunes)
VERSIONS_PER_SECOND = 1_000_000  # FoundationDB's nominal version rate
PRUNE_SCAN = 4 * PRUNE_EVERY  # oldest history entries a prune looks at

_PUT = "INSERT OR REPLACE INTO kv (k, v) VALUES (?, ?)"
_UPSERT_ATOMIC = ("INSERT INTO kv (k, v) VALUES (?, fdb_atomic(?, NULL, ?)) "
                  "ON CONFLICT (k) DO UPDATE SET v = fdb_atomic(?, v, ?)")
_DELETE = "DELETE FROM kv WHERE k = ?"


def check_conflicts(conn, reads, read_version: int) -> None:
    """FDBError 1020 when ``reads`` (read conflict ranges) overlap the writes of a
    transaction committed after ``read_version`` (table ``commits``)."""
    merged = merge_ranges(reads)
    begins = [b for b, _e in merged]
    for (blob,) in conn.execute("SELECT ranges FROM commits WHERE version > ?", (read_version,)):
        if overlaps(merged, begins, marshal.loads(blob)):
            raise FDBError(E.NOT_COMMITTED)


def apply_log(conn, log: list, no_conflict: set, stamp: bytes) -> list[tuple[bytes, bytes]]:
    """Replay the mutation log inside the commit; returns the write conflict ranges
    (less those of writes made under next_write_no_write_conflict_range).  Runs of
    plain writes go to SQLite in one ``executemany`` each (in log order, so the last
    write of a key wins)."""
    written: list[tuple[bytes, bytes]] = []
    puts: list[tuple[bytes, bytes]] = []
    deletes: list[tuple[bytes]] = []
    skip = no_conflict
    # key -> [sum, length]: applied once, at the end (one mutation has nothing to sum)
    summed = _summable_adds(log, stamp) if len(log) > 1 else {}

    def flush() -> None:
        if puts:
            _execute(conn, _PUT, puts)
            puts.clear()
        if deletes:
            _execute(conn, _DELETE, deletes)
            deletes.clear()

    for i, m in enumerate(log):
        kind = m[0]
        if kind == "set" or kind == "stamp_key" or kind == "stamp_value":
            if deletes:
                flush()
            if kind == "set":
                key, value = m[1], m[2]
            elif kind == "stamp_key":
                key, value = apply_stamp(m[1], stamp), m[2]
            else:
                key, value = m[1], apply_stamp(m[2], stamp)
            puts.append((key, value))
            span = (key, key + b"\x00")
        elif kind == "clear":
            if puts:
                flush()
            deletes.append((m[1],))
            span = (m[1], m[1] + b"\x00")
        else:
            flush()
            if kind == "clear_range":
                conn.execute("DELETE FROM kv WHERE k >= ? AND k < ?", (m[1], m[2]))
                span = (m[1], m[2])
            else:
                span = _apply_atomic(conn, m, summed)
        if not skip or i not in skip:
            written.append(span)
    flush()
    if summed:
        _apply_sums(conn, summed)
    return written


def _execute(conn, sql: str, rows: list) -> None:
    """``sql`` once per row: ``execute`` for one row (``executemany`` costs more there)."""
    if len(rows) == 1:
        conn.execute(sql, rows[0])
    else:
        conn.executemany(sql, rows)


_IN_CHUNK = 500  # keys per SELECT ... IN (...) (under SQLite's limit of bound parameters)


def _apply_sums(conn, summed: dict[bytes, list]) -> None:
    """Apply the summed adds: the keys' values read in one statement per _IN_CHUNK keys and
    written in one ``executemany`` (instead of a statement per key, each calling back into
    Python for the arithmetic)."""
    keys = list(summed)
    found: dict[bytes, bytes] = {}
    for start in range(0, len(keys), _IN_CHUNK):
        chunk = keys[start:start + _IN_CHUNK]
        found.update(conn.execute(f"SELECT k, v FROM kv WHERE k IN ({','.join('?' * len(chunk))})", chunk))
    conn.executemany(_PUT, [(key, ATOMIC_OPS["add"](found.get(key), (total % (1 << (8 * n))).to_bytes(n, "little")))
                            for key, (total, n) in summed.items()])


def _apply_atomic(conn, m: tuple, summed: dict) -> tuple[bytes, bytes]:
    """One atomic operation ``("atomic", op, key, param)``: added to the key's sum when its
    adds are summed, one UPSERT when it always leaves a value, else read and written."""
    _atomic, op, key, param = m
    if op == "add" and key in summed:  # summed with the key's other adds
        summed[key][0] += int.from_bytes(param, "little")
    elif op in KEEPS_A_VALUE:
        conn.execute(_UPSERT_ATOMIC, (key, op, param, op, param))
    else:
        row = conn.execute("SELECT v FROM kv WHERE k = ?", (key,)).fetchone()
        value = ATOMIC_OPS[op](row[0] if row else None, param)
        if value is None:
            conn.execute(_DELETE, (key,))
        else:
            conn.execute(_PUT, (key, value))
    return key, key + b"\x00"


def _summable_adds(log: list, stamp: bytes) -> dict[bytes, list]:
    """The keys whose only mutations in ``log`` are atomic adds with one parameter length:
    adds commute, so their sum is applied once (a group commit adds to the same counters
    once per job), all such keys together (:func:`_apply_sums`).  key -> [0, length]."""
    adds: dict[bytes, list] = {}
    other: set[bytes] = set()
    ranges = []
    for m in log:
        kind = m[0]
        if kind == "atomic" and m[1] == "add":
            entry = adds.setdefault(m[2], [0, len(m[3]), 0])
            if entry[1] != len(m[3]):
                other.add(m[2])
            entry[2] += 1
        elif kind == "clear_range":
            ranges.append((m[1], m[2]))
        else:
            other.add(apply_stamp(m[1], stamp) if kind == "stamp_key" else m[1] if kind != "atomic" else m[2])
    return {key: [0, n] for key, (_sum, n, count) in adds.items()
            if key not in other and not any(b <= key < e for b, e in ranges)}


def commit_log(db, conn, read_version: int | None, reads, log: list, no_conflict: set, extra_writes) -> tuple[int, bytes]:
    """Commit a transaction's mutation ``log`` on ``conn``, under the store's write lock:
    1007 if its read version is older than the history kept, 1020 if its ``reads`` overlap
    a later commit's writes, else the log is applied, its write ranges recorded in the
    history (table ``commits``) and the commit counter bumped.  Returns the new commit
    version and its 10-byte versionstamp (the version, big-endian, then batch order 0)."""
    with db._write_lock():
        conn.execute("BEGIN IMMEDIATE")
        try:
            version, pruned = conn.execute("SELECT version, pruned FROM state").fetchone()
            if reads and read_version is not None and version > read_version:
                if read_version < pruned:
                    raise FDBError(E.TRANSACTION_TOO_OLD)
                check_conflicts(conn, reads, read_version)
            now = time.time()
            # As FoundationDB's, versions advance about a million a second (and at least one
            # per commit), so a versionstamp tells when it was written on both engines.
            version = max(version + 1, int(now * VERSIONS_PER_SECOND))
            stamp = version.to_bytes(8, "big") + b"\x00\x00"
            written = apply_log(conn, log, no_conflict, stamp)
            conn.execute(
                "INSERT INTO commits (version, ts, ranges) VALUES (?, ?, ?)",
                (version, now, marshal.dumps(merge_ranges(written + extra_writes))),
            )
            if random.randrange(PRUNE_EVERY) == 0:
                pruned = prune_history(conn, now, pruned)
            conn.execute("UPDATE state SET version = ?, pruned = ?", (version, pruned))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    return version, stamp


def prune_history(conn, now: float, pruned: int) -> int:
    """Drop commit history older than HISTORY_SECONDS; returns the new pruned version.
    Only the oldest PRUNE_SCAN entries are looked at (this runs under the write lock: its
    cost must not grow with the commit rate); a backlog goes over several prunes."""
    row = conn.execute(
        "SELECT MAX(version) FROM (SELECT version, ts FROM commits ORDER BY version LIMIT ?) WHERE ts < ?",
        (PRUNE_SCAN, now - HISTORY_SECONDS),
    ).fetchone()
    if row[0] is None:
        return pruned
    conn.execute("DELETE FROM commits WHERE version <= ?", (row[0],))
    return max(pruned, row[0])

