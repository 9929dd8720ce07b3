"""Tables: committed and staged versions, created, committed, aborted, read and dropped."""

from __future__ import annotations

import os
import time
from dataclasses import replace as _replace

from jobs.checks import ArgumentTypeError
from jobs.engine import LastAttempt

from .. import layout, schema
from ..errors import PartitionBusy, TableExists, TableIncomplete, TableNotFound, TableStateError
from ..records import COMMITTED, STAGED, Database, Table, encode_table
from .store import (
    committed_table,
    database_or_raise,
    new_id,
    partition_records,
    staged_table,
    table_arg,
    table_records,
    within_catalog,
)
from .trash import trash_locations


def _clear_version(tr, table: Table, what: str) -> None:
    """Clear a version's record, its partitions (published and staged), and trash its data."""
    if table.state == COMMITTED:
        tr.clear(layout.table_key(table.database, table.name))
    else:
        tr.clear(layout.staged_key(table.database, table.name, table.id))
    for staged in (False, True):
        tr.clear_range(*layout.span(layout.partition_space(table.database, table.name, table.id, staged=staged)))
    if table.managed:
        trash_locations(tr, [table.location], what)



def _definition(database, name, table_schema, partition_by, partitions, location, owner) -> dict:
    schema.name(database, "database name")
    schema.name(name, "table name")
    columns = schema.columns(table_schema)
    partition_by, partitions = schema.partitioning(columns, partition_by, partitions)
    return {
        "database": database,
        "name": name,
        "columns": columns,
        "partition_by": partition_by,
        "partitions": partitions,
        "location": None if location is None else schema.location(location),
        "owner": schema.token(owner, "owner"),
    }


def _new_table(spec: dict, db: Database, table_id: str, state: str, replace: bool) -> Table:
    location = spec["location"]
    return Table(
        database=spec["database"],
        name=spec["name"],
        id=table_id,
        state=state,
        columns=spec["columns"],
        partition_by=spec["partition_by"],
        partitions=spec["partitions"],
        location=location or os.path.join(db.location, spec["name"], table_id),
        managed=location is None,
        replace=replace,
        owner=spec["owner"],
        created=time.time(),
    )


def create_table(
    tr,
    database: str,
    name: str,
    schema: list[dict],
    *,
    partition_by: str | None = None,
    partitions: int = 1,
    location: str | None = None,
) -> Table:
    """Create a committed table (readers see it at once if the database is published).

    ``schema``: a list of columns (see ``pipeline.schema``).  ``partition_by``: the
    non-nullable column whose value assigns rows to ``partitions`` partitions; None for a
    regular table (one partition).  ``location``: None for a managed table (data under the
    database's directory, deleted when dropped), or an absolute path for an external one
    (never deleted by the catalog).  Raises DatabaseNotFound, TableExists, ValueError."""
    spec = _definition(database, name, schema, partition_by, partitions, location, None)
    table_id = new_id()

    def body(tr):
        db = database_or_raise(tr, database)
        old = committed_table(tr, database, name)
        if old is not None:
            if old.id == table_id:
                return old  # this call's own commit, behind commit_unknown_result
            raise TableExists(f"table {database}.{name} already exists")
        table = _new_table(spec, db, table_id, COMMITTED, False)
        tr.set(layout.table_key(database, name), encode_table(table))
        return table

    return within_catalog(tr, body)


def stage_table(
    tr,
    database: str,
    name: str,
    schema: list[dict],
    *,
    partition_by: str | None = None,
    partitions: int = 1,
    location: str | None = None,
    replace: bool = False,
    owner: str | None = None,
) -> Table:
    """Create a staged version of a table: invisible to readers, filled with
    :func:`set_partition`, then made the table by :func:`commit_table` or dropped by
    :func:`abort_table` (the two-phase table of atomic CTAS).  Arguments as
    :func:`create_table`; ``replace``: committing it replaces a committed table of the same
    name (without it, TableExists now if the name is taken, and at commit if it was taken
    since); ``owner``: who staged it (e.g. an operation id), for
    :func:`list_staged_tables` after a crash."""
    spec = _definition(database, name, schema, partition_by, partitions, location, owner)
    if not isinstance(replace, bool):
        raise ArgumentTypeError(f"replace must be a bool, not {type(replace).__name__}")
    table_id = new_id()

    def body(tr):
        db = database_or_raise(tr, database)
        mine = staged_table(tr, database, name, table_id)
        if mine is not None:
            return mine  # this call's own commit, behind commit_unknown_result
        if not replace and committed_table(tr, database, name) is not None:
            raise TableExists(f"table {database}.{name} already exists: pass replace=True to replace it on commit")
        table = _new_table(spec, db, table_id, STAGED, replace)
        tr.set(layout.staged_key(database, name, table_id), encode_table(table))
        return table

    return within_catalog(tr, body)


def commit_table(tr, table: Table, *, require_complete: bool = True) -> Table:
    """Make the staged ``table`` the committed version of its name, in one transaction: a
    committed version it replaces is dropped with its partitions (its managed data goes to
    the trash).  Returns the committed Table.  Committing again a version that is already
    committed returns it (a retry after commit_unknown_result).

    Raises TableNotFound when the staged version was aborted or its database dropped;
    TableExists when the name was taken since and the version was staged without
    ``replace``; TableIncomplete when ``require_complete`` and a partition has no published
    data; PartitionBusy when a partition still holds staged data."""
    table = table_arg(table)

    def body(tr):
        staged = staged_table(tr, table.database, table.name, table.id)
        current = committed_table(tr, table.database, table.name)
        if staged is None:
            if current is not None and current.id == table.id:
                return current
            raise TableNotFound(
                f"staged table {table.qualified_name} (version {table.id}) no longer exists: "
                "it was aborted, or its database dropped"
            )
        if current is not None and not staged.replace:
            raise TableExists(
                f"table {table.qualified_name} was created after this version was staged without "
                "replace=True: abort it, or stage it again with replace=True"
            )
        if require_complete:
            have = {p.pid for p in partition_records(tr, staged, staged=False)}
            missing = [pid for pid in staged.partition_ids if pid not in have]
            if missing:
                shown = ", ".join(map(str, missing[:10])) + (" ..." if len(missing) > 10 else "")
                raise TableIncomplete(
                    f"table {table.qualified_name} cannot be committed: {len(missing)} of its "
                    f"{staged.partitions} partitions have no data ({shown})"
                )
        space = layout.partition_space(table.database, table.name, table.id, staged=True)
        for key, _value in tr.get_range(*layout.span(space), limit=1):
            raise PartitionBusy(
                f"table {table.qualified_name} cannot be committed: partition {space.unpack(key)[0]} "
                "holds staged data: publish or discard it first"
            )
        if current is not None:
            _clear_version(tr, current, f"table {table.qualified_name} replaced")
        committed = _replace(staged, state=COMMITTED, replace=False)
        tr.clear(layout.staged_key(table.database, table.name, table.id))
        tr.set(layout.table_key(table.database, table.name), encode_table(committed))
        return committed

    return within_catalog(tr, body)


def abort_table(tr, table: Table) -> None:
    """Drop the staged ``table`` with its partitions (its managed data goes to the trash).
    Aborting a version that is already gone (aborted, or its database dropped) does
    nothing, so an abort may be repeated.  Raises TableStateError if the version was
    committed (drop the table instead)."""
    table = table_arg(table)

    def body(tr):
        staged = staged_table(tr, table.database, table.name, table.id)
        if staged is None:
            current = committed_table(tr, table.database, table.name)
            if current is not None and current.id == table.id:
                raise TableStateError(
                    f"table {table.qualified_name} (version {table.id}) was committed: it cannot be "
                    "aborted any more (drop it instead)"
                )
            return
        _clear_version(tr, staged, f"table {table.qualified_name} aborted")

    within_catalog(tr, body)


def get_table(tr, database: str, name: str, *, published_only: bool = True) -> Table:
    """The committed table.  Raises DatabaseNotFound, DatabaseNotPublished (unless
    ``published_only=False``), TableNotFound."""
    schema.name(database, "database name")
    schema.name(name, "table name")

    def body(tr):
        database_or_raise(tr, database, published_only)
        table = committed_table(tr, database, name)
        if table is None:
            raise TableNotFound(f"table {database}.{name} does not exist")
        return table

    return within_catalog(tr, body)


def list_tables(tr, database: str, *, published_only: bool = True) -> list[Table]:
    """The committed tables of the database, sorted by name.  Raises DatabaseNotFound,
    DatabaseNotPublished (unless ``published_only=False``)."""
    schema.name(database, "database name")

    def body(tr):
        database_or_raise(tr, database, published_only)
        return table_records(tr, *layout.span(layout.TABLES, database), "table")

    return within_catalog(tr, body)


def list_staged_tables(tr, database: str | None = None, *, owner: str | None = None) -> list[Table]:
    """Staged table versions (of ``database``, or of all databases; of ``owner`` only, if
    given), sorted by database, name and id: what a recovering coordinator commits or
    aborts."""
    if database is not None:
        schema.name(database, "database name")
    owner = schema.token(owner, "owner")
    begin, end = layout.span(layout.STAGED, *(() if database is None else (database,)))

    def body(tr):
        tables = table_records(tr, begin, end, "staged table")
        return [t for t in tables if owner is None or t.owner == owner]

    return within_catalog(tr, body)


def drop_table(tr, database: str, name: str) -> Table:
    """Drop the committed table and its partitions (its managed data goes to the trash);
    staged versions of the name are left to their commit or abort.  Returns the dropped
    Table.  Raises DatabaseNotFound, TableNotFound."""
    schema.name(database, "database name")
    schema.name(name, "table name")
    dropped = LastAttempt()  # the table an attempt dropped: its commit may have happened (1021)

    def body(tr):
        table = committed_table(tr, database, name)
        if table is None:
            if dropped.committed():
                return dropped.value
            database_or_raise(tr, database)
            raise TableNotFound(f"table {database}.{name} does not exist")
        _clear_version(tr, table, f"table {database}.{name} dropped")
        dropped.record(table)
        return table

    return within_catalog(tr, body)
