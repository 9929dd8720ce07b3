"""Finding and re-enqueueing inactive running jobs (couch_jobs_fdb's part of the activity
monitor).  The monitor compares versionstamps only, never clocks of other machines: a job
whose activity key is at or before a versionstamp sampled one type timeout ago has not been
updated for at least that long.
"""

from __future__ import annotations

import time

from .. import keys
from . import rows
from ..indexes import wakeups
from ..codec import Lost, Row
from ..engine import Versionstamp, value_of

_LAST_USER_VERSION = 0xFFFF


def last_activity(tr, type: str) -> bytes | None:
    """The 10-byte versionstamp of the type's last activity (or job change), or None: the
    newest of its ``watches_activity`` shards."""
    begin, end = keys.watches_activity_range(type)
    return max((bytes(kv.value) for kv in tr.get_range(begin, end)), default=None)


def watch(tr, type: str):
    """Watch that fires on the type's next activity, a stamp of any key it may be stamped
    on (wait on it after commit; cancel it to stop waiting): a share of the watches this
    process's notifier and processors hold together on those keys (``wakeups.py``)."""
    return wakeups.watch_any(tr, keys.watches_activity_keys(type))


def reenqueue_inactive(tr, type: str, up_to: bytes, limit: int, found: list | None = None,
                       unreadable: list | None = None) -> tuple[int, bool]:
    """Make pending again (lock dropped, scheduled time and data kept) up to ``limit``
    running jobs of ``type`` whose last activity is at or before the versionstamp ``up_to``,
    counting each as a lost worker on the job (its row's Lost) and on the type (the ``lost``
    counter), in this same transaction: a re-enqueue that commits is counted exactly once.
    Their workers get Halt at their next update or finish.  Returns ``(re-enqueued, more)``,
    ``more`` when the batch was full and jobs may be left; ``found``, if given, receives
    ``(job id, worker)`` of each job re-enqueued (this attempt's: clear it before a retry).
    A job whose row cannot be read is passed over, left as it is (nothing here can tell
    what the row held), and named in ``unreadable``, if given (``rows.decode``): it
    does not hold up the type's other jobs (``more`` is False when a batch held only such
    jobs, which the next batch would find again)."""
    begin, _end = keys.activity_range(type)
    end = keys.activity_key(type, Versionstamp(up_to, _LAST_USER_VERSION)) + b"\x00"
    batch = list(tr.get_range(begin, end, limit=limit))
    count, passed_over = 0, []
    for key, value in batch:
        seq = keys.ACTIVITY.unpack(key)[1]
        job_id = value.decode()
        row = rows.get(tr, type, job_id, passed_over)
        if row is rows.UNREADABLE:
            continue
        tr.clear(key)
        if row is None or row.lock is None or row.seq != seq:
            continue  # an activity key its job no longer points at: just drop it
        rows.stop_running(tr, type, job_id, row)  # (its activity key is the one cleared above)
        rows.make_pending(tr, type, job_id, row.stime, row.data, lost=one_more_lost(row), priority=row.priority,
                          key=row.key)
        count += 1
        if found is not None:
            found.append((job_id, row.worker))
    if count:
        tr.add(keys.lost_counter_key(type), count.to_bytes(8, "little"))
    if unreadable is not None:
        unreadable += passed_over
    return count, len(batch) == limit and len(passed_over) < len(batch)


def one_more_lost(row: Row) -> Lost:
    """The Lost field of ``row`` after its worker (``row.worker``) was lost just now."""
    before = 0 if row.lost is None else row.lost.count
    return Lost(before + 1, row.worker, time.time())


def lost_total(tr, type: str) -> int:
    """How many times activity monitors re-enqueued jobs of ``type``, in all (snapshot)."""
    raw = value_of(tr.snapshot.get(keys.lost_counter_key(type)))
    return 0 if raw is None else int.from_bytes(raw, "little")
