"""Databases: create, read, publish and drop them; where their data goes by default."""

from __future__ import annotations

import os
import time
from dataclasses import replace as _replace

from jobs.engine import LastAttempt

from .. import layout, schema
from ..errors import DatabaseBusy, DatabaseExists, DatabaseNotEmpty, DatabaseNotFound, PartitionBusy
from ..records import Database, decode_database, encode_database
from .store import database_or_raise, database_record, new_id, table_records, within_catalog
from .trash import trash_locations
from .writers import writer_names

DATA_ROOT_ENV = "JOBS_DATA_ROOT"
DEFAULT_DATA_ROOT = os.path.join(".jobs", "data")  # beside the default store, .jobs/jobs.sqlite


def data_root() -> str:
    """Where new databases put their data by default: ``$JOBS_DATA_ROOT``, else
    ``.jobs/data`` in the working directory, as an absolute path (it is stored as such)."""
    return os.path.abspath(os.environ.get(DATA_ROOT_ENV) or DEFAULT_DATA_ROOT)


def create_database(tr, name: str, *, location: str | None = None) -> Database:
    """Create an unpublished database.  ``location``: the directory under which its managed
    tables keep their data (default: ``<data_root()>/<name>``), an absolute path.  Raises
    DatabaseExists."""
    schema.name(name, "database name")
    location = schema.location(os.path.join(data_root(), name) if location is None else location)
    new = Database(name, new_id(), location, False, time.time())
    raw = encode_database(new)

    def body(tr):
        old = database_record(tr, name)
        if old is not None:
            if old.id == new.id:
                return old  # this call's own commit, behind commit_unknown_result
            raise DatabaseExists(f"database {name!r} already exists")
        layout.LAYOUT.ensure(tr)
        tr.set(layout.database_key(name), raw)
        return new

    return within_catalog(tr, body)


def get_database(tr, name: str) -> Database:
    """The database, published or not (see ``Database.published``).  Raises DatabaseNotFound."""
    schema.name(name, "database name")
    return within_catalog(tr, lambda tr: database_or_raise(tr, name))


def list_databases(tr, *, published_only: bool = True) -> list[Database]:
    """Databases sorted by name: the published ones, or all with ``published_only=False``."""
    begin, end = layout.span(layout.DATABASES)

    def body(tr):
        dbs = [decode_database(v, f"database record {k!r}") for k, v in tr.get_range(begin, end)]
        return [d for d in dbs if d.published or not published_only]

    return within_catalog(tr, body)


def publish_database(tr, name: str) -> Database:
    """Make the database visible to readers (a no-op if it already is): the one way a
    database is published (``pipeline.ingest.publish_database`` adds the ingest
    prerequisites and calls it).  Raises DatabaseNotFound; DatabaseBusy, naming them, while
    writers are open (:func:`open_writer`: STARTED ingest super-transactions); PartitionBusy
    while one of its tables holds staged partition data."""
    schema.name(name, "database name")
    begin, end = layout.span(layout.STAGED_PARTITIONS, name)

    def body(tr):
        db = database_or_raise(tr, name)
        if db.published:
            return db
        writers = writer_names(tr, name)  # a conflicting read: no writer opens while this commits
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

    return within_catalog(tr, body)


def drop_database(tr, name: str, *, cascade: bool = False) -> Database:
    """Drop the database.  Raises DatabaseNotEmpty while it has tables (committed or
    staged) unless ``cascade``, which drops them too (their managed data goes to the trash).
    Returns the dropped Database.  Raises DatabaseNotFound."""
    schema.name(name, "database name")
    dropped = LastAttempt()  # the database an attempt dropped: its commit may have happened (1021)

    def body(tr):
        db = database_record(tr, name)
        if db is None:
            if dropped.committed():
                return dropped.value
            raise DatabaseNotFound(f"database {name!r} does not exist")
        tables = table_records(tr, *layout.span(layout.TABLES, name), "table")
        tables += table_records(tr, *layout.span(layout.STAGED, name), "staged table")
        if tables and not cascade:
            names = sorted({t.name for t in tables})
            shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
            raise DatabaseNotEmpty(f"database {name!r} still has tables ({shown}): drop them first, or pass cascade=True")
        tr.clear(layout.database_key(name))
        for space in (layout.TABLES, layout.STAGED, layout.PARTITIONS, layout.STAGED_PARTITIONS):
            tr.clear_range(*layout.span(space, name))
        trash_locations(tr, [t.location for t in tables if t.managed], f"database {name} dropped")
        dropped.record(db)
        return db

    return within_catalog(tr, body)
