"""Removing a job whose row cannot be read (written by another program, damaged).

``remove`` reads the job's row to learn which keys name the job (its queue entry from the
row's priority, scheduled time and job key; its activity key from its Seq; its running
slots), so it cannot remove such a job.  :func:`remove_unreadable` finds those keys
instead, by reading the ranges of the type that may hold them, a page per transaction:

* queue entries: the type's queue (every band) and its job keys' queues;
* an activity key (a running job) and the running slots it holds;
* the finished index (a finished or failed job), found by the job's id as ``remove`` does.

Then, in one transaction, it removes the job as ``remove`` would have removed a job whose
row said what those keys say (``creator.remove_row``: the same keys cleared, the same
counts changed, the same wakes), after reading each key again: a key gone meanwhile (an
accept takes such a job off the queue unrun) is left out.  Nothing adds a key naming the
job while its row cannot be read: every writer reads the row first and stops there.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .. import checks, keys
from ..queue import finished as finished_index, rows
from ..calls import not_found, within_store
from ..codec import Row
from ..queue.creator import remove_row
from ..engine import strinc, value_of
from ..engine import LastAttempt, is_database, run

PAGE = 10_000  # keys read per transaction while looking (well within FoundationDB's 5 s)


@dataclass
class Found:
    """The keys that name a job, as found by :func:`remove_unreadable`: for people, and for
    the transaction that removes them."""

    queue: list[bytes] = field(default_factory=list)  # queue entries (any queue)
    activity: list[bytes] = field(default_factory=list)  # activity keys (a running job: one)
    slots: list[bytes] = field(default_factory=list)  # running slots held (the type's, its key's)
    finished: str | None = None  # "finished" or "failed": its entry in the finished index (read when removing)

    def summary(self) -> dict:
        return {"queue_entries": len(self.queue), "running": bool(self.activity),
                "slots": len(self.slots), "finished": self.finished}


def remove_unreadable(db, type: str, job_id: str) -> dict:
    """Remove job ``type``/``job_id`` whose row cannot be read, with every key that names
    it, as :func:`jobs.remove` removes a job (a worker running it gets Halt at its next
    update or finish).  Returns what it removed: ``queue_entries``,
    ``running``, ``slots``, ``finished`` (``"finished"``, ``"failed"`` or None).

    Takes a database, not a transaction: the type's queues are read a page per
    transaction (a queue of millions of jobs would not fit in one on FoundationDB).
    Raises NotFound when there is no such job, ValueError when its row can be read (use
    ``jobs.remove``)."""
    checks.name(type, "type")
    checks.name(job_id, "job id")
    if not is_database(db):
        raise checks.ArgumentTypeError(
            "remove_unreadable() reads the type's queues over several transactions, so it takes a database, "
            "not a transaction")
    within_store(db, lambda tr: _unreadable_row(tr, type, job_id))
    found = _look(db, type, job_id)
    removed = LastAttempt()

    def body(tr):
        if _unreadable_row(tr, type, job_id, gone_ok=removed.committed()) is None:
            return removed.value  # (an attempt whose commit result was unknown removed it)
        return removed.record(_remove(tr, type, job_id, found))

    return within_store(db, body).summary()


def _unreadable_row(tr, type: str, job_id: str, gone_ok: bool = False) -> bytes | None:
    """The job's row, which must be one that cannot be read: NotFound if there is none
    (None with ``gone_ok``), ValueError if it reads."""
    raw = value_of(tr.get(keys.data_key(type, job_id)))
    if raw is None:
        if gone_ok:
            return None
        raise not_found(tr, type, job_id)
    if rows.decode(raw, type, job_id, []) is not rows.UNREADABLE:
        raise ValueError(f"the row of job {type}/{job_id} can be read: remove it with jobs.remove "
                         "('jobsctl remove' without --unreadable)")
    return raw


def _look(db, type: str, job_id: str) -> Found:
    """The keys naming the job, read a page per transaction (snapshot reads: the removing
    transaction reads again those it removes)."""
    found = Found()
    tail, name = keys.pack_str(job_id), job_id.encode()
    for begin in (keys.pending_prefix(type), keys.KPENDING.pack((type,))):
        found.queue += [k for k, _v in _pages(db, begin, strinc(begin)) if k.endswith(tail) and keys.job_id_of(k) == job_id]
    found.activity = [k for k, v in _pages(db, *keys.activity_range(type)) if v == name]
    slots = keys.SLOTS.pack((type,))
    found.slots = [k for k, v in _pages(db, slots, strinc(slots)) if v == name]
    return found


def _pages(db, begin: bytes, end: bytes):
    """``(key, value)`` of ``[begin, end)``, :data:`PAGE` of them per transaction."""
    while begin is not None:
        page = run(db, lambda tr, begin=begin: [(bytes(k), bytes(v)) for k, v in
                                                 tr.snapshot.get_range(begin, end, limit=PAGE)])
        yield from page
        begin = page[-1][0] + b"\x00" if len(page) == PAGE else None


def _remove(tr, type: str, job_id: str, found: Found) -> Found:
    """Remove what of ``found`` still names the job, and its row, with ``remove_row`` on a
    row made of what each key says: a queue entry is a pending job's, an activity key with
    its slots a running job's, and a job that is neither is a finished one (``finished.leave``
    then drops its entry, if it has one, and counts it out).  What it removed."""
    name = job_id.encode()
    reads = [(k, tr.get(k)) for k in found.queue + found.activity + found.slots]  # (together: one round trip)
    entry = finished_index.entry_of(tr, type, job_id)
    now = {k: value_of(f) for k, f in reads}
    queue = [k for k in found.queue if now[k] is not None]
    activity, slots = ([k for k in keys_found if now[k] == name] for keys_found in (found.activity, found.slots))
    made = list(dict.fromkeys(_pending_row(k) for k in queue))
    if activity:
        _type, seq = keys.ACTIVITY.unpack(activity[0])
        made.append(Row(seq, b"", 0.0, False, b"", slots=_slots_field(slots)))
        made += [Row(keys.ACTIVITY.unpack(k)[1], b"", 0.0, False, b"") for k in activity[1:]]
    elif slots:  # (slots held with no activity key: freed, as a running job's would be)
        rows.stop_running(tr, type, job_id, Row(None, b"", 0.0, False, b"", slots=_slots_field(slots)),
                          changed=lambda *_args: None)
    if not made:
        made.append(Row(b"", None, 0.0, False, b""))  # (finished: a Seq and no lock)
    for row in made:
        remove_row(tr, type, job_id, row)
    return Found(queue, activity, slots, None if entry is None else entry[0])


def _pending_row(entry: bytes) -> Row:
    """A pending row saying what queue entry ``entry`` says."""
    _type, priority, stime, _id = keys.queue_entry(entry)
    key = keys.KPENDING.unpack(entry)[1] if entry.startswith(keys.KPENDING.key()) else None
    return Row(None, None, stime, False, b"", priority=priority, key=key)


def _slots_field(slots: list[bytes]) -> tuple | None:
    """A row's ``slots`` field, ``(type slot, key, key slot)``, of the running slot keys
    found (the type's has no scope, a job key's its key)."""
    type_slot = key = key_slot = None
    for slot in slots:
        _type, scope, index = keys.SLOTS.unpack(slot)
        if scope is None:
            type_slot = index
        else:
            key, key_slot = scope, index
    return None if type_slot is None and key_slot is None else (type_slot, key, key_slot)

