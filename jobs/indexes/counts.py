"""Exact counts of each type's jobs, kept by the transactions that change them, so that
``jobsctl status`` costs the same at a thousand jobs as at a million (couch_jobs counts
pending jobs by reading the queue: linear in jobs)::

    ("jobs", "counts", Type, "running" | "finished" | "failed", Shard)
    ("jobs", "counts", Type, "asap", Band, Shard)            pending, scheduled as soon as possible
    ("jobs", "counts", Type, "at", Minute, Band, Shard)      pending, scheduled in that minute
    ("jobs", "counts", Type, "sec", Second, Band, Shard)     pending, scheduled in that second

Each value is an 8-byte little-endian two's complement counter changed by atomic adds,
which never conflict; a transaction adds to one ``Shard`` of each (``shard``), so that no
one key takes every worker's writes on FoundationDB.  Where the changes are made, one
place per kind: a pending entry is counted by ``pending.enqueue`` and uncounted by
``pending.remove`` and ``pending.take``; a running job by accept and ``rows.stop_running``;
a finished (or failed) job by ``finish`` and uncounted by ``finished.leave``, whatever
makes it leave (a re-add, resubmit, retry, removal, pruning).  Failed jobs are always in
the finished index (``finished.py``), which says which kind a job leaves.

*Due* jobs are pending jobs scheduled at or before now: ``asap``, the minutes before this
one, and the seconds of this minute before this second (a job scheduled within the
current second counts as due from the next one).  Seconds older than ``SECONDS_KEPT`` are
never read and are cleared by the counters' upkeep (:func:`prune`, ``monitor/counters.py``),
with the past minutes whose counts add up to nothing.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

from .. import keys, txstate
from . import rates
from ..codec import pack_int

SHARDS = 8
SECONDS_KEPT = 600.0  # seconds buckets read only within the current minute; kept 10 minutes
STATES = ("running", "finished", "failed")
PRUNE_PAGE = 10_000  # minute buckets looked at per prune
_ONE, _MINUS_ONE = (1).to_bytes(8, "little"), (-1).to_bytes(8, "little", signed=True)


def shard(tr, shards: int | None = None) -> int:
    """The one shard (of ``shards``, default ``SHARDS``) of every counter ``tr`` adds to
    (``rates.py``'s too, through :class:`Tally`) and of the keys it stamps or bumps (``rows.bump_activity``,
    ``pending.wake``), so that its writes to one of them merge into one write: drawn at
    random for the transaction (taking shards in turn made a process that alternates kinds
    of transactions, accept, finish, accept, ..., put each kind on half of them)."""
    return txstate.of(tr).draw % (SHARDS if shards is None else shards)


def _delta(n: int) -> bytes:
    return _ONE if n == 1 else _MINUS_ONE if n == -1 else n.to_bytes(8, "little", signed=True)


@functools.lru_cache(maxsize=4096)
def _prefix(type: str, *name) -> bytes:
    return keys.COUNTS.pack((type, *name))


def is_counter(key: bytes) -> bool:
    """Whether ``key`` is one of the job counters' (for tools that name keys)."""
    return keys.COUNTS.contains(key)


# --- writers ---------------------------------------------------------------------------


def _buckets(type: str, band: int, stime: float) -> tuple[bytes, ...]:
    """The counters' prefixes (less the shard) of a pending entry of ``band`` at ``stime``."""
    if not stime:
        return (_prefix(type, "asap", band),)
    second = int(stime)
    return _prefix(type, "at", second // 60, band), _prefix(type, "sec", second, band)


def queued(tr, type: str, band: int, stime: float, n: int) -> None:
    """A pending entry of band ``band`` at ``stime`` came (n=1) or went (n=-1)."""
    s, d = pack_int(shard(tr)), _delta(n)
    for prefix in _buckets(type, band, stime):
        tr.add(prefix + s, d)


def queued_many(tr, type: str, entries: list[tuple[int, float]]) -> None:
    """``queued(..., 1)`` for each ``(band, stime)``: one add per counter."""
    _add_summed(tr, [(type, band, stime) for band, stime in entries], 1)


def taken(tr, picked: list[bytes]) -> None:
    """The pending entries ``picked`` (keys of any queue) were taken: one add per counter."""
    _add_summed(tr, [keys.queue_entry(key)[:3] for key in picked], -1)


def _add_summed(tr, entries: list[tuple[str, int, float]], n: int) -> None:
    """Count ``n`` for each pending entry ``(type, band, stime)``, summed by counter."""
    times: dict[tuple, int] = {}  # (type, band, stime) -> entries counted (a batch shares a few)
    for at in entries:
        times[at] = times.get(at, 0) + n
    tally: dict[bytes, int] = {}
    for at, total in times.items():
        for prefix in _buckets(*at):
            tally[prefix] = tally.get(prefix, 0) + total
    s = pack_int(shard(tr))
    for prefix, total in tally.items():
        if total:
            tr.add(prefix + s, _delta(total))


def changed(tr, type: str, state: str, n: int) -> None:
    """A job came into (n=1) or left (n=-1) ``state``: running, finished or failed."""
    tr.add(_prefix(type, state) + pack_int(shard(tr)), _delta(n))


class Tally:
    """A transaction's state changes, summed in Python and written as one add per counter
    (``write``): :meth:`changed` is :func:`changed` for a batch of finishes; its jobs
    started and finished, for the per-minute rates (``rates.py``), written the same way;
    and the types whose activity it stamps (:meth:`to_stamp`)."""

    __slots__ = ("_sums", "_rated", "_stamped")

    def __init__(self):
        self._sums: dict[tuple[str, str], int] = {}
        self._rated: dict = {}  # (rates.py's)
        self._stamped: set[str] = set()

    def changed(self, tr, type: str, state: str, n: int) -> None:
        """:func:`changed`, summed (``tr``: for the signature they share)."""
        self._sums[(type, state)] = self._sums.get((type, state), 0) + n

    def started(self, type: str, waits: list[float]) -> None:
        """Jobs of ``type`` started that waited ``waits`` seconds each (``rates.started``)."""
        rates.started(self._rated, type, waits)

    def finished(self, type: str, failed: bool, n: int = 1, *, retried: bool = False) -> None:
        """``n`` runs of ``type`` ended: finished, failed, or retried (``rates.finished``)."""
        rates.finished(self._rated, type, failed, n, retried=retried)

    def to_stamp(self, type: str) -> bool:
        """Whether the type's activity is still to be stamped (``rows.bump_activity``) by
        this tally's transaction: True once a type.  A stamp is one write whatever their
        number, but each costs its call: an accept carrying a finish stamps once."""
        if type in self._stamped:
            return False
        self._stamped.add(type)
        return True

    def write(self, tr) -> None:
        for (type, state), n in self._sums.items():
            if n:
                changed(tr, type, state, n)
        if self._rated:
            rates.write(tr, shard(tr), self._rated)


class sharing:
    """``with counts.sharing(tr) as tally:`` count ``tr``'s state changes and rates in
    ``tally``, written as the block ends (not if it raises).  A block within another of the
    same transaction shares the outer one's tally, which the outer block writes: an accept
    that carries the last job's finish moves the running count by -1 and +1, and then
    writes nothing for it (an add of 0 is still a write), and adds its start and the
    finish to one rate key.  (A class, not a generator: every accept and finish enters
    one.)"""

    __slots__ = ("_tr", "_state", "_tally", "_own")

    def __init__(self, tr):
        self._tr = tr
        self._state = txstate.of(tr)
        outer = self._state.tally
        self._own = outer is None
        self._tally = Tally() if outer is None else outer

    def __enter__(self) -> Tally:
        if self._own:
            self._state.tally = self._tally
        return self._tally

    def __exit__(self, exc_type, *exc) -> None:
        if self._own:
            self._state.tally = None
            if exc_type is None:
                self._tally.write(self._tr)


# --- readers ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Counts:
    """A type's jobs by state; ``bands``: priority -> (pending, due, due as soon as possible)."""

    running: int = 0
    finished: int = 0
    failed: int = 0
    bands: dict = field(default_factory=dict)

    @property
    def pending(self) -> int:
        return sum(p for p, _d, _a in self.bands.values())


def read(tr, type: str, now: float) -> Counts:
    """The type's counts now (snapshot reads)."""
    states = dict.fromkeys(STATES, 0)
    pending, due, asap = {}, {}, {}

    def bump(table, band, n):
        table[band] = table.get(band, 0) + n

    this_minute = int(now // 60)
    for key, value in tr.snapshot.get_range(_prefix(type), _prefix(type, "sec")):
        name, *rest = keys.COUNTS.unpack(key)[1:]
        n = int.from_bytes(value, "little", signed=True)
        if name in states:
            states[name] += n
        elif name == "asap":
            for table in (pending, due, asap):
                bump(table, rest[0], n)
        elif name == "at":
            bump(pending, rest[1], n)
            if rest[0] < this_minute:
                bump(due, rest[1], n)
    begin, end = _prefix(type, "sec", this_minute * 60), _prefix(type, "sec", math.floor(now))
    for key, value in tr.snapshot.get_range(begin, end):
        bump(due, keys.COUNTS.unpack(key)[3], int.from_bytes(value, "little", signed=True))
    bands = {b: (n, due.get(b, 0), asap.get(b, 0)) for b, n in sorted(pending.items()) if n}
    return Counts(states["running"], states["finished"], states["failed"], bands)


# --- upkeep (``monitor/counters.py``'s) --------------------------------------------------------


def prune(tr, type: str, now: float) -> int:
    """Clear the type's seconds older than SECONDS_KEPT and up to PRUNE_PAGE keys' worth of
    minutes before the last one whose counts add up to nothing (conflicting reads of those:
    an add meanwhile makes this retry).  Writes nothing when there is nothing to clear, so
    an attempt retried after its commit happened ends read-only.  Returns keys cleared."""
    old = _prefix(type, "sec"), _prefix(type, "sec", int(now - SECONDS_KEPT))
    cleared = 0
    if any(True for _ in tr.snapshot.get_range(*old, limit=1)):
        tr.clear_range(*old)
        cleared += 1
    begin, end = _prefix(type, "at"), _prefix(type, "at", int(now // 60) - 1)
    groups: dict[tuple, list] = {}
    for key, value in tr.snapshot.get_range(begin, end, limit=PRUNE_PAGE):
        minute, band = keys.COUNTS.unpack(key)[2:4]
        groups.setdefault((minute, band), []).append((bytes(key), int.from_bytes(value, "little", signed=True)))
    for entries in groups.values():
        if sum(n for _key, n in entries) == 0:
            for key, _n in entries:
                tr.add_read_conflict_key(key)
                tr.clear(key)
                cleared += 1
    return cleared
