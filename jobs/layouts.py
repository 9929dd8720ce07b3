"""Stored layout versions: each store layout (the job layer's, the catalog's, ingest's)
keeps its version under a key of its own, checked before use, so that a store written by
a newer release is refused instead of misread."""

from __future__ import annotations

import weakref

from .engine import tuple as fdb_tuple
from .engine import value_of


def remembered(tr):
    """The database of ``tr`` if it can be remembered in a WeakSet, else None."""
    db = getattr(tr, "db", None)
    try:
        weakref.ref(db)
    except TypeError:  # not weak-referenceable (or None): check every time
        return None
    return db


def check_version(tr, key: bytes, version: int, *, what: str, corrupt: type[Exception],
                  newer: type[Exception], checked: "weakref.WeakSet[object]") -> int | None:
    """The layout version stored at ``key`` (None: none yet).  Raises ``newer`` when it is
    above ``version`` (a store written by a newer release), ``corrupt`` when it cannot be
    read; ``what`` names the layout in the message.  A snapshot read (no conflicts in the
    caller's transaction), skipped once the database was seen at ``version`` (remembered in
    ``checked``: a store's layout never goes back down)."""
    db = remembered(tr)
    if db is not None and db in checked:
        return version
    raw = value_of(tr.snapshot.get(key))
    if raw is None:
        return None
    try:
        stored = fdb_tuple.unpack(raw)[0]
    except Exception as exc:  # noqa: BLE001 - any decoding failure means the same thing
        raise corrupt(f"the store's {what} layout key is corrupt ({raw[:40]!r})") from exc
    if not isinstance(stored, int) or stored > version:
        raise newer(
            f"this store's {what} layout is version {stored!r}, newer than this release's "
            f"{version}: upgrade the package to use this store"
        )
    if stored == version and db is not None:
        checked.add(db)
    return stored
