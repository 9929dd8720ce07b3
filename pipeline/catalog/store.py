"""The catalog's transactions and its record reads, shared by the catalog's modules.

:func:`within_catalog` runs a call in the caller's transaction (or a retried one of a
database) with the catalog layout checked first; the readers below decode the records that
``pipeline.layout`` places (None when absent, CatalogStoreError when corrupt).
"""

from __future__ import annotations

import uuid

from jobs.checks import ArgumentTypeError
from jobs.engine import within

from .. import layout
from ..errors import DatabaseNotFound, DatabaseNotPublished, TableNotFound
from ..records import Database, Partition, Table, decode_database, decode_partition, decode_table


def within_catalog(tr, fn):
    """``fn(tr)`` inside ``tr`` if it is a transaction, else in a retried transaction of it;
    the catalog layout is checked first either way."""

    def body(tr):
        layout.LAYOUT.check(tr)
        return fn(tr)

    return within(tr, body)


def new_id() -> str:
    return uuid.uuid4().hex


# --- reading records ---------------------------------------------------------------------


def database_record(tr, name: str) -> Database | None:
    raw = layout.read(tr, layout.database_key(name))
    return None if raw is None else decode_database(raw, f"database record {name!r}")


def database_or_raise(tr, name: str, published_only: bool = False) -> Database:
    db = database_record(tr, name)
    if db is None:
        raise DatabaseNotFound(f"database {name!r} does not exist")
    if published_only and not db.published:
        raise DatabaseNotPublished(
            f"database {name!r} is not published yet (it is being ingested): publish it first, "
            "or pass published_only=False to see it"
        )
    return db


def committed_table(tr, db: str, name: str) -> Table | None:
    raw = layout.read(tr, layout.table_key(db, name))
    return None if raw is None else decode_table(raw, f"table record {db}.{name}")


def staged_table(tr, db: str, name: str, table_id: str) -> Table | None:
    raw = layout.read(tr, layout.staged_key(db, name, table_id))
    return None if raw is None else decode_table(raw, f"staged table record {db}.{name} ({table_id})")


def table_records(tr, begin: bytes, end: bytes, what: str) -> list[Table]:
    return [decode_table(v, f"{what} record {k!r}") for k, v in tr.get_range(begin, end)]


def live_version(tr, table: Table) -> Table:
    """The stored record of ``table``'s version (committed or staged): the fence of every
    partition call.  TableNotFound when that version is gone."""
    current = committed_table(tr, table.database, table.name)
    if current is not None and current.id == table.id:
        return current
    staged = staged_table(tr, table.database, table.name, table.id)
    if staged is None:
        raise TableNotFound(
            f"table {table.qualified_name} (version {table.id}) no longer exists: it was dropped, "
            "replaced or aborted since it was read"
        )
    return staged


def partition_records(tr, table: Table, staged: bool) -> list[Partition]:
    space = layout.partition_space(table.database, table.name, table.id, staged=staged)
    begin, end = layout.span(space)
    return [decode_partition(v, f"partition record {k!r}") for k, v in tr.get_range(begin, end)]


def partition_record(tr, table: Table, pid: int, staged: bool) -> Partition | None:
    space = layout.partition_space(table.database, table.name, table.id, staged=staged)
    raw = layout.read(tr, space.pack((pid,)))
    return None if raw is None else decode_partition(raw, f"partition record {table.qualified_name}/{pid}")


# --- the argument every table call checks ------------------------------------------------


def table_arg(table) -> Table:
    if not isinstance(table, Table):
        raise ArgumentTypeError(f"expected a Table from get_table(), create_table() or stage_table(), not {type(table).__name__}")
    return table
