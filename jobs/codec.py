"""Encoding of job rows and job data.

A row is the tuple ``(Seq, Lock, STime, Resubmit, Data, LastLock)``, couch_jobs' five
fields plus one:

* ``Seq``: None while pending; the versionstamp of the job's last activity while running,
  kept when it finishes.  State: Lock set -> running; else Seq None -> pending; else
  finished.
* ``Lock``: 16 random bytes drawn by the ``accept`` that holds the job, else None.
* ``STime``: scheduled time, float seconds since the epoch (0: as soon as possible).
* ``Resubmit``: run the job again when it finishes.
* ``Data``: the job's JSON object, encoded with orjson.
* ``LastLock``: the Lock of the ``finish`` that last finished the job, so that a finish
  retried after ``commit_unknown_result`` can tell its own committed finish from having
  lost the job.  Creators' changes and ``accept`` clear it.  Rows of five fields (as
  couch_jobs writes them) read as LastLock None.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import orjson

from .engine import Versionstamp
from .engine import tuple as fdb_tuple
from .errors import JobDataError, StoreError

VALUE_LIMIT = 100_000  # FoundationDB's value size limit
ROW_OVERHEAD = 256  # room the rest of the row needs next to the data
DATA_LIMIT = VALUE_LIMIT - ROW_OVERHEAD


@dataclass(frozen=True, slots=True)
class Row:
    seq: Versionstamp | None
    lock: bytes | None
    stime: float
    resubmit: bool
    data: bytes
    last_lock: bytes | None = None

    @property
    def state(self) -> str:
        if self.lock is not None:
            return "running"
        return "pending" if self.seq is None else "finished"


def encode_row(row: Row) -> bytes:
    """Row value (``seq`` complete or None); for a running row use :func:`encode_stamped_row`."""
    return fdb_tuple.pack((row.seq, row.lock, row.stime, row.resubmit, row.data, row.last_lock))


def encode_stamped_row(row: Row, seq: Versionstamp) -> bytes:
    """Row value whose Seq is ``seq``, an incomplete versionstamp filled in at commit (for
    ``set_versionstamped_value``)."""
    return fdb_tuple.pack_with_versionstamp((seq, row.lock, row.stime, row.resubmit, row.data, row.last_lock))


def decode_row(raw: bytes, where: str = "a job row") -> Row:
    """Row of a stored value; StoreError when it is not a row this layout wrote."""
    try:
        fields = fdb_tuple.unpack(raw)
        row = Row(*fields)
        ok = isinstance(row.stime, float) and isinstance(row.data, bytes)
    except Exception as exc:  # noqa: BLE001 - any decoding failure means the same thing
        raise StoreError(f"{where} is corrupt: {exc}") from exc
    if not ok:
        raise StoreError(f"{where} is corrupt: unexpected field types {fields!r:.200}")
    return row


# --- job data ----------------------------------------------------------------------------

_SCALARS = (str, int, bool, type(None))


def _check_json(value, path: str) -> None:
    """JobDataError naming the first value (by path) that is not plain JSON: orjson would
    write NaN as null and datetimes, UUIDs or dataclasses as strings or objects, which
    would then read back as something else than what was stored."""
    if isinstance(value, _SCALARS):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise JobDataError(f"job data is not JSON: {path} is {value!r}")
        return
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise JobDataError(f"job data is not JSON: {path} has a non-string key {k!r}")
            _check_json(v, f"{path}[{k!r}]")
        return
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _check_json(v, f"{path}[{i}]")
        return
    raise JobDataError(f"job data is not JSON: {path} is a {type(value).__name__} ({value!r:.80})")


def encode_data(data) -> bytes:
    """JSON bytes of ``data`` (None means ``{}``).  JobDataError unless ``data`` is a dict of
    plain JSON values (str keys; str, int, finite float, bool, None, list, dict) whose
    encoding fits in a value."""
    if data is None:
        return b"{}"
    if not isinstance(data, dict):
        raise JobDataError(f"job data must be a dict (a JSON object), not {type(data).__name__}")
    try:
        raw = orjson.dumps(data)  # first: it bounds nesting depth before _check_json recurses
    except (TypeError, orjson.JSONEncodeError) as exc:
        raise JobDataError(f"job data is not JSON: {exc}") from exc
    _check_json(data, "data")
    if len(raw) > DATA_LIMIT:
        raise JobDataError(
            f"job data is {len(raw)} bytes of JSON, over the limit of {DATA_LIMIT}: "
            "store large payloads elsewhere and put a reference in the job"
        )
    return raw


def decode_data(raw: bytes) -> dict:
    return orjson.loads(raw)
