"""The key layout of ingest: the one module that knows its key shapes (the others build
and read keys through the functions below).

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

``meta/layout`` (:data:`LAYOUT`) is written with the first database registered for ingest
and checked the first time a database handle is used (:func:`run`), so a store written by a
newer release is refused (IngestStoreError) instead of misread.
"""

from __future__ import annotations

import struct

from jobs import prefixes
from jobs.engine import tuple as fdb_tuple, within
from jobs.layouts import Layout

from ..errors import IngestStoreError
from ..layout import read, span  # the catalog layout's helpers serve ingest's keys too

LAYOUT_VERSION = 1

LAYOUT = Layout("ingest", prefixes.INGEST, LAYOUT_VERSION, key=("meta", "layout"), error=IngestStoreError,
                newer=IngestStoreError)
ROOT = LAYOUT.space
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
LAYOUT_KEY = LAYOUT.key
LAST_TID_KEY = ROOT.pack(("last_tid",))


def run(tr, fn):
    """``fn(tr)`` joining ``tr`` or in its own transaction, the ingest layout checked first."""

    def body(tr):
        LAYOUT.check(tr)
        return fn(tr)

    return within(tr, body)


# --- keys: built and taken apart here only -------------------------------------------------


def database_key(database: str) -> bytes:
    return DATABASES.pack((database,))


def transaction_key(tid: int) -> bytes:
    return TRANSACTIONS.pack((tid,))


def transactions(tr) -> list[tuple[bytes, bytes]]:
    """(key, record) of every transaction, by id."""
    return list(tr.get_range(*span(TRANSACTIONS)))


def last_tid(tr) -> int:
    """The last transaction id drawn (0 before the first)."""
    raw = read(tr, LAST_TID_KEY)
    return fdb_tuple.unpack(raw)[0] if raw is not None else 0


def set_last_tid(tr, tid: int) -> None:
    tr.set(LAST_TID_KEY, fdb_tuple.pack((tid,)))


def open_key(database: str, tid: int) -> bytes:
    return OPEN.pack((database, tid))


def open_ids(tr, database: str, limit: int = 0) -> list[int]:
    """The ids of the STARTED transactions of ``database`` (the first ``limit``; 0: all)."""
    begin, end = span(OPEN, database)
    return [OPEN.unpack(k)[1] for k, _v in tr.get_range(begin, end, limit=limit)]


def worker_key(name: str) -> bytes:
    return WORKERS.pack((name,))


def workers(tr) -> list[tuple[str, bytes, bytes]]:
    """(name, key, record) of every worker registration, by name."""
    return [(WORKERS.unpack(k)[0], k, v) for k, v in tr.get_range(*span(WORKERS))]


def placement_key(database: str, chunk: int) -> bytes:
    return PLACEMENTS.pack((database, chunk))


def chunk_key(chunk: int, database: str) -> bytes:
    return CHUNKS.pack((chunk, database))


def chunk_workers(tr, chunk: int) -> list[str]:
    """The workers chunk number ``chunk`` is placed on, in every database (by database)."""
    return [v.decode() for _k, v in tr.get_range(*span(CHUNKS, chunk))]


def count_placed(tr, database: str, worker: str) -> None:
    """One more chunk of ``database`` placed on ``worker`` (an atomic add: no conflict)."""
    tr.add(PLACED.pack((database, worker)), struct.pack("<q", 1))


def placed(tr, database: str, worker: str) -> int:
    """How many chunks of ``database`` are placed on ``worker``."""
    raw = read(tr, PLACED.pack((database, worker)))
    return 0 if raw is None else struct.unpack("<q", raw[:8].ljust(8, b"\0"))[0]


def load_key(tid: int, job_id: str) -> bytes:
    return LOADS.pack((tid, job_id))


def loads(tr, tid: int) -> list[tuple[str, bytes, bytes]]:
    """(job id, key, record) of the loads transaction ``tid`` submitted."""
    return [(LOADS.unpack(k)[1], k, v) for k, v in tr.get_range(*span(LOADS, tid))]


def piece_key(tid: int, table: str, chunk: int, job_id: str) -> bytes:
    return PIECES.pack((tid, table, chunk, job_id))


def pieces(tr, tid: int) -> list[tuple[tuple[str, int, str], bytes, bytes]]:
    """((table, chunk, job id), key, record) of the pieces transaction ``tid`` loaded."""
    out = []
    for k, v in tr.get_range(*span(PIECES, tid)):
        _tid, table, chunk, job_id = PIECES.unpack(k)
        out.append(((table, chunk, job_id), k, v))
    return out


def build_key(tid: int, location: str) -> bytes:
    return BUILDS.pack((tid, location))


def builds(tr, tid: int) -> list[str]:
    """The partition directories recorded as being built for transaction ``tid``."""
    return [BUILDS.unpack(k)[1] for k, _v in tr.get_range(*span(BUILDS, tid))]


def clear_transaction_data(tr, tid: int) -> None:
    """Clear the builds, pieces and loads of transaction ``tid``."""
    for space in (BUILDS, PIECES, LOADS):
        tr.clear_range(*span(space, tid))
