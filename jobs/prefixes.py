"""Every top-level key prefix the project writes, in one place.

All of the project's keys live under these tuple prefixes, in the embedded store and on a
FoundationDB cluster alike; an application may use any other key of the same database.
Each package takes its root from here (so this list cannot fall behind), and whoever must
clear what the project wrote (the test suite on a shared cluster, a tool) clears exactly
these: :func:`clear_all`.

**A root of its own**: ``$JOBS_KEY_PREFIX`` (``name`` or ``name/name/...``), read once at
import, puts every one of them under that tuple prefix, so that several applications,
environments or runs (the demos and benchmarks on a shared cluster, ``jobsctl/scratch.py``)
share one database without seeing each other.  Every process of one deployment must have
the same value: it is part of the keys.  Unset (the default): no root.
"""

from __future__ import annotations

import os

from .engine import tuple as fdb_tuple
from .engine import transactional

ROOT_ENV = "JOBS_KEY_PREFIX"


def parse_root(text: str) -> tuple[str, ...]:
    """The tuple prefix that ``$JOBS_KEY_PREFIX``'s ``text`` names (``"a/b"`` -> ``("a", "b")``).
    Raises ValueError, naming the variable, for an empty part or a non-printable character."""
    parts = tuple(text.split("/"))
    if not all(parts) or not text.isprintable():
        raise ValueError(f"${ROOT_ENV}={text!r}: expected names separated by '/' (e.g. 'staging' or "
                         "'staging/demo-1'), each non-empty and printable")
    return parts


def format_root(root: tuple[str, ...]) -> str:
    """``root`` as ``$JOBS_KEY_PREFIX`` writes it (the inverse of :func:`parse_root`)."""
    return "/".join(root)


ROOT = parse_root(os.environ[ROOT_ENV]) if os.environ.get(ROOT_ENV) else ()

JOBS = ROOT + ("jobs",)  # the job layer (jobs/keys.py)
OPERATIONS = ROOT + ("ops",)  # distributed operations (processors/operations/state.py)
SUBMISSIONS = ROOT + ("processors", "submissions")  # submit() nonces (processors/submit.py)
CATALOG = ROOT + ("catalog",)  # databases, tables, partitions, trash (pipeline/layout.py)
INGEST = ROOT + ("ingest",)  # super-transactions, chunk loads, workers (pipeline/ingest/layout.py)
CTAS = ROOT + ("ctas",)  # CREATE TABLE AS SELECT runs (pipeline/ctas_store.py)
INDEXES = ROOT + ("indexes",)  # index records (pipeline/index.py)

ALL = (JOBS, OPERATIONS, SUBMISSIONS, CATALOG, INGEST, CTAS, INDEXES)


@transactional
def clear_all(tr) -> None:
    """Remove every key the project wrote (and only those).  Irreversible: for tests and
    for tearing down a store."""
    for prefix in ALL:
        r = fdb_tuple.range(prefix)
        tr.clear_range(r.start, r.stop)


@transactional
def clear_root(tr, root: tuple[str, ...]) -> None:
    """Remove every key under ``root`` (from any process, whatever its own root): the
    scratch prefix of a run that ended (``jobsctl/scratch.py``)."""
    if not root:
        raise ValueError("clear_root needs a non-empty root: it would clear the whole database")
    r = fdb_tuple.range(root)
    tr.clear_range(r.start, r.stop)
