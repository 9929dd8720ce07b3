"""The ``fdb`` engine: a real FoundationDB cluster through the official bindings.

Thin on purpose: the bindings already provide the API the job layer is written against.
This module only

* loads the bindings at API version 730, replacing the ``fdb.impl`` stand-in that lets the
  embedded engine use ``fdb.tuple`` without libfdb_c (see ``fdbapi.py``);
* lets the real ``get_range`` accept this project's :class:`~jobs.engine.fdbapi.KeySelector`
  (the bindings test ``isinstance(x, fdb.KeySelector)`` and would otherwise take our
  selector for a key);
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

from . import fdbapi
from .urls import StoreOpenError

API_VERSION = 730

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
    """Import the ``fdb`` bindings with libfdb_c loaded at API version 730 and return the
    ``fdb`` module.  Safe to call repeatedly.  Raises :class:`StoreOpenError` when the C
    library is missing or cannot serve API version 730; the embedded engine keeps working
    after such a failure."""
    import fdb

    with _load_lock:
        if fdb.is_api_version_selected():
            if fdb.get_api_version() != API_VERSION:
                raise StoreOpenError(
                    f"the fdb bindings were already loaded at API version {fdb.get_api_version()}, "
                    f"this package needs {API_VERSION}"
                )
            _adapt(fdb.impl)
            return fdb
        fdbapi.remove_impl_standin()
        try:
            import fdb.impl  # noqa: F401  - loads libfdb_c (a bare Exception when it is missing)

            fdb.api_version(API_VERSION)
        except Exception as exc:  # noqa: BLE001 - the bindings raise Exception/OSError/RuntimeError
            sys.modules.pop("fdb.impl", None)
            if hasattr(fdb, "impl"):
                del fdb.impl
            fdbapi.install_impl_standin()  # keep fdb.tuple usable for the embedded engine
            raise StoreOpenError(f"cannot load the FoundationDB client library: {exc}; {CLIENT_HINT}") from exc
        _adapt(fdb.impl)
        return fdb


def _adapt(impl) -> None:
    """Make the bindings serve the API subset the job layer is written against."""
    _accept_project_key_selectors(impl)
    _value_wait_returns_bytes(impl)


def _value_wait_returns_bytes(impl) -> None:
    """``tr.get(key).wait()`` is the value's bytes, or None for an absent key, as on the
    embedded engine.  The bindings' ``Value.wait()`` returns the future itself, which is
    never None, so every ``... .wait() is None`` test would see a missing key as present."""
    if getattr(impl.Value.wait, "_jobs_patched", False):
        return

    def wait(self):
        return self.value  # blocks until ready; bytes, or None when the key is absent

    wait._jobs_patched = True
    impl.Value.wait = wait


def _accept_project_key_selectors(impl) -> None:
    """Make the bindings' range reads accept any object shaped like a key selector."""
    original = impl.TransactionRead._to_selector
    if getattr(original, "_jobs_patched", False):
        return

    def _to_selector(self, key_or_selector):
        if not isinstance(key_or_selector, impl.KeySelector) and hasattr(key_or_selector, "or_equal"):
            s = key_or_selector
            key_or_selector = impl.KeySelector(s.key, s.or_equal, s.offset)
        return original(self, key_or_selector)

    _to_selector._jobs_patched = True
    impl.TransactionRead._to_selector = _to_selector


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
