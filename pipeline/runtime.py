"""Wiring: the catalog's partitions as the partitions of distributed operations, the
provisioned operations, and a Processor that runs them.

    ops = pipeline.runtime.operations(db)            # start/cancel/wait operations
    processor = pipeline.runtime.processor(db)       # `jobsctl worker pipeline.worker:processor`

Tables are named ``"database.table"``; an operation runs over the table's published
partitions (ids ``"0"``, ``"1"``, ...).
"""

from __future__ import annotations

from processors import Processor
from processors.operations import WORKER, Operations

from . import catalog, collector
from .frames import split_name


def table_partitions(tr, qualified: str) -> list[str]:
    """The published partitions of a committed table of a published database."""
    db, name = split_name(qualified)
    table = catalog.get_table(tr, db, name)
    return [str(p.pid) for p in catalog.get_partitions(tr, table)]


def operations(db, *, job_timeout: float | None = None) -> Operations:
    """Operations over catalog tables, with every provisioned kind registered
    (``job_timeout``: the type timeout of their jobs, instead of each kind's default)."""
    ops = Operations(db, table_partitions)
    for kind in provisioned(db):
        if job_timeout is not None:
            kind.job_timeout = job_timeout
        ops.register(kind)
    return ops


def provisioned(db) -> list:
    """The operation kinds the pipeline provides (validate, build index, CTAS)."""
    from .ctas import CreateTableAs
    from .index import BuildIndex
    from .validate import Validate

    return [Validate(db), BuildIndex(db), CreateTableAs(db)]


def processor(db, *, job_timeout: float | None = None, gc_grace: float = collector.DEFAULT_GRACE,
              gc_every: float = collector.DEFAULT_EVERY, **kwargs) -> Processor:
    """A Processor running every provisioned operation's jobs and coordinators, the
    ingest loads and the garbage collector job (``gc_grace``, ``gc_every``: see
    ``pipeline.collector``).  ``kwargs`` go to Processor."""
    from . import ingest

    p = Processor(db, **kwargs)
    operations(db, job_timeout=job_timeout).attach(p)
    ingest.attach(p, worker=WORKER.replace(":", "-"))  # (host-pid: one ingest worker per process)
    collector.attach(p, grace=gc_grace, every=gc_every)
    return p
