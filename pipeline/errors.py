"""Exceptions of the pipeline: one tree under :class:`jobs.JobsError`.

    JobsError
    +-- PipelineError
        +-- CatalogError
        |   +-- DatabaseNotFound       no database of that name
        |   +-- DatabaseExists         create_database: the name is taken
        |   +-- DatabaseNotEmpty       drop_database without cascade: it still has tables
        |   +-- DatabaseNotPublished   a reader asked for a database that is being ingested
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
