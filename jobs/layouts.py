"""Stored layout versions: every subspace the project writes (``jobs/prefixes.py``) is a
:class:`Layout` that keeps its version under a key of its own, checked before use, so that
a store written by a newer release is refused instead of misread, and a store of an older
version is migrated by the first write that needs the new one.

A store written before its layout carried a version (data, but no version key) is
version 1: it is read as it is, and its version key is written with the next write.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping

from .engine import Subspace, value_of
from .engine import tuple as fdb_tuple

# Where a layout keeps its version unless it says otherwise.  ``None`` first: every key of
# the layouts that use it starts with a str (a table, a type, an id), so no record key
# equals it or starts with it, and no range read under a name covers it.
VERSION_KEY = (None, "layout")


def remembered(tr):
    """The database of ``tr`` if it can be remembered in a WeakSet, else None."""
    db = getattr(tr, "db", None)
    try:
        weakref.ref(db)
    except TypeError:  # not weak-referenceable (or None): check every time
        return None
    return db


class Layout:
    """One store layout: the subspace under ``prefix`` (:attr:`space`), at ``version``,
    recorded at ``space.pack(key)`` (:attr:`key`).  ``name`` names it in messages;
    ``error`` is raised for a version key that cannot be read or a version too old to
    migrate, ``newer`` for a store written by a newer release.

    ``migrations``: for each older version this release still accepts, the function
    ``fn(tr)`` that rewrites a store of that version into the next one, or None when the
    next one reads it as it is.  Readers accept those versions as they are (reading code
    must read them); the first write (:meth:`upgrade`) runs the functions in order."""

    def __init__(self, name: str, prefix: tuple, version: int, *, error: type[Exception],
                 newer: type[Exception], key: tuple = VERSION_KEY,
                 migrations: Mapping[int, Callable[[object], None] | None] | None = None):
        self.name, self.version = name, version
        self.space = Subspace(prefix)
        self.key = self.space.pack(key)
        self.error, self.newer = error, newer
        self.migrations = dict(migrations or {})
        # Databases seen at ``version`` (a store's layout never goes back down): checked no
        # more, so that a transaction pays no read for it.  A store of an older version is
        # read again until it is upgraded.
        self.checked: "weakref.WeakSet[object]" = weakref.WeakSet()

    def check(self, tr, *, version: int | None = None) -> int | None:
        """The stored version (None: no version key).  Raises ``newer`` when it is above
        ``version`` (default: this layout's), ``error`` when it is corrupt or too old to
        migrate.  A snapshot read (no conflict in the caller's transaction), skipped once
        the database was seen at this layout's version."""
        if getattr(tr, "db", None) in self.checked:  # (False for what no WeakSet holds)
            return self.version
        version = self.version if version is None else version
        db = remembered(tr)
        raw = value_of(tr.snapshot.get(self.key))
        stored = None if raw is None else self._decode(raw)
        if stored is not None and (not isinstance(stored, int) or stored > version):
            raise self.newer(
                f"this store's {self.name} layout is version {stored!r}, newer than this release's "
                f"{version}: upgrade the package to use this store"
            )
        effective = 1 if stored is None else stored  # no version key: version 1
        missing = [v for v in range(effective, version) if v not in self.migrations]
        if missing:
            raise self.error(
                f"this store's {self.name} layout is version {effective}, older than this release "
                f"can migrate (no migration from version {missing[-1]}): migrate it with an older release first"
            )
        if stored == version == self.version and db is not None:
            self.checked.add(db)
        return stored

    def _decode(self, raw: bytes):
        try:
            return fdb_tuple.unpack(raw)[0]
        except Exception as exc:  # noqa: BLE001 - any decoding failure means the same thing
            raise self.error(f"the store's {self.name} layout key is corrupt ({raw[:40]!r})") from exc

    def upgrade(self, tr) -> None:
        """Before ``tr`` writes into the layout: record this version unless the store is
        known to have it, migrating an older store first.  Raises as :meth:`check` does.
        The version key is read with a conflict only when it is written, so an older
        release's upgrade cannot commit over a newer one's."""
        if getattr(tr, "db", None) in self.checked:  # (the usual case, on every write: no call)
            return
        stored = self.check(tr)
        if stored == self.version:
            return
        for old in range(1 if stored is None else stored, self.version):
            migrate = self.migrations[old]
            if migrate is not None:
                migrate(tr)
        tr.add_read_conflict_key(self.key)
        self.record(tr)

    def record(self, tr) -> None:
        """Write this version (a blind write: for a store that is being created)."""
        tr.set(self.key, fdb_tuple.pack((self.version,)))
