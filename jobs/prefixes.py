"""Every top-level key prefix the project writes, in one place.

All of the project's keys live under these tuple prefixes, in the embedded store and on a
FoundationDB cluster alike; an application may use any other key of the same database.
Each package takes its root from here (so this list cannot fall behind), and whoever must
clear what the project wrote (the test suite on a shared cluster, a tool) clears exactly
these: :func:`clear_all`.
"""

from __future__ import annotations

from .engine import tuple as fdb_tuple
from .engine.transactional import transactional

JOBS = ("jobs",)  # the job layer (jobs/keys.py)
OPERATIONS = ("ops",)  # distributed operations (processors/operations/state.py)
SUBMISSIONS = ("processors", "submissions")  # submit() nonces (processors/submit.py)
CATALOG = ("catalog",)  # databases, tables, partitions, trash (pipeline/layout.py)
INGEST = ("ingest",)  # super-transactions, chunk loads, workers (pipeline/ingest/layout.py)
CTAS = ("ctas",)  # CREATE TABLE AS SELECT runs (pipeline/ctas_store.py)
INDEXES = ("indexes",)  # index records (pipeline/index.py)

ALL = (JOBS, OPERATIONS, SUBMISSIONS, CATALOG, INGEST, CTAS, INDEXES)


@transactional
def clear_all(tr) -> None:
    """Remove every key the project wrote (and only those).  Irreversible: for tests and
    for tearing down a store."""
    for prefix in ALL:
        r = fdb_tuple.range(prefix)
        tr.clear_range(r.start, r.stop)
