"""Waiting on conditions in tests: generous deadlines, never a timing assertion."""

from __future__ import annotations

import time

DEADLINE = 60.0


def wait_until(predicate, deadline: float = DEADLINE, interval: float = 0.02) -> bool:
    """Poll ``predicate`` until it is true or ``deadline`` seconds pass; its last value."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())
