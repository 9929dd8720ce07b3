"""Reading ingest's state in the caller's transaction (``tr`` first), and the checks
every step makes before it writes: the database is registered and unpublished, the
transaction is STARTED, the table is loadable, the chunk valid, no load is active."""

from __future__ import annotations

import os

import jobs

from .. import catalog
from ..errors import (
    DatabaseNotFound,
    DatabasePublished,
    IngestError,
    InvalidChunk,
    LoadsInProgress,
    TransactionNotFound,
    TransactionsOpen,
    TransactionStateError,
)
from ..records import Database, Table
from . import layout
from .records import LOAD_TYPE, STARTED, decode
from .values import INT_TYPES


def tag(tid: int) -> str:
    """The catalog tag of the partitions a transaction stages."""
    return f"ingest-{tid}"


def area(table: Table, tid: int) -> str:
    """The hidden directory of a transaction's pieces of ``table`` (Spark and Hadoop skip
    names starting with '.'; dropping the table trashes it with the table's location)."""
    return os.path.join(table.location, f".ingest-{tid}")


# --- databases -----------------------------------------------------------------------------


def db_record(tr, name: str) -> dict | None:
    raw = layout.read(tr, layout.database_key(name))
    return None if raw is None else decode(raw, f"ingest record of database {name!r}")


def unpublished(tr, name: str) -> tuple[Database, int]:
    """The database and its chunk count; it must be known to ingest and not published."""
    db = catalog.get_database(tr, name)
    rec = db_record(tr, name)
    if rec is None:
        raise DatabaseNotFound(
            f"database {name!r} was not registered for ingest: create it with ingest.register_database()"
        )
    if db.published:
        raise DatabasePublished(f"database {name!r} is published: ingest needs an unpublished database")
    return db, int(rec["chunks"])


def refuse_open(tr, database: str, doing: str) -> None:
    """TransactionsOpen if a super-transaction of ``database`` is STARTED."""
    open_ids = layout.open_ids(tr, database, limit=10)
    if open_ids:
        shown = ", ".join(map(str, open_ids))
        raise TransactionsOpen(
            f"cannot {doing}: database {database!r} has STARTED super-transactions ({shown}): end or abort them first"
        )


# --- transactions --------------------------------------------------------------------------


def record(tr, tid: int) -> dict:
    """The stored record of transaction ``tid``.  Raises TransactionNotFound."""
    raw = layout.read(tr, layout.transaction_key(tid))
    if raw is None:
        raise TransactionNotFound(f"super-transaction {tid} does not exist")
    return decode(raw, f"record of super-transaction {tid}")


def started(tr, tid: int) -> dict:
    """The record of transaction ``tid``, which must be STARTED."""
    rec = record(tr, tid)
    if rec.get("state") != STARTED:
        raise TransactionStateError(
            f"super-transaction {tid} of database {rec.get('database')!r} is {rec.get('state')}, not STARTED"
        )
    return rec


def writable(tr, tid: int) -> dict:
    """The record of STARTED transaction ``tid`` whose database is not published: what a
    load and a normal end need.  (A database whose writer record was closed by hand,
    ``pipeline.close_writer``, may be published while a transaction is STARTED: it can only
    be aborted.)"""
    rec = started(tr, tid)
    if catalog.get_database(tr, rec["database"]).published:
        raise DatabasePublished(f"super-transaction {tid} cannot write into database {rec['database']!r}: it is "
                                "published, and published databases take no more data (abort the transaction)")
    return rec


# --- tables and chunks ---------------------------------------------------------------------


def valid_chunk(chunk: int, count: int, what: str) -> int:
    if not 0 <= chunk < count:
        valid = "0" if count == 1 else f"0..{count - 1}"
        raise InvalidChunk(f"chunk {chunk} is not a valid chunk of {what} (valid: {valid})")
    return chunk


def table_chunk(table: Table, chunk: int) -> int:
    kind = f"partitioned table {table.qualified_name}" if not table.regular else f"regular table {table.qualified_name}"
    return valid_chunk(chunk, table.partitions, kind)


def loadable(table: Table) -> Table:
    """``table``, if ingest can load it: managed, partitioned (if at all) by an integer."""
    if not table.managed:
        raise IngestError(f"table {table.qualified_name} is external (its location is not the catalog's): "
                          "ingest loads managed tables only")
    if not table.regular:
        column = next(c for c in table.columns if c.name == table.partition_by)
        if column.type not in INT_TYPES:
            raise IngestError(f"table {table.qualified_name} is partitioned by {column.name} ({column.type}): "
                              "ingest needs an integer chunk column")
    return table


# --- loads and pieces ----------------------------------------------------------------------


def loads(tr, tid: int) -> dict[str, dict]:
    """Job id -> load record, of the loads transaction ``tid`` submitted."""
    return {job_id: decode(v, f"ingest load {k!r}") for job_id, k, v in layout.loads(tr, tid)}


def pieces(tr, tid: int) -> dict[tuple[str, int, str], dict]:
    """(table, chunk, job id) -> piece record, of transaction ``tid``."""
    return {piece: decode(v, f"ingest piece {k!r}") for piece, k, v in layout.pieces(tr, tid)}


def refuse_active_loads(tr, tid: int, loads: dict[str, dict]) -> None:
    """LoadsInProgress if one of ``loads`` is pending or running (the first five named)."""
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
