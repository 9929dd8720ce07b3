"""Encoding of job rows and job data.

A row is the tuple ``(Seq, Lock, STime, Resubmit, Data, LastLock)``:

* ``Seq``: versionstamp of the job's last activity while running, kept when it finishes;
  None while pending.  State follows couch_jobs: Lock set -> running; no Lock and no Seq ->
  pending; no Lock with a Seq -> finished.
* ``Lock``: 16 random bytes of the worker that holds the job, else None.
* ``LastLock``: the Lock that last finished the job, so that a ``finish`` retried after
  ``commit_unknown_result`` can tell its own committed finish from losing the job.
* ``Data``: the job's JSON object, encoded with orjson.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import orjson

from .engine import Versionstamp
from .engine import tuple as fdb_tuple
from .errors import JobDataError

VALUE_LIMIT = 100_000
ROW_OVERHEAD = 256  # room the rest of the row needs next to the data


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
    """Row value; with an incomplete ``seq`` use :func:`encode_stamped_row`."""
    return fdb_tuple.pack((row.seq, row.lock, row.stime, row.resubmit, row.data, row.last_lock))


def encode_stamped_row(row: Row) -> bytes:
    """Row value whose Seq is this transaction's versionstamp (for set_versionstamped_value)."""
    return fdb_tuple.pack_with_versionstamp(
        (Versionstamp(), row.lock, row.stime, row.resubmit, row.data, row.last_lock)
    )


def decode_row(raw: bytes) -> Row:
    return Row(*fdb_tuple.unpack(raw))


def _check_finite(value, path: str = "data") -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise JobDataError(f"job data is not JSON: {path} is {value!r}")
    if isinstance(value, dict):
        for k, v in value.items():
            _check_finite(v, f"{path}[{k!r}]")
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _check_finite(v, f"{path}[{i}]")


def encode_data(data) -> bytes:
    """JSON bytes of ``data`` (None means ``{}``); JobDataError unless a JSON object that
    fits in a value."""
    if data is None:
        return b"{}"
    if not isinstance(data, dict):
        raise JobDataError(f"job data must be a dict (a JSON object), not {type(data).__name__}")
    try:
        raw = orjson.dumps(data)
    except (TypeError, orjson.JSONEncodeError) as exc:
        raise JobDataError(f"job data is not JSON: {exc}") from exc
    if b"null" in raw:  # orjson writes NaN and infinities as null: refuse them instead
        _check_finite(data)
    if len(raw) > VALUE_LIMIT - ROW_OVERHEAD:
        raise JobDataError(
            f"job data is {len(raw)} bytes of JSON, over the limit of {VALUE_LIMIT - ROW_OVERHEAD}: "
            "store large payloads elsewhere and put a reference in the job"
        )
    return raw


def decode_data(raw: bytes) -> dict:
    return orjson.loads(raw)
