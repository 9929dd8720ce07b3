"""The catalog: databases, tables, partitions and their data locations, kept in the store.

Every function but :func:`collect_garbage` takes ``tr``: a database (the call runs and
commits its own transaction, retried on conflicts) or a transaction (the call joins it and
commits nothing), exactly like the job layer, so a catalog change and job calls can commit
together::

    @jobs.transactional
    def start_ctas(tr, ...):
        table = catalog.stage_table(tr, "sales", "daily", schema, partition_by="day_id", partitions=8)
        for pid in table.partition_ids:
            jobs.add(tr, "ctas", f"{table.id}-{pid}", {"table": table.id, "pid": pid})
        return table

Arguments are checked before anything is read or written, and a call that raises leaves
nothing written in the caller's transaction.  Calls that a retried transaction runs again
after ``commit_unknown_result`` (1021) recognise their own earlier commit: ids are drawn
once per call, so a retried create returns what the first attempt created instead of
raising "exists", and a retried drop returns what it dropped.

Model (see ``layout.py`` for the keys):

* A **database** has a data directory and a ``published`` flag.  Readers (queries and
  operations: :func:`list_databases`, :func:`get_table`, :func:`list_tables`) see published
  databases only unless they pass ``published_only=False`` (ingest does).  It is published
  once, when no *writer* (:func:`open_writer`: an ingest super-transaction) is open.
* A **table** name maps to at most one *committed* version; any number of *staged*
  versions wait beside it, invisible to readers, until :func:`commit_table` makes one the
  committed version (replacing the old one if it was staged with ``replace=True``) or
  :func:`abort_table` drops it.  Each commit or abort is one transaction.  Schema:
  ``schema.py``.  A regular table has one partition; a partitioned table has N, numbered
  0..N-1, rows assigned to them by the value of its ``partition_by`` column.
* A **partition** record says where its data (a directory of Parquet files) is and how
  many rows it has; it may also hold *staged* data (an ingest transaction's), published
  or discarded later, in one transaction for many partitions.
* **Locations.**  A table created without ``location`` is *managed*: its data lives in
  ``<database location>/<table>/<version id>``, one directory per partition inside
  (:meth:`Table.partition_location`), and the catalog owns it.  A table created with a
  ``location`` is *external*: the catalog never deletes anything there.
* **Trash.**  When a managed location stops being referenced (a table dropped, replaced or
  aborted; a partition's data replaced or discarded), it is recorded in the trash in the
  same transaction; :func:`collect_garbage` deletes the directories afterwards.  So data is
  never deleted before the change that dropped it has committed, and a crash in between
  leaks nothing.  Locations are written once: a location still in the trash cannot be
  referenced again (LocationInUse); give new data a new token.
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from dataclasses import replace as _replace

from jobs import checks
from jobs.checks import ArgumentTypeError
from jobs.engine.transactional import is_database, within

from . import layout, schema
from .errors import (
    DatabaseBusy,
    DatabaseExists,
    DatabaseNotEmpty,
    DatabaseNotFound,
    DatabaseNotPublished,
    LocationInUse,
    PartitionBusy,
    PartitionNotFound,
    TableExists,
    TableIncomplete,
    TableNotFound,
    TableStateError,
)
from .records import (
    COMMITTED,
    STAGED,
    Database,
    Partition,
    Table,
    decode_database,
    decode_partition,
    decode_table,
    decode_trash,
    decode_writer,
    encode_database,
    encode_partition,
    encode_table,
    encode_trash,
    encode_writer,
)

__all__ = [
    "DATA_ROOT_ENV",
    "Database",
    "Partition",
    "Table",
    "abort_table",
    "close_writer",
    "collect_garbage",
    "commit_table",
    "create_database",
    "create_table",
    "data_root",
    "discard_partitions",
    "drop_database",
    "drop_table",
    "get_database",
    "get_partitions",
    "get_table",
    "get_trash",
    "get_writers",
    "list_databases",
    "list_staged_tables",
    "list_tables",
    "open_writer",
    "publish_database",
    "publish_partitions",
    "remove_directory",
    "send_to_trash",
    "set_partition",
    "stage_table",
]

DATA_ROOT_ENV = "JOBS_DATA_ROOT"
DEFAULT_DATA_ROOT = os.path.join(".jobs", "data")  # beside the default store, .jobs/jobs.sqlite
GARBAGE_BATCH = 100


def data_root() -> str:
    """Where new databases put their data by default: ``$JOBS_DATA_ROOT``, else
    ``.jobs/data`` in the working directory, as an absolute path (it is stored as such)."""
    return os.path.abspath(os.environ.get(DATA_ROOT_ENV) or DEFAULT_DATA_ROOT)


def _in(tr, fn):
    """``fn(tr)`` inside ``tr`` if it is a transaction, else in a retried transaction of it;
    the catalog layout is checked first either way."""

    def body(tr):
        layout.check_layout(tr)
        return fn(tr)

    return within(tr, body)


def _new_id() -> str:
    return uuid.uuid4().hex


# --- reading records ---------------------------------------------------------------------


def _database(tr, name: str) -> Database | None:
    raw = layout.read(tr, layout.database_key(name))
    return None if raw is None else decode_database(raw, f"database record {name!r}")


def _database_or_raise(tr, name: str, published_only: bool = False) -> Database:
    db = _database(tr, name)
    if db is None:
        raise DatabaseNotFound(f"database {name!r} does not exist")
    if published_only and not db.published:
        raise DatabaseNotPublished(
            f"database {name!r} is not published yet (it is being ingested): publish it first, "
            "or pass published_only=False to see it"
        )
    return db


def _committed(tr, db: str, name: str) -> Table | None:
    raw = layout.read(tr, layout.table_key(db, name))
    return None if raw is None else decode_table(raw, f"table record {db}.{name}")


def _staged(tr, db: str, name: str, table_id: str) -> Table | None:
    raw = layout.read(tr, layout.staged_key(db, name, table_id))
    return None if raw is None else decode_table(raw, f"staged table record {db}.{name} ({table_id})")


def _tables(tr, begin: bytes, end: bytes, what: str) -> list[Table]:
    return [decode_table(v, f"{what} record {k!r}") for k, v in tr.get_range(begin, end)]


def _version(tr, table: Table) -> Table:
    """The stored record of ``table``'s version (committed or staged): the fence of every
    partition call.  TableNotFound when that version is gone."""
    current = _committed(tr, table.database, table.name)
    if current is not None and current.id == table.id:
        return current
    staged = _staged(tr, table.database, table.name, table.id)
    if staged is None:
        raise TableNotFound(
            f"table {table.qualified_name} (version {table.id}) no longer exists: it was dropped, "
            "replaced or aborted since it was read"
        )
    return staged


def _partitions(tr, table: Table, staged: bool) -> list[Partition]:
    space = layout.partition_space(table.database, table.name, table.id, staged=staged)
    begin, end = layout.span(space)
    return [decode_partition(v, f"partition record {k!r}") for k, v in tr.get_range(begin, end)]


def _partition(tr, table: Table, pid: int, staged: bool) -> Partition | None:
    space = layout.partition_space(table.database, table.name, table.id, staged=staged)
    raw = layout.read(tr, space.pack((pid,)))
    return None if raw is None else decode_partition(raw, f"partition record {table.qualified_name}/{pid}")


# --- writing records -----------------------------------------------------------------------


def _trash(tr, locations, what: str) -> None:
    """Record locations to delete; entries inside one of them go (deleting it deletes them)."""
    now = time.time()
    for location in locations:
        tr.clear_range(*layout.trash_span_inside(location))
        tr.set(layout.trash_key(location), encode_trash(what, now))


def _clear_version(tr, table: Table, what: str) -> None:
    """Clear a version's record, its partitions (published and staged), and trash its data."""
    if table.state == COMMITTED:
        tr.clear(layout.table_key(table.database, table.name))
    else:
        tr.clear(layout.staged_key(table.database, table.name, table.id))
    for staged in (False, True):
        tr.clear_range(*layout.span(layout.partition_space(table.database, table.name, table.id, staged=staged)))
    if table.managed:
        _trash(tr, [table.location], what)


# --- argument checks -----------------------------------------------------------------------


def _table_arg(table) -> Table:
    if not isinstance(table, Table):
        raise ArgumentTypeError(f"expected a Table from get_table(), create_table() or stage_table(), not {type(table).__name__}")
    return table


def _pid(table: Table, pid) -> int:
    if isinstance(pid, bool) or not isinstance(pid, int):
        raise ArgumentTypeError(f"partition id must be an int, not {type(pid).__name__}")
    if not 0 <= pid < table.partitions:
        raise ValueError(f"partition id {pid} is out of range: table {table.qualified_name} has partitions 0..{table.partitions - 1}")
    return pid


def _pids(table: Table, pids) -> set[int] | None:
    if pids is None:
        return None
    if isinstance(pids, (str, bytes)) or not hasattr(pids, "__iter__"):
        raise ArgumentTypeError(f"pids must be an iterable of partition ids or None, not {type(pids).__name__}")
    return {_pid(table, p) for p in pids}


def _partition_dir(table: Table, pid: int, location: str) -> None:
    """A managed table's partition data must be in one of the partition's own directories
    (so that two partitions, or a partition and the table, never share one)."""
    if not table.managed:
        return
    leaf = os.path.basename(location)
    stem = f"part-{pid:05d}"
    ok = os.path.dirname(location) == table.location and (
        leaf == stem or (leaf.startswith(stem + "-") and schema.token(leaf[len(stem) + 1 :], "token") is not None)
    )
    if not ok:
        raise ValueError(
            f"location {location!r} is not a directory of partition {pid} of managed table "
            f"{table.qualified_name}: use table.partition_location({pid}, token)"
        )


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


# --- databases -----------------------------------------------------------------------------


def create_database(tr, name: str, *, location: str | None = None) -> Database:
    """Create an unpublished database.  ``location``: the directory under which its managed
    tables keep their data (default: ``<data_root()>/<name>``), an absolute path.  Raises
    DatabaseExists."""
    schema.name(name, "database name")
    location = schema.location(os.path.join(data_root(), name) if location is None else location)
    new = Database(name, _new_id(), location, False, time.time())
    raw = encode_database(new)

    def body(tr):
        old = _database(tr, name)
        if old is not None:
            if old.id == new.id:
                return old  # this call's own commit, behind commit_unknown_result
            raise DatabaseExists(f"database {name!r} already exists")
        layout.ensure_layout(tr)
        tr.set(layout.database_key(name), raw)
        return new

    return _in(tr, body)


def get_database(tr, name: str) -> Database:
    """The database, published or not (see ``Database.published``).  Raises DatabaseNotFound."""
    schema.name(name, "database name")
    return _in(tr, lambda tr: _database_or_raise(tr, name))


def list_databases(tr, *, published_only: bool = True) -> list[Database]:
    """Databases sorted by name: the published ones, or all with ``published_only=False``."""
    begin, end = layout.span(layout.DATABASES)

    def body(tr):
        dbs = [decode_database(v, f"database record {k!r}") for k, v in tr.get_range(begin, end)]
        return [d for d in dbs if d.published or not published_only]

    return _in(tr, body)


def publish_database(tr, name: str) -> Database:
    """Make the database visible to readers (a no-op if it already is): the one way a
    database is published (``pipeline.ingest.publish_database`` adds the ingest
    prerequisites and calls it).  Raises DatabaseNotFound; DatabaseBusy, naming them, while
    writers are open (:func:`open_writer`: STARTED ingest super-transactions); PartitionBusy
    while one of its tables holds staged partition data."""
    schema.name(name, "database name")
    begin, end = layout.span(layout.STAGED_PARTITIONS, name)

    def body(tr):
        db = _database_or_raise(tr, name)
        if db.published:
            return db
        writers = _writers(tr, name)  # a conflicting read: no writer opens while this commits
        if writers:
            shown = ", ".join(writers[:10]) + (f" and {len(writers) - 10} more" if len(writers) > 10 else "")
            raise DatabaseBusy(f"database {name!r} cannot be published while data is being written into it "
                               f"({shown} open): end or abort them first")
        for key, _value in tr.get_range(begin, end, limit=1):
            table, _id, pid = layout.STAGED_PARTITIONS.unpack(key)[1:]
            raise PartitionBusy(
                f"database {name!r} cannot be published: partition {pid} of table {table!r} has staged "
                "data (an ingest in progress): publish or discard it first"
            )
        published = _replace(db, published=True)
        tr.set(layout.database_key(name), encode_database(published))
        return published

    return _in(tr, body)


def open_writer(tr, database: str, tag: str, what: str) -> None:
    """Record that ``tag`` (e.g. ``ingest-3``) writes into the unpublished ``database``,
    ``what`` naming it for people (``super-transaction 3``): the database cannot be
    published until :func:`close_writer`.  Call it in the transaction that checked the
    database is unpublished (publishing writes the record that check reads, so the two
    serialise).  Idempotent.  Raises DatabaseNotFound."""
    schema.name(database, "database name")
    tag = schema.token(tag, "tag")
    if not isinstance(what, str) or not what:
        raise ArgumentTypeError(f"what must be a non-empty str, not {what!r}")

    def body(tr):
        _database_or_raise(tr, database)
        tr.set(layout.writer_key(database, tag), encode_writer(what, time.time()))

    _in(tr, body)


def close_writer(tr, database: str, tag: str) -> None:
    """Forget writer ``tag`` of ``database`` (its work ended, or was aborted).  Idempotent."""
    schema.name(database, "database name")
    tag = schema.token(tag, "tag")
    _in(tr, lambda tr: tr.clear(layout.writer_key(database, tag)))


def get_writers(tr, database: str) -> list[str]:
    """What the open writers of ``database`` are, as they named themselves, by tag."""
    schema.name(database, "database name")
    return _in(tr, lambda tr: _writers(tr, database))


def _writers(tr, database: str) -> list[str]:
    return [decode_writer(v, f"writer record {k!r}") for k, v in tr.get_range(*layout.span(layout.WRITERS, database))]


def drop_database(tr, name: str, *, cascade: bool = False) -> Database:
    """Drop the database.  Raises DatabaseNotEmpty while it has tables (committed or
    staged) unless ``cascade``, which drops them too (their managed data goes to the trash).
    Returns the dropped Database.  Raises DatabaseNotFound."""
    schema.name(name, "database name")
    dropped: list[Database] = []  # an attempt dropped it: its commit may have happened (1021)

    def body(tr):
        db = _database(tr, name)
        if db is None:
            if dropped:
                return dropped[0]
            raise DatabaseNotFound(f"database {name!r} does not exist")
        tables = _tables(tr, *layout.span(layout.TABLES, name), "table")
        tables += _tables(tr, *layout.span(layout.STAGED, name), "staged table")
        if tables and not cascade:
            names = sorted({t.name for t in tables})
            shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
            raise DatabaseNotEmpty(f"database {name!r} still has tables ({shown}): drop them first, or pass cascade=True")
        tr.clear(layout.database_key(name))
        for space in (layout.TABLES, layout.STAGED, layout.PARTITIONS, layout.STAGED_PARTITIONS):
            tr.clear_range(*layout.span(space, name))
        _trash(tr, [t.location for t in tables if t.managed], f"database {name} dropped")
        dropped[:] = [db]
        return db

    return _in(tr, body)


# --- tables --------------------------------------------------------------------------------


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
    table_id = _new_id()

    def body(tr):
        db = _database_or_raise(tr, database)
        old = _committed(tr, database, name)
        if old is not None:
            if old.id == table_id:
                return old  # this call's own commit, behind commit_unknown_result
            raise TableExists(f"table {database}.{name} already exists")
        table = _new_table(spec, db, table_id, COMMITTED, False)
        tr.set(layout.table_key(database, name), encode_table(table))
        return table

    return _in(tr, body)


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
    table_id = _new_id()

    def body(tr):
        db = _database_or_raise(tr, database)
        mine = _staged(tr, database, name, table_id)
        if mine is not None:
            return mine  # this call's own commit, behind commit_unknown_result
        if not replace and _committed(tr, database, name) is not None:
            raise TableExists(f"table {database}.{name} already exists: pass replace=True to replace it on commit")
        table = _new_table(spec, db, table_id, STAGED, replace)
        tr.set(layout.staged_key(database, name, table_id), encode_table(table))
        return table

    return _in(tr, body)


def commit_table(tr, table: Table, *, require_complete: bool = True) -> Table:
    """Make the staged ``table`` the committed version of its name, in one transaction: a
    committed version it replaces is dropped with its partitions (its managed data goes to
    the trash).  Returns the committed Table.  Committing again a version that is already
    committed returns it (a retry after commit_unknown_result).

    Raises TableNotFound when the staged version was aborted or its database dropped;
    TableExists when the name was taken since and the version was staged without
    ``replace``; TableIncomplete when ``require_complete`` and a partition has no published
    data; PartitionBusy when a partition still holds staged data."""
    table = _table_arg(table)

    def body(tr):
        staged = _staged(tr, table.database, table.name, table.id)
        current = _committed(tr, table.database, table.name)
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
            have = {p.pid for p in _partitions(tr, staged, staged=False)}
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

    return _in(tr, body)


def abort_table(tr, table: Table) -> None:
    """Drop the staged ``table`` with its partitions (its managed data goes to the trash).
    Aborting a version that is already gone (aborted, or its database dropped) does
    nothing, so an abort may be repeated.  Raises TableStateError if the version was
    committed (drop the table instead)."""
    table = _table_arg(table)

    def body(tr):
        staged = _staged(tr, table.database, table.name, table.id)
        if staged is None:
            current = _committed(tr, table.database, table.name)
            if current is not None and current.id == table.id:
                raise TableStateError(
                    f"table {table.qualified_name} (version {table.id}) was committed: it cannot be "
                    "aborted any more (drop it instead)"
                )
            return
        _clear_version(tr, staged, f"table {table.qualified_name} aborted")

    _in(tr, body)


def get_table(tr, database: str, name: str, *, published_only: bool = True) -> Table:
    """The committed table.  Raises DatabaseNotFound, DatabaseNotPublished (unless
    ``published_only=False``), TableNotFound."""
    schema.name(database, "database name")
    schema.name(name, "table name")

    def body(tr):
        _database_or_raise(tr, database, published_only)
        table = _committed(tr, database, name)
        if table is None:
            raise TableNotFound(f"table {database}.{name} does not exist")
        return table

    return _in(tr, body)


def list_tables(tr, database: str, *, published_only: bool = True) -> list[Table]:
    """The committed tables of the database, sorted by name.  Raises DatabaseNotFound,
    DatabaseNotPublished (unless ``published_only=False``)."""
    schema.name(database, "database name")

    def body(tr):
        _database_or_raise(tr, database, published_only)
        return _tables(tr, *layout.span(layout.TABLES, database), "table")

    return _in(tr, body)


def list_staged_tables(tr, database: str | None = None, *, owner: str | None = None) -> list[Table]:
    """Staged table versions (of ``database``, or of all databases; of ``owner`` only, if
    given), sorted by database, name and id: what a recovering coordinator commits or
    aborts."""
    if database is not None:
        schema.name(database, "database name")
    owner = schema.token(owner, "owner")
    begin, end = layout.span(layout.STAGED, *(() if database is None else (database,)))

    def body(tr):
        tables = _tables(tr, begin, end, "staged table")
        return [t for t in tables if owner is None or t.owner == owner]

    return _in(tr, body)


def drop_table(tr, database: str, name: str) -> Table:
    """Drop the committed table and its partitions (its managed data goes to the trash);
    staged versions of the name are left to their commit or abort.  Returns the dropped
    Table.  Raises DatabaseNotFound, TableNotFound."""
    schema.name(database, "database name")
    schema.name(name, "table name")
    dropped: list[Table] = []  # an attempt dropped it: its commit may have happened (1021)

    def body(tr):
        table = _committed(tr, database, name)
        if table is None:
            if dropped:
                return dropped[0]
            _database_or_raise(tr, database)
            raise TableNotFound(f"table {database}.{name} does not exist")
        _clear_version(tr, table, f"table {database}.{name} dropped")
        dropped[:] = [table]
        return table

    return _in(tr, body)


# --- partitions ----------------------------------------------------------------------------


def set_partition(
    tr,
    table: Table,
    pid: int,
    location: str,
    *,
    rows: int,
    bytes: int | None = None,
    staged: bool = False,
    tag: str | None = None,
) -> Partition:
    """Record that partition ``pid`` of ``table`` has its data in directory ``location``
    (``rows`` rows, ``bytes`` bytes of files).  ``staged``: as data waiting for
    :func:`publish_partitions` (readers keep seeing the published data until then), staged
    by ``tag`` (e.g. an ingest transaction id).  Data a managed table no longer references
    (the location this one replaces) goes to the trash.

    A managed table's partition data must be in ``table.partition_location(pid, token)``.
    Raises TableNotFound when the table version is gone (the fence for slow writers),
    PartitionBusy when another tag has staged data for the partition, LocationInUse when
    the location is the partition's other (staged or published) data or in the trash."""
    table = _table_arg(table)
    pid = _pid(table, pid)
    location = schema.location(location)
    _partition_dir(table, pid, location)
    rows = schema.count(rows, "rows")
    size = schema.count(bytes, "bytes", optional=True)
    tag = schema.token(tag, "tag")
    if not isinstance(staged, bool):
        raise ArgumentTypeError(f"staged must be a bool, not {type(staged).__name__}")
    if tag is not None and not staged:
        raise ValueError("tag names who staged data: it needs staged=True")
    part = Partition(table.id, pid, location, rows, size, staged, tag, time.time())
    space = layout.partition_space(table.database, table.name, table.id, staged=staged)

    def body(tr):
        version = _version(tr, table)
        old = _partition(tr, table, pid, staged)
        other = _partition(tr, table, pid, not staged)
        if staged and old is not None and old.tag != tag:
            raise PartitionBusy(
                f"partition {pid} of {table.qualified_name} holds data staged by {old.tag!r}: "
                "publish or discard it first"
            )
        if other is not None and other.location == location:
            raise LocationInUse(
                f"{location!r} is already the {'published' if staged else 'staged'} data of partition "
                f"{pid} of {table.qualified_name}: write the new data to a new location"
            )
        if (old is None or old.location != location) and layout.read(tr, layout.trash_key(location)) is not None:
            raise LocationInUse(f"{location!r} is in the trash (its data is being deleted): write to a new location")
        if old == part:
            return part  # this call's own commit, behind commit_unknown_result
        tr.set(space.pack((pid,)), encode_partition(part))
        if version.managed and old is not None and old.location != location:
            _trash(tr, [old.location], f"partition {pid} of {table.qualified_name} replaced")
        return part

    return _in(tr, body)


def get_partitions(tr, table: Table, *, staged: bool = False) -> list[Partition]:
    """The partitions of ``table`` that have data, sorted by id: the published data, or
    with ``staged=True`` the staged data.  Raises TableNotFound when the table version is
    gone."""
    table = _table_arg(table)

    def body(tr):
        _version(tr, table)
        return _partitions(tr, table, staged)

    return _in(tr, body)


def _select(parts: list[Partition], pids: set[int] | None, tag: str | None) -> list[Partition]:
    return [p for p in parts if (pids is None or p.pid in pids) and (tag is None or p.tag == tag)]


def publish_partitions(tr, table: Table, pids=None, *, tag: str | None = None) -> list[Partition]:
    """Make staged data the published data of its partitions, in one transaction: of the
    partitions ``pids`` (None: all), staged by ``tag`` (None: by anyone).  The replaced
    data of a managed table goes to the trash.  Returns the published partitions.  Raises
    TableNotFound when the table version is gone, PartitionNotFound when one of ``pids``
    has no staged data (of ``tag``)."""
    table = _table_arg(table)
    wanted = _pids(table, pids)
    tag = schema.token(tag, "tag")
    done: list[list[Partition]] = []  # an attempt published: its commit may have happened (1021)

    def body(tr):
        version = _version(tr, table)
        chosen = _select(_partitions(tr, table, staged=True), wanted, tag)
        missing = sorted(wanted - {p.pid for p in chosen}) if wanted is not None else []
        if done and (missing or not chosen):
            return done[0]  # this call's own commit, behind commit_unknown_result
        if missing:
            by = "" if tag is None else f" by {tag!r}"
            raise PartitionNotFound(f"partitions {missing} of {table.qualified_name} have no data staged{by}")
        now = time.time()
        published = []
        staged_space = layout.partition_space(table.database, table.name, table.id, staged=True)
        space = layout.partition_space(table.database, table.name, table.id)
        old = {p.pid: p for p in _partitions(tr, table, staged=False)} if chosen else {}
        for part in chosen:
            new = _replace(part, staged=False, tag=None, updated=now)
            tr.set(space.pack((part.pid,)), encode_partition(new))
            tr.clear(staged_space.pack((part.pid,)))
            prev = old.get(part.pid)
            if version.managed and prev is not None and prev.location != part.location:
                _trash(tr, [prev.location], f"partition {part.pid} of {table.qualified_name} replaced")
            published.append(new)
        done[:] = [published]
        return published

    return _in(tr, body)


def discard_partitions(tr, table: Table, pids=None, *, tag: str | None = None) -> list[Partition]:
    """Drop staged data (of partitions ``pids``, None: all; staged by ``tag``, None: by
    anyone); a managed table's discarded data goes to the trash.  Returns the discarded
    partitions.  Discarding what is not there (or on a table version that is gone) does
    nothing, so a discard may be repeated."""
    table = _table_arg(table)
    wanted = _pids(table, pids)
    tag = schema.token(tag, "tag")
    done: list[list[Partition]] = []  # an attempt discarded: its commit may have happened (1021)

    def body(tr):
        try:
            version = _version(tr, table)
        except TableNotFound:
            return done[0] if done else []  # dropped or aborted: its staged data went with it
        chosen = _select(_partitions(tr, table, staged=True), wanted, tag)
        if done and not chosen:
            return done[0]
        space = layout.partition_space(table.database, table.name, table.id, staged=True)
        for part in chosen:
            tr.clear(space.pack((part.pid,)))
        if version.managed:
            _trash(tr, [p.location for p in chosen], f"staged data of {table.qualified_name} discarded")
        done[:] = [chosen]
        return chosen

    return _in(tr, body)


# --- the trash -----------------------------------------------------------------------------


def send_to_trash(tr, locations, what: str) -> None:
    """Record managed data ``locations`` that nothing references any more (``what``: why,
    for people), in the transaction that stopped referencing them: the collector deletes
    them once that committed and the grace period passed.  For a layer that keeps its own
    data under a table's location (ingest's transaction areas)."""
    locations = [schema.location(loc) for loc in locations]
    _in(tr, lambda tr: _trash(tr, locations, what))


def get_trash(tr, *, limit: int | None = None) -> list[str]:
    """Locations waiting to be deleted by :func:`collect_garbage`, sorted."""
    limit = schema.count(limit, "limit", optional=True)
    if limit == 0:
        return []
    begin, end = layout.span(layout.TRASH)
    return _in(tr, lambda tr: [layout.TRASH.unpack(k)[0] for k, _v in tr.get_range(begin, end, limit=limit or 0)])


def remove_directory(location: str) -> None:
    """Delete a directory tree; one that does not exist is fine (deleted earlier)."""
    location = schema.location(location)
    try:
        shutil.rmtree(location)
    except FileNotFoundError:
        pass
    except NotADirectoryError:
        os.remove(location)


def collect_garbage(db, *, remove=remove_directory, limit: int | None = None, grace: float = 0.0) -> list[str]:
    """Delete the locations trashed more than ``grace`` seconds ago (0: all of them; a
    reader that looked up data before it was dropped may still read it for that long)
    with ``remove(location)``, default :func:`remove_directory`, and forget them, a batch
    at a time; at most ``limit`` (None: all).  Takes a database: it runs its own
    transactions, and deletes files only for entries whose change has committed.  Returns
    the locations deleted.  Safe to run concurrently and to repeat: an error from
    ``remove`` stops it after forgetting the locations already deleted, and leaves the
    rest for the next run.  ``pipeline.collector`` runs it as a recurring job."""
    if not is_database(db):
        raise ArgumentTypeError("collect_garbage deletes files between transactions: pass a database, not a transaction")
    limit = schema.count(limit, "limit", optional=True)
    cutoff = time.time() - checks.seconds(grace, "grace")
    deleted: list[str] = []
    for batch in _due_batches(db, cutoff):
        if limit is not None:
            batch = batch[: limit - len(deleted)]
        done = []
        try:
            for location in batch:
                remove(location)
                done.append(location)
        finally:
            if done:
                _in(db, lambda tr: [tr.clear(layout.trash_key(loc)) for loc in done])
            deleted += done
        if limit is not None and len(deleted) >= limit:
            break
    return deleted


def _due_batches(db, cutoff: float):
    """The trash read a page of GARBAGE_BATCH entries per transaction, in key order (so
    entries too young to delete are passed over, not read again): for each page, the
    locations trashed at or before ``cutoff``."""
    begin, end = layout.span(layout.TRASH)
    while True:
        page = _in(db, lambda tr: [(bytes(k), bytes(v)) for k, v in tr.get_range(begin, end, limit=GARBAGE_BATCH)])
        due = [layout.TRASH.unpack(k)[0] for k, v in page if decode_trash(v, f"trash entry {k!r}") <= cutoff]
        if due:
            yield due
        if len(page) < GARBAGE_BATCH:
            return
        begin = page[-1][0] + b"\x00"  # the first key after the page
