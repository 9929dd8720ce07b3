"""Job rows and the activity index (``data``, ``activity``, ``watches_activity``).

Every change to a running job stamps three keys with the commit's versionstamp: the row's
Seq, the activity key ``(Type, Seq)`` (the activity monitor scans these in stamp order),
and ``watches_activity/Type`` (what monitors and notifiers watch).
"""

from __future__ import annotations

from . import keys
from .codec import Row, decode_row, encode_row, encode_stamped_row
from .engine import Versionstamp


_STAMP_AT_0 = bytes(10) + (0).to_bytes(4, "little")  # value = the 10-byte versionstamp


def get(tr, type: str, job_id: str) -> Row | None:
    raw = tr.get(keys.data_key(type, job_id)).wait()
    return None if raw is None else decode_row(raw)


def put(tr, type: str, job_id: str, row: Row) -> None:
    """Write a row that is not running (pending or finished)."""
    tr.set(keys.data_key(type, job_id), encode_row(row))


def put_running(tr, type: str, job_id: str, row: Row) -> None:
    """Write a running row with this commit's versionstamp as its Seq, and its activity key."""
    tr.set_versionstamped_value(keys.data_key(type, job_id), encode_stamped_row(row))
    tr.set_versionstamped_key(keys.ACTIVITY.pack_with_versionstamp((type, Versionstamp())), job_id.encode())
    bump_activity(tr, type)


def clear(tr, type: str, job_id: str) -> None:
    tr.clear(keys.data_key(type, job_id))


def clear_activity(tr, type: str, row: Row) -> None:
    """Drop a running row's activity key (its Seq is a complete versionstamp by now)."""
    if row.seq is not None and row.lock is not None:
        tr.clear(keys.ACTIVITY.pack((type, row.seq)))


def bump_activity(tr, type: str) -> None:
    """Stamp ``watches_activity/Type``: wakes monitors and subscribers of the type."""
    tr.set_versionstamped_value(keys.watches_activity_key(type), _STAMP_AT_0)


def scan(tr, type: str | None = None):
    """``(type, id, Row)`` for every job, or every job of ``type``, in (type, id) order."""
    space = keys.DATA if type is None else keys.DATA[type]
    begin, end = space.range().start, space.range().stop
    for key, value in tr.get_range(begin, end):
        t, job_id = keys.DATA.unpack(key)
        yield t, job_id, decode_row(value)


def active_ids(tr, type: str) -> list[str]:
    r = keys.ACTIVITY[type].range()
    return [value.decode() for _key, value in tr.get_range(r.start, r.stop)]
