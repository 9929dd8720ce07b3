"""Background-loop mechanics shared by the monitor's loops: an adaptive batch size, a
jitter helper (couch_jobs copied these per module and they drifted; here they live once),
the failures of one pass over many types, raised once the pass went through them all, and
the jobs passed over because their rows cannot be read."""

from __future__ import annotations

import logging
import random

from jobs.engine import TRANSACTION_TIMED_OUT, TRANSACTION_TOO_LARGE, TRANSACTION_TOO_OLD, error_code

log = logging.getLogger("monitor")

# Errors that mean "this batch was too big for one transaction" (10 MB, 5 s).
TOO_BIG = frozenset({TRANSACTION_TOO_LARGE, TRANSACTION_TOO_OLD, TRANSACTION_TIMED_OUT})


class AdaptiveBatch:
    """Batch size that grows while batches come back full and halves when a transaction
    was too large or too slow (AIMD), so that a million stale jobs neither blow FDB's
    limits nor take a million transactions."""

    def __init__(self, initial: int = 100, minimum: int = 1, maximum: int = 10_000, step: int = 100):
        self.size = initial
        self.minimum, self.maximum, self.step = minimum, maximum, step

    def full(self) -> None:
        self.size = min(self.maximum, self.size + self.step)

    def too_big(self, exc: BaseException) -> bool:
        """Halve after an error that a smaller batch avoids; False for any other error."""
        if error_code(exc) not in TOO_BIG:
            return False
        if self.size <= self.minimum:
            return False
        self.size = max(self.minimum, self.size // 2)
        return True


def jittered(seconds: float, fraction: float = 0.1) -> float:
    """``seconds`` plus up to ``fraction`` of it at random, so monitors started together
    don't act in lockstep."""
    return seconds * (1 + random.uniform(0, fraction))


class Failures:
    """What failed in a pass over types, each named: one type failing (a timeout, a record
    it cannot read) must not hold the other types up (their dead workers' jobs, their
    retention), yet the pass must still fail where it is seen (``raise_any``)."""

    def __init__(self, what: str):
        self.what, self.caught = what, []

    def catch(self, type: str | None, fn, *args):
        """``fn(*args)``; None if it raised (kept, noted with the type unless None)."""
        try:
            return fn(*args)
        except Exception as exc:  # noqa: BLE001 - raised again by raise_any
            if type is not None:
                exc.add_note(f"({self.what}: type {type!r})")
            self.caught.append(exc)
            return None

    def raise_any(self) -> None:
        """Raise what failed: the one exception, or an ExceptionGroup of them."""
        if len(self.caught) == 1:
            raise self.caught[0]
        if self.caught:
            raise ExceptionGroup(f"{self.what}: {len(self.caught)} failures", self.caught)


class Unreadable:
    """Jobs passed over because their rows cannot be read (``jobs``: ``(type, id)``), each
    logged once (ERROR): left as they are, since nothing can tell what such a row held."""

    def __init__(self):
        self.jobs: set[tuple[str, str]] = set()

    def say(self, found: list[tuple[str, str, str]], doing: str) -> None:
        """Log the jobs of ``found`` (``(type, id, error)``) not logged yet, as not ``doing``."""
        for type, job_id, error in found:
            if (type, job_id) not in self.jobs:
                self.jobs.add((type, job_id))
                log.error("%s: not %s, left as it is", error, doing)  # (the error says how to remove it)
