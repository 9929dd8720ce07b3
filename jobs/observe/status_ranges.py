"""``jobsctl status``'s range reads: the ranges it counts key by key, in pages, and what their
entries tell besides their counts (``status.py`` composes them).

Counted key by key: the places of a type's job keys in the rotation (``keys:PLACE``)
always; every range of any type when asked for ``exact`` counts: the pending
queue's bands (``pending``, ``due``, ``due_asap``), the keyed jobs' queues (``kpending``:
one range, each entry classified by priority and scheduled time), the running jobs'
activity keys, the failed index and the rows (finished = rows - pending - running -
failed).  Otherwise the counters have the numbers, and only the first ``SAMPLE`` due
entries of each band (and of the keyed queues) are read, for how long due jobs have waited.

Ranges are counted in pages, each in its own read-only transaction after the first, so
that a store of any size stays under FoundationDB's 5-second limit; a range that fits in
one page is counted in the first transaction's snapshot, exactly.
"""

from __future__ import annotations

import heapq

from ..indexes import failed as failed_index, pending
from ..controls import fairness
from .. import keys
from ..engine import strinc
from ..engine import run

BATCH = 10_000  # index keys counted per transaction (small keys, empty or short values)
DATA_BATCH = 1_000  # job rows per transaction: their values carry job data (<= 100 kB)
SAMPLE = 1_000  # due entries of each band read for the longest wait, when jobs are counted
PLACES = fairness.PLACES


def ranges(type: str, now: float, bands: list, counted: bool) -> dict:
    """name -> (begin, end, page size, whole) of the ranges read for ``type`` (``whole``:
    counted to the end; else its first page only).  The pending queue's names are (name,
    band), one per band in ``bands``; ``kpending`` holds every keyed pending job of the
    type, ``keys:PLACE`` its job keys in each place.  ``counted``: the counters have the
    numbers, so only the places and the first due entries are read."""
    queue = {}
    for band in bands:
        start = keys.band_prefix(type, band)
        due = (start, strinc(keys.band_prefix(type, band, now)))
        if counted:
            queue[("due", band)] = (*due, SAMPLE, False)
            continue
        queue[("pending", band)] = (start, strinc(start), BATCH, True)
        queue[("due", band)] = (*due, BATCH, True)
        queue[("due_asap", band)] = (start, strinc(keys.band_prefix(type, band, 0.0)), BATCH, True)
    keyed = keys.KPENDING.pack((type,))
    places = {f"keys:{name}": keys.keys_prefix(type, part) for name, part in PLACES.items()}
    out = {
        **queue,
        "kpending": (keyed, strinc(keyed), SAMPLE, False) if counted else (keyed, strinc(keyed), BATCH, True),
        **{name: (prefix, strinc(prefix), BATCH, True) for name, prefix in places.items()},
    }
    if not counted:
        out["running"] = (*keys.activity_range(type), BATCH, True)
        out["failed"] = (*failed_index.type_range(type), BATCH, True)
        out["rows"] = (keys.DATA[type].range().start, keys.DATA[type].range().stop, DATA_BATCH, True)
    return out


def page(tr, begin: bytes, end: bytes, size: int, keep: bool = False) -> tuple[int, bytes | None, list]:
    """Keys in one page of ``[begin, end)``, where the next page starts (None: done) and,
    if ``keep``, the page's entries (told to :class:`Collected` once the read is done: a
    retried transaction must not tell them twice)."""
    last, n, kept = None, 0, []
    for key, value in tr.snapshot.get_range(begin, end, limit=size):
        last, n = key, n + 1
        if keep:
            kept.append((bytes(key), bytes(value)))
    return n, (bytes(last) + b"\x00" if n == size else None), kept


def first_pages(tr, named: dict, collected: "Collected") -> dict:
    """name -> the first page of each range (in ``tr``'s snapshot)."""
    return {name: page(tr, *r[:3], collected.seen(name) is not None) for name, r in named.items()}


def _count_rest(db, begin: bytes | None, end: bytes, size: int, seen=None) -> int:
    total = 0
    while begin is not None:
        n, begin, kept = run(db, page, begin, end, size, seen is not None)
        total += n
        for key, value in kept:
            seen(key, value)
    return total


def count(db, named: dict, pages: dict, collected: "Collected") -> dict:
    """name -> how many keys the range holds (its first page only, unless whole), told to
    ``collected`` as they are read; each page after the first in its own transaction."""
    counts = {}
    for name, (n, more, kept) in pages.items():
        _begin, end, size, whole = named[name]
        seen = collected.seen(name)
        for key, value in kept:
            seen(key, value)
        counts[name] = n + (_count_rest(db, more, end, size, seen) if whole else 0)
    return counts


class Collected:
    """What the pages of the ``due``, ``kpending`` and ``failed`` ranges tell besides their
    counts: since when the longest-waiting due job waits, the keyed jobs per band (pending,
    due, due as soon as possible), and the ``limit`` most recent failures."""

    def __init__(self, limit: int, now: float):
        self.limit, self.now = limit, now
        self.since: float | None = None  # since when the longest-waiting due job waits
        self.keyed: dict[str, dict[int, int]] = {"pending": {}, "due": {}, "due_asap": {}}
        self.failures: list[tuple[float, str, str | None]] = []  # a min-heap of (at, id, reason)

    def _waits(self, stime: float, value: bytes) -> None:
        queued = pending.queued_at(value)
        since = max(stime, queued) if queued is not None else stime or None
        if since is not None and (self.since is None or since < self.since):
            self.since = since

    def due(self, key: bytes, value: bytes) -> None:
        self._waits(keys.pending_entry(key)[1], value)

    def kpending(self, key: bytes, value: bytes) -> None:
        """A keyed job's pending entry ``(Type, Key, Priority, STime, JobId)``."""
        _type, _key, priority, stime, _id = keys.KPENDING.unpack(key)
        kinds = ["pending"]
        if stime <= self.now:
            kinds.append("due")
            self._waits(stime, value)
            if stime == 0:
                kinds.append("due_asap")
        for kind in kinds:
            self.keyed[kind][priority] = self.keyed[kind].get(priority, 0) + 1

    def failed(self, key: bytes, value: bytes) -> None:
        if self.limit:
            at, reason = failed_index.entry(value)
            item = (at, keys.FAILED.unpack(key)[1], reason)
            (heapq.heappush if len(self.failures) < self.limit else heapq.heappushpop)(self.failures, item)

    def seen(self, name):
        name = name[0] if isinstance(name, tuple) else name
        return {"due": self.due, "kpending": self.kpending, "failed": self.failed}.get(name)

    def recent_failures(self) -> list[tuple[str, float, str | None]]:
        """``(id, at, reason)``, most recent first."""
        return [(job_id, at, reason) for at, job_id, reason in sorted(self.failures, reverse=True)]


def by_band(counts: dict, keyed: dict[str, dict[int, int]]) -> dict[str, dict[int, int]]:
    """The pending counts: name -> {priority: count}, the type's queue and the keyed jobs'
    queues (``keyed``, counted by :class:`Collected`) together."""
    out: dict[str, dict[int, int]] = {kind: dict(per_band) for kind, per_band in keyed.items()}
    for name, n in counts.items():
        if isinstance(name, tuple):
            kind, band = name
            out[kind][band] = out[kind].get(band, 0) + n
    return out
