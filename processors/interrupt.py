"""Run sync handlers on a thread (a processor's *lane*) that can be interrupted when the
job of the handler it is running is lost.

Python cannot kill a thread; it can raise an exception in one at its next bytecode
(``PyThreadState_SetAsyncExc``).  That is safe only with care, so:

* an interrupt names the call it is for (``Interruptible.start`` numbers them) and is only
  raised while that call's handler function runs: a late one never hits the next job;
* the job-layer calls a handler makes (``ctx.update``) run shielded: an interrupt that
  arrives then is delivered when the call returns, never inside a store transaction;
* an interrupt that lands after the handler returned is cleared, or caught, before the
  call returns, and a thread in which an interrupt was raised runs no further handler
  (``interrupted``: its lane retires and a fresh one takes its place).

Code blocked in C (``time.sleep``, a socket read) sees the interrupt when it returns to
Python.  Handlers registered with ``interrupt=False`` are only told (``ctx.halted``,
``ctx.check()``, ``ctx.update`` raising ``Halt``).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import threading

from jobs import Halt


class Interrupted(Halt):
    """Raised inside a sync handler whose job was taken away or handed back."""


def _set_async_exc(thread_id: int, exc_type) -> None:
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread_id), None if exc_type is None else ctypes.py_object(exc_type)
    )


_current = threading.local()  # .lane: the Interruptible of this thread


def shielded():
    """Context manager: no interrupt inside (a no-op outside lanes)."""
    lane = getattr(_current, "lane", None)
    return contextlib.nullcontext() if lane is None else _Shield(lane)


class Interruptible:
    """The interrupt state of one thread that runs handlers one after another: ``stopper =
    start()`` (hand ``stopper`` to whoever may interrupt), then ``run(fn)``."""

    def __init__(self):
        self._lock = threading.Lock()
        self._ident: int | None = None
        self._call = 0  # number of the current (or last) call
        self._running = False  # the handler function is running (interrupts may be raised)
        self._shield = 0  # depth of shielded calls
        self._deferred = False  # the exception type of an interrupt that arrived while shielded
        self.interrupted = False  # an interrupt was raised in this thread: run nothing more

    def start(self) -> "functools.partial":
        """Begin a call on this thread: the function that interrupts it (and only it)."""
        _current.lane = self
        with self._lock:
            self._ident = threading.get_ident()
            self._call += 1
            self._running = True
            self._shield = 0
            self._deferred = False
            return functools.partial(self._interrupt, self._call)

    def run(self, fn) -> tuple[object, BaseException | None]:
        """Run ``fn()`` as the call begun by :meth:`start`: ``(result, error)``."""
        try:
            try:
                return fn(), None
            except BaseException as exc:  # noqa: BLE001 - handed to the processor as is
                return None, exc
            finally:
                with self._lock:
                    self._running = False
                    raised = self.interrupted  # (none is raised once not running)
                if raised:
                    _set_async_exc(self._ident, None)  # one raised too late is dropped
        except BaseException as exc:  # noqa: BLE001 - an interrupt delivered during the cleanup
            return None, exc

    def _interrupt(self, call: int, exc_type: type | None = None) -> None:
        """Raise ``exc_type`` (default Interrupted) in call ``call``'s handler, now or when
        its shielded job-layer call returns; nothing once that call ended."""
        exc_type = Interrupted if exc_type is None else exc_type
        with self._lock:
            if not self._running or self._call != call:
                return
            self.interrupted = True
            if self._shield:
                self._deferred = exc_type
            else:
                _set_async_exc(self._ident, exc_type)


class _Shield:
    def __init__(self, lane: Interruptible):
        self._lane = lane

    def __enter__(self):
        with self._lane._lock:
            self._lane._shield += 1

    def __exit__(self, *exc):
        lane = self._lane
        with lane._lock:
            lane._shield -= 1
            deliver = lane._deferred if lane._shield == 0 and lane._deferred and lane._running else None
            if deliver:
                lane._deferred = False
        if deliver is Interrupted:
            raise Interrupted("the job was taken away while the handler ran")
        if deliver:
            raise deliver()
        return False
