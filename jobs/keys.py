"""The key layout of the job layer: the one module that knows key shapes.

Everything lives under the tuple prefix ``("jobs",)``::

    ("jobs", "data", Type, JobId)            = (Seq, Lock, STime, Resubmit, Data, LastLock[, Worker, Lost[, Priority]])
    ("jobs", "pending", Type, Priority, STime, JobId) = enqueue time
    ("jobs", "watches_pending", Type, Shard) = 8-byte little-endian counter (atomic add): one of 16
                                               an enqueue bumps
    ("jobs", "watches_activity", Type, Shard) = 10-byte versionstamp of a change (the same)
    ("jobs", "activity_timeout", Type)       = (seconds,)
    ("jobs", "activity", Type, Seq)          = JobId as UTF-8
    ("jobs", "failed", Type, JobId)          = (at, reason): finished failed
    ("jobs", "lost", Type)                   = 8-byte little-endian counter (atomic add):
                                               re-enqueues by activity monitors
    ("jobs", "schedules", Type)              = (cron, tz, last tick enqueued): the type's cron
                                               schedule (schedules.py)
    ("jobs", "finished", Type, Kind, At, JobId) = b"": finished jobs by when they finished
    ("jobs", "finished_job", Type, JobId)    = (Kind, At): the job's entry in ``finished``
    ("jobs", "retention", Type)              = (finished seconds | None, failed seconds | None)
    ("jobs", "retention_backfill", Type)     = (done, last JobId looked at | None)
    ("jobs", "paused", Type)                 = (since,): no accept takes the type's jobs
                                               (``pausing.py``)
    ("jobs", "limits", Type)                 = the type's concurrency and rate limits (``limits.py``)
    ("jobs", "slots", Type, Scope, I)        = JobId: running slot I of the type (Scope None)
                                               or of the job key Scope, held by JobId
    ("jobs", "starts", Type, Scope, I)       = (at,): rate slot I, last used to start a job at At
    ("jobs", "kpending", Type, Key, Priority, STime, JobId) = enqueue time: a keyed job's
                                               pending entry, in its key's own queue
    ("jobs", "keys", Type, 0, Turn, Key)     = b"": the rotation of keys with due jobs
    ("jobs", "keys", Type, 1, Until, Key)    = b"": keys whose next job (or rate) is due at Until
    ("jobs", "keys", Type, 2, Key)           = b"": keys at their running limit
    ("jobs", "key", Type, Key)               = (where,): where the key is (``fairness.py``)
    ("jobs", "unkeyed_turn", Type)           = (Turn,): the unkeyed jobs' place in the rotation
    ("jobs", "rates", Type, Minute, Bucket, Shard) = counters: jobs started (in that wait
                                               bucket), finished and failed, per minute (``rates.py``)
    ("jobs", "workers", WorkerId)            = (Host, Pid, Types, Concurrency, Started, Heartbeat,
                                               StaleAfter, Held, HeldJobs): a running processor
                                               (``workers.py``)
    ("jobs", "counts", Type, ...)            = counter: the type's jobs by state (``counts.py``)
    ("jobs", "meta", "layout")               = (LAYOUT_VERSION,)
    ("jobs", "meta", "store_id")             = (16 random bytes,)

The row value is described in ``codec.py``.  Types and ids are strings.  ``STime`` is
always a float, so that the pending queue orders by time (the tuple layer sorts every int
before every float).  A running job's row and its activity key carry the same versionstamp
``Seq``; the activity keys of one type are therefore in order of last activity, which is
what the activity monitor scans.

Each type's queue is a run of priority *bands* (the job's ``Priority``, an int, lower
first; 0 by default), each ordered by scheduled time (couch_jobs' key has no priority: with
every job at 0 the order is couch_jobs').

``finished`` indexes every finished job (``Kind`` ``"failed"`` or ``"finished"``, without
failing) by ``At``, the finishing process's wall clock, so that retention (``retention.py``)
finds the oldest ones without reading rows; ``finished_job`` says where a job's entry is, so
whoever changes or removes a finished job clears it (``finished.py``).  ``retention`` holds a
type's retention periods; ``retention_backfill`` how far the one-time indexing of jobs
finished before the type had a retention has come.

Job *keys* (``kpending``, ``keys``, ``key``, ``unkeyed_turn``) take turns (``fairness.py``);
``limits``, ``slots`` and ``starts`` hold a type's limits and the slots that enforce them
(``limits.py``).  A type's activity stamp and pending wake are each spread over 16 keys (a
cluster's first keys to saturate: ``bench/capacity.py``); watchers watch all (``wakeups.py``).

``meta/layout`` holds the job layer's layout version (:data:`LAYOUT`, ``layouts.py``),
checked the first time a database handle is used, so that a store written by a newer
release is refused instead of misread.  ``meta/store_id`` is written with the first type timeout and travels in every
``Job``, so a Job used against another store is detected.
"""

from __future__ import annotations

import functools

from . import prefixes
from .codec import pack_double, pack_int, pack_str, read_int, unpack_flat
from .engine import Subspace, pack_versionstamp, pack_with_versionstamp, strinc
from .engine import tuple as fdb_tuple
from .errors import LayoutError, StoreError
from .layouts import Layout

LAYOUT_VERSION = 1
ACTIVITY_SHARDS = 16  # keys a type's activity stamp is spread over
PENDING_SHARDS = 16  # keys a type's pending wake is spread over
KEY_LIMIT = 10_000  # FoundationDB's key size limit

LAYOUT = Layout("job", prefixes.JOBS, LAYOUT_VERSION, key=("meta", "layout"), error=StoreError, newer=LayoutError)


ROOT = LAYOUT.space
DATA = ROOT["data"]
PENDING = ROOT["pending"]
WATCHES_PENDING = ROOT["watches_pending"]
WATCHES_ACTIVITY = ROOT["watches_activity"]
ACTIVITY_TIMEOUT = ROOT["activity_timeout"]
ACTIVITY = ROOT["activity"]
FAILED = ROOT["failed"]
LOST = ROOT["lost"]
SCHEDULES = ROOT["schedules"]
FINISHED = ROOT["finished"]
FINISHED_JOB = ROOT["finished_job"]
RETENTION = ROOT["retention"]
RETENTION_BACKFILL = ROOT["retention_backfill"]
PAUSED = ROOT["paused"]
LIMITS = ROOT["limits"]
SLOTS = ROOT["slots"]
STARTS = ROOT["starts"]
KPENDING = ROOT["kpending"]
KEYS = ROOT["keys"]
KEY_STATE = ROOT["key"]
UNKEYED_TURN = ROOT["unkeyed_turn"]
RATES = ROOT["rates"]
WORKERS = ROOT["workers"]
COUNTS = ROOT["counts"]
META = ROOT["meta"]

LAYOUT_KEY = LAYOUT.key
STORE_ID_KEY = META.pack(("store_id",))


@functools.lru_cache(maxsize=1024)
def _prefix(subspace: Subspace, type: str) -> bytes:
    return subspace.pack((type,))


def data_key(type: str, job_id: str) -> bytes:
    return _prefix(DATA, type) + pack_str(job_id)


@functools.lru_cache(maxsize=4096)
def _band(type: str, priority: int) -> bytes:
    return PENDING.pack((type, priority))


def pending_key(type: str, priority: int, stime: float, job_id: str) -> bytes:
    if not isinstance(stime, float):
        return PENDING.pack((type, priority, stime, job_id))
    return _band(type, priority) + pack_double(stime) + pack_str(job_id)


def keyed_pending_key(type: str, key: str, priority: int, stime: float, job_id: str) -> bytes:
    """The pending key of a job of the job key ``key`` (in that key's queue)."""
    return queue_band(key_queue(type, key), priority, stime) + pack_str(job_id)


@functools.lru_cache(maxsize=1024)
def _pending_fields(pending: bytes) -> tuple:
    fields = unpack_flat(pending)
    return fdb_tuple.unpack(pending) if fields is None else fields


def job_id_of(pending: bytes) -> str:
    """The job id of a pending key of any queue (its last element)."""
    return _pending_fields(pending)[-1]


def stime_of(pending: bytes) -> float:
    """The scheduled time of a pending key of any queue (the element before the id)."""
    return _pending_fields(pending)[-2]


# Where the type is among a queue key's elements (``pending_key``, ``keyed_pending_key``):
# after the layer's names (the root's, then "jobs") and the queue's name.
_QUEUE_TYPE_AT = len(prefixes.JOBS) + 1


def queue_entry(pending: bytes) -> tuple[str, int, float, str]:
    """``(type, priority, stime, job_id)`` of a pending key of any queue."""
    fields = _pending_fields(pending)
    return fields[_QUEUE_TYPE_AT], fields[-3], fields[-2], fields[-1]


def pending_prefix(type: str) -> bytes:
    """Prefix of all the type's pending keys (every band)."""
    return _prefix(PENDING, type)


def band_prefix(type: str, priority: int, stime: float | None = None) -> bytes:
    """Prefix of the pending keys of band ``priority``, or of those scheduled exactly at
    ``stime`` in it."""
    return _band(type, priority) + (b"" if stime is None else pack_double(float(stime)))


def queue_band(queue: bytes, priority: int, stime: float | None = None) -> bytes:
    """:func:`band_prefix` in any queue: a type's or a job key's."""
    return queue + pack_int(priority) + (b"" if stime is None else pack_double(float(stime)))


def band_of(type: str, key: bytes) -> int:
    """The priority of a pending key of ``type``, read without unpacking the whole key:
    accept reads it for every band it looks at."""
    return band_in(_prefix(PENDING, type), key)


def band_in(queue: bytes, key: bytes) -> int:
    """:func:`band_of` for a pending key of the queue whose prefix is ``queue``."""
    return read_int(key, len(queue))[0]


def entry_in(queue: bytes, key: bytes) -> tuple[int, float, str]:
    """:func:`pending_entry` for a pending key of the queue ``queue``."""
    return fdb_tuple.unpack(key[len(queue):])


def pending_entry(key: bytes) -> tuple[int, float, str]:
    """``(priority, stime, job_id)`` of a pending key."""
    return PENDING.unpack(key)[1:]


@functools.lru_cache(maxsize=4096)  # (every enqueue packs one)
def watches_pending_key(type: str, shard: int) -> bytes:
    """The type's pending wake ``shard``."""
    return WATCHES_PENDING.pack((type, shard))


@functools.lru_cache(maxsize=4096)  # (every change to a job packs one)
def watches_activity_key(type: str, shard: int) -> bytes:
    """The type's activity stamp ``shard``."""
    return WATCHES_ACTIVITY.pack((type, shard))


def watches_pending_keys(type: str) -> list[bytes]:
    """Every key a wake of the type may bump: its shards (the same for
    :func:`watches_activity_keys`)."""
    return [watches_pending_key(type, i) for i in range(PENDING_SHARDS)]


def watches_pending_range(type: str) -> tuple[bytes, bytes]:
    """The keys of :func:`watches_pending_keys` (and nothing else) as one range."""
    begin = _prefix(WATCHES_PENDING, type)
    return begin, strinc(begin)


def watches_activity_keys(type: str) -> list[bytes]:
    return [watches_activity_key(type, i) for i in range(ACTIVITY_SHARDS)]


def watches_activity_range(type: str) -> tuple[bytes, bytes]:
    """The keys of :func:`watches_activity_keys` (and nothing else) as one range."""
    begin = _prefix(WATCHES_ACTIVITY, type)
    return begin, strinc(begin)


def timeout_key(type: str) -> bytes:
    return _prefix(ACTIVITY_TIMEOUT, type)  # (cached: every add reads it)


def activity_key(type: str, seq) -> bytes:
    """Activity key of a running job whose Seq is the (complete) versionstamp ``seq``."""
    return _prefix(ACTIVITY, type) + pack_versionstamp(seq)


def stamped_activity_key(type: str, incomplete_seq) -> bytes:
    """Activity key for ``set_versionstamped_key``: Seq filled in at commit."""
    return pack_with_versionstamp(_prefix(ACTIVITY, type), (incomplete_seq,))


def activity_range(type: str) -> tuple[bytes, bytes]:
    r = ACTIVITY[type].range()
    return r.start, r.stop


def failed_key(type: str, job_id: str) -> bytes:
    return _prefix(FAILED, type) + pack_str(job_id)


def lost_counter_key(type: str) -> bytes:
    return LOST.pack((type,))


def schedule_key(type: str) -> bytes:
    return SCHEDULES.pack((type,))


def finished_key(type: str, kind: str, at: float, job_id: str) -> bytes:
    return FINISHED.pack((type, kind, at, job_id))


def finished_range(type: str, kind: str, up_to: float, since: float | None = None) -> tuple[bytes, bytes]:
    """The ``finished`` entries of ``type`` and ``kind`` whose At is at or before ``up_to``
    (and at or after ``since``)."""
    begin = FINISHED[type][kind].range().start if since is None else FINISHED.pack((type, kind, float(since)))
    return begin, strinc(FINISHED.pack((type, kind, float(up_to))))


def unpack_finished(key: bytes) -> tuple[str, str, float, str]:
    """``(type, kind, at, job_id)`` of a ``finished`` key."""
    return FINISHED.unpack(key)


def finished_job_key(type: str, job_id: str) -> bytes:
    return _prefix(FINISHED_JOB, type) + pack_str(job_id)


def retention_key(type: str) -> bytes:
    return _prefix(RETENTION, type)  # (cached: every finish reads it)


def retention_backfill_key(type: str) -> bytes:
    return RETENTION_BACKFILL.pack((type,))


def paused_key(type: str) -> bytes:
    return _prefix(PAUSED, type)


def limits_key(type: str) -> bytes:
    return _prefix(LIMITS, type)


def slots_prefix(type: str, scope: str | None) -> bytes:
    """Prefix of the running slots of ``type`` (scope None) or of its job key ``scope``."""
    return SLOTS.pack((type, scope))


def starts_prefix(type: str, scope: str | None) -> bytes:
    """Prefix of the rate slots of ``type`` (scope None) or of its job key ``scope``."""
    return STARTS.pack((type, scope))


@functools.lru_cache(maxsize=4096)
def key_queue(type: str, key: str) -> bytes:
    """Prefix of the pending queue of the job key ``key`` (its bands, as ``pending_prefix``)."""
    return KPENDING.pack((type, key))


def keys_prefix(type: str, part: int | None = None) -> bytes:
    """Prefix of the type's key rotation: everything (None), the turns (0), the sleepers
    (1) or the keys at their running limit (2)."""
    return _prefix(KEYS, type) if part is None else _prefix(KEYS, type) + pack_int(part)


def key_state_key(type: str, key: str) -> bytes:
    return KEY_STATE.pack((type, key))


def unkeyed_turn_key(type: str) -> bytes:
    return _prefix(UNKEYED_TURN, type)


def worker_key(worker_id: str) -> bytes:
    return WORKERS.pack((worker_id,))


# --- layout version ----------------------------------------------------------------------


def check_layout(tr) -> None:
    """Raise LayoutError if the store was written by a newer release (StoreError if it is
    to be migrated first).  Read once per database handle once it is this release's (a
    snapshot read: adds no conflicts to the caller's transaction)."""
    LAYOUT.check(tr)


def ensure_layout(tr) -> None:
    """Before ``tr`` writes a record that may come before the store's first type timeout
    (which records the version with the store id): :func:`check_layout`, and the version
    recorded if the store has none yet."""
    LAYOUT.ensure(tr)
