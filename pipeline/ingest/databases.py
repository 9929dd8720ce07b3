"""Databases and tables to ingest into: registered unpublished, published once."""

from __future__ import annotations

import time
import uuid

from jobs.checks import ArgumentTypeError
from jobs.engine import LastAttempt

from .. import catalog, schema
from ..errors import TableNotFound
from ..records import Database, Table
from . import layout, state
from .records import encode
from .values import INT_TYPES


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
        rec = state.db_record(tr, name)
        if rec is not None and rec.get("nonce") == nonce:
            return catalog.get_database(tr, name)  # this call's commit, behind 1021
        db = catalog.create_database(tr, name, location=location)
        layout.LAYOUT.ensure(tr)
        tr.set(layout.database_key(name), encode({"chunks": chunks, "created": time.time(), "nonce": nonce}))
        return db

    return layout.run(tr, body)


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
        if match and match[0].type not in INT_TYPES:
            raise ValueError(f"chunk_column {chunk_column!r} is {match[0].type}: it must be an integer type "
                             f"({', '.join(INT_TYPES)})")
    made = LastAttempt()  # the table an attempt created: its commit may have happened (1021)

    def current(tr, table: Table) -> Table | None:
        try:
            stored = catalog.get_table(tr, database, name, published_only=False)
        except TableNotFound:
            return None
        return stored if stored.id == table.id else None

    def body(tr):
        earlier = made.committed(lambda table: current(tr, table))
        if earlier:
            return earlier
        _db, chunks = state.unpublished(tr, database)
        state.refuse_open(tr, database, f"register table {name!r}")
        table = catalog.create_table(tr, database, name, table_schema, partition_by=chunk_column,
                                     partitions=chunks if chunk_column is not None else 1)
        made.record(table)
        return table

    return layout.run(tr, body)


def publish_database(tr, name: str) -> Database:
    """Publish the database: from now on queries and operations see it, and it takes no
    more data (no transaction begins, no load runs, no transaction ends normally).  The
    seed's prerequisites, then :func:`catalog.publish_database` (which alone refuses open
    transactions too: ``pipeline.publish_database``).  Raises DatabaseNotFound (also when
    not registered for ingest), DatabasePublished (already published), TransactionsOpen
    (some super-transaction of it is still STARTED, named)."""
    schema.name(name, "database name")
    done = LastAttempt()  # an attempt published it: its commit may have happened (1021)

    def published(tr) -> Database | None:
        db = catalog.get_database(tr, name)
        return db if db.published else None

    def body(tr):
        earlier = done.committed(lambda _db: published(tr))
        if earlier:
            return earlier  # this call's commit, behind 1021
        state.unpublished(tr, name)
        state.refuse_open(tr, name, f"publish database {name!r}")
        db = catalog.publish_database(tr, name)
        done.record(db)
        return db

    return layout.run(tr, body)
