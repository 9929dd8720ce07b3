"""Throughput and start latency per type, per minute, for people (``jobsctl status``,
``/metrics``, the dashboard): cheap to keep and to read whatever the number of jobs.

    ("jobs", "rates", Type, Minute, Bucket, Shard) = three 8-byte little-endian counters:
                                                      jobs started, finished, failed

``Minute`` is the writer's wall clock in whole minutes.  ``Bucket``: the jobs started in
it waited (from when they were due, or enqueued if later, to the accept that took them)
about ``BASE ** Bucket`` milliseconds; None for a transaction that started none.  The jobs
a transaction finishes are counted in the first key it adds to for their type, so that a
processor's accept, which carries the last job's finish, adds to one key, not two (every
add is one more write: an UPSERT in the embedded engine).  The three counters are added
at once, as one 24-byte little-endian integer: each only grows, and stays far below 2**64,
so that no carry crosses into the next.  Every count is an atomic add, which never
conflicts, in one shard per transaction (``counts.shard``) so that no one key takes every
worker's writes.  A read sums the last hour: at most 60 minutes x (1 + the buckets in use)
x ``counts.SHARDS`` small keys.  Minutes older than ``KEEP`` are cleared by the activity
monitor (:func:`prune`).

Earlier versions wrote one 8-byte counter a key, ``Kind`` in place of ``Bucket``:
``"finished"``, ``"failed"`` or ``("wait", Bucket)``; :func:`read` sums those too, for the
hour they are kept.
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass

from . import keys
from .codec import pack_int
from .engine import strinc

BASE = 1.25  # wait buckets: a quantile is known to within this factor
KEEP = 3600.0  # seconds of history kept (and summed)
_LANE = 64  # bits of each of a key's three counters (started, finished, failed)


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
def _prefix(type: str, minute: int, bucket: int | None) -> bytes:
    return keys.RATES.pack((type, minute, bucket))


def bucket(seconds: float) -> int:
    """The wait bucket of ``seconds`` (bucket b holds waits up to BASE ** b ms)."""
    return max(0, math.ceil(math.log(max(seconds * 1000.0, 1.0), BASE)))


# A transaction's counts, summed before they are written (``counts.Tally`` keeps them):
# type -> [{wait bucket: jobs started}, jobs finished, jobs failed]


def started(rated: dict, type: str, waits: list[float]) -> None:
    """Count in ``rated`` jobs of ``type`` started now that waited ``waits`` seconds each."""
    buckets = rated.setdefault(type, [{}, 0, 0])[0]
    for w in waits:
        b = bucket(w)
        buckets[b] = buckets.get(b, 0) + 1


def finished(rated: dict, type: str, failed: bool, n: int = 1) -> None:
    """Count in ``rated`` ``n`` jobs of ``type`` finished (or failed) now."""
    rated.setdefault(type, [{}, 0, 0])[2 if failed else 1] += n


def write(tr, shard: int, rated: dict) -> None:
    """Add ``rated`` to this minute's counters in ``shard``: one add a wait bucket in use,
    the finishes riding the first (or bucket None's when no job started)."""
    minute = int(time.time() // 60)
    s = pack_int(shard)
    for type, (buckets, n_finished, n_failed) in rated.items():
        done = n_finished << _LANE | n_failed << 2 * _LANE
        for b, n in buckets.items():
            tr.add(_prefix(type, minute, b) + s, (n | done).to_bytes(24, "little"))
            done = 0
        if done:
            tr.add(_prefix(type, minute, None) + s, done.to_bytes(24, "little"))


def read(tr, type: str, now: float) -> Rates:
    """The last hour of ``type`` (a snapshot read)."""
    begin = keys.RATES.pack((type, int((now - KEEP) // 60) + 1))
    end = strinc(keys.RATES.pack((type,)))
    waits: dict[int, int] = {}
    per_minute: dict[int, list[int]] = {}  # minute -> [started, finished, failed]
    lane = (1 << _LANE) - 1
    for key, value in tr.snapshot.get_range(begin, end):
        _type, minute, kind, _shard = keys.RATES.unpack(key)
        n = int.from_bytes(value, "little")
        counts = per_minute.setdefault(minute, [0, 0, 0])
        if kind is None or isinstance(kind, int):  # (started, finished, failed)
            if kind is not None:
                waits[kind] = waits.get(kind, 0) + (n & lane)
            for i in range(3):
                counts[i] += n >> i * _LANE & lane
        elif isinstance(kind, tuple):  # an earlier version's ("wait", bucket)
            waits[kind[1]] = waits.get(kind[1], 0) + n
            counts[0] += n
        elif kind in ("finished", "failed"):  # an earlier version's
            counts[1 if kind == "finished" else 2] += n
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
