"""Job rows and the activity index (couch_jobs_fdb's part): ``data``, ``activity`` and
``watches_activity``.

Every change to a running job stamps its row's Seq and its activity key ``(Type, Seq)`` with
one versionstamp of the commit, and stamps one of the type's ``watches_activity`` shards
(what the activity monitor, the notifier and the processors watch: ``activity.py``).
Several running rows may be stamped in one transaction (a worker updating two jobs together): each gets its own versionstamp *user version*, so
their activity keys stay distinct (in couch_jobs the second would overwrite the first).
"""

from __future__ import annotations

import functools

from .. import ahead, keys, txstate
from ..indexes import counts, pending
from ..controls import fairness, limits
from ..codec import Lost, Row, decode_row, encode_new_row, encode_row, encode_stamped_row
from ..engine import Versionstamp, value_of
from ..errors import StoreError

_STAMP_AT_0 = bytes(10) + (0).to_bytes(4, "little")  # value = the 10-byte versionstamp
_USER_VERSIONS = 1 << 16

def _new_seq(tr) -> Versionstamp:
    """An incomplete versionstamp unique within ``tr`` (its user version counts up)."""
    return _incomplete(next(txstate.of(tr).stamps) % _USER_VERSIONS)


@functools.lru_cache(maxsize=4096)
def _incomplete(user_version: int) -> Versionstamp:
    """The incomplete versionstamp of ``user_version``, made once (the bindings' class
    checks its arguments in Python on every construction; nothing changes one after)."""
    return Versionstamp(user_version=user_version)


UNREADABLE = object()  # what ``decode`` returns, given ``unreadable``, for a row it cannot read
REMEDY = "jobs.remove_unreadable, or 'jobsctl remove --unreadable', removes such a job"


def get(tr, type: str, job_id: str, unreadable: list | None = None):
    """The job's row (a conflicting read), or None; ``unreadable``: as :func:`decode`."""
    return decode(value_of(ahead.read(tr, keys.data_key(type, job_id))), type, job_id, unreadable)


def decode(raw: bytes | None, type: str, job_id: str, unreadable: list | None = None):
    """The row read as ``raw`` (None: no such job).  A row that cannot be read (written by
    another program, damaged) raises StoreError naming the job, or, if ``unreadable`` is
    given, is named there as ``(type, id, error)`` and :data:`UNREADABLE` returned: the
    callers that pass such jobs over (re-enqueue, retention, accept, listing) leave them as
    they are, since nothing can tell what the row held."""
    if raw is None:
        return None
    try:
        return decode_row(raw, f"the row of job {type}/{job_id}")
    except StoreError as exc:
        error = f"{exc} ({REMEDY})"
        if unreadable is None:
            raise StoreError(error) from exc
        unreadable.append((type, job_id, error))
        return UNREADABLE


def put(tr, type: str, job_id: str, row: Row) -> None:
    """Write a row that is not running (pending or finished)."""
    key = keys.data_key(type, job_id)
    ahead.written(tr, key)
    tr.set(key, encode_row(row))


def put_running(tr, type: str, job_id: str, row: Row, stamp: bool = True) -> None:
    """Write a running row whose Seq is this commit's versionstamp, with its activity key
    (``row.seq`` is ignored; clear the previous activity key first).  ``stamp=False``: the
    caller stamps the type's activity itself (once for a batch)."""
    seq = _new_seq(tr)
    key = keys.data_key(type, job_id)
    ahead.written(tr, key)
    tr.set_versionstamped_value(key, encode_stamped_row(row, seq))
    tr.set_versionstamped_key(keys.stamped_activity_key(type, seq), job_id.encode())
    if stamp:
        bump_activity(tr, type)


def make_pending_many(tr, type: str, new: list[tuple[bytes, str, float, int, bytes]]) -> None:
    """Make new unkeyed jobs ``(data key, id, stime, priority, raw data)`` pending, as
    :func:`make_pending` does each, with the counts, wake and activity stamp written
    once for all."""
    queued = pending.queued_now()
    for key, job_id, stime, priority, raw in new:
        ahead.written(tr, key)
        tr.set(key, encode_new_row(stime, raw, priority))
        pending.put_entry(tr, type, priority, stime, job_id, None, queued)
    counts.queued_many(tr, type, [(priority, stime) for _key, _id, stime, priority, _raw in new])
    pending.wake(tr, type)
    bump_activity(tr, type)


def make_pending(tr, type: str, job_id: str, stime: float, raw: bytes, lost: Lost | None = None,
                 priority: int = 0, key: str | None = None) -> None:
    """Make the job pending at ``stime`` in band ``priority`` (of its job key's queue, if
    ``key``) with data ``raw`` (its old pending key and activity key removed, its running
    slots freed by the caller).  Clears LastLock: a creator's (or the monitor's) change.
    ``lost``: the run's lost-worker count to keep (None: a new run, counted from 0)."""
    put(tr, type, job_id, Row(None, None, stime, False, raw, lost=lost, priority=priority, key=key))
    fairness.enqueue(tr, type, priority, stime, job_id, key)
    bump_activity(tr, type)


def stop_running(tr, type: str, job_id: str, row: Row, changed=counts.changed) -> None:
    """The job (``row``), if running, stops running (finished, made pending, removed): drop
    its activity key and free its running slots; a job key that was full comes back in.
    ``changed``: how the running count is changed (``counts.Tally.changed`` for a batch)."""
    clear_activity(tr, type, row)
    if row.lock is not None:
        changed(tr, type, "running", -1)
        key = limits.free(tr, type, row.slots)
        if key is not None:
            fairness.unblock(tr, type, key)


def clear(tr, type: str, job_id: str) -> None:
    key = keys.data_key(type, job_id)
    ahead.written(tr, key)
    tr.clear(key)


def clear_activity(tr, type: str, row: Row) -> None:
    """Drop a running row's activity key (its Seq is a complete versionstamp by now)."""
    if row.seq is not None and row.lock is not None:
        tr.clear(keys.activity_key(type, row.seq))


def bump_activity(tr, type: str) -> None:
    """Stamp the type's activity (one of its ``watches_activity`` shards, the same for all
    of ``tr``'s stamps): wakes monitors and subscribers of the type."""
    tr.set_versionstamped_value(keys.watches_activity_key(type, counts.shard(tr, keys.ACTIVITY_SHARDS)), _STAMP_AT_0)


def scan(tr, type: str | None = None, unreadable: list | None = None):
    """``(type, id, Row)`` for every job, or every job of ``type``, in key order.  A row
    that cannot be read raises StoreError, or, if ``unreadable`` is given, is passed over
    and named there as ``(type, id, error)``."""
    r = (keys.DATA if type is None else keys.DATA[type]).range()
    for key, value in tr.get_range(r.start, r.stop):
        t, job_id = keys.DATA.unpack(key)
        row = decode(value, t, job_id, unreadable)
        if row is not UNREADABLE:
            yield t, job_id, row


def active_ids(tr, type: str) -> list[str]:
    """Ids of the running jobs of ``type``, least recently active first."""
    begin, end = keys.activity_range(type)
    return [value.decode() for _key, value in tr.get_range(begin, end)]
