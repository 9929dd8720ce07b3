"""Ingest super-transactions (the Qserv seed): load chunk files into the tables of an
unpublished database, make each transaction's chunks part of the tables atomically (or
drop them), then publish the database.

    ingest.register_database(db, "sky", chunks=16)                   # unpublished
    ingest.register_table(db, "sky", "obj", schema, chunk_column="chunk_id")
    txn = ingest.begin_transaction(db, "sky")                        # txn.id, txn.hints
    ingest.chunk_placement(db, txn.id, 7).worker                     # same chunk, same answer
    ingest.load_chunk(db, txn.id, "obj", 7, "/data/obj_7.csv", wait=True)   # a queue job
    ingest.end_transaction(db, txn.id)                   # or commit=False: abort
    ingest.publish_database(db, "sky")                   # now queries and operations see it

    processor = Processor(db); ingest.attach(processor)  # a worker that runs the loads

Model:

* A **chunk** is a partition id of a table: ``0..chunks-1`` of a partitioned table (the
  database's ``chunks``, its partitioning; the table's ``chunk_column`` holds the chunk
  number of each row), ``0`` for a regular table (one partition).
* A **super-transaction** belongs to one database; states STARTED, then FINISHED or
  ABORTED.  Tables can be registered only while no transaction of the database is
  STARTED; the database can be published only when none is (each STARTED transaction is a
  catalog *writer* of the database, so ``pipeline.publish_database`` refuses too), and a
  published database takes no more data: loads and normal ends are refused.
* A **load** is a queue job (type ``ingest.load``) that parses one CSV/TSV file of one
  chunk of one table (``pipeline.ingest.files``) and writes it as a Parquet *piece* under
  the table's hidden per-transaction area (``<table location>/.ingest-<tid>/``), a new
  file per run (``ctx.run_id``).  It registers the piece with ``ctx.on_commit``: in the
  transaction that finishes the job, so exactly once, and never by a worker that lost the
  job.  The job id is derived from (transaction, table, chunk, path): loading the same file
  again joins or returns the earlier load; other files of the chunk add pieces.
* **Ending** a transaction builds, for every chunk it loaded, a new partition directory
  holding the chunk's current data and its new pieces (hard links: no data is copied),
  then in ONE store transaction stages and publishes them all (``catalog.set_partition`` /
  ``publish_partitions`` with the transaction's tag), trashes the replaced directories
  and the transaction's area, and marks it FINISHED.  Readers see all of its chunks or
  none.  It refuses while loads are pending or running.  **Aborting** removes its load
  jobs (a running one is halted and registers nothing), trashes its area, and marks it
  ABORTED: nothing of it remains once the collector (``pipeline.collector``) deleted
  its trash.
* **Placement**: a chunk's worker is assigned once per (database, chunk), in a store
  transaction that reads the assignment first, so concurrent requests agree (the loser
  of a conflict is retried and reads the winner's answer).  New chunks go to the worker
  that already holds the same chunk number in another database (collocation), else to the
  worker with the fewest chunks of the database.  Workers are the names processors
  register with :func:`attach` (default: the host name), and only live ones count (for
  hints and new placements): a registration lives ``ttl`` seconds after its last
  heartbeat, which the processor sends while it serves.  A chunk placed earlier keeps its
  worker, live or not (the seed: "where the new chunk will be placed, or where it's
  already located").  The hint is advisory: loads are
  queue jobs that any processor may run, and data lives on a filesystem all workers share;
  on one machine there is one worker and every chunk is placed on it.

Where things are: ``layout`` (the key layout, the one module that knows key shapes, and
its version), ``records`` (the records and their encoding), ``state`` (reading state, the
checks each step makes), ``databases`` (register and publish), ``workers`` (registrations
and hints), ``placement`` (chunk placement), ``transactions`` (begin, end, abort),
``directories`` (the partition directories an end builds), ``loads`` (the load job and
:func:`attach`), ``files`` (chunk files read and written as Parquet pieces; directories
assembled) and ``values`` (fields read as column values; their Arrow types).
"""

from .databases import publish_database, register_database, register_table
from .loads import LOAD_TIMEOUT, attach, load_chunk, load_handler, load_job_id  # noqa: F401
from .placement import chunk_placement
from .records import ABORTED, FINISHED, LOAD_TYPE, STARTED, Hints, Placement, Transaction, Worker
from .transactions import begin_transaction, end_transaction, get_transaction, list_transactions
from .workers import WORKER_TTL, forget_expired_workers, list_workers, register_worker, unregister_worker  # noqa: F401

# LOAD_TIMEOUT, WORKER_TTL (the defaults of attach) and load_job_id are public too, outside
# __all__ as before the split.  The registrations' clock is pipeline.ingest.workers.clock.
__all__ = [
    "ABORTED",
    "FINISHED",
    "LOAD_TYPE",
    "STARTED",
    "Hints",
    "Placement",
    "Transaction",
    "Worker",
    "attach",
    "begin_transaction",
    "chunk_placement",
    "end_transaction",
    "forget_expired_workers",
    "get_transaction",
    "list_transactions",
    "list_workers",
    "load_chunk",
    "load_handler",
    "publish_database",
    "register_database",
    "register_table",
    "register_worker",
    "unregister_worker",
]
