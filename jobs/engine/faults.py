"""Fault injection: commits that fail on purpose, on any engine.

A real cluster returns ``not_committed`` (1020), ``commit_unknown_result`` (1021) and
``transaction_too_old`` (1007) only under load or failures; this wrapper returns them on
demand so that the retry paths above the engine, and the idempotency every retried write
needs, are exercised by ordinary tests::

    db = FaultInjectingDatabase(EmbeddedDatabase(path), conflict=0.1, unknown_committed=0.05, seed=7)

For each commit of a transaction that wrote something, one draw decides among:

==========================  ======  ==========================================================
rate                        code    what happens
==========================  ======  ==========================================================
``conflict``                1020    nothing is committed
``unknown_committed``       1021    the transaction **is** committed, then 1021 is raised
``unknown_not_committed``   1021    nothing is committed
``too_old``                 1007    nothing is committed
==========================  ======  ==========================================================

Read-only commits are never faulted (FoundationDB never fails them either).

``commit_latency`` and ``read_latency`` (seconds) imitate a cluster's round trips
(``latency.py``): a writing commit, faulted or not, is applied halfway through its latency
and answered at its end (one-write commits took 2.26 ms on a one-process FoundationDB 7.3);
each read (``get``, ``get_key``, ``get_range``, ``get_read_version``, snapshot ones too) is
answered ``read_latency`` after it is issued, reads issued together overlapping.  ``on_error``
works as usual; after an injected fault it is given the bare code, which both engines'
``on_error`` accept.  The rates are plain attributes and may be changed at any time.
"""

from __future__ import annotations

import collections
import random
import threading

from . import errors as E
from .errors import FDBError
from .futures import Future, copy_outcome
from .items import Items
from .latency import LateReads, commit_later
from .wrapping import MUTATORS, READS, WrappedDatabase, delegate

FAULTS = {  # name -> code
    "conflict": E.NOT_COMMITTED,
    "unknown_committed": E.COMMIT_UNKNOWN_RESULT,
    "unknown_not_committed": E.COMMIT_UNKNOWN_RESULT,
    "too_old": E.TRANSACTION_TOO_OLD,
}

class FaultInjectingDatabase(WrappedDatabase):
    """Wraps a database (embedded or ``fdb.Database``); its transactions' commits fail at
    the configured rates (each in [0, 1], summing to at most 1).

    Counters for tests: ``commits`` (writing commits attempted through the wrapper),
    ``injected`` (a Counter by fault name) and ``faults`` (their total)."""

    def __init__(
        self,
        db,
        *,
        conflict: float = 0.0,
        unknown_committed: float = 0.0,
        unknown_not_committed: float = 0.0,
        too_old: float = 0.0,
        seed: int | None = None,
        commit_latency: float = 0.0,
        read_latency: float = 0.0,
    ):
        super().__init__(db)
        self.commit_latency = _latency("commit_latency", commit_latency)
        self.read_latency = _latency("read_latency", read_latency)
        self.conflict = conflict
        self.unknown_committed = unknown_committed
        self.unknown_not_committed = unknown_not_committed
        self.too_old = too_old
        self._check_rates()
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self.commits = 0
        self.injected: collections.Counter[str] = collections.Counter()

    def _check_rates(self) -> None:
        total = 0.0
        for name in FAULTS:
            rate = getattr(self, name)
            if not isinstance(rate, (int, float)) or not 0.0 <= rate <= 1.0:
                raise ValueError(f"fault rate {name}={rate!r} must be a number between 0 and 1")
            total += rate
        if total > 1.0 + 1e-9:
            raise ValueError(f"fault rates add up to {total}, more than 1")

    @property
    def faults(self) -> int:
        return sum(self.injected.values())

    def _draw(self) -> str | None:
        """Count one writing commit and pick the fault to inject, if any."""
        self._check_rates()
        with self._lock:
            self.commits += 1
            x = self._rng.random()
            for name in FAULTS:
                rate = getattr(self, name)
                if x < rate:
                    self.injected[name] += 1
                    return name
                x -= rate
        return None

    def _uncount(self, name: str) -> None:
        with self._lock:
            self.injected[name] -= 1
            if not self.injected[name]:
                del self.injected[name]

    def create_transaction(self) -> "FaultInjectingTransaction":
        return FaultInjectingTransaction(self, self.db.create_transaction())

    def __repr__(self) -> str:
        rates = ", ".join(f"{n}={getattr(self, n)}" for n in (*FAULTS, "commit_latency", "read_latency")
                          if getattr(self, n))
        return f"FaultInjectingDatabase({self.db!r}, {rates})"


def _latency(name: str, seconds) -> float:
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0.0 <= seconds < 60.0:
        raise ValueError(f"{name}={seconds!r} must be seconds, at least 0 and below 60")
    return float(seconds)


class FaultInjectingTransaction(Items):
    """A transaction of the wrapped database whose ``commit`` may fail on purpose; every
    other attribute is the wrapped transaction's."""

    def __init__(self, db: FaultInjectingDatabase, tr):
        self._faults = db
        self._tr = tr
        self._writes = False
        self._pending: list[_Relay] = []  # versionstamp and watch futures of this attempt
        self._injected: FDBError | None = None
        self._fresh_reads()

    def _fresh_reads(self) -> None:
        """A new attempt's reads: with ``read_latency``, a new read version to wait for."""
        latency = self._faults.read_latency
        self._reads = LateReads.of(self._tr, latency) if latency else self._tr

    @property
    def wrapped(self):
        return self._tr

    def __getattr__(self, name):
        return getattr(self._tr, name)

    def get_versionstamp(self):
        return self._relay(self._tr.get_versionstamp(), stamp=True)

    def watch(self, key):
        return self._relay(self._tr.watch(key))

    def _relay(self, inner, stamp: bool = False) -> "_Relay":
        relay = _Relay(inner, stamp)
        self._pending.append(relay)
        return relay

    @property
    def snapshot(self):
        return self._reads.snapshot

    def commit(self):
        """The wrapped commit, or a future failing with an injected error (see module doc),
        after ``commit_latency`` when it writes."""
        latency = self._faults.commit_latency
        return commit_later(self._commit, latency) if latency and self._writes else self._commit()

    def _commit(self):
        fault = self._faults._draw() if self._writes else None
        if fault is None:
            return self._tr.commit()
        error = FDBError(FAULTS[fault], f"injected ({fault})")
        # As FDB does, the watches of a failed commit fail with its error and its
        # versionstamp with 2020, also when the commit did happen behind the error (1021).
        pending, self._pending = self._pending, []
        for relay in pending:
            relay.detach()
        if fault == "unknown_committed":
            try:
                self._tr.commit().wait()
            except BaseException:  # a real failure (e.g. a real conflict) wins
                self._faults._uncount(fault)
                for relay in pending:
                    relay.reattach()
                raise
        for relay in pending:
            relay.fail(FDBError(E.TRANSACTION_INVALID_VERSION) if relay.stamp else error)
        self._injected = error
        failed = Future()
        failed.set_error(error)
        return failed

    def on_error(self, error):
        """The wrapped ``on_error``; an injected error is passed as its bare code, which the
        bindings accept (they reject foreign exception types)."""
        if error is self._injected and error is not None:
            error = error.code
        self._injected = None
        self._writes = False
        self._pending = []
        self._fresh_reads()
        return self._tr.on_error(error)

    def reset(self) -> None:
        self._injected = None
        self._writes = False
        self._pending = []
        self._fresh_reads()
        self._tr.reset()

    def __repr__(self) -> str:
        return f"FaultInjectingTransaction({self._tr!r})"


class _Relay(Future):
    """A future that repeats the wrapped transaction's future (versionstamp or watch) until
    an injected fault detaches it and fails it with the injected error instead."""

    __slots__ = ("_inner", "_detached", "stamp")

    def __init__(self, inner, stamp: bool = False):
        super().__init__()
        self._inner = inner
        self._detached = False
        self.stamp = stamp  # a versionstamp future (else a watch)
        inner.on_ready(self._copy)

    def _copy(self, inner) -> None:
        if not self._detached:
            copy_outcome(inner, self)

    def detach(self) -> None:
        self._detached = True

    def reattach(self) -> None:
        self._detached = False
        if self._inner.is_ready():
            self._copy(self._inner)

    def fail(self, error: BaseException) -> None:
        if self.set_error(error):
            cancel = getattr(self._inner, "cancel", None)
            if cancel is not None:  # e.g. a watch armed by a commit that happened behind 1021
                try:
                    cancel()
                except Exception:  # noqa: BLE001 - best effort
                    pass

    def cancel(self) -> None:
        self._inner.cancel()
        super().cancel()


def _write(self, name: str, args: tuple, kwargs: dict):
    self._writes = True
    return getattr(self._tr, name)(*args, **kwargs)


delegate(FaultInjectingTransaction, MUTATORS, _write, "The wrapped transaction's ``{name}``.")
delegate(FaultInjectingTransaction, READS, lambda self, name, args, kwargs: getattr(self._reads, name)(*args, **kwargs),
         "The wrapped transaction's ``{name}`` (after ``read_latency``).")
