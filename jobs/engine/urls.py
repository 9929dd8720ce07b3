"""Store URLs: which engine and which store ``jobs.open(url)`` opens.

=====================  ==============================================================
``sqlite:PATH``        embedded engine on the file PATH (created if missing, unless
                       ``create=False``; its directory must exist; ``~`` is expanded;
                       an SQLite file of another application is refused, untouched)
``memory:``            embedded engine on a private temporary store, deleted on
                       ``close()``: one process, tests
``fdb:``               FoundationDB, cluster file found as libfdb_c does
                       ($FDB_CLUSTER_FILE, ./fdb.cluster, /etc/foundationdb/fdb.cluster)
``fdb:CLUSTER_FILE``   FoundationDB, that cluster file
None                   ``$JOBS_STORE`` if set, else ``sqlite:.jobs/jobs.sqlite``
                       (:data:`DEFAULT_STORE`, relative to the working directory,
                       whose ``.jobs`` directory is created when missing)
=====================  ==============================================================

Every failure to open is a :class:`StoreOpenError` naming the URL and what to do.
"""

from __future__ import annotations

import os
import sqlite3

from .cluster import open_cluster
from .errors import StoreOpenError

__all__ = ["ENV_VAR", "DEFAULT_STORE", "StoreOpenError", "default_url", "parse_url", "open_database"]

ENV_VAR = "JOBS_STORE"
DEFAULT_STORE_PATH = os.path.join(".jobs", "jobs.sqlite")
DEFAULT_STORE = "sqlite:" + DEFAULT_STORE_PATH
SCHEMES = ("sqlite", "memory", "fdb")


def default_url() -> str:
    """The URL ``open_database(None)`` opens: ``$JOBS_STORE``, else :data:`DEFAULT_STORE`."""
    return os.environ.get(ENV_VAR) or DEFAULT_STORE


def parse_url(url: str) -> tuple[str, str | None]:
    """Split a store URL into ``(scheme, path)``; ``path`` is None for ``memory:`` and for
    ``fdb:`` without a cluster file.  Raises :class:`StoreOpenError` for a malformed URL."""
    if not isinstance(url, str):
        raise StoreOpenError(f"a store URL must be a string, not {type(url).__name__}")
    scheme, sep, rest = url.partition(":")
    if not sep or scheme not in SCHEMES:
        guess = f"; did you mean 'sqlite:{url}'?" if url and not sep else ""
        raise StoreOpenError(
            f"bad store URL {url!r}: expected sqlite:PATH, memory: or fdb:[CLUSTER_FILE]{guess}"
        )
    if scheme == "sqlite":
        if not rest:
            raise StoreOpenError(f"bad store URL {url!r}: sqlite: needs a file path (sqlite:PATH)")
        return scheme, os.path.expanduser(rest)
    if scheme == "memory":
        if rest:
            raise StoreOpenError(f"bad store URL {url!r}: memory: takes no path (use sqlite:PATH for a file)")
        return scheme, None
    return scheme, (os.path.expanduser(rest) if rest else None)


def open_database(url: str | None = None, *, create: bool = True):
    """Open the store named by ``url`` (see the module docstring) and return a database:
    an :class:`~jobs.engine.embedded.EmbeddedDatabase` or the bindings' ``fdb.Database``.
    ``create=False``: a ``sqlite:`` store file must exist already (for callers that only
    read: a mistyped path is an error, not a new empty store); nothing is created.

    Raises :class:`StoreOpenError` for a bad URL, a missing directory, a file that is not a
    job store (or is corrupt, or was written by a newer release), a missing file with
    ``create=False``, a missing FoundationDB client library or cluster file, or an
    unreachable cluster."""
    is_default = url is None and not os.environ.get(ENV_VAR)
    if url is None:
        url = default_url()
    scheme, path = parse_url(url)
    if scheme == "fdb":
        try:
            return open_cluster(path)
        except StoreOpenError as exc:
            raise StoreOpenError(f"cannot open store {url!r}: {exc}") from exc
    if is_default and create:
        os.makedirs(os.path.dirname(DEFAULT_STORE_PATH), exist_ok=True)
    return _open_embedded(url, path, create)


def _open_embedded(url: str, path: str | None, create: bool):
    from .embedded import EmbeddedDatabase, StoreFileError

    if path is not None:
        if not create and not os.path.exists(path):
            raise StoreOpenError(f"cannot open store {url!r}: store file {path!r} does not exist; check the path")
        directory = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(directory):
            raise StoreOpenError(
                f"cannot open store {url!r}: directory {directory!r} does not exist; create it first"
            )
        if os.path.isdir(path):
            raise StoreOpenError(f"cannot open store {url!r}: {path!r} is a directory; name a file in it")
    try:
        return EmbeddedDatabase(path, create=create) if path is not None else EmbeddedDatabase(None, memory=True)
    except (StoreFileError, sqlite3.Error, OSError) as exc:
        raise StoreOpenError(
            f"cannot open store {url!r}: {exc}; check the path, or point the URL at a new file"
        ) from exc
