"""Throughput and start latency per type, per minute, for people (``jobs status``,
``/metrics``, the dashboard): cheap to keep and to read whatever the number of jobs.

    ("jobs", "rates", Type, Minute, Kind, Shard) = 8-byte little-endian counter

``Minute`` is the writer's wall clock in whole minutes.  ``Kind``: ``"finished"`` and
``"failed"`` (counted by ``finish``), or ``("wait", Bucket)``: jobs whose start waited (from
when they were due, or enqueued if later, to the accept that took them) about
``BASE ** Bucket`` milliseconds (counted by ``accept``).  Every count is an atomic add,
which never conflicts, spread over ``SHARDS`` keys so that no one key takes every worker's
writes (one shard per transaction, so that a group commit of many finishes adds to one).
A read sums the last hour: at most 60 minutes x (2 + the buckets in use) x
SHARDS small keys.  Minutes older than ``KEEP`` are cleared by the activity monitor
(:func:`prune`).
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass

from . import counts, keys
from .codec import pack_int
from .engine import strinc

SHARDS = counts.SHARDS  # (one shard per transaction: counts.shard)
BASE = 1.25  # wait buckets: a quantile is known to within this factor
KEEP = 3600.0  # seconds of history kept (and summed)
_ONE = (1).to_bytes(8, "little")


@dataclass(frozen=True)
class Rates:
    """A type's last hour: jobs finished and failed, and the start wait's quantiles in
    seconds (None: no job started in the hour)."""

    finished: int = 0
    failed: int = 0
    wait_p50: float | None = None
    wait_p99: float | None = None
    started: int = 0
    # (the minute's start, started, finished, failed) for each minute with any, oldest first
    minutes: tuple = ()


@functools.lru_cache(maxsize=1024)
def _prefix(type: str, minute: int, kind) -> bytes:
    return keys.RATES.pack((type, minute, kind))


def _key(tr, type: str, minute: int, kind) -> bytes:
    """The counter's key in one shard per transaction (a group commit's adds to a counter
    go to one key, which the embedded engine sums into one write), spread by process and
    transaction."""
    return _prefix(type, minute, kind) + pack_int(counts.shard(tr))


def finished(tr, type: str, failed: bool, n: int = 1) -> None:
    """Count ``n`` jobs finished (or failed) now."""
    tr.add(_key(tr, type, int(time.time() // 60), "failed" if failed else "finished"),
           _ONE if n == 1 else n.to_bytes(8, "little"))


def bucket(seconds: float) -> int:
    """The wait bucket of ``seconds`` (bucket b holds waits up to BASE ** b ms)."""
    return max(0, math.ceil(math.log(max(seconds * 1000.0, 1.0), BASE)))


def started(tr, type: str, waits: list[float]) -> None:
    """Count jobs started now that waited ``waits`` seconds each (one add per bucket)."""
    minute = int(time.time() // 60)
    counts: dict[int, int] = {}
    for w in waits:
        b = bucket(w)
        counts[b] = counts.get(b, 0) + 1
    for b, n in counts.items():
        tr.add(_key(tr, type, minute, ("wait", b)), n.to_bytes(8, "little"))


def read(tr, type: str, now: float) -> Rates:
    """The last hour of ``type`` (a snapshot read)."""
    begin = keys.RATES.pack((type, int((now - KEEP) // 60) + 1))
    end = strinc(keys.RATES.pack((type,)))
    waits: dict[int, int] = {}
    per_minute: dict[int, list[int]] = {}  # minute -> [started, finished, failed]
    columns = {"finished": 1, "failed": 2}
    for key, value in tr.snapshot.get_range(begin, end):
        _type, minute, kind, _shard = keys.RATES.unpack(key)
        n = int.from_bytes(value, "little")
        counts = per_minute.setdefault(minute, [0, 0, 0])
        if isinstance(kind, tuple):
            waits[kind[1]] = waits.get(kind[1], 0) + n
            counts[0] += n
        elif kind in columns:
            counts[columns[kind]] += n
    minutes = tuple((m * 60.0, *c) for m, c in sorted(per_minute.items()))
    return Rates(sum(m[2] for m in minutes), sum(m[3] for m in minutes), _quantile(waits, 0.5),
                 _quantile(waits, 0.99), sum(waits.values()), minutes)


def _quantile(histogram: dict[int, int], q: float) -> float | None:
    """The ``q`` quantile of the waits, in seconds: its bucket's upper bound (0 for the
    first bucket, under a millisecond)."""
    total = sum(histogram.values())
    if not total:
        return None
    seen = 0
    for b in sorted(histogram):
        seen += histogram[b]
        if seen >= q * total:
            return 0.0 if b == 0 else BASE ** b / 1000.0
    return None  # (not reached)


def prune(tr, type: str, now: float) -> None:
    """Clear the minutes of ``type`` older than KEEP, if there are any (a snapshot read
    first, so that an attempt retried after a commit that happened writes nothing)."""
    begin, end = keys.RATES.pack((type,)), keys.RATES.pack((type, int((now - KEEP) // 60) + 1))
    if any(True for _ in tr.snapshot.get_range(begin, end, limit=1)):
        tr.clear_range(begin, end)
