"""Throughput and start latency per type, per minute, for people (``jobsctl status``,
``/metrics``, the dashboard): cheap to keep and to read whatever the number of jobs.

    ("jobs", "rates", Type, Minute, Bucket, Shard) = four 8-byte little-endian counters:
                                                      runs started, succeeded, failed,
                                                      retried

A run is counted once as it ends, in one of three: *finished* (it succeeded: the job
finished, or, recurring, runs again), *failed* (the job failed for good) or *retried* (it
failed and the job runs again: a retry, or a recurring job's next run), so that the
finished of the last hour are successes only, as ``jobsctl status``'s FINISHED column.

``Minute`` is the writer's wall clock in whole minutes.  ``Bucket``: the jobs started in
it waited (from when they were due, or enqueued if later, to the accept that took them)
about ``BASE ** Bucket`` milliseconds; None for a transaction that started none.  The jobs
a transaction finishes are counted in the first key it adds to for their type, so that a
processor's accept, which carries the last job's finish, adds to one key, not two (every
add is one more write: an UPSERT in the embedded engine).  The four counters are added
at once, as one 32-byte little-endian integer: each only grows, and stays far below 2**64,
so that no carry crosses into the next.  Every count is an atomic add, which never
conflicts, in one shard per transaction (``counts.shard``) so that no one key takes every
worker's writes.  A read sums the last hour: at most 60 minutes x (1 + the buckets in use)
x ``counts.SHARDS`` small keys.  Minutes older than ``KEEP`` are cleared by the counters'
upkeep (:func:`prune`, ``monitor/counters.py``).
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass

from .. import keys
from ..codec import pack_int
from ..engine import strinc

BASE = 1.25  # wait buckets: a quantile is known to within this factor
KEEP = 3600.0  # seconds of history kept (and summed)
_LANE = 64  # bits of each of a key's four counters (started, finished, failed, retried)
_LANES = 4


@dataclass(frozen=True)
class Rates:
    """A type's last hour: runs started, and ended as finished (succeeded), failed (for
    good) or retried (failed, the job runs again), and the start wait's quantiles in seconds
    (None: no job started in the hour)."""

    finished: int = 0
    failed: int = 0
    wait_p50: float | None = None
    wait_p99: float | None = None
    started: int = 0
    # (the minute's start, started, finished, failed, retried) for each minute with any,
    # oldest first
    minutes: tuple = ()
    retried: int = 0


@functools.lru_cache(maxsize=1024)
def _prefix(type: str, minute: int, bucket: int | None) -> bytes:
    return keys.RATES.pack((type, minute, bucket))


def is_rate(key: bytes) -> bool:
    """Whether ``key`` is one of the throughput counters' (for tools that name keys)."""
    return keys.RATES.contains(key)


def bucket(seconds: float) -> int:
    """The wait bucket of ``seconds`` (bucket b holds waits up to BASE ** b ms)."""
    return max(0, math.ceil(math.log(max(seconds * 1000.0, 1.0), BASE)))


# A transaction's counts, summed before they are written (``counts.Tally`` keeps them):
# type -> [{wait bucket: jobs started}, runs finished, failed, retried]


def started(rated: dict, type: str, waits: list[float]) -> None:
    """Count in ``rated`` jobs of ``type`` started now that waited ``waits`` seconds each."""
    buckets = rated.setdefault(type, [{}, 0, 0, 0])[0]
    for w in waits:
        b = bucket(w)
        buckets[b] = buckets.get(b, 0) + 1


def finished(rated: dict, type: str, failed: bool, n: int = 1, *, retried: bool = False) -> None:
    """Count in ``rated`` ``n`` runs of ``type`` ended now: finished, ``failed`` for good,
    or ``retried`` (failed, and the job runs again)."""
    rated.setdefault(type, [{}, 0, 0, 0])[3 if retried else 2 if failed else 1] += n


def write(tr, shard: int, rated: dict) -> None:
    """Add ``rated`` to this minute's counters in ``shard``: one add a wait bucket in use,
    the finishes riding the first (or bucket None's when no job started)."""
    minute = int(time.time() // 60)
    s = pack_int(shard)
    size = _LANES * _LANE // 8
    for type, (buckets, n_finished, n_failed, n_retried) in rated.items():
        done = n_finished << _LANE | n_failed << 2 * _LANE | n_retried << 3 * _LANE
        for b, n in buckets.items():
            tr.add(_prefix(type, minute, b) + s, (n | done).to_bytes(size, "little"))
            done = 0
        if done:
            tr.add(_prefix(type, minute, None) + s, done.to_bytes(size, "little"))


def read(tr, type: str, now: float) -> Rates:
    """The last hour of ``type`` (a snapshot read; keys of another shape than :func:`write`'s
    are passed over)."""
    begin = keys.RATES.pack((type, int((now - KEEP) // 60) + 1))
    end = strinc(keys.RATES.pack((type,)))
    waits: dict[int, int] = {}
    per_minute: dict[int, list[int]] = {}  # minute -> [started, finished, failed, retried]
    lane = (1 << _LANE) - 1
    for key, value in tr.snapshot.get_range(begin, end):
        _type, minute, kind, _shard = keys.RATES.unpack(key)
        if kind is None or isinstance(kind, int):  # (a wait bucket, or None)
            n = int.from_bytes(value, "little")
            counts = per_minute.setdefault(minute, [0, 0, 0, 0])  # (started, finished, failed, retried)
            if kind is not None:
                waits[kind] = waits.get(kind, 0) + (n & lane)
            for i in range(_LANES):
                counts[i] += n >> i * _LANE & lane
    minutes = tuple((m * 60.0, *c) for m, c in sorted(per_minute.items()))
    return Rates(sum(m[2] for m in minutes), sum(m[3] for m in minutes), _quantile(waits, 0.5),
                 _quantile(waits, 0.99), sum(waits.values()), minutes, sum(m[4] for m in minutes))


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
