"""``subscribe`` / ``wait`` / ``unsubscribe``: follow a job's state changes.

The notifier lives in ``notifier.py`` (one watch per type per process, shared by all
subscriptions of a database); this module is the front the job API exports.
"""

from __future__ import annotations

from .. import checks
from .notifier import notifier_for
from .notifier import wait as notifier_wait

EVENT_STATES = ("pending", "running", "finished", "not_found")


def subscribe(db, type: str, job_id: str):
    """Subscribe to a job's changes: returns a Subscription whose ``state`` and ``data`` are
    the job's now.  Raises NotFound.  A finished job's subscription gets no events."""
    checks.name(type, "type")
    checks.name(job_id, "job id")
    return notifier_for(db).subscribe(type, job_id)


def wait(subs, timeout: float | None, state: str | None = None):
    """The next Event(type, id, state, data) of a subscription or list of subscriptions,
    only of ``state`` if given (others are dropped), or None after ``timeout`` seconds
    (None: no limit) or when the subscriptions can have no more events."""
    if state is not None and state not in EVENT_STATES:
        raise ValueError(f"state must be one of {', '.join(EVENT_STATES)}, not {state!r}")
    timeout = checks.optional_seconds(timeout, "timeout")
    return notifier_wait(subs, timeout, state)


def unsubscribe(sub) -> None:
    """Stop a subscription; events already queued for it are dropped."""
    sub._notifier.unsubscribe(sub)
