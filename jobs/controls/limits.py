"""Concurrency and rate limits per type and per job key (``limits/Type``), kept exactly
across processes and machines by *slots*: a job starts only by taking one slot of each
limit that applies to it, in the transaction that accepts it.

* Running limit ``N``: slots ``slots/Type/Scope/0..N-1`` (Scope: None for the type, the
  job's key for ``key_concurrency``); a running job holds one (its row says which:
  ``Row.slots``) until it stops running (finish, release, re-enqueued by the activity
  monitor, removed), which frees it and wakes the waiting accepts.
* Rate limit ``M`` per ``P`` seconds: slots ``starts/Type/Scope/0..M-1``, each holding when
  it last started a job; a slot is free again ``P`` seconds after that, so no window of
  ``P`` seconds holds more than ``M`` starts (by the accepting processes' clocks).

An accept looks for free slots from a random place (snapshot reads) and adds one read
conflict key per slot it takes: accepts that take different slots never conflict, two
that take the same one conflict at commit and the loser retries, so a limit is never
exceeded, however many workers race, and never serialises them either.

Limits count the jobs started while they are set: jobs already running when a type's
first limit is set hold no slot and do not count; lowering a limit lets the jobs above it
finish.  Jobs without a key are not subject to the key limits.
"""

from __future__ import annotations

import math
import random
import struct
from dataclasses import dataclass

from .. import checks, keys
from ..indexes import pending
from ..calls import within_store
from ..codec import pack_int
from ..engine import tuple as fdb_tuple
from ..engine import strinc, value_of
from ..errors import StoreError

MAX_SLOTS = 10_000  # largest limit: a full limit is read whole by the accepts that wait on it
WINDOW = 64  # slots read per range read while looking for free ones
_AT = struct.Struct(">d")


@dataclass(frozen=True, slots=True)
class Rate:
    """At most ``count`` jobs started per ``seconds``."""

    count: int
    seconds: float

    def __str__(self) -> str:
        return f"{self.count}/{self.seconds:g}s"


@dataclass(frozen=True, slots=True)
class Limits:
    """A type's limits (None: none of that kind): ``concurrency`` jobs running at once and
    ``rate`` jobs started per period for the whole type; ``key_concurrency`` and
    ``key_rate`` the same for each job key (``add(..., key=...)``) on its own."""

    concurrency: int | None = None
    rate: Rate | None = None
    key_concurrency: int | None = None
    key_rate: Rate | None = None

    @property
    def keyed(self) -> bool:
        return self.key_concurrency is not None or self.key_rate is not None

    def __str__(self) -> str:
        parts = [f"{name} {value}" for name, value in (
            ("running", self.concurrency), ("rate", self.rate),
            ("per key running", self.key_concurrency), ("per key rate", self.key_rate)) if value is not None]
        return ", ".join(parts) or "none"


def _count(value, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise checks.ArgumentTypeError(f"{what} must be an int, not {type(value).__name__}")
    if not 1 <= value <= MAX_SLOTS:
        raise ValueError(f"{what} must be from 1 to {MAX_SLOTS}, not {value} (to stop a type, pause it)")
    return value


def _rate(value, what: str) -> Rate | None:
    if value is None:
        return None
    if isinstance(value, Rate):
        value = (value.count, value.seconds)
    if not isinstance(value, tuple) or len(value) != 2:
        raise checks.ArgumentTypeError(f"{what} must be (count, seconds), e.g. (100, 60), not {value!r:.80}")
    count = _count(value[0], f"{what}'s count")
    return Rate(count, checks.seconds(value[1], f"{what}'s seconds", positive=True))


def set_limits(tr, type: str, *, concurrency: int | None = None, rate=None,
               key_concurrency: int | None = None, key_rate=None) -> None:
    """Set the limits of ``type``, replacing all its previous ones (None: no limit of that
    kind; all None clears them).  ``concurrency``: most jobs of the type running at once;
    ``rate``: ``(count, seconds)``, most jobs started per ``seconds``; ``key_concurrency``
    and ``key_rate``: the same for each job key.  Every accept of every process follows
    them from its next attempt.  ValueError for a bad name or value (counts from 1 to
    MAX_SLOTS, seconds positive)."""
    checks.name(type, "type", new=True)
    new = Limits(_count(concurrency, "concurrency"), _rate(rate, "rate"),
                 _count(key_concurrency, "key_concurrency"), _rate(key_rate, "key_rate"))

    def body(tr):
        if new == Limits():
            tr.clear(keys.limits_key(type))
        else:
            keys.ensure_layout(tr)  # (maybe before the type has a timeout)
            tr.set(keys.limits_key(type), _encode(new))
        pending.wake(tr, type)  # accepts waiting on a full limit look again

    within_store(tr, body)


def clear_limits(tr, type: str) -> None:
    """Remove every limit of ``type``."""
    set_limits(tr, checks.name(type, "type"))


def get_limits(tr, type: str) -> Limits | None:
    """The limits of ``type``, None when it has none."""
    checks.name(type, "type")
    return within_store(tr, lambda tr: decode(value_of(read(tr, type))))


def limited_types(tr) -> dict[str, Limits]:
    """Type -> its limits, for every type that has some (a snapshot read, for people)."""
    r = keys.LIMITS.range()
    return {keys.LIMITS.unpack(k)[0]: decode(v) for k, v in tr.snapshot.get_range(r.start, r.stop)}


def read(tr, type: str):
    """Future of the type's limits record, read with a conflict (accept decides on it)."""
    return tr.get(keys.limits_key(type))


def _encode(limits: Limits) -> bytes:
    rate, key_rate = limits.rate, limits.key_rate
    return fdb_tuple.pack((
        limits.concurrency, None if rate is None else rate.count, None if rate is None else rate.seconds,
        limits.key_concurrency, None if key_rate is None else key_rate.count,
        None if key_rate is None else key_rate.seconds,
    ))


def decode(raw: bytes | None) -> Limits | None:
    if raw is None:
        return None
    try:
        conc, count, seconds, key_conc, key_count, key_seconds = fdb_tuple.unpack(raw)
        return Limits(conc, None if count is None else Rate(count, float(seconds)),
                      key_conc, None if key_count is None else Rate(key_count, float(key_seconds)))
    except (ValueError, TypeError) as exc:
        raise StoreError(f"a type's limits record is corrupt ({exc}): set the limits again") from exc


# --- slots ---------------------------------------------------------------------------------


def _slot(prefix: bytes, index: int) -> bytes:
    return prefix + pack_int(index)


def _free(tr, prefix: bytes, n: int, want: int, cutoff: float | None) -> tuple[list[int], float | None]:
    """Up to ``want`` free slots of ``n`` under ``prefix``, looked for from a random one on
    (snapshot reads); free: absent, or (rate slots, ``cutoff`` given) last used at or before
    ``cutoff``.  Also the earliest use among the rate slots seen in use (None: none)."""
    start = random.randrange(n)
    found: list[int] = []
    earliest = None
    for lo, hi in ((start, n), (0, start)):
        for first in range(lo, hi, WINDOW):
            last = min(hi, first + WINDOW)
            used = {fdb_tuple.unpack(bytes(k)[len(prefix):])[0]: bytes(v)
                    for k, v in tr.snapshot.get_range(_slot(prefix, first), _slot(prefix, last))}
            for index in range(first, last):
                value = used.get(index)
                at = None if value is None or cutoff is None else _AT.unpack(value)[0]
                if value is None or (at is not None and at <= cutoff):
                    found.append(index)
                    if len(found) == want:
                        return found, earliest
                elif at is not None:
                    earliest = at if earliest is None else min(earliest, at)
    return found, earliest


class Admission:
    """What one accept attempt may start under the limits of ``type`` (``limits``: its
    record, None for none), at ``now`` (the accepting process's clock).

    ``room(want)``: how many jobs the type-wide limits let start now (up to ``want``);
    when fewer, ``due`` is when the next rate slot frees.  ``key_wait(key, job_id)``: take
    the key's slots for the job picked from it, or say when to look at the key again.
    ``hold(job_id, key)``: the slots the job holds, for its row (after its row was found
    pending; ``drop(job_id)`` gives back a key's slots taken for a job that was not)."""

    def __init__(self, tr, type: str, limits: Limits | None, now: float):
        self.tr, self.type, self.limits, self.now = tr, type, limits, now
        self.due: float | None = None
        self._type_slots: list[tuple[int | None, int | None]] = []
        self._key_slots: dict[str, tuple[str, int | None, int | None]] = {}  # job id -> (key, slots)

    def _find(self, scope: str | None, concurrency: int | None, rate: Rate | None, want: int):
        """Free (running, rate) slot pairs of ``scope``, up to ``want``, and when the next
        rate slot frees if there are fewer (None: not for want of a rate slot)."""
        running = starts = [None] * want
        due = None
        if concurrency is not None:
            running, _ = _free(self.tr, keys.slots_prefix(self.type, scope), concurrency, want, None)
        if rate is not None:
            starts, earliest = _free(self.tr, keys.starts_prefix(self.type, scope), rate.count, want,
                                     self.now - rate.seconds)
            if len(starts) < want and earliest is not None:
                due = earliest + rate.seconds
        return list(zip(running, starts)), due

    def room(self, want: int) -> int:
        lim = self.limits
        if lim is None or (lim.concurrency is None and lim.rate is None):
            return want
        self._type_slots, self.due = self._find(None, lim.concurrency, lim.rate, want)
        return len(self._type_slots)

    def key_wait(self, key: str, job_id: str) -> float | None:
        """None: the job ``job_id`` of ``key`` may start, and the key's slots for it are
        taken (so the next job of the key looks for others).  Else when to look at the key
        again: ``math.inf`` when its running slots are all held (with a read conflict on
        them: a finish that frees one meanwhile makes this attempt retry), or when its
        next rate slot frees."""
        lim = self.limits
        if lim is None or not lim.keyed:
            return None
        running = start = None
        if lim.key_concurrency is not None:
            prefix = keys.slots_prefix(self.type, key)
            free_running, _ = _free(self.tr, prefix, lim.key_concurrency, 1, None)
            if not free_running:
                self.tr.add_read_conflict_range(prefix, _slot(prefix, lim.key_concurrency))
                return math.inf
            running = free_running[0]
        if lim.key_rate is not None:
            rate = lim.key_rate
            free_starts, earliest = _free(self.tr, keys.starts_prefix(self.type, key), rate.count, 1,
                                          self.now - rate.seconds)
            if not free_starts:
                return earliest + rate.seconds
            start = free_starts[0]
        self._key_slots[job_id] = (key, running, start)
        self._take(key, running, start, job_id)
        return None

    def drop(self, job_id: str) -> None:
        """Give back the key slots taken for ``job_id`` (its queue entry was stale)."""
        taken = self._key_slots.pop(job_id, None)
        if taken is not None:
            key, running, start = taken
            for prefix, index in ((keys.slots_prefix(self.type, key), running),
                                  (keys.starts_prefix(self.type, key), start)):
                if index is not None:
                    self.tr.clear(_slot(prefix, index))

    def hold(self, job_id: str) -> tuple | None:
        """Take the type's slots for ``job_id``: the row's ``slots`` field, ``(type
        running slot, key, key running slot)``; None when it holds no running slot."""
        type_slot = None
        if self._type_slots:
            type_slot, type_start = self._type_slots.pop()
            self._take(None, type_slot, type_start, job_id)
        key, key_slot, _start = self._key_slots.pop(job_id, (None, None, None))
        if type_slot is None and key_slot is None:
            return None
        return (type_slot, None if key_slot is None else key, key_slot)

    def _take(self, scope: str | None, running: int | None, start: int | None, job_id: str) -> None:
        tr = self.tr
        if running is not None:
            slot = _slot(keys.slots_prefix(self.type, scope), running)
            tr.add_read_conflict_key(slot)
            tr.set(slot, job_id.encode())
        if start is not None:
            slot = _slot(keys.starts_prefix(self.type, scope), start)
            tr.add_read_conflict_key(slot)
            tr.set(slot, _AT.pack(self.now))


def free(tr, type: str, slots: tuple | None) -> str | None:
    """Give back the running slots a row held (its ``slots`` field) when its job stops
    running, and wake the accepts waiting for them; the job key whose slot was freed
    (None: none)."""
    if not slots:
        return None
    type_slot, key, key_slot = slots
    if type_slot is not None:
        tr.clear(_slot(keys.slots_prefix(type, None), type_slot))
    if key_slot is not None:
        tr.clear(_slot(keys.slots_prefix(type, key), key_slot))
    pending.wake(tr, type)
    return key if key_slot is not None else None


def usage(tr, type: str, limits: Limits, now: float) -> tuple[int | None, int | None]:
    """(jobs of ``type`` holding a running slot, jobs started in the last rate period) as
    far as ``limits`` has such limits (None where it has not): snapshot reads, for people."""
    running = started = None
    if limits.concurrency is not None:
        prefix = keys.slots_prefix(type, None)
        running = sum(1 for _ in tr.snapshot.get_range(prefix, strinc(prefix)))
    if limits.rate is not None:
        prefix, cutoff = keys.starts_prefix(type, None), now - limits.rate.seconds
        started = sum(1 for _k, v in tr.snapshot.get_range(prefix, strinc(prefix)) if _AT.unpack(v)[0] > cutoff)
    return running, started
