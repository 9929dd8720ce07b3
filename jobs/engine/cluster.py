"""The ``fdb`` engine: a real FoundationDB cluster through the official bindings.

Thin on purpose: the bindings provide the API the job layer is written against, and are
used as they are (nothing in ``fdb`` is replaced or patched, so an application may select
the API version and open databases itself, before or after importing this package, and
pass its own ``fdb.Database`` or transactions to the job layer).  This module only

* selects API version 730 if the application has not selected one;
* turns the ways opening can fail (no libfdb_c, no cluster file, unreachable cluster) into
  :class:`~jobs.engine.urls.StoreOpenError` naming what to do.

libfdb_c is not on PyPI: it comes with FoundationDB's client package
(``foundationdb-clients`` 7.3.x, .deb/.rpm from FoundationDB's releases), which also
writes ``/etc/foundationdb/fdb.cluster`` on a server machine.
"""

from __future__ import annotations

import os
import sys
import threading

from .urls import StoreOpenError

API_VERSION = 730
MIN_API_VERSION = 710  # oldest API version whose semantics the job layer was checked against

# Where libfdb_c looks for a cluster file when none is given (FoundationDB's documented
# order: $FDB_CLUSTER_FILE, ./fdb.cluster, then the platform default).
DEFAULT_CLUSTER_FILES = {
    "linux": "/etc/foundationdb/fdb.cluster",
    "darwin": "/usr/local/etc/foundationdb/fdb.cluster",
    "win32": r"C:\ProgramData\foundationdb\fdb.cluster",
}

CLIENT_HINT = (
    "install FoundationDB's client package (foundationdb-clients 7.3.x, which provides "
    "libfdb_c) on this machine, or use the embedded engine (sqlite:PATH)"
)

_load_lock = threading.Lock()


def load_bindings():
    """The ``fdb`` module with libfdb_c loaded: at the API version the application selected
    (at least :data:`MIN_API_VERSION`), else at :data:`API_VERSION`.  Safe to call
    repeatedly.  Raises :class:`StoreOpenError` when the C library is missing or cannot
    serve the version; the embedded engine keeps working after such a failure."""
    import fdb

    with _load_lock:
        if not fdb.is_api_version_selected():
            try:
                fdb.api_version(API_VERSION)
            except Exception as exc:  # noqa: BLE001 - the bindings raise Exception/OSError/RuntimeError
                raise StoreOpenError(
                    f"cannot load the FoundationDB client library: {exc}; {CLIENT_HINT}"
                ) from exc
        version = fdb.get_api_version()
        if version < MIN_API_VERSION:
            raise StoreOpenError(
                f"the fdb bindings were loaded at API version {version}; the job layer needs "
                f"{MIN_API_VERSION} or newer ({API_VERSION} is tested)"
            )
        return fdb


def resolve_cluster_file(cluster_file: str | os.PathLike | None) -> str:
    """The cluster file libfdb_c will use for ``cluster_file`` (None: FoundationDB's search
    order).  Raises :class:`StoreOpenError` when that file does not exist."""
    if cluster_file is not None:
        path = os.path.expanduser(os.fspath(cluster_file))
        where = "the cluster file given"
    elif os.environ.get("FDB_CLUSTER_FILE"):
        path = os.environ["FDB_CLUSTER_FILE"]
        where = "$FDB_CLUSTER_FILE"
    elif os.path.isfile("fdb.cluster"):
        return os.path.abspath("fdb.cluster")
    else:
        path = DEFAULT_CLUSTER_FILES.get(sys.platform, DEFAULT_CLUSTER_FILES["linux"])
        where = "the default cluster file"
    if not os.path.isfile(path):
        raise StoreOpenError(
            f"FoundationDB cluster file {path!r} ({where}) does not exist; pass fdb:PATH, set "
            "$FDB_CLUSTER_FILE, or install foundationdb-clients/foundationdb-server which write "
            "the default one (for the development server: see docker-compose.fdb.yml)"
        )
    return path


def open_cluster(cluster_file: str | os.PathLike | None = None, *, connect_timeout: float | None = 10.0):
    """Open the FoundationDB database described by ``cluster_file`` (None: FoundationDB's
    default search) and return the bindings' ``fdb.Database``.

    With ``connect_timeout`` (seconds; None to skip), a read version is fetched first so
    that an unreachable or unconfigured cluster is reported here instead of hanging the
    first transaction.  Raises :class:`StoreOpenError`."""
    path = resolve_cluster_file(cluster_file)
    fdb = load_bindings()
    try:
        db = fdb.open(path)
    except fdb.FDBError as exc:
        raise StoreOpenError(f"cannot open FoundationDB cluster file {path!r}: {exc}") from exc
    if connect_timeout is not None:
        _probe(fdb, db, path, connect_timeout)
    return db


def _probe(fdb, db, path: str, timeout: float) -> None:
    tr = db.create_transaction()
    tr.options.set_timeout(max(1, int(timeout * 1000)))
    try:
        tr.get_read_version().wait()
    except fdb.FDBError as exc:
        hint = (
            "is the server running and the database configured (fdbcli --exec 'configure new single ssd')?"
            if exc.code == 1031
            else "check the cluster file's contents"
        )
        raise StoreOpenError(f"cannot reach the FoundationDB cluster of {path!r}: {exc}; {hint}") from exc
    finally:
        tr.cancel()
