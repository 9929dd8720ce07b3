"""Exceptions of the pipeline: one tree under :class:`jobs.JobsError`.

    JobsError
    +-- PipelineError
        +-- CatalogError
        |   +-- DatabaseNotFound       no database of that name
        |   +-- DatabaseExists         create_database: the name is taken
        |   +-- DatabaseNotEmpty       drop_database without cascade: it still has tables
        |   +-- DatabaseNotPublished   a reader asked for a database that is being ingested
        |   +-- DatabaseBusy           publish_database: writers (ingest transactions) are open
        |   +-- TableNotFound          no such table, or the Table version was dropped,
        |   |                          replaced or aborted since it was read
        |   +-- TableExists            the name is taken by a committed table
        |   +-- TableStateError        the table version is not in the state the call needs
        |   +-- TableIncomplete        commit_table: some partitions have no data
        |   +-- PartitionNotFound      publish_partitions: nothing staged for a partition
        |   +-- PartitionBusy          another writer (tag) has staged data for the partition
        |   +-- LocationInUse          a data location already referenced, or in the trash
        |   +-- CatalogStoreError      the store's catalog keys cannot be read by this release
        |       +-- CatalogLayoutError ... because a newer release wrote them
        +-- SparkUnavailable           pyspark or a suitable Java is missing, or the JVM
        |                              did not start
        +-- PartitionDataError         a partition's Parquet directory cannot be written/read
            +-- PartitionDataExists    the target directory exists (partition dirs are
                                       written once)

Bad arguments (names that are not identifiers, malformed schemas, partition ids out of
range, relative paths, ...) are ``ValueError`` naming the argument and the problem (wrong
types: ``jobs.checks.ArgumentTypeError``, both a ValueError and a TypeError), raised before
anything is read or written.

Each class's docstring is its default message.
"""

from __future__ import annotations

from jobs import JobsError


class PipelineError(JobsError):
    """Base of the errors the pipeline (catalog and Spark helpers) raises on purpose."""


class CatalogError(PipelineError):
    """The catalog refused the change or the lookup."""


class DatabaseNotFound(CatalogError):
    """The database does not exist."""


class DatabaseExists(CatalogError):
    """A database of that name already exists."""


class DatabaseNotEmpty(CatalogError):
    """The database still has tables: drop them first, or pass cascade=True."""


class DatabaseNotPublished(CatalogError):
    """The database is not published yet: readers see published databases only (pass
    published_only=False to see databases being ingested)."""


class DatabaseBusy(CatalogError):
    """Data is still being written into the database (an ingest super-transaction is
    open): it cannot be published until every writer ended."""


class TableNotFound(CatalogError):
    """The table does not exist (or the version given was dropped, replaced or aborted)."""


class TableExists(CatalogError):
    """A committed table of that name already exists."""


class TableStateError(CatalogError):
    """The table version is not in the state this call needs (staged or committed)."""


class TableIncomplete(CatalogError):
    """Some partitions of the staged table have no data yet: it cannot be committed."""


class PartitionNotFound(CatalogError):
    """The partition has no record (or no staged data) to act on."""


class PartitionBusy(CatalogError):
    """The partition holds data staged by another writer (another tag): publish or discard
    that first."""


class LocationInUse(CatalogError):
    """The data location is referenced by another record or waits in the trash: write the
    data to a new location."""


class CatalogStoreError(CatalogError):
    """The store holds catalog keys this release cannot read (corrupt or foreign data)."""


class CatalogLayoutError(CatalogStoreError):
    """The store's catalog layout was written by a newer release: upgrade this package."""


class SparkUnavailable(PipelineError):
    """Spark cannot be started: install the `spark` extra (pyspark) and Java 17 or newer."""


class PartitionDataError(PipelineError):
    """A partition's Parquet directory could not be written or read."""


class PartitionDataExists(PartitionDataError):
    """The partition directory already exists: partition directories are written once;
    write to a new location (or pass overwrite=True)."""


# --- ingest super-transactions (pipeline.ingest) -------------------------------------------
#
#   PipelineError
#   +-- IngestError
#       +-- DatabasePublished       the database is published: ingest needs an unpublished one
#       +-- TransactionNotFound     no super-transaction of that id
#       +-- TransactionStateError   the transaction is not STARTED (it ended or was aborted)
#       +-- TransactionsOpen        a STARTED transaction of the database forbids the call
#                                   (publishing: also a DatabaseBusy)
#       +-- InvalidChunk            the chunk number is outside the partitioning (a ValueError too)
#       +-- NoIngestWorkers         no live worker (registered, not expired) to place a chunk on
#       +-- LoadsInProgress         ending a transaction whose loads are pending or running
#       +-- LoadFileError           a chunk file cannot be read (or its rows written)
#       +-- MalformedRows           rows of a chunk file do not fit the table (file, line, reason)
#       +-- LoadFailed              load_chunk(wait=True): the load job failed
#       +-- IngestStoreError        the store's ingest keys cannot be read by this release


class IngestError(PipelineError):
    """The ingest system refused the call: a prerequisite of the step does not hold."""


class DatabasePublished(IngestError):
    """The database is published: ingest (new tables, transactions, loads) needs an
    unpublished database."""


class TransactionNotFound(IngestError):
    """No super-transaction has that id."""


class TransactionStateError(IngestError):
    """The super-transaction is not STARTED any more (it was finished or aborted)."""


class TransactionsOpen(IngestError, DatabaseBusy):
    """The database has STARTED super-transactions: end or abort them first."""


class InvalidChunk(IngestError, ValueError):
    """The chunk number is not valid for the partitioning of the database or table."""


class NoIngestWorkers(IngestError):
    """No live ingest worker to place chunks on (none registered, or their registrations
    expired): start a processor with pipeline.ingest.attach(), or register_worker()."""


class LoadsInProgress(IngestError):
    """Loads of the super-transaction are still pending or running: wait for them (their
    futures) before ending it, or abort it."""


class LoadFileError(IngestError):
    """The chunk file cannot be read, or its rows cannot be written."""


class MalformedRows(IngestError):
    """Rows of the chunk file do not fit the table: nothing of the file was loaded."""

    SHOWN = 20  # malformed rows named in the message

    def __init__(self, path: str, rows: list[tuple[int, str]], count: int):
        self.path, self.rows, self.count = path, list(rows), count
        shown = "".join(f"\n  {path}:{line}: {reason}" for line, reason in self.rows[: self.SHOWN])
        more = f"\n  ... and {count - min(count, self.SHOWN)} more" if count > self.SHOWN else ""
        super().__init__(f"{path}: {count} malformed row(s), nothing of the file was loaded:{shown}{more}")

    def __reduce__(self):
        return (type(self), (self.path, self.rows, self.count))


class LoadFailed(IngestError):
    """The load job failed (its error names the file and, for malformed rows, the lines)."""

    def __init__(self, message: str, error: dict | None = None):
        self.error = error or {}
        super().__init__(message)


class IngestStoreError(IngestError):
    """The store holds ingest keys this release cannot read (corrupt, or written by a newer
    release: upgrade this package)."""


# --- atomic CTAS (pipeline.ctas) --------------------------------------------------------------
#
#   PipelineError
#   +-- QueryError      the CTAS query cannot make a table (also a ValueError); nothing written
#   +-- CtasFailed      the CTAS was aborted (failed, cancelled, commit impossible): no table


class QueryError(PipelineError, ValueError):
    """The CTAS query cannot make a table: it does not analyse over the catalog's tables,
    is not deterministic, or yields columns a table cannot hold.  Nothing was written."""


class CtasFailed(PipelineError):
    """The CTAS was aborted (its query failed, it was cancelled, or its commit could not
    happen): no table was created or replaced; its staging went to the trash.
    ``outcome``: the recorded pipeline.ctas.Outcome."""

    def __init__(self, message: str, outcome=None):
        super().__init__(message)
        self.outcome = outcome
