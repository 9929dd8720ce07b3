"""The key layout of the job layer: the one module that knows key shapes.

Everything lives under the tuple prefix ``("jobs",)``::

    ("jobs", "data", Type, JobId)            = row: (Seq, Lock, STime, Resubmit, Data, LastLock)
    ("jobs", "pending", Type, STime, JobId)  = b""
    ("jobs", "watches_pending", Type)        = 8-byte little-endian counter (atomic add)
    ("jobs", "watches_activity", Type)       = versionstamp of the last activity
    ("jobs", "activity_timeout", Type)       = (seconds,)
    ("jobs", "activity", Type, Seq)          = JobId   (Seq: the running job's versionstamp)
    ("jobs", "meta", "layout")               = (LAYOUT_VERSION,)
    ("jobs", "meta", "store_id")             = (uuid bytes,)   identifies the store

Types and ids are strings; ``STime`` is always a float so that the pending queue orders by
time (the tuple layer sorts ints before floats).  A running job's row and its activity key
carry the same versionstamp ``Seq``.
"""

from __future__ import annotations

import uuid
import weakref

from .engine import Subspace
from .engine import tuple as fdb_tuple
from .errors import LayoutError

LAYOUT_VERSION = 1

ROOT = Subspace(("jobs",))
DATA = ROOT["data"]
PENDING = ROOT["pending"]
WATCHES_PENDING = ROOT["watches_pending"]
WATCHES_ACTIVITY = ROOT["watches_activity"]
ACTIVITY_TIMEOUT = ROOT["activity_timeout"]
ACTIVITY = ROOT["activity"]
META = ROOT["meta"]

LAYOUT_KEY = META.pack(("layout",))
STORE_ID_KEY = META.pack(("store_id",))


def data_key(type: str, job_id: str) -> bytes:
    return DATA.pack((type, job_id))


def pending_key(type: str, stime: float, job_id: str) -> bytes:
    return PENDING.pack((type, stime, job_id))


def watches_pending_key(type: str) -> bytes:
    return WATCHES_PENDING.pack((type,))


def watches_activity_key(type: str) -> bytes:
    return WATCHES_ACTIVITY.pack((type,))


def timeout_key(type: str) -> bytes:
    return ACTIVITY_TIMEOUT.pack((type,))


# --- store identity and layout version -----------------------------------------------------

_store_ids: "weakref.WeakKeyDictionary[object, bytes]" = weakref.WeakKeyDictionary()


def _check_layout(raw: bytes | None) -> None:
    if raw is not None and fdb_tuple.unpack(raw)[0] > LAYOUT_VERSION:
        raise LayoutError(
            f"this store's job layout is version {fdb_tuple.unpack(raw)[0]}, newer than this "
            f"release's {LAYOUT_VERSION}: upgrade the package"
        )


def ensure_store(tr) -> bytes:
    """Write the layout version and a store id if missing; check the layout; return the id.
    Called by the functions that create jobs, so every store holding jobs has an id."""
    raw_id = tr.get(STORE_ID_KEY).wait()
    _check_layout(tr.get(LAYOUT_KEY).wait())
    if raw_id is None:
        raw_id = fdb_tuple.pack((uuid.uuid4().bytes,))
        tr.set(STORE_ID_KEY, raw_id)
        tr.set(LAYOUT_KEY, fdb_tuple.pack((LAYOUT_VERSION,)))
    return fdb_tuple.unpack(raw_id)[0]


def store_id(tr) -> bytes | None:
    """The store's id (None before any job type was set up); cached per database."""
    db = getattr(tr, "db", None)
    try:
        cached = _store_ids.get(db) if db is not None else None
    except TypeError:  # not weak-referenceable: no cache
        cached, db = None, None
    if cached is not None:
        return cached
    snap = tr.snapshot
    raw = snap.get(STORE_ID_KEY).wait()
    if raw is None:
        return None
    _check_layout(snap.get(LAYOUT_KEY).wait())
    sid = fdb_tuple.unpack(raw)[0]
    if db is not None:
        _store_ids[db] = sid
    return sid
