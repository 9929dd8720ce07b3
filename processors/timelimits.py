"""Run-time limits of handlers (``@processor.handler(type, time_limit=SECONDS)``): one
thread per processor that calls, at each armed deadline, what was armed for it (the lane
then interrupts the handler: ``interrupt.py``), unless it was disarmed first.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time


class Deadline:
    """One armed deadline (``disarm()`` it once the handler returned)."""

    __slots__ = ("armed", "at", "fn")

    def __init__(self, at: float, fn):
        self.at, self.fn, self.armed = at, fn, True

    def disarm(self) -> None:
        self.armed = False


class Deadlines:
    """Calls ``fn()`` ``seconds`` after :meth:`arm` (monotonic), on its own thread (started
    at the first arm; ``close()`` ends it), unless disarmed meanwhile."""

    def __init__(self):
        self._cond = threading.Condition()
        self._heap: list = []
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None
        self._closed = False

    def arm(self, seconds: float, fn) -> Deadline:
        deadline = Deadline(time.monotonic() + seconds, fn)
        with self._cond:
            heapq.heappush(self._heap, (deadline.at, next(self._seq), deadline))
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._loop, name="time-limits", daemon=True)
                self._thread.start()
            self._cond.notify()
        return deadline

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._closed:
                        return
                    while self._heap and not self._heap[0][2].armed:
                        heapq.heappop(self._heap)  # (disarmed: the handler returned in time)
                    if self._heap and self._heap[0][0] <= time.monotonic():
                        due = heapq.heappop(self._heap)[2]
                        break
                    self._cond.wait(None if not self._heap else self._heap[0][0] - time.monotonic())
            if due.armed:
                due.fn()
