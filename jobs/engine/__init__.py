"""Storage engines providing the subset of the FoundationDB Python API the job layer uses.

* ``embedded``: SQLite (WAL) with FoundationDB's transaction semantics, one file shared by
  the processes of one machine (``embedded.py``).
* ``cluster``: a real FoundationDB cluster through the official bindings (``cluster.py``).
* ``faults``: a wrapper around either that makes commits fail on purpose.

Code above this package is written against the bindings' API as it is, which both engines
serve: ``tr.get(k)`` is a ``Value`` future (read its bytes with :func:`value_of`; absent
keys are told by ``present()``); ``get_range`` is a lazy iterable of ``(key, value)`` rows
(no ``len``); ``get_versionstamp()`` and ``watch()`` return futures (see
``futures.wait_future`` for a timeout).  Versionstamps are packed with
:func:`pack_versionstamp` / :func:`pack_with_versionstamp`, which need no libfdb_c, and
read by :func:`versionstamp_at`.
"""

from .errors import FDBError, error_code, is_retryable
from .fdbapi import (
    KeySelector, KeyValue, Subspace, Versionstamp, pack_versionstamp, pack_with_versionstamp, strinc, tuple,
    versionstamp_at,
)
from .futures import value_of, wait_future
from .transactional import close, is_database, transactional

__all__ = [
    "FDBError",
    "KeySelector",
    "KeyValue",
    "Subspace",
    "Versionstamp",
    "close",
    "error_code",
    "is_database",
    "is_retryable",
    "pack_versionstamp",
    "pack_with_versionstamp",
    "strinc",
    "transactional",
    "tuple",
    "value_of",
    "versionstamp_at",
    "wait_future",
]
