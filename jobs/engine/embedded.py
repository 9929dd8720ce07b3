"""The embedded engine: FoundationDB's transaction semantics on one SQLite file (WAL).

How FDB's guarantees are obtained (see DESIGN.md, "Embedded engine"):

* **Read version / snapshot**: a transaction's reads all come from one SQLite read
  transaction opened at its first read; its read version is the store's commit counter seen
  in that snapshot.
* **Optimistic conflicts**: reads record conflict ranges (a point read ``[k, k+\\0)``, a
  range read the span it really scanned).  Writes are buffered in the transaction (and
  visible to its own reads).  At commit, under the store's single write lock, the read
  ranges are compared with the write ranges of every transaction committed after the read
  version (table ``commits``); any overlap is error 1020 and nothing is written.
* **Versionstamps**: the commit counter (8 bytes, big-endian) plus batch order 0 (2 bytes),
  so stamps increase with commit order.
* **Lifetime**: a transaction older than 5 s gets 1007, as do read versions older than the
  pruned part of ``commits`` (which keeps ~10 s of history).
* **Watches**: a per-database thread, woken at once by local commits and, for other
  processes' commits, by inotify on the store's log (``doorbell.py``), else by polling
  SQLite's ``data_version`` while any watch is armed.

Its parts: ``atomic.py`` (atomic operations), ``ranges.py`` (conflict-range arithmetic),
``options.py`` (``tr.options``), ``watches.py`` (the watch thread), ``checkpoints.py``
(WAL checkpoints), ``limits.py`` (FoundationDB's limits); this module holds the
transaction and the store file.

Several OS processes share the file: writers serialise on an ``flock`` (woken by the kernel,
unlike SQLite's sleeping busy handler) and then ``BEGIN IMMEDIATE``; WAL keeps readers
unblocked, and a killed process leaves the last committed state (SQLite's recovery).
"""

from __future__ import annotations

import fcntl
import marshal
import os
import random
import shutil
import sqlite3
import tempfile
import threading
import time
import weakref

from . import errors as E
from .atomic import ATOMIC_OPS
from .checkpoints import Checkpointer
from .errors import FDBError, StoreFileError
from .fdbapi import KeySelector, KeyValue
from .futures import Future, RangeResult, Value
from .limits import KEY_SIZE_LIMIT, TRANSACTION_SIZE_LIMIT, VALUE_SIZE_LIMIT
from .options import TransactionOptions
from .ranges import (
    apply_stamp, check_stamp_param, in_ranges, merge_ranges, overlaps, overlaps_spans, stamped_key_span, subtract,
)
from .watches import UNKNOWN as _UNKNOWN
from .watches import Watches

FORMAT_NAME = "fdb-jobs-embedded"
FORMAT_VERSION = 1

TRANSACTION_LIFETIME = 5.0  # seconds; read at run time so tests may shorten it

HISTORY_SECONDS = 10.0  # how long commit write ranges are kept for conflict checks
PRUNE_EVERY = 256  # commits between prunes of that history
PRUNE_SCAN = 4 * PRUNE_EVERY  # oldest history entries a prune looks at

# on_error backoff, FoundationDB client defaults.
INITIAL_BACKOFF = 0.01
MAX_BACKOFF = 1.0

_SCHEMA = """
CREATE TABLE IF NOT EXISTS kv (k BLOB PRIMARY KEY, v BLOB NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS state (id INTEGER PRIMARY KEY CHECK (id = 0),
                                  version INTEGER NOT NULL, pruned INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS commits (version INTEGER PRIMARY KEY, ts REAL NOT NULL,
                                    ranges BLOB NOT NULL);
"""


def _key(key) -> bytes:
    if type(key) is bytes:
        return key
    if isinstance(key, (bytearray, memoryview)):
        return bytes(key)
    to_key = getattr(key, "as_foundationdb_key", None)
    if to_key is not None:
        return to_key()
    raise TypeError(f"keys must be bytes, not {type(key).__name__}")


def _value(value) -> bytes:
    if type(value) is bytes:
        return value
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    to_value = getattr(value, "as_foundationdb_value", None)
    if to_value is not None:
        return to_value()
    raise TypeError(f"values must be bytes, not {type(value).__name__}")


def _check_write_key(key: bytes) -> None:
    if len(key) > KEY_SIZE_LIMIT:
        raise FDBError(E.KEY_TOO_LARGE, f"{len(key)} bytes > {KEY_SIZE_LIMIT}")
    if key[:1] == b"\xff":
        raise FDBError(E.KEY_OUTSIDE_LEGAL_RANGE, "keys starting with 0xFF are reserved")


def _check_value(value: bytes) -> None:
    if len(value) > VALUE_SIZE_LIMIT:
        raise FDBError(E.VALUE_TOO_LARGE, f"{len(value)} bytes > {VALUE_SIZE_LIMIT}")


# Write-buffer entry tags (what the transaction's own reads see for a key).
_SET, _CLEAR, _ATOMIC, _UNREADABLE = 0, 1, 2, 3


_PUT = "INSERT OR REPLACE INTO kv (k, v) VALUES (?, ?)"
_DELETE = "DELETE FROM kv WHERE k = ?"


class Transaction:
    """One FoundationDB-style transaction on the embedded store.  Not thread-safe."""

    def __init__(self, db: "EmbeddedDatabase"):
        self.db = db
        self.options = TransactionOptions(self)
        self.snapshot = _Snapshot(self)
        self._ref = weakref.ref(self)  # what this transaction's read results hold (see futures._Bound)
        self._backoff = INITIAL_BACKOFF
        self._retries = 0
        self._created = time.monotonic()
        self._conn = None
        self._reset_options()
        self._reset_state()

    def _reset_options(self) -> None:
        """Options as a new transaction has them (``reset()`` clears them, as FDB's does;
        ``on_error`` keeps them)."""
        self._retry_limit: int | None = None
        self._timeout: float | None = None
        self._size_limit = TRANSACTION_SIZE_LIMIT
        self._ryw = True  # reads see this transaction's writes (read_your_writes_disable)
        self._snapshot_ryw = True  # ... snapshot reads too (snapshot_ryw_disable)

    # --- state -------------------------------------------------------------------------

    def _reset_state(self) -> None:
        self._release_conn()
        self._rv: int | None = None
        self._rv_time = 0.0
        # key -> (tag, payload): what this transaction's reads see for keys it wrote.
        self._writes: dict[bytes, tuple] = {}
        self._cleared: list[tuple[bytes, bytes]] = []  # ranges cleared by this transaction
        self._log: list[tuple] = []  # mutations in call order, replayed at commit
        self._reads: list[tuple[bytes, bytes]] = []  # read conflict ranges
        self._extra_writes: list[tuple[bytes, bytes]] = []  # explicit write conflict ranges
        self._size = 0
        self._stamp_future: Future | None = None
        # watches of this attempt: [key, baseline (value seen when it was set), future]
        self._watches: list[list] = []
        self._unreadable: list[tuple[bytes, bytes]] = []  # spans of versionstamped keys (1036)
        self._no_conflict: set[int] = set()  # log entries with no write conflict range
        self._next_no_conflict = False
        self._committed_version = -1
        self._cancelled = False
        self._committed = False
        self._failed = False  # the last commit failed: unusable until on_error() or reset()

    def _release_conn(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            self.db._put_conn(conn, rollback=True)

    def __del__(self):
        try:
            self._cancel_watches()
            self._release_conn()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    def _check_usable(self) -> None:
        if self._cancelled:
            raise FDBError(E.TRANSACTION_CANCELLED)
        if self._failed:
            raise FDBError(E.USED_DURING_COMMIT, "the last commit failed: call on_error() or reset() first")
        if self._committed:
            raise FDBError(E.USED_DURING_COMMIT, "transaction already committed; reset() it")
        if self._timeout is not None and time.monotonic() - self._created > self._timeout:
            raise FDBError(E.TRANSACTION_TIMED_OUT)

    def _read_conn(self):
        """The connection holding this transaction's read snapshot (opened on first use)."""
        self._check_usable()
        conn = self._conn
        if conn is None:
            conn = self.db._get_conn()
            try:
                conn.execute("BEGIN")
                self._rv = conn.execute("SELECT version FROM state").fetchone()[0]
            except BaseException:
                self.db._put_conn(conn, rollback=True)
                raise
            self._conn = conn
            self._rv_time = time.monotonic()
        elif time.monotonic() - self._rv_time > TRANSACTION_LIFETIME:
            raise FDBError(E.TRANSACTION_TOO_OLD)
        return conn

    # --- reads -------------------------------------------------------------------------

    def get_read_version(self) -> Future:
        self._read_conn()
        return Future.ready(self._rv)

    def _sees_own_writes(self, snapshot: bool) -> bool:
        return self._ryw and (self._snapshot_ryw or not snapshot)

    def _get(self, key, snapshot: bool) -> Value:
        key = _key(key)
        if key[:1] == b"\xff":
            raise FDBError(E.KEY_OUTSIDE_LEGAL_RANGE)
        if self._unreadable and in_ranges(key, self._unreadable):
            self._check_usable()
            raise FDBError(E.ACCESSED_UNREADABLE, "key may be one written with a versionstamp in this transaction")
        entry = self._writes.get(key) if self._sees_own_writes(snapshot) else None
        if entry is not None and entry[0] != _ATOMIC:
            self._check_usable()
            if entry[0] == _UNREADABLE:
                raise FDBError(E.ACCESSED_UNREADABLE, "key was written with a versionstamp in this transaction")
            return Value(entry[1] if entry[0] == _SET else None, self._ref)
        if entry is None and self._cleared and self._sees_own_writes(snapshot) and in_ranges(key, self._cleared):
            self._check_usable()
            return Value(None, self._ref)
        row = self._read_conn().execute("SELECT v FROM kv WHERE k = ?", (key,)).fetchone()
        if not snapshot:
            self._reads.append((key, key + b"\x00"))
        value = row[0] if row else None
        if entry is not None:  # atomic ops on an unknown base: resolve against the store
            for op, param in entry[1]:
                value = ATOMIC_OPS[op](value, param)
        return Value(value, self._ref)

    def get(self, key) -> Value:
        return self._get(key, False)

    def __getitem__(self, key):
        if isinstance(key, slice):
            return self.get_range(key.start or b"", key.stop or b"\xff")
        return self.get(key)

    def _scan(self, begin: bytes, end: bytes, reverse: bool, ryw: bool = True):
        """Rows of this transaction's view of ``[begin, end)`` in order, lazily (without
        its own writes when ``ryw`` is false)."""
        conn = self._read_conn()
        order = "DESC" if reverse else "ASC"
        cursor = conn.execute(
            f"SELECT k, v FROM kv WHERE k >= ? AND k < ? ORDER BY k {order}", (begin, end)
        )
        if not ryw:
            try:
                yield from cursor
            finally:
                cursor.close()
            return
        own = sorted((k for k in self._writes if begin <= k < end), reverse=reverse)
        writes, cleared = self._writes, self._cleared
        i = 0
        try:
            for k, v in cursor:
                while i < len(own) and (own[i] > k if reverse else own[i] < k):
                    yield from self._own_row(own[i], None)
                    i += 1
                if i < len(own) and own[i] == k:
                    i += 1
                    yield from self._own_row(k, v)
                elif k not in writes and not (cleared and in_ranges(k, cleared)):
                    yield k, v
            while i < len(own):
                yield from self._own_row(own[i], None)
                i += 1
        finally:
            cursor.close()

    def _own_row(self, key: bytes, stored: bytes | None):
        tag, payload = self._writes[key]
        if tag == _SET:
            yield key, payload
        elif tag == _ATOMIC:
            value = None if in_ranges(key, self._cleared) else stored
            for op, param in payload:
                value = ATOMIC_OPS[op](value, param)
            if value is not None:
                yield key, value
        elif tag == _UNREADABLE:
            raise FDBError(1036, "range includes a key written with a versionstamp")

    def _resolve(self, sel, snapshot: bool) -> bytes:
        """The key a key selector points at, in this transaction's view."""
        if not isinstance(sel, KeySelector) and not hasattr(sel, "or_equal"):
            return _key(sel)
        key, or_equal, offset = _key(sel.key), sel.or_equal, sel.offset
        if offset >= 1:  # the offset-th key at or after the pivot
            pivot = key + b"\x00" if or_equal else key
            n, found = offset, b"\xff"
            for k, _v in self._scan(pivot, b"\xff", False):
                n -= 1
                if n == 0:
                    found = k
                    break
            if not snapshot:
                self._reads.append((pivot, found + b"\x00" if found != b"\xff" else b"\xff"))
            return found
        # the (1 - offset)-th key before the pivot
        pivot = key + b"\x00" if or_equal else key
        pivot = min(pivot, b"\xff")
        n, found = 1 - offset, b""
        for k, _v in self._scan(b"", pivot, True):
            n -= 1
            if n == 0:
                found = k
                break
        if not snapshot:
            self._reads.append((found, pivot))
        return found

    def _get_key(self, selector, snapshot: bool) -> Value:
        return Value(self._resolve(selector, snapshot), self._ref)

    def get_key(self, selector) -> Value:
        return self._get_key(selector, False)

    def _get_range(self, begin, end, limit, reverse, snapshot) -> RangeResult:
        begin = self._resolve(begin, snapshot)
        end = self._resolve(end, snapshot)
        if end > b"\xff":
            raise FDBError(E.KEY_OUTSIDE_LEGAL_RANGE)
        limit = limit or 0
        if limit < 0:
            raise FDBError(E.INVALID_OPTION_VALUE, "limit must not be negative")
        rows: list[KeyValue] = []
        if begin >= end:
            self._check_usable()
            return RangeResult(rows, self)
        if self._unreadable and overlaps_spans(begin, end, self._unreadable):
            raise FDBError(E.ACCESSED_UNREADABLE, "range may include a key written with a versionstamp")
        ryw = self._sees_own_writes(snapshot)
        for k, v in self._scan(begin, end, reverse, ryw):
            rows.append(KeyValue(k, v))
            if len(rows) == limit:
                break
        if not snapshot:
            full = limit == 0 or len(rows) < limit
            if full:
                span = (begin, end)
            elif reverse:
                span = (rows[-1].key, end)
            else:
                span = (begin, rows[-1].key + b"\x00")
            self._reads.extend(self._not_own(*span) if ryw and (self._writes or self._cleared) else (span,))
        return RangeResult(rows, self)

    def _not_own(self, begin: bytes, end: bytes) -> list[tuple[bytes, bytes]]:
        """The parts of ``[begin, end)`` whose contents this transaction does not know from
        its own writes (cleared ranges, keys set or cleared): a range read conflicts on
        those only, as FoundationDB's does."""
        known = [(k, k + b"\x00") for k, (tag, _p) in self._writes.items() if begin <= k < end and tag <= _CLEAR]
        return subtract([(begin, end)], merge_ranges(self._cleared + known))

    def get_range(self, begin, end, limit=0, reverse=False, streaming_mode=None) -> RangeResult:
        """Rows of ``[begin, end)`` (keys or key selectors), at most ``limit`` (0: all), as
        an iterable (no ``len``: the bindings' ``FDBRange`` is lazy).

        Only the part really scanned becomes a read conflict range, less what this
        transaction's own writes already determine."""
        return self._get_range(begin, end, limit, reverse, False)

    def get_range_startswith(self, prefix, *args, **kwargs) -> RangeResult:
        prefix = _key(prefix)
        return self.get_range(prefix, _strinc_or_end(prefix), *args, **kwargs)

    # --- writes ------------------------------------------------------------------------

    def _account(self, *parts: bytes) -> None:
        self._size += sum(len(p) for p in parts) + 16

    def _log_write(self, entry: tuple) -> None:
        if self._next_no_conflict:  # (next_write_no_write_conflict_range)
            self._next_no_conflict = False
            self._no_conflict.add(len(self._log))
        self._log.append(entry)

    def _own_write_seen(self, begin: bytes, end: bytes | None, value) -> None:
        """Fire this transaction's watches on keys it changes (FoundationDB fires them
        before commit).  ``end`` None: the one key ``begin``; ``value`` _UNKNOWN: not
        known until commit."""
        for key, baseline, future in self._watches:
            inside = key == begin if end is None else begin <= key < end
            if inside and (value is _UNKNOWN or baseline is _UNKNOWN or value != baseline):
                future.set_result(None)

    def set(self, key, value) -> None:
        self._check_usable()
        key, value = _key(key), _value(value)
        _check_write_key(key)
        _check_value(value)
        self._writes[key] = (_SET, value)
        self._log_write(("set", key, value))
        self._account(key, value)
        if self._watches:
            self._own_write_seen(key, None, value)

    __setitem__ = set

    def clear(self, key) -> None:
        self._check_usable()
        key = _key(key)
        _check_write_key(key)
        self._writes[key] = (_CLEAR, None)
        self._log_write(("clear", key))
        self._account(key)
        if self._watches:
            self._own_write_seen(key, None, None)

    def clear_range(self, begin, end) -> None:
        self._check_usable()
        begin, end = _key(begin), _key(end)
        if end > b"\xff" or begin[:1] == b"\xff" and begin != b"\xff":
            raise FDBError(E.KEY_OUTSIDE_LEGAL_RANGE)
        if begin > end:
            raise FDBError(E.INVERTED_RANGE)
        if begin == end:
            return
        for k in [k for k in self._writes if begin <= k < end]:
            del self._writes[k]
        self._cleared = merge_ranges(self._cleared + [(begin, end)])
        self._log_write(("clear_range", begin, end))
        self._account(begin, end)
        if self._watches:
            self._own_write_seen(begin, end, None)

    def clear_range_startswith(self, prefix) -> None:
        prefix = _key(prefix)
        self.clear_range(prefix, _strinc_or_end(prefix))

    def __delitem__(self, key) -> None:
        if isinstance(key, slice):
            self.clear_range(key.start or b"", key.stop or b"\xff")
        else:
            self.clear(key)

    def _atomic(self, op: str, key, param) -> None:
        self._check_usable()
        key, param = _key(key), _value(param)
        _check_write_key(key)
        _check_value(param)
        entry = self._writes.get(key)
        fn = ATOMIC_OPS[op]
        if entry is None and in_ranges(key, self._cleared):
            entry = (_CLEAR, None)
        if entry is None:
            self._writes[key] = (_ATOMIC, [(op, param)])
        elif entry[0] == _ATOMIC:
            entry[1].append((op, param))
        elif entry[0] == _UNREADABLE:
            pass  # still unreadable until commit
        else:  # the base is known to this transaction: resolve now
            value = fn(entry[1], param)
            self._writes[key] = (_SET, value) if value is not None else (_CLEAR, None)
        self._log_write(("atomic", op, key, param))
        self._account(key, param)
        if self._watches:
            self._own_write_seen(key, None, _UNKNOWN)

    def add(self, key, param) -> None:
        self._atomic("add", key, param)

    def max(self, key, param) -> None:
        self._atomic("max", key, param)

    def min(self, key, param) -> None:
        self._atomic("min", key, param)

    def bit_and(self, key, param) -> None:
        self._atomic("bit_and", key, param)

    def bit_or(self, key, param) -> None:
        self._atomic("bit_or", key, param)

    def bit_xor(self, key, param) -> None:
        self._atomic("bit_xor", key, param)

    def byte_max(self, key, param) -> None:
        self._atomic("byte_max", key, param)

    def byte_min(self, key, param) -> None:
        self._atomic("byte_min", key, param)

    def append_if_fits(self, key, param) -> None:
        self._atomic("append_if_fits", key, param)

    def compare_and_clear(self, key, param) -> None:
        self._atomic("compare_and_clear", key, param)

    def set_versionstamped_key(self, key, value) -> None:
        """Set a key whose 10 bytes at the offset in the key's last 4 bytes (little-endian)
        are replaced at commit by the transaction's versionstamp."""
        self._check_usable()
        key, value = _key(key), _value(value)
        check_stamp_param(key)
        _check_write_key(key[:-4])
        _check_value(value)
        self._unreadable.append(stamped_key_span(key, self._rv or 0))
        self._log_write(("stamp_key", key, value))
        self._account(key, value)

    def set_versionstamped_value(self, key, value) -> None:
        """Set ``key`` to ``value`` with its 10 bytes at the offset in the value's last 4
        bytes replaced at commit by the versionstamp.  Unreadable until then."""
        self._check_usable()
        key, value = _key(key), _value(value)
        _check_write_key(key)
        check_stamp_param(value)
        _check_value(value[:-4])
        self._writes[key] = (_UNREADABLE, None)
        self._log_write(("stamp_value", key, value))
        self._account(key, value)
        if self._watches:
            self._own_write_seen(key, None, _UNKNOWN)

    def get_versionstamp(self) -> Future:
        """Future of the 10-byte versionstamp of this transaction's commit."""
        self._check_usable()
        if self._stamp_future is None:
            self._stamp_future = Future()
        return self._stamp_future

    # --- conflict ranges ---------------------------------------------------------------

    def add_read_conflict_range(self, begin, end) -> None:
        self._check_usable()
        begin, end = _key(begin), _key(end)
        if begin < end:
            self._read_conn()  # a read conflict needs a read version to be checked against
            self._reads.append((begin, end))

    def add_read_conflict_key(self, key) -> None:
        key = _key(key)
        self.add_read_conflict_range(key, key + b"\x00")

    def add_write_conflict_range(self, begin, end) -> None:
        self._check_usable()
        begin, end = _key(begin), _key(end)
        if begin < end:
            self._extra_writes.append((begin, end))

    def add_write_conflict_key(self, key) -> None:
        key = _key(key)
        self.add_write_conflict_range(key, key + b"\x00")

    # --- watches -----------------------------------------------------------------------

    def watch(self, key) -> Future:
        """Future that becomes ready when ``key``'s value changes from what this transaction
        sees now.  As FoundationDB's: a watch is a read (a read conflict on ``key``); this
        transaction's own later writes to ``key`` fire it at once; other transactions'
        changes fire it only once this one has committed.  It may fire late; re-read after
        it does."""
        self._check_usable()
        key = _key(key)
        if key[:1] == b"\xff":
            raise FDBError(E.KEY_OUTSIDE_LEGAL_RANGE)
        if not self._ryw:
            raise FDBError(E.WATCHES_DISABLED)
        entry = self._writes.get(key)
        if entry is not None:  # (tags: set, clear; atomic and versionstamped: not known yet)
            baseline = entry[1] if entry[0] <= _CLEAR else _UNKNOWN
        elif self._cleared and in_ranges(key, self._cleared):
            baseline = None
        else:
            row = self._read_conn().execute("SELECT v FROM kv WHERE k = ?", (key,)).fetchone()
            baseline = row[0] if row else None
        self._read_conn()
        self._reads.append((key, key + b"\x00"))
        future = Future()
        self._watches.append([key, baseline, future])
        return future

    # --- commit ------------------------------------------------------------------------

    def commit(self) -> Future:
        """Commit; raises FDBError 1020 on a conflict (nothing written), 1007 when too old.
        After a failed commit the transaction refuses use (2017) until ``on_error`` or
        ``reset``; its versionstamp future fails with 2020 and its watches with the error."""
        self._check_usable()
        try:
            if not self._log and not self._extra_writes:
                self._committed_version = -1  # read-only: nothing to check, as in FDB
            else:
                self._commit_writes()
        except BaseException as exc:
            error = exc if isinstance(exc, FDBError) else FDBError(E.TRANSACTION_CANCELLED)
            self._failed = True
            if self._stamp_future is not None:
                self._stamp_future.set_error(FDBError(E.TRANSACTION_INVALID_VERSION))
            for _key, _baseline, future in self._watches:
                future.set_error(error)
            self._watches = []
            raise
        finally:
            self._release_conn()
        self._committed = True
        if self._stamp_future is not None and self._committed_version < 0:
            self._stamp_future.set_error(FDBError(E.NO_COMMIT_VERSION))
        for key, baseline, future in self._watches:
            if not future.is_ready():  # (fired by this transaction's own writes)
                self.db._watches.add(key, baseline, future)
        self._watches = []
        return Future.ready(None)

    def _commit_writes(self) -> None:
        if self._rv is not None and time.monotonic() - self._rv_time > TRANSACTION_LIFETIME:
            raise FDBError(E.TRANSACTION_TOO_OLD)
        if self._size + sum(len(b) + len(e) for b, e in self._reads) > self._size_limit:
            raise FDBError(E.TRANSACTION_TOO_LARGE)
        reads = self._reads
        if self._conn is not None:  # end the read snapshot; conflicts are checked below
            self._conn.execute("COMMIT")
            conn = self._conn
        else:
            conn = self._conn = self.db._get_conn()
        with self.db._write_lock():
            conn.execute("BEGIN IMMEDIATE")
            try:
                version, pruned = conn.execute("SELECT version, pruned FROM state").fetchone()
                if reads and self._rv is not None and version > self._rv:
                    if self._rv < pruned:
                        raise FDBError(E.TRANSACTION_TOO_OLD)
                    self._check_conflicts(conn, reads)
                version += 1
                stamp = version.to_bytes(8, "big") + b"\x00\x00"
                written = self._apply(conn, stamp)
                now = time.time()
                conn.execute(
                    "INSERT INTO commits (version, ts, ranges) VALUES (?, ?, ?)",
                    (version, now, marshal.dumps(merge_ranges(written + self._extra_writes))),
                )
                if version % PRUNE_EVERY == 0:
                    pruned = self.db._prune(conn, now, pruned)
                conn.execute("UPDATE state SET version = ?, pruned = ?", (version, pruned))
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        self._committed_version = version
        if self._stamp_future is not None:
            self._stamp_future.set_result(stamp)
        self.db._watches.poke()
        self.db._checkpointer.committed()

    def _check_conflicts(self, conn, reads) -> None:
        merged = merge_ranges(reads)
        begins = [b for b, _e in merged]
        for (blob,) in conn.execute("SELECT ranges FROM commits WHERE version > ?", (self._rv,)):
            if overlaps(merged, begins, marshal.loads(blob)):
                raise FDBError(E.NOT_COMMITTED)

    def _apply(self, conn, stamp: bytes) -> list[tuple[bytes, bytes]]:
        """Replay the mutation log inside the commit; returns the write conflict ranges
        (less those of writes made under next_write_no_write_conflict_range).  Runs of
        plain writes go to SQLite in one ``executemany`` each (in log order, so the last
        write of a key wins)."""
        written: list[tuple[bytes, bytes]] = []
        puts: list[tuple[bytes, bytes]] = []
        deletes: list[tuple[bytes]] = []
        skip = self._no_conflict

        def flush() -> None:
            if puts:
                conn.executemany(_PUT, puts)
                puts.clear()
            if deletes:
                conn.executemany(_DELETE, deletes)
                deletes.clear()

        for i, m in enumerate(self._log):
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
                else:  # atomic
                    _op, op, key, param = m
                    row = conn.execute("SELECT v FROM kv WHERE k = ?", (key,)).fetchone()
                    value = ATOMIC_OPS[op](row[0] if row else None, param)
                    if value is None:
                        conn.execute(_DELETE, (key,))
                    else:
                        conn.execute(_PUT, (key, value))
                    span = (key, key + b"\x00")
            if not skip or i not in skip:
                written.append(span)
        flush()
        return written

    def get_committed_version(self) -> int:
        return self._committed_version

    def get_approximate_size(self) -> Future:
        return Future.ready(self._size)

    # --- retry loop support ------------------------------------------------------------

    def on_error(self, error) -> Future:
        """For a retryable error (FoundationDB's predicate: ``errors.RETRYABLE``): back off,
        reset (options are kept), return a ready future.  Anything else (or past the retry
        limit) is raised again."""
        code = error if isinstance(error, int) else E.error_code(error)
        if code not in E.RETRYABLE:
            if isinstance(error, BaseException):
                raise error
            raise FDBError(code)
        if self._retry_limit is not None and self._retries >= self._retry_limit:
            raise error if isinstance(error, BaseException) else FDBError(code)
        self._retries += 1
        delay = random.uniform(0, self._backoff)
        self._backoff = min(self._backoff * 2, MAX_BACKOFF)
        self._cancel_watches()
        self._reset_state()
        if delay:
            time.sleep(delay)
        return Future.ready(None)

    def reset(self) -> None:
        """Forget everything, options included (as FoundationDB's ``reset``); the next
        operation starts a new transaction."""
        self._cancel_watches()
        self._reset_state()
        self._reset_options()
        self._backoff = INITIAL_BACKOFF
        self._retries = 0
        self._created = time.monotonic()

    def cancel(self) -> None:
        self._cancel_watches()
        self._release_conn()
        self._cancelled = True

    def close(self) -> None:
        """Release the store connection now (a dropped transaction does so when collected)."""
        self._cancel_watches()
        self._release_conn()

    def _cancel_watches(self) -> None:
        for _key, _baseline, future in self._watches:
            future.set_error(FDBError(E.TRANSACTION_CANCELLED))
        self._watches = []


def _strinc_or_end(prefix: bytes) -> bytes:
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return b"\xff"
    return stripped[:-1] + bytes([stripped[-1] + 1])


class _Snapshot:
    """``tr.snapshot``: the same reads, adding no read conflict ranges."""

    def __init__(self, tr: Transaction):
        self._tr = weakref.proxy(tr)  # no cycle: a dropped transaction is destroyed at once
        self.snapshot = self

    def get(self, key) -> Value:
        return self._tr._get(key, True)

    def __getitem__(self, key):
        if isinstance(key, slice):
            return self.get_range(key.start or b"", key.stop or b"\xff")
        return self.get(key)

    def get_key(self, selector) -> Value:
        return self._tr._get_key(selector, True)

    def get_range(self, begin, end, limit=0, reverse=False, streaming_mode=None):
        return self._tr._get_range(begin, end, limit, reverse, True)

    def get_range_startswith(self, prefix, *args, **kwargs):
        prefix = _key(prefix)
        return self.get_range(prefix, _strinc_or_end(prefix), *args, **kwargs)

    def get_read_version(self) -> Future:
        return self._tr.get_read_version()


class EmbeddedDatabase:
    """A store file opened by this process.  Thread-safe; share one per process.

    ``path``: the SQLite file (created with ``create=True`` when missing; its directory
    must exist).  ``memory=True``: a private store in a temporary directory (in RAM under
    /dev/shm where available), deleted by :meth:`close`.  ``sync="full"`` makes every
    commit durable against power loss, not only against process crashes."""

    def __init__(self, path=None, *, memory: bool = False, create: bool = True, sync: str = "normal"):
        self._tmpdir = None
        if memory:
            base = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
            self._tmpdir = tempfile.mkdtemp(prefix="jobs-memory-", dir=base)
            path = os.path.join(self._tmpdir, "store.sqlite")
        if path is None:
            raise ValueError("EmbeddedDatabase needs a path (or memory=True)")
        if sync not in ("normal", "full"):
            raise ValueError(f"sync must be 'normal' or 'full', not {sync!r}")
        self.path = os.fspath(path)
        self.memory = memory
        self._sync = sync.upper()
        directory = os.path.dirname(os.path.abspath(self.path))
        if not os.path.isdir(directory):
            raise StoreFileError(f"cannot open store {self.path!r}: directory {directory!r} does not exist")
        if not create and not os.path.exists(self.path):
            raise StoreFileError(f"store file {self.path!r} does not exist")
        self._pid = os.getpid()
        self._pool: list[sqlite3.Connection] = []
        self._pool_lock = threading.Lock()
        self._thread_lock = threading.Lock()
        self._lock_fd = None
        self._closed = False
        self._watches = Watches(self)
        self._checkpointer = Checkpointer(self)
        self._init_store()

    def __repr__(self) -> str:
        return f"EmbeddedDatabase({'memory' if self.memory else self.path!r})"

    # --- connections -------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30)
            conn.execute(f"PRAGMA synchronous = {self._sync}")
            conn.execute("PRAGMA busy_timeout = 30000")
            conn.execute("PRAGMA cache_size = -16000")
            conn.execute(f"PRAGMA wal_autocheckpoint = {Checkpointer.SAFETY_PAGES}")
        except sqlite3.DatabaseError as exc:
            raise StoreFileError(f"cannot open store {self.path!r}: {exc}") from exc
        return conn

    def _after_fork(self) -> None:
        # SQLite connections and flock descriptions must not be shared with a parent.
        self._pid = os.getpid()
        self._pool = []
        self._lock_fd = None
        self._watches = Watches(self)
        self._checkpointer = Checkpointer(self)

    def _get_conn(self) -> sqlite3.Connection:
        if self._closed:
            raise FDBError(E.OPERATION_CANCELLED, "database is closed")
        if os.getpid() != self._pid:
            self._after_fork()
        with self._pool_lock:
            if self._pool:
                return self._pool.pop()
        return self._connect()

    def _put_conn(self, conn: sqlite3.Connection, rollback: bool) -> None:
        if rollback and conn.in_transaction:
            conn.execute("ROLLBACK")
        if os.getpid() != self._pid or self._closed:
            return
        with self._pool_lock:
            if len(self._pool) < 16:
                self._pool.append(conn)
                return
        conn.close()

    def _write_lock(self):
        return _WriteLock(self)

    # --- store file --------------------------------------------------------------------

    def _init_store(self) -> None:
        conn = self._connect()
        try:
            self._refuse_foreign(conn)  # before the lock file, the WAL mode or a table is made
            with self._write_lock():
                try:
                    conn.execute("PRAGMA journal_mode = WAL")
                    conn.executescript(_SCHEMA)
                    conn.execute("BEGIN IMMEDIATE")
                    meta = dict(conn.execute("SELECT name, value FROM meta"))
                    if not meta:
                        if conn.execute("SELECT 1 FROM kv LIMIT 1").fetchone():
                            raise StoreFileError(f"{self.path!r} holds data but no store format")
                        conn.executemany(
                            "INSERT INTO meta (name, value) VALUES (?, ?)",
                            [("format", FORMAT_NAME), ("format_version", FORMAT_VERSION)],
                        )
                        conn.execute("INSERT INTO state (id, version, pruned) VALUES (0, 0, 0)")
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
        except sqlite3.DatabaseError as exc:
            raise StoreFileError(
                f"{self.path!r} is not a usable job store ({exc}); point the store URL at "
                "another file or remove this one"
            ) from exc
        finally:
            conn.close()
        if meta and meta.get("format") != FORMAT_NAME:
            raise StoreFileError(f"{self.path!r} is an SQLite file but not a job store")
        if meta and int(meta.get("format_version", 0)) > FORMAT_VERSION:
            raise StoreFileError(
                f"{self.path!r} was written by a newer release (format "
                f"{meta['format_version']} > {FORMAT_VERSION}); upgrade this package"
            )

    def _refuse_foreign(self, conn) -> None:
        """StoreFileError when the file is another application's SQLite database: it has
        tables a store has not, or a ``meta`` table naming another format.  (An empty file,
        or one with only a store's tables, is a new or half-created store.)"""
        tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
                  if not name.startswith("sqlite_")}  # (SQLite's own: statistics, sequences)
        foreign = sorted(tables - {"kv", "meta", "state", "commits"})
        if not foreign and "meta" in tables:
            fmt = conn.execute("SELECT value FROM meta WHERE name = 'format'").fetchone()
            foreign = [] if fmt is None or fmt[0] == FORMAT_NAME else [f"meta (format {fmt[0]!r:.40})"]
        if foreign:
            raise StoreFileError(
                f"{self.path!r} is an SQLite database but not a job store (it has tables "
                f"{', '.join(foreign[:5])}{', ...' if len(foreign) > 5 else ''}); it was left as it was"
            )

    def _prune(self, conn, now: float, pruned: int) -> int:
        """Drop commit history older than HISTORY_SECONDS; returns the new pruned version.
        Only the oldest PRUNE_SCAN entries are looked at (this runs under the write lock:
        its cost must not grow with the commit rate); a backlog goes over several prunes."""
        row = conn.execute(
            "SELECT MAX(version) FROM (SELECT version, ts FROM commits ORDER BY version LIMIT ?) WHERE ts < ?",
            (PRUNE_SCAN, now - HISTORY_SECONDS),
        ).fetchone()
        if row[0] is None:
            return pruned
        conn.execute("DELETE FROM commits WHERE version <= ?", (row[0],))
        return max(pruned, row[0])

    # --- the database API --------------------------------------------------------------

    def create_transaction(self) -> Transaction:
        if self._closed:
            raise FDBError(E.OPERATION_CANCELLED, "database is closed")
        return Transaction(self)

    def _run(self, fn):
        from .transactional import run

        return run(self, fn)

    def get(self, key) -> bytes | None:
        return self._run(lambda tr: tr.get(key).value)  # (the bindings' Database.get: bytes or None)

    def __getitem__(self, key):
        if isinstance(key, slice):
            return self.get_range(key.start or b"", key.stop or b"\xff")
        return self.get(key)

    def set(self, key, value) -> None:
        self._run(lambda tr: tr.set(key, value))

    __setitem__ = set

    def clear(self, key) -> None:
        self._run(lambda tr: tr.clear(key))

    def __delitem__(self, key) -> None:
        if isinstance(key, slice):
            self.clear_range(key.start or b"", key.stop or b"\xff")
        else:
            self.clear(key)

    def get_range(self, begin, end, limit=0, reverse=False, streaming_mode=None) -> list[KeyValue]:
        return self._run(lambda tr: list(tr.get_range(begin, end, limit, reverse)))

    def get_range_startswith(self, prefix, *args, **kwargs) -> list[KeyValue]:
        return self._run(lambda tr: list(tr.get_range_startswith(prefix, *args, **kwargs)))

    def clear_range(self, begin, end) -> None:
        self._run(lambda tr: tr.clear_range(begin, end))

    def clear_range_startswith(self, prefix) -> None:
        self._run(lambda tr: tr.clear_range_startswith(prefix))

    def commit_version(self) -> int:
        """The store's commit counter (the last versionstamp's first 8 bytes)."""
        conn = self._get_conn()
        try:
            return conn.execute("SELECT version FROM state").fetchone()[0]
        finally:
            self._put_conn(conn, rollback=True)

    def close(self) -> None:
        """Close connections and stop the watch thread; a memory store is deleted."""
        if self._closed:
            return
        self._closed = True
        self._watches.close()
        self._checkpointer.close()
        with self._pool_lock:
            pool, self._pool = self._pool, []
        for conn in pool:
            conn.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
        if self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)

    def __enter__(self) -> "EmbeddedDatabase":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _WriteLock:
    """The store's single writer lock: a thread lock inside the process, ``flock`` on
    ``<store>-lock`` across processes (released by the kernel if the process dies)."""

    __slots__ = ("_db",)

    def __init__(self, db: EmbeddedDatabase):
        self._db = db

    def __enter__(self):
        db = self._db
        db._thread_lock.acquire()
        try:
            if db._lock_fd is None or os.getpid() != db._pid:
                if os.getpid() != db._pid:
                    db._after_fork()
                db._lock_fd = os.open(db.path + "-lock", os.O_RDWR | os.O_CREAT, 0o644)
            fcntl.flock(db._lock_fd, fcntl.LOCK_EX)
        except BaseException:
            db._thread_lock.release()
            raise
        return self

    def __exit__(self, *exc):
        try:
            fcntl.flock(self._db._lock_fd, fcntl.LOCK_UN)
        finally:
            self._db._thread_lock.release()
