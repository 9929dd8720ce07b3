"""Reads of the embedded engine's transactions (as the bindings' ``TransactionRead``): the
transaction's state, its read snapshot and read version, point and range reads through its
own writes (read-your-writes), key selectors, and the read conflict ranges they record."""

from __future__ import annotations

import time
import weakref

from . import errors as E
from . import limits
from .atomic import apply_ops
from .errors import FDBError
from .fdbapi import KeySelector, KeyValue
from .futures import DeferredValue, Future, RangeResult, Value
from .items import ReadItems
from .keyvalues import stored_values, strinc_or_end, to_key
from .limits import TRANSACTION_SIZE_LIMIT
from .options import TransactionOptions
from .ranges import in_ranges, merge_ranges, overlaps_spans, subtract

# Write-buffer entry tags (what the transaction's own reads see for a key).
_SET, _CLEAR, _ATOMIC, _UNREADABLE = 0, 1, 2, 3
_CLEARED = (_CLEAR, None)  # a key inside a range this transaction cleared
_MISSING = object()  # not in the read cache


_FIRST_KEY = "SELECT k FROM kv WHERE k >= ? AND k < ? ORDER BY k LIMIT 1"  # a key selector's, at offset 1
# The stored rows of a range, forward or reversed, at most LIMIT (-1: all).
_RANGE = {reverse: f"SELECT k, v FROM kv WHERE k >= ? AND k < ? ORDER BY k {'DESC' if reverse else 'ASC'} LIMIT ?"
          for reverse in (False, True)}

_PIN = "SELECT v FROM kv WHERE k = x''"  # any read of the table starts the SQLite snapshot


def _begin_snapshot(conn, db) -> int:
    """Start a read snapshot on ``conn``; its read version.

    The version is read before the snapshot starts, so every commit the snapshot lacks has
    a later version (history.py).  A commit that lands in between is in the snapshot with
    a later version too: the transaction would see state newer than its read version, and
    the conflict check would count that commit's writes against it though it read them
    (e.g. a worker accepting the job an add just committed: a conflict FoundationDB would
    not report).  So when a commit landed meanwhile, or one under way had begun its SQLite
    commit (``history.unseen_since``: one still writing cannot be in the snapshot), the
    snapshot is started again once no commit is under way (``db._commit_gate``: a wait of
    one commit, ``GATE_WAIT`` at most, not a write lock)."""
    history = db._history
    version = history.read_version()
    conn.execute("BEGIN")
    conn.execute(_PIN).fetchone()
    if history.quiet_since(version) or history.unseen_since(version):
        return version
    conn.execute("ROLLBACK")
    with db._commit_gate():
        version = history.read_version()
        conn.execute("BEGIN")
        conn.execute(_PIN).fetchone()
    return version


class TransactionRead(ReadItems):
    """The state and the reads of a transaction on the embedded store (its writes, watches
    and commit: ``transaction.Transaction``).  Not thread-safe."""

    def __init__(self, db):
        self.db = db
        self._options = self._snapshot = None  # made when first asked for (most never are)
        self._ref = weakref.ref(self)  # what this transaction's read results hold (see futures.Value)
        self._backoff = limits.INITIAL_BACKOFF
        self._retries = 0
        self._created = time.monotonic()
        self._conn = None
        self._deferred: list[DeferredValue] = []  # point reads not made yet (futures.py)
        self._reset_options()
        self._reset_state()

    @property
    def options(self) -> TransactionOptions:
        if self._options is None:
            self._options = TransactionOptions(self)
        return self._options

    @property
    def snapshot(self) -> "_Snapshot":
        if self._snapshot is None:
            self._snapshot = _Snapshot(self)
        return self._snapshot

    def _reset_options(self) -> None:
        """Options as a new transaction has them (``reset()`` clears them, as FDB's does;
        ``on_error`` keeps them)."""
        self._retry_limit: int | None = None
        self._max_backoff = limits.MAX_BACKOFF  # (max_retry_delay)
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
        # key -> value at the read version: a key read again costs no query (FoundationDB's
        # client caches reads in its read-your-writes layer the same way)
        self._cache: dict[bytes, bytes | None] = {}
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
        # used after its commit (2017): then on_error() refuses too, until reset()
        self._used_after_commit = False
        self._deferred_error: int | None = None  # a read's error its commit raises again (1036)

    def _release_conn(self) -> None:
        if self._deferred and self._conn is not None:  # (before its snapshot ends)
            try:
                self._read_deferred()
            except Exception:  # noqa: BLE001 - each read holds its error
                pass
        conn, self._conn = self._conn, None
        if conn is not None:
            self.db._put_conn(conn, rollback=True)

    def _check_usable(self) -> None:
        if self._cancelled:
            raise FDBError(E.TRANSACTION_CANCELLED)
        if self._failed or self._committed:
            self._used_after_commit = True  # (as FoundationDB: from now on only reset() revives it)
            if self._failed:
                raise FDBError(E.USED_DURING_COMMIT, "the last commit failed: call on_error() or reset() first")
            raise FDBError(E.USED_DURING_COMMIT, "transaction already committed; reset() it")
        if self._timeout is not None and time.monotonic() - self._created > self._timeout:
            raise FDBError(E.TRANSACTION_TIMED_OUT)

    def _unreadable_read(self, detail: str) -> FDBError:
        """The error of a read of what this transaction wrote with a versionstamp (1036),
        which its commit raises again, as FoundationDB's does (``on_error``/``reset`` forget it)."""
        self._deferred_error = E.ACCESSED_UNREADABLE
        return FDBError(E.ACCESSED_UNREADABLE, detail)

    def _read_conn(self):
        """The connection holding this transaction's read snapshot (opened on first use)."""
        self._check_usable()
        conn = self._conn
        if conn is None:
            conn = self.db._get_conn()
            try:
                self._rv = _begin_snapshot(conn, self.db)
            except BaseException:
                self.db._put_conn(conn, rollback=True)
                raise
            self._conn = conn
            self._rv_time = time.monotonic()
        elif time.monotonic() - self._rv_time > limits.TRANSACTION_LIFETIME:
            raise FDBError(E.TRANSACTION_TOO_OLD)
        return conn

    # --- reads -------------------------------------------------------------------------

    def get_read_version(self) -> Future:
        self._read_conn()
        return Future.ready(self._rv)

    def _sees_own_writes(self, snapshot: bool) -> bool:
        return self._ryw and (self._snapshot_ryw or not snapshot)

    def _own_entry(self, key: bytes, snapshot: bool):
        """What this transaction's own writes say of ``key`` to a read: its write-buffer
        entry (``(tag, payload)``), ``_CLEARED`` inside a range it cleared, or None (the
        store decides)."""
        if not self._sees_own_writes(snapshot):
            return None
        entry = self._writes.get(key)
        if entry is None and self._cleared and in_ranges(key, self._cleared):
            return _CLEARED
        return entry

    def _get(self, key, snapshot: bool) -> Value:
        if type(key) is not bytes:
            key = to_key(key)
        if key[:1] == b"\xff":
            raise FDBError(E.KEY_OUTSIDE_LEGAL_RANGE)
        if self._unreadable and in_ranges(key, self._unreadable):
            self._check_usable()
            raise self._unreadable_read("key may be one written with a versionstamp in this transaction")
        entry = self._own_entry(key, snapshot) if self._writes or self._cleared else None
        if entry is not None and entry[0] != _ATOMIC:
            self._check_usable()
            if entry[0] == _UNREADABLE:
                raise self._unreadable_read("key was written with a versionstamp in this transaction")
            return Value(entry[1], self._ref)  # (the payload of a clear is None)
        self._read_conn()
        if not snapshot:
            self._reads.append((key, key + b"\x00"))
        value = self._cache.get(key, _MISSING)
        if value is _MISSING:  # read with the others asked for, when one is looked at
            deferred = DeferredValue(key, None if entry is None else tuple(entry[1]), self._ref)
            self._deferred.append(deferred)
            return deferred
        if entry is not None:  # atomic ops on an unknown base: resolve against the store
            value = apply_ops(value, entry[1])
        return Value(value, self._ref)

    def _read_deferred(self) -> None:
        """Make the point reads not made yet, all in one query (``keyvalues.stored_values``)."""
        deferred, self._deferred = self._deferred, []
        if not deferred:
            return
        try:
            conn, cache = self._conn, self._cache  # (asked in time: no 1007 for a late look)
            if len(deferred) == 1:  # (the commonest case: a plain point query)
                key = deferred[0].key
                if key not in cache:
                    row = conn.execute("SELECT v FROM kv WHERE k = ?", (key,)).fetchone()
                    cache[key] = row[0] if row else None
            else:
                wanted = [key for key in dict.fromkeys(d.key for d in deferred) if key not in cache]
                found = stored_values(conn, wanted)
                for key in wanted:
                    cache[key] = found.get(key)
        except BaseException as exc:
            for d in deferred:
                d.settle(error=exc)
            raise
        for d in deferred:
            d.settle(cache[d.key])

    def get(self, key) -> Value:
        return self._get(key, False)

    def _scan(self, begin: bytes, end: bytes, reverse: bool, pending: bool = False):
        """Rows of this transaction's view of ``[begin, end)`` in order, with its own
        writes, lazily.  ``pending``: a key of an atomic op that leaves it absent is a row
        too (value None), as a range read's selector walks count it on a cluster."""
        cursor = self._read_conn().execute(_RANGE[reverse], (begin, end, -1))
        own = sorted((k for k in self._writes if begin <= k < end), reverse=reverse)
        writes, cleared = self._writes, self._cleared
        i = 0
        try:
            for k, v in cursor:
                while i < len(own) and (own[i] > k if reverse else own[i] < k):
                    yield from self._own_row(own[i], None, pending)
                    i += 1
                if i < len(own) and own[i] == k:
                    i += 1
                    yield from self._own_row(k, v, pending)
                elif k not in writes and not (cleared and in_ranges(k, cleared)):
                    yield k, v
            while i < len(own):
                yield from self._own_row(own[i], None, pending)
                i += 1
        finally:
            cursor.close()

    def _own_row(self, key: bytes, stored: bytes | None, pending: bool = False):
        tag, payload = self._writes[key]
        if tag == _SET:
            yield key, payload
        elif tag == _ATOMIC:
            value = apply_ops(None if in_ranges(key, self._cleared) else stored, payload)
            if value is not None or pending:
                yield key, value
        elif tag == _UNREADABLE:
            raise self._unreadable_read("range includes a key written with a versionstamp")

    def _resolve(self, sel, snapshot: bool, in_range: bool = False, bound: bytes | None = None,
                 floor: bytes = b"") -> bytes:
        """The key a key selector points at, in this transaction's view.

        What this transaction wrote with a versionstamp (a span of keys it cannot read
        until commit) stops a selector as FoundationDB's does: a walk back over it, or on
        past it, fails (1036); a walk forward that ends on it resolves to where it begins
        when the selector is a range read's end (``in_range``: no row of it is read), and
        fails for ``get_key`` (whose answer would be that key).  A range read's begin walks
        forward no further than its end (``bound``), and its end back no further than a
        begin given as a key (``floor``), as FoundationDB's: there the range is empty, and
        nothing past its other end is read."""
        if not isinstance(sel, KeySelector) and not hasattr(sel, "or_equal"):
            return to_key(sel)
        pivot, offset = _pivot(sel), sel.offset
        if offset == 1 and bound is None and not (self._writes or self._cleared or self._unreadable):
            # (the store's first key from the pivot, in one statement: a probe of an accept's)
            row = self._read_conn().execute(_FIRST_KEY, (pivot, b"\xff")).fetchone()
            found = b"\xff" if row is None else row[0]
            if not snapshot:
                self._reads.append((pivot, found + b"\x00" if row is not None else found))
            return found
        if offset >= 1:  # the offset-th key at or after the pivot (and before ``bound``)
            stop = b"\xff" if bound is None else bound
            unreadable = min((b for b, e in self._unreadable if e > pivot), default=None) if self._unreadable else None
            if unreadable is not None and unreadable >= stop:
                unreadable = None
            n, found = offset, stop
            for k, _v in self._scan(pivot, stop, False, in_range):
                if unreadable is not None and unreadable <= k:
                    break
                n -= 1
                if n == 0:
                    found = k
                    break
            if n and unreadable is not None:  # (the walk came to the span before its key)
                if n > 1 or not in_range:
                    raise self._unreadable_read("a key selector walked onto a key written with a versionstamp")
                found, n = unreadable, 0
            if not snapshot and pivot < found:
                self._read_over(pivot, found + b"\x00" if n == 0 and found != b"\xff" else found)
            return found
        # the (1 - offset)-th key before the pivot (and at or after ``floor``)
        pivot = min(pivot, b"\xff")
        n, found = 1 - offset, floor
        for k, _v in self._scan(floor, pivot, True, in_range):
            n -= 1
            if n == 0:
                found = k
                break
        if self._unreadable and overlaps_spans(found, pivot, self._unreadable):
            raise self._unreadable_read("a key selector walked back over a key written with a versionstamp")
        if not snapshot:
            self._read_over(found, pivot)
        return found

    def _read_over(self, begin: bytes, end: bytes) -> None:
        """A selector's walk over ``[begin, end)`` conflicts, less what this transaction's
        own writes determine (as a range read's)."""
        self._reads.extend(self._not_own(begin, end) if self._writes or self._cleared else ((begin, end),))

    def _get_key(self, selector, snapshot: bool) -> Value:
        return Value(self._resolve(selector, snapshot), self._ref)

    def get_key(self, selector) -> Value:
        return self._get_key(selector, False)

    def _get_range(self, begin, end, limit, reverse, snapshot) -> RangeResult:
        asked = begin, end = _plain(begin), _plain(end)
        # (the far end's walk, the end of a forward read, conflicts only as the range does:
        # where the read stops, or further, see _far_end)
        # the end's walk back stops at a begin given as a key, or walking on (past its pivot)
        if not hasattr(begin, "or_equal"):
            floor = begin = to_key(begin)
        else:
            floor = _pivot(begin) if begin.offset >= 1 else b""
        end = self._resolve(end, snapshot or not reverse, True, floor=floor)
        begin = self._resolve(begin, snapshot or reverse, True, end)
        if end > b"\xff":
            raise FDBError(E.KEY_OUTSIDE_LEGAL_RANGE)
        limit = limit or 0
        if limit < 0:
            raise FDBError(E.INVALID_OPTION_VALUE, "limit must not be negative")
        rows: list[KeyValue] = []
        if begin >= end:  # (empty: a far end walking towards the rows still read its way)
            self._check_usable()
            far = _far_end((begin, begin), begin, end, asked, reverse, False)
            if not snapshot and far[0] < far[1]:
                self._read_over(*far)
            return RangeResult(rows, self)
        own = self._sees_own_writes(snapshot) and self._wrote_in(begin, end)
        if own:
            for k, v in self._scan(begin, end, reverse):
                rows.append(KeyValue(k, v))
                if len(rows) == limit:
                    break
        else:  # the store's rows alone: SQLite applies the limit, and they come in one call
            found = self._read_conn().execute(_RANGE[reverse], (begin, end, limit or -1)).fetchall()
            rows = [KeyValue(k, v) for k, v in found]
        # what the read scanned: up to its last row when its limit stopped it
        if limit == 0 or len(rows) < limit:
            span = (begin, end)
        elif reverse:
            span = (rows[-1].key, end)
        else:
            span = (begin, rows[-1].key + b"\x00")
        if self._unreadable and overlaps_spans(*span, self._unreadable):  # (snapshot or not)
            raise self._unreadable_read("range may include a key written with a versionstamp")
        if not snapshot:
            span = _far_end(span, begin, end, asked, reverse, len(rows) == limit)
            self._reads.extend(self._not_own(*span) if own else (span,))
        return RangeResult(rows, self)

    def _wrote_in(self, begin: bytes, end: bytes) -> bool:
        """Whether this transaction set, cleared or changed a key of ``[begin, end)``: a range
        read elsewhere (an accept's of the queue, after the outcomes it carries wrote rows)
        is the store's rows alone."""
        if self._cleared and overlaps_spans(begin, end, self._cleared):
            return True
        return any(begin <= k < end for k in self._writes)

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
        prefix = to_key(prefix)
        return self.get_range(prefix, strinc_or_end(prefix), *args, **kwargs)


def _pivot(sel) -> bytes:
    """Where a selector's walk starts: its key, or the key just after it with ``or_equal``."""
    key = to_key(sel.key)
    return key + b"\x00" if sel.or_equal else key


def _plain(sel):
    """A range end as FoundationDB's reads it: a selector with offset 1 (the first key at
    or after its pivot) is a plain key, found by no walk."""
    return _pivot(sel) if hasattr(sel, "or_equal") and sel.offset == 1 else sel


def _far_end(span, begin: bytes, end: bytes, asked: tuple, reverse: bool, limited: bool) -> tuple[bytes, bytes]:
    """The read conflict range of a range read that scanned ``span`` (all of ``[begin,
    end)`` unless its limit stopped it), as FoundationDB's (seen on a cluster), by how
    its far end (a forward read's end, a reverse read's begin) was given:

    * a key, or a selector walking away from the rows (forward from a forward read's
      end): what it scanned, and the end's walk to its key when the read got there;
    * a selector walking towards the rows: the whole range out to where that walk began,
      whatever the limit."""
    sel = asked[0] if reverse else asked[1]
    if not hasattr(sel, "or_equal"):  # (a plain key: see _plain)
        return span
    pivot = _pivot(sel)
    if reverse:
        return (min(begin, pivot), end) if sel.offset >= 1 else span
    if sel.offset <= 0:
        return (begin, max(end, pivot))
    return span if limited or end >= b"\xff" else (begin, end + b"\x00")


class _Snapshot(ReadItems):
    """``tr.snapshot``: the same reads, adding no read conflict ranges."""

    def __init__(self, tr: TransactionRead):
        self._tr = weakref.proxy(tr)  # no cycle: a dropped transaction is destroyed at once
        self.snapshot = self

    def get(self, key) -> Value:
        return self._tr._get(key, True)

    def get_key(self, selector) -> Value:
        return self._tr._get_key(selector, True)

    def get_range(self, begin, end, limit=0, reverse=False, streaming_mode=None):
        return self._tr._get_range(begin, end, limit, reverse, True)

    def get_range_startswith(self, prefix, *args, **kwargs):
        prefix = to_key(prefix)
        return self.get_range(prefix, strinc_or_end(prefix), *args, **kwargs)

    def get_read_version(self) -> Future:
        return self._tr.get_read_version()
