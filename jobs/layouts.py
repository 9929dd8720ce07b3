"""Stored layout versions: every subspace the project writes (``jobs/prefixes.py``) is a
:class:`Layout` that keeps its version under a key of its own, checked before use, so that
a store written by a newer release is refused instead of misread, and a store of an older
version is refused until ``jobsctl migrate`` has migrated it (:func:`migrate`): no call of
the job API, the processors or the pipeline ever migrates a store.

Release 1.0 writes layout 1 in every subspace.  A store with no version key (nothing
written yet, or only by a path that records none) is version 1: it is read as it is, and
its version key is written with the next write that records it (:meth:`Layout.ensure`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from . import dbstate
from .engine import Subspace, run, value_of
from .engine import tuple as fdb_tuple

# Where a layout keeps its version unless it says otherwise.  ``None`` first: every key of
# the layouts that use it starts with a str (a table, a type, an id), so no record key
# equals it or starts with it, and no range read under a name covers it.
VERSION_KEY = (None, "layout")


class Layout:
    """One store layout: the subspace under ``prefix`` (:attr:`space`), at ``version``,
    recorded at ``space.pack(key)`` (:attr:`key`).  ``name`` names it in messages;
    ``error`` is raised for a version key that cannot be read or a store older than this
    release reads, ``newer`` for a store written by a newer release.

    ``migrations``: for each older version ``v`` this release can migrate, the function
    ``step(tr) -> bool`` that moves a bounded part of a store of version ``v`` towards
    ``v + 1`` and says whether it is done; :func:`migrate` runs it, one transaction a
    call, and records ``v + 1`` in the transaction whose call said done."""

    def __init__(self, name: str, prefix: tuple, version: int, *, error: type[Exception],
                 newer: type[Exception], key: tuple = VERSION_KEY,
                 migrations: Mapping[int, Callable[[object], bool]] | None = None):
        self.name, self.version = name, version
        self.space = Subspace(prefix)
        self.key = self.space.pack(key)
        self.error, self.newer = error, newer
        self.migrations = dict(migrations or {})

    def check(self, tr) -> int | None:
        """The stored version (None: no version key, version 1).  Raises ``newer`` when it
        is above this layout's, ``error`` when it is corrupt or below it (the store is to
        be migrated first).  A snapshot read (no conflict in the caller's transaction),
        skipped once the database handle was seen at this layout's version (a store's
        layout never goes back down)."""
        state = dbstate.of(getattr(tr, "db", None))
        if state is not None and self in state.layouts:
            return self.version
        stored = self.stored(tr)
        self.refuse(stored)
        if stored == self.version and state is not None:
            state.layouts.add(self)
        return stored

    def refuse(self, stored: int | None, *, migrating: bool = False) -> None:
        """Raise unless this release can use (``migrating``: can migrate) a store whose
        version key holds ``stored``."""
        if stored is not None and stored > self.version:
            raise self.newer(
                f"this store's {self.name} layout is version {stored!r}, newer than this release's "
                f"{self.version}: upgrade the package to use this store"
            )
        effective = 1 if stored is None else stored
        if effective == self.version or (migrating and effective < self.version and not self._missing(effective)):
            return
        missing = self._missing(effective)
        remedy = (f"no migration from version {missing[-1]}: migrate it with an older release first" if missing
                  else "stop the processes of the older release and run `jobsctl migrate`")
        raise self.error(f"this store's {self.name} layout is version {effective}, older than this "
                         f"release's {self.version}: {remedy}")

    def _missing(self, version: int) -> list[int]:
        """The versions from ``version`` on that this release has no migration from."""
        return [v for v in range(version, self.version) if v not in self.migrations]

    def stored(self, tr) -> int | None:
        """The stored version, as it is (None: no version key); ``error`` when corrupt."""
        raw = value_of(tr.snapshot.get(self.key))
        if raw is None:
            return None
        try:
            stored = fdb_tuple.unpack(raw)[0]
        except Exception as exc:  # noqa: BLE001 - any decoding failure means the same thing
            raise self.error(f"the store's {self.name} layout key is corrupt ({raw[:40]!r})") from exc
        if not isinstance(stored, int) or isinstance(stored, bool):
            raise self.error(f"the store's {self.name} layout key is corrupt ({raw[:40]!r})")
        return stored

    def ensure(self, tr) -> None:
        """Before ``tr`` writes into the layout: :meth:`check`, and record this version in
        a store that has no version key yet, read with a conflict so that two releases'
        first writes cannot both commit."""
        if self.check(tr) is None:
            tr.add_read_conflict_key(self.key)
            self.record(tr)

    def record(self, tr) -> None:
        """Write this version (a blind write: for a store that is being created)."""
        tr.set(self.key, fdb_tuple.pack((self.version,)))


def migrate(db, layout: Layout) -> tuple[int, int]:
    """Bring the store's ``layout`` to its version, running each migration step in
    transactions of its own until it says done (``jobsctl migrate``: stop the processes of
    the older release first); ``(version before, version after)``.  Raises as
    :meth:`Layout.check` does for a newer store or one too old to migrate."""
    before = run(db, layout.stored)
    layout.refuse(before, migrating=True)
    version = 1 if before is None else before
    while version < layout.version:
        version = run(db, _step, layout, version)
    return (1 if before is None else before), version


def _step(tr, layout: Layout, version: int) -> int:
    """One transaction of the migration from ``version``: the version the store is at after
    it (``version + 1`` once the step says done, recorded in this transaction).  The
    version key is read with a conflict: two migrations never both record."""
    stored = value_of(tr.get(layout.key))
    if stored is not None and fdb_tuple.unpack(stored)[0] != version:
        return fdb_tuple.unpack(stored)[0]  # another migration moved it on (or a retry after 1021)
    if not layout.migrations[version](tr):
        return version
    tr.set(layout.key, fdb_tuple.pack((version + 1,)))
    return version + 1
