"""DataFrames of catalog tables, for the operations' partition jobs."""

from __future__ import annotations

from jobs.engine import within

from . import catalog
from .errors import PartitionNotFound
from .partition_files import read_partition
from .records import Partition, Table


def split_name(qualified: str) -> tuple[str, str]:
    """``"db.table"`` -> ("db", "table"); ValueError naming the expected form."""
    if not isinstance(qualified, str) or qualified.count(".") != 1 or "" in qualified.split("."):
        raise ValueError(f"table names are 'database.table', not {qualified!r}")
    db, table = qualified.split(".")
    return db, table


def table_partition(tr, qualified: str, pid) -> tuple[Table, Partition]:
    """The committed table ``"db.table"`` and its published partition ``pid``."""

    def body(tr):
        db, name = split_name(qualified)
        table = catalog.get_table(tr, db, name)
        for part in catalog.get_partitions(tr, table):
            if part.pid == int(pid):
                return table, part
        raise PartitionNotFound(f"partition {pid} of {qualified} has no published data")

    return within(tr, body)


def partition_frame(db, spark, qualified: str, pid):
    """(Table, Partition, DataFrame of that partition's rows, with the table's schema)."""
    table, part = table_partition(db, qualified, pid)
    return table, part, read_partition(spark, part.location, columns=table)
