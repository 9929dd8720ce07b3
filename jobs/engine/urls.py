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

Every failure to open is a :class:`StoreOpenError` naming the URL and what to do.  The
store a database opened here is, and how its URL was chosen, are remembered:
:func:`describe_store` names them in errors whose meaning depends on the store (a type
without a timeout, a job not found), so that a program that opened the default store of
another working directory says so.
"""

from __future__ import annotations

import os
import sqlite3
import sys

from .cluster import open_cluster, resolve_cluster_file
from .errors import StoreOpenError

__all__ = ["ENV_VAR", "DEFAULT_STORE", "StoreOpenError", "default_url", "parse_url", "open_database",
           "describe_store"]

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
        chosen = f"{ENV_VAR} unset: the default in the working directory" if is_default else f"chosen by {ENV_VAR}"
        url = default_url()
        try:
            return _open(url, create, chosen, is_default)
        except StoreOpenError as exc:  # which store, and why that one: the URL was not the caller's
            where = f"{chosen} {os.getcwd()}" if is_default else chosen
            raise StoreOpenError(str(exc).replace(repr(url), f"{url!r} ({where})", 1)) from exc
    return _open(url, create, f"named when opened; {ENV_VAR} not read", False)


def _open(url: str, create: bool, chosen: str, is_default: bool):
    scheme, path = parse_url(url)
    if scheme == "fdb":
        try:
            db = open_cluster(path)
        except StoreOpenError as exc:
            raise StoreOpenError(f"cannot open store {url!r}: {exc}") from exc
        return _remember(db, "fdb:" + resolve_cluster_file(path), chosen)
    if is_default and create:
        os.makedirs(os.path.dirname(DEFAULT_STORE_PATH), exist_ok=True)
    db = _open_embedded(url, path, create)
    return _remember(db, "memory:" if path is None else "sqlite:" + os.path.abspath(path), chosen)


# On a database opened here: (its URL, absolute; how that URL was chosen), for describe_store.
_OPENED = "_jobs_opened_as"


def _remember(db, url: str, chosen: str):
    try:
        db.__dict__[_OPENED] = (url, chosen)
    except AttributeError:  # takes no attribute: described from what it holds
        pass
    return db


def describe_store(handle) -> str:
    """Which store ``handle`` (a database, a transaction of one, or an engine wrapper of
    either) is, for an error message: ``"the store sqlite:/abs/path (JOBS_STORE unset: the
    default in the working directory)"``.  A database opened by :func:`open_database` is
    named by its URL and how that URL was chosen; one opened otherwise (an application's own
    ``fdb.open()``, an ``EmbeddedDatabase`` made directly) by what it holds."""
    db = handle
    for _ in range(8):  # a transaction's database, a wrapper's wrapped one
        inner = getattr(db, "db", None)
        if inner is None or inner is db:
            break
        db = inner
    known = getattr(db, "__dict__", {}).get(_OPENED)
    if known is not None:
        return f"the store {known[0]} ({known[1]})"
    path = getattr(db, "path", None)
    if getattr(db, "memory", False):
        return "a private memory: store"
    if isinstance(path, str):
        return f"the store sqlite:{os.path.abspath(path)} (not opened by jobs.open)"
    bindings = sys.modules.get("fdb.impl")  # (the databases fdb.open() opened, by cluster file)
    for cluster_file, opened in list(getattr(bindings, "open_databases", {}).items()):
        if opened is db:
            where = "the default cluster file" if cluster_file is None else f"cluster file {cluster_file}"
            return f"the FoundationDB store of {where} (not opened by jobs.open)"
    return f"a store of type {type(db).__name__} not opened by jobs.open"


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
        reason = str(exc)
        said = f"cannot open store {path!r}: "  # (the engine's own start: said once, with the URL)
        if reason.startswith(said):
            reason = reason[len(said):]
        raise StoreOpenError(
            f"cannot open store {url!r}: {reason}; check the path, or point the URL at a new file"
        ) from exc
