"""The pending queue of each type (couch_jobs_pending's part), in priority bands:
``("jobs", "pending", Type, Priority, STime, JobId)`` (see ``keys.py``).

Dequeue takes from the best band that has due jobs: it picks one from a *snapshot* read
of that band's head and adds one read conflict key, on the job it takes: workers that pick
different jobs never conflict, and two that pick the same one conflict at commit (1020)
and the loser retries.  A lone job is picked at the picking thread's place in the head
(``places.py``): the threads of a machine picking at once keep to places far apart, and
every place is visited as the places turn.  A batch is a run of neighbouring jobs at a random
place in a wider head, for the same reason, continued in the next bands when one band has
too few due jobs.

Bands are found by skipping from one to the next (one snapshot read each, which also reads
the band's head), so a band whose jobs are all scheduled in the future costs one read and
does not hide the due jobs of worse bands; the cost grows with the number of priorities
in use, never with the number of jobs.
"""

from __future__ import annotations

import random
import struct
import time
import uuid
from bisect import bisect_left

from . import counts, places, wakeups
from .. import keys, store_ids, txstate
from ..codec import pack_str
from ..engine import KeySelector, strinc

SAMPLE = places.SLOTS  # head of the queue read to pick from: enough that a few workers rarely pick alike
BATCH_SPREAD = 8  # a batch of n is a run of n taken at a random place in the first n * 8
_ONE = (1).to_bytes(8, "little")
_QUEUED_AT = struct.Struct(">d")


def _at_place(tr, due: list[bytes]) -> bytes:
    """The key at this thread's place in ``due`` (a head of due keys of ``tr``'s store),
    scaled to a head shorter than ``SAMPLE``: places far apart stay apart in it (four
    workers take four different jobs of a head of four)."""
    return due[places.place(store_ids.store_id_of(store_ids.store_id_future(tr))) * len(due) // SAMPLE]


def enqueue(tr, type: str, priority: int, stime: float, job_id: str, key: str | None = None) -> None:
    """Queue the job in band ``priority`` at ``stime``: in the type's queue, or in its job
    key's queue (``key``; ``fairness.enqueue`` also brings the key into the rotation)."""
    put_entry(tr, type, priority, stime, job_id, key, queued_now())
    counts.queued(tr, type, priority, stime, 1)
    wake(tr, type)


def queued_now() -> bytes:
    """A pending entry's value: when the job was enqueued (wall clock of the enqueuing
    machine, for people: ``jobsctl status`` shows how long due jobs have waited; nothing
    decides on it)."""
    return _QUEUED_AT.pack(time.time())


def put_entry(tr, type: str, priority: int, stime: float, job_id: str, key: str | None, queued: bytes) -> None:
    """The job's pending entry alone (:func:`enqueue` without the counts and wake:
    for callers that do those once for many jobs)."""
    if key is None:
        tr.set(keys.pending_key(type, priority, stime, job_id), queued)
    else:
        tr.set(keys.keyed_pending_key(type, key, priority, stime, job_id), queued)


def wake(tr, type: str) -> None:
    """Wake the accepts waiting for jobs of ``type`` (a job was enqueued, the type resumed):
    bump one of its wake shards, the same for all of ``tr``'s wakes."""
    tr.add(keys.watches_pending_key(type, counts.shard(tr, keys.PENDING_SHARDS)), _ONE)


def queued_at(value: bytes) -> float | None:
    """When a pending entry was enqueued (None for a value of another size, which only
    another program writes: the time is for people, and no accept fails for want of it)."""
    return _QUEUED_AT.unpack(value)[0] if len(value) == _QUEUED_AT.size else None


def remove(tr, type: str, priority: int, stime: float, job_id: str, key: str | None = None) -> None:
    """Drop the job's entry (a blind clear: nothing to read).  A keyed job's key stays in
    the rotation until an accept finds its queue empty."""
    counts.queued(tr, type, priority, stime, -1)
    if key is not None:
        tr.clear(keys.keyed_pending_key(type, key, priority, stime, job_id))
        return
    tr.clear(keys.pending_key(type, priority, stime, job_id))


def _job_id(key: bytes) -> str:
    """The job id of a pending key of any queue (its last element)."""
    return keys.job_id_of(key)


def _read(tr, begin: bytes, end: bytes, limit: int, seen: dict | None = None) -> list[bytes]:
    """The keys of a snapshot range read (the one :func:`read_head_ahead` issued, if it
    did); ``seen`` (if given) also keeps their values."""
    ranges = txstate.of(tr).ranges
    found = ranges.pop((begin, end, limit), None) if ranges else None
    if found is None:
        found = tr.snapshot.get_range(begin, end, limit=limit)
    if seen is None:
        return [bytes(kv.key) for kv in found]
    found = {bytes(kv.key): bytes(kv.value) for kv in found}
    seen.update(found)
    return list(found)


def _seen(tr) -> dict:
    """The heads ``tr``'s picks read, {pending key: value}: when the jobs taken were
    enqueued, for their start wait (:func:`waits`), without reading again."""
    return txstate.of(tr).heads


def waits(tr, picked: list[bytes], now: float) -> list[float]:
    """How long each picked job waited to start: from when it was due (its scheduled time,
    or its enqueue time if later) to ``now``; only for keys whose value a pick read."""
    seen = txstate.of(tr).heads
    out = []
    for key in picked:
        value = seen.get(key)
        if value is None:
            continue
        stime = keys.stime_of(key)
        queued = queued_at(value)
        out.append(max(0.0, now - max(stime, queued if queued is not None else stime)))
    return out


def bands(tr, type: str, window: int = 1):
    """``(priority, head)`` for each band of ``type`` that has pending jobs, best first;
    ``head``: up to ``window`` keys from the band's first (snapshot reads; it may run on
    into the next bands)."""
    return queue_bands(tr, keys.pending_prefix(type), window)


def queue_bands(tr, queue: bytes, window: int = 1, seen: dict | None = None):
    """:func:`bands` of the queue whose prefix is ``queue`` (a type's, or a job key's:
    ``keys.key_queue``); ``seen`` keeps the heads' values."""
    begin, end = queue, strinc(queue)
    while head := _read(tr, begin, end, window, seen):
        priority = keys.band_in(queue, head[0])
        yield priority, head
        begin = strinc(keys.queue_band(queue, priority))


def _due_end(queue: bytes, priority: int, max_stime: float) -> bytes:
    """End of the keys of band ``priority`` of ``queue`` scheduled at or before ``max_stime``."""
    return strinc(keys.queue_band(queue, priority, max_stime))


def dequeue(tr, type: str, max_stime: float, no_schedule: bool = False) -> str | None:
    """Take (clear) an eligible pending job of the best band (:func:`pick_from`) and return
    its id, or None.  Eligible: scheduled at or before ``max_stime``; with ``no_schedule``,
    scheduled at 0 (ids UUID-like, picked near a random UUID without reading the band's
    head)."""
    taken = dequeue_many(tr, type, max_stime, 1, no_schedule)
    return taken[0] if taken else None


def dequeue_many(tr, type: str, max_stime: float, limit: int, no_schedule: bool = False) -> list[str]:
    """Take (clear) up to ``limit`` eligible pending jobs, best band first, and return their
    ids: one job of the best band for a limit of 1 (at this thread's place in its head);
    else a run of neighbours at a random place in the band's head (or near a random UUID),
    so that workers taking batches at once rarely collide.  One read conflict key per job
    taken."""
    return take(tr, pick(tr, type, max_stime, limit, no_schedule))


def read_head_ahead(tr, type: str, limit: int) -> None:
    """Issue now the first head read a :func:`pick` of ``limit`` jobs of ``type`` makes, so
    that it goes out with the caller's first reads, a round trip sooner on a cluster (the
    bindings send a range read as it is asked for); the pick takes it.  Issued before the
    transaction's own writes, it does not see them: a job the transaction itself enqueues
    meanwhile is taken by the next accept."""
    queue = keys.pending_prefix(type)
    window = SAMPLE if limit == 1 else limit * BATCH_SPREAD
    end = strinc(queue)
    # (the only one kept: one an earlier attempt issued and did not use is dropped, never
    # taken by a later attempt at another read version)
    txstate.of(tr).ranges = {(queue, end, window): tr.snapshot.get_range(queue, end, limit=window)}


def pick(tr, type: str, max_stime: float, limit: int, no_schedule: bool = False) -> list[bytes]:
    """The pending keys :func:`dequeue_many` would take, read without a conflict and not
    yet taken: a caller that reads something else meanwhile decides before :func:`take`."""
    if no_schedule:
        return _pick_near_uuid(tr, type, limit)
    return _pick_from_heads(tr, type, max_stime, limit)


def take(tr, picked: list[bytes]) -> list[str]:
    """Take (clear) the ``picked`` pending keys; their job ids."""
    counts.taken(tr, picked)
    for key in picked:
        tr.add_read_conflict_key(key)  # the one conflict: another worker that took this job
        tr.clear(key)
    return [_job_id(key) for key in picked]


def _pick_from_heads(tr, type: str, max_stime: float, limit: int) -> list[bytes]:
    return pick_from(tr, keys.pending_prefix(type), max_stime, limit)


def pick_from(tr, queue: bytes, max_stime: float, limit: int) -> list[bytes]:
    """Up to ``limit`` due keys of the queue whose prefix is ``queue``, best band first
    (one at this thread's place in the head for a limit of 1, else a run at random), read
    without a conflict."""
    window = SAMPLE if limit == 1 else limit * BATCH_SPREAD
    picked: list[bytes] = []
    for priority, head in queue_bands(tr, queue, window, _seen(tr)):
        due = head[:bisect_left(head, _due_end(queue, priority, max_stime))]  # (a head is sorted)
        if not due:
            continue  # only future jobs in this band: the next one may have due jobs
        if limit == 1:
            return [_at_place(tr, due)]
        picked += _run(due, limit - len(picked))
        if len(picked) == limit:
            break
    return picked


def pick_one(tr, queue: bytes, max_stime: float) -> tuple[bytes | None, bool]:
    """One due key of the queue whose prefix is ``queue`` (as :func:`pick_from`), and
    whether the head read showed other keys in the queue (False: maybe none)."""
    for priority, head in queue_bands(tr, queue, SAMPLE, seen=_seen(tr)):
        due = head[:bisect_left(head, _due_end(queue, priority, max_stime))]  # (a head is sorted)
        if due:
            return _at_place(tr, due), len(head) > 1
    return None, False


def _run(keys_: list[bytes], n: int) -> list[bytes]:
    """``n`` neighbouring keys at a random place in ``keys_`` (all of them if fewer)."""
    if len(keys_) <= n:
        return keys_
    start = random.randrange(len(keys_) - n + 1)
    return keys_[start:start + n]


def _pick_near_uuid(tr, type: str, limit: int) -> list[bytes]:
    """Up to ``limit`` jobs scheduled at 0 near a random UUID, best band first."""
    picked: list[bytes] = []
    for priority, head in bands(tr, type):
        if keys.pending_entry(head[0])[1] != 0.0:
            continue  # the band's first job is scheduled later: none at 0 in it
        prefix = keys.band_prefix(type, priority, 0.0)
        probe = prefix + pack_str(uuid.uuid4().hex)  # where a job of that id would be
        if limit == 1:
            return _one_near(tr, prefix, probe)
        picked += _run_near(tr, prefix, probe, limit - len(picked))
        if len(picked) == limit:
            break
    return picked


def _one_near(tr, prefix: bytes, probe: bytes) -> list[bytes]:
    """The key under ``prefix`` nearest ``probe``, after or before it (50/50, so neither
    end of the id space waits longer than the other)."""
    after = KeySelector.first_greater_or_equal(probe)
    before = KeySelector.last_less_or_equal(probe)
    for selector in (after, before) if random.random() < 0.5 else (before, after):
        key = bytes(tr.snapshot.get_key(selector).wait())
        if key.startswith(prefix) and key != prefix:
            return [key]
    return []


def _run_near(tr, prefix: bytes, probe: bytes, limit: int) -> list[bytes]:
    """Up to ``limit`` keys under ``prefix`` from ``probe`` on (wrapping around)."""
    picked = _read(tr, probe, strinc(prefix), limit)
    if len(picked) < limit:
        picked += _read(tr, prefix, probe, limit - len(picked))
    return picked


def count(tr, type: str, max_stime: float | None = None, limit: int | None = None) -> int:
    """Pending jobs scheduled at or before ``max_stime`` (None: all), at most ``limit``,
    keyed jobs included.  A snapshot read."""
    total = count_in(tr, keys.pending_prefix(type), max_stime, limit)
    if limit is not None and total >= limit:
        return total
    if max_stime is None:  # every keyed job: one range
        begin = keys.KPENDING.pack((type,))
        return total + len(_read(tr, begin, strinc(begin), 0 if limit is None else limit - total))
    for key in queued_keys(tr, type):
        total += count_in(tr, keys.key_queue(type, key), max_stime, None if limit is None else limit - total)
        if limit is not None and total >= limit:
            break
    return total


def queued_keys(tr, type: str) -> list[str]:
    """Every job key of ``type`` with pending jobs (a snapshot read of their places)."""
    r = keys.KEY_STATE[type].range()
    return [keys.KEY_STATE.unpack(bytes(k))[1] for k, _v in tr.snapshot.get_range(r.start, r.stop)]


def count_in(tr, queue: bytes, max_stime: float | None, limit: int | None) -> int:
    """:func:`count` of the queue whose prefix is ``queue``."""
    total = 0
    for priority, _head in queue_bands(tr, queue):
        if limit is not None and total >= limit:
            break
        begin = keys.queue_band(queue, priority)
        end = strinc(begin) if max_stime is None else _due_end(queue, priority, max_stime)
        total += len(_read(tr, begin, end, 0 if limit is None else limit - total))
    return total


def next_due(tr, type: str, after: float) -> float | None:
    """Scheduled time of the earliest pending job due later than ``after``, if any, in any
    band.  Snapshot reads: the pending watch covers changes."""
    return next_due_in(tr, keys.pending_prefix(type), after)


def next_due_in(tr, queue: bytes, after: float) -> float | None:
    """:func:`next_due` of the queue whose prefix is ``queue``."""
    earliest = None
    for priority, _head in queue_bands(tr, queue):
        later = _read(tr, _due_end(queue, priority, after), strinc(keys.queue_band(queue, priority)), 1)
        if later:
            stime = keys.entry_in(queue, later[0])[1]
            earliest = stime if earliest is None else min(earliest, stime)
    return earliest


def watch(tr, type: str):
    """Watch that fires when a job of ``type`` is enqueued or the type resumes (wait on it
    after commit; cancel it to stop waiting): a share of the watches of the type's wake
    keys that this process's waiting accepts hold together (``wakeups.py``).  A watch is a
    read: set it in a transaction that writes nothing, or that transaction conflicts with
    every concurrent enqueue (:func:`wakes_seen` there, then :func:`watch_joined` or
    :func:`wakes_unchanged` after it committed)."""
    return wakeups.watch_any(tr, keys.watches_pending_keys(type))


def wakes_seen(tr, type: str) -> tuple[int, list]:
    """``(read version, values)`` of the type's wake keys in ``tr``, read without a
    conflict: what :func:`watch_joined` and :func:`wakes_unchanged` need to watch from this
    transaction's view after it committed (for a transaction that writes)."""
    return tr.get_read_version().wait(), wakeups.seen(tr, *keys.watches_pending_range(type))


def watch_joined(db, type: str, seen: tuple[int, list]):
    """The watch :func:`watch` would have set in the transaction that read ``seen``
    (:func:`wakes_seen`), when one armed in this process covers it; else None: watch in a
    new transaction if :func:`wakes_unchanged`."""
    version, _values = seen
    return wakeups.joined_since(db, keys.watches_pending_keys(type), version)


def wakes_unchanged(tr, type: str, seen: tuple[int, list]) -> bool:
    """No job was enqueued (nor the type resumed) since ``seen`` was read: a watch set in
    ``tr`` then fires on every enqueue after it (the wake keys only grow)."""
    return wakeups.seen(tr, *keys.watches_pending_range(type)) == seen[1]
