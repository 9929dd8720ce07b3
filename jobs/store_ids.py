"""The store's identity: ``("jobs", "meta", "store_id")``, written with the first type
timeout and carried in every ``Job``, so that a Job used against another store is
detected (``worker.py``, ``accepting.py``); and beside it the job layer's layout version
(:data:`LAYOUT`, for the layers above, which go through the job layer's modules rather
than its keys)."""

from __future__ import annotations

import functools
import uuid

from .engine import value_of
from .engine import tuple as fdb_tuple
from . import txstate
from .errors import StoreError
from .keys import LAYOUT, STORE_ID_KEY, check_layout

__all__ = ["LAYOUT", "ensure_store", "store_id_future", "store_id_of"]


def _unpack_meta(raw: bytes, what: str):
    try:
        return fdb_tuple.unpack(raw)[0]
    except Exception as exc:  # noqa: BLE001 - any decoding failure means the same thing
        raise StoreError(f"the store's job {what} key is corrupt ({raw[:40]!r})") from exc


def ensure_store(tr) -> None:
    """Write the layout version and a new store id if the store has none yet.  A conflicting
    read, so that two first writers agree on one id (the loser retries and sees it)."""
    check_layout(tr)
    if not tr.get(STORE_ID_KEY).wait().present():
        tr.set(STORE_ID_KEY, fdb_tuple.pack((uuid.uuid4().bytes,)))
        LAYOUT.record(tr)


def store_id_future(tr):
    """Future of the raw store id (a snapshot read, once per transaction attempt: a store can
    be wiped and recreated under the same handle), to wait on with :func:`store_id_of`."""
    version = tr.get_read_version().wait()
    state = txstate.of(tr)  # (one read per attempt, however many jobs it touches: a retried
    known = state.store_id  # attempt has another read version)
    if known is not None and known[0] == version:
        return known[1]
    future = tr.snapshot.get(STORE_ID_KEY)
    state.store_id = (version, future)
    return future


def store_id_of(future) -> bytes | None:
    raw = value_of(future)
    return None if raw is None else _store_id(raw)


@functools.lru_cache(maxsize=64)
def _store_id(raw: bytes) -> bytes:
    """The store id packed in ``raw`` (decoded once: every accept and finish reads it)."""
    return _unpack_meta(raw, "store id")
