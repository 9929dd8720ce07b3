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

The layer above imports the engine from here, not from its modules: what it uses of the
engine is this package's names (the retry loop ``run``, ``within`` and ``LastAttempt``,
the error codes it tells apart, opening a store by URL); ``tests/test_layers.py`` holds
every package above to it.
"""

from .errors import (
    NOT_COMMITTED, OPERATION_CANCELLED, TRANSACTION_CANCELLED, TRANSACTION_TIMED_OUT, TRANSACTION_TOO_LARGE,
    TRANSACTION_TOO_OLD, FDBError, StoreOpenError, error_code, is_retryable,
)
from .fdbapi import (
    KeySelector, KeyValue, Subspace, Versionstamp, pack_versionstamp, pack_with_versionstamp, strinc, tuple,
    versionstamp_at,
)
from .futures import Future, value_of, wait_future
from .limits import TRANSACTION_SIZE_LIMIT
from .transactional import LastAttempt, close, is_database, run, run_noting, transactional, watch, watch_keys, within
from .urls import ENV_VAR, default_url, describe_store, open_database

__all__ = [
    "ENV_VAR",
    "FDBError",
    "Future",
    "KeySelector",
    "KeyValue",
    "LastAttempt",
    "NOT_COMMITTED",
    "OPERATION_CANCELLED",
    "StoreOpenError",
    "Subspace",
    "TRANSACTION_CANCELLED",
    "TRANSACTION_SIZE_LIMIT",
    "TRANSACTION_TIMED_OUT",
    "TRANSACTION_TOO_LARGE",
    "TRANSACTION_TOO_OLD",
    "Versionstamp",
    "close",
    "default_url",
    "describe_store",
    "error_code",
    "is_database",
    "is_retryable",
    "open_database",
    "pack_versionstamp",
    "pack_with_versionstamp",
    "run",
    "run_noting",
    "strinc",
    "transactional",
    "tuple",
    "value_of",
    "versionstamp_at",
    "wait_future",
    "watch",
    "watch_keys",
    "within",
]
