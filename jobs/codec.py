"""Encoding of job rows and job data.

A row is the tuple ``(Seq, Lock, STime, Resubmit, Data, LastLock, Worker, Lost, Priority)``,
couch_jobs' five fields plus four:

* ``Seq``: None while pending; the versionstamp of the job's last activity while running,
  kept when it finishes.  State: Lock set -> running; else Seq None -> pending; else
  finished.
* ``Lock``: 16 bytes drawn by the ``accept`` that holds the job, else None: when it was
  drawn (the accepting machine's clock, in microseconds, 8 bytes big-endian), a marker
  byte and 7 random bytes (:func:`new_lock`), so that a job's start shows without a field
  of its own (:func:`lock_time`).
* ``STime``: scheduled time, float seconds since the epoch (0: as soon as possible).
* ``Resubmit``: run the job again when it finishes.
* ``Data``: the job's JSON object, encoded with orjson.
* ``LastLock``: the Lock of the ``finish`` that last finished the job, so that a finish
  retried after ``commit_unknown_result`` can tell its own committed finish from having
  lost the job.  Creators' changes and ``accept`` clear it.
* ``Worker``: ``"host/pid"`` of the process whose ``accept`` last took the job.
* ``Lost``: ``(count, worker, at)``: how many times the activity monitor re-enqueued the job
  because its worker stopped heartbeating, since its current run began (a creator's add or
  resubmit, or a finish that made it pending again, starts a new run), the last lost
  worker and when (the monitor's wall clock).
* ``Priority``: the job's priority, an int, lower first: kept in the row so
  that every re-enqueue (release, the monitor, a resubmission) puts the job back in its band.
* ``Key``: the job's key (``add(..., key=...)``), or None: its queue and its
  turn among the type's keys (``fairness.py``), kept for every re-enqueue as Priority is.
* ``Slots``: while running under limits, the running slots it holds, ``(type slot, key,
  key slot)`` (``limits.py``), freed when it stops running; else None.

Rows are written with six fields while Worker and Lost are both None and Priority is 0,
with eight while Priority is 0, with nine unless Key or Slots is set, else eleven; a row
is read with any number of fields from five (couch_jobs' own) on: missing fields read as
None (Priority as 0).
"""

from __future__ import annotations

import functools
import math
import os
import struct
import time
from typing import NamedTuple

import orjson

from .engine import Versionstamp, pack_versionstamp, value_of, versionstamp_at
from .engine import tuple as fdb_tuple
from .errors import JobDataError, StoreError

VALUE_LIMIT = 100_000  # FoundationDB's value size limit
ROW_OVERHEAD = 256  # room the rest of the row needs next to the data
DATA_LIMIT = VALUE_LIMIT - ROW_OVERHEAD


class Lost(NamedTuple):
    """The activity monitor's count of a job's lost workers (see the module docstring)."""

    count: int
    worker: str | None  # "host/pid" of the last worker lost, if known
    at: float  # when the monitor re-enqueued the job, seconds since the epoch


class Row(NamedTuple):
    """A job's row, as stored (``fields_of``).  A named tuple, not a frozen dataclass:
    four are made for each job accepted and finished, and a dataclass's construction costs
    a call per field.  Internal: compared only with rows, changed with ``_replace``."""

    seq: Versionstamp | None
    lock: bytes | None
    stime: float
    resubmit: bool
    data: bytes
    last_lock: bytes | None = None
    worker: str | None = None
    lost: Lost | None = None
    priority: int = 0
    key: str | None = None
    slots: tuple | None = None

    @property
    def state(self) -> str:
        if self.lock is not None:
            return "running"
        return "pending" if self.seq is None else "finished"


def encode_row(row: Row) -> bytes:
    """Row value (``seq`` complete or None); for a running row use :func:`encode_stamped_row`."""
    return _pack_row(row.seq, row)


def encode_new_row(stime: float, data: bytes, priority: int) -> bytes:
    """``encode_row(Row(None, None, stime, False, data, priority=priority))`` (a new
    unkeyed pending job's row) without making the Row: ``add_many`` writes thousands."""
    return _pack_fields(_NONE, None, stime, False, data, None, None, priority)


def encode_stamped_row(row: Row, seq: Versionstamp) -> bytes:
    """Row value whose Seq is ``seq``, an incomplete versionstamp filled in at commit (for
    ``set_versionstamped_value``)."""
    if seq.is_complete():
        raise ValueError("encode_stamped_row takes an incomplete versionstamp")
    # the tuple layer's trailer: where the 10 bytes to fill in start (after the 0x33 code)
    return _pack_row(seq, row) + _STAMP_AT_1


def decode_row(raw: bytes, where: str = "a job row") -> Row:
    """Row of a stored value; StoreError when it is not a row this layout wrote."""
    try:
        fields = _unpack_row(raw)
        if fields is None:  # not the usual shape (e.g. a five-field couch_jobs row)
            fields = fdb_tuple.unpack(raw)
        row = Row(*fields)
        if row.lost is not None:
            row = _with_lost(row)
        ok = isinstance(row.stime, float) and isinstance(row.data, bytes)
        ok = ok and (row.worker is None or isinstance(row.worker, str)) and type(row.priority) is int
        ok = ok and (row.key is None or isinstance(row.key, str))
        ok = ok and (row.slots is None or (isinstance(row.slots, tuple) and len(row.slots) == 3))
    except Exception as exc:  # noqa: BLE001 - any decoding failure means the same thing
        raise StoreError(f"{where} is corrupt: {exc}") from exc
    if not ok:
        raise StoreError(f"{where} is corrupt: unexpected field types {fields!r:.200}")
    return row


def _with_lost(row: Row) -> Row:
    """``row`` with its Lost field (a plain tuple from the tuple layer) checked and typed."""
    count, worker, at = row.lost
    if not (type(count) is int and (worker is None or isinstance(worker, str)) and isinstance(at, float)):
        raise ValueError(f"bad lost-worker field {row.lost!r:.100}")
    return row._replace(lost=Lost(*row.lost))


def fields_of(row: Row) -> tuple:
    """The tuple the row is stored as: six fields unless Worker or Lost is set, nine when
    Priority is not 0, eleven when Key or Slots is set."""
    head = (row.lock, row.stime, row.resubmit, row.data, row.last_lock)
    if row.key is not None or row.slots is not None:
        return (*head, row.worker, row.lost, row.priority, row.key, row.slots)
    if row.priority:
        return (*head, row.worker, row.lost, row.priority)
    return head if row.worker is None and row.lost is None else (*head, row.worker, row.lost)


# --- the row tuple, fast ------------------------------------------------------------------
# Rows are written and read for every job operation, and the generic tuple layer is pure
# Python and slow; these produce and parse exactly its bytes for the row's one shape
# (tests/test_codec.py checks them against it).  A row with a Lost field (rare: only jobs
# whose worker was lost) takes the tuple layer both ways.

_NONE, _FALSE, _TRUE = b"\x00", b"\x26", b"\x27"  # (unpack_flat spells out the codes it reads)
_ZERO = 0x14  # the int 0; ints of n bytes (n <= 8) have codes 0x14 +- n
_DOUBLE_BE = struct.Struct(">d")
_U64_BE, _CODE_U64_BE = struct.Struct(">Q"), struct.Struct(">BQ")
_unpack_u64, _pack_u64, _unpack_double = _U64_BE.unpack_from, _U64_BE.pack, _DOUBLE_BE.unpack
_SIGN_BIT, _ALL_BITS = 1 << 63, (1 << 64) - 1
_STAMP_AT_1 = struct.pack("<L", 1)


def _pack_bytes(value: bytes) -> bytes:
    return b"\x01" + value.replace(b"\x00", b"\x00\xff") + b"\x00"


def pack_str(value: str) -> bytes:
    """A string as the tuple layer packs it (code 0x02)."""
    return b"\x02" + value.encode().replace(b"\x00", b"\x00\xff") + b"\x00"


def pack_double(value: float) -> bytes:
    """A float as the tuple layer packs it (code 0x21): its IEEE bits, big-endian, with
    the sign bit flipped, or every bit for a negative one (so that bytes sort as numbers)."""
    if value == 0.0 and math.copysign(1.0, value) > 0:  # (most jobs are due at once: time 0)
        return _PACKED_ZERO
    bits = _U64_BE.unpack(_DOUBLE_BE.pack(value))[0]
    return _CODE_U64_BE.pack(0x21, bits ^ _ALL_BITS if bits >> 63 else bits | _SIGN_BIT)


_PACKED_ZERO = _CODE_U64_BE.pack(0x21, _SIGN_BIT)  # pack_double(0.0) (not -0.0: bits of its own)


def _pack_row(seq, row: Row) -> bytes:
    """The row's tuple bytes with ``seq`` (complete, incomplete or None) as its Seq."""
    head = _NONE if seq is None else pack_versionstamp(seq)
    fast = isinstance(row.stime, float) and isinstance(row.data, bytes) and type(row.resubmit) is bool
    fast = fast and type(row.priority) is int and row.key is None and row.slots is None
    if not fast or row.lost is not None or not (row.worker is None or isinstance(row.worker, str)):
        return head + fdb_tuple.pack(fields_of(row))  # a tuple's bytes: its elements' in a row
    return _pack_fields(head, row.lock, row.stime, row.resubmit, row.data, row.last_lock, row.worker, row.priority)


def _pack_fields(head: bytes, lock, stime: float, resubmit: bool, data: bytes, last_lock, worker,
                 priority: int) -> bytes:
    """The fast path's bytes of a row of the usual shape (no Lost, key or slots), after
    ``head`` (its Seq, packed)."""
    return b"".join((
        head,
        _NONE if lock is None else _pack_bytes(lock),
        pack_double(stime),
        _TRUE if resubmit else _FALSE,
        _pack_bytes(data),
        _NONE if last_lock is None else _pack_bytes(last_lock),
        _tail(worker, priority),
    ))


def _tail(worker: str | None, priority: int) -> bytes:
    """Worker, Lost (None) and Priority, as far as they are not their defaults."""
    if priority:
        return (_NONE if worker is None else pack_str(worker)) + _NONE + pack_int(priority)
    return b"" if worker is None else pack_str(worker) + _NONE


@functools.lru_cache(maxsize=1024)
def pack_int(value: int) -> bytes:
    """An int as the tuple layer packs it (cached: priorities and turns repeat)."""
    return fdb_tuple.pack((value,))


def read_int(raw: bytes, pos: int) -> tuple[int, int] | None:
    """The int whose code is at ``pos`` (up to 8 bytes) and the position after it."""
    n = raw[pos] - _ZERO
    body = raw[pos + 1:pos + 1 + abs(n)]
    if len(body) != abs(n):
        return None
    value = int.from_bytes(body, "big")
    return (value if n >= 0 else value - (1 << (8 * -n)) + 1), pos + 1 + abs(n)


def _read_bytes(raw: bytes, pos: int) -> tuple[bytes, int]:
    """The byte string whose body starts at ``pos``; the position after its terminator."""
    end = raw.index(b"\x00", pos)
    while raw[end + 1:end + 2] == b"\xff":
        end = raw.index(b"\x00", end + 2)
    return raw[pos:end].replace(b"\x00\xff", b"\x00"), end + 1


def _unpack_row(raw: bytes) -> tuple | None:
    """The fields of a row in the usual shape (six, or eight or nine without Lost), else None (left
    to the tuple layer)."""
    fields = unpack_flat(raw)
    return fields if fields is not None and len(fields) in (6, 8, 9) else None


def unpack_flat(raw: bytes) -> tuple | None:
    """The elements of a packed tuple of None, bytes, str, float, bool, int and
    versionstamps (no nesting), as the tuple layer reads them; None for any other shape
    (left to the tuple layer).  For rows and keys read on every job operation (the codes
    are literals, and methods bound once: this loop is the row's decoding cost)."""
    fields = []
    append, index = fields.append, raw.index
    pos, n = 0, len(raw)
    while pos < n:
        code = raw[pos]
        if code == 0x00:
            append(None)
            pos += 1
        elif code == 0x01 or code == 0x02:  # bytes, str
            end = index(b"\x00", pos + 1)
            if end + 1 < n and raw[end + 1] == 0xFF:  # (an escaped 0x00 inside)
                value, pos = _read_bytes(raw, pos + 1)
            else:
                value, pos = raw[pos + 1:end], end + 1
            append(value if code == 0x01 else value.decode())
        elif code == 0x21:  # double
            if pos + 9 > n:
                return None
            if raw.startswith(_PACKED_ZERO, pos):  # (the time of most jobs: due at once)
                append(0.0)
                pos += 9
                continue
            bits = _unpack_u64(raw, pos + 1)[0]
            append(_unpack_double(_pack_u64(bits ^ _SIGN_BIT if bits >> 63 else bits ^ _ALL_BITS))[0])
            pos += 9
        elif code == 0x26 or code == 0x27:  # False, True
            append(code == 0x27)
            pos += 1
        elif 0x0C <= code <= 0x1C:  # an int of up to 8 bytes
            read = read_int(raw, pos)
            if read is None:
                return None
            value, pos = read
            append(value)
        elif code == 0x33:  # versionstamp
            if n < pos + 13:
                return None
            append(versionstamp_at(raw, pos + 1))
            pos += 13
        else:
            return None
    return tuple(fields)


# --- job data ----------------------------------------------------------------------------

_SCALARS = (str, int, bool, type(None))
_PLAIN = frozenset(_SCALARS)  # exact types a container's value is taken as without a call


def _check_json(value, path: str) -> None:
    """JobDataError naming the first value (by path) that is not plain JSON: orjson would
    write NaN as null and datetimes, UUIDs or dataclasses as strings or objects, which
    would then read back as something else than what was stored."""
    bad = _not_json(value)
    if bad is not None:
        steps, what = bad
        raise JobDataError(f"job data is not JSON: {path}{''.join(reversed(steps))} {what}")


def _not_json(value) -> tuple[list[str], str] | None:
    """None for plain JSON, else the path to the first value that is not (its steps, the
    innermost first: built only then, not for every value checked) and what is wrong."""
    if type(value) is not dict:  # (a job's data is a dict: its case first)
        if isinstance(value, _SCALARS):
            return None
        if isinstance(value, float):
            return None if math.isfinite(value) else ([], f"is {value!r}")
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                return [], f"has a non-string key {k!r}"
            if type(v) in _PLAIN:
                continue
            bad = _not_json(v)
            if bad is not None:
                bad[0].append(f"[{k!r}]")
                return bad
        return None
    if isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            if type(v) in _PLAIN:
                continue
            bad = _not_json(v)
            if bad is not None:
                bad[0].append(f"[{i}]")
                return bad
        return None
    return [], f"is a {type(value).__name__} ({value!r:.80})"


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


def read_json(tr, key: bytes, default=None):
    """The JSON value stored at ``key`` (a conflicting read), ``default`` when there is none:
    how the layers above read their JSON records (operations, CTAS, indexes)."""
    raw = value_of(tr.get(key))
    return default if raw is None else orjson.loads(raw)


_LOCK_MARK = b"\x5a"


def new_lock() -> bytes:
    """A lock: now (µs, big-endian), ``_LOCK_MARK``, 7 random bytes (unique enough: two
    accepts in one microsecond share a lock with a chance of 2**-56)."""
    return (time.time_ns() // 1000).to_bytes(8, "big") + _LOCK_MARK + os.urandom(7)


def lock_time(lock: bytes | None, where: str = "a job's lock") -> float | None:
    """When the accept that drew ``lock`` drew it (seconds since the epoch), or None: no
    lock.  StoreError naming ``where`` for a lock :func:`new_lock` did not make."""
    if lock is None:
        return None
    if not isinstance(lock, bytes) or len(lock) != 16 or lock[8:9] != _LOCK_MARK:
        raise StoreError(f"{where} is corrupt: {lock!r:.60}")
    return int.from_bytes(lock[:8], "big") / 1e6

