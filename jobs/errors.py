"""Exceptions of the job layer: one tree under :class:`JobsError`.

    JobsError
    +-- NotFound          the job does not exist
    +-- Halt              the worker no longer holds the job: stop, write nothing more
    +-- NoTypeTimeout     add() before set_type_timeout() for the type
    +-- JobDataError      job data is not a JSON object, or is too large
    +-- ForeignJobError   a Job object from another store
    +-- StoreError        the store's job keys cannot be used by this release
    |   +-- LayoutError   ... because a newer release wrote them
    +-- StoreOpenError    jobs.open(): a bad URL, or a store that cannot be opened
                          (also a ValueError, and the engine's StoreOpenError)

Bad arguments (empty or non-string ids, negative or NaN times, ...) are ``ValueError``
naming the argument (wrong types: ``checks.ArgumentTypeError``, a ValueError and a
TypeError), raised before anything is read or written.  Engine
errors that the retry loop cannot resolve pass through unchanged (``jobs.engine.error_code``
reads their FoundationDB code on either engine).

Each class's docstring is its default message.
"""

from __future__ import annotations

from .engine import StoreOpenError as EngineStoreOpenError


class JobsError(Exception):
    """Base of every error the job layer raises on purpose."""

    def __init__(self, message: str | None = None):
        super().__init__(message or self.__doc__)


class NotFound(JobsError):
    """The job does not exist."""


class Halt(JobsError):
    """The job is no longer held by this worker (removed, re-enqueued after its type
    timeout, or accepted by another worker): stop working on it; nothing was written."""


class NoTypeTimeout(JobsError):
    """The job type has no timeout: call set_type_timeout(db, type, seconds) first."""


class JobDataError(JobsError):
    """Job data must be a JSON object (a dict with string keys) that fits in one value."""


class ForeignJobError(JobsError):
    """The Job object was accepted from another store than the one given."""


class StoreError(JobsError):
    """The store holds job keys this release cannot read (corrupt or foreign data)."""


class LayoutError(StoreError):
    """The store's job layout was written by a newer release: upgrade this package."""


class StoreOpenError(JobsError, EngineStoreOpenError):
    """The store cannot be opened: a malformed URL, a missing directory or file, a file
    that is not a job store, a missing FoundationDB client library, an unreachable
    cluster.  The message names the URL and what to do."""

