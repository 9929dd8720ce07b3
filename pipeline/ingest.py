"""Ingest super-transactions (the Qserv seed): load chunk files into the tables of an
unpublished database, make each transaction's chunks part of the tables atomically (or
drop them), then publish the database.

    ingest.register_database(db, "sky", chunks=16)                   # unpublished
    ingest.register_table(db, "sky", "obj", schema, chunk_column="chunk_id")
    txn = ingest.begin_transaction(db, "sky")                        # txn.id, txn.hints
    ingest.chunk_placement(db, txn.id, 7).worker                     # same chunk, same answer
    ingest.load_chunk(db, txn.id, "obj", 7, "/data/obj_7.csv", wait=True)   # a queue job
    ingest.end_transaction(db, txn.id)                   # or commit=False: abort
    ingest.publish_database(db, "sky")                   # now queries and operations see it

    processor = Processor(db); ingest.attach(processor)  # a worker that runs the loads

Model:

* A **chunk** is a partition id of a table: ``0..chunks-1`` of a partitioned table (the
  database's ``chunks``, its partitioning; the table's ``chunk_column`` holds the chunk
  number of each row), ``0`` for a regular table (one partition).
* A **super-transaction** belongs to one database; states STARTED, then FINISHED or
  ABORTED.  Tables can be registered only while no transaction of the database is
  STARTED; the database can be published only when none is (each STARTED transaction is a
  catalog *writer* of the database, so ``pipeline.publish_database`` refuses too), and a
  published database takes no more data: loads and normal ends are refused.
* A **load** is a queue job (type ``ingest.load``) that parses one CSV/TSV file of one
  chunk of one table (``pipeline.ingest_files``) and writes it as a Parquet *piece* under
  the table's hidden per-transaction area (``<table location>/.ingest-<tid>/``), a new
  file per run (``ctx.run_id``).  It registers the piece with ``ctx.on_commit``: in the
  transaction that finishes the job, so exactly once, and never by a worker that lost the
  job.  The job id is derived from (transaction, table, chunk, path): loading the same file
  again joins or returns the earlier load; other files of the chunk add pieces.
* **Ending** a transaction builds, for every chunk it loaded, a new partition directory
  holding the chunk's current data and its new pieces (hard links: no data is copied),
  then in ONE store transaction stages and publishes them all (``catalog.set_partition`` /
  ``publish_partitions`` with the transaction's tag), trashes the replaced directories
  and the transaction's area, and marks it FINISHED.  Readers see all of its chunks or
  none.  It refuses while loads are pending or running.  **Aborting** removes its load
  jobs (a running one is halted and registers nothing), trashes its area, and marks it
  ABORTED: nothing of it remains once the collector (``pipeline.collector``) deleted
  its trash.
* **Placement**: a chunk's worker is assigned once per (database, chunk), in a store
  transaction that reads the assignment first, so concurrent requests agree (the loser
  of a conflict is retried and reads the winner's answer).  New chunks go to the worker
  that already holds the same chunk number in another database (collocation), else to the
  worker with the fewest chunks of the database.  Workers are the names processors
  register with :func:`attach` (default: the host name), and only live ones count (for
  hints and new placements): a registration lives ``ttl`` seconds after its last
  heartbeat, which the processor sends while it serves.  A chunk placed earlier keeps its
  worker, live or not (the seed: "where the new chunk will be placed, or where it's
  already located").  The hint is advisory: loads are
  queue jobs that any processor may run, and data lives on a filesystem all workers share;
  on one machine there is one worker and every chunk is placed on it.

Key layout (this module is the only one that knows it), under ``("ingest",)``::

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
"""

from __future__ import annotations

import hashlib
import os
import socket
import struct
import time
import uuid
import weakref
from dataclasses import dataclass

import orjson

import jobs
from jobs import checks, prefixes
from jobs.checks import ArgumentTypeError
from jobs.engine import Subspace
from jobs.engine import tuple as fdb_tuple
from jobs.engine.transactional import is_database, within
from processors import Retry, TaskFailed, TaskFuture

from . import catalog, ingest_files, layout, schema
from .errors import (
    DatabaseNotFound,
    DatabasePublished,
    IngestError,
    IngestStoreError,
    InvalidChunk,
    LoadFailed,
    LoadFileError,
    LoadsInProgress,
    NoIngestWorkers,
    TableNotFound,
    TransactionNotFound,
    TransactionsOpen,
    TransactionStateError,
)
from .records import Database, Partition, Table, json_object

__all__ = [
    "ABORTED",
    "FINISHED",
    "LOAD_TYPE",
    "STARTED",
    "Hints",
    "Placement",
    "Transaction",
    "Worker",
    "attach",
    "begin_transaction",
    "chunk_placement",
    "end_transaction",
    "forget_expired_workers",
    "get_transaction",
    "list_transactions",
    "list_workers",
    "load_chunk",
    "load_handler",
    "publish_database",
    "register_database",
    "register_table",
    "register_worker",
    "unregister_worker",
]

LAYOUT_VERSION = 1
LOAD_TYPE = "ingest.load"
LOAD_TIMEOUT = 60.0  # type timeout of load jobs (the processor heartbeats 3 times per timeout)
STARTED, FINISHED, ABORTED = "STARTED", "FINISHED", "ABORTED"
BUILD_ATTEMPTS = 5  # end_transaction rebuilds when a chunk changed under it (another end)
WORKER_TTL = 30.0  # seconds a worker registration lives after its last heartbeat
HEARTBEATS_PER_TTL = 3  # two may be late before the registration expires
clock = time.time  # the time registrations are measured with (seconds since the epoch; tests set it)

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


# --- records -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Hints:
    """What a loading workflow may use at once: ``workers`` registered workers
    (``names``), ``threads`` loading threads at each (the fewest any of them has)."""

    workers: int
    threads: int
    names: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Transaction:
    """A super-transaction.  ``hints``: as given when it began; ``rows``/``files``: what
    its end published (0 before)."""

    id: int
    database: str
    state: str  # STARTED, FINISHED or ABORTED
    started: float
    ended: float | None
    hints: Hints
    rows: int
    files: int


@dataclass(frozen=True, slots=True)
class Placement:
    """Where chunk ``chunk`` of ``database`` is placed (or will be)."""

    database: str
    chunk: int
    worker: str


@dataclass(frozen=True, slots=True)
class Worker:
    """A registered ingest worker: live until ``seen + ttl`` (its last heartbeat plus its
    registration's time to live), registered since ``since``."""

    name: str
    threads: int
    since: float
    seen: float = 0.0
    ttl: float = 0.0

    def live(self, now: float) -> bool:
        return now < self.seen + self.ttl


def _json(value) -> bytes:
    return orjson.dumps(value)


def _decode(raw: bytes, where: str) -> dict:
    return json_object(raw, where, IngestStoreError)


def _transaction(rec: dict) -> Transaction:
    try:
        h = rec["hints"]
        hints = Hints(int(h["workers"]), int(h["threads"]), tuple(h["names"]))
        return Transaction(int(rec["id"]), rec["database"], rec["state"], rec["started"], rec["ended"], hints,
                           int(rec["rows"]), int(rec["files"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise IngestStoreError(f"transaction record {rec!r:.200} is corrupt") from exc


# --- plumbing ------------------------------------------------------------------------------

_checked: "weakref.WeakSet[object]" = weakref.WeakSet()


def _check_layout(tr) -> None:
    """IngestStoreError if a newer release wrote the ingest keys (read once per handle)."""
    layout.check_version(tr, LAYOUT_KEY, LAYOUT_VERSION, what="ingest", corrupt=IngestStoreError,
                         newer=IngestStoreError, checked=_checked)


def _in(tr, fn):
    """``fn(tr)`` joining ``tr`` or in its own transaction, the ingest layout checked first."""

    def body(tr):
        _check_layout(tr)
        return fn(tr)

    return within(tr, body)


def _tid(value) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgumentTypeError(f"transaction id must be an int, not {type(value).__name__}")
    if value < 1:
        raise ValueError(f"transaction id must be 1 or more, not {value}")
    return value


def _chunk_arg(value) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgumentTypeError(f"chunk must be an int, not {type(value).__name__}")
    return value


def _tag(tid: int) -> str:
    """The catalog tag of the partitions a transaction stages."""
    return f"ingest-{tid}"


def _area(table: Table, tid: int) -> str:
    """The hidden directory of a transaction's pieces of ``table`` (Spark and Hadoop skip
    names starting with '.'; dropping the table trashes it with the table's location)."""
    return os.path.join(table.location, f".ingest-{tid}")


# --- reading state -------------------------------------------------------------------------


def _db_record(tr, name: str) -> dict | None:
    raw = layout.read(tr, DATABASES.pack((name,)))
    return None if raw is None else _decode(raw, f"ingest record of database {name!r}")


def _unpublished(tr, name: str) -> tuple[Database, int]:
    """The database and its chunk count; it must be known to ingest and not published."""
    db = catalog.get_database(tr, name)
    rec = _db_record(tr, name)
    if rec is None:
        raise DatabaseNotFound(
            f"database {name!r} was not registered for ingest: create it with ingest.register_database()"
        )
    if db.published:
        raise DatabasePublished(f"database {name!r} is published: ingest needs an unpublished database")
    return db, int(rec["chunks"])


def _record(tr, tid: int) -> dict:
    raw = layout.read(tr, TRANSACTIONS.pack((tid,)))
    if raw is None:
        raise TransactionNotFound(f"super-transaction {tid} does not exist")
    return _decode(raw, f"record of super-transaction {tid}")


def _started(tr, tid: int) -> dict:
    rec = _record(tr, tid)
    if rec.get("state") != STARTED:
        raise TransactionStateError(
            f"super-transaction {tid} of database {rec.get('database')!r} is {rec.get('state')}, not STARTED"
        )
    return rec


def _writable(tr, tid: int) -> dict:
    """The record of STARTED transaction ``tid`` whose database is not published: what a
    load and a normal end need.  (A store written before publishing checked the catalog's
    writers may hold a STARTED transaction of a published database: it can only be
    aborted.)"""
    rec = _started(tr, tid)
    if catalog.get_database(tr, rec["database"]).published:
        raise DatabasePublished(f"super-transaction {tid} cannot write into database {rec['database']!r}: it is "
                                "published, and published databases take no more data (abort the transaction)")
    return rec


def _open_ids(tr, database: str, limit: int = 0) -> list[int]:
    begin, end = layout.span(OPEN, database)
    return [OPEN.unpack(k)[1] for k, _v in tr.get_range(begin, end, limit=limit)]


def _refuse_open(tr, database: str, doing: str) -> None:
    open_ids = _open_ids(tr, database, limit=10)
    if open_ids:
        shown = ", ".join(map(str, open_ids))
        raise TransactionsOpen(
            f"cannot {doing}: database {database!r} has STARTED super-transactions ({shown}): end or abort them first"
        )


def _workers(tr) -> list[Worker]:
    """The live workers (registrations not expired), by name."""
    now = clock()
    return [w for w in _registered(tr) if w.live(now)]


def _registered(tr) -> list[Worker]:
    """Every worker record, expired or not, by name."""
    begin, end = layout.span(WORKERS)
    records = tr.get_range(begin, end)
    return [_worker(WORKERS.unpack(k)[0], _decode(v, f"ingest worker record {k!r}")) for k, v in records]


def _worker(name: str, rec: dict) -> Worker:
    """A worker from its record; one an older release wrote (no heartbeat: no ``seen``)
    has expired."""
    try:
        return Worker(name, int(rec["threads"]), rec["since"], rec.get("seen", 0.0), rec.get("ttl", 0.0))
    except (KeyError, TypeError, ValueError) as exc:
        raise IngestStoreError(f"ingest worker record {name!r} is corrupt: {rec!r:.200}") from exc


def _hints(tr) -> Hints:
    workers = _workers(tr.snapshot)  # a hint: no conflict with workers coming and going
    return Hints(len(workers), min((w.threads for w in workers), default=0), tuple(w.name for w in workers))


def _valid_chunk(chunk: int, count: int, what: str) -> int:
    if not 0 <= chunk < count:
        valid = "0" if count == 1 else f"0..{count - 1}"
        raise InvalidChunk(f"chunk {chunk} is not a valid chunk of {what} (valid: {valid})")
    return chunk


def _table_chunk(table: Table, chunk: int) -> int:
    kind = f"partitioned table {table.qualified_name}" if not table.regular else f"regular table {table.qualified_name}"
    return _valid_chunk(chunk, table.partitions, kind)


def _loadable(table: Table) -> Table:
    if not table.managed:
        raise IngestError(f"table {table.qualified_name} is external (its location is not the catalog's): "
                          "ingest loads managed tables only")
    if not table.regular:
        column = next(c for c in table.columns if c.name == table.partition_by)
        if column.type not in ingest_files.INT_TYPES:
            raise IngestError(f"table {table.qualified_name} is partitioned by {column.name} ({column.type}): "
                              "ingest needs an integer chunk column")
    return table


def _loads(tr, tid: int) -> dict[str, dict]:
    begin, end = layout.span(LOADS, tid)
    return {LOADS.unpack(k)[1]: _decode(v, f"ingest load {k!r}") for k, v in tr.get_range(begin, end)}


def _pieces(tr, tid: int) -> dict[tuple[str, int, str], dict]:
    """(table, chunk, job id) -> piece record, of transaction ``tid``."""
    begin, end = layout.span(PIECES, tid)
    out = {}
    for k, v in tr.get_range(begin, end):
        _tid_, table, chunk, job_id = PIECES.unpack(k)
        out[(table, chunk, job_id)] = _decode(v, f"ingest piece {k!r}")
    return out


def _refuse_active_loads(tr, tid: int, loads: dict[str, dict]) -> None:
    active = []
    for job_id, load in loads.items():
        try:
            state = jobs.get_job_state(tr, LOAD_TYPE, job_id)
        except jobs.NotFound:
            continue
        if state != "finished":
            active.append((state, load))
    if active:
        shown = "; ".join(f"{s}: {ld['table']} chunk {ld['chunk']} from {ld['path']}" for s, ld in active[:5])
        more = f" and {len(active) - 5} more" if len(active) > 5 else ""
        raise LoadsInProgress(
            f"super-transaction {tid} has {len(active)} load(s) pending or running ({shown}{more}): "
            "wait for them (the futures load_chunk returned) or abort the transaction"
        )


# --- databases and tables ------------------------------------------------------------------


def register_database(tr, name: str, *, chunks: int, location: str | None = None) -> Database:
    """Create an unpublished database to ingest, partitioned in ``chunks`` chunks (the
    partitions of each of its partitioned tables).  ``location``: as
    :func:`catalog.create_database`.  Raises DatabaseExists (the database must not be
    known), ValueError."""
    schema.name(name, "database name")
    if isinstance(chunks, bool) or not isinstance(chunks, int):
        raise ArgumentTypeError(f"chunks must be an int, not {type(chunks).__name__}")
    if not 1 <= chunks <= schema.PARTITIONS_MAX:
        raise ValueError(f"chunks must be between 1 and {schema.PARTITIONS_MAX}, not {chunks}")
    if location is not None:
        location = schema.location(location)
    nonce = uuid.uuid4().hex

    def body(tr):
        rec = _db_record(tr, name)
        if rec is not None and rec.get("nonce") == nonce:
            return catalog.get_database(tr, name)  # this call's commit, behind 1021
        db = catalog.create_database(tr, name, location=location)
        if layout.read(tr, LAYOUT_KEY) is None:
            tr.set(LAYOUT_KEY, fdb_tuple.pack((LAYOUT_VERSION,)))
        tr.set(DATABASES.pack((name,)), _json({"chunks": chunks, "created": time.time(), "nonce": nonce}))
        return db

    return _in(tr, body)


def register_table(tr, database: str, name: str, table_schema: list[dict], *,
                   chunk_column: str | None = None) -> Table:
    """Add a table to a database being ingested: partitioned by ``chunk_column`` (an
    integer, NOT NULL column holding each row's chunk number) in the database's chunks, or
    regular (one partition, chunk 0) without it.  Raises DatabaseNotFound,
    DatabasePublished, TransactionsOpen (a super-transaction of the database is STARTED),
    TableExists, ValueError for a bad schema."""
    cols = schema.columns(table_schema)
    if chunk_column is not None:
        match = [c for c in cols if c.name == chunk_column]
        if match and match[0].type not in ingest_files.INT_TYPES:
            raise ValueError(f"chunk_column {chunk_column!r} is {match[0].type}: it must be an integer type "
                             f"({', '.join(ingest_files.INT_TYPES)})")
    made: list[Table] = []

    def body(tr):
        if made:  # an attempt created it: its commit may have happened (1021)
            try:
                current = catalog.get_table(tr, database, name, published_only=False)
                if current.id == made[0].id:
                    return current
            except TableNotFound:
                pass
        _db, chunks = _unpublished(tr, database)
        _refuse_open(tr, database, f"register table {name!r}")
        table = catalog.create_table(tr, database, name, table_schema, partition_by=chunk_column,
                                     partitions=chunks if chunk_column is not None else 1)
        made[:] = [table]
        return table

    return _in(tr, body)


def publish_database(tr, name: str) -> Database:
    """Publish the database: from now on queries and operations see it, and it takes no
    more data (no transaction begins, no load runs, no transaction ends normally).  The
    seed's prerequisites, then :func:`catalog.publish_database` (which alone refuses open
    transactions too: ``pipeline.publish_database``).  Raises DatabaseNotFound (also when
    not registered for ingest), DatabasePublished (already published), TransactionsOpen
    (some super-transaction of it is still STARTED, named)."""
    schema.name(name, "database name")
    done: list[Database] = []

    def body(tr):
        if done:
            db = catalog.get_database(tr, name)
            if db.published:
                return db  # this call's commit, behind 1021
        _unpublished(tr, name)
        _refuse_open(tr, name, f"publish database {name!r}")
        db = catalog.publish_database(tr, name)
        done[:] = [db]
        return db

    return _in(tr, body)


# --- workers and placement -----------------------------------------------------------------


def register_worker(tr, name: str, *, threads: int = 1, ttl: float = WORKER_TTL) -> Worker:
    """Register an ingest worker (a name chunks are placed on, with its number of loading
    threads, for the hints of new transactions), or renew its registration: it lives
    ``ttl`` seconds, so call this again sooner (a heartbeat: :func:`attach` makes the
    processor do it) to stay registered.  Times are the machines' clocks: keep them in
    step to well within ``ttl``."""
    schema.token(name, "worker name")
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be an int >= 1, not {threads!r}")
    ttl = checks.seconds(ttl, "ttl", positive=True)
    key = WORKERS.pack((name,))

    def body(tr):
        now = clock()
        raw = layout.read(tr.snapshot, key)  # only to keep `since`: renewals must not conflict
        old = None if raw is None else _worker(name, _decode(raw, f"ingest worker record {name!r}"))
        since = old.since if old is not None and old.live(now) else now
        tr.set(key, _json({"threads": threads, "since": since, "seen": now, "ttl": ttl}))
        return Worker(name, threads, since, now, ttl)

    return _in(tr, body)


def unregister_worker(tr, name: str) -> None:
    """Forget a worker: no new chunk is placed on it (chunks placed there keep their
    placement).  A processor that :func:`attach` registered does it when it stops."""
    schema.token(name, "worker name")
    _in(tr, lambda tr: tr.clear(WORKERS.pack((name,))))


def forget_expired_workers(tr) -> list[str]:
    """Clear the records of expired registrations (a worker that comes back registers
    anew), so that they do not pile up as processes come and go; the names forgotten.  The
    records are read with conflicts: a renewal committed meanwhile makes this retry (or, in
    the caller's transaction, fail) rather than forget a live worker.  The collector job
    (``pipeline.collector``) runs it."""

    def body(tr):
        now = clock()
        gone = [w.name for w in _registered(tr) if not w.live(now)]
        for name in gone:
            tr.clear(WORKERS.pack((name,)))
        return gone

    return _in(tr, body)


def list_workers(tr) -> list[Worker]:
    """The live workers (registered, not expired), sorted by name."""
    return _in(tr, _workers)


def chunk_placement(tr, tid: int, chunk: int) -> Placement:
    """The worker chunk ``chunk`` of the transaction's database is (or now gets) placed on.
    The same chunk always gets the same answer, concurrent requests included.  Raises
    TransactionNotFound, TransactionStateError (not STARTED), InvalidChunk (outside the
    database's chunks), NoIngestWorkers (none registered, for a chunk not placed yet)."""
    tid = _tid(tid)
    chunk = _chunk_arg(chunk)

    def body(tr):
        rec = _started(tr, tid)
        database = rec["database"]
        _db, chunks = _unpublished(tr, database)
        _valid_chunk(chunk, chunks, f"database {database!r} (its chunks)")
        key = PLACEMENTS.pack((database, chunk))
        placed = layout.read(tr, key)  # a conflicting read: concurrent assigners serialise here
        if placed is not None:
            return Placement(database, chunk, placed.decode())
        names = [w.name for w in _workers(tr.snapshot)]
        if not names:
            raise NoIngestWorkers(f"chunk {chunk} of {database!r} cannot be placed: no live ingest worker (none "
                                  "registered, or their registrations expired: start a processor with "
                                  "pipeline.ingest.attach())")
        worker = _choose(tr, database, chunk, names)
        tr.set(key, worker.encode())
        tr.set(CHUNKS.pack((chunk, database)), worker.encode())
        tr.add(PLACED.pack((database, worker)), struct.pack("<q", 1))
        return Placement(database, chunk, worker)

    return _in(tr, body)


def _choose(tr, database: str, chunk: int, names: list[str]) -> str:
    """The worker holding this chunk number in another database (collocation), else the
    one with the fewest chunks of ``database`` (ties: by a hash, so they spread).  The
    counts are read with conflicts, so concurrent placements of new chunks of a database
    serialise (one retried) and spread evenly; the collocation index is a snapshot read."""
    begin, end = layout.span(CHUNKS, chunk)
    for _k, v in tr.snapshot.get_range(begin, end):
        if v.decode() in names:
            return v.decode()

    def load(name):
        raw = layout.read(tr, PLACED.pack((database, name)))
        count = 0 if raw is None else struct.unpack("<q", raw[:8].ljust(8, b"\0"))[0]
        tie = hashlib.sha256(f"{database}\0{chunk}\0{name}".encode()).digest()
        return count, tie

    return min(names, key=load)


# --- transactions --------------------------------------------------------------------------


def begin_transaction(tr, database: str) -> Transaction:
    """Start a super-transaction of ``database``: its id (1, 2, ... per store) and hints
    (workers and their threads).  Raises DatabaseNotFound, DatabasePublished."""
    schema.name(database, "database name")
    nonce = uuid.uuid4().hex
    drawn: list[int] = []  # the id an attempt took: its commit may have happened (1021)

    def body(tr):
        if drawn:
            raw = layout.read(tr, TRANSACTIONS.pack((drawn[0],)))
            if raw is not None and _decode(raw, "transaction").get("nonce") == nonce:
                return _transaction(_decode(raw, "transaction"))
        _unpublished(tr, database)
        raw = layout.read(tr, LAST_TID_KEY)
        tid = (fdb_tuple.unpack(raw)[0] if raw is not None else 0) + 1
        hints = _hints(tr)
        rec = {"id": tid, "database": database, "state": STARTED, "started": time.time(), "ended": None,
               "hints": {"workers": hints.workers, "threads": hints.threads, "names": list(hints.names)},
               "rows": 0, "files": 0, "nonce": nonce}
        tr.set(LAST_TID_KEY, fdb_tuple.pack((tid,)))
        tr.set(TRANSACTIONS.pack((tid,)), _json(rec))
        tr.set(OPEN.pack((database, tid)), b"")
        catalog.open_writer(tr, database, _tag(tid), f"super-transaction {tid}")  # holds off publishing
        drawn[:] = [tid]
        return _transaction(rec)

    return _in(tr, body)


def get_transaction(tr, tid: int) -> Transaction:
    """The super-transaction.  Raises TransactionNotFound."""
    tid = _tid(tid)
    return _in(tr, lambda tr: _transaction(_record(tr, tid)))


def list_transactions(tr, database: str | None = None, *, state: str | None = None) -> list[Transaction]:
    """Super-transactions (of ``database``; in ``state``), by id."""
    if state not in (None, STARTED, FINISHED, ABORTED):
        raise ValueError(f"state must be STARTED, FINISHED, ABORTED or None, not {state!r}")
    begin, end = layout.span(TRANSACTIONS)

    def body(tr):
        out = [_transaction(_decode(v, f"transaction {k!r}")) for k, v in tr.get_range(begin, end)]
        return [t for t in out if (database is None or t.database == database) and (state is None or t.state == state)]

    return _in(tr, body)


def end_transaction(db, tid: int, *, commit: bool = True) -> Transaction:
    """End super-transaction ``tid``: normally (``commit=True``: every chunk it loaded
    becomes part of its table, all in one store transaction) or abnormally (``False``: its
    loads are removed, halting running ones, and its data goes to the trash).  Takes a
    database: committing builds partition directories between store transactions.

    Raises TransactionNotFound, TransactionStateError (not STARTED), DatabasePublished
    (commit into a published database), LoadsInProgress (commit while loads are pending or
    running), TableNotFound (a table it loaded was dropped meanwhile: abort it).  Safe to
    retry: a retry after an unknown commit result returns the ended transaction."""
    if not is_database(db):
        raise ArgumentTypeError("end_transaction builds files between transactions: pass a database, not a transaction")
    tid = _tid(tid)
    if not isinstance(commit, bool):
        raise ArgumentTypeError(f"commit must be a bool, not {type(commit).__name__}")
    nonce = uuid.uuid4().hex
    if not commit:
        return _in(db, lambda tr: _abort(tr, tid, nonce))
    for _attempt in range(BUILD_ATTEMPTS):
        plan = _in(db, lambda tr: _plan(tr, tid, nonce))
        if isinstance(plan, Transaction):
            return plan
        built = _build(db, tid, plan)
        try:
            done = _in(db, lambda tr: _finish(tr, tid, nonce, plan, built))
        except BaseException:
            _in(db, lambda tr: _drop_builds(tr, tid, built.values()))
            raise
        if done is not None:
            return done
        _in(db, lambda tr: _drop_builds(tr, tid, built.values()))  # a chunk changed: build again
    raise IngestError(f"super-transaction {tid}: its chunks kept changing while it ended "
                      f"({BUILD_ATTEMPTS} attempts); try again")


@dataclass(frozen=True)
class _Chunk:
    """One chunk a transaction loaded: its table version, pieces and current data."""

    table: Table
    chunk: int
    pieces: tuple[tuple[str, str, int], ...]  # (job id, file, rows)
    base: Partition | None  # the published data it adds to


def _closed_by_me(rec: dict, nonce: str) -> Transaction | None:
    if rec.get("state") != STARTED and rec.get("closed_by") == nonce:
        return _transaction(rec)  # this call's commit, behind commit_unknown_result
    return None


def _plan(tr, tid: int, nonce: str):
    rec = _record(tr, tid)
    mine = _closed_by_me(rec, nonce)
    if mine is not None:
        return mine
    _writable(tr, tid)
    _refuse_active_loads(tr, tid, _loads(tr, tid))
    return _chunks(tr, rec["database"], tid)


def _chunks(tr, database: str, tid: int) -> list[_Chunk]:
    grouped: dict[tuple[str, int], list] = {}
    ids: dict[str, str] = {}
    for (table, chunk, job_id), piece in sorted(_pieces(tr, tid).items()):
        grouped.setdefault((table, chunk), []).append((job_id, piece["file"], int(piece["rows"])))
        ids[table] = piece["table_id"]
    tables, published = {}, {}
    for name, table_id in ids.items():
        table = catalog.get_table(tr, database, name, published_only=False)
        if table.id != table_id:
            raise TableNotFound(f"table {database}.{name} was dropped or replaced during super-transaction {tid}: "
                                "abort the transaction")
        tables[name] = table
        published[name] = {p.pid: p for p in catalog.get_partitions(tr, table)}
    return [_Chunk(tables[t], c, tuple(pieces), published[t].get(c)) for (t, c), pieces in grouped.items()]


def _build(db, tid: int, plan: list[_Chunk]) -> dict[tuple[str, int], str]:
    """Build the new directory of every chunk (recorded first, so that a crash leaves
    nothing the next end or abort would not trash); (table, chunk) -> location."""
    locations = {(c.table.name, c.chunk): c.table.partition_location(c.chunk, f"{_tag(tid)}-{uuid.uuid4().hex[:12]}")
                 for c in plan}

    def intend(tr):
        for location in locations.values():
            tr.set(BUILDS.pack((tid, location)), b"")

    if locations:
        _in(db, intend)
    for c in plan:
        pieces = {f"ingest-{tid}-{job_id}.parquet": path for job_id, path, _rows in c.pieces}
        ingest_files.assemble(locations[(c.table.name, c.chunk)], c.base.location if c.base else None, pieces)
    return locations


def _drop_builds(tr, tid: int, locations) -> None:
    locations = list(locations)
    for location in locations:
        tr.clear(BUILDS.pack((tid, location)))
    catalog.send_to_trash(tr, locations, f"unused partition directory of ingest transaction {tid}")


def _finish(tr, tid: int, nonce: str, plan: list[_Chunk], built: dict) -> Transaction | None:
    """Publish the built chunks and mark the transaction FINISHED; None if a chunk changed
    since the plan (build again)."""
    rec = _record(tr, tid)
    mine = _closed_by_me(rec, nonce)
    if mine is not None:
        return mine
    _writable(tr, tid)
    loads = _loads(tr, tid)
    _refuse_active_loads(tr, tid, loads)
    now_plan = _chunks(tr, rec["database"], tid)
    if [(c.table.id, c.chunk, c.pieces, c.base and c.base.location) for c in now_plan] != \
            [(c.table.id, c.chunk, c.pieces, c.base and c.base.location) for c in plan]:
        return None
    tag = _tag(tid)
    rows = files = 0
    by_table: dict[str, tuple[Table, list[int]]] = {}
    for c in plan:
        location = built[(c.table.name, c.chunk)]
        names = ingest_files.data_files(location)
        size = sum(os.path.getsize(os.path.join(location, n)) for n in names)
        total = (c.base.rows if c.base else 0) + sum(r for _j, _f, r in c.pieces)
        catalog.set_partition(tr, c.table, c.chunk, location, rows=total, bytes=size, staged=True, tag=tag)
        by_table.setdefault(c.table.name, (c.table, []))[1].append(c.chunk)
        rows += sum(r for _j, _f, r in c.pieces)
        files += len(c.pieces)
    for table, chunks in by_table.values():
        catalog.publish_partitions(tr, table, chunks, tag=tag)
    _close(tr, rec, tid, loads, FINISHED, nonce, rows, files, keep=set(built.values()))
    return _transaction(_record(tr, tid))


def _abort(tr, tid: int, nonce: str) -> Transaction:
    rec = _record(tr, tid)
    mine = _closed_by_me(rec, nonce)
    if mine is not None:
        return mine
    _started(tr, tid)
    _close(tr, rec, tid, _loads(tr, tid), ABORTED, nonce, 0, 0, keep=set())
    return _transaction(_record(tr, tid))


def _close(tr, rec: dict, tid: int, loads: dict, state: str, nonce: str, rows: int, files: int, keep: set) -> None:
    """Remove the transaction's load jobs (a running one is halted: it registers nothing),
    trash its areas and the directories built but not used, and record ``state``."""
    database = rec["database"]
    areas = set()
    for job_id, load in loads.items():
        try:
            jobs.remove(tr, LOAD_TYPE, job_id)
        except jobs.NotFound:
            pass
        try:
            areas.add(_area(catalog.get_table(tr, database, load["table"], published_only=False), tid))
        except TableNotFound:
            pass  # dropped: its location, the area inside, went to the trash with it
    begin, end = layout.span(BUILDS, tid)
    unused = [BUILDS.unpack(k)[1] for k, _v in tr.get_range(begin, end)]
    catalog.send_to_trash(tr, sorted(areas) + [loc for loc in unused if loc not in keep],
                          f"ingest transaction {tid} {state.lower()}")
    for space in (BUILDS, PIECES, LOADS):
        tr.clear_range(*layout.span(space, tid))
    tr.clear(OPEN.pack((database, tid)))
    catalog.close_writer(tr, database, _tag(tid))
    rec = {**rec, "state": state, "ended": time.time(), "rows": rows, "files": files, "closed_by": nonce}
    tr.set(TRANSACTIONS.pack((tid,)), _json(rec))


# --- loading -------------------------------------------------------------------------------


def load_job_id(tid: int, table: str, chunk: int, path: str) -> str:
    """The id of the load of ``path`` into chunk ``chunk`` of ``table`` in transaction
    ``tid``: the same load always has the same id."""
    digest = hashlib.sha256(orjson.dumps([tid, table, chunk, path])).hexdigest()[:24]
    return f"{tid}-{digest}"


def load_chunk(db, tid: int, table: str, chunk: int, path: str, *, format: str | None = None,
               header: bool = False, wait: bool = False, timeout: float | None = None) -> TaskFuture:
    """Load the CSV/TSV file ``path`` (absolute; see ``pipeline.ingest_files`` for the
    format) into chunk ``chunk`` of ``table`` of the transaction's database, as a queue job
    that an attached processor runs; returns its TaskFuture (result: rows, bytes).  A chunk
    takes any number of files; loading the same file into the same chunk again returns the
    same load (joined while it runs, not repeated once it succeeded; run again after it
    failed).  ``wait``: block until it is done (``timeout`` seconds at most), raising
    LoadFailed if it failed.

    Raises (before anything is written) TransactionNotFound, TransactionStateError,
    DatabasePublished, TableNotFound (not a table of the transaction's database),
    InvalidChunk, LoadFileError (no readable file at ``path``), ValueError."""
    if not is_database(db):
        raise ArgumentTypeError("load_chunk returns a future that follows the job: pass a database, not a transaction")
    tid = _tid(tid)
    schema.name(table, "table name")
    chunk = _chunk_arg(chunk)
    path = schema.location(path, "path")
    fmt = ingest_files.file_format(path, format)
    if not isinstance(header, bool):
        raise ArgumentTypeError(f"header must be a bool, not {type(header).__name__}")
    if not os.path.isfile(path) or not os.access(path, os.R_OK):
        raise LoadFileError(f"chunk file {path!r} does not exist or is not a readable file")
    job_id = load_job_id(tid, table, chunk, path)

    def body(tr):
        rec = _writable(tr, tid)
        t = _loadable(catalog.get_table(tr, rec["database"], table, published_only=False))
        _table_chunk(t, chunk)
        try:
            info = jobs.get_job(tr, LOAD_TYPE, job_id)
        except jobs.NotFound:
            info = None
        if info is not None and info.state != "finished":
            return  # pending or running: join it
        if info is not None and not _failed(info.data):
            return  # loaded already: the same file again is the same load
        if jobs.get_type_timeout(tr, LOAD_TYPE) is None:
            jobs.set_type_timeout(tr, LOAD_TYPE, LOAD_TIMEOUT)
        params = {"tid": tid, "database": rec["database"], "table": table, "table_id": t.id, "chunk": chunk,
                  "path": path, "format": fmt, "header": header}
        jobs.add(tr, LOAD_TYPE, job_id, params)
        tr.set(LOADS.pack((tid, job_id)), _json({"table": table, "chunk": chunk, "path": path}))

    _in(db, body)
    future = TaskFuture(db, LOAD_TYPE, job_id)
    if wait:
        try:
            future.result(timeout)
        except TaskFailed as exc:
            error = exc.error or {}
            raise LoadFailed(f"loading {path} into {table} chunk {chunk} (super-transaction {tid}) failed: "
                             f"{error.get('type')}: {error.get('message')}", error) from exc
    return future


def _failed(data: dict) -> bool:
    from processors.behaviors import failed

    return failed(data or {}) is not None


def load_handler(db):
    """The handler of load jobs on store ``db`` (what :func:`attach` registers)."""

    def handle(ctx):
        p = ctx.data
        tid, chunk = p["tid"], p["chunk"]
        _in(db, lambda tr: _writable(tr, tid))
        table = catalog.get_table(db, p["database"], p["table"], published_only=False)
        if table.id != p["table_id"]:
            raise TableNotFound(f"table {table.qualified_name} was dropped or replaced since the load was submitted")
        target = os.path.join(_area(table, tid), f"c{chunk:05d}-{ctx.run_id}.parquet")
        piece = ingest_files.write_piece(p["path"], target, table.columns, fmt=p["format"], header=p["header"],
                                         chunk_column=table.partition_by, chunk=chunk, check=ctx.check)
        value = _json({"file": piece.file, "rows": piece.rows, "bytes": piece.bytes, "table_id": table.id,
                       "source": p["path"], "run": ctx.run_id})
        key = PIECES.pack((tid, table.name, chunk, ctx.job_id))

        def register(tr):  # with the job's finish: exactly once, only while the job is ours
            _writable(tr, tid)
            if catalog.get_table(tr, table.database, table.name, published_only=False).id != table.id:
                raise TableNotFound(f"table {table.qualified_name} was dropped or replaced while loading")
            tr.set(key, value)

        ctx.on_commit(register)
        return {"rows": piece.rows, "bytes": piece.bytes, "file": piece.file}

    return handle


def attach(processor, *, worker: str | None = None, threads: int = 1, timeout: float = LOAD_TIMEOUT,
           retry=None, ttl: float = WORKER_TTL) -> str:
    """Make ``processor`` run load jobs, and register it as ingest worker ``worker``
    (default: this host's name) with ``threads`` loading threads (pass the concurrency it
    will run with): registered now, renewed while the processor serves (every ``ttl``/3
    seconds), unregistered when it stops; a processor killed or stalled drops out of hints
    and placement ``ttl`` seconds after its last renewal.  ``retry``: the load jobs' retry
    policy (default: one attempt; a failed load is run again by loading the file again).
    Returns the worker name."""
    name = worker or socket.gethostname().split(".")[0] or "localhost"
    db = processor.db
    processor.handler(LOAD_TYPE, timeout=timeout, retry=retry if retry is not None else Retry())(load_handler(db))
    register_worker(db, name, threads=threads, ttl=ttl)
    processor.periodic(ttl / HEARTBEATS_PER_TTL, lambda: register_worker(db, name, threads=threads, ttl=ttl),
                       stop=lambda: unregister_worker(db, name))
    return name
