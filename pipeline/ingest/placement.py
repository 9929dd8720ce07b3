"""Chunk placement: each (database, chunk) is assigned a worker once, in a store
transaction that reads the assignment first, so concurrent requests agree; new chunks go
where the same chunk number lives in another database, else to the least loaded live
worker."""

from __future__ import annotations

import hashlib

from ..errors import NoIngestWorkers
from . import layout, state
from .records import Placement, chunk_arg, tid_arg
from .workers import live_workers


def chunk_placement(tr, tid: int, chunk: int) -> Placement:
    """The worker chunk ``chunk`` of the transaction's database is (or now gets) placed on.
    The same chunk always gets the same answer, concurrent requests included.  Raises
    TransactionNotFound, TransactionStateError (not STARTED), InvalidChunk (outside the
    database's chunks), NoIngestWorkers (none registered, for a chunk not placed yet)."""
    tid = tid_arg(tid)
    chunk = chunk_arg(chunk)

    def body(tr):
        rec = state.started(tr, tid)
        database = rec["database"]
        _db, chunks = state.unpublished(tr, database)
        state.valid_chunk(chunk, chunks, f"database {database!r} (its chunks)")
        key = layout.placement_key(database, chunk)
        placed = layout.read(tr, key)  # a conflicting read: concurrent assigners serialise here
        if placed is not None:
            return Placement(database, chunk, placed.decode())
        names = [w.name for w in live_workers(tr.snapshot)]
        if not names:
            raise NoIngestWorkers(f"chunk {chunk} of {database!r} cannot be placed: no live ingest worker (none "
                                  "registered, or their registrations expired: start a processor with "
                                  "pipeline.ingest.attach())")
        worker = _choose(tr, database, chunk, names)
        tr.set(key, worker.encode())
        tr.set(layout.chunk_key(chunk, database), worker.encode())
        layout.count_placed(tr, database, worker)
        return Placement(database, chunk, worker)

    return layout.run(tr, body)


def _choose(tr, database: str, chunk: int, names: list[str]) -> str:
    """The worker holding this chunk number in another database (collocation), else the
    one with the fewest chunks of ``database`` (ties: by a hash, so they spread).  The
    counts are read with conflicts, so concurrent placements of new chunks of a database
    serialise (one retried) and spread evenly; the collocation index is a snapshot read."""
    for worker in layout.chunk_workers(tr.snapshot, chunk):
        if worker in names:
            return worker

    def load(name):
        count = layout.placed(tr, database, name)
        tie = hashlib.sha256(f"{database}\0{chunk}\0{name}".encode()).digest()
        return count, tie

    return min(names, key=load)
