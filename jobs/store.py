"""Opening a store: ``jobs.open(url)``, the engine's ``open_database`` with its errors in
the job layer's tree (the one boundary where they are translated)."""

from __future__ import annotations

import contextlib

from .engine import StoreOpenError as EngineStoreOpenError, close, open_database
from .errors import StoreOpenError


def open(url: str | None = None, *, create: bool = True):  # noqa: A001 - jobs.open, the pinned name
    """Open the store named by ``url`` and return its database (see
    ``jobs.engine.urls`` for the URLs: ``sqlite:PATH``, ``memory:``, ``fdb:[CLUSTER_FILE]``;
    None: ``$JOBS_STORE``, else ``sqlite:.jobs/jobs.sqlite``).  ``create=False`` opens an
    existing store only (for readers: a mistyped path is an error, not a new store).

    Raises :class:`jobs.StoreOpenError` naming the URL and what to do."""
    try:
        return open_database(url, create=create)
    except EngineStoreOpenError as exc:
        raise StoreOpenError(str(exc)) from exc


@contextlib.contextmanager
def opened(url: str | None = None, *, create: bool = True):
    """:func:`open` for a ``with`` block: the database, closed at its end (an embedded
    store's; a FoundationDB database has nothing to close)."""
    db = open(url, create=create)
    try:
        yield db
    finally:
        close(db)
