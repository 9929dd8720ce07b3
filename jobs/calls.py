"""What every module of the job API shares: the transaction a call runs in, and NotFound
(naming the store: a job missing from the store of another working directory says so)."""

from __future__ import annotations

from . import keys
from .engine import describe_store, within
from .errors import NotFound


def within_store(tr, fn):
    """``fn(tr)`` inside ``tr`` if it is a transaction, else in a retried transaction of it;
    the store's layout is checked first either way."""

    def body(tr):
        keys.check_layout(tr)
        return fn(tr)

    return within(tr, body)


def not_found(tr, type: str, job_id: str) -> NotFound:
    """NotFound for the job, naming the store of ``tr`` (a transaction or database)."""
    return NotFound(f"job {type}/{job_id} not found in {describe_store(tr)}")
