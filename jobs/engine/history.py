"""The commit history of an embedded store, shared by its processes in memory: the store's
commit counter and the write conflict ranges of its recent commits, in a memory-mapped
file beside the store (``<store>-hist``), as SQLite keeps its WAL index in ``-shm``.

Why not tables of the store: a row of history and a bumped counter per commit are two
more pages in the write-ahead log per commit, which made a one-write commit cost three
pages where plain SQLite writes one.  Nothing here needs to outlive the machine's
uptime: the history serves the conflict checks of transactions in flight (which die with
the machine), and the counter is kept durable by a ceiling in the store (table
``state``: no version so far exceeds it; raised, a second ahead, by the commit that
passes it), from which it restarts after a reboot.

Layout: a header page of 64-bit fields (``_F``), then a ring of records, each
``[size u32][payload length u32][version i64][commit time f64] payload [size u32]``
(padded to 32 bytes, room for a padding record's header and trailer wherever the ring
ends; version -1: a padding record that fills the ring's end so that no record straddles
it).  The payload is the commit's merged write ranges (``marshal``).

Every field and record is written under the store's write lock (``commit.py``), in an
order that leaves the file safe wherever a committer is killed: the record first, then
the head and ``pending`` (the version whose commit is under way); just before the SQLite
commit, ``showing`` (the same version: from then on a snapshot may hold it); after it,
``current``, then ``pending`` and ``showing`` cleared.  Read versions are taken without
any lock: ``current``, read *before* the reader's SQLite snapshot starts, so that every
commit missing from the snapshot has a later version and is checked (a commit that lands
between the two only makes the check stricter).  A committer killed with ``pending`` set
is settled by the next one (``begin``): its commit counts as done, which at worst checks
a commit that did not happen.  The watch thread reads recent records without the lock too
(``writes_since``: which keys changed since its last look), and trusts what it read only
if the tail had not passed it by the end of the read.
"""

from __future__ import annotations

import fcntl
import marshal
import mmap
import os
import struct

from . import errors as E
from .errors import FDBError
from .ranges import overlaps, merge_ranges

MAGIC = int.from_bytes(b"JOBSHIST", "little")
LAYOUT = 1
HEADER_SIZE = 4096
INITIAL_CAPACITY = 16 << 20  # bytes of ring (a sparse file: pages are used as it fills)
MAX_CAPACITY = 512 << 20
MAX_PAYLOAD = 1 << 20  # a commit's ranges beyond this are coarsened (conservative)
HISTORY_SECONDS = 10.0  # the ring grows rather than drop a record younger than this
CEILING_STEP = 1_000_000  # versions (a second) the durable ceiling is set ahead

# header fields, 8 bytes each, at 8 * index
_F = struct.Struct("<14Q")
(_MAGIC, _LAYOUT, _ID, _BOOT, _CURRENT, _CEILING, _PRUNED, _TAIL, _HEAD, _PENDING,
 _CAPACITY, _GROWING, _BLIND, _SHOWING) = range(14)
# _BLIND: the last version whose commit wrote keys outside its recorded ranges (writes made
# with next_write_no_write_conflict_range): a watch cannot learn its writes from the ring.
# _SHOWING: the pending version whose SQLite commit has begun: from then on a snapshot may
# hold it (see ``unseen_since``); 0 while the committer still writes.
_U64 = struct.Struct("<Q")
_HEAD_PENDING = struct.Struct("<QQ")  # (adjacent: a record's head and pending in one write)
_REC = struct.Struct("<IIqd")
_TRAILER = struct.Struct("<I")
_ALIGN = 32  # record sizes: a multiple of this, at least a record header and a trailer


def boot_id() -> int:
    """This boot of the machine (0 where unknown): a history written in another boot
    may have lost pages with the page cache, so it is not trusted."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return int(f.read().strip().replace("-", ""), 16) & (2**64 - 1)
    except (OSError, ValueError):
        return 0


def coarsen(ranges: list, limit: int) -> bytes:
    """``ranges`` (merged) as a payload of at most ``limit`` bytes: neighbouring ranges
    joined into their span, in ever larger groups (wider write ranges can only add
    conflicts, never miss one)."""
    payload, group = marshal.dumps(ranges), 1
    while len(payload) > limit and group < len(ranges):
        group *= 2
        payload = marshal.dumps([(ranges[i][0], ranges[min(i + group, len(ranges)) - 1][1])
                                 for i in range(0, len(ranges), group)])
    return payload


class History:
    """One process's view of a store's history file.  Opened under the store's write lock
    (``store.py``); ``read_version`` anywhere, everything else under that lock.

    Every process holds a shared ``flock`` on the file while it has the store open; the
    one that opens it alone (an exclusive lock granted) starts the history afresh: no
    transaction can be in flight then, and only the counter carries over."""

    def __init__(self, path: str, history_id: int, ceiling: int):
        self.path = path
        self._pid = os.getpid()
        self._ring = None
        self._cap = 0
        # header fields read by begin(), kept up to date here by who holds the write lock
        self.ceiling = self._head = self._tail = self._pruned = self._current = 0
        self._seen_ring, self._seen_cap = None, 0  # writes_since's own map of the ring
        for _attempt in range(2):
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            alone = _try_flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if not alone:
                fcntl.flock(fd, fcntl.LOCK_SH)
            valid = _valid(fd, history_id)
            if alone or valid:
                break
            os.close(fd)  # another store's history (the store file was replaced): a new one
            os.unlink(path)
        self._fd = fd
        if alone:
            self._start(history_id, ceiling, valid)
            fcntl.flock(fd, fcntl.LOCK_SH)  # (openers wait for the write lock we hold)
        self._header = mmap.mmap(fd, HEADER_SIZE)

    def _start(self, history_id: int, ceiling: int, valid: bool) -> None:
        """(Alone.)  A fresh header and an empty ring; the counter goes on from the old
        one if it is this boot's (else from the durable ceiling: past every version)."""
        size = os.fstat(self._fd).st_size
        if not valid or size < HEADER_SIZE + INITIAL_CAPACITY:
            os.ftruncate(self._fd, HEADER_SIZE + INITIAL_CAPACITY)
            size = HEADER_SIZE + INITIAL_CAPACITY
        with mmap.mmap(self._fd, HEADER_SIZE) as header:
            old = _F.unpack_from(header)
            boot = boot_id()
            if valid and boot and old[_BOOT] == boot:
                current = max(old[_CURRENT], old[_PENDING], ceiling - CEILING_STEP)
            else:
                current = ceiling
            fields = [0] * 14
            fields[_MAGIC], fields[_LAYOUT], fields[_ID], fields[_BOOT] = MAGIC, LAYOUT, history_id, boot
            fields[_CURRENT] = fields[_PRUNED] = current
            fields[_CEILING], fields[_CAPACITY] = ceiling, size - HEADER_SIZE
            _F.pack_into(header, 0, *fields)

    # --- without the lock --------------------------------------------------------------

    def read_version(self) -> int:
        """The version of the last commit known to be complete (a read version: read it
        before the snapshot starts)."""
        header = self._header
        while True:
            a = _U64.unpack_from(header, _CURRENT << 3)[0]
            if _U64.unpack_from(header, _CURRENT << 3)[0] == a:  # (no torn read)
                return a

    def quiet_since(self, version: int) -> bool:
        """No commit was settled or under way after read version ``version`` was read: a
        snapshot started since holds exactly the commits up to it.  (A committer marks
        its commit pending before it writes to SQLite, and settles it, the version first,
        after.)"""
        header = self._header
        return (_U64.unpack_from(header, _PENDING << 3)[0] == 0
                and _U64.unpack_from(header, _CURRENT << 3)[0] == version)

    def unseen_since(self, version: int) -> bool:
        """No commit was settled after read version ``version`` was read, and the one under
        way, if any, has not begun its SQLite commit (it is still writing): a snapshot
        started since holds exactly the commits up to ``version`` all the same.  In SQLite's
        write-ahead log a transaction's writes show only once its commit is written, which
        a committer marks (``showing``) before it begins; the mark is read first, so a
        commit that became visible meanwhile is seen, marked or settled."""
        header = self._header
        return (_U64.unpack_from(header, _SHOWING << 3)[0] == 0
                and _U64.unpack_from(header, _CURRENT << 3)[0] == version)

    def writes_since(self, since: int, upto: int, limit: int | None = None) -> list[list] | None:
        """The write ranges (merged, each commit's a list) of the commits of versions in
        ``(since, upto]``, read without the lock (by one thread at a time, the watch
        thread: on its own map of the ring); None when they cannot all be told: the ring no longer reaches back to
        ``since``, it grew or wrapped over them during the read, or one of them wrote keys
        it did not record (:meth:`unrecorded`); None too when they are more than ``limit``
        commits (their caller reads what it needs from the store instead, which costs less
        than decoding seconds of commits).

        Safe against committers: a record is whole before the head passes it; the tail
        only moves forward, and a record is written over only after the tail has passed
        it, so records read above the tail as it is *after* the read were intact; a grow
        changes the capacity (and marks itself growing).  Payloads are decoded only once
        so checked."""
        header = self._header
        u64 = _U64.unpack_from
        if u64(header, _BLIND << 3)[0] > since:
            return None
        cap = u64(header, _CAPACITY << 3)[0]
        if u64(header, _GROWING << 3)[0]:
            return None
        head, tail = u64(header, _HEAD << 3)[0], u64(header, _TAIL << 3)[0]
        if cap != self._seen_cap:
            if self._seen_ring is not None:
                self._seen_ring.close()
            self._seen_ring, self._seen_cap = mmap.mmap(self._fd, cap, offset=HEADER_SIZE), cap
        payloads, reached, lowest = [], False, head
        try:
            for version, payload, at in _records(self._seen_ring, cap, head, tail):
                lowest = at
                if version <= since:
                    reached = True
                    break
                if version <= upto:
                    payloads.append(payload)
                    if limit is not None and len(payloads) > limit:
                        return None
        except (ValueError, struct.error):  # (overwritten under the read, or torn)
            return None
        if (u64(header, _CAPACITY << 3)[0] != cap or u64(header, _GROWING << 3)[0]
                or u64(header, _TAIL << 3)[0] > lowest
                or (not reached and u64(header, _PRUNED << 3)[0] > since)):
            return None
        try:
            return [marshal.loads(p) for p in payloads]
        except (ValueError, EOFError, TypeError):
            return None

    def committing(self) -> bool:
        """A commit is under way (recorded, not settled yet): its version is current within
        microseconds, unless its committer died under the lock (the next commit settles it)."""
        return _U64.unpack_from(self._header, _PENDING << 3)[0] != 0

    # --- under the write lock ----------------------------------------------------------

    def begin(self) -> int:
        """First thing under the write lock: settle what a committer killed under it left
        (its pending commit counts as done; a ring it was growing is dropped) and return
        the current version.  Sets ``ceiling``."""
        f = _F.unpack_from(self._header)
        if f[_CAPACITY] != self._cap:
            self._map_ring(f[_CAPACITY])
        self.ceiling, self._head, self._tail, self._pruned = f[_CEILING], f[_HEAD], f[_TAIL], f[_PRUNED]
        current = self._current = f[_CURRENT]
        if f[_PENDING]:
            current = self._current = max(current, f[_PENDING])
            self._set(_CURRENT, current)
            self._set(_PENDING, 0)
            self._set(_SHOWING, 0)
        if f[_GROWING]:
            self._drop_all(current)
            self._set(_GROWING, 0)
        return current

    def check(self, reads: list, read_version: int) -> None:
        """FDBError 1007 if the history no longer reaches back to ``read_version``, 1020
        if ``reads`` overlap the writes of a commit after it."""
        if read_version < self._pruned:
            raise FDBError(E.TRANSACTION_TOO_OLD)
        merged = merge_ranges(reads)
        begins = [b for b, _e in merged]
        try:
            for version, payload in self._newest_first():
                if version <= read_version:
                    return
                if overlaps(merged, begins, marshal.loads(payload)):
                    raise FDBError(E.NOT_COMMITTED)
        except (ValueError, EOFError, TypeError, struct.error):  # a record is not whole
            self._drop_all(self._current)  # (nothing to check against: older reads retry)
            raise FDBError(E.TRANSACTION_TOO_OLD) from None

    def record(self, version: int, now: float, ranges: list) -> None:
        """Add the commit of ``version`` (its write ``ranges``, sorted and disjoint) and
        mark it pending: from here on it counts as committed if this process dies."""
        payload = marshal.dumps(ranges)
        limit = min(MAX_PAYLOAD, self._cap >> 3)
        if len(payload) > limit:
            payload = coarsen(ranges, limit)
        n = len(payload)
        size = (_REC.size + n + _TRAILER.size + _ALIGN - 1) & -_ALIGN
        cap, head = self._cap, self._head
        if cap - head % cap < size or cap - (head - self._tail) < size:
            self._make_room(size, now)  # (which may grow the ring)
        at = self._head % self._cap
        ring = self._ring
        _REC.pack_into(ring, at, size, n, version, now)
        ring[at + _REC.size:at + _REC.size + n] = payload
        _TRAILER.pack_into(ring, at + size - _TRAILER.size, size)
        # Then the head and pending together: the SQLite commit comes after both, so a
        # committer killed between the two writes leaves a record or a pending version of
        # a commit that did not happen, and either only makes checks stricter.
        self._head += size
        _HEAD_PENDING.pack_into(self._header, _HEAD << 3, self._head, version)

    def unrecorded(self, version: int) -> None:
        """The commit of ``version`` (recorded, not yet settled) also writes keys outside
        its recorded ranges: watches look at the store itself for commits up to it."""
        _U64.pack_into(self._header, _BLIND << 3, version)

    def showing(self, version: int) -> None:
        """The SQLite commit of ``version`` (recorded) begins: snapshots may hold it."""
        _U64.pack_into(self._header, _SHOWING << 3, version)

    def settle(self, version: int, ceiling: int | None = None) -> None:
        """After the SQLite commit of ``version`` (or its failure: it counts as done
        either way), and the durable ceiling it wrote, if any."""
        header = self._header
        _U64.pack_into(header, _CURRENT << 3, version)
        _U64.pack_into(header, _PENDING << 3, 0)
        _U64.pack_into(header, _SHOWING << 3, 0)
        if ceiling is not None:
            _U64.pack_into(header, _CEILING << 3, ceiling)

    # --- the ring ----------------------------------------------------------------------

    def _set(self, field: int, value: int) -> None:
        _U64.pack_into(self._header, field << 3, value)

    def _move(self, field: int, value: int) -> None:
        """Set the head, the tail or the pruned version, here and in the file."""
        _U64.pack_into(self._header, field << 3, value)
        if field == _HEAD:
            self._head = value
        elif field == _TAIL:
            self._tail = value
        else:
            self._pruned = value

    def _map_ring(self, capacity: int) -> None:
        if self._ring is not None:
            self._ring.close()
        self._ring = mmap.mmap(self._fd, capacity, offset=HEADER_SIZE)
        self._cap = capacity

    def _newest_first(self):
        """``(version, payload)`` of the records, newest first (padding skipped)."""
        for version, payload, _at in _records(self._ring, self._cap, self._head, self._tail):
            yield version, payload

    def _make_room(self, size: int, now: float) -> None:
        """Free ``size`` bytes at the head (dropping the oldest records, or growing the
        ring rather than drop one younger than HISTORY_SECONDS)."""
        while True:
            head, tail, cap = self._head, self._tail, self._cap
            pad = cap - head % cap if cap - head % cap < size else 0
            if cap - (head - tail) >= pad + size:
                break
            _size, _length, version, ts = _REC.unpack_from(self._ring, tail % cap)
            if version >= 0 and ts > now - HISTORY_SECONDS and cap < MAX_CAPACITY:
                self._grow(min(2 * cap, MAX_CAPACITY))
                continue
            if version > self._pruned:  # (before the tail moves: safe if killed between)
                self._move(_PRUNED, version)
            self._move(_TAIL, tail + _size)
        if pad:
            _REC.pack_into(self._ring, head % cap, pad, 0, -1, 0.0)
            _TRAILER.pack_into(self._ring, head % cap + pad - _TRAILER.size, pad)
            self._move(_HEAD, head + pad)

    def _grow(self, capacity: int) -> None:
        """Copy the live records to the start of a larger ring.  A committer killed
        meanwhile leaves ``growing`` set, and the next drops the whole history."""
        self._set(_GROWING, 1)
        head, tail, cap = self._head, self._tail, self._cap
        a, b = tail % cap, head % cap
        live = self._ring[a:b] if a < b or head == tail else self._ring[a:] + self._ring[:b]
        os.ftruncate(self._fd, HEADER_SIZE + capacity)
        self._map_ring(capacity)
        self._ring[:len(live)] = live
        self._move(_TAIL, 0)
        self._move(_HEAD, len(live))
        self._set(_CAPACITY, capacity)
        self._set(_GROWING, 0)

    def _drop_all(self, current: int) -> None:
        """Forget every record: transactions that read before ``current`` get 1007."""
        self._move(_PRUNED, current)
        self._move(_TAIL, self._head)

    def after_fork(self) -> None:
        """In a forked child: a shared lock of its own (the inherited one is the parent's,
        which the parent releases when it closes the store)."""
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            return  # (the file is gone: the parent's lock stands for both)
        fcntl.flock(fd, fcntl.LOCK_SH)
        os.close(self._fd)
        self._fd, self._pid = fd, os.getpid()

    def close(self) -> None:
        if self._seen_ring is not None:
            self._seen_ring.close()
            self._seen_ring = None
        # Unlocked explicitly: the maps hold the file open (the header stays mapped until
        # collected, as readers may hold it), and so would its lock.
        if os.getpid() == self._pid:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        if self._ring is not None:
            self._ring.close()
            self._ring = None
        os.close(self._fd)


def _records(ring, cap: int, head: int, tail: int):
    """``(version, payload bytes, position)`` of the records of ``ring`` (of ``cap`` bytes)
    between positions ``tail`` and ``head``, newest first, padding skipped; ValueError on
    a record that is not whole."""
    pos = head
    while pos > tail:
        end = (pos - 1) % cap + 1
        size = _TRAILER.unpack_from(ring, end - _TRAILER.size)[0]
        if size < _ALIGN or size % _ALIGN or size > pos - tail or size > end:
            raise ValueError(f"history record of size {size} at {pos}")
        pos -= size
        at = end - size
        _size, length, version, _ts = _REC.unpack_from(ring, at)
        if length > size - _REC.size - _TRAILER.size:
            raise ValueError(f"history record of size {size} at {pos} holds {length} bytes")
        if version >= 0:
            yield version, ring[at + _REC.size:at + _REC.size + length], pos


def _try_flock(fd: int, how: int) -> bool:
    try:
        fcntl.flock(fd, how)
        return True
    except BlockingIOError:
        return False


def _valid(fd: int, history_id: int) -> bool:
    """Whether the file holds a history of this layout for the store ``history_id``."""
    if os.fstat(fd).st_size < HEADER_SIZE:
        return False
    fields = _F.unpack(os.pread(fd, _F.size, 0))
    return fields[_MAGIC] == MAGIC and fields[_LAYOUT] == LAYOUT and fields[_ID] == history_id
