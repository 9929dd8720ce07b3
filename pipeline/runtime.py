"""Wiring: the catalog's partitions as the partitions of distributed operations, the
provisioned operations, and a Processor that runs them.

    ops = pipeline.runtime.operations(db)            # start/cancel/wait operations
    processor = pipeline.runtime.processor(db)       # `jobs worker pipeline.worker:processor`

Tables are named ``"database.table"``; an operation runs over the table's published
partitions (ids ``"0"``, ``"1"``, ...).
"""

from __future__ import annotations

from processors import Processor
from processors.operations import Operations

from . import catalog
from .frames import split_name


def table_partitions(tr, qualified: str) -> list[str]:
    """The published partitions of a committed table of a published database."""
    db, name = split_name(qualified)
    table = catalog.get_table(tr, db, name)
    return [str(p.pid) for p in catalog.get_partitions(tr, table)]


def operations(db) -> Operations:
    """Operations over catalog tables, with every provisioned kind registered."""
    ops = Operations(db, table_partitions)
    for kind in provisioned(db):
        ops.register(kind)
    return ops


def provisioned(db) -> list:
    """The operation kinds the pipeline provides (validate, build index, CTAS)."""
    from .index import BuildIndex
    from .validate import Validate

    return [Validate(db), BuildIndex(db)]


def processor(db, **kwargs) -> Processor:
    """A Processor running every provisioned operation's jobs and coordinators."""
    p = Processor(db, **kwargs)
    operations(db).attach(p)
    return p
