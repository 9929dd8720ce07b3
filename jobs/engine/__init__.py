"""Storage engines providing the subset of the FoundationDB Python API the job layer uses.

* ``embedded``: SQLite (WAL) with FoundationDB's transaction semantics, one file shared by
  the processes of one machine (``embedded.py``).
* ``cluster``: a real FoundationDB cluster through the official bindings (``cluster.py``).
* ``faults``: a wrapper around either that makes commits fail on purpose.

Code above this package is written against the FDB API only: ``tr.get(k).wait()`` gives
``bytes | None``; ``get_range`` yields ``(key, value)`` rows; ``get_versionstamp()`` and
``watch()`` return futures (see ``futures.wait_future`` for a timeout).
"""

from .errors import FDBError, error_code, is_retryable
from .fdbapi import KeySelector, KeyValue, Subspace, Versionstamp, strinc, tuple
from .futures import value_of, wait_future
from .transactional import is_database, transactional

__all__ = [
    "FDBError",
    "KeySelector",
    "KeyValue",
    "Subspace",
    "Versionstamp",
    "error_code",
    "is_database",
    "is_retryable",
    "strinc",
    "transactional",
    "tuple",
    "value_of",
    "wait_future",
]
