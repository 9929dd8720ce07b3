"""A cluster's round trips, imitated over any engine (the fault-injecting wrapper's
``commit_latency`` and ``read_latency``, ``faults.py``).

A FoundationDB commit reaches the resolvers about half a round trip after it is sent and is
acknowledged a round trip (and a log fsync) after; a client that waits idles meanwhile, one
that does not can send more.  :func:`commit_later` applies a commit halfway through
``seconds`` and hands its outcome to the caller at the end: a transaction that read before
the commit applied conflicts with it, and others may see the commit before its writer learns
of it, as on a cluster.

A read is answered a round trip after it is issued (:class:`LateReads`): reads issued
together overlap, reads issued one after another add up, as on a cluster.

One timer thread per process serves every deadline, in order.  :func:`waited` sums the
seconds this process's threads waited on these round trips: what a change of the number
of round trips costs on a cluster.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time

from .futures import Future, copy_outcome
from .items import ReadItems


class _Timer:
    """Calls functions at their deadlines (``time.monotonic()``), from one daemon thread."""

    def __init__(self):
        self._cond = threading.Condition()
        self._heap: list = []  # (deadline, seq, fn)
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None

    def at(self, deadline: float, fn) -> None:
        with self._cond:
            heapq.heappush(self._heap, (deadline, next(self._seq), fn))
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="engine-latency", daemon=True)
                self._thread.start()
            self._cond.notify()

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._heap or self._heap[0][0] > time.monotonic():
                    self._cond.wait(self._heap[0][0] - time.monotonic() if self._heap else None)
                _deadline, _seq, fn = heapq.heappop(self._heap)
            fn()


_TIMER = _Timer()
_waited = [0.0]  # seconds waited on round trips in this process
_waited_lock = threading.Lock()


def _add_wait(seconds: float) -> None:
    with _waited_lock:
        _waited[0] += seconds


def waited() -> float:
    """Seconds this process's threads waited on imitated round trips so far: reads looked
    at before their answer was due (reads issued together overlap), and each commit's
    latency (its caller waits for it)."""
    return _waited[0]


def commit_later(commit, seconds: float) -> Future:
    """A future with the outcome of ``commit()`` (a function returning the commit future),
    called on the timer thread ``seconds / 2`` from now; ready ``seconds`` from now, or
    when that future is, whichever is later."""
    out = Future()
    start = time.monotonic()
    _add_wait(seconds)

    def apply() -> None:
        try:
            inner = commit()
        except BaseException as exc:  # noqa: BLE001 - handed on to the waiter
            out.set_error(exc)
            return
        _TIMER.at(start + seconds, lambda: inner.on_ready(lambda f: copy_outcome(f, out)))

    _TIMER.at(start + seconds / 2, apply)
    return out


class Late:
    """A read's future, answered ``seconds`` after it was issued (or when the wrapped one
    is, whichever is later); the rest of the wrapped future's interface."""

    __slots__ = ("_inner", "_at")

    def __init__(self, inner, seconds: float):
        self._inner, self._at = inner, time.monotonic() + seconds

    def _arrived(self):
        if (left := self._at - time.monotonic()) > 0:
            _add_wait(left)
            time.sleep(left)
        return self._inner

    def wait(self):
        return self._arrived().wait()

    def block_until_ready(self) -> None:
        self._arrived().block_until_ready()

    def is_ready(self) -> bool:
        return time.monotonic() >= self._at and self._inner.is_ready()

    def on_ready(self, callback) -> None:
        _TIMER.at(self._at, lambda: self._inner.on_ready(lambda _f: callback(self)))

    def cancel(self) -> None:
        self._inner.cancel()

    def __getattr__(self, name):  # present(), value, ...: once arrived
        return getattr(self._arrived(), name)


class LateRange(Late):
    """A range read, its first row a round trip after the read was issued."""

    __slots__ = ()

    def __iter__(self):
        return iter(self._arrived())

    def to_list(self) -> list:
        return list(self)


class LateReads(ReadItems):
    """The reads of a transaction, or of its ``snapshot`` (which shares the read version),
    each answered a round trip of ``seconds`` after it is issued.  The transaction's first
    read (or ``get_read_version``) also waits for its read version, a round trip of its own;
    later ones reuse it, as the bindings do."""

    def __init__(self, reads, seconds: float, snapshot=None, version: list | None = None):
        self._reads, self._seconds = reads, seconds
        self._version = version if version is not None else [None]  # when the read version arrives
        self.snapshot = snapshot if snapshot is not None else self

    @classmethod
    def of(cls, tr, seconds: float) -> "LateReads":
        """The reads of ``tr`` and of its snapshot, sharing one read version."""
        version: list = [None]
        return cls(tr, seconds, cls(tr.snapshot, seconds, version=version), version)

    def _answer(self) -> float:
        """Seconds from now until a read issued now is answered."""
        now = time.monotonic()
        if self._version[0] is None:
            self._version[0] = now + self._seconds
        return max(now, self._version[0]) + self._seconds - now

    def get(self, key) -> Late:
        return Late(self._reads.get(key), self._answer())

    def get_key(self, selector) -> Late:
        return Late(self._reads.get_key(selector), self._answer())

    def get_range(self, *args, **kwargs) -> LateRange:
        return LateRange(self._reads.get_range(*args, **kwargs), self._answer())

    def get_range_startswith(self, *args, **kwargs) -> LateRange:
        return LateRange(self._reads.get_range_startswith(*args, **kwargs), self._answer())

    def get_read_version(self) -> Late:
        self._answer()
        return Late(self._reads.get_read_version(), self._version[0] - time.monotonic())
