"""Where a thread picks a lone job in a queue's head (``pending``): its *place*.

Workers that pick at once from one head conflict when they pick the same job (1020: the
loser's transaction is done again after a back-off).  A random pick met one pick in eight
with four workers.  A place per process, moved on by one each pick from a random start,
met less, but two places drifted close by chance, and places close together meet when one
picker's snapshot is a few commits older than the other's: every job taken below a place
moves the jobs above it one place down.

So the threads of one machine that pick from a store each hold a *slot* (a lock file in
the machine's temporary directory, named after the store id and the slot, ``lockfiles.py``:
freed, and its file removed, at the thread's end or its process's, or when the thread has
picked from ``STORES`` other stores since; the kernel frees it if the process dies), and
the slots are spread over the head as far apart as their number allows (``SPREAD``: 0,
8, 4, 12, 2, ...: four workers pick four places apart).  All places turn together, one place every
``ROTATE`` seconds of the wall clock: every place of a head is visited within ``SLOTS *
ROTATE`` (no job waits on a place that nobody holds), while the pickers keep their
distances.  At the end of each turn they move one place more: a picker taking one job a
step would otherwise pass over a job for ever (each pick below the job moves it down one
place as the picker's place moves up one).

Pickers this cannot tell apart (on other machines of one cluster, in containers with
temporary directories of their own, threads beyond ``SLOTS``, or with no store id or no
temporary directory to write) may hold one place, and would then meet at every pick.  A
thread whose recent attempts mostly conflicted (:func:`conflicted`: more than
``MOVE_AT``, on average, of the last eight or so) moves its place by a random offset for
``MOVED_FOR`` seconds; the few conflicts of well spread pickers (one in twenty-five
attempts with four) do not reach that.
"""

from __future__ import annotations

import atexit
import os
import random
import threading
import time
import weakref

from .. import lockfiles

SLOTS = 16  # places in a head (pending.SAMPLE), and slots per store and machine
SPREAD = (0, 8, 4, 12, 2, 10, 6, 14, 1, 9, 5, 13, 3, 11, 7, 15)  # slot -> its place: far apart
ROTATE = 0.004  # seconds a place is held before all move on by one
RETRY = 5.0  # seconds before a thread that found every slot taken tries again
STORES = 4  # stores a thread keeps its slots of (the one it used first is given up first)
DECAY = 7 / 8  # the conflict rate's weight of the past, at each pick
MOVE_AT = 0.4  # conflict rate (an average over about eight attempts) that moves a place
MOVED_FOR = 10.0  # seconds a moved place keeps its offset
_now = time.time  # (the wall clock: the same for every process of a machine)


class _Slot:
    """One slot held: the lock file's descriptor; dropped, the file is removed (a slot no
    thread holds needs no file: the next taker makes it again) and the slot freed."""

    __slots__ = ("fd", "path", "number", "__weakref__")

    def __init__(self, fd: int, path: str, number: int):
        self.fd, self.path, self.number = fd, path, number
        _held.add(self)

    def close(self, remove: bool = True, _remove=lockfiles.remove, _close=os.close) -> None:
        """Free the slot; ``remove=False``: without removing its file or unlocking it (a
        forked child's copy: the lock is the parent's).  (Bound: may run at exit.)"""
        fd, self.fd = self.fd, None
        if fd is None:
            return
        if remove:
            _remove(fd, self.path)
            return
        try:
            _close(fd)
        except OSError:
            pass

    def __del__(self):
        self.close()


class _Picker:
    """A thread's placing: its slot for each store id (of the last ``STORES`` it picked
    from), and its conflict rate and offset."""

    __slots__ = ("slots", "base", "rate", "offset", "offset_until")

    def __init__(self):
        self.slots: dict[bytes, _Slot | float] = {}  # store id -> slot, or when to try again
        self.base = random.randrange(SLOTS)  # (the place without a slot)
        self.rate = 0.0
        self.offset = 0
        self.offset_until = 0.0


_held: "weakref.WeakSet[_Slot]" = weakref.WeakSet()  # every slot of this process (forks)
_local = threading.local()


def _picker() -> _Picker:
    try:
        return _local.picker
    except AttributeError:
        _local.picker = picker = _Picker()
        return picker


def place(store_id: bytes | None) -> int:
    """This thread's place (0 to ``SLOTS - 1``) in a head of the store ``store_id``'s
    queues now: its slot's (taken at its first pick of the store), else a random one, as
    the places turn; counted as an attempt for the conflict rate."""
    picker = _picker()
    now = _now()
    picker.rate *= DECAY
    base = picker.base
    if store_id is not None:
        slot = picker.slots.get(store_id)
        if slot is None or (type(slot) is float and now >= slot):
            slot = picker.slots[store_id] = _take_slot(store_id) or now + RETRY
            if len(picker.slots) > STORES:  # (a process opening many stores: a descriptor each)
                _give_up(picker.slots.pop(next(iter(picker.slots))))
        if type(slot) is _Slot:
            base = SPREAD[slot.number]
    if picker.offset and now >= picker.offset_until:
        picker.offset = 0
    step = int(now / ROTATE)
    return (base + picker.offset + step + step // SLOTS) % SLOTS


def conflicted() -> None:
    """This thread's last attempt conflicted (1020): when most of its recent ones did, it
    has met another picker at every pick; its place moves by a random offset for a while."""
    picker = _picker()
    picker.rate += 1 - DECAY
    if picker.rate > MOVE_AT:
        picker.rate = 0.0
        picker.offset = random.randrange(1, SLOTS)
        picker.offset_until = _now() + MOVED_FOR


def slot_of(store_id: bytes) -> int | None:
    """The slot this thread holds for ``store_id``, if any."""
    slot = _picker().slots.get(store_id)
    return slot.number if type(slot) is _Slot else None


def _give_up(slot: _Slot | float) -> None:
    if type(slot) is _Slot:
        _held.discard(slot)
        slot.close()


def _take_slot(store_id: bytes) -> _Slot | None:
    """The first free slot of ``store_id`` on this machine, locked by a descriptor of this
    thread's own (two threads of a process exclude each other too); None if none is."""
    directory = lockfiles.directory("jobs-places")
    if directory is None:
        return None
    for number in range(SLOTS):
        path = os.path.join(directory, f"{store_id.hex()}-{number}")
        try:
            fd = lockfiles.try_lock(path)
        except OSError:
            return None
        if fd is not None:
            return _Slot(fd, path, number)
    return None


def _after_fork_in_child() -> None:
    """The slots belong to the parent: close the inherited descriptors without unlocking
    (the lock goes with the parent's), so that a child outliving its parent does not keep
    them; the child's threads take slots of their own, and draw their own base."""
    for slot in list(_held):
        slot.close(remove=False)
    _held.clear()
    global _local
    _local = threading.local()


def _give_up_all() -> None:
    """At exit: every slot freed and its file removed (the main thread's may never be
    collected)."""
    for slot in list(_held):
        slot.close()


os.register_at_fork(after_in_child=_after_fork_in_child)  # (random reseeds itself first)
atexit.register(_give_up_all)
