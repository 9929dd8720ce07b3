"""What the job layer keeps for one database handle: its wake-up hub (``wakeups.py``) and
its notifier (``notifier.py``), made at their first use, and the store layouts it has seen
at their version (``layouts.py``).  Held on the handle itself
(``dbstate.of(db)``), so that they live as long as the handle and no module keeps a table
of databases; a wrapper around a database (``jobs/engine/counting.py``) holds its own.
"""

from __future__ import annotations

import threading

_ATTR = "_jobs_dbstate"


class DbState:
    """One database handle's state in the job layer."""

    __slots__ = ("lock", "hub", "notifier", "layouts")

    def __init__(self):
        self.lock = threading.Lock()  # (making hub and notifier: one of each per handle)
        self.hub = None  # wakeups._Hub: the watches its transactions share
        self.notifier = None  # notifier.Notifier: its subscriptions
        self.layouts: set = set()  # layouts.Layout seen at their version: checked no more


def of(db) -> DbState | None:
    """``db``'s state; None for a handle that takes no attribute (nothing is kept for it)."""
    try:
        return db.__dict__.get(_ATTR) or db.__dict__.setdefault(_ATTR, DbState())  # (setdefault: one wins)
    except AttributeError:
        return None
