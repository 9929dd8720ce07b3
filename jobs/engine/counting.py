"""Counted work: what every committed transaction read, wrote and conflicted on, over any
engine, for the capacity model (``bench/capacity.py``)::

    db = CountingDatabase(jobs.open("embedded:/tmp/x.db"))
    with db.label("add"):
        jobs.add(db, "resize", "img-1")
    [tally] = db.take()          # tally.label == "add", tally.writes, tally.bytes_written ...

A :class:`Tally` is kept for each transaction that commits, with the label of the block
(``label``) its commit ran in; an attempt that fails and is retried counts only as a retry
of the one that commits (``Tally.attempts``).  What is counted follows FoundationDB's
accounting:

* keys read: one per ``get``/``get_key`` (``point_reads``), one per row a range read returned
  (rows read, not asked for; ``range_reads``), snapshot reads included; bytes read: the keys
  and values returned;
* read conflict ranges: one per non-snapshot read (a range read's ends where FoundationDB
  puts them: past its last row when its limit stopped it), plus ``add_read_conflict_*``;
* writes: one per mutation (``set``, ``clear``, each atomic op, a ``clear_range`` being one
  range); bytes written: its key and value (or range ends, or operand); a write conflict
  range for each, plus ``add_write_conflict_*``.  A versionstamped key is a key no other
  transaction writes: it is kept as ``Write.key`` with its stamp's place unfilled and
  ``unique=True``.  ``Tally.writes`` has every call; ``Tally.mutations()`` what a cluster
  applies (a key written twice in one transaction, once).

Key selectors count by their anchor key (what they resolve to is not known here).
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading

from .fdbapi import strinc
from .futures import value_of
from .items import Items, ReadItems
from .wrapping import MUTATORS, WrappedDatabase, delegate



@dataclasses.dataclass(frozen=True)
class Write:
    op: str  # the mutation: set, clear, clear_range, add, set_versionstamped_key, ...
    key: bytes  # for clear_range its begin; for a versionstamped key the key unstamped
    end: bytes | None = None  # clear_range's end
    unique: bool = False  # a versionstamped key: a key of its own


@dataclasses.dataclass
class Tally:
    """What one committed transaction did (see the module doc)."""

    label: str | None = None
    attempts: int = 1  # 1 + retries before the commit that counted
    keys_read: int = 0
    bytes_read: int = 0
    point_reads: list = dataclasses.field(default_factory=list)  # keys got (conflicting or not)
    range_reads: list = dataclasses.field(default_factory=list)  # (begin, end, rows returned)
    read_conflicts: list = dataclasses.field(default_factory=list)  # (begin, end)
    writes: list = dataclasses.field(default_factory=list)  # Write
    bytes_written: int = 0
    write_conflicts: list = dataclasses.field(default_factory=list)  # (begin, end)

    @property
    def read_only(self) -> bool:
        return not self.writes and not self.write_conflicts

    def mutations(self) -> list[Write]:
        """The writes the cluster applies: a key written more than once in the transaction
        counts once (the client's write cache merges them before it commits); each
        versionstamped key and each cleared range counts."""
        seen: set[bytes] = set()
        out = []
        for w in self.writes:
            if w.unique or w.end is not None or w.key not in seen:
                seen.add(w.key)
                out.append(w)
        return out


class CountingDatabase(WrappedDatabase):
    """Wraps a database (embedded or ``fdb.Database``; also a ``FaultInjectingDatabase``);
    keeps a :class:`Tally` of each transaction committed through it.  Thread-safe: each
    thread has its own ``label``."""

    def __init__(self, db):
        super().__init__(db)
        self._lock = threading.Lock()
        self._tallies: list[Tally] = []
        self._local = threading.local()

    def create_transaction(self) -> "CountingTransaction":
        return CountingTransaction(self, self.db.create_transaction())

    @contextlib.contextmanager
    def label(self, name: str | None):
        """Label the transactions this thread commits in the block (restored after)."""
        before = getattr(self._local, "label", None)
        self._local.label = name
        try:
            yield self
        finally:
            self._local.label = before

    def take(self) -> list[Tally]:
        """The tallies kept since the last ``take``, oldest first; forgets them."""
        with self._lock:
            tallies, self._tallies = self._tallies, []
        return tallies

    def _label(self) -> str | None:
        return getattr(self._local, "label", None)

    def _keep(self, tally: Tally) -> None:
        with self._lock:
            self._tallies.append(tally)

    def __repr__(self) -> str:
        return f"CountingDatabase({self.db!r})"


class _CountedReads(ReadItems):
    """The reads of a transaction (``conflicts=True``) or of its snapshot, counted into the
    transaction's current tally."""

    def __init__(self, owner: "CountingTransaction", reads, conflicts: bool):
        self._owner, self._reads, self._conflicts = owner, reads, conflicts

    def get(self, key):
        tally = self._owner.tally
        tally.keys_read += 1
        tally.point_reads.append(key)
        if self._conflicts:
            tally.read_conflicts.append((key, key + b"\x00"))
        future = self._reads.get(key)
        future.on_ready(lambda f: self._got(tally, key, f))
        return future

    @staticmethod
    def _got(tally: Tally, key: bytes, future) -> None:
        try:
            value = value_of(future)
        except Exception:  # noqa: BLE001 - the reader sees the error; nothing was read
            return
        if value is not None:
            tally.bytes_read += len(key) + len(value)

    def get_key(self, selector):
        tally = self._owner.tally
        tally.keys_read += 1
        key = _anchor(selector)
        tally.point_reads.append(key)
        if self._conflicts:
            tally.read_conflicts.append((key, key + b"\x00"))
        return self._reads.get_key(selector)

    def get_range(self, begin, end, limit=0, reverse=False, *args, **kwargs):
        rows = self._reads.get_range(begin, end, limit, reverse, *args, **kwargs)
        return _CountedRange(rows, self._owner.tally, _anchor(begin), _anchor(end), limit, reverse, self._conflicts)

    def get_range_startswith(self, prefix, *args, **kwargs):
        return self.get_range(prefix, strinc(prefix), *args, **kwargs)

    def get_read_version(self):
        return self._reads.get_read_version()


class _CountedRange:
    """A range read's rows, counted as they are iterated; its conflict range is settled
    when iteration ends (cut after the last row when ``limit`` stopped it)."""

    def __init__(self, rows, tally: Tally, begin: bytes, end: bytes, limit: int, reverse: bool, conflicts: bool):
        self._rows, self._tally = rows, tally
        self._begin, self._end, self._limit, self._reverse = begin, end, limit, reverse
        self._conflicts = conflicts

    def __iter__(self):
        seen, last = 0, None
        try:
            for kv in self._rows:
                seen += 1
                last = kv.key
                self._tally.keys_read += 1
                self._tally.bytes_read += len(kv.key) + len(kv.value)
                yield kv
        finally:
            self._tally.range_reads.append((self._begin, self._end, seen))
            if self._conflicts:
                self._tally.read_conflicts.append(self._conflict_range(seen, last))

    def _conflict_range(self, seen: int, last: bytes | None) -> tuple[bytes, bytes]:
        if not (self._limit and seen >= self._limit and last is not None):
            return (self._begin, self._end)
        return (last, self._end) if self._reverse else (self._begin, last + b"\x00")

    def to_list(self) -> list:
        return list(self)

    def __getattr__(self, name):
        return getattr(self._rows, name)


class CountingTransaction(Items):
    """A transaction of a :class:`CountingDatabase`: the wrapped one, counted."""

    def __init__(self, db: CountingDatabase, tr):
        self._db = db
        self._tr = tr
        self._retries = 0
        self.tally = Tally()
        self._reads = _CountedReads(self, tr, conflicts=True)
        self.snapshot = _CountedReads(self, tr.snapshot, conflicts=False)

    @property
    def wrapped(self):
        return self._tr

    def __getattr__(self, name):
        return getattr(self._tr, name)

    def get(self, key):
        return self._reads.get(key)

    def get_key(self, selector):
        return self._reads.get_key(selector)

    def get_range(self, *args, **kwargs):
        return self._reads.get_range(*args, **kwargs)

    def get_range_startswith(self, *args, **kwargs):
        return self._reads.get_range_startswith(*args, **kwargs)

    def get_read_version(self):
        return self._tr.get_read_version()

    def add_read_conflict_key(self, key) -> None:
        self.tally.read_conflicts.append((key, key + b"\x00"))
        self._tr.add_read_conflict_key(key)

    def add_read_conflict_range(self, begin, end) -> None:
        self.tally.read_conflicts.append((begin, end))
        self._tr.add_read_conflict_range(begin, end)

    def commit(self):
        """The wrapped commit; its tally is kept, labelled as this thread's block, once the
        commit is seen to have succeeded (:class:`_CountedCommit`)."""
        tally = self.tally
        tally.attempts = self._retries + 1
        tally.label = self._db._label()
        return _CountedCommit(self._tr.commit(), self._db, tally)

    def on_error(self, error):
        self._retries += 1
        self.tally = Tally()
        return self._tr.on_error(error)

    def reset(self) -> None:
        self.tally = Tally()
        self._tr.reset()

    def _count(self, name: str, args: tuple) -> None:
        tally = self.tally
        if name == "add_write_conflict_key":
            tally.write_conflicts.append((args[0], args[0] + b"\x00"))
            return
        if name == "add_write_conflict_range":
            tally.write_conflicts.append((args[0], args[1]))
            return
        if name == "clear_range_startswith":
            name, args = "clear_range", (args[0], strinc(args[0]))
        if name == "clear_range":
            tally.writes.append(Write(name, args[0], args[1]))
            tally.write_conflicts.append((args[0], args[1]))
            tally.bytes_written += len(args[0]) + len(args[1])
            return
        key = args[0]
        unique = name == "set_versionstamped_key"
        if unique:  # the last 4 bytes give the stamp's place: cut them off
            key = key[:-4]
        tally.writes.append(Write(name, key, unique=unique))
        tally.write_conflicts.append((key, key + b"\x00"))
        tally.bytes_written += len(key) + sum(len(a) for a in args[1:2])

    def __repr__(self) -> str:
        return f"CountingTransaction({self._tr!r})"


class _CountedCommit:
    """A commit's future that keeps its tally once, when the commit is seen to succeed: by
    ``wait()`` returning (in the waiter's thread, so that a ``take()`` after it finds the
    tally) or by an ``on_ready`` callback.  (The bindings run their own callbacks on their
    network thread, at a time of their own: a tally kept there could come after the take.)"""

    def __init__(self, future, db: CountingDatabase, tally: Tally):
        self._future, self._db, self._tally = future, db, tally
        self._kept = False

    def _keep(self) -> None:
        with self._db._lock:
            if self._kept:
                return
            self._kept = True
        self._db._keep(self._tally)

    def wait(self):
        out = self._future.wait()
        self._keep()
        return out

    def on_ready(self, callback) -> None:
        def ready(_future):
            try:
                self._future.wait()
            except Exception:  # noqa: BLE001 - not committed (or not known to be): not kept
                pass
            else:
                self._keep()
            callback(self)

        self._future.on_ready(ready)

    def __getattr__(self, name):  # is_ready, cancel, block_until_ready: the wrapped future's
        return getattr(self._future, name)


def _anchor(key_or_selector) -> bytes:
    return getattr(key_or_selector, "key", key_or_selector)


def _counted(self, name: str, args: tuple, kwargs: dict):
    self._count(name, args)
    return getattr(self._tr, name)(*args, **kwargs)


delegate(CountingTransaction, MUTATORS, _counted, "The wrapped transaction's ``{name}``, counted.")
