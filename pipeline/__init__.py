"""The Spark pipeline's groundwork: a catalog kept in the store, and Spark helpers.

* ``pipeline.catalog``: databases (with a ``published`` flag), tables (schema, partitioning,
  staged and committed versions), partitions and their data locations, and the trash of
  data no longer referenced.  Every call takes a database or a transaction first, like the
  job layer, so catalog changes and job calls commit together.  Keys: ``pipeline.layout``.
* ``pipeline.spark``: one SparkSession per process, local mode on loopback by default.
* ``pipeline.partition_files``: one partition's Parquet directory, written atomically.

pyspark is imported only by the Spark helpers, when first used.
"""

from .catalog import (
    Database,
    Partition,
    Table,
    abort_table,
    collect_garbage,
    commit_table,
    create_database,
    create_table,
    data_root,
    discard_partitions,
    drop_database,
    drop_table,
    get_database,
    get_partitions,
    get_table,
    get_trash,
    list_databases,
    list_staged_tables,
    list_tables,
    publish_database,
    publish_partitions,
    remove_directory,
    set_partition,
    stage_table,
)
from .errors import (
    CatalogError,
    CatalogLayoutError,
    CatalogStoreError,
    DatabaseExists,
    DatabaseNotEmpty,
    DatabaseNotFound,
    DatabaseNotPublished,
    LocationInUse,
    PartitionBusy,
    PartitionDataError,
    PartitionDataExists,
    PartitionNotFound,
    PipelineError,
    SparkUnavailable,
    TableExists,
    TableIncomplete,
    TableNotFound,
    TableStateError,
)
from .partition_files import PartitionFiles, clean_temporaries, read_partition, write_partition
from .schema import Column
from .spark import spark_schema, spark_session, stop_spark_session

__all__ = [
    # catalog records
    "Column",
    "Database",
    "Partition",
    "Table",
    # databases
    "create_database",
    "get_database",
    "list_databases",
    "publish_database",
    "drop_database",
    # tables
    "create_table",
    "stage_table",
    "commit_table",
    "abort_table",
    "get_table",
    "list_tables",
    "list_staged_tables",
    "drop_table",
    # partitions
    "set_partition",
    "get_partitions",
    "publish_partitions",
    "discard_partitions",
    # data locations
    "data_root",
    "get_trash",
    "collect_garbage",
    "remove_directory",
    # Spark
    "spark_session",
    "stop_spark_session",
    "spark_schema",
    "PartitionFiles",
    "write_partition",
    "read_partition",
    "clean_temporaries",
    # errors
    "PipelineError",
    "CatalogError",
    "DatabaseNotFound",
    "DatabaseExists",
    "DatabaseNotEmpty",
    "DatabaseNotPublished",
    "TableNotFound",
    "TableExists",
    "TableStateError",
    "TableIncomplete",
    "PartitionNotFound",
    "PartitionBusy",
    "LocationInUse",
    "CatalogStoreError",
    "CatalogLayoutError",
    "SparkUnavailable",
    "PartitionDataError",
    "PartitionDataExists",
]
