"""FoundationDB error codes and the one predicate that says what is retryable.

The embedded engine raises :class:`FDBError` with FoundationDB's own codes so that code
above the engine handles both engines the same way.  The real bindings raise
``fdb.FDBError``; :func:`error_code` reads the code off either.
"""

from __future__ import annotations

# Codes used by the engines (names as in FoundationDB's error_definitions.h).
TRANSACTION_TOO_OLD = 1007
FUTURE_VERSION = 1009
NOT_COMMITTED = 1020
COMMIT_UNKNOWN_RESULT = 1021
TRANSACTION_CANCELLED = 1025
TRANSACTION_TIMED_OUT = 1031
TOO_MANY_WATCHES = 1032
WATCHES_DISABLED = 1034
ACCESSED_UNREADABLE = 1036
PROCESS_BEHIND = 1037
DATABASE_LOCKED = 1038
CLUSTER_VERSION_CHANGED = 1039
COMMIT_PROXY_MEMORY_LIMIT_EXCEEDED = 1042
BATCH_TRANSACTION_THROTTLED = 1051
GRV_PROXY_MEMORY_LIMIT_EXCEEDED = 1078
TAG_THROTTLED = 1213
PROXY_TAG_THROTTLED = 1223
TRANSACTION_THROTTLED_HOT_SHARD = 1235
OPERATION_CANCELLED = 1101
USED_DURING_COMMIT = 2017
TRANSACTION_INVALID_VERSION = 2020
NO_COMMIT_VERSION = 2021
KEY_OUTSIDE_LEGAL_RANGE = 2004
INVERTED_RANGE = 2005
INVALID_OPTION_VALUE = 2006
CLIENT_INVALID_OPERATION = 2000
TRANSACTION_TOO_LARGE = 2101
KEY_TOO_LARGE = 2102
VALUE_TOO_LARGE = 2103

DESCRIPTIONS = {
    TRANSACTION_TOO_OLD: "Transaction is too old to perform reads or be committed",
    FUTURE_VERSION: "Request for future version",
    NOT_COMMITTED: "Transaction not committed due to conflict with another transaction",
    COMMIT_UNKNOWN_RESULT: "Transaction may or may not have committed",
    TRANSACTION_CANCELLED: "Operation aborted because the transaction was cancelled",
    TRANSACTION_TIMED_OUT: "Operation aborted because the transaction timed out",
    TOO_MANY_WATCHES: "Too many watches currently set",
    WATCHES_DISABLED: "Watches cannot be set if read your writes is disabled",
    ACCESSED_UNREADABLE: "Read or wrote an unreadable key",
    PROCESS_BEHIND: "Storage process does not have recent mutations",
    DATABASE_LOCKED: "Database is locked",
    CLUSTER_VERSION_CHANGED: "The protocol version of the cluster has changed",
    COMMIT_PROXY_MEMORY_LIMIT_EXCEEDED: "CommitProxy commit memory limit exceeded",
    BATCH_TRANSACTION_THROTTLED: "Batch GRV request rate limit exceeded",
    GRV_PROXY_MEMORY_LIMIT_EXCEEDED: "GetReadVersion proxy memory limit exceeded",
    TAG_THROTTLED: "Transaction tag is being throttled",
    PROXY_TAG_THROTTLED: "Exceeded maximum proxy tag throttling duration",
    TRANSACTION_THROTTLED_HOT_SHARD: "Transaction throttled due to hot shard",
    OPERATION_CANCELLED: "Asynchronous operation cancelled",
    USED_DURING_COMMIT: "Operation issued while a commit was outstanding",
    TRANSACTION_INVALID_VERSION: "Transaction does not have a valid commit version",
    NO_COMMIT_VERSION: "Transaction is read-only and therefore does not have a commit version",
    KEY_OUTSIDE_LEGAL_RANGE: "Key outside legal range",
    INVERTED_RANGE: "Range begin key larger than end key",
    INVALID_OPTION_VALUE: "Option set with an invalid value",
    CLIENT_INVALID_OPERATION: "Invalid API call",
    TRANSACTION_TOO_LARGE: "Transaction exceeds byte limit",
    KEY_TOO_LARGE: "Key length exceeds limit",
    VALUE_TOO_LARGE: "Value length exceeds limit",
}

# FoundationDB's own error predicates (``fdb_error_predicate`` in bindings/c/fdb_c.cpp,
# release 7.3), which ``on_error`` follows: "maybe committed" and "retryable, not
# committed"; ``retryable`` is either.  Throttling and proxy-memory errors are transient
# on a busy cluster, so they are retried like conflicts.  A maybe-committed error is
# retried too: every write path above must therefore be idempotent.
MAYBE_COMMITTED = frozenset({COMMIT_UNKNOWN_RESULT, CLUSTER_VERSION_CHANGED})
RETRYABLE_NOT_COMMITTED = frozenset({
    NOT_COMMITTED, TRANSACTION_TOO_OLD, FUTURE_VERSION, DATABASE_LOCKED,
    GRV_PROXY_MEMORY_LIMIT_EXCEEDED, COMMIT_PROXY_MEMORY_LIMIT_EXCEEDED,
    TRANSACTION_THROTTLED_HOT_SHARD, BATCH_TRANSACTION_THROTTLED, PROCESS_BEHIND,
    TAG_THROTTLED, PROXY_TAG_THROTTLED,
})
RETRYABLE = MAYBE_COMMITTED | RETRYABLE_NOT_COMMITTED


class StoreOpenError(ValueError):
    """The store URL is malformed, or the store it names cannot be opened.

    The message names the URL, what is wrong and what to do about it.  (``jobs.open``
    raises ``jobs.StoreOpenError``, this class within the ``JobsError`` tree.)"""


class StoreFileError(Exception):
    """The embedded store's file cannot be used (missing directory, not a store, another
    format); ``jobs.open`` turns it into ``StoreOpenError`` naming the URL."""


class FDBError(Exception):
    """An error with a FoundationDB error code, raised by the embedded engine."""

    def __init__(self, code: int, detail: str | None = None):
        self.code = code
        self.description = DESCRIPTIONS.get(code, "Unknown error")
        self.detail = detail
        super().__init__(code)

    def __str__(self) -> str:
        text = f"{self.description} ({self.code})"
        return f"{text}: {self.detail}" if self.detail else text

    def __repr__(self) -> str:
        return f"FDBError({self.code})"


def error_code(exc: BaseException) -> int | None:
    """FoundationDB error code of ``exc`` from either engine, else None."""
    if isinstance(exc, FDBError):
        return exc.code
    cls = type(exc)
    if cls.__name__ == "FDBError" and cls.__module__ == "fdb.impl":
        return exc.code
    return None


def is_retryable(exc: BaseException) -> bool:
    """True when ``on_error`` would retry the transaction after ``exc``."""
    return error_code(exc) in RETRYABLE
