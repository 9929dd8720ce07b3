"""Transactions of the embedded engine (as the bindings' ``Transaction``): writes buffered
in a mutation log, atomic ops, versionstamps, conflict ranges, watches, and the commit
(``commit.py`` checks conflicts and replays the log under the store's write lock)."""

from __future__ import annotations

import random
import time

from . import errors as E
from . import limits
from .atomic import ATOMIC_OPS
from .commit import commit_log
from .errors import FDBError
from .futures import Future
from .items import Items
from .keyvalues import check_value, check_write_key, stored_values, strinc_or_end, to_key, to_value
from .limits import KEY_SIZE_LIMIT, VALUE_SIZE_LIMIT
from .ranges import check_stamp_param, in_ranges, merge_ranges, stamped_key_span
from .reads import _ATOMIC, _CLEAR, _SET, _UNREADABLE, TransactionRead
from .watches import UNKNOWN as _UNKNOWN
from .watches import WatchFuture

_STORED = object()  # a watch baseline to be read from the store (_read_baselines)


_COMMITTED = Future.ready(None)  # what every commit returns (a ready future cannot change)


class Transaction(TransactionRead, Items):
    """One FoundationDB-style transaction on the embedded store.  Not thread-safe."""

    def __del__(self):
        try:
            if self._watches or self._conn is not None:
                self._cancel_watches()
                self._release_conn()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    # --- writes ------------------------------------------------------------------------

    def _log_write(self, entry: tuple) -> None:
        if self._next_no_conflict:  # (next_write_no_write_conflict_range)
            self._next_no_conflict = False
            self._no_conflict.add(len(self._log))
        self._log.append(entry)

    def _own_write_seen(self, begin: bytes, end: bytes | None, value) -> None:
        """Fire this transaction's watches on keys it changes (FoundationDB fires them
        before commit).  ``end`` None: the one key ``begin``; ``value`` _UNKNOWN: not
        known until commit."""
        self._read_baselines()
        for key, baseline, future in self._watches:
            inside = key == begin if end is None else begin <= key < end
            if inside and (value is _UNKNOWN or baseline is _UNKNOWN or value != baseline):
                future.set_result(None)

    def set(self, key, value) -> None:
        self._check_usable()
        if type(key) is not bytes:
            key = to_key(key)
        if type(value) is not bytes:
            value = to_value(value)
        # (check_write_key, check_value and _log_write inline: the commonest write)
        if len(key) > KEY_SIZE_LIMIT or key[:1] == b"\xff" or len(value) > VALUE_SIZE_LIMIT:
            check_write_key(key)
            check_value(value)
        self._writes[key] = (_SET, value)
        if self._next_no_conflict:
            self._log_write(("set", key, value))
        else:
            self._log.append(("set", key, value))
        self._size += len(key) + len(value) + 16  # (a mutation's size: its bytes, and 16 more)
        if self._watches:
            self._own_write_seen(key, None, value)


    def clear(self, key) -> None:
        self._check_usable()
        if type(key) is not bytes:
            key = to_key(key)
        check_write_key(key)
        self._writes[key] = (_CLEAR, None)
        self._log_write(("clear", key))
        self._size += len(key) + 16
        if self._watches:
            self._own_write_seen(key, None, None)

    def clear_range(self, begin, end) -> None:
        self._check_usable()
        begin, end = to_key(begin), to_key(end)
        if end > b"\xff" or begin[:1] == b"\xff" and begin != b"\xff":
            raise FDBError(E.KEY_OUTSIDE_LEGAL_RANGE)
        if begin > end:
            raise FDBError(E.INVERTED_RANGE)
        if begin == end:
            return
        for k in [k for k in self._writes if begin <= k < end]:
            del self._writes[k]
        if self._unreadable:  # (a span cleared whole is known again: empty, as FoundationDB's)
            self._unreadable = [(b, e) for b, e in self._unreadable if not (begin <= b and e <= end)]
        self._cleared = merge_ranges(self._cleared + [(begin, end)])
        self._log_write(("clear_range", begin, end))
        self._size += len(begin) + len(end) + 16
        if self._watches:
            self._own_write_seen(begin, end, None)

    def clear_range_startswith(self, prefix) -> None:
        prefix = to_key(prefix)
        self.clear_range(prefix, strinc_or_end(prefix))

    def _atomic(self, op: str, key, param) -> None:
        self._check_usable()
        if type(key) is not bytes:
            key = to_key(key)
        if type(param) is not bytes:
            param = to_value(param)
        check_write_key(key)
        check_value(param)
        entry = self._writes.get(key)
        if entry is None and self._cleared and in_ranges(key, self._cleared):
            entry = (_CLEAR, None)
        if entry is None:
            self._writes[key] = (_ATOMIC, [(op, param)])
        elif entry[0] == _ATOMIC:
            entry[1].append((op, param))
        elif entry[0] == _UNREADABLE:
            pass  # still unreadable until commit
        else:  # the base is known to this transaction: resolve now
            value = ATOMIC_OPS[op](entry[1], param)
            self._writes[key] = (_SET, value) if value is not None else (_CLEAR, None)
        self._log_write(("atomic", op, key, param))
        self._size += len(key) + len(param) + 16
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
        if type(key) is not bytes:
            key = to_key(key)
        if type(value) is not bytes:
            value = to_value(value)
        check_stamp_param(key)
        check_write_key(key[:-4])
        check_value(value)
        self._unreadable.append(stamped_key_span(key, self._rv or 0))
        self._log_write(("stamp_key", key, value))
        self._size += len(key) + len(value) + 16

    def set_versionstamped_value(self, key, value) -> None:
        """Set ``key`` to ``value`` with its 10 bytes at the offset in the value's last 4
        bytes replaced at commit by the versionstamp.  Unreadable until then."""
        self._check_usable()
        if type(key) is not bytes:
            key = to_key(key)
        if type(value) is not bytes:
            value = to_value(value)
        check_write_key(key)
        check_stamp_param(value)
        check_value(value[:-4])
        self._writes[key] = (_UNREADABLE, None)
        self._log_write(("stamp_value", key, value))
        self._size += len(key) + len(value) + 16
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
        begin, end = to_key(begin), to_key(end)
        if begin < end:
            # (no read version taken here, as FoundationDB's: a transaction that only adds
            # read conflicts gets its read version at commit, and so conflicts with nothing)
            self._reads.append((begin, end))

    def add_read_conflict_key(self, key) -> None:
        key = to_key(key)
        self.add_read_conflict_range(key, key + b"\x00")

    def add_write_conflict_range(self, begin, end) -> None:
        self._check_usable()
        begin, end = to_key(begin), to_key(end)
        if begin < end:
            self._extra_writes.append((begin, end))

    def add_write_conflict_key(self, key) -> None:
        key = to_key(key)
        self.add_write_conflict_range(key, key + b"\x00")

    # --- watches -----------------------------------------------------------------------

    def watch(self, key) -> Future:
        """Future that becomes ready when ``key``'s value changes from what this transaction
        sees now.  As FoundationDB's: a watch is a read (a read conflict on ``key``); this
        transaction's own later writes to ``key`` fire it at once; other transactions'
        changes fire it only once this one has committed.  It may fire late; re-read after
        it does."""
        self._check_usable()
        key = to_key(key)
        if key[:1] == b"\xff":
            raise FDBError(E.KEY_OUTSIDE_LEGAL_RANGE)
        if not self._ryw:
            raise FDBError(E.WATCHES_DISABLED)
        self._read_conn()
        entry = self._own_entry(key, False)
        if entry is not None:  # (tags: set, clear; atomic and versionstamped: not known yet)
            baseline = entry[1] if entry[0] <= _CLEAR else _UNKNOWN
        else:  # read with the others, in this snapshot (at commit at the latest)
            baseline = _STORED
        self._reads.append((key, key + b"\x00"))
        future = WatchFuture()
        self._watches.append([key, baseline, future])
        return future

    # --- commit ------------------------------------------------------------------------

    def commit(self) -> Future:
        """Commit; raises FDBError 1020 on a conflict (nothing written), 1007 when too old.
        After a failed commit the transaction refuses use (2017) until ``on_error`` or
        ``reset``; its versionstamp future fails with 2020 and its watches with the error.
        A transaction used after its commit (2017) is revived only by ``reset``; one whose
        read failed with 1036 fails its commit with 1036 (FoundationDB's behaviour)."""
        self._check_usable()
        try:
            if self._deferred_error is not None:
                raise FDBError(self._deferred_error, "an earlier read of this transaction failed")
            if self._deferred:  # (inside the read snapshot, which the commit ends)
                self._read_deferred()
            if self._watches:
                self._read_baselines()
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
        armed = [w for w in self._watches if not w[2].is_ready()]  # (not fired by own writes)
        if armed:
            self.db._watches.add(armed, self._rv)
        self._watches = []
        return _COMMITTED

    def _read_baselines(self) -> None:
        """The stored values of the watched keys whose baseline is not read yet: those
        this transaction read (its read cache, the same snapshot), the others in one
        statement (a waiting accept watches all its type's wake shards)."""
        cache = self._cache
        keys = [w[0] for w in self._watches if w[1] is _STORED and w[0] not in cache]
        found = stored_values(self._conn, keys) if keys else {}
        for w in self._watches:
            if w[1] is _STORED:
                w[1] = cache[w[0]] if w[0] in cache else found.get(w[0])

    def _commit_writes(self) -> None:
        if self._rv is not None and time.monotonic() - self._rv_time > limits.TRANSACTION_LIFETIME:
            raise FDBError(E.TRANSACTION_TOO_OLD)
        size = self._size + (sum(len(b) + len(e) for b, e in self._reads) if self._reads else 0)
        if size > self._size_limit:
            raise FDBError(E.TRANSACTION_TOO_LARGE)
        reads = self._reads
        conn = self._conn  # (its read snapshot, if any, goes on into commit_log)
        if conn is None:
            conn = self._conn = self.db._get_conn()
        version, stamp = commit_log(self.db, conn, self._rv, reads, self._log, self._no_conflict, self._extra_writes)
        self._committed_version = version
        if self._stamp_future is not None:
            self._stamp_future.set_result(stamp)
        self.db._watches.poke()
        self.db._checkpointer.committed(len(self._log))

    def get_committed_version(self) -> int:
        return self._committed_version

    def get_approximate_size(self) -> Future:
        return Future.ready(self._size)

    # --- retry loop support ------------------------------------------------------------

    def on_error(self, error) -> Future:
        """For a retryable error (FoundationDB's predicate: ``errors.RETRYABLE``): back off,
        reset (options are kept), return a ready future.  Anything else (or past the retry
        limit) is raised again; so is 2017 once the transaction was used after its commit
        (FoundationDB's: only ``reset`` revives it then)."""
        if self._used_after_commit:
            raise FDBError(E.USED_DURING_COMMIT, "used after its commit: reset() it")
        code = error if isinstance(error, int) else E.error_code(error)
        if code not in E.RETRYABLE:
            if isinstance(error, BaseException):
                raise error
            raise FDBError(code)
        if self._retry_limit is not None and self._retries >= self._retry_limit:
            raise error if isinstance(error, BaseException) else FDBError(code)
        self._retries += 1
        delay = random.uniform(0, self._backoff)
        self._backoff = min(self._backoff * 2, self._max_backoff)
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
        self._backoff = limits.INITIAL_BACKOFF
        self._retries = 0
        self._created = time.monotonic()

    def cancel(self) -> None:
        self._cancel_watches()
        self._release_conn()
        self._cancelled = True

    def close(self) -> None:
        """Release the store connection now (a dropped transaction does so when collected)."""
        if self._watches:
            self._cancel_watches()
        self._release_conn()

    def _cancel_watches(self) -> None:
        for _key, _baseline, future in self._watches:
            future.set_error(FDBError(E.TRANSACTION_CANCELLED))
        self._watches = []
