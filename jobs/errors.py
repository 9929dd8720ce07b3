"""Exceptions of the job layer: one tree under :class:`JobsError`.

    JobsError
    +-- NotFound          the job (or type) does not exist
    +-- Halt              the worker no longer holds the job: stop, write nothing more
    +-- NoTypeTimeout     add() before set_type_timeout() for the type
    +-- JobDataError      job data is not a JSON object, or is too large
    +-- ForeignJobError   a Job object from another store
    +-- LayoutError       the store was written by a newer release of this package

Bad arguments (empty ids, negative times, ...) are ``ValueError``/``TypeError`` naming
the argument.  Engine errors (``FDBError``) that the retry loop cannot resolve pass
through unchanged.
"""

from __future__ import annotations


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


class LayoutError(JobsError):
    """The store's job layout was written by a newer release: upgrade this package."""
