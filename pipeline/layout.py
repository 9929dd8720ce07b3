"""The key layout of the catalog: the one module that knows key shapes.

Everything lives under the tuple prefix ``("catalog",)``, apart from the job layer's
``("jobs",)``, so catalog changes and job calls can share one transaction::

    ("catalog", "meta", "layout")                         = (LAYOUT_VERSION,)
    ("catalog", "db", Db)                                  = Database (JSON)
    ("catalog", "table", Db, Table)                        = the committed Table (JSON)
    ("catalog", "staged", Db, Table, TableId)              = a staged Table (JSON)
    ("catalog", "part", Db, Table, TableId, Pid)           = published Partition (JSON)
    ("catalog", "part_staged", Db, Table, TableId, Pid)    = staged Partition (JSON)
    ("catalog", "trash", Location)                         = {"since": t, "what": ...} (JSON)
    ("catalog", "writer", Db, Tag)                         = {"what": ..., "since": t} (JSON)

``Db`` and ``Table`` are names, ``TableId`` a random hex id drawn per table *version*,
``Pid`` an int.  A name has at most one committed version (a point key, so readers add one
conflict key) and any number of staged ones.  Partitions hang off the version, not the
name: committing a staged version over a committed one (CTAS, replace) is one transaction
that rewrites the ``table`` key, clears the staged key and the old version's partitions, so
no reader ever sees a mix.  Dropping a database clears five ranges.

Data locations that no record references any more go to ``trash`` in the transaction that
unreferenced them, so files are deleted (``collect_garbage``) only after that commit, and
a crash between the two leaks nothing.

A ``writer`` is someone writing into an unpublished database (an ingest super-transaction,
tag ``ingest-<tid>``): publishing reads the database's writers, so it cannot commit while
one is open, nor a writer open once it has.  Writers outlive a dropped database, as the
ingest transactions they stand for do.

``meta/layout`` (:data:`LAYOUT`) is written with the first database and checked the first
time a database handle is used, so a store written by a newer release is refused instead of
misread.
"""

from __future__ import annotations

from jobs import prefixes
from jobs.engine import Subspace, value_of
from jobs.layouts import Layout

from .errors import CatalogLayoutError, CatalogStoreError

LAYOUT_VERSION = 1

LAYOUT = Layout("catalog", prefixes.CATALOG, LAYOUT_VERSION, key=("meta", "layout"), error=CatalogStoreError,
                newer=CatalogLayoutError)
ROOT = LAYOUT.space
META = ROOT["meta"]
DATABASES = ROOT["db"]
TABLES = ROOT["table"]
STAGED = ROOT["staged"]
PARTITIONS = ROOT["part"]
STAGED_PARTITIONS = ROOT["part_staged"]
TRASH = ROOT["trash"]
WRITERS = ROOT["writer"]

LAYOUT_KEY = LAYOUT.key


def database_key(db: str) -> bytes:
    return DATABASES.pack((db,))


def table_key(db: str, table: str) -> bytes:
    return TABLES.pack((db, table))


def staged_key(db: str, table: str, table_id: str) -> bytes:
    return STAGED.pack((db, table, table_id))


def partition_space(db: str, table: str, table_id: str, *, staged: bool = False) -> Subspace:
    """Subspace of one table version's partitions (published, or staged), keyed by Pid."""
    return (STAGED_PARTITIONS if staged else PARTITIONS)[db][table][table_id]


def trash_key(location: str) -> bytes:
    return TRASH.pack((location,))


def writer_key(db: str, tag: str) -> bytes:
    return WRITERS.pack((db, tag))


def trash_span_inside(location: str) -> tuple[bytes, bytes]:
    """``(begin, end)`` of the trash entries of locations strictly inside directory
    ``location``: the tuple layer packs a str as ``\x02`` + UTF-8 + ``\x00`` (no NUL in
    a location), so they are the keys starting with the packed prefix ``location/``."""
    begin = TRASH.key() + b"\x02" + (location.rstrip("/") + "/").encode("utf-8")
    return begin, begin + b"\xff"


def span(space: Subspace, *prefix) -> tuple[bytes, bytes]:
    """``(begin, end)`` of the keys of ``space`` under ``prefix``."""
    r = space.range(prefix)
    return r.start, r.stop


def read(tr, key: bytes) -> bytes | None:
    """The value at ``key`` (a conflicting read, unless ``tr`` is a snapshot), or None."""
    return value_of(tr.get(key))

