"""Waiting in tests: on conditions (generous deadlines, never a timing assertion) and on
processors run in the background."""

from __future__ import annotations

import contextlib
import threading
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


@contextlib.contextmanager
def running(processor, concurrency: int = 2):
    """Run ``processor`` on a thread for the block; stop it and check it ended."""
    errors = []

    def main():
        try:
            processor.run(concurrency=concurrency, signals=False)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    thread = threading.Thread(target=main, daemon=True)
    thread.start()
    try:
        assert wait_until(lambda: processor.ready.is_set() or not thread.is_alive()), "not started"
        assert not errors, errors
        yield thread
    finally:
        processor.stop()
        thread.join(DEADLINE)
        assert not thread.is_alive(), "the processor did not stop"
        assert not errors, errors
