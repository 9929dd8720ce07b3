"""Fair turns between job keys (``add(..., key="tenant-42")``).

A keyed job waits in its key's own queue (``kpending/Type/Key``: bands by priority, then
scheduled time, as the type's queue).  Each key with pending jobs is in one of three
places, and ``key/Type/Key`` says which:

* the *rotation* ``keys/Type/0/Turn/Key``: accept serves a key whose turn is the lowest
  (one of them at random), takes one of its due jobs, and moves the key to the next turn.
  A key that comes in (its first job, or back from the places below) takes the lowest turn
  there is: it is served before any key is served twice.  So a key with 100,000 jobs
  delays another key's first job by at most one pick: start-time fair queueing with
  every job counted as one.
* *asleep* ``keys/Type/1/Until/Key``: its next job is scheduled for later, or its rate
  limit is spent, until Until; accepts wake it then (a few per attempt).
* *full* ``keys/Type/2/Key``: its running limit is reached; the finish that frees one of
  its slots puts it back (``limits.py``).

Jobs without a key are served by the type's queue as before; once some keys are in the
rotation, the unkeyed jobs take part in it as one more key, whose turn is
``unkeyed_turn/Type``.  Within a key, priorities and scheduled times order the jobs as in
the type's queue; across keys, turns do (a key's priority-0 job may run before another
key's priority -5 job).

Contention: a key alone in the rotation is not moved at all (every worker takes from its
queue at random, as from the type's queue); otherwise moving a key adds a read conflict on
its rotation entry, so two workers that chose the same key at once conflict, and the
loser, retrying, finds the next key at the lowest turn.  The key's place (``key/``) is
written only when the key comes, leaves, sleeps or wakes, so adds of a busy key do not
conflict with the accepts that serve it.
"""

from __future__ import annotations

import math
import random
import time

from .. import keys
from ..indexes import pending
from ..codec import pack_int, pack_str
from ..engine import KeySelector, strinc, value_of
from ..engine import tuple as fdb_tuple

TURNS, ASLEEP, FULL = 0, 1, 2  # the parts of ``keys/Type``
PLACES = {"turns": TURNS, "asleep": ASLEEP, "full": FULL}  # their names, for people
HEAD = 16  # rotation entries read to find the keys whose turn it is
WAKE = 8  # sleepers woken per accept attempt
STEPS = 32  # keys looked at per accept attempt before attempting again (each makes progress)


def _turn_key(type: str, turn: int, key: str) -> bytes:
    return keys.keys_prefix(type, TURNS) + pack_int(turn) + pack_str(key)


def _asleep_key(type: str, until: float, key: str) -> bytes:
    return keys.KEYS.pack((type, ASLEEP, float(until), key))


def _full_key(type: str, key: str) -> bytes:
    return keys.keys_prefix(type, FULL) + pack_str(key)


def _place(tr, type: str, key: str) -> tuple | None:
    """Where ``key`` is: ``(TURNS,)``, ``(ASLEEP, until)``, ``(FULL,)`` or None (a
    conflicting read)."""
    raw = value_of(tr.get(keys.key_state_key(type, key)))
    return None if raw is None else fdb_tuple.unpack(raw)


def _set_place(tr, type: str, key: str, place: tuple | None) -> None:
    if place is None:
        tr.clear(keys.key_state_key(type, key))
    else:
        tr.set(keys.key_state_key(type, key), fdb_tuple.pack(place))


def _snapshot_first(tr, begin: bytes, end: bytes, limit: int) -> list[bytes]:
    return [bytes(k) for k, _v in tr.snapshot.get_range(begin, end, limit=limit)]


def probe(tr, type: str):
    """A future of the first fairness key of ``type`` at or after its prefix (a snapshot
    read), for :func:`turns_for`: asked for with an accept's first reads, it answers with
    them, so that the commonest case (no key has pending jobs) costs no round trip of its
    own on a cluster."""
    return tr.snapshot.get_key(KeySelector.first_greater_or_equal(keys.keys_prefix(type)))


def turns_for(tr, type: str, admission, max_stime: float, now: float, first=None) -> Turns | None:
    """The :class:`Turns` of an accept attempt, None when no key of ``type`` has pending
    jobs (one snapshot read, whose entries the first pick uses; none when ``first``, the
    attempt's :func:`probe`, found no key)."""
    prefix = keys.keys_prefix(type)
    if first is not None and not bytes(first.wait()).startswith(prefix):
        return None
    head = _snapshot_first(tr, prefix, strinc(prefix), HEAD)
    return Turns(tr, type, admission, max_stime, now, head) if head else None


def lowest_turn(tr, type: str) -> int:
    """The turn a key coming in takes: the rotation's lowest, else the unkeyed jobs' turn."""
    prefix = keys.keys_prefix(type, TURNS)
    head = _snapshot_first(tr, prefix, strinc(prefix), 1)
    if head:
        return keys.KEYS.unpack(head[0])[2]
    raw = value_of(tr.snapshot.get(keys.unkeyed_turn_key(type)))
    return 0 if raw is None else fdb_tuple.unpack(raw)[0]


def _come_in(tr, type: str, key: str, stime: float) -> None:
    """Put ``key`` in the rotation at the lowest turn, or asleep until ``stime``."""
    if stime <= time.time():
        tr.set(_turn_key(type, lowest_turn(tr, type), key), b"")
        _set_place(tr, type, key, (TURNS,))
    else:
        tr.set(_asleep_key(type, stime, key), b"")
        _set_place(tr, type, key, (ASLEEP, float(stime)))


def enqueue(tr, type: str, priority: int, stime: float, job_id: str, key: str | None) -> None:
    """Queue a job (``pending.enqueue``), and bring its key in (:func:`queued`)."""
    pending.enqueue(tr, type, priority, stime, job_id, key)
    if key is not None:
        queued(tr, type, key, stime)


def queued(tr, type: str, key: str, stime: float) -> None:
    """A job of ``key`` scheduled at ``stime`` was enqueued: bring the key in, or wake it
    sooner.  Reads the key's place with a conflict (written only when it moves between
    places), so that a key leaving the rotation meanwhile is seen."""
    place = _place(tr, type, key)
    if place is None:
        _come_in(tr, type, key, stime)
    elif place[0] == ASLEEP and stime < place[1]:
        tr.clear(_asleep_key(type, place[1], key))
        _come_in(tr, type, key, stime)


def unblock(tr, type: str, key: str) -> None:
    """One of ``key``'s running slots was freed: a key that was full comes back in."""
    if _place(tr, type, key) == (FULL,):
        tr.clear(_full_key(type, key))
        _come_in(tr, type, key, 0.0)


def next_due(tr, type: str) -> float | None:
    """When the first sleeping key wakes (a snapshot read), None if none sleeps."""
    prefix = keys.keys_prefix(type, ASLEEP)
    head = _snapshot_first(tr, prefix, strinc(prefix), 1)
    return keys.KEYS.unpack(head[0])[2] if head else None


def counts(tr, type: str) -> dict[str, int]:
    """How many keys are in each place (snapshot reads in one transaction: for tests and
    small stores; ``jobsctl status`` counts the same ranges in pages)."""
    out = {}
    for name, part in PLACES.items():
        prefix = keys.keys_prefix(type, part)
        out[name] = sum(1 for _ in tr.snapshot.get_range(prefix, strinc(prefix)))
    return out


class Turns:
    """One accept attempt's picks in the rotation of ``type``: ``pick(limit)`` returns
    ``(pending key, job key)`` pairs for ``pending.take``; the keys' slots are taken
    through ``admission`` as they are picked.  ``wrote``: the rotation changed (keys
    moved, slept or left) even if nothing was picked."""

    def __init__(self, tr, type: str, admission, max_stime: float, now: float, head: list[bytes]):
        self.tr, self.type, self.adm = tr, type, admission
        self.max_stime, self.now = max_stime, now
        self.wrote = False
        self._unkeyed = keys.pending_prefix(type)
        # The first entries of keys/Type (turns, then sleepers, then full keys), as read
        # before this attempt changed any: spares the first step's reads.
        self._head = [keys.KEYS.unpack(k)[1:] for k in head]
        self._head_complete = len(head) < HEAD  # every entry of keys/Type is in it

    def pick(self, limit: int) -> list[tuple[bytes, str | None]]:
        self._wake_sleepers()
        picked: list[tuple[bytes, str | None]] = []
        for _ in range(STEPS):
            if len(picked) == limit:
                break
            turns, unkeyed, unkeyed_turn = self._candidates()
            if not turns and unkeyed is None:
                break
            lowest = turns[0][0] if turns else None
            at_lowest = [entry for entry in turns if entry[0] == lowest]
            if unkeyed is not None and lowest is not None and unkeyed_turn < lowest:
                at_lowest = []  # the unkeyed jobs' turn is the lowest
            choice = random.randrange(len(at_lowest) + (unkeyed is not None))
            if choice == len(at_lowest):  # the unkeyed jobs' turn
                if lowest is not None:
                    self._set_unkeyed_turn(unkeyed_turn + 1)
                self.tr.clear(unkeyed)  # (taken by the caller; cleared now so no step picks it again)
                picked.append((unkeyed, None))
                continue
            turn, key = at_lowest[choice]
            alone = len(turns) == 1 and unkeyed is None
            job = self._serve(turn, key, alone)
            if job is not None:
                picked.append((job, key))
        return picked

    def _candidates(self) -> tuple[list[tuple[int, str]], bytes | None, int | None]:
        """The rotation's first entries ``(turn, key)``; a due unkeyed job if it is the
        unkeyed jobs' turn (theirs at or below the lowest), and their turn.  Unkeyed jobs
        come in at the lowest turn, as a key does: their turn is recorded when an accept
        first sees them due, and forgotten when one sees none due (so a turn left from
        long ago does not give them a run of picks)."""
        if not self.wrote:  # the head read first is still true
            turns = [entry[1:] for entry in self._head if entry[0] == TURNS]
        else:
            prefix = keys.keys_prefix(self.type, TURNS)
            turns = [keys.KEYS.unpack(k)[2:] for k in _snapshot_first(self.tr, prefix, strinc(prefix), HEAD)]
        lowest = turns[0][0] if turns else None
        raw = value_of(self.tr.snapshot.get(keys.unkeyed_turn_key(self.type)))
        turn = None if raw is None else fdb_tuple.unpack(raw)[0]
        if turn is not None and lowest is not None and turn > lowest:
            return turns, None, turn  # served this turn already
        found = pending.pick_from(self.tr, self._unkeyed, self.max_stime, 1)
        if not found:
            if turn is not None and lowest is not None and turn < lowest:
                self.tr.clear(keys.unkeyed_turn_key(self.type))
            return turns, None, turn
        if turn is None and lowest is not None:
            turn = lowest
            self._set_unkeyed_turn(turn)
        return turns, found[0], turn

    def _set_unkeyed_turn(self, turn: int) -> None:
        self.tr.set(keys.unkeyed_turn_key(self.type), fdb_tuple.pack((turn,)))

    def _serve(self, turn: int, key: str, alone: bool) -> bytes | None:
        """Take one due job of ``key`` (at ``turn``) if it may start, and move the key on:
        to the next turn, asleep, full, or out of the rotation when its queue is empty."""
        tr, entry = self.tr, _turn_key(self.type, turn, key)
        queue = keys.key_queue(self.type, key)
        found, more = pending.pick_one(tr, queue, self.max_stime)
        if not found:
            upcoming = pending.next_due_in(tr, queue, self.max_stime)
            self._leave(entry, key, queue) if upcoming is None else self._sleep(entry, key, upcoming)
            return None
        job = found
        wait = self.adm.key_wait(key, keys.job_id_of(job))
        if wait is not None:
            self._sleep(entry, key, wait)
            return None
        tr.clear(job)  # (taken by the caller; cleared here so that the next read below skips it)
        if not more and not _snapshot_first(tr, queue, strinc(queue), 1):
            self._leave(entry, key, queue)
        elif not alone:
            tr.add_read_conflict_key(entry)
            tr.clear(entry)
            tr.set(_turn_key(self.type, turn + 1, key), b"")
            self.wrote = True
        return job

    def _leave(self, entry: bytes, key: str, queue: bytes) -> None:
        """``key`` has no pending job left: out of the rotation.  A conflicting read of its
        whole queue: an add meanwhile makes this attempt retry (and the key stay)."""
        self.tr.add_read_conflict_key(entry)
        self.tr.add_read_conflict_range(queue, strinc(queue))
        self.tr.clear(entry)
        _set_place(self.tr, self.type, key, None)
        self.wrote = True

    def _sleep(self, entry: bytes, key: str, until: float) -> None:
        """``key`` waits: until ``until`` (its next job, or its next rate slot), or, when
        ``until`` is infinite, until one of its running slots is freed."""
        tr = self.tr
        tr.add_read_conflict_key(entry)
        tr.clear(entry)
        if math.isinf(until):
            tr.set(_full_key(self.type, key), b"")
            _set_place(tr, self.type, key, (FULL,))
        else:
            tr.set(_asleep_key(self.type, until, key), b"")
            _set_place(tr, self.type, key, (ASLEEP, float(until)))
        self.wrote = True

    def _wake_sleepers(self) -> None:
        """Bring back up to WAKE keys whose time has come (``now``: a rate slot frees by
        the clock, whatever ``max_sched_time`` the accept was given)."""
        if self._head_complete:  # every sleeper is in the head
            due = [_asleep_key(self.type, entry[1], entry[2]) for entry in self._head
                   if entry[0] == ASLEEP and entry[1] <= self.now][:WAKE]
        else:
            prefix = keys.keys_prefix(self.type, ASLEEP)
            end = strinc(keys.KEYS.pack((self.type, ASLEEP, float(self.now))))
            due = _snapshot_first(self.tr, prefix, end, WAKE)
        if not due:
            return
        turn = lowest_turn(self.tr, self.type)
        for sleeper in due:
            _type, _part, _until, key = keys.KEYS.unpack(sleeper)
            self.tr.add_read_conflict_key(sleeper)
            self.tr.clear(sleeper)
            self.tr.set(_turn_key(self.type, turn, key), b"")
            _set_place(self.tr, self.type, key, (TURNS,))
        self.wrote = True
