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

Model (see ``layout.py`` for the keys; one module per concern: ``databases``, ``writers``,
``tables``, ``partitions``, ``trash``, over ``store``, which runs the calls and reads the
records):

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

from ..records import Database, Partition, Table
from .databases import (
    DATA_ROOT_ENV,
    create_database,
    data_root,
    drop_database,
    get_database,
    list_databases,
    publish_database,
)
from .partitions import discard_partitions, get_partitions, publish_partitions, set_partition
from .tables import (
    abort_table,
    commit_table,
    create_table,
    drop_table,
    get_table,
    list_staged_tables,
    list_tables,
    stage_table,
)
from .trash import collect_garbage, get_trash, remove_directory, send_to_trash
from .writers import close_writer, get_writers, open_writer

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
