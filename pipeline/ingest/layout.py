"""The key layout of ingest: the one module that knows its key shapes.

Everything lives under the tuple prefix ``("ingest",)`` (``jobs.prefixes.INGEST``)::

    ("ingest", "meta", "layout")                  = (LAYOUT_VERSION,)  tuple-packed
    ("ingest", "db", Db)                          = {"chunks", "created", "nonce"}
    ("ingest", "last_tid")                        = the last transaction id, tuple-packed
    ("ingest", "txn", Tid)                        = Transaction (JSON, plus nonces)
    ("ingest", "open", Db, Tid)                   = ''  STARTED transactions of Db
    ("ingest", "worker", Name)                    = {"threads", "since", "seen", "ttl"}
    ("ingest", "placement", Db, Chunk)            = worker name (UTF-8)
    ("ingest", "chunk", Chunk, Db)                = worker name: the chunk across databases
    ("ingest", "placed", Db, Worker)              = chunks of Db placed there (atomic add, LE64)
    ("ingest", "load", Tid, JobId)                = {"table", "chunk", "path"}  loads submitted
    ("ingest", "piece", Tid, Table, Chunk, JobId) = {"file", "rows", "bytes", ...}  loaded
    ("ingest", "build", Tid, Location)            = ''  partition directories being built

Data locations no longer needed go to the catalog's trash (``("catalog", "trash", ...)``)
in the transaction that stops referencing them.

``meta/layout`` is written with the first database registered for ingest and checked the
first time a database handle is used (:func:`run`), so a store written by a newer release
is refused (IngestStoreError) instead of misread.
"""

from __future__ import annotations

import weakref

from jobs import prefixes
from jobs.engine import Subspace
from jobs.engine import tuple as fdb_tuple
from jobs.engine.transactional import within

from .. import layout as catalog_layout
from ..errors import IngestStoreError
from ..layout import read, span

__all__ = ["LAYOUT_VERSION", "check_layout", "ensure_layout", "read", "run", "span"]

LAYOUT_VERSION = 1

ROOT = Subspace(prefixes.INGEST)
META = ROOT["meta"]
DATABASES = ROOT["db"]
TRANSACTIONS = ROOT["txn"]
OPEN = ROOT["open"]
WORKERS = ROOT["worker"]
PLACEMENTS = ROOT["placement"]
CHUNKS = ROOT["chunk"]
PLACED = ROOT["placed"]
LOADS = ROOT["load"]
PIECES = ROOT["piece"]
BUILDS = ROOT["build"]
LAYOUT_KEY = META.pack(("layout",))
LAST_TID_KEY = ROOT.pack(("last_tid",))

_checked: "weakref.WeakSet[object]" = weakref.WeakSet()


def check_layout(tr) -> None:
    """IngestStoreError if a newer release wrote the ingest keys (read once per handle)."""
    catalog_layout.check_version(tr, LAYOUT_KEY, LAYOUT_VERSION, what="ingest", corrupt=IngestStoreError,
                                 newer=IngestStoreError, checked=_checked)


def ensure_layout(tr) -> None:
    """Write the layout version if the store has none yet (with the first database)."""
    if read(tr, LAYOUT_KEY) is None:
        tr.set(LAYOUT_KEY, fdb_tuple.pack((LAYOUT_VERSION,)))


def run(tr, fn):
    """``fn(tr)`` joining ``tr`` or in its own transaction, the ingest layout checked first."""

    def body(tr):
        check_layout(tr)
        return fn(tr)

    return within(tr, body)
